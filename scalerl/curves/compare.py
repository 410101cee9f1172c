"""How recipes are compared (App. A.5, A.8; Fig. 7).

1. Rank by the asymptote A: a higher ceiling wins.
2. A values within the error margin (±0.02 in the paper, from three repeated runs) are treated as equal. Such
   runs are refitted with A fixed at their mean A and ranked by B (higher is more compute-efficient), then by
   Cmid (lower is better).

Ties are grouped greedily down the A ranking: a group starts at its highest-A run and takes every following run
within ``margin`` of that run's A. For the linearised figure (Fig. 7) every run is also refitted at the mean A of
all (identified) runs, so that the slopes B are comparable on one plot.

A run whose A is not identified (``FitResult.identified`` False: it has not passed Cmid, or its interval is open at
the top) has no estimate of A to rank by, only a lower bound: the lower end of its interval. Ranking it by its fitted
A (where the search stopped, often the bound A = 1) would put a run still on the rise above runs that measured their
ceiling. So only identified runs are ranked by the rule above; an unidentified run is placed by its lower end, above an
identified group only when that lower end beats the group's A by more than the margin (the data already show it is
higher), else after it, never tied, with ``Ranked.basis`` saying so. A run whose data bound A nowhere (its interval
open below, as for a run that fell far below where it started, or no interval at all, as with the power law) has
nothing to be ranked by: it is listed after every ranked run, in name order, as not ranked (:data:`NOT_RANKED`); ordering such
runs by their fitted A (often the bound A = 1 for all of them) ranked them by name or by a number the fit disowns.
The common A of the linearised figure is the mean over the identified runs (over all runs when none is). Equal keys
are broken by the run's source, so the ranking does not depend on the order the runs are given in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from scalerl.curves.fit import FitResult, fit_curve
from scalerl.errors import UserError

DEFAULT_MARGIN = 0.02  # App. A.5: the error margin on A
MARGIN_TOL = 1e-9  # A values are differences of floats: 0.63 - 0.61 is 0.020000000000000018, still "within 0.02"

RANKED_BY_A = "A"
RANKED_BY_B = "B at the tie's mean A"
RANKED_BY_BOUND = "lower end of A (A not identified)"
NOT_RANKED = "not ranked (A not identified, and the data bound it nowhere)"


# App. A.5 gives no error bar on efficiency (B is "hard to estimate"): a compute ratio within this relative margin,
# ×1/1.05 to ×1.05, is read as equal, so that no claim rests on a difference far below what seeds resolve
COMPUTE_RATIO_MARGIN = 0.05


def within_ratio(ratio: float, margin: float = COMPUTE_RATIO_MARGIN) -> bool:
    """Whether a compute ratio (e.g. one recipe's Cmid over another's) is within the relative ``margin`` of 1, i.e.
    treated as equal; the boundary itself is within, up to float rounding (:data:`MARGIN_TOL`)."""
    if not ratio > 0 or not np.isfinite(ratio):
        raise ValueError(f"a compute ratio must be a finite number > 0, got {ratio}")
    return abs(float(np.log(ratio))) <= float(np.log1p(margin)) + MARGIN_TOL


def within_margin(d: float, margin: float = DEFAULT_MARGIN) -> bool:
    """Whether a difference ``d`` in A is within the error margin, i.e. treated as equal (App. A.5: "±0.02"); the
    boundary itself is within, up to float rounding (:data:`MARGIN_TOL`)."""
    return abs(d) <= margin + MARGIN_TOL


def lower_end(fit: FitResult) -> float:
    """What the data show of A: the estimate when identified, else the lower end of its interval; ``-inf`` when the
    data bound nothing: the interval was not computed (the power law) or is open below (its printed end is then the
    search's bound, e.g. R0 for a run that fell far below it, not a measurement)."""
    if fit.identified:
        return float(fit.A)
    lo = fit.A_lower  # FitResult: None without an interval or with one open below
    return float(lo) if lo is not None and np.isfinite(lo) else -np.inf


def _why_unbounded(fit: FitResult) -> str:
    """Why a run's data bound its A nowhere (:func:`lower_end` is ``-inf``), in a few words."""
    return "it has no interval on A" if fit.A_ci is None else "its interval on A is open below"


def _finite(v: float | None) -> float | None:
    """``v`` for JSON (``allow_nan=False``): None for a missing, NaN or infinite value."""
    return float(v) if v is not None and np.isfinite(v) else None


def _or_worst(v: float, worst: float) -> float:
    """A sort key that puts a NaN (e.g. the power law's Cmid without R0) where it cannot win."""
    return float(v) if np.isfinite(v) else worst


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
    basis: str = RANKED_BY_A  # what placed it: A, B at the tie's mean A, the lower end of an unidentified A, or nothing

    @property
    def ranked(self) -> bool:
        """False for a run listed after the ranking because its data bound A nowhere (:data:`NOT_RANKED`)."""
        return self.basis != NOT_RANKED

    @property
    def identified(self) -> bool:
        """Whether the run's A is identified; if not, it was placed by the lower end of A (:data:`RANKED_BY_BOUND`)."""
        return bool(self.fit.identified)


@dataclass
class Comparison:
    margin: float
    ranked: list[Ranked]
    common_A: float
    common_pairs: list[tuple[FitResult, FitResult]]  # (each run's fit, its refit at common_A), in the order given
    warnings: list[str] = field(default_factory=list)

    @property
    def common_fits(self) -> list[FitResult]:
        """Every run refitted at common_A (for the linearised figure)."""
        return [c for _, c in self.common_pairs]

    def to_json(self) -> dict[str, Any]:
        rows = []
        at_common = {id(f): c for f, c in self.common_pairs}
        for r in self.ranked:
            common = at_common.get(id(r.fit))
            rows.append(
                {
                    "rank": r.rank if r.ranked else None,
                    "source": r.fit.source,
                    "A": _finite(r.fit.A),
                    "A_ci": list(r.fit.A_ci) if r.fit.A_ci is not None else None,
                    "B": _finite(r.fit.B),
                    "Cmid": _finite(r.fit.Cmid),
                    "identified": r.fit.identified,
                    "ranked_by": r.basis,
                    "group": r.group,
                    "group_A": _finite(r.group_A),
                    "B_at_group_A": _finite(r.refit.B) if r.refit else None,
                    "Cmid_at_group_A": _finite(r.refit.Cmid) if r.refit else None,
                    "B_at_common_A": _finite(common.B) if common is not None else None,
                    "trust": r.fit.trust,
                }
            )
        return {
            "margin": self.margin,
            "ranking": rows,
            "common_A": _finite(self.common_A),
            # by source for older readers; two runs with one source share a key here, so read each row's B_at_common_A
            "B_at_common_A": {f.source: _finite(f.B) for f in self.common_fits},
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
    """Rank fitted runs by the paper's rules (App. A.5, A.8; see the module docstring): identified runs by A, ties
    within ``margin`` by B (then Cmid) at the tie's mean A; an unidentified run by the lower end of its A, above an
    identified group only when that lower end beats the group's A by more than the margin. The result does not
    depend on the order of ``fits``."""
    if not fits:
        raise UserError("compare needs at least one fitted run")
    if not margin >= 0 or not np.isfinite(margin):
        raise UserError(f"--margin must be a finite number ≥ 0, got {margin}")
    warnings: list[str] = []
    known = sorted((f for f in fits if f.identified), key=lambda f: (-_or_worst(f.A, -np.inf), f.source))
    groups: list[list[FitResult]] = []
    for f in known:
        if groups and within_margin(groups[-1][0].A - f.A, margin):
            groups[-1].append(f)
        else:
            groups.append([f])
    # unidentified runs by what their data show (the lower end of A), highest first; the ones their data bound nowhere
    # last, by name (their fitted A is no measurement to order them by)
    def bound_first(f: FitResult) -> tuple[float, float, str]:
        lo = lower_end(f)
        return -lo, -_or_worst(f.A, -np.inf) if np.isfinite(lo) else 0.0, f.source

    unknown = sorted((f for f in fits if not f.identified), key=bound_first)
    ranked: list[Ranked] = []
    group = 0  # group numbers in rank order: a tie shares one, every other run has its own

    def place_unknown(above: float | None) -> None:
        """Rank the unidentified runs whose lower end beats ``above`` (a group's A; None: all that are left) by
        more than the margin."""
        nonlocal group
        while unknown and (above is None or (lower_end(unknown[0]) - above > margin + MARGIN_TOL)):
            group += 1
            f = unknown.pop(0)
            basis = RANKED_BY_BOUND if np.isfinite(lower_end(f)) else NOT_RANKED
            ranked.append(Ranked(len(ranked) + 1, f, group, basis=basis))

    for members in groups:
        place_unknown(members[0].A)
        group += 1
        if len(members) == 1:
            ranked.append(Ranked(len(ranked) + 1, members[0], group))
            continue
        mean_A = float(np.mean([f.A for f in members]))
        refits = _refits(members, mean_A, warnings)
        # by B at the shared A (desc), then Cmid (asc), then source; a run that could not be refitted goes last
        keyed = sorted(
            zip(members, refits),
            key=lambda mr: (mr[1] is None, -_or_worst(mr[1].B, -np.inf) if mr[1] else 0.0,
                            _or_worst(mr[1].Cmid, np.inf) if mr[1] else 0.0, mr[0].source),
        )
        for f, r in keyed:
            ranked.append(Ranked(len(ranked) + 1, f, group, mean_A, r, RANKED_BY_B))
    place_unknown(None)
    pinned = [f.A for f in fits if f.identified] or [f.A for f in fits]
    common_A = float(np.mean(pinned))
    # in the order given, so that the linearised figure's colours match the curves figure's
    pairs = [(f, c) for f, c in zip(fits, _refits(fits, common_A, warnings)) if c is not None]
    for r in ranked:
        if r.basis == NOT_RANKED:
            warnings.append(
                f"{r.fit.source}: A is not identified and the data bound it nowhere ({_why_unbounded(r.fit)}), so it is "
                "not ranked: listed after the ranked runs, by name"
            )
        elif not r.fit.identified:
            warnings.append(
                f"{r.fit.source}: A is not identified (A ≥ {lower_end(r.fit):.3f}), so it is ranked by that lower end, "
                "after the identified runs it does not beat by more than the margin, not by its fitted A"
            )
    return Comparison(margin, ranked, common_A, pairs, warnings)
