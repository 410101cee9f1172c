"""Forecast-guided pruning: stop a run once its fitted curve says it cannot win (paper §1, the third principle:
"scalable methods can be identified early by estimating scaling parameters from initial training dynamics").

The rule, stated once and used by ``scalerl sweep --prune``, ``scalerl loo --prune``
(:mod:`scalerl.experiments.prune_sweep`) and the Optuna pruner (:mod:`scalerl.integrations.optuna`):

    Every live run is fitted (Eq. 1) on the points it has so far. Its *outlook* is an interval on where it can
    end: the interval on A when A is identified, otherwise the forecast at the full per-run budget with its
    interval. The *leader* is the run with the highest lower end. A run stops when the upper end of its outlook
    lies more than ``margin`` (the paper's ±0.02 on A, App. A.5) below the leader's lower end. A run without an
    outlook (too few points, an early transient still in progress, or a curve Eq. 1 does not describe) is never
    stopped: pruning acts only on forecasts that can be trusted. The one exception is a run that Eq. 1 does not
    describe *and* that rose and then stopped rising (its best mean of 3 consecutive evaluations, clearly above
    where it started, is not among its latest: a step that has flattened, a plateau that sags, a collapse): its
    outlook is its best so far, widened by the band's share of the evaluation noise. Such a run is taken not to
    climb back above its own earlier best; that is what a sweep most needs to stop (a learning rate that is too
    high: a fast rise, then a fall), and what a forecast cannot follow. A run that has not yet risen is still
    never stopped (it may be a late starter).

The fit a forecast may be acted on (:func:`trusted_fit`) and the forecast band at a compute (:func:`forecast_band`)
are also what ``scalerl train --stop-when`` decides on (:mod:`scalerl.experiments.stopping`).

numpy + scipy only (it fits curves; it never imports torch).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np
from scipy.special import ndtri

from scalerl.curves import FitError, FitResult, fit_curve
from scalerl.curves.compare import DEFAULT_MARGIN, MARGIN_TOL  # App. A.5: A within 0.02 is a tie
from scalerl.curves.fit import best_of_3, step_noise

# The forecast band used while A is not identified: at the same 95% as A's interval (App. A.5), so that both
# bases of an outlook say the same thing. The leader is the run with the *highest* lower end, so a sweep picks
# whichever band is most optimistic; with 80% bands, a leader's lower end at 0.3 of the testbed's budget lay 0.04
# above where it ended and five runs that tied it would have been stopped (docs/RESULTS.md).
DEFAULT_LEVEL = 0.95
MIN_POINTS = 6  # fewer evaluations than this: no outlook yet
RUNGS = (1 / 8, 1 / 4, 1 / 2, 1.0)  # shares of the per-run compute budget at which live runs are fitted and decided


@dataclass(frozen=True)
class Outlook:
    """Where a run can end, from its fit so far: ``value`` with the interval [``lo``, ``hi``]."""

    value: float
    lo: float
    hi: float
    basis: str  # "A": the identified interval on A; "forecast": the forecast at the budget and its interval;
    # "peak": a run Eq. 1 does not describe that stopped rising, its best so far (:func:`stalled_outlook`)
    compute: float  # the compute the run had when this was fitted

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Decision:
    """The rule's verdict on one run at one rung, with the numbers that decided it."""

    stop: bool
    reason: str
    outlook: Outlook | None
    leader: str | None
    leader_lo: float | None

    def to_json(self) -> dict[str, Any]:
        return {"stop": self.stop, "reason": self.reason, "leader": self.leader, "leader_lo": self.leader_lo,
                "outlook": self.outlook.to_json() if self.outlook else None}


def _finite(v: Any, default: float) -> float:
    return float(v) if v is not None and math.isfinite(float(v)) else default


def forecast_band(fit: FitResult, compute: float, level: float = DEFAULT_LEVEL) -> tuple[float, float] | None:
    """The ``level`` forecast interval (lo, hi) of a single evaluation at ``compute``
    (``FitResult.forecast_interval``), or None when the fit has no forecast interval."""
    interval = getattr(fit, "forecast_interval", None)
    if not callable(interval):
        return None
    lo_a, hi_a = interval(np.array([compute], dtype=float), level=level)
    return float(np.ravel(lo_a)[0]), float(np.ravel(hi_a)[0])


def outlook_of(fit: FitResult, budget: float, *, level: float = DEFAULT_LEVEL) -> Outlook | None:
    """The outlook of one fitted run at the full ``budget`` (same compute units as the fit), or None when the fit
    cannot be trusted to say where the run ends (see the module docstring)."""
    if not fit.reliable:  # Eq. 1 does not describe the window (a fall, a step, a bound): no outlook to act on
        return None
    ceiling = 1.0 if fit.bounded else math.inf
    compute = float(np.max(fit.x)) if len(fit.x) else 0.0
    if fit.identified and fit.A_ci is not None:
        lo, hi = fit.A_ci
        return Outlook(float(fit.A), _finite(lo, -math.inf), _finite(hi, ceiling), "A", compute)
    value = float(np.asarray(fit.forecast(budget)).ravel()[0])  # the centre of the band below
    band = forecast_band(fit, budget, level)
    if band is not None:
        lo, hi = band
    else:  # no forecast interval: the one-sided bound A's interval gives (the run cannot end above its ceiling)
        lo = -math.inf
        hi = _finite(fit.A_ci[1], ceiling) if fit.A_ci else ceiling
    if not (math.isfinite(value) and lo <= value <= hi):
        return None
    return Outlook(value, lo, hi, "forecast", compute)


def trusted_fit(x: Sequence[float], y: Sequence[float], *, bounded: bool = True,
                min_points: int = MIN_POINTS, fit_from: float | None = None) -> FitResult | None:
    """Eq. 1 fitted to one run's points so far (``fit_from``: the run's ``forecast.fit_from``, so that a rule acts on
    the fit the run logs as ``forecast/*``; None: the default window), or None while its forecast is not to be
    acted on: fewer than ``min_points`` evaluations, a failed fit, or a curve the forecast flags as not described by
    Eq. 1."""
    if len(x) < min_points:
        return None
    try:
        fit = fit_curve(x, y, bounded=bounded, fit_from=fit_from)
    except FitError:
        return None
    return fit if fit.reliable else None


STALL_RISE = 3.0  # a run has risen when its best so far is this many noise σ above its first evaluation


def stalled_outlook(x: Sequence[float], y: Sequence[float], *, level: float = DEFAULT_LEVEL,
                    min_points: int = MIN_POINTS) -> Outlook | None:
    """For a run that rose and then stopped rising (see the module docstring), its best so far as the most it can
    reach: the best mean of 3 consecutive evaluations plus the band's quantile of one evaluation's noise (σ from
    the median successive difference: :func:`scalerl.curves.fit.step_noise`); the last evaluation is its
    value. None when it has too few evaluations, has not risen, or its best is among its latest (still rising)."""
    y = np.asarray(y, dtype=float)
    if y.size < min_points:
        return None
    sigma = step_noise(y)
    top, peak = best_of_3(y)  # the best window is y[top : top + 3]
    if top + 3 >= y.size or peak - float(y[0]) <= STALL_RISE * sigma:
        return None
    z = float(ndtri(0.5 + level / 2))
    last = float(y[-1])
    return Outlook(last, last - z * sigma, peak + z * sigma, "peak", float(np.max(np.asarray(x, dtype=float))))


def fit_outlook(x: Sequence[float], y: Sequence[float], budget: float, *, level: float = DEFAULT_LEVEL,
                bounded: bool = True, min_points: int = MIN_POINTS) -> Outlook | None:
    """Fit Eq. 1 to one run's points so far and return its outlook; for a run Eq. 1 does not describe that rose
    and stopped rising, its best so far (:func:`stalled_outlook`); None while no trustworthy one exists."""
    fit = trusted_fit(x, y, bounded=bounded, min_points=min_points)
    if fit is not None:
        return outlook_of(fit, budget, level=level)
    return stalled_outlook(x, y, level=level, min_points=min_points)


def decide(outlooks: Mapping[str, Outlook | None], margin: float = DEFAULT_MARGIN) -> dict[str, Decision]:
    """The rule (module docstring) applied to every run: ``{run: Decision}``. Pure: the same outlooks always give
    the same decisions, so a pruned sweep rerun after a kill decides as it did."""
    live = {name: o for name, o in outlooks.items() if o is not None}
    if not live:
        return {name: Decision(False, "no run has a trustworthy forecast yet", None, None, None) for name in outlooks}
    leader = max(sorted(live), key=lambda name: (live[name].lo, live[name].value))
    best_lo = live[leader].lo
    out: dict[str, Decision] = {}
    for name, o in outlooks.items():
        if o is None:
            out[name] = Decision(False, "no trustworthy forecast yet: kept running", None, leader, best_lo)
        elif name == leader:
            out[name] = Decision(False, "the leader", o, leader, best_lo)
        elif best_lo - o.hi > margin + MARGIN_TOL:  # exactly the margin below (0.20, 0.18 at 0.02) is within it
            out[name] = Decision(True, f"cannot win: its {_basis(o)} is at most {o.hi:.3f}, more than {margin:g} "
                                       f"below the leader {leader}'s lower end {best_lo:.3f}", o, leader, best_lo)
        else:
            out[name] = Decision(False, f"may still win: its {_basis(o)} reaches {o.hi:.3f}, within {margin:g} of "
                                        f"the leader {leader}'s lower end {best_lo:.3f}", o, leader, best_lo)
    return out


def _basis(o: Outlook) -> str:
    named = {"A": "interval on A", "peak": "best so far (it stopped rising, and Eq. 1 does not describe it)"}
    return named.get(o.basis, "forecast at the budget")
