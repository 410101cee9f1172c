"""Where the generator runs. Both backends take the same requests and hand back batches in order; the
schedule (``pipeline/schedules.py``) says when each batch may start and whether weights load in flight.

* ``InlineBackend``: generator and trainer take turns in one process (one device). When batch ``s`` is
  needed it generates, with the newest weights, the pending batches of its group: the whole group of ``k``
  under PPO-off-policy-k, just batch ``s`` under PipelineRL (which, run sequentially, is on-policy).
* ``ProcessBackend``: the generator runs concurrently in a child process (its own core), takes weights from
  shared memory between decode steps (PipelineRL) or between groups (PPO-off-policy), and streams batches
  back. This is PipelineRL proper: generation never waits for the optimizer step.
* ``RayBackend`` (``pipeline/ray_backend.py``): the same, with N generator actors on a Ray cluster.
"""

from __future__ import annotations

import queue
import time
import traceback
from collections import OrderedDict
from dataclasses import asdict
from typing import Any

import torch

from scalerl.config import RunConfig
from scalerl.pipeline.batch import Request, RolloutBatch
from scalerl.pipeline.generator import GeneratorWorker
from scalerl.pipeline.schedules import Schedule
from scalerl.pipeline.weights import WeightChannel


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

    def ready_batches(self) -> list[RolloutBatch]:
        self._collect(timeout=0.0)
        return [self.ready[i] for i in sorted(self.ready)]


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


def generate_on_schedule(
    worker: GeneratorWorker, channel: WeightChannel, schedule: Schedule, group: list[Request]
) -> list[RolloutBatch]:
    """One schedule group (``schedule.split``) from a generator running beside the trainer (local process or
    Ray actor): wait until ``channel`` holds the weights the schedule requires, load them, and generate,
    taking newer weights between decode steps only when the schedule is in-flight (§3.1)."""
    while channel.version() < schedule.min_version(group[0].index):
        time.sleep(0.001)
    version, weights = channel.snapshot()
    if version != worker.version:
        worker.load(version, weights)
    source = channel.poll if schedule.inflight else None
    return worker.generate(group, weight_source=source)


def _generator_main(cfg_data: dict, channel: WeightChannel, schedule: Schedule, requests: Any, results: Any, threads: int) -> None:
    torch.set_num_threads(threads)
    try:
        worker = GeneratorWorker(RunConfig.model_validate(cfg_data))
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

    def __init__(self, cfg: RunConfig, schedule: Schedule, channel: WeightChannel, ctx: Any, threads: int = 1) -> None:
        super().__init__()
        self.channel = channel
        self.requests = ctx.Queue()
        self.results = ctx.Queue()
        self.proc = ctx.Process(
            target=_generator_main,
            args=(cfg.model_dump(mode="json"), channel, schedule, self.requests, self.results, threads),
            # not daemonic: a generator may start processes of its own (vLLM's engine core); the runner always
            # calls close(), which ends it
            daemon=False,
            name="scalerl-generator",
        )
        self.proc.start()

    def submit(self, requests: list[Request]) -> None:
        """Requests issued together; the schedule's groups among them are generated as one batch each."""
        self.requests.put([asdict(r) for r in requests])

    def publish(self, state_dict: Any, version: int) -> None:
        self.channel.publish(state_dict, version)

    def _collect(self, timeout: float) -> None:
        """Every batch that has arrived; waits up to ``timeout`` seconds for the first."""
        while True:
            try:
                payload = self.results.get(timeout=timeout)
            except queue.Empty:
                if not self.proc.is_alive():
                    raise RuntimeError(f"generator process exited with code {self.proc.exitcode}") from None
                return
            if "error" in payload:
                raise RuntimeError("generator process failed:\n" + payload["error"])
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


def backend_devices(cfg: RunConfig) -> int:
    """Devices a run occupies, for ``compute/device_hours``: the trainer plus its generators."""
    if cfg.backend == "ray":
        return 1 + cfg.ray.generators
    return {"inline": InlineBackend.devices, "local": ProcessBackend.devices}[cfg.backend]


def make_backend(
    cfg: RunConfig, schedule: Schedule, state_dict: Any, version: int, task: Any = None, threads: int = 1
) -> Any:
    """The backend ``cfg.backend`` names, holding the trainer's weights at ``version``."""
    if cfg.backend == "ray":
        from scalerl.pipeline.ray_backend import RayBackend  # Ray is an optional extra

        return RayBackend(cfg, schedule, state_dict, version)
    if cfg.backend == "local":
        ctx = torch.multiprocessing.get_context("spawn")
        channel = WeightChannel(state_dict, version=version, ctx=ctx)
        return ProcessBackend(cfg, schedule, channel, ctx, threads=threads)
    return InlineBackend(cfg, schedule, WeightChannel(state_dict, version=version), task=task)
