"""How noisy is one evaluation? Evaluate one checkpoint several times with different sampling seeds (§2.1: the
paper's mean@16 on 1,000 prompts) and report the standard deviation between them: the standard error of one
evaluation of that checkpoint, the noise every point of a compute-reward curve carries.

The checkpoint is a run directory's latest checkpoint (``--run DIR``), or else the warmed-up model of a preset
(the start of RL, from the warm-up cache). The evaluation is the config's (``eval.n_prompts`` × ``eval.n_samples``).

    python3 bench/eval_noise.py --repeats 5                              # the scalerl preset after warm-up
    python3 bench/eval_noise.py --run runs/demo --repeats 5              # the demo's last checkpoint
    python3 bench/eval_noise.py --run runs/smol --set eval.n_prompts=160 --set eval.n_samples=4 --repeats 3
    python3 bench/eval_noise.py --set eval.n_samples=8 --repeats 5       # another evaluation size
    python3 bench/eval_noise.py --preset smollm2 --repeats 3             # SmolLM2 at step 0 (no warm-up: pretrained)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from scalerl.build import build_length_control, build_model, build_task
from scalerl.config import apply_overrides, build_config, config_from_run_dir, load_config
from scalerl.engines.registry import native_engine
from scalerl.evaluate import evaluate
from scalerl.models.registry import prompt_encoder
from scalerl.runlog import load_latest_checkpoint


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, help="run directory: evaluate its latest checkpoint")
    ap.add_argument("--preset", default="scalerl")
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.run:  # the run's config, with --set on top (e.g. another evaluation size)
        cfg = build_config(apply_overrides(config_from_run_dir(args.run).model_dump(mode="json"), args.sets))
    else:
        cfg = load_config(args.preset, None, args.sets)
    task = build_task(cfg.task)
    bundle = build_model(cfg.model, cfg.seed)
    if args.run:
        ckpt = load_latest_checkpoint(args.run)
        bundle.model.load_state_dict(ckpt["trainer"]["model"])
        where = f"{args.run} step {ckpt['step']}"
    else:
        from scalerl.models.warmup import warmup

        warmup(bundle.model, bundle.tokenizer, task, cfg.warmup.resolved(bundle.pretrained), seed=cfg.seed)
        where = f"preset {args.preset} at the start of RL"
    bundle.model.eval()
    engine = native_engine(bundle, fp32_head=cfg.algo.fp32_head)
    val = list(task.val_problems())[: cfg.eval.n_prompts or None]
    runs = [
        evaluate(engine, prompt_encoder(bundle), task, val, cfg.eval.n_samples, build_length_control(cfg), seed=1000 + i)
        for i in range(args.repeats)
    ]
    rates = np.array([r["val/pass_rate"] for r in runs])
    print(f"{where}: {len(val)} prompts x {cfg.eval.n_samples} samples, {args.repeats} sampling seeds")
    print(f"pass rate per seed: {', '.join(f'{r:.4f}' for r in rates)}")
    sd = f"{rates.std(ddof=1):.4f}" if len(rates) > 1 else "n/a (one seed)"
    truncated = np.mean([r["val/truncation_rate"] for r in runs])
    print(f"mean {rates.mean():.4f}, standard error of one evaluation (sd across seeds) {sd}, truncated {truncated:.3f}")
    for key in sorted(k for k in runs[0] if k.startswith("val/tier/")):
        vals = np.array([r[key] for r in runs])
        print(f"  {key}: mean {vals.mean():.3f}, sd {vals.std(ddof=1):.3f}")


if __name__ == "__main__":
    main()
