"""The predictive framework of the paper (§1, §2): fit the sigmoid of Eq. 1 to reward against training compute,
put an honest interval on its asymptote, extrapolate, and compare recipes by A then B.

numpy + scipy (+ matplotlib for figures, imported only when drawing); never torch.

    >>> from scalerl import curves
    >>> fit = curves.fit_curve(x, y, fit_from=1500)           # raises curves.FitError on unfittable data
    >>> fit.A, fit.A_ci, fit.B, fit.Cmid, fit.identified, fit.predict(16000)
    >>> curves.plot_fits([fit], "curve.png")
    >>> series = curves.load_series("runs/a", x="compute/device_hours", y="val/pass_rate")
    >>> ranking = curves.compare_fits([curves.fit_series(s) for s in all_series], margin=0.02)
"""

from scalerl.curves.compare import Comparison, compare_fits, refit_at
from scalerl.curves.fit import FIT_METHODS, FitResult, fit_curve, fit_series, format_A, format_interval
from scalerl.curves.plot import plot_fits, plot_linearised
from scalerl.curves.readers import DEFAULT_X, DEFAULT_Y, load_runs, load_series
from scalerl.curves.series import FitError, Series, TooFewPoints
from scalerl.curves.sigmoid import linearised, power_law, sigmoid, sigmoid_inverse

__all__ = [
    "Comparison",
    "DEFAULT_X",
    "DEFAULT_Y",
    "FIT_METHODS",
    "FitError",
    "FitResult",
    "Series",
    "TooFewPoints",
    "compare_fits",
    "fit_curve",
    "fit_series",
    "format_A",
    "format_interval",
    "linearised",
    "load_runs",
    "load_series",
    "plot_fits",
    "plot_linearised",
    "power_law",
    "refit_at",
    "sigmoid",
    "sigmoid_inverse",
]
