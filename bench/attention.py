"""Attention at the built-in model's sizes: scalerl's ``attend`` against PyTorch's SDPA, and a decode step's KV
reads against reading the same bytes alone (issue #31: what the step spends beyond its matmul floor).

Sides, each in interleaved rounds (``bench/rounds.py``), at the default model's heads (4 × 32) and batch (32
prompts × 8 samples):

  decode     one query per sequence over its cache's first ``--context`` slots, a key mask, no gradient: the
             attention of one layer in one decode step, its keys and values read from a cache as wide as the
             context (the engine's layout, rows × heads × slots × head size);
  layers     the same over the caches of all four layers in turn, as a decode step reads them: 4 × 2 × rows ×
             context × 128 floats, more than a CPU's caches hold, so read from memory;
  train      the prefixed training forward's attention (32 continuations of 48 tokens over 24 prompt slots and
             their own, the prompt-plus-causal mask) forward and backward.

Plain causal attention without a mask (the warm-up's) is PyTorch's kernel on both sides, so it is not a case here.

For ``layers`` a third side only reads the same keys and values (``read``: their sum): the time the memory takes
to deliver the bytes, which no attention kernel can beat. The matmul floor of ``bench/profile_step.py`` counts
none of this work (2·P FLOPs per generated token are the weights' alone).

    python bench/attention.py --rounds 5
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from collections.abc import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/rounds.py
import rounds  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from scalerl.models.tiny import attend  # noqa: E402

HEADS, HEAD_DIM, LAYERS, ROWS = 4, 32, 4, 256


def per_call(fn: Callable[[], object], seconds: float) -> float:
    """Mean seconds per call of ``fn`` over at least ``seconds`` (after two untimed calls)."""
    fn(), fn()
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fn()
        calls += 1
    return (time.perf_counter() - t0) / calls


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def cases(context: int) -> dict[str, Callable[[Callable, float], float]]:
    """Each case as a function of (attention function, seconds) -> seconds per call."""
    g = torch.Generator().manual_seed(0)
    width = context + 96  # the engine's cache: the prompts' slots and room for the completion
    caches = torch.randn(LAYERS, 2, ROWS, HEADS, width, HEAD_DIM, generator=g)
    q1 = torch.randn(ROWS, HEADS, 1, HEAD_DIM, generator=g)
    key_mask = (torch.rand(ROWS, 1, 1, context, generator=g) < 0.9) | (torch.arange(context) == context - 1)

    def decode(fn: Callable, seconds: float) -> float:
        k, v = caches[0, 0, :, :, :context], caches[0, 1, :, :, :context]
        with torch.no_grad():
            return per_call(lambda: fn(q1, k, v, key_mask), seconds)

    def layers(fn: Callable, seconds: float) -> float:
        def step() -> None:
            for layer in range(LAYERS):
                fn(q1, caches[layer, 0, :, :, :context], caches[layer, 1, :, :, :context], key_mask)
        with torch.no_grad():
            return per_call(step, seconds) / LAYERS

    n, c, p = 32, 48, 24
    prompt = torch.rand(n, 1, 1, p, generator=g) < 0.8
    causal = torch.ones(c, c, dtype=torch.bool).tril()
    train_mask = torch.cat((prompt.expand(n, 1, c, p), causal.expand(n, 1, c, c)), -1)
    tq, tk, tv = (torch.randn(n, HEADS, m, HEAD_DIM, generator=g, requires_grad=True) for m in (c, p + c, p + c))
    grad = torch.randn(n, HEADS, c, HEAD_DIM, generator=g)

    def train(fn: Callable, seconds: float) -> float:
        return per_call(lambda: fn(tq, tk, tv, train_mask).backward(grad), seconds)

    return {"decode": decode, "layers": layers, "train": train}


def read_layers(context: int, seconds: float) -> float:
    """Seconds per layer to read what ``layers`` reads (each layer's keys and values), summing them."""
    g = torch.Generator().manual_seed(0)
    caches = torch.randn(LAYERS, 2, ROWS, HEADS, context + 96, HEAD_DIM, generator=g)

    def step() -> None:
        for layer in range(LAYERS):
            caches[layer, :, :, :, :context].sum()
    return per_call(step, seconds) / LAYERS


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--context", type=int, default=64, help="cache slots a decode step attends to (default 64)")
    ap.add_argument("--seconds", type=float, default=1.0, help="timing per case and side in each round")
    rounds.add_arguments(ap)
    args = ap.parse_args(argv)
    if args.context < 1 or args.seconds <= 0:
        print("error: --context must be at least 1 and --seconds positive", file=sys.stderr)
        return 2
    timed = cases(args.context)

    def side(fn: Callable) -> Callable[[], dict[str, float]]:
        return lambda: {name: case(fn, args.seconds) * 1e6 for name, case in timed.items()}

    results = rounds.interleave({"scalerl attend": side(attend), "torch SDPA": side(sdpa),
                                 "read": lambda: {"layers": read_layers(args.context, args.seconds) * 1e6}},
                                rounds=args.rounds, threads=args.threads)
    keys = list(timed)
    rounds.report(results, f"microseconds per attention call ({ROWS} decode rows, context {args.context})",
                  [("scalerl attend", "torch SDPA", k, None) for k in keys]
                  + [("read", "scalerl attend", "layers", None)],
                  lower_is_better=keys)
    rounds.console.print("read / scalerl attend (layers): attend's time per layer over the time to read the same keys "
                         "and values (1 = as fast as the memory delivers them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
