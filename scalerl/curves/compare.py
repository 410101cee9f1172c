"""How recipes are compared (App. A.5, A.8; Fig. 7).

1. Rank by the asymptote A: a higher ceiling wins.
2. A values within the error margin (±0.02 in the paper, from three repeated runs) are treated as equal. Such
   runs are refitted with A fixed at their mean A and ranked by B (higher is more compute-efficient), then by
   Cmid (lower is better).

Ties are grouped greedily down the A ranking: a group starts at its highest-A run and takes every following run
within ``margin`` of that run's A. For the linearised figure (Fig. 7) every run is also refitted at the mean A of
all runs, so that the slopes B are comparable on one plot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from scalerl.curves.fit import FitResult, fit_curve
from scalerl.errors import UserError

DEFAULT_MARGIN = 0.02  # App. A.5: the error margin on A


def refit_at(fit: FitResult, A: float) -> FitResult:
    """``fit``'s data and window refitted with the asymptote fixed at ``A`` by the same method and law (and grids)
    that fitted it (R0 stays fixed if it was, and free if it was)."""
    lo, hi = fit.fit_window
    a_grid, cmid_grid = fit.grids
    # a fit that freed R0 although the run has a point at compute 0 (an early jump: the reward before it is not the
    # scaling regime's R0) is refitted without that point, else fit_curve would fix R0 to it and change the model
    keep = np.ones(fit.x.size, dtype=bool) if fit.R0_fixed else fit.x > 0
    return fit_curve(
        fit.x[keep],
        fit.y[keep],
        method=fit.method,
        model=fit.model,
        a_grid=a_grid,
        cmid_grid=cmid_grid,
        fit_from=lo,
        fit_until=hi,
        bounded=fit.bounded,
        A=A,
        R0=fit.R0 if fit.R0_fixed else None,
        source=fit.source,
        x_name=fit.x_name,
        y_name=fit.y_name,
    )


@dataclass
class Ranked:
    rank: int
    fit: FitResult
    group: int  # runs in one group have A within the margin of the group's first run
    group_A: float | None = None  # the mean A the group was refitted at (None for a group of one)
    refit: FitResult | None = None  # the refit at group_A


@dataclass
class Comparison:
    margin: float
    ranked: list[Ranked]
    common_A: float
    common_fits: list[FitResult]  # every run refitted at common_A (for the linearised figure)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        rows = []
        for r in self.ranked:
            rows.append(
                {
                    "rank": r.rank,
                    "source": r.fit.source,
                    "A": r.fit.A,
                    "A_ci": list(r.fit.A_ci) if r.fit.A_ci is not None else None,
                    "B": r.fit.B,
                    "Cmid": r.fit.Cmid,
                    "identified": r.fit.identified,
                    "group": r.group,
                    "group_A": r.group_A,
                    "B_at_group_A": r.refit.B if r.refit else None,
                    "Cmid_at_group_A": r.refit.Cmid if r.refit else None,
                    "trust": r.fit.trust,
                }
            )
        return {
            "margin": self.margin,
            "ranking": rows,
            "common_A": self.common_A,
            "B_at_common_A": {f.source: f.B for f in self.common_fits},
            "fits": [r.fit.to_json() for r in self.ranked],
            "warnings": list(self.warnings),
        }


def _refits(fits: Sequence[FitResult], A: float, warnings: list[str]) -> list[FitResult | None]:
    out: list[FitResult | None] = []
    for f in fits:
        try:
            out.append(refit_at(f, A))
        except UserError as exc:
            warnings.append(f"{f.source}: could not refit at A = {A:.4g} ({exc})")
            out.append(None)
    return out


def compare_fits(fits: Sequence[FitResult], margin: float = DEFAULT_MARGIN) -> Comparison:
    """Rank fitted runs by the paper's rules (see the module docstring)."""
    if not fits:
        raise UserError("compare needs at least one fitted run")
    if margin < 0:
        raise UserError(f"--margin must be ≥ 0, got {margin}")
    warnings: list[str] = []
    order = sorted(fits, key=lambda f: -f.A)
    groups: list[list[FitResult]] = []
    for f in order:
        if groups and groups[-1][0].A - f.A <= margin + 1e-12:
            groups[-1].append(f)
        else:
            groups.append([f])
    ranked: list[Ranked] = []
    for g, members in enumerate(groups, start=1):
        if len(members) == 1:
            ranked.append(Ranked(len(ranked) + 1, members[0], g))
            continue
        mean_A = float(np.mean([f.A for f in members]))
        refits = _refits(members, mean_A, warnings)
        # by B at the shared A (desc), then Cmid (asc); a run that could not be refitted goes last in its group
        keyed = sorted(
            zip(members, refits), key=lambda mr: (mr[1] is None, -(mr[1].B if mr[1] else 0), mr[1].Cmid if mr[1] else 0)
        )
        for f, r in keyed:
            ranked.append(Ranked(len(ranked) + 1, f, g, mean_A, r))
    common_A = float(np.mean([f.A for f in fits]))
    common = [r for r in _refits(fits, common_A, warnings) if r is not None]
    for f in fits:
        if not f.identified:
            warnings.append(f"{f.source}: A is not identified, so its rank by A is not reliable")
    return Comparison(margin, ranked, common_A, common, warnings)
