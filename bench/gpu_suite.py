"""One GPU, one prepared script (issue #32): the trainer, the engines and the testbed measured on whatever device
this machine has (CUDA when available, else the CPU), in four parts, each in its own process with its own time
limit so that a slow part cannot starve the rest:

1. ``tests``: the GPU-marked tests (``pytest -m gpu`` over the test files that carry the marker: a trainer step on
   CUDA against the CPU step, the built-in engine on CUDA against the trainer, FSDP2 on NCCL with one rank, the
   warm-up on the GPU);
2. ``engines``: the built-in and the Hugging Face engines on real architectures at real size, randomly initialised
   from shipped configs (``bench/gpu_configs/``: SmolLM2-135M's shape, and Qwen2.5-0.5B's dimensions as a Llama),
   generating in bf16 and in fp32, FP32 LM head on and off (§3.2, Fig. 5b): tokens/s, and |Δ log p| between the engine's
   log-probs and the trainer's float32 recomputation on the same weights (mean and max over the sampled tokens);
3. ``step``: the RL step at GPU scale on the built-in testbed (the tiny model at ~100M parameters): seconds per
   step by phase (``timing/*`` of metrics.jsonl), model FLOP utilisation against the card's dense bf16 peak, with
   the inline and the local backend (generator and trainer on one GPU, in-flight weight updates, §3.1), and the
   in-flight update's cost in ms (the trainer's publish into the shared-memory channel, the generator's load);
4. ``scalerl``: a ScaleRL run of the testbed (the demo's config) for as many of the demo's steps as fit in the
   part's limit, its fit (``scalerl.curves`` through the run's forecaster) and the demo's three checks.

After each part, ``DIR/gpu_suite.json`` and ``DIR/gpu_suite.md`` (one table) are rewritten atomically, so a kill
still leaves the parts done so far; ``DIR/gpu_suite.log`` has every part's output; the ScaleRL run's curve and
metrics are copied to ``DIR/scalerl_curve.png`` and ``DIR/scalerl_metrics.jsonl``.

    python3 bench/gpu_suite.py --out DIR [--dry-run] [--budget-s 500]

``--dry-run`` runs every part at toy sizes on the CPU (about a minute; ``tests/test_gpu_suite.py`` runs it). A
part that fails records its error (its last lines) and the suite goes on; inside a part, each measurement that
fails is recorded as FAILED in its row and the part goes on (its status then reads ``errors``).

On the GPU machine (Python 3.12, PyTorch with CUDA, transformers, accelerate, scipy, matplotlib, rich, typer, pyyaml,
tensorboard, pytest, tqdm, numpy; no network) the scalerl package travels as source (the working tree, run with
``PYTHONPATH=$PWD``, no install) and the one dependency the image lacks, pydantic, travels as wheels with its own
requirements in ``.whl/`` (git-ignored), fetched here by ``bench/gpu_wheels.sh``, which runs:

    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl pydantic==2.13.4 pydantic-core==2.46.4 annotated-types==0.7.0 typing-inspection==0.4.2 \
        typing-extensions==4.16.0

Five wheels, 2.6 MiB together: pydantic-core 2,094,516 bytes (cp312 manylinux2014 x86-64), pydantic 472,262,
typing-extensions 45,571 (pydantic asks for >= 4.14.1; the image's version is not known here), typing-inspection
14,611, annotated-types 13,643. The device call: ``carry: [".whl"]``, ``timeout_s: 560``, command:

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=$PWD:/tmp/site && PYTHONUNBUFFERED=1 python3 bench/gpu_suite.py --out $OUT --budget-s 480

The budget's shares: 13% tests, 21% engines, 22% step, the rest (at least 44%) the ScaleRL run; each part's
unused time passes to the next, and every part's limit includes its own Python and CUDA start-up, so the whole
ends within ``--budget-s`` plus a few seconds.

Fresh-venv check of the carried list (2026-11-26, on the 2-core CPU machine, under load): a new venv
(``python3.11 -m venv``: no CPU torch wheel for CPython 3.12 is reachable from here) holding only the GPU machine's
packages (the torch 2.13 CPU wheel, then ``pip install transformers accelerate scipy matplotlib rich typer pyyaml
tensorboard pytest tqdm``, then pydantic, pydantic-core, annotated-types and typing-inspection uninstalled again:
this typer, 0.29, requires pydantic, and the image lists none; left over beside the GPU list: httpcore2, httpx2,
truststore, tzdata). Without the wheels ``import scalerl.config`` fails (no pydantic); with the same five wheels
for CPython 3.11 (``PY=3.11 bench/gpu_wheels.sh``) installed by the command above into ``/tmp/site`` and
``PYTHONPATH=$PWD:/tmp/site``, ``--dry-run --budget-s 480`` ran every part to ``ok`` (64 s and 67 s, two runs). The CPython 3.12
wheels install with that command under Python 3.12.1 here and ``import pydantic`` works from ``/tmp/site``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # scalerl from this checkout, also when run as a script without PYTHONPATH
from scalerl.atomic import write_text  # noqa: E402  (no torch: the suite's own process stays light)

CONFIGS = REPO / "bench" / "gpu_configs"

# (part, share of the budget); each part's unused time goes to the next, the last takes what is left
PARTS: list[tuple[str, float]] = [("tests", 0.13), ("engines", 0.21), ("step", 0.22), ("scalerl", 0.44)]
# dense bf16 tensor-core peak, FLOP/s, by a substring of torch.cuda.get_device_name (SXM figures; PCIe H100 lower)
PEAK_BF16 = [("H100 PCIe", 756e12), ("H100", 989e12), ("H200", 989e12), ("A100", 312e12)]


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def say(*parts: Any) -> None:
    print(*parts, flush=True)


# ------------------------------------------------------------------------------------------------- a part


@dataclass
class Part:
    """What a part's process records: table rows ``(measurement, value)`` and structured ``data``, written to
    ``path`` after every addition so that the suite keeps them if the part is killed at its limit."""

    name: str
    dry_run: bool
    limit_s: float
    path: Path
    out: Path  # the suite's output folder (files a part copies there come back from the GPU machine)
    t0: float = field(default_factory=time.monotonic)
    rows: list[list[str]] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def left(self) -> float:
        return self.limit_s - (time.monotonic() - self.t0)

    def row(self, measurement: str, value: str) -> None:
        say(f"  {measurement}: {value}")
        self.rows.append([measurement, value])
        self.save()

    def put(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.save()

    @contextmanager
    def attempt(self, what: str) -> Iterator[None]:
        """Run one measurement; if it fails, record the error (its last lines) and go on with the next."""
        try:
            yield
        except Exception:
            error = traceback.format_exc()
            print(error, flush=True)
            self.data.setdefault("errors", []).append({"what": what, "error": error[-3000:]})
            self.row(what, "FAILED: " + error.strip().splitlines()[-1])

    def save(self) -> None:
        write_text(self.path, json.dumps({"rows": self.rows, "data": self.data}, default=str))


def device_info() -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        return {"type": "cpu", "name": "cpu", "torch": torch.__version__, "peak_bf16_flops": None}
    name = torch.cuda.get_device_name(0)
    peak = next((p for key, p in PEAK_BF16 if key in name), None)
    mem = torch.cuda.get_device_properties(0).total_memory / 2**30
    return {"type": "cuda", "name": name, "memory_gib": round(mem, 1), "torch": torch.__version__,
            "cuda": torch.version.cuda, "peak_bf16_flops": peak}


def sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def fmt(x: float, digits: int = 3) -> str:
    return f"{x:.{digits}g}" if abs(x) < 1e4 else f"{x:,.0f}"


# ------------------------------------------------------------------------------------------------ 1. tests


def part_tests(part: Part) -> None:
    """``pytest -m gpu`` over the test files that use the marker (the others are not even collected)."""
    import xml.etree.ElementTree as ET

    files = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").glob("test_*.py") if "mark.gpu" in p.read_text())
    part.put("files", files)
    junit = part.path.with_suffix(".xml")
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", f"--junitxml={junit}", *files]
    say("  " + " ".join(cmd[1:]))
    done = subprocess.run(cmd, cwd=REPO, timeout=max(5.0, part.left() - 5))
    cases = ET.parse(junit).getroot().iter("testcase")
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for case in cases:
        mark = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        outcome = "passed" if mark is None else {"failure": "failed", "error": "failed"}.get(mark.tag, mark.tag)
        counts[outcome] += 1
        why = "" if mark is None or outcome == "skipped" else f": {(mark.get('message') or '')[:300]}"
        part.row(f"pytest {case.get('name')}", outcome + why)
    part.put("counts", counts)
    part.row("gpu-marked tests", ", ".join(f"{v} {k}" for k, v in counts.items()))
    if done.returncode not in (0, 5):  # 5: nothing collected
        raise SystemExit(f"pytest exited with {done.returncode}")


# ---------------------------------------------------------------------------------------------- 2. engines


class NumberTokenizer:
    """Token ids only (the engines decode text for the verifier; a benchmark has none): the ``Tokenizer``
    protocol with an empty ``decode``."""

    bos_id = None

    def __init__(self, vocab_size: int, eos_id: int) -> None:
        self.vocab_size, self.eos_id, self.pad_id = vocab_size, eos_id, 0

    def encode(self, text: str) -> list[int]:
        return []

    def decode(self, ids: list[int]) -> str:
        return ""


def _dry_llama() -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                       tie_word_embeddings=True, eos_token_id=2, bos_token_id=1)


def _rope_theta(cfg: Any) -> float:
    theta = getattr(cfg, "rope_theta", None)
    if theta is None:  # transformers >= 5 keeps it in rope_parameters
        theta = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
    return float(theta)


def _build(engine: str, cfg: Any, context: int, device: Any) -> Any:
    """The trainer's model (float32, weights rounded through bf16 so that both precisions hold the same values):
    a Hugging Face Llama from ``cfg`` for ``hf``, or the built-in model at the nearest shape for ``builtin``
    (its attention has as many key/value heads as query heads, and its SwiGLU width is 8/3 of d_model)."""
    import torch

    torch.manual_seed(0)
    if engine == "hf":
        from transformers import LlamaForCausalLM

        from scalerl.models.hf import HFPolicy

        with torch.device(device):
            model = HFPolicy(LlamaForCausalLM(cfg))
    else:
        from scalerl.models.tiny import TinyConfig, TinyLM

        tiny = TinyConfig(vocab_size=cfg.vocab_size, d_model=cfg.hidden_size, n_layers=cfg.num_hidden_layers,
                          n_heads=cfg.num_attention_heads, max_seq_len=context, rope_theta=_rope_theta(cfg),
                          norm_eps=cfg.rms_norm_eps)
        with torch.device(device):
            model = TinyLM(tiny)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    return model.eval()


def _in_dtype(model: Any, dtype: Any) -> Any:
    """A copy of ``model`` in ``dtype``, its rotary frequencies kept in float32 (as a model loaded in bf16 keeps
    them; ``.to`` would round Hugging Face's ``inv_freq`` buffers; the built-in model rebuilds its tables)."""
    out = copy.deepcopy(model).to(dtype)
    for (name, buf), (_, ref) in zip(out.named_buffers(), model.named_buffers()):
        if name.endswith("inv_freq"):
            buf.data = ref.data.clone()
    return out


def _engine(engine: str, model: Any, tok: Any, head: bool) -> Any:
    if engine == "hf":
        from scalerl.engines.hf import HFEngine

        return HFEngine(model, tok, fp32_head=head)
    from scalerl.engines.builtin import BuiltinEngine

    return BuiltinEngine(model, tok, fp32_head=head)


def part_engines(part: Part) -> None:
    import torch
    from transformers import LlamaConfig

    from scalerl.algo.length_control import LengthControl

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if part.dry_run:
        shapes = {"toy-llama": _dry_llama()}
        prompts_n, samples, prompt_len, new = 2, 2, 6, 6
    else:
        shapes = {name: LlamaConfig.from_json_file(CONFIGS / f"{name}.json")
                  for name in ("smollm2-135m", "qwen2.5-0.5b-llama")}
        prompts_n, samples, prompt_len, new = 16, 8, 32, 128
    part.put("sizes", {"prompts": prompts_n, "samples_per_prompt": samples, "prompt_tokens": prompt_len,
                       "new_tokens": new, "eos": "ignored"})
    length = LengthControl(max_new_tokens=new)
    for shape, cfg in shapes.items():
        gen = torch.Generator().manual_seed(1)
        prompts = torch.randint(3, cfg.vocab_size, (prompts_n, prompt_len), generator=gen).tolist()
        tok = NumberTokenizer(cfg.vocab_size, eos_id=int(cfg.eos_token_id))
        for engine in ("builtin", "hf"):
            if part.left() < 20:
                part.row(f"{engine} {shape}", "skipped: the part's time ran out")
                continue
            with part.attempt(f"{engine} {shape}"):
                trainer = _build(engine, cfg, prompt_len + new, device)
                n_params = sum(p.numel() for p in trainer.parameters())
                for dtype in ("bfloat16", "float32"):
                    gen_model = _in_dtype(trainer, getattr(torch, dtype))
                    for head in (True, False):
                        what = f"{engine} {shape} ({n_params / 1e6:.3g}M) {dtype} FP32 head {'on' if head else 'off'}"
                        if part.left() < 15:
                            part.row(what, "skipped: the part's time ran out")
                            continue
                        with part.attempt(what):
                            r = _measure(_engine(engine, gen_model, tok, head), trainer, prompts, samples, length)
                            r = {"engine": engine, "shape": shape, "params": n_params, "dtype": dtype,
                                 "fp32_head": head, **r}
                            part.put("results", [*part.data.get("results", []), r])
                            part.row(what, f"{fmt(r['tokens_per_s'])} tokens/s; |Δ log p| mean "
                                           f"{r['dlogp_mean']:.2e}, max {r['dlogp_max']:.2e}")
                    del gen_model
                del trainer
            if torch.cuda.is_available():
                torch.cuda.empty_cache()


def _measure(engine: Any, trainer: Any, prompts: list[list[int]], samples: int, length: Any) -> dict[str, float]:
    """tokens/s of one ``generate`` (after a short untimed one), and |Δ log p| of its sampled tokens against the
    trainer's float32 recomputation (``logprob_mismatch``, §3.2, Fig. 5b)."""
    from scalerl.algo.length_control import LengthControl
    from scalerl.engines.precision import logprob_mismatch

    engine.generate(prompts[:2], 2, LengthControl(max_new_tokens=4), seed=0, ignore_eos=True)
    sync()
    t0 = time.perf_counter()
    groups = engine.generate(prompts, samples, length, seed=0, ignore_eos=True)
    sync()
    seconds = time.perf_counter() - t0
    tokens = sum(len(s.tokens) for g in groups for s in g)
    width = len(prompts[0]) + length.max_new_tokens
    vocab = trainer.get_output_embeddings().weight.shape[0]
    rows = max(1, int(3e9 // (width * vocab * 4 * 3)))  # about 3 GB of float32 logits per forward at most
    d = logprob_mismatch(trainer, groups, rows_per_forward=rows).double()
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
            "dlogp_mean": float(d.mean()), "dlogp_max": float(d.max())}


# ------------------------------------------------------------------------------------------------- 3. step

STEP_MODEL = ["model.d_model=768", "model.n_layers=14", "model.n_heads=12"]  # ~99M parameters
STEP_DRY = ["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "batch.prompts=4", "batch.generations=4",
            "task.n_train=64", "task.n_val=8", "task.params.max_operands=5", "algo.length.params.think_lo=6",
            "algo.length.params.think_hi=10", "algo.length.params.answer_budget=4",
            "algo.length.params.max_new_tokens=36", "model.max_seq_len=96", "threads=1"]
# timing only: no warm-up (completions run to the caps, the costliest step), every group trained on
STEP_COMMON = ["warmup.steps=0", "algo.zero_variance_filter=false", "eval.every=100000", "eval.n_samples=1",
               "checkpoint_every=100000", "tensorboard=false"]
BF16 = ["optim.bf16_autocast=true", "engine.bf16_autocast=true"]


def _step_figures(lines: list[dict], n_params: int, peak: float | None) -> dict[str, float]:
    """Per-step means over the train lines after the first (start-up), from metrics.jsonl."""
    train = [r for r in lines if "loss" in r]
    steady = train[1:] if len(train) > 1 else train
    out: dict[str, float] = {"steps": len(train)}
    keys = sorted({k for r in steady for k in r if k.startswith("timing/")})
    for k in keys:
        out[k] = sum(r.get(k, 0.0) for r in steady) / len(steady)
    if len(train) > 1:
        dt = (train[-1]["time/wall_s"] - train[0]["time/wall_s"]) / (len(train) - 1)
        dflops = (train[-1]["compute/flops"] - train[0]["compute/flops"]) / (len(train) - 1)
        out["step_s"] = dt
        out["flops_per_step"] = dflops
        busy = sum(out.get(f"timing/{k}_s", 0.0) for k in ("logprob_forward", "backward", "optimizer"))
        tokens = sum(r.get("train/tokens_kept", 0.0) for r in steady) / len(steady)
        out["trainer_flops_per_s"] = 6 * n_params * tokens / busy if busy else 0.0
        out["step_flops_per_s"] = dflops / dt if dt else 0.0
        if peak:
            out["mfu_step"] = out["step_flops_per_s"] / peak
            out["mfu_trainer"] = out["trainer_flops_per_s"] / peak
    return out


def _update_cost(model: Any, device: Any, repeats: int) -> dict[str, float]:
    """The in-flight update (§3.1) as the local backend does it: the trainer publishes its state dict into the
    shared-memory ``WeightChannel``; the generator takes a snapshot between decode steps and copies it into its
    model on the device (``InFlightWeights.load_weights``)."""
    import torch

    from scalerl.engines.base import InFlightWeights
    from scalerl.pipeline.weights import WeightChannel

    channel = WeightChannel(model.state_dict(), ctx=torch.multiprocessing.get_context("spawn"))
    generator = InFlightWeights()
    generator.model, generator.version = copy.deepcopy(model).to(device), 0
    publish, load = [], []
    for version in range(1, repeats + 1):
        sync()
        t0 = time.perf_counter()
        channel.publish(model.state_dict(), version)
        t1 = time.perf_counter()
        new = channel.poll(generator.version)
        generator.load_weights(new[1], new[0])
        sync()
        publish.append(t1 - t0)
        load.append(time.perf_counter() - t1)
    return {"publish_ms": 1e3 * statistics.median(publish), "load_ms": 1e3 * statistics.median(load)}


def part_step(part: Part) -> None:
    import torch

    from scalerl.build import build_model
    from scalerl.config import load_config
    from scalerl.pipeline.runner import train
    from scalerl.runlog import read_metrics

    info = device_info()
    size = STEP_DRY if part.dry_run else STEP_MODEL
    steps = 2 if part.dry_run else 8
    n_params = int(build_model(load_config("scalerl", None, [*size]).model, 0).spec["n_params"])
    part.row("testbed model", f"{n_params / 1e6:.3g}M parameters ({', '.join(size[:3])})")
    runs = [("inline", "bf16", BF16), ("local", "bf16", BF16), ("inline", "fp32", [])]
    with tempfile.TemporaryDirectory() as tmp:
        for i, (backend, precision, sets) in enumerate(runs):
            name = f"{backend} {precision}"
            share = part.left() / (len(runs) - i)
            if share < 20:
                part.row(f"step, {name}", "skipped: the part's time ran out")
                continue
            cap = max(0.2, (share - 15) / 60)  # the RL phase; start-up, evaluations and the checkpoint besides
            cfg = load_config("scalerl", None, [*size, *STEP_COMMON, *sets, f"backend={backend}", f"steps={steps}",
                                                f"max_minutes={cap:.2f}", "eval.n_prompts=8"])
            with part.attempt(f"step, {name}"):
                out = Path(tmp) / name.replace(" ", "_")
                t0 = time.perf_counter()
                train(cfg, out, show_progress=False)
                fig = {**_step_figures(read_metrics(out), n_params, info["peak_bf16_flops"]),
                       "wall_s": time.perf_counter() - t0}
                part.put("runs", {**part.data.get("runs", {}), name: fig})
                _step_rows(part, name, fig, info)
    if part.left() > 10:
        with part.attempt("in-flight update"):
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = build_model(load_config("scalerl", None, [*size]).model, 0).model.to(device)
            cost = _update_cost(model, device, repeats=3 if part.dry_run else 5)
            part.put("update", cost)
            part.row("in-flight update (median)", f"trainer publish {cost['publish_ms']:.1f} ms, generator load "
                     f"{cost['load_ms']:.1f} ms ({n_params / 1e6:.3g}M fp32 parameters)")


def _step_rows(part: Part, name: str, fig: dict[str, float], info: dict[str, Any]) -> None:
    phases = ", ".join(f"{k[7:-2]} {v:.3f}" for k, v in fig.items() if k.startswith("timing/"))
    part.row(f"step, {name}: s/step ({fig['steps']} steps)", f"{fig.get('step_s', float('nan')):.3f} s; "
             f"phases (s): {phases}")
    if "mfu_step" in fig:
        part.row(f"step, {name}: MFU vs bf16 peak", f"whole step {100 * fig['mfu_step']:.2f}%, trainer "
                 f"(forward+backward+optimizer) {100 * fig['mfu_trainer']:.2f}%")
    else:
        part.row(f"step, {name}: FLOP/s", f"whole step {fmt(fig.get('step_flops_per_s', 0))}, trainer "
                 f"{fmt(fig.get('trainer_flops_per_s', 0))} (no bf16 peak known for {info['name']})")


# ---------------------------------------------------------------------------------------------- 4. scalerl


def _warm_up(cfg: Any) -> dict[str, Any]:
    """The run's supervised warm-up, as the runner does it (same base model, task and settings), on the run's
    device, into the warm-up cache (``$SCALERL_CACHE``): the run then loads it."""
    from scalerl.build import build_model, build_task
    from scalerl.device import resolve_device
    from scalerl.models.warmup import warmup

    bundle = build_model(cfg.model, cfg.base_seed)
    device = resolve_device(cfg.device)
    stats = warmup(bundle.model.to(device), bundle.tokenizer, build_task(cfg.task),
                   cfg.warmup.resolved(bundle.pretrained), seed=cfg.base_seed)
    return {"steps": stats.get("steps", 0), "seconds": stats["seconds"], "cached": stats.get("cached", False),
            "device": str(device)}


def part_scalerl(part: Part) -> None:
    import shutil

    from scalerl.commands.train import DEMO_STEPS, config_from_cli, demo_checks
    from scalerl.pipeline.runner import train

    sets = ["tensorboard=false"]
    if part.dry_run:
        sets += [*STEP_DRY, "warmup.steps=5", "eval.every=1", "steps=7"]  # 8 evaluations
    else:
        sets += [f"steps={DEMO_STEPS}"]
    cfg = config_from_cli("scalerl", None, sets)
    warm = _warm_up(cfg)  # into the warm-up cache, so that the RL phase's cap can count what is left after it
    part.put("warmup", warm)
    part.row("warm-up", f"{warm['steps']} steps in {warm['seconds']:.1f} s on {warm['device']}")
    # what the RL phase may take: the part's time less the run's start-up, the last evaluation and the final fit
    minutes = max(0.25, (part.left() - 40) / 60)
    cfg = config_from_cli("scalerl", None, [*sets, f"max_minutes={minutes:.2f}"])
    part.row("ScaleRL run", f"the demo's config, {cfg.steps} steps at most, RL capped at {minutes:.1f} min")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        summary = train(cfg, out, show_progress=False)
        from scalerl.runlog import read_metrics

        lines = read_metrics(out)
        trained = [r for r in lines if "loss" in r]
        part.put("steps", len(trained))
        part.row("RL steps done", f"{len(trained)} in {trained[-1]['time/wall_s']:.0f} s" if trained else "0")
        fit = (summary or {}).get("fit")
        part.put("fit", fit)
        part.put("extrapolation", (summary or {}).get("extrapolation"))
        part.row("fit", fit_text(fit) if fit else f"none: {(summary or {}).get('points', 0)} evaluations gave no fit")
        checks = [{"passed": ok, "check": what} for ok, what in demo_checks(summary or {})]
        if not checks:
            checks = [{"passed": False, "check": "a fit of the run's evaluations (none, so no check could run)"}]
        part.put("checks", checks)
        for c in checks:
            part.row("check", f"{'pass' if c['passed'] else 'FAIL'}: {c['check']}")
        cache = Path(os.environ.get("SCALERL_CACHE", "")) / "warmup"
        part.put("warmup_cache_files", len(list(cache.glob("*.pt"))) if cache.is_dir() else None)
        for name, target in (("curve.png", "scalerl_curve.png"), ("metrics.jsonl", "scalerl_metrics.jsonl")):
            if (out / name).exists():
                shutil.copy(out / name, part.out / target)


def fit_text(fit: dict[str, Any]) -> str:
    """A fit in ``fit.json`` form in one line: A with its interval, B, Cmid, R0 (a missing value as n/a)."""
    from scalerl.forecast import describe_fit

    def num(v: Any, spec: str) -> str:
        return "n/a" if v is None else format(v, spec)

    try:
        a = describe_fit(fit)
    except TypeError:  # no Cmid to compare the fit's window with
        a = f"A = {num(fit['A'], '.3f')} {fit['A_ci']}"
    return (f"{a}, B = {num(fit['B'], '.2f')}, Cmid = {num(fit['Cmid'], '.4g')} {fit['x']}, "
            f"R0 = {num(fit['R0'], '.3f')}, identified: {fit['identified']}")


PART_FUNCS: dict[str, Callable[[Part], None]] = {
    "tests": part_tests, "engines": part_engines, "step": part_step, "scalerl": part_scalerl,
}


def run_part_here(name: str, out: Path, result: Path, limit_s: float, dry_run: bool) -> None:
    """The part's own process: record the device, run the part."""
    if dry_run:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # toy sizes on the CPU, whatever the machine has
    part = Part(name, dry_run, limit_s, result, out)
    part.put("device", device_info())
    PART_FUNCS[name](part)


# ----------------------------------------------------------------------------------------------- the suite


def run_part(name: str, limit_s: float, args: argparse.Namespace, log: Any) -> dict[str, Any]:
    """Run one part in its own process group with a hard limit; its output goes to stdout and the log. Its
    result file and (unless ``SCALERL_CACHE`` is set) its warm-up cache live in a scratch folder removed after."""
    with tempfile.TemporaryDirectory(prefix=f"gpu_suite_{name}_") as scratch:
        return _run_part(name, limit_s, args, log, Path(scratch))


def _run_part(name: str, limit_s: float, args: argparse.Namespace, log: Any, scratch: Path) -> dict[str, Any]:
    result = scratch / "part.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--part", name, "--out", str(args.out),
           "--result", str(result), "--limit-s", f"{limit_s:.1f}"] + (["--dry-run"] if args.dry_run else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.setdefault("SCALERL_CACHE", str(scratch / "cache"))
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    tail: list[str] = []

    def pump() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            line = line.rstrip("\n")
            tail.append(line)
            del tail[:-40]
            print(f"[{name}] {line}", flush=True)
            log.write(f"[{name}] {line}\n")
            log.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    status = "ok"
    try:
        rc = proc.wait(timeout=limit_s)
        if rc != 0:
            status = "failed"
    except subprocess.TimeoutExpired:
        status, rc = "timeout", None
        for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue
    else:
        try:  # a generator process left behind in the part's group
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    reader.join(timeout=5)
    recorded = json.loads(result.read_text()) if result.exists() else {"rows": [], "data": {}}
    if status == "ok" and recorded["data"].get("errors"):
        status = "errors"  # the part ran to its end, and some of its measurements failed (rows say which)
    out = {"status": status, "seconds": round(time.monotonic() - t0, 1), "limit_s": round(limit_s, 1),
           "returncode": rc, **recorded}
    if status != "ok":
        out["error"] = "\n".join(tail[-15:])
    return out


def markdown(report: dict[str, Any]) -> str:
    dev = report.get("device") or {}
    head = (f"GPU suite ({'dry run, ' if report['dry_run'] else ''}{dev.get('name', '?')}, torch {dev.get('torch', '?')}"
            f", started {report['started']}, budget {report['budget_s']} s)\n\n")
    lines = ["| part | measurement | value |", "|---|---|---|"]
    for name, part in report["parts"].items():
        state = part["status"] + (f" ({part['seconds']} s of {part['limit_s']} s)" if "seconds" in part else "")
        lines.append(f"| {name} | status | {state} |")
        for measurement, value in part.get("rows", []):
            lines.append(f"| {name} | {measurement} | {value.replace('|', chr(92) + '|')} |")
        if part.get("error"):
            last = part["error"].strip().splitlines()[-1:] or [""]
            lines.append(f"| {name} | error (last line) | {last[0].replace('|', chr(92) + '|')[:300]} |")
    return head + "\n".join(lines) + "\n"


def save(out: Path, report: dict[str, Any]) -> None:
    write_text(out / "gpu_suite.json", json.dumps(report, indent=1, default=str))
    write_text(out / "gpu_suite.md", markdown(report))


def suite(args: argparse.Namespace) -> int:
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"suite": "bench/gpu_suite.py", "started": now(), "dry_run": args.dry_run,
                              "budget_s": args.budget_s, "device": None,
                              "parts": {name: {"status": "pending"} for name, _ in PARTS}}
    save(out, report)
    t0 = time.monotonic()
    with open(out / "gpu_suite.log", "a") as log:
        for i, (name, _) in enumerate(PARTS):
            later = sum(share for _, share in PARTS[i + 1 :]) * args.budget_s
            limit = args.budget_s - (time.monotonic() - t0) - later
            if limit < 10:
                report["parts"][name] = {"status": "skipped", "rows": [], "error": "no time left in the budget"}
                save(out, report)
                continue
            say(f"== part {i + 1}/{len(PARTS)}: {name} (limit {limit:.0f} s, {now()})")
            report["parts"][name] = run_part(name, limit, args, log)
            report["device"] = report["device"] or report["parts"][name].get("data", {}).get("device")
            report["finished"] = now()
            save(out, report)
            say(f"== part {name}: {report['parts'][name]['status']} in {report['parts'][name]['seconds']} s")
    say(markdown(report))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for gpu_suite.json, gpu_suite.md and the log")
    ap.add_argument("--dry-run", action="store_true", help="every part at toy sizes on the CPU")
    ap.add_argument("--budget-s", type=float, default=500.0, help="wall-clock budget of all parts together")
    ap.add_argument("--part", choices=list(PART_FUNCS), help=argparse.SUPPRESS)
    ap.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--limit-s", type=float, default=60.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.budget_s < 40:
        ap.error("--budget-s: at least 40 seconds")
    if args.part:
        run_part_here(args.part, args.out, args.result, args.limit_s, args.dry_run)
        return 0
    return suite(args)


if __name__ == "__main__":
    sys.exit(main())
