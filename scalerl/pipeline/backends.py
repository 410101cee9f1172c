"""Where the generator runs. Both backends take the same requests and hand back batches in order; the
schedule (``pipeline/schedules.py``) says when each batch may start and whether weights load in flight.

* ``InlineBackend``: generator and trainer take turns in one process (one device). When batch ``s`` is
  needed it generates, with the newest weights, the pending batches of its group: the whole group of ``k``
  under PPO-off-policy-k, just batch ``s`` under PipelineRL (which, run sequentially, is on-policy).
* ``ProcessBackend``: the generator runs concurrently in a child process (its own core), takes weights from
  shared memory between decode steps (PipelineRL) or between groups (PPO-off-policy), and streams batches
  back. This is PipelineRL proper: generation never waits for the optimizer step.
* ``RayBackend`` (``pipeline/ray_backend.py``): the same, with N generator actors on a Ray cluster.

``BACKENDS`` maps the config's ``backend`` to each, as ``SCHEDULES`` does the schedules.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import threading
import time
import traceback
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any, Callable

import torch

from scalerl.config import RunConfig
from scalerl.pipeline.batch import Request, RolloutBatch
from scalerl.pipeline.generator import GeneratorWorker
from scalerl.pipeline.ready import ReadyBatches, generate_on_schedule
from scalerl.pipeline.schedules import Schedule
from scalerl.registry import Registry
from scalerl.pipeline.weights import WeightChannel


class InlineBackend(ReadyBatches):
    devices = 1

    def __init__(self, cfg: RunConfig, schedule: Schedule, channel: WeightChannel, task: Any = None) -> None:
        super().__init__()
        self.schedule = schedule
        self.channel = channel
        self.worker = GeneratorWorker(cfg, task=task)
        self.pending: "OrderedDict[int, Request]" = OrderedDict()

    def submit(self, requests: list[Request]) -> None:
        for request in requests:
            self.pending[request.index] = request

    def publish(self, state_dict: Any, version: int) -> None:
        self.channel.publish(state_dict, version)

    def next_batch(self, index: int) -> RolloutBatch:
        if index not in self.ready:
            version, weights = self.channel.snapshot()
            if version != self.worker.version:
                self.worker.load(version, weights)
            group = index // self.schedule.group
            requests = [self.pending.pop(b) for b in list(self.pending) if b // self.schedule.group == group]
            for batch in self.worker.generate(requests):
                self.ready[batch.index] = batch
        return self.ready.pop(index)

    def close(self) -> None:
        pass


PARENT_CHECK_S = 0.5  # how often a generator process checks that its trainer process is still alive


def _exit_with_parent() -> None:
    """In a generator process: exit as soon as the trainer process is gone (killed with SIGKILL, say), so no
    orphan keeps generating and multiprocessing's resource tracker can unlink the run's semaphores."""
    parent = mp.parent_process()
    if parent is None:
        return

    def watch() -> None:
        while parent.is_alive():
            time.sleep(PARENT_CHECK_S)
        os._exit(0)

    threading.Thread(target=watch, name="scalerl-parent-watch", daemon=True).start()


def _generator_main(
    cfg_data: dict, channel: WeightChannel, schedule: Schedule, requests: Any, results: Any, threads: int,
    make_worker: Callable[[RunConfig], Any] = GeneratorWorker,
) -> None:
    _exit_with_parent()
    torch.set_num_threads(threads)
    try:
        worker = make_worker(RunConfig.model_validate(cfg_data))
        version, weights = channel.snapshot()
        worker.load(version, weights)
        results.put({"started": version})  # the trainer waits for this: a resumed run starts where it stopped
        while True:
            items = requests.get()
            if items is None:
                break
            for group in schedule.split([Request(**item) for item in items]):
                for batch in generate_on_schedule(worker, channel, schedule, group):
                    results.put(batch.to_payload())
    except BaseException:  # report to the trainer process instead of dying silently
        results.put({"error": traceback.format_exc()})


class ProcessBackend(ReadyBatches):
    devices = 2
    concurrent = True

    def __init__(
        self, cfg: RunConfig, schedule: Schedule, channel: WeightChannel, ctx: Any, threads: int = 1,
        make_worker: Callable[[RunConfig], Any] = GeneratorWorker,
    ) -> None:
        """``ctx`` makes the queues and the generator's process (a multiprocessing context); ``make_worker``
        builds the generator from the config in that process (a ``GeneratorWorker``; tests script one)."""
        super().__init__()
        self.channel = channel
        self.requests = ctx.Queue()
        self.results = ctx.Queue()
        self.proc = ctx.Process(
            target=_generator_main,
            args=(cfg.model_dump(mode="json"), channel, schedule, self.requests, self.results, threads, make_worker),
            # not daemonic: a generator may start processes of its own (vLLM's engine core); the runner always
            # calls close(), which ends it
            daemon=False,
            name="scalerl-generator",
        )
        self.proc.start()
        try:
            self._wait_started()
        except BaseException:
            self.close()
            raise

    def _wait_started(self) -> None:
        """Block until the generator has built its model and loaded the trainer's weights. Training only
        starts then, in a new run as in a resumed one, so a resumed run does not train ahead on saved batches
        while its generator is still starting (it would then start later batches on newer weights)."""
        while True:
            payload = self._receive(timeout=1.0)
            if payload is not None and "started" in payload:
                return

    def _receive(self, timeout: float) -> dict | None:
        """The generator's next message (None after ``timeout`` seconds); its failure or death is an error."""
        try:
            payload = self.results.get(timeout=timeout)
        except queue.Empty:
            if not self.proc.is_alive():
                raise RuntimeError(f"generator process exited with code {self.proc.exitcode}") from None
            return None
        if "error" in payload:
            raise RuntimeError("generator process failed:\n" + payload["error"])
        return payload

    def submit(self, requests: list[Request]) -> None:
        """Requests issued together; the schedule's groups among them are generated as one batch each."""
        self.requests.put([asdict(r) for r in requests])

    def publish(self, state_dict: Any, version: int) -> None:
        self.channel.publish(state_dict, version)

    def _collect(self, timeout: float) -> None:
        """Every batch that has arrived; waits up to ``timeout`` seconds for the first."""
        while (payload := self._receive(timeout)) is not None:
            self.put_ready(RolloutBatch.from_payload(payload))
            timeout = 0.0

    def next_batch(self, index: int) -> RolloutBatch:
        while index not in self.ready:
            self._collect(timeout=1.0)
        return self.ready.pop(index)

    def close(self) -> None:
        if self.proc.is_alive():
            self.requests.put(None)
            self.proc.join(timeout=10)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(timeout=5)


@dataclass(frozen=True)
class BackendEntry:
    """``backend`` in the config: ``make(cfg, schedule, state_dict, version, task, threads)`` builds it holding
    the trainer's weights at ``version``; ``devices(cfg)`` counts the devices it occupies with the trainer."""

    make: Callable[..., Any]
    devices: Callable[[RunConfig], int]


def _inline(cfg: RunConfig, schedule: Schedule, state_dict: Any, version: int, task: Any, threads: int) -> Any:
    return InlineBackend(cfg, schedule, WeightChannel(state_dict, version=version), task=task)


def _local(cfg: RunConfig, schedule: Schedule, state_dict: Any, version: int, task: Any, threads: int) -> Any:
    ctx = torch.multiprocessing.get_context("spawn")
    channel = WeightChannel(state_dict, version=version, ctx=ctx)
    return ProcessBackend(cfg, schedule, channel, ctx, threads=threads)


def _ray(cfg: RunConfig, schedule: Schedule, state_dict: Any, version: int, task: Any, threads: int) -> Any:
    from scalerl.pipeline.ray_backend import RayBackend  # Ray is an optional extra

    return RayBackend(cfg, schedule, state_dict, version)


BACKENDS: Registry[BackendEntry] = Registry("backend")
BACKENDS.register("inline")(BackendEntry(_inline, lambda cfg: InlineBackend.devices))
BACKENDS.register("local")(BackendEntry(_local, lambda cfg: ProcessBackend.devices))
BACKENDS.register("ray")(BackendEntry(_ray, lambda cfg: 1 + cfg.ray.generators))  # a device per generator


def backend_devices(cfg: RunConfig) -> int:
    """Devices a run occupies, for ``compute/device_hours``: the trainer plus its generators."""
    return BACKENDS.get(cfg.backend, "backend").devices(cfg)


def make_backend(
    cfg: RunConfig, schedule: Schedule, state_dict: Any, version: int, task: Any = None, threads: int = 1
) -> Any:
    """The backend ``cfg.backend`` names, holding the trainer's weights at ``version``."""
    return BACKENDS.get(cfg.backend, "backend").make(cfg, schedule, state_dict, version, task, threads)
