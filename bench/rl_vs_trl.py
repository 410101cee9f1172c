"""RL throughput: scalerl (inline and local PipelineRL-k backends) against TRL's ``GRPOTrainer``, in one run.

Measures samples/s -- completions generated *and* trained on per second of wall-clock -- over the steps after
``--warmup-steps`` (default 1: process start-up, the first KV-cache allocation and lazy initialisation are not
timed), plus completion tokens/s and the mean completion length of each side. Prints a table and the ratios
scalerl / TRL (target >= 3x).

    python bench/rl_vs_trl.py [--steps 6] [--rounds 3] [--threads N] [--sizes 128x4,256x8] [--set key=value ...]

The systems run in interleaved rounds (inline, local, TRL, inline, ...; ``bench/rounds.py``): each figure is the
median [min-max] over rounds, each ratio is taken within a round, and a round that starts on a busy machine
(1-min load > 0.5) is flagged loudly.

``--set`` overrides the scalerl config (preset ``scalerl``); the TRL side is derived from the same resolved
config, so e.g. ``--set batch.prompts=8`` changes both.

Identical on both sides:
  * the network: TRL gets ``to_hf_llama`` of the scalerl model after the same cached supervised warm-up
    (``warmup.steps``), so both start from bit-identical weights (same d_model / layers / heads / vocab, fp32);
  * the vocabulary and prompt tokens: TRL's tokenizer is a ``PreTrainedTokenizerFast`` built here over the
    built-in tokenizer's vocabulary with the same greedy longest match and a BOS in front (checked on every
    training prompt before the run);
  * the prompt pool (the built-in task's training split), the batch (``batch.prompts`` x ``batch.generations``
    completions per step: TRL ``per_device_train_batch_size`` = P*G, ``num_generations`` = G,
    ``steps_per_generation`` = 1, no gradient accumulation: one generation and one optimizer step per step),
    temperature 1 over the full vocabulary (top_k 0, top_p 1), generation stops at EOS;
  * the hard cap on completion length: TRL ``max_completion_length`` = scalerl's ``max_new_tokens``;
  * the reward: the task's verifier, +-1 (``reward.correct`` / ``reward.incorrect``);
  * the loss family and optimiser: CISPO with the preset's eps_max (TRL ``loss_type="cispo"``,
    ``epsilon_high``), no KL (``beta=0``), batch-level reward scaling, AdamW with the config's lr, betas, eps,
    weight decay, linear warm-up then constant lr, gradient clipping; fp32 everywhere (TRL ``bf16=False``),
    no gradient checkpointing;
  * torch threads: ``--threads`` (default: all cores) for TRL and for scalerl inline; the local backend runs
    two processes (trainer, generator) with ``--threads // 2`` each, so the same cores in all;
  * seeds: ``seed`` of the config for both (sampling streams differ: the engines are different code).

Not identical (stated, not hidden):
  * scalerl runs the full ScaleRL recipe (§4): interruptions (§2, App. A.10) cut thinking at a drawn budget and force
    the end-of-thinking phrase (those forced tokens count as completion tokens here); TRL has no interruptions.
    Compare the mean completion lengths printed: tokens/s is the length-independent figure;
  * zero-variance filtering (§3.2, Fig. 6a) is OFF here (``algo.zero_variance_filter=false``): with it, scalerl would drop
    groups whose rewards are all equal from its update (and skip the optimizer step when every group is dropped,
    as happens at the warm-up policy's ~1% pass rate), while TRL trains on them with zero advantage; so every
    completion counted is trained on by both. ``--set algo.zero_variance_filter=true`` restores it; the "kept"
    column then shows the fraction scalerl trained on;
  * loss aggregation: scalerl prompt-level (§3.2, Fig. 14a), TRL CISPO token-level; No-Positive-Resampling (§3.2, Fig. 6b) picks
    scalerl's prompts, TRL shuffles; neither changes the work per step;
  * the local backend is PipelineRL-k (§3.1, the preset's k): generation overlaps training, and the generator may
    run up to k batches ahead of a slower trainer, so a window can include batches generated before it opened (at most one
    when generation is the bottleneck; the bias is fixed, so it shrinks relative to a longer ``--steps``);
  * scalerl writes metrics.jsonl each step (TensorBoard off); TRL keeps its default logging (every 10 steps,
    no reporters); no evaluation or checkpoint falls inside either timed window.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers / datasets / trl are imported
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/rounds.py, run as a script or loaded by path
import rounds  # noqa: E402

from scalerl.build import build_length_control, build_model, build_task
from scalerl.config import RunConfig, load_config
from scalerl.errors import UserError
from scalerl.models.tiny import to_hf_llama
from scalerl.models.tokenizer import CharTokenizer, hf_char_tokenizer  # noqa: F401  (examples/ import it from here)
from scalerl.models.warmup import warmup
from scalerl.models.registry import encode_prompt
from scalerl.pipeline.runner import train
from scalerl.runlog import read_metrics


@dataclasses.dataclass
class Throughput:
    """Work done in a timed window of ``steps`` RL steps."""

    system: str
    steps: int
    samples: int  # completions generated and trained on
    tokens: int  # completion tokens generated
    seconds: float
    kept: float | None = None  # fraction of samples left in the update after filtering (scalerl only)

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds

    @property
    def mean_length(self) -> float:
        return self.tokens / self.samples


def timed_window(system: str, step_ends: list[float], samples: list[int], tokens: list[int], warmup_steps: int,
                 kept: list[int] | None = None) -> Throughput:
    """Throughput over steps ``warmup_steps + 1 ..`` from per-step end times (seconds, any origin), samples and
    completion tokens: the clock starts when step ``warmup_steps`` ends."""
    if not len(step_ends) == len(samples) == len(tokens) or len(step_ends) <= warmup_steps:
        raise ValueError(f"{system}: {len(step_ends)} steps recorded, need more than {warmup_steps} warm-up steps")
    w = warmup_steps
    start = step_ends[w - 1] if w else 0.0
    n = sum(samples[w:])
    return Throughput(
        system=system,
        steps=len(step_ends) - w,
        samples=n,
        tokens=sum(tokens[w:]),
        seconds=step_ends[-1] - start,
        kept=sum(kept[w:]) / n if kept is not None else None,
    )


# ------------------------------------------------------------------------------------------------ scalerl


def bench_config(overrides: list[str], steps: int, backend: str, threads: int) -> RunConfig:
    """The ScaleRL preset for ``steps`` steps, zero-variance filter off and truncated samples trained on (TRL
    trains on every sample: equal work per step, see the module docstring), with no evaluation or checkpoint
    inside the run (only the runner's R0 evaluation before step 1 and the final one after the last step, both
    outside the timed window)."""
    return load_config("scalerl", None, [
        "tensorboard=false", f"eval.every={steps + 1}", f"checkpoint_every={steps + 1}", "eval.n_samples=1",
        "eval.n_prompts=16", "algo.zero_variance_filter=false", "algo.truncated=train", *overrides,
        f"steps={steps}", f"backend={backend}", f"threads={threads}",
    ])


def run_scalerl(cfg: RunConfig, warmup_steps: int, label: str) -> Throughput:
    with tempfile.TemporaryDirectory(prefix="scalerl-bench-") as out:
        train(cfg, out, show_progress=False)
        lines = [r for r in read_metrics(Path(out)) if "loss" in r]
    samples = [int(r["train/samples"]) for r in lines]
    return timed_window(
        label,
        [r["time/wall_s"] for r in lines],
        samples,
        [round(r["train/completion_len_mean"] * n) for r, n in zip(lines, samples)],
        warmup_steps,
        kept=[int(r["train/samples_kept"]) for r in lines],
    )


# ---------------------------------------------------------------------------------------------------- TRL


def warmed_policy(cfg: RunConfig, task: Any) -> torch.nn.Module:
    """The scalerl starting policy: fresh weights plus the cached supervised warm-up that ``train`` applies."""
    bundle = build_model(cfg.model, cfg.seed)
    if cfg.warmup.steps_for(bundle.pretrained) > 0:
        warmup(bundle.model, bundle.tokenizer, task, cfg.warmup.resolved(bundle.pretrained), seed=cfg.seed)
    return bundle.model


def run_trl(cfg: RunConfig, warmup_steps: int, threads: int, label: str = "TRL GRPOTrainer",
            instrument: Callable[[Any], None] | None = None) -> Throughput:
    """TRL's side; ``instrument(trainer)`` (``bench/profile_step.py``) may wrap the trainer before it runs."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from transformers.utils import logging as hf_logging
    from trl import GRPOConfig, GRPOTrainer

    hf_logging.set_verbosity_error()
    torch.set_num_threads(threads)
    task = build_task(cfg.task)
    problems = {p.id: p for p in task.train_problems()}
    tokenizer = hf_char_tokenizer(CharTokenizer())
    for p in problems.values():
        if tokenizer(p.prompt)["input_ids"] != encode_prompt(CharTokenizer(), p.prompt):
            raise RuntimeError(f"TRL tokenizer disagrees with the built-in one on prompt {p.prompt!r}")
    lengths: list[int] = []

    def task_reward(prompts: list, completions: list[str], completion_ids: list[list[int]], problem_id: list[str],
                    **_: Any) -> list[float]:
        lengths.extend(len(ids) for ids in completion_ids)
        return [cfg.reward.correct if task.grade(problems[i], c) else cfg.reward.incorrect
                for i, c in zip(problem_id, completions)]

    class StepClock(TrainerCallback):
        def __init__(self) -> None:
            self.ends: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
            self.ends.append(time.perf_counter())

    batch = cfg.batch.prompts * cfg.batch.generations
    o = cfg.optim
    clock = StepClock()
    # transformers 5 renamed gradient_checkpointing (TRL's default: on) to activation_checkpointing
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    ckpt_field = "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"
    no_checkpointing = {ckpt_field: False}
    with tempfile.TemporaryDirectory(prefix="trl-bench-") as out:
        args = GRPOConfig(
            output_dir=out, use_cpu=True, report_to=[], seed=cfg.seed, data_seed=cfg.seed,
            max_steps=cfg.steps, per_device_train_batch_size=batch, num_generations=cfg.batch.generations,
            steps_per_generation=1, gradient_accumulation_steps=1, num_iterations=1,
            max_completion_length=build_length_control(cfg).max_new_tokens,
            temperature=1.0, top_k=0, top_p=1.0, beta=0.0,
            loss_type="cispo", epsilon_high=float(cfg.algo.loss.params.eps_max), scale_rewards="batch",
            learning_rate=o.lr, warmup_steps=o.warmup_steps, lr_scheduler_type="constant_with_warmup",
            weight_decay=o.weight_decay, adam_beta1=o.betas[0], adam_beta2=o.betas[1], adam_epsilon=o.eps,
            max_grad_norm=o.grad_clip, bf16=False, save_strategy="no", eval_strategy="no", disable_tqdm=True,
            dataloader_num_workers=0, **no_checkpointing,
        )
        dataset = Dataset.from_list([{"prompt": p.prompt, "problem_id": p.id} for p in problems.values()])
        trainer = GRPOTrainer(model=to_hf_llama(warmed_policy(cfg, task)), reward_funcs=task_reward, args=args,
                              train_dataset=dataset, processing_class=tokenizer, callbacks=[clock])
        if instrument is not None:
            instrument(trainer)
        trainer.train()
    if len(lengths) != cfg.steps * batch:
        raise RuntimeError(f"TRL graded {len(lengths)} completions, expected {cfg.steps} steps x {batch}")
    return timed_window(label, clock.ends, [batch] * cfg.steps,
                        [sum(lengths[i * batch:(i + 1) * batch]) for i in range(cfg.steps)], warmup_steps)


# --------------------------------------------------------------------------------------------------- main


def figures(r: Throughput) -> dict[str, float]:
    out = {"samples/s": r.samples_per_s, "tokens/s": r.tokens_per_s, "mean len": r.mean_length}
    return out if r.kept is None else {**out, "kept": r.kept}


def parse_size(text: str) -> tuple[int, int]:
    """``"256x8"`` -> (d_model 256, 8 layers)."""
    d, _, layers = text.partition("x")
    return int(d), int(layers)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=6, help="RL steps per system and round, warm-up included")
    ap.add_argument("--warmup-steps", type=int, default=1, help="untimed steps at the start of each system")
    ap.add_argument("--sizes", default="128x4,256x8", help="model sizes d_modelxlayers, comma-separated")
    rounds.add_arguments(ap)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="scalerl config override (the TRL side follows it)")
    args = ap.parse_args()
    if args.steps <= args.warmup_steps:
        ap.error(f"--steps must exceed --warmup-steps ({args.warmup_steps})")
    try:
        sizes = [parse_size(s) for s in args.sizes.split(",")]
    except ValueError:
        ap.error(f"--sizes {args.sizes!r}: give d_modelxlayers, comma-separated, e.g. 128x4,256x8")

    try:
        for d_model, layers in sizes:
            overrides = [f"model.d_model={d_model}", f"model.n_layers={layers}", *args.overrides]
            inline = bench_config(overrides, args.steps, "inline", args.threads)
            local = bench_config(overrides, args.steps, "local", max(1, args.threads // 2))
            warmed_policy(inline, build_task(inline.task))  # fills the warm-up cache once, outside every timing
            names = ("scalerl inline", f"scalerl local (PipelineRL-{local.schedule.k})", "TRL GRPOTrainer")
            results = rounds.interleave({
                names[0]: lambda: figures(run_scalerl(inline, args.warmup_steps, names[0])),
                names[1]: lambda: figures(run_scalerl(local, args.warmup_steps, names[1])),
                names[2]: lambda: figures(run_trl(inline, args.warmup_steps, args.threads)),
            }, args.rounds, args.threads)
            rounds.report(
                results,
                f"RL throughput: {inline.batch.prompts} prompts x {inline.batch.generations} generations per step, "
                f"max {build_length_control(inline).max_new_tokens} new tokens, d_model {inline.model.d_model}, "
                f"{inline.model.n_layers} layers, {args.steps - args.warmup_steps} timed steps per run",
                [(names[0], names[2], "samples/s", 3.0), (names[1], names[2], "samples/s", 3.0),
                 (names[0], names[2], "tokens/s", None), (names[1], names[2], "tokens/s", None),
                 (names[1], names[0], "samples/s", 1.6)],
            )
    except UserError as exc:
        ap.exit(UserError.exit_code, f"error: {exc}\n")


if __name__ == "__main__":
    main()
