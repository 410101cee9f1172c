"""The driver: one RL run from config to fitted curve (design.md data flow).

Per step ``s`` the driver (in the trainer's process):
  1. issues generation requests for every batch ``b`` the schedule lets start at the trainer's version
     (``schedule.min_version(b) <= version``), choosing their problems with the curriculum (§3.7);
  2. takes batch ``s`` from the backend, trains on it, updates the curriculum with its outcomes, and
     publishes the weights when the schedule says so (every step for PipelineRL, every ``k`` for PPO);
  3. logs metrics; every ``eval.every`` steps evaluates mean@n on the validation split and refits the
     compute-reward curve (the live forecast); every ``checkpoint_every`` steps writes a checkpoint.

The synchronous and the asynchronous paths are this same loop; only the backend differs. Under torchrun
(``WORLD_SIZE`` > 1) the loop runs on rank 0 and the trainer is sharded and data-parallel over every rank
(``pipeline/ranks.py``, docs/scale-out.md); the other ranks follow rank 0 and write nothing.
A checkpoint holds model, optimizer, RNG states, curriculum state, the compute meter, the requests issued
but not yet trained on, and the batches already generated for them, so ``--resume`` continues exactly:
the prompts consumed match an uninterrupted run and metrics continue without a gap.
"""

from __future__ import annotations

import os
import random
import shutil
import time
import zlib
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from scalerl.build import build_curriculum, build_downstream, build_length_control, build_model, build_task
from scalerl.engines.registry import check_engine, native_engine
from scalerl.compute import ComputeMeter
from scalerl.config import RunConfig, config_from_run_dir, to_yaml
from scalerl.errors import UserError
from scalerl.evaluate import evaluate
from scalerl.forecast import Forecaster
from scalerl.pipeline.backends import backend_devices, make_backend
from scalerl.pipeline.batch import Request, RolloutBatch
from scalerl.models.registry import prompt_encoder
from scalerl.pipeline.prepare import update_curriculum as _update_curriculum
from scalerl.pipeline.schedules import SCHEDULES
from scalerl.pipeline.ranks import Solo, follow, is_follower, lead, thread_split
from scalerl.progress import RunDisplay
from scalerl.tasks.base import Problem
from scalerl.runlog import CKPT_DIR, METRICS, RunLog, load_latest_checkpoint, read_metrics, save_checkpoint
from scalerl.atomic import remove_stale_temporaries, write_text
from scalerl.fsdp import launched_world


def batch_seed(run_seed: int, index: int) -> int:
    return zlib.crc32(f"{run_seed}:{index}".encode()) & 0x7FFFFFFF


def _rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


# what a resumed run may change: its budget and where/how it runs, never what it computes
RESUMABLE_FIELDS = ("steps", "max_minutes", "backend", "ray", "engine", "threads", "tensorboard", "devices")


def check_run_dir(cfg: RunConfig, out: Path, resume: bool) -> None:
    """A new run needs an unused directory; a resumed one needs its own config, changed only in
    ``RESUMABLE_FIELDS``."""
    out = Path(out)
    if resume:
        if not (out / "config.yaml").exists():
            raise UserError(f"--resume: {out} holds no run (no config.yaml); start it without --resume")
        saved = config_from_run_dir(out).model_dump(mode="json")
        new = cfg.model_dump(mode="json")
        changed = [k for k in new if k not in RESUMABLE_FIELDS and new[k] != saved.get(k)]
        if changed:
            raise UserError(
                f"--resume: {', '.join(changed)} differ from the run's config.yaml; a resumed run may change only "
                f"{', '.join(RESUMABLE_FIELDS)}"
            )
    elif (out / METRICS).exists() or (out / "checkpoints").exists():
        raise UserError(f"{out} already holds a run; pass --resume to continue it or choose another --out")


def train(cfg: RunConfig, out: str | Path, resume: bool = False, show_progress: bool = True) -> dict[str, Any] | None:
    """One run; returns the final fit summary. Under torchrun rank 0 drives the run with the trainer sharded
    over every rank, and the other ranks follow it, ignore ``cfg`` (rank 0's is the run's) and return None."""
    if launched_world() <= 1:
        return _drive(cfg, Path(out), resume, show_progress, Solo())
    if is_follower():
        follow()
        return None
    with lead() as ranks:
        return _drive(cfg, Path(out), resume, show_progress, ranks)


def _drive(cfg: RunConfig, out: Path, resume: bool, show_progress: bool, ranks: Solo) -> dict[str, Any]:
    check_run_dir(cfg, out, resume)
    fresh = not out.exists()  # a new run in a directory this call makes: a mistake found before step 1 removes it
    for directory in (out, out / CKPT_DIR):
        remove_stale_temporaries(directory)  # a killed run's half-written checkpoint or metrics rewrite
    progress = {"trained": False}
    try:
        return _run(cfg, out, resume, show_progress, ranks, progress)
    except UserError:
        if fresh and not progress["trained"]:
            shutil.rmtree(out, ignore_errors=True)
        raise


def check_context(bundle: Any, encode: Any, task: Any, length: Any, extra: Sequence[Problem] = ()) -> None:
    """A UserError before anything is written when the longest prompt (of the task's splits and ``extra``, the
    downstream sets) plus the length budget does not fit the model's context (the model says so only once a
    batch reaches it, after the run has started)."""
    check = getattr(bundle.model, "check_length", None)
    if check is None or length is None:
        return
    prompts = {p.prompt for p in [*task.train_problems(), *task.val_problems(), *extra]}
    longest = max((len(encode(text)) for text in prompts), default=0)
    check(longest + int(length.max_new_tokens))


def _run(
    cfg: RunConfig, out: Path, resume: bool, show_progress: bool, ranks: Solo, progress: dict[str, bool]
) -> dict[str, Any]:
    threads, gen_threads = thread_split(cfg, ranks.world)
    torch.set_num_threads(threads)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)

    task = build_task(cfg.task)
    downstream = build_downstream(cfg, task)
    bundle = build_model(cfg.model, cfg.seed)
    check_engine(cfg, bundle)  # the generators build it later, maybe in another process
    check_context(bundle, prompt_encoder(bundle), task, build_length_control(cfg),
                  [p for _, problems in downstream.values() for p in problems])
    model, tokenizer = bundle.model, bundle.tokenizer
    length = build_length_control(cfg, tokenizer)
    schedule = SCHEDULES.get(cfg.schedule.name, "schedule.name")(cfg.schedule.k)
    ckpt = load_latest_checkpoint(out) if resume else None
    warm_stats: dict[str, Any] = {}
    if ckpt is None and cfg.warmup.steps > 0 and hasattr(task, "demonstration"):
        from scalerl.models.warmup import warmup

        # nothing else of this run is running yet (no generator process): the warm-up may use this rank's cores
        torch.set_num_threads(cfg.threads or max(threads, (os.cpu_count() or 1) // ranks.world))
        warm_stats = warmup(model, tokenizer, task, cfg.warmup, seed=cfg.seed)
        torch.set_num_threads(threads)
    model.to(ranks.device(cfg))
    trainer, eval_model = ranks.trainer(model, cfg, schedule, ckpt["trainer"] if ckpt is not None else None)
    curriculum = build_curriculum(cfg, task)
    metered = backend_devices(cfg) + ranks.world - 1  # the generators and the trainer's ranks
    meter = ComputeMeter(
        n_params=int(bundle.spec.get("n_params", 0)),
        trainer_devices=ranks.world,
        scale=cfg.devices / metered if cfg.devices else 1.0,
    )
    forecaster = Forecaster(cfg.forecast)
    val = list(task.val_problems())[: cfg.eval.n_prompts or None]
    eval_engine = native_engine(bundle, eval_model, fp32_head=cfg.algo.fp32_head)
    encode = prompt_encoder(bundle)

    step = 0
    next_request = 0
    pending: dict[int, Request] = {}
    saved_batches: list[RolloutBatch] = []
    wall_offset = 0.0
    if ckpt is not None:
        curriculum.load_state_dict(ckpt["curriculum"])
        meter.load_state_dict(ckpt["compute"])
        forecaster.load_state_dict(ckpt["forecast"])
        _set_rng_state(ckpt["rng"])
        step, next_request, wall_offset = ckpt["step"], ckpt["next_request"], ckpt["wall_s"]
        pending = {int(r["index"]): Request(**r) for r in ckpt["pending"]}
        saved_batches = [RolloutBatch.from_payload(p) for p in ckpt["ready"]]
    log = RunLog(out, tensorboard=cfg.tensorboard, purge_step=step + 1 if resume else None)
    if resume:
        log.truncate(step if ckpt is not None else -1)

    backend = make_backend(cfg, schedule, ranks.weights(model), trainer.version, task=task, threads=gen_threads)
    write_text(out / "config.yaml", to_yaml(cfg))  # only once everything has started: no half-made run dir
    for batch in saved_batches:
        backend.put_ready(batch)
    ready_ids = {b.index for b in saved_batches}
    backend.submit([r for i, r in sorted(pending.items()) if i not in ready_ids])

    display = RunDisplay(cfg, enabled=show_progress)
    start = time.perf_counter() - wall_offset
    budget_s = cfg.max_minutes * 60 if cfg.max_minutes else None

    def wall() -> float:
        return time.perf_counter() - start

    def run_eval() -> None:
        t0 = time.perf_counter()
        ranks.refresh(eval_model, model)
        seed = batch_seed(cfg.seed, -1 - step)
        res = evaluate(eval_engine, encode, task, val, cfg.eval.n_samples, length, seed=seed)
        for name, (other, problems) in downstream.items():  # §5: downstream sets at the same steps
            res.update(evaluate(eval_engine, encode, other, problems, cfg.eval.n_samples, length, seed=seed,
                                prefix=f"downstream/{name}"))
        record: dict[str, Any] = {"step": step, "time/wall_s": wall(), **meter.metrics(), **res}
        record["timing/eval_s"] = time.perf_counter() - t0
        domains = {d: res[f"val/{d}/pass_rate"] for d in getattr(task, "domains", ()) if f"val/{d}/pass_rate" in res}
        record.update(forecaster.update(meter.device_hours, res["val/pass_rate"], domains))
        log.log(record)
        display.eval(record)

    def checkpoint() -> None:
        ready = [b for b in backend.settle(sorted(pending)) if b.index >= step]
        save_checkpoint(
            out,
            step,
            {
                "step": step,
                "next_request": next_request,
                "wall_s": wall(),
                "trainer": ranks.trainer_state(trainer),
                "curriculum": curriculum.state_dict(),
                "compute": meter.state_dict(),
                "forecast": forecaster.state_dict(),
                "rng": _rng_state(),
                "pending": [vars(r) for _, r in sorted(pending.items())],
                "ready": [b.to_payload() for b in ready],
                "config": cfg.model_dump(mode="json"),
            },
        )

    # a resumed run that already evaluated at its checkpoint step must not evaluate there again
    carried: dict[str, float] = {}
    last_eval_step = max((int(r["step"]) for r in read_metrics(out) if "val/pass_rate" in r), default=-1)
    try:
        with display:
            display.start(step, warm_stats)
            if step == 0 and ckpt is None:
                run_eval()  # R0: the reward at zero training compute
                last_eval_step = 0
            while step < cfg.steps and (budget_s is None or wall() < budget_s):
                issued = []
                while next_request < cfg.steps and schedule.min_version(next_request) <= trainer.version:
                    req = Request(next_request, curriculum.next_ids(cfg.batch.prompts), batch_seed(cfg.seed, next_request))
                    pending[next_request] = req
                    issued.append(req)
                    next_request += 1
                if issued:
                    backend.submit(issued)
                t0 = time.perf_counter()
                batch = backend.next_batch(step)
                t_batch = time.perf_counter()  # waiting for the batch is idle time: the generator meters its own
                stats = ranks.step(trainer, batch)
                _update_curriculum(curriculum, batch)
                t_publish = time.perf_counter()
                if trainer.version % schedule.group == 0:
                    backend.publish(ranks.weights(model), trainer.version)
                timing = {f"timing/{k}_s": v for k, v in {**batch.timings, **trainer.timings}.items()}
                # wait: the trainer blocked for the batch (inline: the whole generation; local: what overlap left)
                timing.update({"timing/wait_s": t_batch - t0, "timing/publish_s": time.perf_counter() - t_publish})
                prompt_tokens = int((batch.attention_mask.sum(1) - batch.completion_lengths).sum())
                meter.add_generation(batch.gen_seconds, prompt_tokens, int(batch.completion_lengths.sum()))
                meter.add_training(time.perf_counter() - t_batch, int(stats["train/tokens_kept"]))
                del pending[step]
                step += 1
                progress["trained"] = True
                record = {
                    "step": step,
                    "time/wall_s": wall(),
                    **meter.metrics(),
                    **stats,
                    "curriculum/retired": float(curriculum.retired),
                    "throughput/samples_per_s": batch.n / max(time.perf_counter() - t0, 1e-9),
                    "throughput/gen_seconds": batch.gen_seconds,
                    **timing,
                    **carried,  # the checkpoint written after the previous step
                }
                carried = {}
                log.log(record)
                log.consumed(step, batch.problem_ids)
                display.step(record)
                if step % cfg.eval.every == 0 or step == cfg.steps:
                    run_eval()
                    last_eval_step = step
                if step % cfg.checkpoint_every == 0 or step == cfg.steps:
                    t_ckpt = time.perf_counter()
                    checkpoint()
                    carried = {"timing/checkpoint_s": time.perf_counter() - t_ckpt}
            if last_eval_step != step:
                run_eval()
                checkpoint()
    finally:
        backend.close()
        log.close()
    return forecaster.write_final(out, title=cfg.name)  # fit.json and curve.png for the whole run
