"""PipelineRL-k against PPO-off-policy-k (§3.1): wall-clock for the same number of samples.

Both runs use the local backend: the generator in its own process on one core, the trainer on the other, the
same model, task, batch, k, seed and number of steps. Under PPO-off-policy-k the generator produces k batches
with frozen weights while the trainer waits, then the trainer takes k steps while the generator waits; under
PipelineRL-k both work at once and weights reach the generator after every step. The paper attributes
PipelineRL's higher efficiency B mostly to this (ICLR A.20). Evaluation and warm-up are excluded: the time is
the training loop's (``compute/device_hours`` / devices), i.e. the wall-clock from the first generation request to
the last optimizer step.

    python3 bench/pipeline.py                 # defaults: the scalerl preset's model and batch, k=8, 48 steps
    python3 bench/pipeline.py --steps 24 --k 4
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from scalerl.config import load_config
from scalerl.pipeline.runner import train
from scalerl.runlog import read_metrics


def run(schedule: str, k: int, steps: int, extra: list[str], root: Path) -> dict[str, float]:
    out = root / schedule
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
        ],
    )
    t0 = time.perf_counter()
    train(cfg, out, show_progress=False)
    total = time.perf_counter() - t0
    lines = [r for r in read_metrics(out) if "loss" in r]
    last = lines[-1]
    seconds = last["compute/device_hours"] * 3600 / 2  # two devices: generator + trainer
    samples = sum(r["train/samples"] for r in lines)
    return {
        "seconds": seconds,
        "samples": samples,
        "samples_per_s": samples / seconds,
        "total_s": total,
        "staleness_mean": sum(r["train/staleness_mean"] for r in lines) / len(lines),
        "pass_rate_last": last["train/pass_rate"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--set", dest="sets", action="append", default=[], help="extra config overrides")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench_pipeline_"))
    try:
        # warm the supervised warm-up cache first so neither timed run pays for it
        train(load_config("scalerl", None, ["backend=inline", "steps=1", "eval.n_prompts=1", "tensorboard=false", *args.sets]), root / "warm", show_progress=False)
        res = {s: run(s, args.k, args.steps, args.sets, root) for s in ("ppo_off_policy", "pipeline_rl")}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{'schedule':<16}{'steps':>7}{'samples':>9}{'train s':>10}{'samples/s':>11}{'staleness':>11}")
    for name, r in res.items():
        print(f"{name + '-' + str(args.k):<16}{args.steps:>7}{int(r['samples']):>9}{r['seconds']:>10.1f}"
              f"{r['samples_per_s']:>11.1f}{r['staleness_mean']:>11.2f}")
    ratio = res["ppo_off_policy"]["seconds"] / res["pipeline_rl"]["seconds"]
    print(f"PipelineRL-{args.k} vs PPO-off-policy-{args.k}: {ratio:.2f}x faster wall-clock for the same samples "
          f"(target >= 1.6x)")


if __name__ == "__main__":
    main()
