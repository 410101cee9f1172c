"""The paper's comparisons checked on our own runs (``bench/replicate.py``): recipes pooled over seeds, and a
verdict per claim, "yes", "no" or "inconclusive", with the numbers it rests on.

A recipe's seeds are pooled into one Eq. 1 fit (every evaluation of every seed, R0 the mean reward at zero
compute), which gives A with its interval and B (§2.1). A claim's direction counts only when the pooled fits are
identified and every seed, fitted alone, shows the same direction; differences in A count only beyond the
paper's margin of 0.02 (App. A.5: A within ±0.02 is a tie). Efficiency is compared as the paper does (App. A.5, Fig. 7):
both curves refitted at their common A, then the compute to reach the midpoint (``Cmid``) and the slope ``B``; a
compute ratio counts only beyond ``curves.compare.COMPUTE_RATIO_MARGIN`` (within ×1.05 of 1 it is a tie).

Claims checked: PipelineRL is more efficient than PPO-off-policy (§3.1), also where generation and training
overlap (App. A.11); CISPO and GSPO reach a higher A than DAPO (§3.2); the leave-one-out components move
efficiency (B) more than the asymptote (§4, Fig. 7); a longer generation budget reaches a higher A, more slowly (§5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from scalerl import curves
from scalerl.curves.compare import COMPUTE_RATIO_MARGIN, within_margin, within_ratio

if TYPE_CHECKING:
    from scalerl.experiments.analysis import RunAnalysis

MARGIN = 0.02  # App. A.5: runs whose A differ by less than this are tied
EFFICIENCY = ("PipelineRL is more efficient than PPO-off-policy", "§3.1")
HIGHER_A = ("CISPO and GSPO reach a higher A than DAPO", "§3.2")
LOO_B_NOT_A = ("Leave-one-out components move B more than A", "§4, Fig. 7")
EFFICIENCY_OVERLAP = ("PipelineRL is more efficient than PPO-off-policy, generation and training overlapping "
                      "(local backend)", "§3.1, App. A.11")
LONGER_BUDGET = ("A longer generation budget reaches a higher A, more slowly", "§5")
Verdict = Literal["yes", "no", "inconclusive"]


@dataclass
class Pooled:
    """One recipe: the fit pooled over its seeds, and each seed's own fit."""

    name: str
    fit: curves.FitResult
    seeds: list[curves.FitResult]

    @property
    def identified(self) -> bool:
        return self.fit.identified and all(f.identified for f in self.seeds)

    def A_text(self) -> str:
        return f"A {self.fit.format_A()} {self.fit.format_interval()}" + ("" if self.fit.identified else " (not identified)")


@dataclass(frozen=True)
class Claim:
    claim: str
    section: str
    verdict: Verdict
    numbers: str


def pooled_fit(name: str, run_dirs: list[Path], fit_from: float | None = None) -> Pooled:
    """Fit each run, and all their evaluations together (sorted by compute), from ``fit_from`` (the cutoff every
    recipe of the comparison shares, ``experiments/cutoff.py``; None: each fit's own)."""
    series = [curves.load_series(d, curves.DEFAULT_X, curves.DEFAULT_Y) for d in run_dirs]
    x = np.concatenate([s.x for s in series])
    y = np.concatenate([s.y for s in series])
    order = np.argsort(x, kind="stable")
    fit = curves.fit_curve(x[order], y[order], source=name, x_name=curves.DEFAULT_X, y_name=curves.DEFAULT_Y,
                           fit_from=fit_from)
    return Pooled(name, fit, [curves.fit_series(s, fit_from=fit_from) for s in series])


def seeds_A(fits: list[curves.FitResult]) -> str:
    """Each seed's A (:meth:`~scalerl.curves.FitResult.format_A`), comma-separated."""
    return ", ".join(f.format_A() for f in fits)


@dataclass(frozen=True)
class Forecast:
    """One run's half-budget check (§4, §5): the fit on the first half of its compute against what followed."""

    name: str
    end_pred: float | None  # the half fit's prediction of the last evaluation ...
    end_true: float  # ... and what was measured there
    mean_abs_err: float | None  # mean |predicted - observed| over the second half
    A_full: float  # A fitted on the whole run ...
    A_full_identified: bool
    A_full_lo: float | None  # ... and the lower end of its interval
    half_A_ci: tuple[float | None, float | None] | None  # the half fit's interval on A ...
    half_A_ci_open: tuple[bool, bool] | None  # ... and its ends the profile never reached
    covers: bool | None  # whether that interval holds A_full (None: the half or the full fit did not identify A)
    note: str | None = None  # why there is no half fit

    def row(self) -> list[str]:
        num = lambda v, f=".3f": "-" if v is None else format(v, f)  # noqa: E731
        ci = "-" if self.half_A_ci is None else curves.format_interval(self.half_A_ci, self.half_A_ci_open or (False, False))
        err = None if self.end_pred is None else abs(self.end_pred - self.end_true)
        covers = {True: "yes", False: "no", None: "not identified"}[self.covers]
        A = curves.format_A(self.A_full, self.A_full_lo, self.A_full_identified)
        return [self.name, num(self.end_pred), num(self.end_true), num(err), num(self.mean_abs_err),
                A + ("" if self.A_full_identified else " (not identified)"), ci, covers]


FORECAST_COLUMNS = ["run", "forecast of the end (from half)", "observed end", "|error|", "mean |error| 2nd half",
                    "A (full run)", "A interval (from half)", "covers full A"]


def forecast_check(run: RunAnalysis) -> Forecast:
    """The half-budget forecast of a run's final pass rate and whether the half's A interval covered the full
    run's A (the paper's extrapolation check, §4, §5), from the report's analysis of the run (no second fit)."""
    full, check = run.fit, run.heldout
    lo = full.A_lower  # None when its interval is open below
    if check is None:
        return Forecast(run.name, None, float(full.y[-1]), None, full.A, full.identified, lo, None, None, None,
                        run.heldout_note)
    return Forecast(run.name, check.end_pred, check.end_true, check.mean_abs_err, full.A, full.identified, lo,
                    check.A_ci, check.A_ci_open, check.covers_fit(full))


def _cmid_at(a: curves.FitResult, b: curves.FitResult) -> tuple[float, float, float, float]:
    """(Cmid_a, Cmid_b, B_a, B_b) with both fits refitted at their mean A."""
    A = (a.A + b.A) / 2
    ra, rb = curves.refit_at(a, A), curves.refit_at(b, A)
    return ra.Cmid, rb.Cmid, ra.B, rb.B


def _direction(signs: list[float], identified: bool) -> Verdict:
    """"yes" when every sign is positive, "no" when every one is negative, else "inconclusive"."""
    if identified and all(s > 0 for s in signs):
        return "yes"
    if identified and all(s < 0 for s in signs):
        return "no"
    return "inconclusive"


def efficiency_claim(pipeline: Pooled, ppo: Pooled, title: tuple[str, str] = EFFICIENCY) -> Claim:
    """§3.1: at a common A, PipelineRL reaches the midpoint with less compute than PPO-off-policy, by more than
    :data:`~scalerl.curves.compare.COMPUTE_RATIO_MARGIN` in the pooled fit and every seed (a ratio within it is a
    tie, so the verdict is not "yes")."""
    pooled = _cmid_at(pipeline.fit, ppo.fit)
    per_seed = [_cmid_at(a, b) for a, b in zip(pipeline.seeds, ppo.seeds)]
    compute = [c_ppo / c_pipe for c_pipe, c_ppo, _, _ in [pooled, *per_seed]]
    ratios = ", ".join(f"{r:.2f}x" for r in compute[1:])
    numbers = (
        f"{pipeline.name} {pipeline.A_text()}, B {pipeline.fit.B:.2f} vs {ppo.name} {ppo.A_text()}, B "
        f"{ppo.fit.B:.2f}; at the common A, {ppo.name} needs {compute[0]:.2f}x the compute of "
        f"{pipeline.name} to reach the midpoint (per seed: {ratios}; within x{1 + COMPUTE_RATIO_MARGIN:g} is a tie)"
    )
    # a ratio within the margin is a tie (0); a NaN one (a refit without Cmid) keeps its NaN: neither direction
    signs = [0.0 if math.isfinite(r) and within_ratio(r) else math.log(r) for r in compute]
    return Claim(*title, _direction(signs, pipeline.identified and ppo.identified), numbers)


def overlap_claim(pipeline: Pooled, ppo: Pooled) -> Claim:
    """:func:`efficiency_claim` on a backend where generation and training overlap (App. A.11)."""
    return efficiency_claim(pipeline, ppo, EFFICIENCY_OVERLAP)


def longer_budget_claim(short: Pooled, long: Pooled) -> Claim:
    """§5 (generation length 14k -> 32k: A 0.610 -> 0.645, lower B, higher Cmid): the longer budget's A is higher
    beyond the margin in the pooled fit and every seed, and it gets there more slowly (a larger Cmid)."""
    verdict = _A_verdict(long, short)
    slower = long.fit.Cmid > short.fit.Cmid
    if verdict == "yes" and not slower:
        verdict = "inconclusive"
    numbers = (f"{long.name} {long.A_text()}, B {long.fit.B:.2f}, Cmid {long.fit.Cmid:.3g} (seeds {seeds_A(long.seeds)}) "
               f"vs {short.name} {short.A_text()}, B {short.fit.B:.2f}, Cmid {short.fit.Cmid:.3g} "
               f"(seeds {seeds_A(short.seeds)}); Cmid x{long.fit.Cmid / short.fit.Cmid:.2f}")
    return Claim(*LONGER_BUDGET, verdict, numbers)


def _A_verdict(better: Pooled, worse: Pooled) -> Verdict:
    diffs = [better.fit.A - worse.fit.A] + [a.A - b.A for a, b in zip(better.seeds, worse.seeds)]
    beyond = [0.0 if within_margin(d, MARGIN) else d for d in diffs]  # App. A.5: within ±0.02 (inclusive) is a tie
    return _direction(beyond, better.identified and worse.identified)


def higher_A_claim(candidates: list[Pooled], dapo: Pooled) -> Claim:
    """§3.2: each candidate loss (CISPO, GSPO) reaches a higher A than DAPO, by more than the margin."""
    verdicts = [_A_verdict(c, dapo) for c in candidates]
    verdict: Verdict = "yes" if all(v == "yes" for v in verdicts) else "no" if "no" in verdicts else "inconclusive"
    numbers = "; ".join(
        f"{c.name} {c.A_text()} (seeds {seeds_A(c.seeds)}): {v}"
        for c, v in zip(candidates, verdicts)
    )
    numbers += f"; {dapo.name} {dapo.A_text()} (seeds {seeds_A(dapo.seeds)})"
    return Claim(*HIGHER_A, verdict, numbers)


def loo_claim(base: Pooled, variants: list[Pooled]) -> Claim:
    """§4, Fig. 7: every leave-one-out variant's A is within the margin of the base's, while efficiency moves by more
    than the base's own seed-to-seed spread for at least one of them. As in Fig. 7, A is first averaged over the base
    and every variant, each pooled fit (and each base seed, for the spread) is refitted with that A fixed, and the
    slopes B are compared. "no" when some variant's A moves beyond the margin; "inconclusive" when nothing moves, a
    fit is not identified, or the base has fewer than two seeds (no seed-to-seed spread to measure a move against)."""
    common_A = float(np.mean([base.fit.A] + [v.fit.A for v in variants]))
    B_base = curves.refit_at(base.fit, common_A).B
    seed_B = [curves.refit_at(f, common_A).B for f in base.seeds]
    spread = max((abs(math.log(a / b)) for a in seed_B for b in seed_B), default=0.0)
    rows, dA, dB = [], [], []
    for v in variants:
        B_v = curves.refit_at(v.fit, common_A).B
        dA.append(v.fit.A - base.fit.A)
        dB.append(math.log(B_v / B_base))
        rows.append(f"{v.name} ΔA {dA[-1]:+.3f}, B x{math.exp(dB[-1]):.2f}")
    identified = base.identified and all(v.identified for v in variants)
    a_small = all(within_margin(d, MARGIN) for d in dA)
    b_moves = any(abs(d) > spread for d in dB)
    replicated = len(base.seeds) >= 2
    if not identified:
        verdict: Verdict = "inconclusive"
    elif not a_small:
        verdict = "no"  # the paper's reading is that every LOO variant keeps A within the margin
    else:
        verdict = "yes" if b_moves and replicated else "inconclusive"
    spread_text = (f"the base's seed-to-seed B spread is x{math.exp(spread):.2f}" if replicated
                   else "one base seed: no seed-to-seed B spread to compare with")
    numbers = (
        f"{'; '.join(rows)} (B at the common A = {common_A:.3f}, the mean A of all runs (Fig. 7); {spread_text}; "
        f"max |ΔA| {max((abs(d) for d in dA), default=0):.3f} vs margin {MARGIN})"
    )
    return Claim(*LOO_B_NOT_A, verdict, numbers)


def claims_html(recipes: list[Pooled], claims: list[Claim], forecasts: list[Forecast] = ()) -> str:
    """The pooled fits per recipe, the claims table and the per-run forecast checks, as HTML for the report."""
    from scalerl.experiments.report import _esc, _table

    fits = _table(
        ["recipe", "seeds", "A (pooled)", "A interval", "identified", "B", "Cmid", "A per seed"],
        [([_esc(r.name), str(len(r.seeds)), _esc(r.fit.format_A()), _esc(r.fit.format_interval()),
           "yes" if r.fit.identified else "no", f"{r.fit.B:.2f}", f"{r.fit.Cmid:.3g}",
           _esc(seeds_A(r.seeds))], "") for r in recipes],
    )
    table = _table(
        ["paper claim", "§", "reproduced at this scale", "numbers"],
        [([_esc(c.claim), _esc(c.section), _esc(c.verdict), _esc(c.numbers)], "" if c.verdict == "yes" else "tie")
         for c in claims],
        text=(0, 1, 2, 3),
    )
    checks = _table(FORECAST_COLUMNS, [([_esc(c) for c in f.row()], "") for f in forecasts], text=(0, 7))
    return (
        "<h2>Recipes, seeds pooled</h2>" + fits
        + '<p class="note">One Eq. 1 fit per recipe over every evaluation of its seeds (§2.1).</p>'
        + "<h2>Paper claims at this scale</h2>" + table
        + '<p class="note">A direction counts only when the fits are identified and every seed agrees; differences'
        f" in A only beyond ±{MARGIN:g} (App. A.5), compute ratios only beyond ×{1 + COMPUTE_RATIO_MARGIN:g}."
        " Otherwise: inconclusive.</p>"
        + ("<h2>Predictability: each run forecast from its first half</h2>" + checks
           + '<p class="note">Eq. 1 fitted on the first half of each run\'s compute, its prediction of the last '
           "evaluation against the measured one, and whether that fit's 95% interval on A held the full run's A (§4, §5)."
           "</p>" if forecasts else "")
    )
