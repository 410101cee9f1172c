"""Leave-one-out (LOO) ablations of ScaleRL (§4, Fig. 7; ICLR A.20) as a sweep.

The base recipe and every variant that reverts one of its components (``scalerl.presets.loo_variants``) run on
the same budget; each is then fitted on the first half of its compute and checked on the second half (the
paper fits on 8k GPU-h and extrapolates to 16k, §4 "Extrapolating Scaling Curves"), which the report shows.
The paper's reading: all LOO variants reach a similar A (within ±0.02) and differ in efficiency (B, Cmid).
"""

from __future__ import annotations

import math

from scalerl.errors import UserError
from scalerl.experiments.spec import Sweep, make_sweep
from scalerl.presets import LOO_COMPONENTS, config_diff, format_value, loo_variants

# a step cap for a wall-clock or compute budget: the time or compute limit, not the steps, ends each run
MINUTES_STEP_CAP = 1_000_000


def budget_overrides(budget_steps: int | None = None, minutes: float | None = None,
                     hours: float | None = None) -> list[str]:
    """``--set`` items for a common budget: a number of steps, minutes of wall clock, or device-hours of compute
    (the curves' x-axis, what ``--prune`` needs) per run, or several: whichever ends first. None of them keeps the
    preset's ``steps``."""
    if budget_steps is not None and budget_steps < 1:
        raise UserError(f"--budget-steps must be at least 1, got {budget_steps}")
    if minutes is not None and not minutes > 0:
        raise UserError(f"--minutes must be positive, got {minutes}")
    if hours is not None and not (hours > 0 and math.isfinite(hours)):
        raise UserError(f"--budget-hours must be a positive number of device-hours, got {hours}")
    items = [f"max_minutes={minutes}"] if minutes is not None else []
    if hours is not None:
        items.append(f"max_device_hours={format_value(float(hours))}")
    if items:
        items.append(f"steps={budget_steps or MINUTES_STEP_CAP}")
    elif budget_steps is not None:
        items.append(f"steps={budget_steps}")
    return items


def loo_sweep(
    base: str = "scalerl", overrides: list[str] | tuple[str, ...] = (), budget_steps: int | None = None,
    minutes: float | None = None, only: list[str] | tuple[str, ...] = (), hours: float | None = None,
) -> Sweep:
    """The base preset and each of its LOO variants (or just those in ``only``) as one sweep; ``overrides``
    (e.g. a smaller model) apply to every run, after the variant's own."""
    variants = loo_variants(base)
    unknown = [v for v in only if v not in variants]
    if unknown:
        raise UserError(f"unknown LOO variant(s) {', '.join(unknown)} for base {base!r}; choose from: {', '.join(variants)}")
    runs: dict[str, list[str]] = {base: []}
    runs.update({name: list(items) for name, items in variants.items() if not only or name in only})
    sweep = make_sweep(
        runs, base=base, extra=[*budget_overrides(budget_steps, minutes, hours), *overrides],
        source=f"loo --base {base}", description=f"Leave-one-out ablations of {base} (§4, Fig. 7)",
    )
    check_one_component(sweep, base)
    return sweep


def check_one_component(sweep: Sweep, base: str) -> None:
    """Each variant, as resolved with the ``--set`` overrides, differs from the base run in its one component and
    nowhere else (§4: a LOO variant reverts one choice, all else held fixed). A ``--set`` on a component (e.g.
    ``algo.fp32_head=false``) can make a variant identical to the base, or the base no longer ScaleRL's choice;
    such a comparison would rank a run against itself, so it is a UserError before anything runs."""
    configs = sweep.configs()
    ref = configs[base]
    for name, cfg in configs.items():
        if name == base:
            continue
        component = LOO_COMPONENTS[name][0]
        diff = [d[0] for d in config_diff(ref, cfg)]
        others = [p for p in diff if p != component and not p.startswith(component + ".")]
        if not diff or others:
            what = f"also differs in {', '.join(others)}" if others else "is identical to the base"
            raise UserError(
                f"{sweep.source}: variant {name!r} {what} with these --set overrides; a leave-one-out variant "
                f"must differ from {base!r} only in {component} (§4); drop the --set on that component")
