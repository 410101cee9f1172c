"""The predictive framework (§1–§2) for notebooks: fit, forecast, compare and plot, from arrays or from the files
a run left behind. These are the objects ``scalerl fit`` and ``scalerl compare`` use (:mod:`scalerl.curves`); this
module only lets one call take either kind of input. docs/api.md walks through a whole session.

    >>> from scalerl import api
    >>> f = api.fit(x=compute, y=reward)                                    # arrays, training order
    >>> g = api.fit("out/trainer_state.json", x="compute/flops", y="eval_reward")   # any file a reader takes
    >>> f.A, f.A_ci, f.B, f.Cmid, f.identified
    >>> api.forecast(f, [2 * compute[-1]]), f.compute_to_reach(0.6)
    >>> api.compare([f, g]).ranked[0].fit.source
    >>> api.plot([f, g], "curves.png")

numpy + scipy (+ matplotlib when plotting); never torch.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from scalerl.curves import (
    DEFAULT_X,
    DEFAULT_Y,
    Comparison,
    FitError,
    FitResult,
    Series,
    compare_fits,
    fit_curve,
    fit_series,
    load_runs,
    load_series,
    plot_fits,
)
from scalerl.curves.sigmoid import Array

__all__ = ["Comparison", "FitError", "FitResult", "Series", "compare", "fit", "forecast", "load", "load_all", "plot"]

Source = str | Path | Series | FitResult


def load(path: str | Path, x: str = DEFAULT_X, y: str = DEFAULT_Y) -> Series:
    """The (compute, reward) points of ``path``: a run directory, metrics.jsonl, CSV (W&B exports too), TensorBoard
    events, an HF/TRL ``trainer_state.json`` or verl's file-logger ``.jsonl``; ``x``/``y`` name the columns."""
    return load_series(path, x, y)


def load_all(path: str | Path, x: str = DEFAULT_X, y: str = DEFAULT_Y) -> list[Series]:
    """Every run in ``path``: :func:`load`'s one series, or one per run of a file or folder that holds several (a W&B
    chart export of a sweep, columns ``"<run> - <y>"``; a ``scalerl sweep`` output; a TensorBoard logdir), what
    ``scalerl fit`` and ``scalerl compare`` read from it (:func:`scalerl.curves.load_runs`):
    ``api.compare(api.load_all("sweep.csv", x="Step", y="val/acc"))`` ranks the sweep's runs."""
    return load_runs(path, x, y)


def fit(source: Source | None = None, *, x: Any = None, y: Any = None, **options: Any) -> FitResult:
    """Fit Eq. 1 and return the :class:`FitResult` the CLI prints.

    ``fit(x=compute, y=reward)`` fits arrays; ``fit(path, x="col", y="col")`` reads ``path`` first (column names
    default to ``compute/device_hours`` and ``val/pass_rate``); ``fit(series)`` fits a loaded :class:`Series`.
    ``options`` are :func:`scalerl.curves.fit_curve`'s: ``fit_from``, ``fit_until``, ``fit_until_fraction``,
    ``method`` ("vp" or "paper"), ``bounded`` (False for rewards outside [0, 1]), ``level``, ``predict_at``,
    ``target``. Raises :class:`FitError` (one line) when the data cannot be fitted. Each of the fit's warnings
    (``FitResult.warnings``: an A not identified yet, Eq. 1 not describing the data, ...), which ``scalerl fit``
    prints, is raised as a Python ``UserWarning``."""
    if source is None:
        if x is None or y is None:
            raise TypeError("fit() needs a source (path or Series) or both x= and y= arrays")
        return _warn(fit_curve(x, y, **options))
    if isinstance(source, FitResult):
        return source
    series = source if isinstance(source, Series) else load(source, DEFAULT_X if x is None else x,
                                                            DEFAULT_Y if y is None else y)
    return _warn(fit_series(series, **options))


def _warn(result: FitResult) -> FitResult:
    """Raise the fit's warnings as the CLI prints them (an unidentified A read as an estimate is the easy mistake)."""
    for message in result.warnings:
        warnings.warn(message, UserWarning, stacklevel=3)
    return result


def forecast(fit_result: FitResult, at: float | Sequence[float]) -> Array:
    """The reward scalerl forecasts at the computes ``at`` (``FitResult.forecast``: the current level plus Eq. 1's
    further gain when the run's own history supports it; the numbers ``scalerl fit`` prints). Its band:
    ``fit_result.forecast_interval(at, level=0.8)``; Eq. 1 itself: ``fit_result.predict(at)``."""
    return np.asarray(fit_result.forecast(np.asarray(at, dtype=float)))


def compare(sources: Sequence[Source], margin: float = 0.02, *, x: Any = None, y: Any = None,
            **options: Any) -> Comparison:
    """Rank runs by the paper's rule (App. A.5, A.8): A first; A within ``margin`` is a tie, broken by B at the tie's mean A.
    ``sources`` are fits or anything :func:`fit` reads (with the same ``x``/``y`` columns and ``options``).

    As ``scalerl compare`` does, the runs read here share one early-point cutoff unless ``fit_from`` is given
    (``scalerl.experiments.cutoff``: the early regime is cut at one compute for all, not each run's own), and the
    same path given twice (or a folder and a run in it) is refused. Each of ``Comparison.warnings`` (e.g. a run
    ranked by an A its data has not identified) is also raised as a Python ``UserWarning``, so a notebook shows it
    as plainly as the CLI prints it."""
    from scalerl.curves.readers import check_distinct
    from scalerl.experiments.cutoff import shared_fit_from

    paths = [str(s) for s in sources if not isinstance(s, (Series, FitResult))]
    check_distinct(paths)  # the paths given, read with one x and y (series and fits may be of one file's columns)
    read = [s if isinstance(s, (Series, FitResult)) else load(s, DEFAULT_X if x is None else x,
                                                               DEFAULT_Y if y is None else y) for s in sources]
    series = [s for s in read if isinstance(s, Series)]
    if series and "fit_from" not in options:
        options["fit_from"] = shared_fit_from([s.x for s in series], options.get("fit_until"),
                                              options.get("fit_until_fraction"))
    result = compare_fits([fit(s, **options) for s in read], margin=margin)
    for message in result.warnings:
        warnings.warn(message, UserWarning, stacklevel=2)
    return result


def plot(fits: Sequence[FitResult], path: str | Path, **options: Any) -> Path:
    """Draw the fits (data, fitted curve, asymptote) into ``path`` (.png, .svg, .pdf); returns the path."""
    plot_fits(list(fits), path, **options)
    return Path(path)
