"""Where the small-model step's time goes, against the alternatives tried for issue #31 (interleaved rounds).

Three comparisons, each ``bench/rounds.py`` interleaved rounds with the ratio taken within a round:

  warm-up    one supervised warm-up step of the default model (batch 64 of the task's demonstrations, AdamW),
             FP32 against ``torch.autocast("cpu", dtype=torch.bfloat16)``; seconds per step over 20 steps;
  attention  one decode step's attention (256 rows, 4 heads of 32, one query, a key mask over S cache slots,
             S = 20, 40, 60), ``F.scaled_dot_product_attention`` against a plain ``softmax(q·kᵀ)·v``;
  generate   ``BuiltinEngine.generate`` (32 prompts × 8 samples, up to 32 new tokens), eager against
             ``torch.compile(model.decode_step, dynamic=True)`` (its first, compiling call is timed once).

    python bench/step_ops.py [--rounds 5] [--threads N] [--only warm-up,attention,generate]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/rounds.py
import rounds  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from scalerl.algo.length_control import LengthControl  # noqa: E402
from scalerl.build import build_model, build_task  # noqa: E402
from scalerl.config import ModelConfig, load_config  # noqa: E402
from scalerl.engines.builtin import BuiltinEngine  # noqa: E402
from scalerl.models.registry import encode_prompt  # noqa: E402
from scalerl.models.tiny import build_tiny  # noqa: E402
from scalerl.models.tokenizer import CharTokenizer  # noqa: E402
from scalerl.models.warmup import _batch, _examples  # noqa: E402
from scalerl.tasks.arithmetic import ArithmeticTask  # noqa: E402


def warmup_sides() -> dict:
    cfg = load_config("scalerl", None, [])
    bundle, task = build_model(cfg.model, 0), build_task(cfg.task)
    examples, model = _examples(task, bundle.tokenizer), bundle.model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)

    def side(bf16: bool):  # noqa: ANN202
        def run() -> float:
            t = time.perf_counter()
            for _ in range(20):
                pick = rng.choice(len(examples), size=64, replace=False)
                ids, mask, targets = _batch([examples[i] for i in pick], bundle.tokenizer.pad_id)
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    logits = model(ids, mask)
                loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-100)
                opt.zero_grad()
                loss.backward()
                opt.step()
            return (time.perf_counter() - t) / 20
        return run
    return {"warm-up step fp32": side(False), "warm-up step bf16 autocast": side(True)}


def attention_sides() -> dict:
    torch.manual_seed(0)
    n, h, hd = 256, 4, 32
    cache, q = torch.randn(2, n, h, 64, hd), torch.randn(n, h, 1, hd)
    sides = {}
    for s in (20, 40, 60):
        k, v = cache[0, :, :, :s], cache[1, :, :, :s]
        mask = torch.rand(n, 1, 1, s) > 0.1
        mask[..., -1] = True

        def sdpa(k=k, v=v, mask=mask) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

        def plain(k=k, v=v, mask=mask) -> torch.Tensor:
            scores = (q @ k.transpose(-1, -2)) * hd**-0.5
            return torch.softmax(scores.masked_fill(~mask, float("-inf")), -1) @ v

        assert torch.allclose(sdpa(), plain(), atol=1e-5)
        for name, fn in ((f"attention S={s} sdpa", sdpa), (f"attention S={s} plain", plain)):
            def run(fn=fn) -> float:
                t = time.perf_counter()
                for _ in range(200):
                    fn()
                return (time.perf_counter() - t) / 200
            sides[name] = run
    return sides


def generate_sides() -> dict:
    tok = CharTokenizer()
    prompts = [encode_prompt(tok, p.prompt) for p in ArithmeticTask(seed=0, n_train=1, n_val=32).val_problems()]
    cfg = ModelConfig(d_model=128, n_layers=4, n_heads=4, max_seq_len=max(map(len, prompts)) + 32)
    eager_model, compiled_model = build_tiny(cfg, seed=0).eval(), build_tiny(cfg, seed=0).eval()
    compiled_model.decode_step = torch.compile(compiled_model.decode_step, dynamic=True)
    length = LengthControl(max_new_tokens=32)
    engines = {"generate eager": BuiltinEngine(eager_model, tok), "generate compiled": BuiltinEngine(compiled_model, tok)}
    t = time.perf_counter()
    same = [g.tokens for gs in engines["generate compiled"].generate(prompts, 8, length, seed=0) for g in gs] == \
        [g.tokens for gs in engines["generate eager"].generate(prompts, 8, length, seed=0) for g in gs]
    print(f"first compiled generate call (compiling): {time.perf_counter() - t:.1f} s; same tokens: {same}")

    def side(engine: BuiltinEngine):  # noqa: ANN202
        def run() -> dict:
            t = time.perf_counter()
            engine.generate(prompts, 8, length, seed=0)
            sec = time.perf_counter() - t
            return {"value": sec, "ms per decode step": 1000 * sec / max(engine.last_stats["steps"], 1)}
        return run
    return {name: side(e) for name, e in engines.items()}


GROUPS = {"warm-up": warmup_sides, "attention": attention_sides, "generate": generate_sides}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    rounds.add_arguments(ap)
    ap.add_argument("--only", default=",".join(GROUPS), help="comma-separated: " + ", ".join(GROUPS))
    args = ap.parse_args()
    for group in args.only.split(","):
        sides = GROUPS[group.strip()]()
        res = rounds.interleave(sides, rounds=args.rounds, threads=args.threads, warmup=True)
        names = list(sides)
        specs = [(names[i + 1], names[i], "value", None) for i in range(0, len(names), 2)]
        rounds.report(res, f"{group}: seconds per call", specs, lower_is_better=["value"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
