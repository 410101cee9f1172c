"""The paper's Fig. 2 at toy scale: ScaleRL against the prevalent recipes at equal compute (§3.11, §5.3).

Runs the presets ``scalerl``, ``grpo_deepseek``, ``dapo_qwen`` and ``minimax`` on the built-in task with the
same wall-clock budget on the same backend (so the same ``compute/device_hours``), one or more seeds each, then
analyses them exactly as ``scalerl report`` does: Eq. 1 fitted per run with its interval on A, the ranking by the
paper's rules (A first, ties within 0.02 broken by B at the common A), and the extrapolation check (fit on the
first half of each run's compute, error on the second half). Writes ``report.html`` next to the runs and prints
a table. The baselines are the recipes' own presets; nothing is tuned per recipe.

    python3 bench/replicate.py --minutes 3 --seeds 0          # ~13 minutes on 2 cores
    python3 bench/replicate.py --minutes 7 --seeds 0 1 --out runs/replicate
"""

from __future__ import annotations

import argparse
from pathlib import Path

from scalerl.config import load_config
from scalerl.experiments.analysis import analyse
from scalerl.experiments.report import write_report
from scalerl.pipeline.runner import train

RECIPES = ("scalerl", "grpo_deepseek", "dapo_qwen", "minimax")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=3.0, help="RL wall-clock budget per run (equal compute)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--out", type=Path, default=Path("runs/replicate"))
    ap.add_argument("--set", dest="sets", action="append", default=[], help="extra overrides for every run")
    args = ap.parse_args()
    for seed in args.seeds:
        for recipe in RECIPES:
            run_dir = args.out / f"{recipe}-s{seed}"
            if (run_dir / "fit.json").exists() or (run_dir / "curve.png").exists():
                continue  # finished earlier: resumable like a sweep
            sets = [f"seed={seed}", f"name={recipe}-s{seed}", f"max_minutes={args.minutes}", "steps=100000", *args.sets]
            train(load_config(recipe, None, sets), run_dir, resume=(run_dir / "config.yaml").exists(), show_progress=False)
    analysis = analyse(args.out)
    write_report(args.out, args.out / "report.html", quiet=True)
    print(f"{'run':<20}{'A':>7}{'A interval':>18}{'ident.':>8}{'B':>7}{'Cmid':>9}{'R0':>7}{'last val':>10}{'half-fit |err|':>16}")
    for r in analysis.runs:
        f = r.fit
        lo, hi = f.A_ci
        held = f"{r.heldout.mean_abs_err:.3f}" if r.heldout else "-"
        print(
            f"{r.name:<20}{f.A:>7.3f}{f'[{lo:.3f}, {hi:.3f}]':>18}{str(f.identified):>8}{f.B:>7.2f}{f.Cmid:>9.3g}"
            f"{f.R0:>7.3f}{float(f.y[-1]):>10.3f}{held:>16}"
        )
    print("ranking (A first; ties within the margin broken by B):")
    for item in analysis.ranking:
        tie = f"  tied with {', '.join(n for n in item.group if n != item.name)}" if len(item.group) > 1 else ""
        print(f"  {item.rank}. {item.name}{tie}")
    for s in analysis.skipped:
        print(f"skipped {s.name}: {s.reason}")
    print(f"report: {args.out / 'report.html'}")


if __name__ == "__main__":
    main()
