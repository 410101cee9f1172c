"""Built-in KV-cache engine vs ``transformers`` ``generate`` on the same network.

Both sample at temperature 1 over the full vocabulary with a KV cache, from the same left-padded prompts (the
built-in task's validation prompts), with the same weights (``to_hf_llama`` exports the tiny model exactly)
and exactly ``--new`` new tokens per sequence (EOS ignored on both sides, no interruptions). Prints tokens/s
of each and their ratio (target >= 1.5x on CPU), in interleaved rounds (``bench/rounds.py``)
after one untimed run of each.

    python bench/engine.py [--batch 64] [--new 128] [--rounds 3] [--threads N] [--d-model 128 --layers 4]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/rounds.py
import rounds  # noqa: E402
import torch  # noqa: E402

from scalerl.algo.length_control import LengthControl
from scalerl.config import ModelConfig
from scalerl.engines.builtin import BuiltinEngine
from scalerl.engines.runtime import left_pad
from scalerl.models.tiny import build_tiny, to_hf_llama
from scalerl.models.tokenizer import CharTokenizer
from scalerl.models.registry import encode_prompt
from scalerl.tasks.arithmetic import ArithmeticTask


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--new", type=int, default=128, help="new tokens per sequence")
    rounds.add_arguments(ap)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    args = ap.parse_args()

    tok = CharTokenizer()
    task = ArithmeticTask(seed=0, n_train=1, n_val=args.batch)
    prompts = [encode_prompt(tok, p.prompt) for p in task.val_problems()]
    cfg = ModelConfig(d_model=args.d_model, n_layers=args.layers, n_heads=args.heads,
                      max_seq_len=max(map(len, prompts)) + args.new)
    model = build_tiny(cfg, seed=0).eval()
    engine = BuiltinEngine(model, tok, fp32_head=True)
    length = LengthControl(max_new_tokens=args.new)
    hf = to_hf_llama(model)
    ids, mask = left_pad(prompts, tok.pad_id)

    def builtin() -> None:
        out = engine.generate(prompts, 1, length, seed=0, ignore_eos=True)
        assert all(len(s.tokens) == args.new for g in out for s in g)

    def transformers_generate() -> None:
        with torch.no_grad():
            out = hf.generate(
                input_ids=ids, attention_mask=mask.long(), do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                max_new_tokens=args.new, min_new_tokens=args.new, eos_token_id=None, pad_token_id=tok.pad_id,
                use_cache=True,
            )
        assert out.shape[1] == ids.shape[1] + args.new

    tokens = args.batch * args.new

    def rate(run) -> dict[str, float]:  # noqa: ANN001
        t0 = time.perf_counter()
        run()
        return {"tokens/s": tokens / (time.perf_counter() - t0)}

    res = rounds.interleave({"built-in (static KV cache)": lambda: rate(builtin),
                             "transformers generate": lambda: rate(transformers_generate)},
                            args.rounds, args.threads, warmup=True)
    n_params = sum(p.numel() for p in model.parameters())
    rounds.report(res, f"sampling {args.batch} x {args.new} new tokens, {n_params:,} params",
                  [("built-in (static KV cache)", "transformers generate", "tokens/s", 1.5)])

if __name__ == "__main__":
    main()
