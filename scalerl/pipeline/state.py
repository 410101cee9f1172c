"""What a run is at a step boundary, with its one checkpoint save and its one load (docs/architecture.md: run dir).

A ``RunState`` holds everything the driver carries from one step to the next apart from the model and
optimizer (the trainer's own state): the step, the next batch index to request, the requests issued but not
yet trained on, the wall-clock time already spent, the curriculum (§3.2, Fig. 6b), the compute meter (App. A.3), the live
forecaster (§2.1) and the process RNG states. ``save`` writes it with the trainer's state and the batches
already generated for the pending requests; ``load`` restores it, so a resumed run requests the same
problems with the same seeds as an uninterrupted one. The checkpoint's keys are the file format: keep them.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from scalerl.compute import ComputeMeter
from scalerl.forecast import Forecaster
from scalerl.rollout import Request, RolloutBatch
from scalerl.pipeline.schedules import Schedule
from scalerl.runlog import save_checkpoint
from scalerl.timing import Stopwatch


def batch_seed(run_seed: int, index: int) -> int:
    """The sampling seed of batch ``index`` (negative indices: the evaluations), the same on every resume."""
    return zlib.crc32(f"{run_seed}:{index}".encode()) & 0x7FFFFFFF


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators (every rank, before it builds anything)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


@dataclass
class RunState:
    """The driver's state between steps; ``ready`` holds the batches a loaded checkpoint had already generated."""

    curriculum: Any  # scalerl.algo.curriculum.Curriculum
    meter: ComputeMeter
    forecaster: Forecaster
    step: int = 0
    next_request: int = 0
    pending: dict[int, Request] = field(default_factory=dict)
    wall_offset: float = 0.0
    ready: list[RolloutBatch] = field(default_factory=list)
    _clock: Stopwatch = field(default_factory=Stopwatch, repr=False, compare=False)

    # ------------------------------------------------------------------ the clock

    def start_clock(self) -> None:
        """Start (or, resumed, continue) the run's wall clock from ``wall_offset``."""
        self._clock.start()

    def wall(self) -> float:
        """Seconds the run has been running, over every resume."""
        return self.wall_offset + self._clock.seconds

    # ------------------------------------------------------------------ requests

    def issue(self, schedule: Schedule, version: int, steps: int, prompts: int, seed: int) -> list[Request]:
        """The requests for every batch the schedule lets start at trainer ``version`` (§3.1), their problems
        chosen by the curriculum (§3.2, Fig. 6b); they stay pending until ``trained``.

        A schedule group (PPO-off-policy-k: ``k`` batches generated together, one engine call, one seed, frozen
        weights) is issued whole even where ``steps`` ends inside it: what a step trains then does not depend on
        the budget, and a run stopped at ``steps`` and resumed with more finds the rest of that group in its
        checkpoint, generated with the group's weights, as an uninterrupted run would have (a group cut at
        ``steps`` left the rest to be generated after the resume, apart, with the trainer's newer weights)."""
        issued = []
        while ((self.next_request < steps or self.next_request % schedule.group)
               and schedule.min_version(self.next_request) <= version):
            req = Request(self.next_request, self.curriculum.next_ids(prompts), batch_seed(seed, self.next_request))
            self.pending[self.next_request] = req
            issued.append(req)
            self.next_request += 1
        return issued

    def trained(self) -> None:
        """Batch ``step`` is trained on: its request is done and the run is one step further."""
        del self.pending[self.step]
        self.step += 1

    def unready(self) -> list[Request]:
        """The pending requests whose batches a loaded checkpoint does not hold: to generate again."""
        ready_ids = {b.index for b in self.ready}
        return [r for i, r in sorted(self.pending.items()) if i not in ready_ids]

    # ------------------------------------------------------------------ checkpoint

    def save(
        self, out: Path, trainer: dict[str, Any], ready: list[RolloutBatch], config: dict[str, Any]
    ) -> Path:
        """Write the checkpoint of this step: this state, the trainer's ``state_dict`` and the ``ready``
        batches of pending requests (those already trained on are dropped)."""
        return save_checkpoint(
            out,
            self.step,
            {
                "step": self.step,
                "next_request": self.next_request,
                "wall_s": self.wall(),
                "trainer": trainer,
                "curriculum": self.curriculum.state_dict(),
                "compute": self.meter.state_dict(),
                "forecast": self.forecaster.state_dict(),
                "rng": rng_state(),
                "pending": [vars(r) for _, r in sorted(self.pending.items())],
                "ready": [b.to_payload() for b in ready if b.index >= self.step],
                "config": config,
            },
        )

    def load(self, ckpt: dict[str, Any]) -> None:
        """Restore this state (and the process RNGs) from a checkpoint ``save`` wrote."""
        self.curriculum.load_state_dict(ckpt["curriculum"])
        self.meter.load_state_dict(ckpt["compute"])
        self.forecaster.load_state_dict(ckpt["forecast"])
        set_rng_state(ckpt["rng"])
        self.step, self.next_request, self.wall_offset = ckpt["step"], ckpt["next_request"], ckpt["wall_s"]
        self.pending = {int(r["index"]): Request(**r) for r in ckpt["pending"]}
        self.ready = [RolloutBatch.from_payload(p) for p in ckpt["ready"]]
