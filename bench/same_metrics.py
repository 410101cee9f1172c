"""Does a change leave a run's numbers alone? The same short run from two checkouts, metric by metric.

Runs ``scalerl train`` on the micro config of ``tests/test_pipeline.py`` (d_model 32, 1 layer, 4 prompts x 4
generations, 2,000 warm-up steps so that rewards vary, 12 RL steps, evaluations every 4) with the same seed from
each checkout, on the inline and the local backend, sharing one warm-up cache, and compares every metric except the
wall-clock ones (``timing/*``, ``throughput/*``, ``time/*``, ``compute/device_hours``, ``compute/*_seconds``,
``compute/wall_s``). The inline backend is deterministic: any difference is the change's. The local backend's generator loads in-flight weights when they
arrive, so its loss-side floats differ between two runs of the same code; its rewards, pass rates, samples and
tokens do not. ``--repeat`` also runs the first checkout twice, to show that run-to-run spread beside the change's.

    python bench/same_metrics.py OLD_CHECKOUT NEW_CHECKOUT [--backends inline local] [--repeat]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

MICRO = ["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.max_seq_len=96", "batch.prompts=4",
         "batch.generations=4", "task.n_train=64", "task.n_val=8", "task.params.max_operands=5", "eval.n_samples=1",
         "eval.every=4", "warmup.steps=2000", "algo.length.params.think_lo=6", "algo.length.params.think_hi=10",
         "algo.length.params.answer_budget=4", "algo.length.params.max_new_tokens=36", "tensorboard=false",
         "threads=1", "steps=12"]
WALL_CLOCK = ("timing/", "throughput/", "time/", "compute/device_hours", "compute/gen_seconds", "compute/train_seconds",
              "compute/wall_s")
OUTCOMES = ("train/reward_mean", "train/pass_rate", "train/samples", "train/samples_kept", "train/tokens_kept",
            "train/completion_len_mean", "compute/tokens", "val/pass_rate")


def run(checkout: Path, backend: str, out: Path, cache: Path) -> list[dict]:
    cmd = [sys.executable, "-m", "scalerl", "train", "--quiet", "--out", str(out), "--backend", backend]
    for s in MICRO:
        cmd += ["--set", s]
    env = {**os.environ, "PYTHONPATH": str(checkout), "SCALERL_CACHE": str(cache)}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"error: {checkout} ({backend}) failed:\n{done.stderr[-2000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(WALL_CLOCK)} for r in rows]


def compare(a: list[dict], b: list[dict]) -> tuple[int, int, list[str], bool]:
    """(values equal, values that differ, the keys that differ, outcomes all equal)."""
    if len(a) != len(b):
        return 0, max(len(a), len(b)), ["(row count)"], False
    same = differ = 0
    keys: set[str] = set()
    for ra, rb in zip(a, b):
        for k in set(ra) | set(rb):
            if ra.get(k) == rb.get(k):
                same += 1
            else:
                differ += 1
                keys.add(k)
    outcomes = all(ra.get(k) == rb.get(k) for ra, rb in zip(a, b) for k in OUTCOMES)
    return same, differ, sorted(keys), outcomes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--backends", nargs="+", default=["inline", "local"], choices=["inline", "local"])
    ap.add_argument("--repeat", action="store_true", help="run OLD twice too (the run-to-run spread)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="same-metrics-") as tmp:
        root, cache = Path(tmp), Path(tmp) / "cache"
        for backend in args.backends:
            old = run(args.old.resolve(), backend, root / f"old-{backend}", cache)
            new = run(args.new.resolve(), backend, root / f"new-{backend}", cache)
            same, differ, keys, outcomes = compare(old, new)
            print(f"{backend}: {len(old)} rows; {same} values equal, {differ} differ"
                  f"{' (' + ', '.join(keys) + ')' if keys else ''}; outcomes identical: {outcomes}")
            if args.repeat:
                again = run(args.old.resolve(), backend, root / f"again-{backend}", cache)
                same, differ, keys, outcomes = compare(old, again)
                print(f"{backend}, OLD run twice: {same} values equal, {differ} differ; outcomes identical: {outcomes}")


if __name__ == "__main__":
    main()
