"""Regenerate the example inputs of docs/predict.md deterministically: validation curves of three runs whose
expected pass rate is Eq. 1 with the paper's Table 1 parameters (App. A.13), measured like the paper measures them
(1,000 held-out prompts × 16 samples every 100 steps, §2.1) with slow AR(1) drift on top.

    python examples/curves/make_example.py        # writes examples/curves/*.csv next to this file

Compute is in GPU-hours (1.6 GPU-h per step, so 10,000 steps reach the paper's 16k GPU-h leave-one-out budget).
R0 = 0.30 is an assumption: the paper does not report the initial pass rate.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from scalerl.curves.synthetic import TABLE1, simulate_eval_curve

HERE = Path(__file__).resolve().parent
RUNS = {"scalerl_8b": ("scalerl-8b", 0), "scalerl_bs512": ("scalerl-bs512", 1), "scalerl_24gen": ("scalerl-24gen", 2)}
GPU_HOURS_PER_STEP = 1.6


def main() -> None:
    steps = np.arange(0, 10_001, 100)
    compute = steps * GPU_HOURS_PER_STEP
    for name, (row, seed) in RUNS.items():
        reward = simulate_eval_curve(TABLE1[row], compute, seed=seed)
        with open(HERE / f"{name}.csv", "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["step", "compute/device_hours", "val/pass_rate"])
            for s, c, r in zip(steps, compute, reward):
                w.writerow([int(s), f"{c:.1f}", f"{r:.5f}"])
        print(f"wrote {HERE / f'{name}.csv'} ({len(steps)} evaluations, Table 1 row {row!r})")


if __name__ == "__main__":
    main()
