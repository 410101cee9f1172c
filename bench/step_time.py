"""Seconds per RL step by phase, one scalerl tree against another (issue #31: the step against its matmul floor).

Each side is a subprocess with ``PYTHONPATH`` set to one tree (a ``git archive`` of an older commit holding
``scalerl/`` and ``configs/``), running the set-up of ``bench/profile_step.py`` (``rl_vs_trl.bench_config``: the
default model, 32 prompts × 8 samples, inline backend; the warm-up cache outside the timing) for ``--steps`` RL
steps and reporting the mean seconds per step of each phase after the first step (``timing/<phase>_s``). The sides
run in interleaved rounds (``bench/rounds.py``) and each ratio baseline / ours is taken within a round (> 1: ours is
faster). ``profile_step.py`` puts the same phases beside TRL's; this compares two versions of scalerl.

    git archive a1fa6a8 scalerl configs | tar -x -C /tmp/before
    python bench/step_time.py /tmp/before --rounds 5
    python bench/step_time.py /tmp/before --rounds 3 --set model.d_model=256 --set model.n_layers=8
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rounds  # noqa: E402

HERE = Path(__file__).resolve().parent
PHASES = ("generate", "logprob_forward", "backward", "step")
CHILD = """
import json, sys
sys.path.insert(1, {bench!r})
import torch
torch.set_num_threads({threads})
import rl_vs_trl, profile_step
from scalerl.build import build_task
cfg = rl_vs_trl.bench_config({overrides!r}, {steps}, "inline", {threads})
rl_vs_trl.warmed_policy(cfg, build_task(cfg.task))
print(json.dumps(profile_step.scalerl_profile(cfg, 1)))
"""


def phases(tree: Path, steps: int, threads: int, overrides: list[str] | None = None) -> dict[str, float]:
    code = CHILD.format(bench=str(HERE), steps=steps, threads=threads, overrides=list(overrides or []))
    values = json.loads(rounds.run_in_tree(tree, code, threads))
    return {k: float(values[k]) for k in PHASES}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("baseline", type=Path, help="a tree holding the baseline's scalerl/ and configs/")
    ap.add_argument("--ours", type=Path, default=HERE.parent, help="a tree holding ours (default: this checkout)")
    ap.add_argument("--steps", type=int, default=5, help="RL steps per run (the first is not timed)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="config override for both sides (e.g. model.d_model=256 --set model.n_layers=8)")
    rounds.add_arguments(ap)
    args = ap.parse_args(argv)
    if args.steps < 2:
        print("error: --steps must be at least 2 (the first step is not timed)", file=sys.stderr)
        return 2
    if not rounds.trees_hold_scalerl(args.baseline, args.ours):
        return 2
    results = rounds.interleave({"baseline": lambda: phases(args.baseline, args.steps, args.threads, args.overrides),
                                 "ours": lambda: phases(args.ours, args.steps, args.threads, args.overrides)},
                                rounds=args.rounds, threads=args.threads)
    rounds.report(results, f"seconds per RL step by phase ({args.steps - 1} timed steps per run)",
                  [("ours", "baseline", k, None) for k in PHASES], lower_is_better=list(PHASES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
