"""``scalerl train --stop-when``: stop one run before its budget when the forecast says more compute does not pay
(paper §1: "scalable methods can be identified early by estimating scaling parameters from initial training
dynamics"; NeMo-RL#3404 asks for a stopping rule instead of a step count nobody can know in advance).

An expression is one or more conditions joined by ``,`` (or ``or``, or given as repeated ``--stop-when``); the
run stops after the first evaluation at which any holds:

* ``gain<G``: the forecast says the rest of the budget buys less than ``G``: the forecast at the full budget
  minus the forecast now (``FitResult.forecast``: the fitted level now plus the share of Eq. 1's further gain the
  run's own history supports; 0 for a forecast that carries the last value forward, because nothing beat that
  ruler on the run's past);
* ``reward>=T`` (or ``reward>T``): the target is reached: the latest validation pass rate is at least ``T``;
* ``reach<T``: the target is out of reach: the upper end of the forecast interval at the full budget
  (``pruning.forecast_band``, at ``pruning.DEFAULT_LEVEL``: 95%) is below ``T``.

``gain`` and ``reach`` act only on a forecast that can be trusted, the same one pruning acts on
(:func:`scalerl.experiments.pruning.trusted_fit`: at least 6 evaluations, a fit that converged, a curve Eq. 1
describes); until then they never stop the run. The full budget is the run's compute at its end
(:func:`run_budget`): its ``max_device_hours``, or its compute so far scaled to ``steps`` or ``max_minutes``,
whichever ends it first.

A condition that cannot be read is a UserError naming it (one line, exit 2).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from scalerl.config import RunConfig
from scalerl.errors import UserError
from scalerl.experiments.pruning import DEFAULT_LEVEL, MIN_POINTS, forecast_band, trusted_fit

# name -> (the comparisons it takes, what it means), in the order they are shown
CONDITIONS = {
    "gain": (("<",), "the forecast gain over the rest of the budget"),
    "reward": ((">=", ">"), "the latest validation pass rate"),
    "reach": (("<",), f"the upper end of the {DEFAULT_LEVEL:.0%} forecast interval at the full budget"),
}
EXAMPLE = "e.g. 'gain<0.005', 'reward>=0.8', 'reach<0.8', or several: 'gain<0.005,reward>=0.8'"
_CONDITION = re.compile(r"^\s*([A-Za-z_-]+)\s*(<=|>=|<|>|==|=)\s*(\S+)\s*$")


@dataclass(frozen=True)
class Condition:
    name: str  # gain | reward | reach
    op: str
    threshold: float

    def holds(self, value: float) -> bool:
        return {"<": value < self.threshold, ">=": value >= self.threshold, ">": value > self.threshold}[self.op]

    def __str__(self) -> str:
        return f"{self.name}{self.op}{self.threshold:g}"


def parse(expressions: str | Sequence[str]) -> list[Condition]:
    """The conditions of one or more ``--stop-when`` expressions; a UserError (one line) names a bad one."""
    items = [expressions] if isinstance(expressions, str) else list(expressions)
    parts = [p for e in items for p in re.split(r",|\bor\b", e)]
    if not any(p.strip() for p in parts):
        raise UserError(f"--stop-when: no condition given; {EXAMPLE}")
    out = []
    for part in parts:
        if not part.strip():
            raise UserError(f"--stop-when {'/'.join(items)!r}: an empty condition; {EXAMPLE}")
        out.append(_condition(part.strip()))
    return out


def _condition(text: str) -> Condition:
    m = _CONDITION.match(text)
    if m is None:
        raise UserError(f"--stop-when {text!r}: not NAME OP NUMBER; {EXAMPLE}")
    name, op, number = m.groups()
    if name not in CONDITIONS:
        raise UserError(f"--stop-when {text!r}: unknown condition {name!r}; choose from {', '.join(CONDITIONS)}; {EXAMPLE}")
    ops, meaning = CONDITIONS[name]
    if op not in ops:
        raise UserError(f"--stop-when {text!r}: {name} ({meaning}) takes {' or '.join(ops)}, not {op}; {EXAMPLE}")
    try:
        threshold = float(number)
    except ValueError:
        raise UserError(f"--stop-when {text!r}: {number!r} is not a number; {EXAMPLE}") from None
    if not math.isfinite(threshold):
        raise UserError(f"--stop-when {text!r}: the threshold must be a finite number")
    if name == "gain" and threshold <= 0:
        raise UserError(f"--stop-when {text!r}: a gain threshold must be above 0 (the smallest gain worth the compute)")
    if name in ("reward", "reach") and not 0 <= threshold <= 1:
        raise UserError(f"--stop-when {text!r}: {name} is a pass rate; give a target between 0 and 1")
    return Condition(name, op, threshold)


def run_budget(cfg: RunConfig, step: int, compute: float, wall_s: float) -> float | None:
    """The compute (device-hours) the run will have at its end, whichever of its budgets ends it first:
    ``max_device_hours``, ``steps`` (the compute so far scaled to it) or ``max_minutes`` (scaled to that wall clock);
    None before any step without ``max_device_hours``."""
    ends = [float(cfg.max_device_hours)] if cfg.max_device_hours is not None else []
    if step > 0 and compute > 0:
        ends.append(compute * cfg.steps / step)
        if cfg.max_minutes is not None and wall_s > 0:
            ends.append(compute * cfg.max_minutes * 60 / wall_s)
    return max(min(ends), compute) if ends else None


@dataclass
class Verdict:
    """One evaluation's reading of the conditions (the runner's ``StopVerdict``)."""

    stop: bool
    reason: str
    text: str  # how far the run is from each condition, for the display
    metrics: dict[str, float] = field(default_factory=dict)  # logged with the evaluation: stop/<name>


def check(conditions: Sequence[Condition], x: Sequence[float], y: Sequence[float], budget: float | None,
          *, bounded: bool = True, level: float = DEFAULT_LEVEL, min_points: int = MIN_POINTS,
          fit_from: float | None = None) -> Verdict:
    """Read ``conditions`` on a run's evaluations so far (``x`` compute, ``y`` pass rate) and its full ``budget``;
    ``fit_from``: the run's ``forecast.fit_from`` (the window of the fit it logs)."""
    values: dict[str, float | None] = {"reward": float(y[-1]) if len(y) else None, "gain": None, "reach": None}
    why_none = f"no trustworthy forecast yet ({len(x)}/{min_points} evaluations, or Eq. 1 does not describe the run)"
    needs_fit = any(c.name in ("gain", "reach") for c in conditions)
    fit = trusted_fit(x, y, bounded=bounded, min_points=min_points, fit_from=fit_from) if needs_fit and budget else None
    if fit is not None:
        now = float(max(x))
        values["gain"] = float(fit.forecast([max(budget, now)])[0] - fit.forecast([now])[0])
        band = forecast_band(fit, max(budget, now), level)
        values["reach"] = band[1] if band is not None else None
    shown, met = [], []
    for c in conditions:
        v = values[c.name]
        if v is None:
            shown.append(f"{c.name}: {why_none if c.name != 'reward' else 'no evaluation yet'}")
            continue
        if c.holds(v):
            met.append(f"{c} holds: {CONDITIONS[c.name][1]} is {v:.4f}")
        shown.append(f"{c.name} {v:.3f} (stops at {c.op}{c.threshold:g}, {_distance(c, v)})")
    metrics = {f"stop/{k}": v for k, v in values.items() if v is not None and any(c.name == k for c in conditions)}
    return Verdict(bool(met), "; ".join(met), "; ".join(shown), metrics)


def _distance(c: Condition, v: float) -> str:
    gap = abs(v - c.threshold)
    return "met" if c.holds(v) else f"{gap:.3f} away"


@dataclass(frozen=True)
class StopWhen:
    """The runner's stop rule for ``--stop-when``: after each evaluation, :func:`check` on the live forecaster's
    points and the run's full budget."""

    conditions: tuple[Condition, ...]

    def __call__(self, cfg: RunConfig, state: Any) -> Verdict:
        f = state.forecaster
        budget = run_budget(cfg, state.step, state.meter.device_hours, state.wall())
        return check(self.conditions, f.x, f.y, budget, bounded=f.bounded, fit_from=cfg.forecast.fit_from)
