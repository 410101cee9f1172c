"""How often forecast-guided pruning keeps the true best run, against the compute it saves (issue 28), on
synthetic sweeps whose A is known (``scalerl.curves.synthetic``: Eq. 1 + the paper's evaluation noise + drift).

Each draw is a sweep of ``--runs`` runs with A ~ U(0.45, 0.70), B ~ U(1.5, 2.5), Cmid ~ budget × U(0.08, 0.4),
evaluated ``--points`` times over the per-run budget. Rungs at 1/8, 1/4, 1/2 and all of the budget: at each, every
live run is fitted on its points so far and the rule of ``scalerl.experiments.pruning`` stops the ones that cannot
win. The baseline is the same sweep unpruned (every run to the end). Reported per margin: how often the true best
run survives, how often the pruned sweep's winner (highest fitted A among the survivors, the paper's first
criterion) is within 0.02 of the true best A, against the unpruned sweep's winner, and the share of compute spent.

    python bench/prune_synthetic.py                      # 100 draws of 8 runs, margins 0, 0.02, 0.05
    python bench/prune_synthetic.py --draws 20 --runs 6
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scalerl.curves import FitError, fit_curve  # noqa: E402
from scalerl.curves.synthetic import CurveParams, simulate_eval_curve  # noqa: E402
from scalerl.experiments.pruning import RUNGS, Outlook, decide, fit_outlook  # noqa: E402

BUDGET = 16000.0
TIE = 0.02  # a winner within this of the true best A is as good (App. A.5)


def draw(rng: np.random.Generator, runs: int, points: int) -> list[tuple[CurveParams, np.ndarray, np.ndarray]]:
    x = np.linspace(BUDGET / points, BUDGET, points)
    sweep = []
    for _ in range(runs):
        p = CurveParams(0.3, rng.uniform(0.45, 0.70), rng.uniform(1.5, 2.5), BUDGET * rng.uniform(0.08, 0.4))
        sweep.append((p, x, simulate_eval_curve(p, x, seed=int(rng.integers(1 << 31)), n_prompts=1000, n_samples=8)))
    return sweep


def final_A(x: np.ndarray, y: np.ndarray) -> float:
    try:
        return float(fit_curve(x, y).A)
    except FitError:
        return float(np.mean(y[-3:]))


def simulate(sweep: list, outlooks: list[list[Outlook | None]], margin: float) -> tuple[int | None, float, bool]:
    """(winner, share of compute spent, true best survived) of the pruned sweep."""
    live = set(range(len(sweep)))
    stopped_at = {}
    for r, rung in enumerate(RUNGS[:-1]):
        decisions = decide({i: outlooks[i][r] for i in sorted(live)}, margin)
        for i, d in decisions.items():
            if d.stop:
                live.discard(i)
                stopped_at[i] = rung
    spent = sum(stopped_at.get(i, 1.0) for i in range(len(sweep))) / len(sweep)
    finals = {i: final_A(sweep[i][1], sweep[i][2]) for i in live}
    winner = max(finals, key=finals.get) if finals else None
    best = int(np.argmax([p.A for p, _, _ in sweep]))
    return winner, spent, best in live


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--points", type=int, default=32)
    ap.add_argument("--margins", default="0,0.02,0.05")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    margins = [float(m) for m in args.margins.split(",")]
    rng = np.random.default_rng(args.seed)
    rows = {m: {"kept": 0, "within": 0, "spent": []} for m in margins}
    unpruned_within = 0
    for _ in range(args.draws):
        sweep = draw(rng, args.runs, args.points)
        true_A = np.array([p.A for p, _, _ in sweep])
        outlooks = [[fit_outlook(x[x <= rung * BUDGET + 1e-9], y[x <= rung * BUDGET + 1e-9], BUDGET)
                     for rung in RUNGS[:-1]] for _, x, y in sweep]
        unpruned = int(np.argmax([final_A(x, y) for _, x, y in sweep]))
        unpruned_within += true_A[unpruned] >= true_A.max() - TIE
        for m in margins:
            winner, spent, kept = simulate(sweep, outlooks, m)
            rows[m]["kept"] += kept
            rows[m]["within"] += winner is not None and true_A[winner] >= true_A.max() - TIE
            rows[m]["spent"].append(spent)
    n = args.draws
    print(f"{n} synthetic sweeps of {args.runs} runs, {args.points} evaluations each, rungs {RUNGS}")
    print(f"unpruned: winner within {TIE} of the true best A in {unpruned_within / n:.0%}, compute 100%")
    print("| margin | true best kept | winner within 0.02 of the true best | compute spent (mean, min-max) |")
    print("|---|---|---|---|")
    for m in margins:
        spent = np.array(rows[m]["spent"])
        print(f"| {m:g} | {rows[m]['kept'] / n:.0%} | {rows[m]['within'] / n:.0%} | "
              f"{spent.mean():.0%} ({spent.min():.0%}-{spent.max():.0%}) |")


if __name__ == "__main__":
    main()
