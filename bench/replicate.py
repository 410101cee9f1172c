"""The paper's comparisons at CPU scale (§3.1, §3.2, App. A.16, §4, Fig. 7) on the built-in testbed.

Runs, for every seed: the five paper recipes (``scalerl``, ``grpo_deepseek``, ``dapo_qwen``, ``magistral``,
``minimax``) at equal compute (the same wall-clock budget on the same backend, so the same device-hours), ScaleRL
with the GSPO loss, and the leave-one-out variants of ``scalerl loo`` (``scalerl.experiments.loo``). All runs
go into one sweep directory (resumable: a finished run is skipped), named ``<recipe>-s<seed>``. Then:

* per recipe, seeds pooled into one Eq. 1 fit: A with its interval, and B (``scalerl.experiments.claims``);
* the paper's ranking rule over the pooled fits (A first, ties within 0.02 broken by B at the common A);
* the claims table: PipelineRL more efficient than PPO-off-policy (magistral vs dapo_qwen: the same DAPO recipe
  on the two schedules, inline; and ScaleRL on the local backend under each schedule, ``pipelinerl-local`` vs
  ``ppo-off-policy-local``, where generation and training overlap, App. A.11), CISPO and GSPO above DAPO in A
  (scalerl and scalerl+GSPO vs loo-dapo: ScaleRL with only the loss changed), leave-one-out components moving B
  more than A, and a longer generation budget reaching a higher A more slowly (§5: scalerl's 24-48 thinking
  tokens vs ``think24``'s 12-24 from configs/sweeps/gen_length.yaml, a budget that interrupts 12-17% of the
  testbed's completions at the start of RL, so the shorter arm is the one the budget limits; ``think96``'s 48-96
  is run too and shows where the budget stops binding: the testbed's completions average 12-17 tokens, so the
  replicate of 2026-11-26 found think96's evaluations identical to scalerl's, step for step);
* every fit, pooled or per run, starts at one absolute compute shared by all runs (``experiments/cutoff.py``);
* ``report.html`` (per-run fits, held-out checks, diagnostics, with the pooled table and the claims on top) and
  ``claims.json``.

Every run trains for the same wall-clock minutes on one core (``backend=inline``, one torch thread), two runs at
a time on a 2-core machine (``--jobs``): one core each, so a run beside another keeps 0.99x [0.84-1.00] of its rate
alone, and the pair makes 1.36x the RL steps per second of one inline run on both cores and 1.14x one local-backend
run (``bench/parallel_runs.py``, docs/RESULTS.md); equal minutes are then about equal device-hours. The two
``-local`` runs hold two devices (generator and trainer processes), so the meter charges them 2 × the wall clock
(scalerl/compute.py); they are compared with each other only. The
seeds share one base model (``model.seed=0``: the same initial weights and warm-up), as the paper's seeds do; they
differ in the RL run. Evaluation is the testbed's default: 4 samples of each of the 256 validation prompts every
5 steps (standard error 0.0025-0.0038 per evaluation, docs/RESULTS.md; a recipe's fit pools its seeds).

    python3 bench/replicate.py --quick                         # smoke test: micro model, a few minutes
    python3 bench/replicate.py --out runs/replicate            # 36 runs of 2.8 minutes, ~56 minutes on 2 cores

(36 runs: 18 per seed; 34 of them took 52 minutes on 2 idle cores on 2026-11-26, docs/RESULTS.md.)
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Callable

import yaml

from scalerl.atomic import write_json
from scalerl.config import CONFIG_DIR
from scalerl.curves import FitError
from scalerl.curves.compare import compare_fits
from scalerl.errors import UserError
from scalerl.experiments.claims import (
    EFFICIENCY, EFFICIENCY_OVERLAP, FORECAST_COLUMNS, HIGHER_A, LONGER_BUDGET, LOO_B_NOT_A, Claim, Forecast, Pooled,
    claims_html, efficiency_claim, forecast_check, higher_A_claim, longer_budget_claim, loo_claim, overlap_claim,
    pooled_fit, seeds_A,
)
from scalerl.experiments.cutoff import shared_fit_from_paths
from scalerl.experiments.analysis import Analysis
from scalerl.experiments.loo import budget_overrides, loo_sweep
from scalerl.experiments.report import write_report
from scalerl.experiments.spec import PlannedRun, Sweep
from scalerl.experiments.sweep import RunFn, run_parallel

RECIPES = ("scalerl", "grpo_deepseek", "dapo_qwen", "magistral", "minimax")
QUICK = CONFIG_DIR / "sweeps" / "micro.yaml"  # the micro model of the LOO smoke test
GEN_LENGTH = CONFIG_DIR / "sweeps" / "gen_length.yaml"  # the generation-length axis (§5)
SHORT = "think24"  # a shorter thinking budget, 12-24 tokens: it interrupts completions the base's 24-48 lets finish
LONG = "think96"  # a longer one, 48-96 tokens: on this testbed it no longer binds (the base's rarely does)
# name -> (base preset, overrides after every run's settings)
EXTRA = {
    "gspo": ("scalerl", ("algo.loss.name=gspo",)),  # ScaleRL with the GSPO loss (§3.2)
    # §3.1 / App. A.11 where generation and training overlap: the generator in its own process
    "pipelinerl-local": ("scalerl", ("backend=local",)),
    "ppo-off-policy-local": ("scalerl", ("backend=local", "schedule.name=ppo_off_policy")),
    # §5: ScaleRL with a shorter and a longer thinking budget than the base's 24-48 tokens
    **{n: ("scalerl", tuple(yaml.safe_load(GEN_LENGTH.read_text())["runs"][n])) for n in (SHORT, LONG)},
}
# every run: one core, the seeds on one base model, 256 validation prompts x 4 samples
SETTINGS = ("backend=inline", "model.seed=0", "eval.n_samples=4")


def plan(seeds: list[int], budget: list[str], sets: list[str]) -> Sweep:
    """Every recipe, GSPO and LOO variant for every seed, as one sweep of ``<name>-s<seed>`` runs."""
    runs: list[PlannedRun] = []
    for seed in seeds:
        common = (f"seed={seed}", *budget, *sets)
        runs += [PlannedRun(f"{r}-s{seed}", r, common) for r in RECIPES]
        runs += [PlannedRun(f"{n}-s{seed}", base, (*common, *o)) for n, (base, o) in EXTRA.items()]
        loo = loo_sweep("scalerl", [f"seed={seed}", *sets], None, None)
        runs += [PlannedRun(f"{r.name}-s{seed}", r.base, (*r.overrides, *budget)) for r in loo.runs if r.name != "scalerl"]
    return Sweep(source="bench/replicate.py", description="Paper recipes, GSPO and LOO variants at equal compute",
                 base="scalerl", runs=tuple(runs))


def pooled(root: Path, names: list[str]) -> dict[str, Pooled]:
    """Each recipe's runs (``<recipe>-s<seed>``) fitted alone and pooled, every fit from one absolute cutoff."""
    groups: dict[str, list[Path]] = {}
    for name in names:
        groups.setdefault(re.sub(r"-s\d+$", "", name), []).append(root / name)
    readable = [root / n for n in names if (root / n / "metrics.jsonl").exists()]
    try:
        fit_from = shared_fit_from_paths(readable)
    except UserError as exc:
        print(f"warning: no shared fit cutoff ({' '.join(str(exc).split())}); each fit uses its own")
        fit_from = None
    out = {}
    for recipe, dirs in groups.items():
        try:
            out[recipe] = pooled_fit(recipe, dirs, fit_from)
        except (FitError, UserError) as exc:
            print(f"warning: {recipe} not fitted: {' '.join(str(exc).split())}")
    return out


def check(
    title: tuple[str, str], claim: Callable[..., Claim], runs: dict[str, Pooled], *names: str | list[str]
) -> Claim:
    """``claim`` on the named recipes (a list for several), or an inconclusive verdict naming those missing."""
    missing = [n for group in names for n in ([group] if isinstance(group, str) else group) if n not in runs]
    if missing:
        return Claim(*title, "inconclusive", f"not fittable: {', '.join(missing)}")
    args = [runs[g] if isinstance(g, str) else [runs[n] for n in g] for g in names]
    return claim(*args)


def replicate(
    out: Path, seeds: list[int], budget: list[str], sets: list[str], run_fn: RunFn | None = None, jobs: int = 1,
) -> tuple[dict[str, Pooled], list[Claim], list[Forecast]]:
    """Run (or resume) every run, then write ``report.html`` and ``claims.json``; the pooled fits, the claims and
    the per-run forecast checks. ``run_fn`` replaces the real training (tests)."""
    sweep = plan(seeds, budget, sets)
    run_parallel(sweep, out, jobs, run_fn=run_fn, show_progress=True)
    runs = pooled(out, [r.name for r in sweep.runs])
    variants = sorted({re.sub(r"-s\d+$", "", r.name) for r in sweep.runs if r.name.startswith("loo-")})
    claims = [
        check(EFFICIENCY, efficiency_claim, runs, "magistral", "dapo_qwen"),
        check(EFFICIENCY_OVERLAP, overlap_claim, runs, "pipelinerl-local", "ppo-off-policy-local"),
        check(HIGHER_A, higher_A_claim, runs, ["scalerl", "gspo"], "loo-dapo"),
        check(LOO_B_NOT_A, loo_claim, runs, "scalerl", variants),
        check(LONGER_BUDGET, longer_budget_claim, runs, SHORT, "scalerl"),
    ]
    recipes = list(runs.values())
    checks: list[Forecast] = []

    def extra(analysis: Analysis) -> str:
        """The claims on top of the report, with each run's forecast check from the report's own fits."""
        checks.extend(forecast_check(r) for r in analysis.runs)
        return claims_html(recipes, claims, checks)

    write_report(out, out / "report.html", quiet=True, extra=extra)
    by_id = {id(r.fit): r.name for r in recipes}
    ranking = compare_fits([r.fit for r in recipes]) if recipes else None
    write_json(out / "claims.json", {
        "recipes": {r.name: {"A": r.fit.A, "A_ci": r.fit.A_ci, "B": r.fit.B, "Cmid": r.fit.Cmid,
                             "identified": r.fit.identified, "seed_A": [f.A for f in r.seeds]} for r in recipes},
        "ranking": [{"rank": i.rank, "name": by_id[id(i.fit)], "group": i.group} for i in ranking.ranked] if ranking else [],
        "claims": [vars(c) for c in claims],
        "forecasts": [vars(f) for f in checks],
    })
    return runs, claims, checks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=2.8, help="RL wall-clock budget per run (equal compute)")
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time, one core each")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--out", type=Path, default=Path("runs/replicate"))
    ap.add_argument("--set", dest="sets", action="append", default=[], help="extra overrides for every run")
    ap.add_argument("--quick", action="store_true", help="smoke test: the micro model, 8 steps per run")
    args = ap.parse_args()
    sets = [*SETTINGS, *args.sets]
    budget = budget_overrides(None, args.minutes)
    if args.quick:
        sets = [*yaml.safe_load(QUICK.read_text())["set"], *sets]
        budget = budget_overrides(8, None)
    runs, claims, checks = replicate(args.out, args.seeds, budget, sets, jobs=args.jobs)
    recipes = list(runs.values())
    print(f"{'recipe (seeds pooled)':<22}{'A':>8}{'A interval':>18}{'ident.':>8}{'B':>7}{'Cmid':>9}  A per seed")
    for r in recipes:
        print(f"{r.name:<22}{r.fit.format_A():>8}{r.fit.format_interval():>18}{str(r.fit.identified):>8}{r.fit.B:>7.2f}"
              f"{r.fit.Cmid:>9.3g}  {seeds_A(r.seeds)}")
    print("ranking (A first; within ±0.02, the higher B at the common A):")
    for item in json.loads((args.out / "claims.json").read_text())["ranking"]:
        print(f"  {item['rank']}. {item['name']}")
    print("paper claim -> reproduced at this scale:")
    for c in claims:
        print(f"  {c.claim} ({c.section}): {c.verdict.upper()}\n      {c.numbers}")
    print("predictability (each run fitted on its first half of compute):")
    print("| " + " | ".join(FORECAST_COLUMNS) + " |\n|" + "---|" * len(FORECAST_COLUMNS))
    for f in checks:
        print("| " + " | ".join(f.row()) + " |")
    print(f"report: {args.out / 'report.html'}; claims: {args.out / 'claims.json'}")


if __name__ == "__main__":
    main()
