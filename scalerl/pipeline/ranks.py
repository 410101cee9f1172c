"""Who does what when a run has several trainer ranks (torchrun; docs/scale-out.md).

The driver (``runner.py``) runs on rank 0 only and owns everything that exists once: the generators, the
curriculum, evaluation, metrics, checkpoints, the progress display and the run directory. It reaches the
trainer through a ``Ranks`` object:

* ``Solo`` (no torchrun, or ``WORLD_SIZE=1``): the plain single-process calls, unchanged.
* ``Leader`` (rank 0 of N): before each collective it sends the other ranks a command (``fsdp.Commands``),
  then takes part in it; the trainer is sharded with FSDP2 and data-parallel (``fsdp.DataParallel``), so a
  step is the single-process step on the whole batch (§3.2's aggregation, normalisation and filter on the whole batch).
* ``follow`` (ranks 1..N-1): wait for rank 0's commands and do their part, writing and printing nothing.

When rank 0 stops (budget reached, an error, Ctrl-C) it sends ``stop`` with its exit code, and the other
ranks exit with it. An error inside a collective cannot be announced (the others are inside it too); there
rank 0 exits with the error and torchrun ends the other ranks.
"""

from __future__ import annotations

import copy
import os
import sys
import time
from contextlib import contextmanager
from typing import Any, Iterator

import torch
from torch import nn

from scalerl import fsdp
from scalerl.build import build_model
from scalerl.device import resolve_device
from scalerl.config import RunConfig
from scalerl.errors import UserError
from scalerl.rollout import RolloutBatch
from scalerl.pipeline.prepare import StageConfig, train_step
from scalerl.pipeline.schedules import SCHEDULES, Schedule
from scalerl.pipeline.state import seed_everything
from scalerl.trainer import Trainer


def is_follower() -> bool:
    """True on a torchrun rank other than 0."""
    return fsdp.launched_world() > 1 and fsdp.launched_rank() > 0


def thread_split(cfg: RunConfig, world: int) -> tuple[int, int]:
    """``(threads per trainer rank, threads for an in-process or local generator)``: the machine's cores
    shared by the ``world`` trainer ranks and, with ``local``/``ray``, a generator beside them."""
    local = cfg.backend in ("local", "ray")  # generators elsewhere: the trainer takes its share of the cores
    cores = os.cpu_count() or 1
    threads = cfg.threads or max(1, cores // (world + local))
    return threads, cfg.threads or max(1, cores - world * threads)


def setup_rank(cfg: RunConfig, world: int) -> tuple[int, int, Schedule]:
    """What every trainer rank does first, rank 0 and the followers alike: take its share of the cores, seed
    the global generators with the run's seed, and build the schedule (§3.1). Returns ``(threads per trainer
    rank, threads for a generator beside it, the schedule)``; the model is built after, by ``build_model``."""
    threads, gen_threads = thread_split(cfg, world)
    torch.set_num_threads(threads)
    seed_everything(cfg.seed)
    return threads, gen_threads, SCHEDULES.get(cfg.schedule.name, "schedule.name")(cfg.schedule.k)


def exit_code(exc: BaseException | None) -> int:
    """The process exit code for how a run ended, the one the CLI exits rank 0 with: the error's own for a user error
    (2; 1 for a run stopped by a failing part, ``RunStopped``), 130 for Ctrl-C, a ``SystemExit``'s as the interpreter
    reads it (``sys.exit()``: 0; a message: 1)."""
    if exc is None:
        return 0
    if isinstance(exc, UserError):
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return 130
    if isinstance(exc, SystemExit):
        if exc.code is None:
            return 0
        return exc.code if isinstance(exc.code, int) else 1
    return 1


class Solo:
    """The whole run in one process: each operation is the single-process call."""

    world = 1

    def device(self, cfg: RunConfig) -> torch.device:
        return resolve_device(cfg.device)

    def trainer(
        self, model: nn.Module, cfg: RunConfig, state: dict[str, Any] | None, separate_eval: bool = False
    ) -> tuple[Trainer, nn.Module]:
        """``(the trainer, the model to evaluate)``, the trainer loaded from ``state`` when resuming. The model to
        evaluate is the trained one, or a copy of it with ``separate_eval`` (an evaluation beside the steps)."""
        trainer = Trainer(model, cfg.algo, cfg.optim)
        if state is not None:
            trainer.load_state_dict(state)
        return trainer, copy.deepcopy(model) if separate_eval else model

    def step(self, trainer: Trainer, batch: RolloutBatch, stage: StageConfig) -> dict[str, float]:
        return train_step(trainer, batch, stage)

    def weights(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The trainer's weights, to publish to the generators."""
        return model.state_dict()

    def refresh(self, eval_model: nn.Module, model: nn.Module) -> None:
        """Bring the evaluation model up to the trainer's weights (nothing to do when they are the same module)."""
        if eval_model is not model:
            eval_model.load_state_dict(model.state_dict())

    def trainer_state(self, trainer: Trainer) -> dict[str, Any]:
        return trainer.state_dict()


def sharded_trainer(model: nn.Module, cfg: RunConfig, weights: dict, state: dict[str, Any] | None) -> Trainer:
    """Shard ``model`` (FSDP2), give every rank rank 0's ``weights`` (after its warm-up; the others pass
    ``{}``), build the data-parallel ``Trainer`` and load ``state`` when resuming (rank 0's; the others
    ``{}``). A collective: every rank calls it with the same ``cfg``."""
    fsdp.shard_model(model)
    fsdp.load_full_state_dict(model, weights)
    trainer = Trainer(model, cfg.algo, cfg.optim, split=fsdp.DataParallel())
    if state is not None:
        trainer.load_state_dict(state)
    return trainer


class Leader(Solo):
    """Rank 0 of several: the trainer (the paper's FSDP π_train, §2) is sharded over every rank; each
    collective is announced to the other ranks first."""

    def __init__(self, device: torch.device) -> None:
        self.rank_device = device
        self.world = torch.distributed.get_world_size()
        self.commands = fsdp.Commands()
        self.in_collective = False

    @contextmanager
    def collective(self, command: str, arg: Any = None) -> Iterator[None]:
        """Announce ``command`` to the other ranks, then run its collective part here."""
        self.commands.send(command, arg)
        self.in_collective = True
        yield
        self.in_collective = False

    def device(self, cfg: RunConfig) -> torch.device:
        wanted = resolve_device(cfg.device)
        if wanted.type != self.rank_device.type:
            raise UserError(
                f"device: {cfg.device!r}, but under torchrun each rank trains on {self.rank_device.type} "
                "(cuda:LOCAL_RANK when CUDA is available, else the CPU); leave device=auto"
            )
        return self.rank_device

    def trainer(
        self, model: nn.Module, cfg: RunConfig, state: dict[str, Any] | None, separate_eval: bool = False
    ) -> tuple[Trainer, nn.Module]:
        """The sharded trainer, and an unsharded copy of the model for evaluation on rank 0 (always separate)."""
        eval_model = copy.deepcopy(model)
        with self.collective("init", {"config": cfg.model_dump(mode="json"), "resume": state is not None}):
            trainer = sharded_trainer(model, cfg, eval_model.state_dict(), state)
        return trainer, eval_model

    def step(self, trainer: Trainer, batch: RolloutBatch, stage: StageConfig) -> dict[str, float]:
        with self.collective("step"):
            fsdp.broadcast_batch(batch, self.rank_device)
            return train_step(trainer, batch, stage)

    def weights(self, model: nn.Module) -> dict[str, torch.Tensor]:
        with self.collective("weights"):
            return fsdp.full_state_dict(model)

    def refresh(self, eval_model: nn.Module, model: nn.Module) -> None:
        eval_model.load_state_dict(self.weights(model))

    def trainer_state(self, trainer: Trainer) -> dict[str, Any]:
        with self.collective("state"):
            return trainer.state_dict()

    def stop(self, exc: BaseException | None) -> None:
        """Tell the other ranks to exit with this run's exit code, unless the error struck inside a collective
        (they are blocked in it; torchrun ends them when rank 0 exits)."""
        if not self.in_collective:
            self.commands.send("stop", exit_code(exc))


@contextmanager
def lead() -> Iterator[Leader]:
    """Rank 0's side of a multi-rank run: the process group, and ``stop`` to the others however it ends."""
    with fsdp.process_group() as device:
        leader = Leader(device)
        try:
            yield leader
        except BaseException as exc:
            leader.stop(exc)
            raise
        leader.stop(None)


def follow() -> None:
    """A rank other than 0: build the sharded trainer from rank 0's config, then do its part of every command
    until ``stop``; exits with rank 0's exit code when that is not 0. Writes no file and prints nothing."""
    try:
        with fsdp.process_group() as device:
            commands = fsdp.Commands()
            name, arg = commands.receive()
            if name == "init":
                _follow(commands, device, RunConfig.model_validate(arg["config"]), arg["resume"])
            else:
                _exit_quietly(arg)
    except (KeyboardInterrupt, UserError) as exc:  # rank 0 meets the same and reports it
        sys.exit(exit_code(exc))


def _follow(commands: fsdp.Commands, device: torch.device, cfg: RunConfig, resume: bool) -> None:
    _, _, schedule = setup_rank(cfg, torch.distributed.get_world_size())
    model = build_model(cfg.model, cfg.base_seed).model.to(device)
    trainer = sharded_trainer(model, cfg, {}, {} if resume else None)
    stage = StageConfig.of(cfg.algo, schedule)
    actions = {
        "step": lambda: train_step(trainer, fsdp.broadcast_batch(None, device), stage),
        "weights": lambda: fsdp.full_state_dict(model),
        "state": trainer.state_dict,
    }
    while True:
        name, arg = commands.receive()
        if name == "stop":
            _exit_quietly(arg)
            return
        actions[name]()


# how long a follower told that rank 0 failed waits before exiting itself: rank 0 first prints its error and
# exits, torchrun then names it as the root cause and ends this rank
FAILURE_GRACE_S = 10.0


def _exit_quietly(code: int) -> None:
    """End a follower rank with rank 0's exit code, silently (rank 0 reports what happened)."""
    if code:
        time.sleep(FAILURE_GRACE_S)
        sys.exit(code)
