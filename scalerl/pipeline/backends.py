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

import contextlib
import multiprocessing as mp
import os
import queue
import sys
import threading
import time
import traceback
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any, Callable

import torch

from scalerl.config import RunConfig
from scalerl.rollout import Request, RolloutBatch
from scalerl.pipeline.generator import GeneratorWorker
from scalerl.pipeline.ready import Backend, ReadyBatches, Restarts, generate_on_schedule
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
EXIT_GRACE_S = 5.0  # after its pipe ends, how long the trainer waits for the generator process to exit


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
    except Exception:  # a bug, a bad request: report it to the trainer process instead of dying silently
        results.put({"error": traceback.format_exc()})
        # and stay until the trainer closes the backend (or is gone: _exit_with_parent). The batches sent before
        # the report share their tensors by file descriptor, fetched from this process when the trainer reads them:
        # a process that exited at once took them with it, the trainer saw a death instead of the report, replaced
        # it, and after every replacement failed the same way the run stopped without the traceback
        with contextlib.suppress(Exception):
            while requests.get() is not None:
                pass
    except BaseException:  # Ctrl-C (the trainer has it too), an exit: report it and go
        results.put({"error": traceback.format_exc()})


DEAD = object()  # ProcessBackend._get: the generator process has died


def _close_queue(q: Any) -> None:
    """Close a multiprocessing queue of this process now (a test's ``queue.Queue`` has nothing to close): the thread
    that feeds its pipe (waited for up to :data:`EXIT_GRACE_S`: with its reader gone a full pipe would keep it
    forever, and the interpreter's exit with it) and both ends of its pipe."""
    if not hasattr(q, "close"):
        return
    q.cancel_join_thread()
    q.close()
    feeder = getattr(q, "_thread", None)  # started by the first put
    if feeder is not None:
        feeder.join(timeout=EXIT_GRACE_S)
        if feeder.is_alive():
            return  # blocked on a full pipe no one reads: the pipe stays open for it
    for end in (getattr(q, "_reader", None), getattr(q, "_writer", None)):
        if end is not None:
            end.close()


class ProcessBackend(ReadyBatches):
    devices = 2
    concurrent = True

    def __init__(
        self, cfg: RunConfig, schedule: Schedule, channel: WeightChannel, ctx: Any, threads: int = 1,
        make_worker: Callable[[RunConfig], Any] = GeneratorWorker,
    ) -> None:
        """``ctx`` makes the queues and the generator's process (a multiprocessing context); ``make_worker``
        builds the generator from the config in that process (a ``GeneratorWorker``; tests script one).

        A generator process that dies (killed, crashed) is replaced: a new one is started on the weights the
        channel holds and every batch lost with the old one is requested again, whole schedule groups with
        their own prompts and seeds, so under PPO-off-policy the batches are the ones the dead process would
        have made. More than ``cfg.faults.max_generator_restarts`` replacements in a row stop the run."""
        super().__init__()
        self.cfg, self.schedule, self.channel, self.ctx = cfg, schedule, channel, ctx
        self.threads, self.make_worker = threads, make_worker
        self.submitted: dict[int, dict] = {}  # requests whose batch is not yet trained on (or whose group is not)
        self.next_index = 0  # the batch the trainer takes next; earlier ones are trained on
        self.restarts = Restarts(cfg.faults.max_generator_restarts)
        self.closed = False
        self._start()

    def _start(self) -> None:
        self._spawn()
        try:
            if not self._started():
                raise RuntimeError(f"generator process exited with code {self.proc.exitcode}")
        except BaseException:
            self.close()
            raise

    def _spawn(self) -> None:
        self.requests = self.ctx.Queue()
        self.results = self.ctx.Queue()
        self.proc = self.ctx.Process(
            target=_generator_main,
            args=(self.cfg.model_dump(mode="json"), self.channel, self.schedule, self.requests, self.results,
                  self.threads, self.make_worker),
            # not daemonic: a generator may start processes of its own (vLLM's engine core); the runner always
            # calls close(), which ends it
            daemon=False,
            name="scalerl-generator",
        )
        self.proc.start()
        # this process only reads results: with its copy of the pipe's write end closed, a generator killed in
        # the middle of a message leaves an end of file (EOFError), not a read that waits forever
        writer = getattr(self.results, "_writer", None)  # a multiprocessing queue's (a test's fake has none)
        if writer is not None:
            writer.close()

    def _started(self) -> bool:
        """Block until the generator has built its model and loaded the trainer's weights (False: it died
        first). Training only starts then, in a new run as in a resumed one, so a resumed run does not train
        ahead on saved batches while its generator is still starting (it would then start later batches on
        newer weights)."""
        while True:
            payload = self._get(timeout=1.0)
            if payload is DEAD:
                return False
            if payload is not None and "started" in payload:
                return True

    def _get(self, timeout: float) -> Any:
        """The generator's next message; None after ``timeout`` seconds; ``DEAD`` once it has died (a batch
        it left half-sent is lost with it). A failure it reports is an error."""
        try:
            payload = self.results.get(timeout=timeout)
        except queue.Empty:
            return None if self.proc.is_alive() else DEAD
        except (OSError, EOFError):  # a batch's tensors are shared by file descriptor: gone with a dead sender
            self._end()
            return DEAD
        if "error" in payload:
            raise RuntimeError("generator process failed:\n" + payload["error"])
        return payload

    def _end(self) -> None:
        """Make sure the generator process is gone once its pipe has ended (a message cut off, a batch's tensors
        unreadable): it can never deliver again, whatever its state. A process that has not exited within
        :data:`EXIT_GRACE_S` is killed, so it is replaced like a dead one (bounded by ``max_generator_restarts``)
        instead of the run failing on the read: on a loaded machine an end of file once came from a generator
        still reported alive five seconds later, and the run crashed."""
        self.proc.join(timeout=EXIT_GRACE_S)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=EXIT_GRACE_S)

    def _receive(self, timeout: float) -> dict | None:
        """The generator's next message (None after ``timeout`` seconds, or after replacing a dead
        generator)."""
        payload = self._get(timeout)
        if payload is DEAD:
            self._replace()
            return None
        return payload

    def _replace(self) -> None:
        """Start a new generator in place of the dead one (again while new ones die before starting, up to
        the limit) and request again every batch lost with it."""
        while True:
            code = self.proc.exitcode
            self.proc.join(timeout=1)
            for q in (self.requests, self.results):  # a killed writer may have left half a message: new queues
                q.cancel_join_thread()
                q.close()
            self.restarts.count("the generator process", f"last exit code {code}")
            lost = self._lost()
            self.channel.renew_lock(self.ctx)  # it may have died holding the weights' lock
            print(f"warning: generator process died (exit code {code}); replacing it and regenerating "
                  f"batches {[r['index'] for r in lost]}", file=sys.stderr, flush=True)
            self._spawn()
            if self._started():
                break
        if lost:
            self.requests.put(lost)

    def _lost(self) -> list[dict]:
        """The requests to generate again: every group (``schedule.group``) with a batch neither arrived nor
        trained on, whole, so each is generated as the dead process would have (one engine call, one seed)."""
        missing = {i for i in self.submitted if i >= self.next_index and i not in self.ready}
        groups = {i // self.schedule.group for i in missing}
        return [self.submitted[i] for i in sorted(self.submitted) if i // self.schedule.group in groups]

    def submit(self, requests: list[Request]) -> None:
        """Requests issued together; the schedule's groups among them are generated as one batch each."""
        items = [asdict(r) for r in requests]
        self.submitted.update({item["index"]: item for item in items})
        self.requests.put(items)

    def publish(self, state_dict: Any, version: int) -> None:
        """Copy the weights into the channel. A generator killed while it read them (``snapshot``, each in-flight
        update) died holding the channel's lock, maybe before the trainer noticed its death: the lock of a dead
        generator is renewed here (as ``_replace`` does), instead of this waiting for it forever."""
        while not self.channel.publish(state_dict, version, timeout=PARENT_CHECK_S):
            if not self.proc.is_alive():
                self.channel.renew_lock(self.ctx)

    def hold(self, on: bool) -> None:
        """Held: the generator starts no new group. If the trainer's next batch has not arrived, this returns once
        the group under way is done (or the generator has died: the next ``next_batch`` replaces it): without
        the pause the trainer would have waited for it, metered. If it has arrived, the group under way finishes
        in the pause, as it would have beside the trainer's next step. A dead generator makes nothing to hold
        (nor, after its last replacement failed, any queue to read: a run stopping then waits for its evaluation)."""
        self.channel.hold(on)
        if not on or not self.proc.is_alive():
            return
        self._collect(timeout=0.0)
        while self.next_index not in self.ready and self.channel.busy() and self.proc.is_alive():
            time.sleep(0.001)

    def _coming(self, index: int) -> bool:
        """Batch ``index`` was submitted and not yet trained on (a replaced generator's batches are asked for
        again), so waiting for it ends."""
        return index in self.submitted

    def _collect(self, timeout: float) -> None:
        """Every batch that has arrived; waits up to ``timeout`` seconds for the first."""
        while (payload := self._receive(timeout)) is not None:
            batch = RolloutBatch.from_payload(payload)
            self.restarts.arrived()
            if batch.index >= self.next_index and batch.index not in self.ready:  # not a regenerated duplicate
                self.put_ready(batch)
            timeout = 0.0

    def next_batch(self, index: int) -> RolloutBatch:
        while index not in self.ready:
            self._collect(timeout=1.0)
        self.next_index = index + 1
        first_kept = (self.next_index // self.schedule.group) * self.schedule.group  # this group's first batch
        self.submitted = {i: r for i, r in self.submitted.items() if i >= first_kept}
        return self.ready.pop(index)

    def faults(self) -> dict[str, float]:
        return self.restarts.metrics()

    def close(self) -> None:
        """Stop the generator process (it finishes the groups it was asked for, then exits; terminated, then killed,
        if it has not within 10 s, then 5 s) and release at once what this side holds of it: the queues (the thread
        that feeds the requests' pipe, both pipes, their semaphores in ``/dev/shm``), the process handle and the
        weights' shared memory. Left to the garbage collector they outlived the run: a run that ends by an exception
        keeps its backend in the traceback, and a sweep runs many runs in one process. Closing twice does nothing."""
        if self.closed:
            return
        self.closed = True
        proc = self.proc
        try:
            if proc.is_alive():
                with contextlib.suppress(ValueError, OSError):  # a queue closed by a failed replacement
                    self.requests.put(None)
                proc.join(timeout=10)
            for stop in ("terminate", "kill"):  # one that ignores SIGTERM (a handler of its own) is killed
                if proc.is_alive() and hasattr(proc, stop):
                    getattr(proc, stop)()
                    proc.join(timeout=5)
        finally:
            for q in (self.requests, self.results):
                _close_queue(q)
            if not proc.is_alive() and hasattr(proc, "close"):
                proc.close()  # its sentinel descriptor
            self.requests = self.results = None
            self.channel = None  # the weights' shared memory, unless the caller keeps the channel


@dataclass(frozen=True)
class BackendEntry:
    """``backend`` in the config: ``make(cfg, schedule, state_dict, version, task, threads)`` builds it holding
    the trainer's weights at ``version``; ``devices(cfg)`` counts the devices it occupies with the trainer."""

    make: Callable[..., Backend]
    devices: Callable[[RunConfig], int]


def _inline(cfg: RunConfig, schedule: Schedule, state_dict: Any, version: int, task: Any, threads: int) -> Backend:
    return InlineBackend(cfg, schedule, WeightChannel(state_dict, version=version), task=task)


def _local(cfg: RunConfig, schedule: Schedule, state_dict: Any, version: int, task: Any, threads: int) -> Backend:
    ctx = torch.multiprocessing.get_context("spawn")
    channel = WeightChannel(state_dict, version=version, ctx=ctx)
    return ProcessBackend(cfg, schedule, channel, ctx, threads=threads)


def _ray(cfg: RunConfig, schedule: Schedule, state_dict: Any, version: int, task: Any, threads: int) -> Backend:
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
) -> Backend:
    """The backend ``cfg.backend`` names, holding the trainer's weights at ``version``."""
    return BACKENDS.get(cfg.backend, "backend").make(cfg, schedule, state_dict, version, task, threads)
