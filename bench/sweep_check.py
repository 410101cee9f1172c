"""Seconds a sweep spends checking its runs before the first starts (``experiments/sweep.py: check_runs``), for two
checkouts in interleaved rounds; prints each side's median with its spread and the ratio NEW / OLD.

The sweep: 12 learning rates of the scalerl preset on the built-in testbed (its 3,000-problem task), no warm-up
(the check builds no warm-up). Each measurement is a fresh interpreter with that checkout first on the path.

    python bench/sweep_check.py OLD_CHECKOUT NEW_CHECKOUT [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rounds  # noqa: E402

MEASURE = """
import pathlib, tempfile, time
from scalerl.experiments import sweep as sw
from scalerl.experiments.spec import load_sweep
spec = pathlib.Path(tempfile.mkdtemp()) / "s.yaml"
runs = ", ".join(f"lr{i}: [optim.lr={1e-4 * (i + 1)}]" for i in range(12))
spec.write_text(f"set: [warmup.steps=0]\\nruns: {{{runs}}}\\n")
s = load_sweep(spec)
configs, names = s.configs(), [r.name for r in s.runs]
t = time.perf_counter()
sw.check_runs(s, configs, names)
print(time.perf_counter() - t)
"""


def seconds(checkout: Path) -> float:
    return float(rounds.run_in_tree(checkout, MEASURE))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    times: dict[str, list[float]] = {"old": [], "new": []}
    for _ in range(args.rounds):
        times["old"].append(seconds(args.old.resolve()))
        times["new"].append(seconds(args.new.resolve()))
    for side, t in times.items():
        print(f"{side}: median {statistics.median(t):.2f} s [{min(t):.2f}-{max(t):.2f}] over {len(t)} rounds")
    print(f"new / old: {statistics.median(times['new']) / statistics.median(times['old']):.2f}x")


if __name__ == "__main__":
    main()
