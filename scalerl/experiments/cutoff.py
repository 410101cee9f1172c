"""One absolute fit cutoff for every run of one comparison (§2.1, App. A.7).

The paper leaves out the early points of its fits at one compute for all the runs it compares (the first ~1.5k of
16k GPU-h). A cutoff taken as a fraction of each run's own compute (``curves.default_fit_from``) cuts a run that
spent twice the compute at twice the compute, so the runs are fitted on different windows for a reason that has
nothing to do with their recipes. Here the cutoff is the paper's share of the window all the runs share (up to
the end of the shortest one), the smallest of the runs' cutoffs on that window (so each keeps ``MIN_KEPT`` points
there where it can): one absolute value, used for every run of a ``compare``, a report or a replicate.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np

from scalerl import curves
from scalerl.curves.fit import default_fit_from


def shared_fit_from(
    xs: Sequence[Sequence[float]], fit_until: float | None = None, fit_until_fraction: float | None = None
) -> float:
    """The early-point cutoff shared by runs with computes ``xs`` (each run's window ending at ``fit_until``, or
    at ``fit_until_fraction`` of its largest compute, or at its end)."""
    arrays = [np.asarray(x, dtype=float) for x in xs if len(x)]
    if not arrays:
        return 0.0
    ends = [min(float(x.max()) * (fit_until_fraction or 1.0), fit_until if fit_until is not None else math.inf)
            for x in arrays]
    common = min(ends)
    return min(default_fit_from(x, common) for x in arrays)


def shared_fit_from_paths(
    paths: Sequence[Path], x: str = curves.DEFAULT_X, y: str = curves.DEFAULT_Y,
    fit_until: float | None = None, fit_until_fraction: float | None = None,
) -> float:
    """:func:`shared_fit_from` of the runs at ``paths`` (anything ``curves.load_series`` reads)."""
    return shared_fit_from([curves.load_series(p, x, y).x for p in paths], fit_until, fit_until_fraction)
