"""Generator actors on a Ray cluster: ``backend: ray`` (§3.1; docs/architecture.md ``pipeline/``; docs/scale-out.md).

The driver is the runner, unchanged; the trainer stays in its process. This backend only transports, exactly
like ``ProcessBackend`` with N generators instead of one:

* **requests -> actors**: each schedule group (``Schedule.split``: one batch under PipelineRL, ``k`` batches
  under PPO-off-policy-k) goes to the least-loaded of ``ray.generators`` actors (ties in turn).
* **batches -> driver**: gathered as they finish and handed out in index order by ``next_batch``.
* **weights -> every actor at once**: each ``publish`` does one ``ray.put``; every actor's ``set_weights``
  copies the object into its own in-process ``WeightChannel``, which its engine polls between decode steps.

When batch ``b`` may start and whether weights load in flight is decided by the schedule through
``generate_on_schedule``, the same function the local backend runs, so the staleness bound is the same.
An actor runs two concurrency groups: ``weights`` (one thread) takes new weights while ``generate`` runs a
batch. Requests to one actor run strictly in the order they were sent (a ticket per request), since Ray
does not promise that order for threaded actors and a later batch may wait for weights that need an earlier
one. ``actor_of`` records which actor generated each batch.

**An actor that dies is replaced** (Ray's own signal: ``RayActorError`` on one of its results; docs/scale-out.md,
"what survives what"): a new actor takes its place, built on the weights last published, and every group the
dead one had not delivered is requested from it again, in order, with its own prompts and seeds, so under
PPO-off-policy the batches are the ones the dead actor would have made. Each replacement is counted
(``faults/generator_restarts``) and printed on one line; more than ``faults.max_generator_restarts`` in a row
(no batch arriving between them) stop the run (``RunStopped``). An exception *inside* an actor's task (a bug,
a bad request) is not a death: it is a ``RuntimeError`` in the driver, as before.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
from dataclasses import asdict
from typing import Any, Mapping

import torch

from scalerl.config import RayConfig, RunConfig
from scalerl.errors import UserError
from scalerl.pipeline.ready import ReadyBatches, Restarts, generate_on_schedule
from scalerl.rollout import Request, RolloutBatch
from scalerl.pipeline.generator import GeneratorWorker
from scalerl.pipeline.schedules import Schedule
from scalerl.pipeline.weights import WeightChannel

try:
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError, RayError
except ModuleNotFoundError as exc:  # pragma: no cover - exercised only without the extra
    if exc.name != "ray":
        raise
    raise UserError("backend=ray needs Ray: pip install -e '.[ray]' in the scalerl checkout (or use --backend local)") from None

START_TIMEOUT_S = 300.0  # how long the actors may take to be placed and built before the run gives up


class GeneratorActor:
    """One generator in a Ray actor: a ``GeneratorWorker`` plus the ``WeightChannel`` slot its engine polls."""

    def __init__(self, cfg_data: dict, schedule: Schedule, state_dict: Mapping[str, torch.Tensor], version: int, threads: int) -> None:
        torch.set_num_threads(threads)
        self.worker = GeneratorWorker(RunConfig.model_validate(cfg_data))
        self.channel = WeightChannel(state_dict, version=version)
        self.schedule = schedule
        self._turn = threading.Condition()
        self._next_ticket = 0
        self._hold_seq = -1  # the newest hold message applied (threaded actors may run messages out of order)

    def ready(self) -> bool:
        return True

    @ray.method(concurrency_group="weights")
    def set_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        if version > self.channel.version():  # an older update delivered late must not roll weights back
            self.channel.publish(state_dict, version)

    @ray.method(concurrency_group="weights")
    def set_hold(self, seq: int, on: bool) -> None:
        """The trainer's hold (``RayBackend.hold``), message ``seq``: an older one delivered late is ignored."""
        if seq > self._hold_seq:
            self._hold_seq = seq
            self.channel.hold(on)

    @ray.method(concurrency_group="generate")
    def generate(self, ticket: int, requests: list[dict]) -> list[dict]:
        """One schedule group; waits for every group sent to this actor before it (``ticket`` order)."""
        with self._turn:
            self._turn.wait_for(lambda: self._next_ticket == ticket)
        try:
            group = [Request(**r) for r in requests]
            return [b.to_payload() for b in generate_on_schedule(self.worker, self.channel, self.schedule, group)]
        finally:
            with self._turn:
                self._next_ticket += 1
                self._turn.notify_all()


def connect(cfg: RayConfig) -> bool:
    """Join the cluster at ``cfg.address`` or start a local Ray sized for the generators.

    Returns True when this call opened the connection (so the backend closes it); an already initialised
    Ray (a user's script, a test) is used as is and left running."""
    if ray.is_initialized():
        return False
    if cfg.address:
        try:
            ray.init(address=cfg.address, logging_level=logging.WARNING)
        except ConnectionError as exc:
            raise UserError(
                f"ray.address={cfg.address!r}: {exc} Start one with `ray start --head`, or leave ray.address "
                "unset to run a local Ray"
            ) from None
    else:
        cpus = math.ceil(cfg.generators * cfg.num_cpus_per_generator)
        ray.init(num_cpus=cpus, include_dashboard=False, logging_level=logging.WARNING)
    return True


def _cpu(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu") for k, v in state_dict.items()}


class RayBackend(ReadyBatches):
    """``ProcessBackend``'s interface over N Ray generator actors (module docstring)."""

    concurrent = True

    def __init__(self, cfg: RunConfig, schedule: Schedule, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        super().__init__()
        self.schedule = schedule
        self.devices = 1 + cfg.ray.generators  # the trainer plus one device per generator
        self.requests: dict[int, dict] = {}  # batch index -> its request, until the batch arrives
        self.restarts = Restarts(cfg.faults.max_generator_restarts)
        self.actor_of: dict[int, int] = {}  # batch index -> rank of the actor that generated it
        self._inflight: dict[Any, tuple[int, list[int]]] = {}  # result ref -> (actor rank, batch indices)
        self._tickets = [0] * cfg.ray.generators
        self._turn = 0
        self._hold_seq = 0
        self.actors: list[Any] = []
        self._owns_ray = connect(cfg.ray)
        try:
            self._start_actors(cfg, state_dict, version)
        except BaseException:
            self.close()
            raise

    def _start_actors(self, cfg: RunConfig, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        need = cfg.ray.num_cpus_per_generator
        have = ray.cluster_resources().get("CPU", 0.0)
        if have < need:
            raise UserError(
                f"ray.num_cpus_per_generator={need:g} but the Ray cluster has {have:g} CPUs in all; lower it"
            )
        # a group waits on this actor for at most the k+1 batches the schedule lets run ahead of the trainer
        actor_cls = ray.remote(concurrency_groups={"weights": 1, "generate": self.schedule.k + 2})(GeneratorActor)
        self._weights = (ray.put(_cpu(state_dict)), version)  # the last published: what a replacement starts on
        threads = cfg.threads or max(1, int(need))
        cfg_data = cfg.model_dump(mode="json")
        self._new_actor = lambda: actor_cls.options(num_cpus=need).remote(
            cfg_data, self.schedule, *self._weights, threads)
        self.actors = [self._new_actor() for _ in range(cfg.ray.generators)]
        try:
            ray.get([a.ready.remote() for a in self.actors], timeout=START_TIMEOUT_S)
        except GetTimeoutError:
            raise UserError(
                f"the Ray cluster could not start {cfg.ray.generators} generator actors with "
                f"{need:g} CPUs each within {START_TIMEOUT_S:.0f} s (free: {ray.available_resources().get('CPU', 0):g} "
                "CPUs); lower ray.generators or ray.num_cpus_per_generator"
            ) from None
        except RayError as exc:
            raise RuntimeError(f"a Ray generator actor failed to start: {exc}") from exc

    def _pick(self) -> int:
        """The least-loaded actor; among equals, the next in turn."""
        load = [0] * len(self.actors)
        for rank, _ in self._inflight.values():
            load[rank] += 1
        n = len(self.actors)
        rank = min(((self._turn + i) % n for i in range(n)), key=lambda r: load[r])
        self._turn = (rank + 1) % n
        return rank

    def submit(self, requests: list[Request]) -> None:
        self._collect(timeout=0.0)  # an actor that finished counts as free
        for group in self.schedule.split(requests):
            items = [asdict(r) for r in group]
            self.requests.update({item["index"]: item for item in items})
            self._send(self._pick(), items)

    def _send(self, rank: int, items: list[dict]) -> None:
        ref = self.actors[rank].generate.remote(self._tickets[rank], items)
        self._tickets[rank] += 1
        self._inflight[ref] = (rank, [item["index"] for item in items])

    def publish(self, state_dict: Any, version: int) -> None:
        weights = ray.put(_cpu(state_dict))  # stored once, read by every actor
        self._weights = (weights, version)
        for actor in self.actors:
            actor.set_weights.remote(weights, version)

    def hold(self, on: bool) -> None:
        """Every actor starts no new group while the trainer pauses (``WeightChannel.hold``); a group under way
        finishes in the pause (the driver cannot see an actor's channel), and a replacement actor started
        meanwhile is not held (it has the lost groups to make)."""
        self._hold_seq += 1
        for actor in self.actors:
            actor.set_hold.remote(self._hold_seq, on)

    def _replace(self, rank: int, lost: list[int], exc: BaseException) -> None:
        """A new actor in place of dead actor ``rank`` (on the weights last published), asked again for the
        group ``lost`` and for every other group the dead one had not delivered, in their order."""
        self.restarts.count(f"Ray generator actor {rank}", type(exc).__name__)
        orphans = [ref for ref, (r, _) in self._inflight.items() if r == rank]  # they fail with it: ask again
        groups = sorted([lost, *(self._inflight.pop(ref)[1] for ref in orphans)])
        try:
            ray.kill(self.actors[rank], no_restart=True)
        except RayError:
            pass  # already gone
        print(f"warning: Ray generator actor {rank} died ({type(exc).__name__}); replacing it and regenerating "
              f"batches {[i for g in groups for i in g]}", file=sys.stderr, flush=True)
        self.actors[rank], self._tickets[rank] = self._new_actor(), 0
        for indices in groups:
            self._send(rank, [self.requests[i] for i in indices])

    def faults(self) -> dict[str, float]:
        return self.restarts.metrics()

    def _collect(self, timeout: float) -> None:
        """Take every finished group; wait up to ``timeout`` seconds for the first one."""
        refs = list(self._inflight)
        if not refs:
            return
        done, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        if done:
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        for ref in done:
            if ref not in self._inflight:
                continue  # a dead actor's result, already asked for again
            rank, indices = self._inflight.pop(ref)
            try:
                payloads = ray.get(ref)
            except RayActorError as exc:  # the actor died (killed, crashed, its node lost): replace it
                self._replace(rank, indices, exc)
                continue
            except RayError as exc:
                raise RuntimeError(f"Ray generator actor {rank} failed on batches {indices}: {exc}") from exc
            self.restarts.arrived()
            for payload in payloads:
                batch = RolloutBatch.from_payload(payload)
                self.ready[batch.index] = batch
                self.actor_of[batch.index] = rank
                self.requests.pop(batch.index, None)

    def _coming(self, index: int) -> bool:
        """Batch ``index`` was submitted and has not arrived (a dead actor's batches are asked for again)."""
        return index in self.requests

    def next_batch(self, index: int) -> RolloutBatch:
        while index not in self.ready:
            if not self._inflight:
                raise RuntimeError(f"batch {index} was never requested from the Ray generators")
            self._collect(timeout=1.0)
        return self.ready.pop(index)

    def close(self) -> None:
        """Stop the actors and drop the last published weights (their object-store copy would stay pinned in a
        user's Ray session as long as this backend lives: a traceback, a sweep's process); disconnect from Ray
        only if this backend connected (never a user's session)."""
        for actor in self.actors:
            try:
                ray.kill(actor, no_restart=True)
            except RayError:
                pass  # already gone
        self.actors = []
        self._inflight.clear()
        self._weights = None
        self._new_actor = None  # it starts a replacement on ``_weights``
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        self._owns_ray = False
