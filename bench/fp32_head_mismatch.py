"""Measure the generator/trainer mismatch the FP32 LM head addresses (§3.2, Fig. 5b): the spread of the importance
ratios ``log ρ = log π_train − log π_gen`` over the sampled tokens of one batch, with and without the FP32 head,
with the generator in float32 and in bf16 (``engine.bf16_autocast``, as inference engines generate).

The trainer recomputes the log-probs in float32 on the same weights, so ``|log ρ|`` is pure numeric mismatch
(no staleness). Numbers, not timings: safe to report on any machine.

    python bench/fp32_head_mismatch.py                  # the scalerl preset's model after its warm-up
    python bench/fp32_head_mismatch.py --prompts 8 --no-warmup
"""

from __future__ import annotations

import argparse
import copy

import torch

from scalerl.build import build_length_control, build_model, build_task
from scalerl.engines.registry import build_engine
from scalerl.config import load_config
from scalerl.engines.precision import logprob_mismatch
from scalerl.models.fp32_head import set_fp32_head
from scalerl.models.registry import prompt_encoder


def spread(cfg_sets: list[str], model: torch.nn.Module, bundle, prompts: list[list[int]], seed: int) -> dict[str, float]:
    cfg = load_config("scalerl", None, cfg_sets)
    gen_bundle = copy.copy(bundle)
    gen_bundle.model = copy.deepcopy(model)
    engine = build_engine(cfg, gen_bundle)
    groups = engine.generate(prompts, n=cfg.batch.generations, length=build_length_control(cfg), seed=seed)
    trainer_model = set_fp32_head(copy.deepcopy(model).eval(), cfg.algo.fp32_head)
    d = logprob_mismatch(trainer_model, groups).double()
    return {"tokens": d.numel(), "mean": float(d.mean()), "max": float(d.max())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-warmup", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = load_config("scalerl")
    bundle = build_model(cfg.model, args.seed)
    task = build_task(cfg.task)
    if not args.no_warmup and cfg.warmup.steps_for(bundle.pretrained) > 0:
        from scalerl.models.warmup import warmup

        warmup(bundle.model, bundle.tokenizer, task, cfg.warmup.resolved(bundle.pretrained), seed=args.seed)
    encode = prompt_encoder(bundle)
    prompts = [encode(p.prompt) for p in list(task.train_problems())[: args.prompts]]
    print(f"|log ρ| over the sampled tokens of {args.prompts} prompts × {cfg.batch.generations} (trainer float32)")
    for gen, sets in (("float32", []), ("bf16", ["engine.bf16_autocast=true"])):
        for head in (True, False):
            r = spread([*sets, f"algo.fp32_head={str(head).lower()}"], bundle.model, bundle, prompts, args.seed)
            print(f"generator {gen:7s} FP32 head {'on ' if head else 'off'}: mean {r['mean']:.2e}  max {r['max']:.2e}"
                  f"  ({r['tokens']} tokens)")


if __name__ == "__main__":
    main()
