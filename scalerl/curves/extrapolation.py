"""The paper's extrapolation check (§4, §5): fit Eq. 1 on the first half of a run's compute and score the
fitted curve on the evaluations of the second half (the paper fits 8k GPU-h and extrapolates to 16k).

It answers the question a user asks of a forecast: had I stopped at half the budget, how far off would the
prediction of the end have been, and did the interval on A from the half cover the A of the whole run?
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from scalerl.curves.fit import FitResult, fit_curve
from scalerl.curves.series import FitError

HALF = 0.5  # the fraction of the compute fitted (8k of 16k GPU-h in §4)


@dataclass(frozen=True)
class HeldOut:
    """A fit on compute ≤ ``fit_until`` scored on the ``n`` evaluations after it."""

    fit_until: float
    n: int
    mean_abs_err: float
    max_abs_err: float
    A: float
    end_pred: float  # the half fit's forecast at the last evaluation ...
    end_true: float  # ... and what was measured there
    A_ci: tuple[float | None, float | None] | None = None  # the half fit's interval on A
    identified: bool = False  # whether the half fit identified A
    A_ci_open: tuple[bool, bool] = (False, False)  # ends of that interval the profile never reached

    def covers(self, A: float) -> bool | None:
        """Whether the half fit's interval on A holds ``A``; None when the half fit has no interval or has not
        identified A (its interval then runs to the search's bound, and covering says nothing)."""
        if self.A_ci is None or None in self.A_ci or not self.identified:
            return None
        lo, hi = self.A_ci
        return bool(lo <= A <= hi)

    def covers_fit(self, full: FitResult) -> bool | None:
        """:meth:`covers` for the full run's fit; None too when that fit has not identified A (its A is then
        where the search stopped, and covering it says nothing)."""
        return self.covers(full.A) if full.identified else None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["A_ci"] = list(self.A_ci) if self.A_ci is not None else None
        out["A_ci_open"] = list(self.A_ci_open)
        return out


def half_budget_check(
    x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray, source: str = "data",
    fraction: float = HALF, ci: bool = True, **fit_kwargs: Any,
) -> tuple[HeldOut | None, str | None]:
    """(the check, None) or (None, why it cannot be made). ``fit_kwargs`` go to :func:`fit_curve`
    (e.g. ``fit_from``)."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    try:
        half = fit_curve(xa, ya, fit_until_fraction=fraction, ci=ci, source=source, **fit_kwargs)
    except FitError as exc:
        return None, f"first half not fittable: {exc}"
    if half.heldout is None:
        return None, "no evaluation after the first half"
    return HeldOut(
        fit_until=half.fit_window[1], n=int(half.heldout["n"]), mean_abs_err=half.heldout["mean_abs_err"],
        max_abs_err=half.heldout["max_abs_err"], A=half.A, end_pred=float(half.forecast(xa[-1])),
        end_true=float(ya[-1]), A_ci=half.A_ci, identified=half.identified, A_ci_open=tuple(half.A_ci_open),
    ), None
