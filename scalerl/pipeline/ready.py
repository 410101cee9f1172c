"""What every generator backend shares (``pipeline/backends.py``, ``pipeline/ray_backend.py``; §3.1): the
``Backend`` protocol the driver speaks, the bookkeeping of batches generated but not yet trained on, and one
schedule group generated beside the trainer."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from scalerl.errors import RunStopped
from scalerl.rollout import Request, RolloutBatch
from scalerl.pipeline.generator import GeneratorWorker
from scalerl.pipeline.schedules import Schedule
from scalerl.pipeline.weights import WeightChannel


class Backend(Protocol):
    """Where the generator runs, as the driver sees it (inline, a local process, Ray actors): it takes requests,
    takes the trainer's weights, and hands back batches in index order."""

    devices: int  # devices the run occupies with it, the trainer included (for compute/device_hours)
    concurrent: bool  # generators run beside the trainer and may have batches under way

    def submit(self, requests: list[Request]) -> None:
        """Ask for these batches (the schedule has allowed them to start)."""

    def publish(self, state_dict: Any, version: int) -> None:
        """The trainer's weights at ``version``, for the generators to load (in flight or between groups)."""

    def next_batch(self, index: int) -> RolloutBatch:
        """Batch ``index``, waiting for it if it is still being generated."""

    def put_ready(self, batch: RolloutBatch) -> None:
        """A batch generated before a restart (from the checkpoint), to be handed back by ``next_batch``."""

    def ready_batches(self) -> list[RolloutBatch]:
        """Batches generated but not yet trained on (the checkpoint keeps them)."""

    def faults(self) -> dict[str, float]:
        """Fault counters for the metrics row (``faults/...``)."""

    def hold(self, on: bool) -> None:
        """The trainer pauses (``on``: an evaluation it waits for, not metered) or goes on: generators beside it
        start no new batch while held. ``hold(True)`` may first wait for a batch under way (the local backend:
        when it is the trainer's next one, which the trainer would have waited for, metered)."""

    def close(self) -> None:
        """Stop the generators and release what they hold."""


class ReadyBatches:
    """Batches generated but not yet trained on, by index: the bookkeeping every backend shares. A backend
    whose generators run elsewhere overrides ``_collect`` to take what has finished (waiting up to
    ``timeout`` seconds); checkpoints save ``ready_batches()``, a resumed run hands them back with
    ``put_ready``."""

    def __init__(self) -> None:
        self.ready: dict[int, RolloutBatch] = {}

    def put_ready(self, batch: RolloutBatch) -> None:
        self.ready[batch.index] = batch

    def _collect(self, timeout: float) -> None:
        """Take finished batches into ``self.ready``; nothing to take for a generator in this process."""

    def _coming(self, index: int) -> bool:
        """Whether batch ``index``, not ready, was requested and is still to arrive (so waiting for it ends). A
        backend that cannot tell says True and is waited on; one whose generators run elsewhere should know."""
        return True

    def faults(self) -> dict[str, float]:
        """Fault counters for the metrics row (``faults/...``); none for a backend that replaces nothing."""
        return {}

    def hold(self, on: bool) -> None:
        """Nothing to hold where the generator runs only when the trainer asks for a batch."""

    def ready_batches(self) -> list[RolloutBatch]:
        self._collect(timeout=0.0)
        return [self.ready[i] for i in sorted(self.ready)]

    # True where generators run beside the trainer and may have batches under way
    concurrent = False

    def settle(self, indices: list[int]) -> list[RolloutBatch]:
        """Wait until every batch in ``indices`` (submitted, not yet trained on) has been generated; return all
        ready batches. A checkpoint saves these, so a resumed run trains on exactly the batches an uninterrupted
        one would, instead of regenerating half-done ones with other weights (nothing else is published while
        it waits, so waiting changes no batch). A batch never requested (nor ready) is a RuntimeError, not a wait
        that never ends."""
        while self.concurrent and (missing := [i for i in indices if i not in self.ready]):
            never = [i for i in missing if not self._coming(i)]
            if never:
                raise RuntimeError(f"cannot wait for batches {never}: they were never requested from the generators")
            self._collect(timeout=1.0)
        return self.ready_batches()



@dataclass
class Restarts:
    """Replacements of dead generators (docs/scale-out.md, "what survives what"): counted for the metric
    ``faults/generator_restarts`` (this process's life), and more than ``limit``
    (``faults.max_generator_restarts``) in a row, with no batch arriving between them, stop the run."""

    limit: int
    total: int = 0
    in_a_row: int = 0

    def count(self, what: str, how: str) -> None:
        """One more replacement of ``what``, which died ``how``; ``RunStopped`` (one line) past the limit."""
        if self.in_a_row >= self.limit:
            raise RunStopped(f"{what} died {self.in_a_row + 1} times in a row ({how}); the run stops "
                             f"(faults.max_generator_restarts={self.limit})")
        self.total += 1
        self.in_a_row += 1

    def arrived(self) -> None:
        """A batch arrived: the generators work again."""
        self.in_a_row = 0

    def metrics(self) -> dict[str, float]:
        return {"faults/generator_restarts": float(self.total)}


def generate_on_schedule(
    worker: GeneratorWorker, channel: WeightChannel, schedule: Schedule, group: list[Request]
) -> list[RolloutBatch]:
    """One schedule group (``schedule.split``) from a generator running beside the trainer (local process or
    Ray actor): wait until ``channel`` holds the weights the schedule requires, load them, and generate,
    taking newer weights between decode steps only when the schedule is in-flight (§3.1). A group does not start
    while the trainer holds the channel (a pause the compute meter leaves out), and is marked busy until done."""
    while channel.version() < schedule.min_version(group[0].index) or not channel.start_group():
        time.sleep(0.001)
    try:
        version, weights = channel.snapshot()
        if version != worker.version:
            worker.load(version, weights)
        source = channel.poll if schedule.inflight else None
        return worker.generate(group, weight_source=source)
    finally:
        channel.end_group()
