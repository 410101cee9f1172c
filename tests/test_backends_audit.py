"""Audit of the generator backends (``pipeline/backends.py``, ``weights.py``, ``background.py``, ``ranks.py``):
what a backend leaves behind when it closes, the weights a generator reads while they are published, and the
exit code every trainer rank ends with."""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

from scalerl.config import load_config
from scalerl.errors import CheckpointNotWritten, RunStopped, UserError
from scalerl.pipeline.backends import ProcessBackend
from scalerl.pipeline.ranks import exit_code
from scalerl.pipeline.schedules import SCHEDULES
from scalerl.pipeline.weights import WeightChannel
from scalerl.rollout import Request, RolloutBatch


class ScriptedWorker:
    """A generator without a model (``make_worker``): each batch records the weights version it was made with."""

    def __init__(self, cfg) -> None:  # noqa: ANN001
        self.version = -1

    def load(self, version: int, weights) -> None:  # noqa: ANN001
        self.version = version

    def generate(self, requests: list[Request], weight_source=None) -> list[RolloutBatch]:  # noqa: ANN001
        return [_batch(r, self.version) for r in requests]


def _batch(request: Request, version: int) -> RolloutBatch:
    n = len(request.problem_ids)
    ones = torch.ones(n, 2, dtype=torch.bool)
    z = torch.zeros(n)
    return RolloutBatch(index=request.index, problem_ids=list(request.problem_ids), group=torch.arange(n),
                        input_ids=ones.long(), attention_mask=ones, loss_mask=ones.float(), gen_logprobs=ones.float(),
                        versions=torch.full((n, 2), version, dtype=torch.long), rewards=z, correct=z.bool(),
                        truncated=z.bool(), interrupted=z.bool(), completion_lengths=torch.ones(n, dtype=torch.long))


def _cfg(*sets: str):
    return load_config("scalerl", None, ["backend=local", "batch.prompts=2", *sets])


def _semaphores() -> set[str]:
    """The named semaphores this process holds (mapped in its memory, whether or not their ``/dev/shm`` file is
    still there): another process's (a second test suite running at the same time) are not this run's leak."""
    maps = Path("/proc/self/maps")
    if maps.is_file():
        return {line.split("/dev/shm/", 1)[1].split()[0] for line in maps.read_text().splitlines()
                if "/dev/shm/sem." in line}
    shm = Path("/dev/shm")
    return {p.name for p in shm.iterdir() if p.name.startswith("sem.")} if shm.is_dir() else set()


def _threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.is_alive())


def _local_backend(schedule: str = "pipeline_rl", k: int = 2) -> ProcessBackend:
    ctx = torch.multiprocessing.get_context("spawn")
    channel = WeightChannel({"w": torch.zeros(4)}, version=0, ctx=ctx)
    return ProcessBackend(_cfg(), SCHEDULES.get(schedule)(k), channel, ctx, threads=1, make_worker=ScriptedWorker)


def test_a_closed_local_backend_leaves_no_process_thread_pipe_or_semaphore():
    """``close`` releases what the backend holds at once, not when the garbage collector finds it: a run that ended
    by an exception keeps its backend in the traceback, and a frame cycle kept a finished run's (a sweep runs many
    runs in one process). Seen: a ``QueueFeederThread`` and seven ``/dev/shm/sem.mp-*`` left after ``train``
    returned, until the next collection."""
    gc.collect()
    threads, sems = _threads(), _semaphores()
    gc.disable()  # what a reference cycle or a live traceback does: nothing is freed by the collector
    try:
        backend = _local_backend()
        backend.submit([Request(index=0, problem_ids=["a", "b"], seed=1)])
        assert backend.next_batch(0).index == 0
        backend.close()
        assert [p for p in mp.active_children() if p.name == "scalerl-generator"] == []
        assert _threads() == threads
        assert _semaphores() <= sems
    finally:
        gc.enable()
    backend.close()  # twice: nothing more to do


@pytest.mark.parametrize("ending", ["budget", "error", "ctrl-c"])
def test_a_local_run_leaves_nothing_behind_however_it_ends(tmp_path, monkeypatch, ending):
    """``train`` on the local backend, ending at its budget, by an exception in the trainer or by Ctrl-C, with the
    garbage collector off (as in a sweep between two collections): no generator process, no queue thread and no
    semaphore of the run is left once it has returned or raised."""
    from scalerl.pipeline import runner
    from tests.test_pipeline import micro

    step = runner.RunLoop.step

    def failing(self):  # noqa: ANN001
        if self.state.step == 2:
            raise {"error": RuntimeError, "ctrl-c": KeyboardInterrupt}[ending]("stopped at step 2")
        step(self)

    if ending != "budget":
        monkeypatch.setattr(runner.RunLoop, "step", failing)
    gc.collect()
    threads, sems = _threads(), _semaphores()
    gc.disable()
    try:
        try:
            runner.train(micro("backend=local", "steps=4", "eval.every=100", "eval.overlap=false",
                               "checkpoint_every=100"), tmp_path, show_progress=False)
        except (RuntimeError, KeyboardInterrupt) as exc:
            assert ending != "budget" and "step 2" in str(exc)
            kept = exc  # noqa: F841 - the traceback holds the run's frames, as a caller that logs it does
        assert [p for p in mp.active_children() if p.name == "scalerl-generator"] == []
        assert _threads() == threads
        assert _semaphores() <= sems
    finally:
        gc.enable()


@pytest.mark.parametrize("exc, code", [
    (None, 0),
    (UserError("bad value"), 2),
    (RunStopped("the generator process died 4 times in a row"), 1),
    (CheckpointNotWritten("disk full"), 1),
    (KeyboardInterrupt(), 130),
    (SystemExit(), 0),
    (SystemExit(3), 3),
    (SystemExit("a message"), 1),
    (RuntimeError("a bug"), 1),
])
def test_every_rank_exits_with_the_code_rank_0_exits_with(exc, code):
    """Rank 0 tells the other ranks the code it exits with (``Leader.stop``): the CLI's. A run stopped by a failing
    part (``RunStopped``, exit code 1) once sent 2, the code of the ``UserError`` it derives from, and
    ``sys.exit()`` (0) sent 1."""
    assert exit_code(exc) == code
    if isinstance(exc, UserError):
        assert code == exc.exit_code


class _PausedWeights(dict):
    """New weights whose second tensor is handed over only once ``go`` is set: a publish stopped half-way, holding
    the channel's lock, with the first tensor already copied."""

    def __init__(self, weights: dict, paused: threading.Event, go: threading.Event) -> None:
        super().__init__(weights)
        self.paused, self.go, self.asked = paused, go, 0

    def __getitem__(self, key):  # noqa: ANN001
        self.asked += 1
        if self.asked == 2:
            self.paused.set()
            assert self.go.wait(60)
        return super().__getitem__(key)


@pytest.mark.parametrize("where", ["one process", "shared memory"])
def test_a_reader_during_a_publish_sees_the_old_or_the_new_weights_whole(where):
    """A generator reads the weights (``snapshot``, or ``poll`` between decode steps) while the trainer is half-way
    through publishing them: it sees version 0 with all-zero tensors or version 1 with all-one tensors, never a
    mix. The publish is stopped half-way (not raced): a reader that did not wait would return at once, torn."""
    ctx = torch.multiprocessing.get_context("spawn") if where == "shared memory" else None
    old = {"a": torch.zeros(3), "b": torch.zeros(3)}
    channel = WeightChannel(old, version=0, ctx=ctx)
    paused, go = threading.Event(), threading.Event()
    new = _PausedWeights({"a": torch.ones(3), "b": torch.ones(3)}, paused, go)
    publisher = threading.Thread(target=channel.publish, args=(new, 1))
    publisher.start()
    assert paused.wait(60)
    assert channel.poll(0) is None  # the version is written last, with the tensors whole
    seen: list = []
    reader = threading.Thread(target=lambda: seen.append(channel.snapshot()))
    reader.start()
    reader.join(timeout=1.0)  # a reader that does not wait for the publish has returned by now
    torn = list(seen)
    go.set()
    publisher.join(60)
    reader.join(60)
    assert torn == []
    (version, tensors), = seen
    assert version == 1 and all(torch.equal(t, torch.ones(3)) for t in tensors.values())
    version, tensors = channel.poll(0)
    assert version == 1 and all(torch.equal(t, torch.ones(3)) for t in tensors.values())


def test_the_local_generator_starts_each_group_on_the_weights_the_schedule_requires():
    """§3.1 on the local backend: a group is not started before the trainer has published the version it needs
    (PPO-off-policy-k: exactly its first batch's; it may be requested earlier), and is generated with those."""
    backend = _local_backend("ppo_off_policy", 2)
    try:
        backend.submit([Request(index=i, problem_ids=["a"], seed=i) for i in (0, 1)])
        assert [int(backend.next_batch(i).versions.max()) for i in (0, 1)] == [0, 0]
        backend.submit([Request(index=i, problem_ids=["a"], seed=i) for i in (2, 3)])  # before version 2 exists
        backend.publish({"w": torch.ones(4)}, 1)  # not a version the group may start on
        backend.publish({"w": torch.ones(4)}, 2)
        got = [backend.next_batch(i).versions for i in (2, 3)]
        assert all(bool((v == 2).all()) for v in got)
    finally:
        backend.close()


def _weights(model) -> dict[str, torch.Tensor]:  # noqa: ANN001
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_an_evaluation_beside_the_steps_reads_the_weights_of_its_own_step(tmp_path, monkeypatch):
    """The evaluation started at step 0 runs beside step 1 (``eval.overlap``); made to read its model only once step
    1 has changed the trained weights, it still reads step 0's."""
    from scalerl.pipeline import runner
    from tests.test_pipeline import micro

    stepped = threading.Event()
    at_start: dict[int, dict] = {}
    read: dict[int, dict] = {}
    step, evaluate, build = runner.RunLoop.step, runner.RunLoop.evaluate, runner.build_evaluation

    def recorded_step(self):  # noqa: ANN001
        step(self)
        stepped.set()

    def recorded_evaluate(self):  # noqa: ANN001
        at_start[self.state.step] = _weights(self.model)
        evaluate(self)

    class Late:
        def __init__(self, evaluation, model) -> None:  # noqa: ANN001
            self.evaluation, self.model, self.calls = evaluation, model, 0

        def __call__(self, seed: int):
            step_evaluated = sorted(at_start)[self.calls]
            self.calls += 1
            if step_evaluated == 0:
                assert stepped.wait(60)  # step 1 has trained and published
            read[step_evaluated] = _weights(self.model)
            return self.evaluation(seed)

        def __getattr__(self, name: str):
            return getattr(self.evaluation, name)

    monkeypatch.setattr(runner.RunLoop, "step", recorded_step)
    monkeypatch.setattr(runner.RunLoop, "evaluate", recorded_evaluate)
    monkeypatch.setattr(runner, "build_evaluation", lambda cfg, bundle, model, *a: Late(build(cfg, bundle, model, *a), model))
    runner.train(micro("backend=inline", "steps=2", "eval.every=2", "eval.overlap=true", "checkpoint_every=100",
                       "algo.zero_variance_filter=false"), tmp_path, show_progress=False)
    assert sorted(read) == [0, 2]
    assert any(not torch.equal(at_start[0][k], at_start[2][k]) for k in at_start[0])  # training changed them
    for s in (0, 2):
        assert all(torch.equal(read[s][k], at_start[s][k]) for k in at_start[s]), s


def test_an_evaluation_that_fails_beside_the_steps_fails_the_run(tmp_path, monkeypatch):
    """Its exception is raised in the run (when the run collects the evaluation), not lost in its thread, and the run
    leaves no evaluation thread behind."""
    from scalerl.pipeline import runner
    from tests.test_pipeline import micro

    build = runner.build_evaluation

    class Failing:
        def __init__(self, evaluation) -> None:  # noqa: ANN001
            self.evaluation = evaluation

        def __call__(self, seed: int):
            raise ValueError("the evaluation broke")

        def __getattr__(self, name: str):
            return getattr(self.evaluation, name)

    monkeypatch.setattr(runner, "build_evaluation", lambda *a, **k: Failing(build(*a, **k)))
    with pytest.raises(ValueError, match="the evaluation broke"):
        runner.train(micro("backend=inline", "steps=2", "eval.every=100", "eval.overlap=true", "checkpoint_every=100"),
                     tmp_path, show_progress=False)
    assert "scalerl-eval" not in _threads()


def _hold_the_lock_and_hang(channel: WeightChannel, ready) -> None:  # noqa: ANN001
    channel._lock.acquire()  # as a generator inside snapshot() (a poll between decode steps) does
    ready.set()
    signal.pause()


def test_a_publish_is_not_blocked_forever_by_a_generator_killed_while_it_read_the_weights():
    """The generator is killed (the OOM killer, say) inside ``snapshot``, holding the weights' lock, while the
    trainer still has batches to train on: the trainer's next ``publish`` came before it could notice the death
    (``_collect``) and waited on the dead process's lock forever; the run hung instead of replacing its generator.
    The publish renews the lock of a dead generator and goes on; the replacement then starts on those weights."""
    ctx = torch.multiprocessing.get_context("spawn")
    channel = WeightChannel({"w": torch.zeros(3)}, version=0, ctx=ctx)
    ready = ctx.Event()
    proc = ctx.Process(target=_hold_the_lock_and_hang, args=(channel, ready), name="scalerl-generator")
    proc.start()
    assert ready.wait(60)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(30)
    backend = ProcessBackend.__new__(ProcessBackend)  # the trainer's side only: its channel and its dead generator
    backend.channel, backend.ctx, backend.proc = channel, ctx, proc
    publisher = threading.Thread(target=backend.publish, args=({"w": torch.ones(3)}, 1), daemon=True)
    publisher.start()
    publisher.join(20)  # not a timing: a publish that waits on the dead process never returns
    assert not publisher.is_alive(), "publish waits forever on the lock a dead generator holds"
    version, tensors = channel.snapshot()
    assert version == 1 and torch.equal(tensors["w"], torch.ones(3))


class BrokenWorker(ScriptedWorker):
    """A generator whose code fails: at its second group, or (``cfg.seed`` = 1) while it is built."""

    def __init__(self, cfg) -> None:  # noqa: ANN001
        if cfg.seed == 1:
            raise ZeroDivisionError("the generator could not be built")
        super().__init__(cfg)

    def generate(self, requests: list[Request], weight_source=None) -> list[RolloutBatch]:  # noqa: ANN001
        if requests[0].index == 1:
            raise ZeroDivisionError("the generator broke")
        return super().generate(requests, weight_source)


@pytest.mark.parametrize("when", ["building", "generating"])
def test_an_exception_in_the_generators_code_stops_the_run_with_its_traceback_and_leaves_nothing(when):
    """docs/scale-out.md, "what survives what": on the local backend an exception inside the generator's code is a
    ``RuntimeError`` holding the generator's traceback (not a replacement), and what the backend started is gone."""
    gc.collect()
    threads, sems = _threads(), _semaphores()
    ctx = torch.multiprocessing.get_context("spawn")
    channel = WeightChannel({"w": torch.zeros(4)}, version=0, ctx=ctx)
    cfg = _cfg(f"seed={1 if when == 'building' else 0}")
    schedule = SCHEDULES.get("pipeline_rl")(2)
    if when == "building":
        with pytest.raises(RuntimeError, match="(?s)generator process failed.*Traceback.*could not be built"):
            ProcessBackend(cfg, schedule, channel, ctx, threads=1, make_worker=BrokenWorker)
    else:
        backend = ProcessBackend(cfg, schedule, channel, ctx, threads=1, make_worker=BrokenWorker)
        try:
            backend.submit([Request(index=i, problem_ids=["a"], seed=i) for i in (0, 1)])
            # read only once a generator that exits after its report has done so: the batch before the report, whose
            # tensors it shares by file descriptor, was then unreadable, the trainer took it for a death and
            # replaced it, and the run stopped "died 4 times in a row", without the traceback
            backend.proc.join(timeout=2)
            with pytest.raises(RuntimeError, match="(?s)generator process failed.*Traceback.*the generator broke"):
                for i in (0, 1):  # the report may come with batch 0
                    backend.next_batch(i)
            assert backend.faults() == {"faults/generator_restarts": 0.0}  # a bug is not a death
        finally:
            backend.close()
    del channel
    assert [p for p in mp.active_children() if p.name == "scalerl-generator"] == []
    assert _threads() == threads
    assert _semaphores() <= sems


def test_ppo_off_policy_runs_the_same_on_the_inline_and_the_local_backend(tmp_path):
    """§3.1: each PPO-off-policy group is generated with its start version's weights, where the generator runs: the
    same seed gives the same prompts and the same computed metrics (rewards, losses, evaluations)."""
    from tests.test_faults import _computed
    from tests.test_pipeline import _consumed, micro
    from scalerl.pipeline.runner import train
    from scalerl.runlog import read_metrics

    sets = ("steps=4", "schedule.name=ppo_off_policy", "schedule.k=2", "eval.every=2", "checkpoint_every=100")
    for backend in ("inline", "local"):
        train(micro(f"backend={backend}", *sets), tmp_path / backend, show_progress=False)
    assert _consumed(tmp_path / "inline") == _consumed(tmp_path / "local")
    assert _computed(read_metrics(tmp_path / "inline")) == _computed(read_metrics(tmp_path / "local"))


def test_a_run_that_fails_while_an_evaluation_runs_beside_the_steps_stops_that_evaluation(tmp_path, monkeypatch):
    """A run ending by an exception while its evaluation ran beside the steps left that evaluation's thread going
    after ``train`` had raised (a sweep catches the error and starts its next run beside it)."""
    import threading

    from scalerl.pipeline import runner
    from tests.test_pipeline import micro

    build, step = runner.build_evaluation, runner.RunLoop.step
    started, calls = threading.Event(), []

    class Slow:
        def __init__(self, evaluation) -> None:  # noqa: ANN001
            self.evaluation = evaluation

        def __call__(self, seed: int):
            if not calls:  # step 0's evaluation, which step 1 waits for
                calls.append(seed)
                return self.evaluation(seed)
            started.set()
            for _ in range(300):  # 30 s of Python lines: stoppable at any of them
                time.sleep(0.1)
            return self.evaluation(seed)

        def __getattr__(self, name: str):
            return getattr(self.evaluation, name)

    def failing_step(self, *args, **kwargs):  # noqa: ANN001
        if self.state.step == 1:
            assert started.wait(30)
            raise RuntimeError("the trainer broke")
        return step(self, *args, **kwargs)

    monkeypatch.setattr(runner, "build_evaluation", lambda *a, **k: Slow(build(*a, **k)))
    monkeypatch.setattr(runner.RunLoop, "step", failing_step)
    with pytest.raises(RuntimeError, match="the trainer broke"):
        runner.train(micro("backend=inline", "steps=4", "eval.every=1", "eval.overlap=true", "checkpoint_every=100"),
                     tmp_path, show_progress=False)
    assert "scalerl-eval" not in _threads()
