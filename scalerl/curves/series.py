"""A measured compute–reward series and the checks it must pass before Eq. 1 is fitted to it (§2.1).

Data problems raise :class:`FitError`, a :class:`~scalerl.errors.UserError`: the CLI prints it as one line
and exits with code 2, and a caller that fits while training (the live forecast) catches it and carries on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scalerl.curves.sigmoid import Array
from scalerl.errors import UserError


class FitError(UserError):
    """The data cannot be fitted (too few points, constant reward, compute going backwards, values out of range).

    Catch this (not a generic Exception) around :func:`scalerl.curves.fit_curve` in code that fits while the
    data is still arriving."""


# the largest reward magnitude fitted: Eq. 1's least squares square the residuals, and float64 overflows (the fit
# fails with no finite candidate) long before a reward could mean anything; rewards are pass rates or ±1
MAX_ABS_REWARD = 1e12


# what the bounds error adds when every reward lies in [0, 100] (an accuracy logged in percent)
PERCENT_HINT = "; values in [0, 100] read as percentages with --y-scale 0.01 (or divide them by 100)"


def looks_like_percent(y: np.ndarray) -> bool:
    """Whether rewards look like percentages: all in [0, 100] and some above 2 (1.05 is a reward with a bonus, 52.4
    a percentage)."""
    return bool(y.size) and float(np.min(y)) >= 0 and 2 < float(np.max(y)) <= 100


class TooFewPoints(FitError):
    """Fewer points in the fit window than Eq. 1 has free parameters."""


@dataclass(frozen=True)
class Series:
    """Points of one source in training order. ``rows`` are 1-based row or line numbers in the source, for
    messages; ``notes`` are warnings the reader produced (dropped rows and why)."""

    source: str
    x_name: str
    y_name: str
    x: Array
    y: Array
    rows: Array
    notes: tuple[str, ...] = field(default=())


def describe_rows(rows: Array | list[int], limit: int = 5) -> str:
    rows = [int(r) for r in rows]
    shown = ", ".join(map(str, rows[:limit]))
    return shown + (f" and {len(rows) - limit} more" if len(rows) > limit else "")


def check(x: Array, y: Array, rows: Array, *, bounded: bool, source: str = "the data") -> None:
    """Raise :class:`FitError` naming the first problem (and its row) that makes fitting meaningless."""
    if x.size == 0:
        raise FitError(f"no points in {source}")
    bad = np.flatnonzero(~np.isfinite(x) | ~np.isfinite(y))
    if bad.size:
        raise FitError(f"non-finite values in {source} at row(s) {describe_rows(rows[bad])}; drop or fix them")
    neg = np.flatnonzero(x < 0)
    if neg.size:
        i = neg[0]
        raise FitError(f"negative compute {x[i]:g} in {source} at row {rows[i]}; compute must be ≥ 0")
    back = np.flatnonzero(np.diff(x) < 0)
    if back.size:
        i = back[0] + 1
        raise FitError(
            f"compute is not increasing in {source}: row {rows[i]} has {x[i]:g} after {x[i - 1]:g}; "
            "points must be in training order (sort them, or choose the right --x column)"
        )
    if np.unique(x).size < 2:
        raise FitError(f"compute does not change in {source} (always {x[0]:g}); choose the right --x column")
    huge = np.flatnonzero(np.abs(y) > MAX_ABS_REWARD)
    if huge.size:
        i = huge[0]
        raise FitError(f"reward {y[i]:g} at row {rows[i]} of {source} is beyond ±{MAX_ABS_REWARD:g}; the fit works "
                       "in float64, rescale the reward (or choose the right --y column)")
    if bounded:
        out = np.flatnonzero((y < 0) | (y > 1))
        if out.size:
            i = out[0]
            percent = looks_like_percent(y)
            raise FitError(
                f"reward {y[i]:g} at row {rows[i]} of {source} is outside [0, 1] while bounds are on; "
                f"pass --no-bounds (bounded=False) for rewards such as ±1{PERCENT_HINT if percent else ''}"
            )
