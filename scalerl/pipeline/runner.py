"""The driver: one RL run from config to fitted curve (docs/architecture.md data flow).

Per step ``s`` the driver (in the trainer's process):
  1. issues generation requests for every batch ``b`` the schedule lets start at the trainer's version
     (``schedule.min_version(b) <= version``), choosing their problems with the curriculum (§3.2, Fig. 6b);
  2. takes batch ``s`` from the backend, trains on it, updates the curriculum with its outcomes, and
     publishes the weights when the schedule says so (every step for PipelineRL, every ``k`` for PPO);
  3. logs metrics; every ``eval.every`` steps evaluates mean@n on the validation split and refits the
     compute-reward curve (the live forecast), on a copy of the weights beside the next steps with
     ``eval.overlap`` (logged when done, at the latest before the next evaluation or a later checkpoint);
     every ``checkpoint_every`` steps writes a checkpoint.

The synchronous and the asynchronous paths are this same loop; only the backend differs. Under torchrun
(``WORLD_SIZE`` > 1) the loop runs on rank 0 and the trainer is sharded and data-parallel over every rank
(``pipeline/ranks.py``, docs/scale-out.md); the other ranks follow rank 0 and write nothing.
The loop is ``RunLoop`` (the step, evaluation with the live forecast, checkpoints, one metrics row) over a
``RunState`` (``pipeline/state.py``), whose one ``save`` and one ``load`` are the checkpoint. A checkpoint
holds model, optimizer, RNG states, curriculum state, the compute meter, the requests issued
but not yet trained on, and the batches already generated for them, so ``--resume`` continues exactly:
the prompts consumed match an uninterrupted run and metrics continue without a gap.
"""

from __future__ import annotations

import os
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol, Sequence

import torch
from torch import nn

from scalerl.algo.length_control import LengthControl
from scalerl.build import build_curriculum, build_downstream, build_length_control, build_model, build_task
from scalerl.engines.registry import check_engine
from scalerl.compute import ComputeMeter
from scalerl.config import RunConfig, config_from_run_dir, to_yaml
from scalerl.errors import RunFileNotWritten, RunStopped, UserError
from scalerl.evaluate import Evaluation, build_evaluation, eval_seed
from scalerl.forecast import Forecaster
from scalerl.pipeline.background import EXIT_WAIT_S, BackgroundCall
from scalerl.pipeline.backends import backend_devices, make_backend
from scalerl.pipeline.ready import Backend
from scalerl.models.registry import prompt_encoder
from scalerl.pipeline.prepare import StageConfig, update_curriculum as _update_curriculum
from scalerl.pipeline.schedules import Schedule
from scalerl.pipeline.ranks import Solo, follow, is_follower, lead, setup_rank
from scalerl.pipeline.state import RunState
from scalerl.progress import RunDisplay
from scalerl.rollout import RolloutBatch
from scalerl.runcard import write_run_card
from scalerl.tasks.base import Problem
from scalerl.tasks.grading import FailureWarnings, check_gradable, failure_metrics
from scalerl.timing import Stopwatch, timed, timing_metrics
from scalerl.runlog import CKPT_DIR, METRICS, RunLog, load_latest_checkpoint
from scalerl.atomic import remove_stale_temporaries, write_text
from scalerl.fsdp import launched_world
from scalerl.trainer import Trainer


# what a resumed run may change: its budget and where/how it runs, never what it computes
RESUMABLE_FIELDS = ("steps", "max_minutes", "max_device_hours", "backend", "ray", "engine", "threads", "tensorboard",
                    "devices", "faults")


class StopVerdict(Protocol):
    """What a stop rule says after an evaluation: whether to stop, why, how far the run is from each of its
    conditions (``text``, for the display) and the numbers behind it (``metrics``, logged with the evaluation)."""

    stop: bool
    reason: str
    text: str
    metrics: dict[str, float]


class StopRule(Protocol):
    """Asked after every evaluation whether the run should stop before its budget (``scalerl train --stop-when``,
    :mod:`scalerl.experiments.stopping`); it reads the run's config and state (the live forecaster's points)."""

    def __call__(self, cfg: RunConfig, state: RunState) -> StopVerdict: ...


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


def train(
    cfg: RunConfig, out: str | Path, resume: bool = False, show_progress: bool = True, stop_rule: StopRule | None = None,
) -> dict[str, Any] | None:
    """One run; returns the final fit summary (with ``stopped``: the reason, when ``stop_rule`` ended it before its
    budget). Under torchrun rank 0 drives the run with the trainer sharded over every rank, and the other ranks
    follow it, ignore ``cfg`` (rank 0's is the run's) and return None."""
    if launched_world() <= 1:
        return _drive(cfg, Path(out), resume, show_progress, Solo(), stop_rule)
    if is_follower():
        follow()
        return None
    with lead() as ranks:
        return _drive(cfg, Path(out), resume, show_progress, ranks, stop_rule)


def _drive(
    cfg: RunConfig, out: Path, resume: bool, show_progress: bool, ranks: Solo, stop_rule: StopRule | None = None,
) -> dict[str, Any]:
    check_run_dir(cfg, out, resume)
    fresh = not out.exists()  # a new run in a directory this call makes: a mistake found before step 1 removes it
    for directory in (out, out / CKPT_DIR):
        remove_stale_temporaries(directory)  # a killed run's half-written checkpoint or metrics rewrite
    progress = {"trained": False}
    try:
        return _run(cfg, out, resume, show_progress, ranks, progress, stop_rule)
    except UserError as exc:
        # a mistake found before step 1 leaves nothing; a run stopped by a failing part keeps its checkpoint
        if fresh and not progress["trained"] and not isinstance(exc, RunStopped):
            shutil.rmtree(out, ignore_errors=True)
        raise


def check_context(
    bundle: Any, encode: Any, task: Any, length: LengthControl, extra: Sequence[Problem] = ()
) -> None:
    """A UserError before anything is written when the longest prompt (of the task's splits and ``extra``, the
    downstream sets) plus the length budget does not fit the model's context (the model says so only once a
    batch reaches it, after the run has started)."""
    check = getattr(bundle.model, "check_length", None)
    if check is None or length is None:
        return
    prompts = {p.prompt for p in [*task.train_problems(), *task.val_problems(), *extra]}
    longest = max((len(encode(text)) for text in prompts), default=0)
    check(longest + int(length.max_new_tokens))


def build_parts(cfg: RunConfig, bundle: Any = None, task: Any = None) -> tuple[Any, dict[str, Any], Any]:
    """The run's task, downstream sets and model bundle (``bundle``: one already built from ``cfg.model``; ``task``:
    one already built from ``cfg.task``), checked before anything is written: the task's parameters and data files,
    the engine, and the longest prompt plus the length budget against the model's context. A mistake is a
    UserError. ``scalerl sweep`` calls it for every run before the first one starts."""
    task = task if task is not None else build_task(cfg.task)
    downstream = build_downstream(cfg, task)
    bundle = bundle if bundle is not None else build_model(cfg.model, cfg.base_seed)
    check_engine(cfg, bundle)  # the generators build it later, maybe in another process
    check_context(bundle, prompt_encoder(bundle), task, build_length_control(cfg, bundle.tokenizer),
                  [p for _, problems in downstream.values() for p in problems])
    return task, downstream, bundle


def _run(
    cfg: RunConfig, out: Path, resume: bool, show_progress: bool, ranks: Solo, progress: dict[str, bool],
    stop_rule: StopRule | None = None,
) -> dict[str, Any]:
    threads, gen_threads, schedule = setup_rank(cfg, ranks.world)
    task, downstream, bundle = build_parts(cfg)
    model, tokenizer = bundle.model, bundle.tokenizer
    ckpt = load_latest_checkpoint(out) if resume else None
    warm_stats: dict[str, Any] = {}
    model.to(ranks.device(cfg))  # the warm-up trains on the run's device (a GPU when there is one)
    warm_cfg = cfg.warmup.resolved(bundle.pretrained)  # pretrained weights: no warm-up unless warmup.steps asks
    if ckpt is None and warm_cfg.steps and hasattr(task, "demonstration"):
        from scalerl.models.warmup import warmup

        # nothing else of this run is running yet (no generator process): the warm-up may use this rank's cores
        torch.set_num_threads(cfg.threads or max(threads, (os.cpu_count() or 1) // ranks.world))
        warm_stats = warmup(model, tokenizer, task, warm_cfg, seed=cfg.base_seed, encode=prompt_encoder(bundle))
        torch.set_num_threads(threads)
    overlap = cfg.eval.overlap and stop_rule is None  # a stop rule reads each evaluation before the next step
    trainer, eval_model = ranks.trainer(model, cfg, ckpt["trainer"] if ckpt is not None else None,
                                        separate_eval=overlap)
    held = cfg.devices or backend_devices(cfg) + ranks.world - 1  # the generators and the trainer's ranks
    state = RunState(
        curriculum=build_curriculum(cfg, task),
        meter=ComputeMeter(n_params=int(bundle.spec.get("n_params", 0)), devices=held),
        forecaster=Forecaster(cfg.forecast),
    )
    evaluation = build_evaluation(cfg, bundle, eval_model, task, downstream)
    if ckpt is not None:
        state.load(ckpt)
    # the generators first: a backend that cannot start (a Ray cluster out of reach) leaves no run directory
    backend = make_backend(cfg, schedule, ranks.weights(model), trainer.version, task=task, threads=gen_threads)
    try:
        # resumed: the lines the checkpoint knows are kept (its steps, and the evaluations its live forecast
        # holds); ``log.unlogged``: evaluations logged after the checkpoint was written, not in its live forecast
        log = RunLog(out, tensorboard=cfg.tensorboard,
                     resume=((state.step, len(state.forecaster.x)) if ckpt is not None else (-1, 0)) if resume else None)
    except BaseException:
        backend.close()
        raise
    unlogged = log.unlogged
    write_text(out / "config.yaml", to_yaml(cfg))  # only once everything has started: no half-made run dir
    for batch in state.ready:
        backend.put_ready(batch)
    backend.submit(state.unready())

    loop = RunLoop(cfg, out, ranks, state, schedule, trainer, model, eval_model, evaluation, backend, log,
                   RunDisplay(cfg, enabled=show_progress), progress, stop_rule=stop_rule, overlap=overlap)
    try:
        with loop.display:
            loop.run(warm_stats, fresh=ckpt is None, evaluate_first=ckpt is not None and state.step in unlogged)
    except BaseException:
        loop.abandon()
        raise
    finally:
        backend.close()
        log.close()
    # fit.json and curve.png for the whole run, with why the stop rule ended it (the run card says so too)
    summary = state.forecaster.write_final(out, title=cfg.name, stopped=loop.stopped)
    if loop.stopped is not None:
        summary["stopped"] = loop.stopped
    write_run_card(out)  # README.md: what was done and how it came out (scalerl/runcard.py)
    return summary


@dataclass(frozen=True)
class PendingEval:
    """An evaluation running beside the steps: the metrics row and compute of the step it evaluates, the call, and
    the seconds its weight refresh took."""

    row: dict[str, Any]
    device_hours: float
    call: BackgroundCall
    refresh_seconds: float


@dataclass
class RunLoop:
    """Rank 0's loop over the steps: the step, evaluation with the live forecast, checkpoints, and the
    metrics row each of them logs."""

    cfg: RunConfig
    out: Path
    ranks: Solo
    state: RunState
    schedule: Schedule
    trainer: Trainer
    model: nn.Module
    eval_model: nn.Module
    evaluation: Evaluation
    backend: Backend
    log: RunLog
    display: RunDisplay
    progress: dict[str, bool]  # "trained": whether this call trained a step (a failed fresh run is removed)
    carried: dict[str, float] = field(default_factory=dict)  # the checkpoint written after the previous step
    grader_warnings: FailureWarnings = field(default_factory=FailureWarnings)
    stop_rule: StopRule | None = None  # asked after every evaluation whether to stop before the budget
    stopped: str | None = None  # why the stop rule ended the run (None: it ran to its budget)
    overlap: bool = False  # evaluate beside the next steps (eval_model is a copy of the trained model)
    pending: PendingEval | None = None  # the evaluation running beside the steps, not yet logged

    def __post_init__(self) -> None:
        self.stage = StageConfig.of(self.cfg.algo, self.schedule)  # what the driver does to a batch before training

    def within_budget(self) -> bool:
        """Below every budget the config sets: ``steps``, ``max_minutes`` of wall clock, ``max_device_hours`` of
        compute (the curves' x-axis); and not stopped by the stop rule."""
        cfg, state = self.cfg, self.state
        return (state.step < cfg.steps and self.stopped is None
                and (cfg.max_minutes is None or state.wall() < cfg.max_minutes * 60)
                and (cfg.max_device_hours is None or state.meter.device_hours < cfg.max_device_hours))

    def run(self, warm_stats: dict[str, Any], fresh: bool, evaluate_first: bool = False) -> None:
        """Steps until a budget ends the run (:meth:`within_budget`); evaluates at step 0 (R0, the reward at zero
        training compute), every ``eval.every`` steps and at the end; checkpoints every ``checkpoint_every`` steps
        and at the end, so that a run stopped at a compute budget resumes from where it stopped. With
        ``evaluate_first`` (resumed: the run had evaluated its checkpoint's step after writing the checkpoint) it
        evaluates that step again first."""
        cfg, state = self.cfg, self.state
        # a resumed run that already evaluated at its checkpoint step must not evaluate there again; one whose
        # evaluation there was still running beside the steps when it stopped evaluates it now
        last_eval_step = max((int(r["step"]) for r in self.log.kept if "val/pass_rate" in r), default=-1)
        last_ckpt_step = state.step  # fresh: nothing trained yet; resumed: its checkpoint's step
        state.start_clock()
        self.display.start(state.step, warm_stats)
        if (state.step == 0 and fresh) or (last_eval_step < state.step
                                           and (state.step % cfg.eval.every == 0 or evaluate_first)):
            self.evaluate()
            last_eval_step = state.step
        state.meter.start()  # compute: every device held x this wall clock, less the pauses below
        try:
            while self.within_budget():
                self.step()
                if state.step >= cfg.steps:  # all its steps done: it trains on nothing generated after them, so the
                    state.meter.stop()  # last evaluation's and checkpoint's waits for the generators are not compute
                if state.step % cfg.eval.every == 0 or state.step == cfg.steps:
                    self.evaluate()
                    last_eval_step = state.step
                if state.step % cfg.checkpoint_every == 0 or state.step == cfg.steps:
                    phases: dict[str, float] = {}
                    with timed(phases, "checkpoint"):
                        self.checkpoint()
                    last_ckpt_step = state.step
                    self.carried = timing_metrics(phases)
        except RunFileNotWritten:  # a checkpoint or log line could not be written: no checkpoint tried on the way out
            raise
        except RunStopped:  # a part that keeps failing: keep every step trained so far, then stop
            self.collect(before_step=state.step)
            self.state.save(self.out, self.ranks.trainer_state(self.trainer),
                            [self.backend.ready[i] for i in sorted(self.backend.ready)], cfg.model_dump(mode="json"))
            raise
        # a run stopped before its steps (a compute or time budget, a stop rule) keeps the trainer's next batch in
        # its checkpoint: the last evaluation's and checkpoint's wait for it is metered as the loop's are, or the
        # resumed run would train on it free
        if last_eval_step != state.step:
            self.evaluate()
        self.collect()
        if last_ckpt_step != state.step:
            self.checkpoint()
        state.meter.stop()

    def step(self) -> None:
        """Issue the requests the schedule allows (§3.1), train on batch ``step``, update the curriculum
        (§3.2, Fig. 6b), publish the weights when the schedule says so, meter the compute, and log the row."""
        cfg, state, backend, trainer = self.cfg, self.state, self.backend, self.trainer
        issued = state.issue(self.schedule, trainer.version, cfg.steps, cfg.batch.prompts, cfg.seed)
        if issued:
            backend.submit(issued)
        phases: dict[str, float] = {}
        step_clock = Stopwatch().start()
        # wait: the trainer blocked for the batch (inline: the whole generation; local: what overlap left); idle
        # time, on the wall clock the meter charges
        with timed(phases, "wait"):
            batch = backend.next_batch(state.step)
        train_clock = Stopwatch().start()
        ungraded = list(batch.ungraded.values())  # samples whose grader failed: incorrect, with the reason
        check_gradable(state.step + 1, batch.n, ungraded, cfg.faults.max_ungraded_fraction)  # before training
        if (warning := self.grader_warnings.check(state.step + 1, batch.n, ungraded)) is not None:
            print(warning, file=sys.stderr, flush=True)
        stats = self.ranks.step(trainer, batch, self.stage)
        _update_curriculum(state.curriculum, batch)
        with timed(phases, "publish"):
            if trainer.version % self.schedule.group == 0:
                backend.publish(self.ranks.weights(self.model), trainer.version)
        timing = timing_metrics(batch.timings, trainer.timings, phases)
        state.meter.add_generation(batch.gen_seconds, batch.prompt_tokens(), int(batch.completion_lengths.sum()))
        state.meter.add_training(train_clock.stop(), int(stats["train/tokens_kept"]))
        state.trained()
        self.progress["trained"] = True
        record = self.row(
            stats,
            {
                "curriculum/retired": float(state.curriculum.retired),
                "throughput/samples_per_s": batch.n / max(step_clock.stop(), 1e-9),
                "throughput/gen_seconds": batch.gen_seconds,
            },
            timing,
            self.backend.faults(),
            failure_metrics(ungraded),
            self.carried,
        )
        self.carried = {}
        self.log.log(record)
        self.log.consumed(state.step, batch.problem_ids)
        self.display.step(record)

    def evaluate(self) -> None:
        """Evaluate the trainer's weights and refit the compute-reward curve on the result (§2.1, the live
        forecast). With :attr:`overlap` the evaluation runs on a copy of the weights beside the next steps and is
        logged, with the step, wall clock and compute it was started at, when :meth:`collect` finds it done;
        otherwise the steps wait for it (its row: the wall clock after it). Waiting for an evaluation is a pause
        (:meth:`paused`)."""
        self.collect()
        with self.paused(hold=not self.overlap):  # overlapped: a pause of a few milliseconds, to copy the weights
            clock = Stopwatch().start()
            self.ranks.refresh(self.eval_model, self.model)
            seed = eval_seed(self.cfg.seed, self.state.step)
            if self.overlap:
                # at the lowest CPU priority (Linux): it takes the cycles the steps leave idle (the trainer waiting
                # for the generators), so it slows them, and the compute metered for them, as little as it can
                call = BackgroundCall(self.evaluation, seed, name="scalerl-eval", nice=19)
                self.pending = PendingEval(self.row(), self.state.meter.device_hours, call, clock.stop())
                return
            res = self.evaluation(seed)
            row, hours, seconds = self.row(), self.state.meter.device_hours, clock.stop()
        self._log_eval(row, hours, res, seconds)

    def abandon(self) -> None:
        """Stop the evaluation running beside the steps, unlogged: the run is ending by an exception (a resumed run
        evaluates that step again). Left running, it went on after ``train`` had raised, beside a sweep's next run."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.call.stop(EXIT_WAIT_S)

    def collect(self, before_step: int | None = None) -> None:
        """Wait for the evaluation running beside the steps (a pause) and log it; with ``before_step``, only one
        started before that step (a checkpoint at a later step must not be written before the evaluation it
        follows is logged: a run resumed from it would never evaluate there)."""
        pending = self.pending
        if pending is None or (before_step is not None and pending.row["step"] >= before_step):
            return
        self.pending = None
        with self.paused(hold=not pending.call.done()):
            res = pending.call.result()
        self._log_eval(pending.row, pending.device_hours, res, pending.refresh_seconds + pending.call.seconds)

    @contextmanager
    def paused(self, hold: bool = True) -> Iterator[None]:
        """The trainer waits for an evaluation: not metered as compute. With ``hold`` the generators beside it
        start no new batch meanwhile (``Backend.hold``, which first waits, metered, for a batch under way that the
        trainer would otherwise have waited for), so no training work falls in time the meter leaves out (App.
        A.3). A checkpoint's pause waits for the batches under way instead (:meth:`checkpoint`)."""
        if hold:
            self.backend.hold(True)
        try:
            with self.state.meter.paused():
                yield
        finally:
            if hold:
                self.backend.hold(False)

    def _log_eval(self, row: dict[str, Any], device_hours: float, res: dict[str, float], seconds: float) -> None:
        """Log an evaluation's row (``row``: the metrics row of the step it evaluated), refit the live forecast at
        that step's compute, and ask the stop rule."""
        record = {**row, **res, **timing_metrics({"eval": seconds})}
        domains = {d: res[f"val/{d}/pass_rate"] for d in getattr(self.evaluation.task, "domains", ())
                   if f"val/{d}/pass_rate" in res}
        record.update(self.state.forecaster.update(device_hours, res["val/pass_rate"], domains))
        if self.stop_rule is None:
            self.log.log(record)
            self.display.eval(record)
            return
        verdict = self.stop_rule(self.cfg, self.state)
        record.update(verdict.metrics)
        if verdict.stop:
            self.stopped = verdict.reason
        self.log.log(record)
        self.display.eval(record, verdict.text)

    def checkpoint(self) -> None:
        """Write this step's checkpoint, with the batches generated for the pending requests. Waiting for the batch
        the trainer takes next is metered: without the checkpoint the trainer would have waited for it. Waiting
        for the later ones (the trainer would have trained beside their generation) and writing are a pause."""
        self.collect(before_step=self.state.step)
        pending = sorted(self.state.pending)
        self.backend.settle(pending[:1])
        with self.state.meter.paused():
            self._save(self.backend.settle(pending))

    def _save(self, ready: list[RolloutBatch]) -> None:
        self.state.save(self.out, self.ranks.trainer_state(self.trainer), ready, self.cfg.model_dump(mode="json"))

    def row(self, *parts: dict[str, Any]) -> dict[str, Any]:
        """The metrics row (docs/architecture.md: metrics schema): the step, the wall clock and the compute so far, then
        ``parts`` in order."""
        record: dict[str, Any] = {"step": self.state.step, "time/wall_s": self.state.wall(), **self.state.meter.metrics()}
        for part in parts:
            record.update(part)
        return record
