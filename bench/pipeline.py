"""PipelineRL-k against PPO-off-policy-k (§3.1): wall-clock for the same number of samples.

Both runs use the local backend: the generator in its own process on one core, the trainer on the other, the
same model, task, batch, k, seed and number of steps. Under PPO-off-policy-k the generator produces k batches
with frozen weights while the trainer waits, then the trainer takes k steps while the generator waits; under
PipelineRL-k both work at once and weights reach the generator after every step. The paper attributes
PipelineRL's higher efficiency B mostly to this (ICLR A.20). Evaluation, checkpoints and warm-up are excluded: the
time is the training loop's wall clock (``compute/wall_s``), and the compute the meter charges is the two devices
× that wall clock (``compute/device_hours``, scalerl/compute.py), so the wall-clock ratio is also the compute
ratio.

The two schedules run in interleaved rounds (``bench/rounds.py``): median [min-max] over rounds, the ratio taken
within each round, a loud warning for a round started on a busy machine. Each process gets ``--threads // 2``.

    python3 bench/pipeline.py                 # defaults: the scalerl preset's model and batch, k=8, 24 steps, 3 rounds
    python3 bench/pipeline.py --steps 16 --k 4 --rounds 3
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/rounds.py
import rounds  # noqa: E402

from scalerl.config import load_config
from scalerl.pipeline.runner import train
from scalerl.runlog import read_metrics


def run(schedule: str, k: int, steps: int, extra: list[str], root: Path, threads: int) -> dict[str, float]:
    out = Path(tempfile.mkdtemp(prefix=schedule + "_", dir=root))
    cfg = load_config(
        "scalerl",
        None,
        [
            "backend=local",
            f"schedule.name={schedule}",
            f"schedule.k={k}",
            f"steps={steps}",
            f"eval.every={steps * 10}",
            "eval.n_prompts=1",
            "eval.n_samples=1",
            f"checkpoint_every={steps * 10}",
            "tensorboard=false",
            *extra,
            f"threads={threads}",
        ],
    )
    train(cfg, out, show_progress=False)
    lines = [r for r in read_metrics(out) if "loss" in r]
    seconds = lines[-1]["compute/wall_s"]  # the training loop's wall clock, pauses left out
    samples = sum(r["train/samples"] for r in lines)
    return {
        "train s": seconds,
        "device s": lines[-1]["compute/device_hours"] * 3600,  # two devices (generator + trainer) x wall clock
        "samples/s": samples / seconds,
        "staleness": sum(r["train/staleness_mean"] for r in lines) / len(lines),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--k", type=int, default=8)
    rounds.add_arguments(ap)
    ap.add_argument("--set", dest="sets", action="append", default=[], help="extra config overrides")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench_pipeline_"))
    per_process = max(1, args.threads // 2)
    try:
        # warm the supervised warm-up cache first so neither timed run pays for it
        train(load_config("scalerl", None, ["backend=inline", "steps=1", "eval.n_prompts=1", "tensorboard=false", *args.sets]), root / "warm", show_progress=False)
        names = {f"PipelineRL-{args.k}": "pipeline_rl", f"PPO-off-policy-{args.k}": "ppo_off_policy"}
        res = rounds.interleave({n: (lambda s=s: run(s, args.k, args.steps, args.sets, root, per_process))
                                 for n, s in names.items()}, args.rounds, args.threads)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    a, b = names
    rounds.report(res, f"{args.steps} steps, local backend, {per_process} threads per process",
                  [(a, b, "samples/s", 1.6)])


if __name__ == "__main__":
    main()
