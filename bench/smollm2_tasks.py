"""Which task does SmolLM2-135M-Instruct half-know? The step-0 pass rate of candidate tasks and prompt formats for
the ``smollm2`` preset (issue 34: a pass rate between about 0.1 and 0.5 at step 0), each as ``--set`` overrides on
the preset, evaluated as a run evaluates (temperature 1, the preset's length control, the FP32 head), with a few
completions shown.

    python3 bench/smollm2_tasks.py --prompts 64 --samples 2                 # every candidate below
    python3 bench/smollm2_tasks.py --only chain_sum_1digit --show 8         # one, with more completions
"""

from __future__ import annotations

import argparse
import json
import math
import time

import torch

from scalerl.build import build_length_control, build_model, build_task
from scalerl.config import load_config
from scalerl.engines.registry import native_engine
from scalerl.evaluate import evaluate
from scalerl.models.registry import prompt_encoder

RG_PLUS_MINUS = "{min_terms: 2, max_terms: 2, operators: ['+', '-'], allow_parentheses: false, allow_negation: false"
CANDIDATES: dict[str, list[str]] = {
    "chain_sum_1digit": [],  # the preset as it is
    "chain_sum_1digit_default_system": ["model.system=null"],  # the chat template's own system message
    "basic_1to2digit_words": [
        "task.params.dataset=basic_arithmetic",
        f"task.params.dataset_config={RG_PLUS_MINUS}, min_digits: 1, max_digits: 2, format_style: natural}}",
    ],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--only", action="append", default=[], help="a candidate name (repeatable)")
    ap.add_argument("--show", type=int, default=3, help="completions shown per candidate")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for name, sets in CANDIDATES.items():
        if args.only and name not in args.only:
            continue
        cfg = load_config("smollm2", None, [*sets, f"task.n_val={args.prompts}"])
        task, bundle = build_task(cfg.task), build_model(cfg.model, cfg.seed)
        engine, encode = native_engine(bundle, fp32_head=cfg.algo.fp32_head), prompt_encoder(bundle)
        length = build_length_control(cfg, bundle.tokenizer)
        val = list(task.val_problems())[: args.prompts]
        t0 = time.perf_counter()
        res = evaluate(engine, encode, task, val, args.samples, length, seed=1000)
        seconds = time.perf_counter() - t0
        p, n = res["val/pass_rate"], res["val/n"]
        shown = engine.generate([encode(q.prompt) for q in val[: args.show]], n=1, length=length, seed=7)
        print(json.dumps({"candidate": name, "sets": sets, "pass_rate": round(p, 4), "n": int(n),
                          "binomial_se": round(math.sqrt(p * (1 - p) / n), 4),
                          "truncation_rate": round(res["val/truncation_rate"], 4), "seconds": round(seconds, 1)}))
        print("  prompt:", repr(bundle.format_prompt(val[0].prompt) if bundle.format_prompt else val[0].prompt))
        for q, [s] in zip(val, shown):
            print(f"  {'ok ' if task.grade(q, s.text) else 'no '} answer {q.answer!r:>6}  completion {s.text!r}")


if __name__ == "__main__":
    main()
