"""Audit of the compute meter, the x-axis of every curve (App. A.3: GPU-hours = every device the run holds x the
training wall clock; a device that waits still counts, which is why PipelineRL beats PPO-off-policy in §3.1 /
App. A.11), and of how the driver starts, pauses and resumes it.

The loop tests run the real ``RunLoop`` (and the real ``RunState`` checkpoint and ``RunLog``) on a *fake clock*:
a simulated generator (``SimBackend``: batches in order, ``G`` seconds each, beside the trainer, held like the local
backend's ``hold``) and a trainer step of ``T`` seconds advance it, so every device-hour below is worked by hand
from the schedule, not measured.
"""

from __future__ import annotations

import json
import math
import time
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from scalerl.compute import ComputeMeter
from scalerl.timing import Stopwatch
from test_compute import _tiny_batch  # a batch of the given problem ids, made in ``seconds``


class Clock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# ---------------------------------------------------------------------------------------------- the meter alone


def test_pauses_are_left_out_and_nothing_else():
    """devices x (wall clock from start to stop) less each pause; a pause of a stopped meter starts nothing."""
    clock = Clock(1000.0)
    m = ComputeMeter(n_params=1, devices=4, clock=clock)
    with m.paused():  # before the start (the step-0 evaluation): nothing metered, and the clock stays stopped
        clock.now += 500.0
    assert m.wall == 0.0 and not m._interval.running
    m.start()
    clock.now += 30.0
    with m.paused():
        clock.now += 7.0
        with m.paused():  # nested: still one pause
            clock.now += 3.0
        clock.now += 1.0
    clock.now += 20.0
    assert m.wall == 50.0  # 30 + 20; the 11 s pause left out
    m.start()  # idempotent: a second start does not restart the interval
    clock.now += 10.0
    m.stop()
    clock.now += 99.0  # stopped
    assert m.wall == 60.0
    assert m.device_seconds == 240.0
    assert m.device_hours == 240.0 / 3600.0  # seconds -> hours, once
    assert m.metrics()["compute/device_hours"] == 240.0 / 3600.0
    assert m.metrics()["compute/wall_s"] == 60.0


def test_a_resumed_meter_continues_without_reset_or_double_count_on_other_devices():
    """Checkpoint at 100 s on 2 devices (200 device-s), resumed on 5 devices (``devices`` is resumable): 20 s more
    are 100 device-s, and the first run's 200 are neither charged again at 5 nor lost. A second resume on 1
    device continues from 300."""
    clock = Clock(5.0e6)  # perf_counter after weeks of uptime
    a = ComputeMeter(n_params=1, devices=2, clock=clock)
    a.start()
    clock.now += 100.0
    saved = a.state_dict()  # taken while running: metered up to now
    assert saved["wall_seconds"] == 100.0 and saved["device_seconds"] == 200.0
    b = ComputeMeter(n_params=1, devices=5, clock=clock)
    b.load_state_dict(saved)
    assert b.devices == 5 and b.device_seconds == 200.0 and b.wall == 100.0  # no reset, nothing charged yet
    b.start()
    clock.now += 20.0
    assert b.device_seconds == 300.0 and b.wall == 120.0
    b.stop()
    c = ComputeMeter(n_params=1, devices=1, clock=clock)
    c.load_state_dict(b.state_dict())
    c.start()
    clock.now += 10.0
    assert c.device_seconds == 310.0 and c.device_hours == 310.0 / 3600.0
    # a checkpoint written before device_seconds was saved: its own devices x its wall clock
    d = ComputeMeter(n_params=1, devices=7, clock=clock)
    d.load_state_dict({"n_params": 1, "devices": 3, "wall_seconds": 10.0})
    assert d.device_seconds == 30.0


def test_a_long_run_accumulates_without_drift():
    """200,000 metered intervals of 0.37 s (a long run's steps between pauses), read off a clock at 1e7 s: the meter's
    running sum matches the exactly rounded sum of the intervals the clock gave (math.fsum) to 1e-12, the nominal
    74,000 s to the clock's own resolution, and device-hours are that x devices / 3600."""
    clock = Clock()
    m = ComputeMeter(n_params=1, devices=80, clock=clock)
    base, intervals = 1.0e7, []
    for i in range(200_000):
        clock.now = a = base + i * 1.0
        m.start()
        clock.now = b = base + i * 1.0 + 0.37
        m.stop()
        intervals.append(b - a)
    exact = math.fsum(intervals)
    assert m.wall == pytest.approx(exact, rel=1e-12)
    assert exact == pytest.approx(74_000.0, abs=200_000 * 2e-9)  # a 1e7 s clock reads to ~2e-9 s
    assert m.device_hours == pytest.approx(80 * exact / 3600.0, rel=1e-12)


def test_the_clocks_are_monotonic():
    """A wall clock that can jump (NTP, a suspended laptop) would add or remove compute: every clock behind the
    meter, the run's wall clock and the timing phases is ``perf_counter``, a monotonic clock."""
    from scalerl.pipeline.state import RunState

    assert time.get_clock_info("perf_counter").monotonic
    assert ComputeMeter(n_params=1).clock is time.perf_counter
    assert Stopwatch().clock is time.perf_counter
    assert RunState(curriculum=None, meter=ComputeMeter(n_params=1), forecaster=None)._clock.clock is time.perf_counter


# ---------------------------------------------------------------------------------------------- the loop on a fake clock


def _sim_backend(clock: Clock, G: float, schedule):
    from scalerl.pipeline.ready import ReadyBatches

    class SimBackend(ReadyBatches):
        """One generator beside the trainer on the fake clock: schedule groups in order, ``G`` s a batch, a group
        starting once submitted and the generator free; ``hold`` as the local backend's: no group starts while
        held, and if the trainer's next batch has not arrived, ``hold(True)`` returns once the group under way
        is done."""

        concurrent = True
        devices = 2

        def __init__(self) -> None:
            super().__init__()
            self.queue: list[tuple[float, list]] = []  # (submitted at, group) not started
            self.under_way: dict[int, tuple[float, object]] = {}  # index -> (done at, request)
            self.free_at = 0.0
            self.held_since: float | None = None
            self.next_index = 0
            self.starts: list[tuple[float, float, list[int]]] = []

        def submit(self, requests) -> None:
            for group in schedule.split(requests):
                self.queue.append((clock.now, group))

        def publish(self, state_dict, version) -> None:
            pass

        def _advance(self) -> None:
            while self.queue:
                submitted, group = self.queue[0]
                start = max(self.free_at, submitted)
                if start > clock.now or (self.held_since is not None and start >= self.held_since):
                    return
                self.queue.pop(0)
                self.free_at = start + G * len(group)
                self.starts.append((start, self.free_at, [r.index for r in group]))
                for r in group:
                    self.under_way[r.index] = (self.free_at, r)

        def _take(self) -> bool:
            self._advance()
            done = [i for i, (t, _) in self.under_way.items() if t <= clock.now]
            for i in done:
                _, r = self.under_way.pop(i)
                self.ready[i] = _tiny_batch(i, r.problem_ids, G)
            return bool(done)

        def _collect(self, timeout: float) -> None:
            if self._take() or timeout == 0.0:
                return
            events = [t for t, _ in self.under_way.values()]
            if self.queue and self.held_since is None:
                events.append(max(self.free_at, self.queue[0][0]))
            assert events, "waiting for a batch nothing will make"
            clock.now = max(clock.now, min(events))
            self._take()

        def _coming(self, index: int) -> bool:
            return index in self.under_way or any(r.index == index for _, g in self.queue for r in g)

        def next_batch(self, index: int):
            while index not in self.ready:
                self._collect(timeout=1.0)
            self.next_index = index + 1
            return self.ready.pop(index)

        def hold(self, on: bool) -> None:
            if on:
                self._take()
                if self.next_index not in self.ready and self.free_at > clock.now:
                    clock.now = self.free_at  # the group under way: the trainer would have waited for it
                    self._take()
                self.held_since = clock.now
            else:
                self.held_since = None
                self.free_at = max(self.free_at, clock.now)  # what was held starts now

        def close(self) -> None:
            pass

    return SimBackend()


class _SyncCall:
    """``BackgroundCall`` run at once (deterministic): the evaluation "beside the steps" is done when launched."""

    def __init__(self, fn, *args, name: str = "", nice: int = 0) -> None:
        self._value = fn(*args)
        self.seconds = 0.0

    def done(self) -> bool:
        return True

    def result(self):
        return self._value

    def stop(self, timeout: float) -> None:
        pass


def _cfg(*sets: str):
    from scalerl.config import load_config

    return load_config("scalerl", None, ["batch.prompts=2", "tensorboard=false", *sets])


def _loop(cfg, out: Path, clock: Clock, G: float, T: float, E: float, C: float, crash_at: int | None = None,
          resume: bool = False):
    """The real RunLoop, RunState (its checkpoint on disk) and RunLog, on the fake clock; ``crash_at``: the step
    (1-based) whose training raises, as a killed run."""
    from scalerl.algo.curriculum import CURRICULA
    from scalerl.forecast import Forecaster
    from scalerl.pipeline.runner import RunLoop
    from scalerl.pipeline.schedules import SCHEDULES
    from scalerl.pipeline.state import RunState
    from scalerl.runlog import RunLog, load_latest_checkpoint

    schedule = SCHEDULES.get(cfg.schedule.name)(cfg.schedule.k)
    backend = _sim_backend(clock, G, schedule)
    state = RunState(curriculum=CURRICULA.get("uniform")([f"p{i}" for i in range(10)], 0),
                     meter=ComputeMeter(n_params=1, devices=backend.devices, clock=clock),
                     forecaster=Forecaster(cfg.forecast))
    trainer = SimpleNamespace(version=0, timings={})
    ckpt = load_latest_checkpoint(out) if resume else None
    if ckpt is not None:
        state.load(ckpt)
        trainer.version = ckpt["trainer"]["version"]
    log = RunLog(out, tensorboard=False,
                 resume=((state.step, len(state.forecaster.x)) if ckpt is not None else (-1, 0)) if resume else None)
    for batch in state.ready:
        backend.put_ready(batch)
    backend.submit(state.unready())
    backend.next_index = state.step

    class Crash(Exception):
        pass

    class Ranks:
        world = 1

        def step(self, trainer, batch, stage):
            if crash_at is not None and batch.index + 1 == crash_at:
                raise Crash()
            clock.now += T
            trainer.version += 1
            return {"train/tokens_kept": 2.0}

        def weights(self, model):
            return {}

        def refresh(self, eval_model, model) -> None:
            pass

        def trainer_state(self, trainer):
            return {"version": trainer.version}

    class Loop(RunLoop):
        def _save(self, ready) -> None:
            super()._save(ready)
            clock.now += C  # writing the checkpoint

    class Evaluation:
        task = None

        def __call__(self, seed):
            clock.now += E
            return {"val/pass_rate": 0.5}

    display = SimpleNamespace(start=lambda *a: None, step=lambda r: None, eval=lambda *a: None)
    loop = Loop(cfg, out, Ranks(), state, schedule, trainer, None, None, Evaluation(), backend, log, display, {},
                overlap=cfg.eval.overlap)
    try:
        loop.run({}, fresh=ckpt is None, evaluate_first=ckpt is not None and state.step in log.unlogged)
    except Crash:
        loop.abandon()
    finally:
        log.close()
    return loop, backend


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _ds(row: dict) -> float:
    """A row's device-seconds, rounded off the /3600 and back."""
    return round(row["compute/device_hours"] * 3600.0, 6)


@pytest.fixture
def sync_eval(monkeypatch):
    from scalerl.pipeline import runner

    monkeypatch.setattr(runner, "BackgroundCall", _SyncCall)


@pytest.mark.parametrize("every", [1, 100])
@pytest.mark.parametrize("ckpt_every", [1, 100])
def test_device_hours_by_hand_whatever_the_evaluation_and_checkpoint_frequency(tmp_path, every, ckpt_every):
    """PipelineRL-1, generation the bottleneck (G = 100 s a batch, T = 10 s a step), 2 devices, 4 steps. The
    generator makes batch b in [100b, 100b+100] (batch b+1 is requested at step b), the trainer takes step s at
    [100s, 100s+10]: 410 s of training wall clock, 820 device-s, whether the steps wait for an evaluation (1000 s)
    after every step or not, and whether a checkpoint (500 s to write) follows every step or not: each pause
    begins once the batch under way is made (that wait is metered, the trainer would have waited for it)
    and the generator starts nothing in it. The clock's whole run is exactly the metered 410 s plus the
    evaluations' and checkpoints' own time: no other time is left out."""
    cfg = _cfg("backend=local", "schedule.name=pipeline_rl", "schedule.k=1", "steps=4", f"eval.every={every}",
               f"checkpoint_every={ckpt_every}", "eval.overlap=false")
    clock = Clock()
    loop, _ = _loop(cfg, tmp_path, clock, G=100.0, T=10.0, E=1000.0, C=500.0)
    assert loop.state.meter.wall == 410.0
    assert loop.state.meter.device_seconds == 820.0
    train = [r for r in _rows(tmp_path) if "val/pass_rate" not in r]
    assert [r["step"] for r in train] == [1, 2, 3, 4]
    assert [_ds(r) for r in train] == [220.0, 420.0, 620.0, 820.0]  # 2 x (100 s + 10 s), then 2 x 100 s a step
    evals = [r for r in _rows(tmp_path) if "val/pass_rate" in r]
    if every == 1:  # each evaluation's point: after the wait for the batch under way, before its pause
        assert [(r["step"], _ds(r)) for r in evals] == [(0, 0.0), (1, 400.0), (2, 600.0), (3, 800.0), (4, 820.0)]
    else:
        assert [(r["step"], _ds(r)) for r in evals] == [(0, 0.0), (4, 820.0)]
    hours = [_ds(r) for r in _rows(tmp_path)]
    assert hours == sorted(hours)  # the steps wait for each evaluation: never decreasing along the file
    pauses = clock.now - 410.0
    assert pauses == pytest.approx(1000.0 * len(evals) + (500.0 * 4 if ckpt_every == 1 else 500.0))


def test_ppo_off_policy_is_charged_for_the_devices_it_leaves_idle(tmp_path):
    """§3.1 / App. A.11 by hand: the same busy time (G = T = 100 s a batch, 4 steps, k = 2, 2 devices).
    PPO-off-policy-2 generates batches 0-1 (200 s), trains on them (200 s), then 2-3, then trains: 800 s,
    1600 device-s. PipelineRL-2 overlaps: batch b is made in [100b, 100b+100], step s trained in [100s, 100s+100]:
    500 s, 1000 device-s. Busy seconds are the same (the old busy-time meter charged both alike)."""
    out = {}
    for name in ("ppo_off_policy", "pipeline_rl"):
        cfg = _cfg("backend=local", f"schedule.name={name}", "schedule.k=2", "steps=4", "eval.every=100",
                   "checkpoint_every=100", "eval.overlap=false")
        loop, _ = _loop(cfg, tmp_path / name, Clock(), G=100.0, T=100.0, E=0.0, C=0.0)
        out[name] = loop.state.meter
    assert out["ppo_off_policy"].device_seconds == 1600.0
    assert out["pipeline_rl"].device_seconds == 1000.0
    assert out["ppo_off_policy"].gen_seconds == out["pipeline_rl"].gen_seconds == 400.0


@pytest.mark.parametrize("overlap", [False, True])
def test_a_run_stopped_at_its_compute_budget_and_resumed_meters_what_an_uninterrupted_run_does(
        tmp_path, sync_eval, overlap):
    """PipelineRL-1, G = 100 s, T = 50 s, 2 devices, 3 steps. Uninterrupted: batch b is made in [100b, 100b+100]
    (b >= 1: from the end of the generator's previous batch), step s is trained once its batch is there: steps end
    at 150, 250, 350 s: 700 device-s.

    Stopped by ``max_device_hours`` = 0.11 (396 device-s) after step 2 (500 device-s, at 250 s), batch 2 is under
    way (200-300 s). The last evaluation (steps waiting for it: its hold) or the last checkpoint (overlapped: its
    settle) waits for it, as the loop's evaluations and checkpoints do, metered: the trainer would have waited for
    it. Resumed without the budget, batch 2 is in the checkpoint and step 3 takes 50 s: 600 + 100 = 700 device-s,
    the uninterrupted run's. (The meter used to stop before the run's last evaluation and checkpoint, so that wait
    went unmetered and the resumed run came to 600.)"""
    sets = ("backend=local", "schedule.name=pipeline_rl", "schedule.k=1", "eval.every=100", "checkpoint_every=100",
            f"eval.overlap={str(overlap).lower()}")
    whole, _ = _loop(_cfg(*sets, "steps=3"), tmp_path / "whole", Clock(), G=100.0, T=50.0, E=0.0, C=0.0)
    assert whole.state.meter.device_seconds == 700.0

    clock = Clock()
    first, _ = _loop(_cfg(*sets, "steps=3", "max_device_hours=0.11"), tmp_path / "split", clock, G=100.0, T=50.0,
                     E=0.0, C=0.0)
    assert first.state.step == 2
    assert first.state.meter.device_seconds == 600.0  # 2 x 300 s: the wait for batch 2 is metered
    clock.now += 10_000.0  # the run is down until it is resumed
    second, _ = _loop(_cfg(*sets, "steps=3"), tmp_path / "split", clock, G=100.0, T=50.0, E=0.0, C=0.0, resume=True)
    assert second.state.step == 3
    assert second.state.meter.device_seconds == 700.0
    rows = _rows(tmp_path / "split")
    assert [_ds(r) for r in rows if "val/pass_rate" not in r] == [300.0, 500.0, 700.0]
    by_step = [_ds(r) for r in sorted(rows, key=lambda r: (r["step"], "val/pass_rate" in r))]
    assert by_step == sorted(by_step)  # never decreasing along the steps, across the resume too
    if not overlap:  # the steps wait for each evaluation: its line follows its step's, so the file is in order too
        assert [(r["step"], _ds(r)) for r in rows] == [(0, 0.0), (1, 300.0), (2, 500.0), (2, 600.0), (3, 700.0),
                                                       (3, 700.0)]


def test_a_run_killed_while_its_evaluation_ran_beside_the_steps_resumes_the_meter(tmp_path, sync_eval):
    """Overlapped evaluation at step 2 (launched, then the checkpoint of step 2 written with it still unlogged), the
    run killed at step 3: the resumed run evaluates step 2 again, at the checkpoint's compute, and ends where an
    uninterrupted run ends (PipelineRL-1, G = 100 s, T = 50 s, 2 devices, 4 steps: 450 s, 900 device-s); the
    compute metered after the checkpoint by the killed run is neither kept nor charged twice."""
    sets = ("backend=local", "schedule.name=pipeline_rl", "schedule.k=1", "eval.every=2", "checkpoint_every=2",
            "eval.overlap=true", "steps=4")
    whole, _ = _loop(_cfg(*sets), tmp_path / "whole", Clock(), G=100.0, T=50.0, E=0.0, C=0.0)
    assert whole.state.meter.device_seconds == 900.0
    whole_evals = [(r["step"], _ds(r)) for r in _rows(tmp_path / "whole") if "val/pass_rate" in r]
    # launched at step 2 before the checkpoint's wait for batch 2 (250 -> 300 s, metered)
    assert whole_evals == [(0, 0.0), (2, 500.0), (4, 900.0)]

    clock = Clock()
    killed, _ = _loop(_cfg(*sets), tmp_path / "split", clock, G=100.0, T=50.0, E=0.0, C=0.0, crash_at=3)
    assert killed.state.step == 2
    clock.now += 10_000.0
    resumed, _ = _loop(_cfg(*sets), tmp_path / "split", clock, G=100.0, T=50.0, E=0.0, C=0.0, resume=True)
    assert resumed.state.meter.device_seconds == 900.0
    rows = _rows(tmp_path / "split")
    assert [(r["step"], _ds(r)) for r in rows if "val/pass_rate" in r] == [(0, 0.0), (2, 600.0), (4, 900.0)]
    train = [(r["step"], _ds(r)) for r in rows if "val/pass_rate" not in r]
    assert train == [(1, 300.0), (2, 500.0), (3, 700.0), (4, 900.0)]


# ---------------------------------------------------------------------------------------------- devices held


class _Held(Exception):
    pass


@pytest.mark.parametrize("sets, world, held", [
    (("backend=inline",), 1, 1),  # generator and trainer take turns on one device
    (("backend=local",), 1, 2),  # the trainer and one generator process
    (("backend=ray", "ray.generators=3"), 1, 4),  # the trainer and one device per actor
    (("backend=ray", "ray.generators=3"), 2, 5),  # a trainer sharded over 2 ranks: one more
    (("backend=inline",), 4, 4),
    (("backend=local", "devices=80"), 2, 80),  # the config's count overrides (e.g. the paper's 64 + 16 GB200s)
])
def test_the_meter_counts_every_device_the_run_holds(tmp_path, monkeypatch, sets, world, held):
    """The devices the driver gives the meter: the trainer's ranks plus the backend's generators, busy or idle
    (App. A.3, §3.1), or ``devices`` from the config. The backend itself is replaced by a stub (no process, no
    Ray): what is checked is the count the run is charged at."""
    from test_pipeline import micro

    from scalerl.pipeline import runner
    from scalerl.pipeline.ranks import Solo

    seen = {}

    def run(self, *args, **kwargs):
        seen["devices"] = self.state.meter.devices
        raise _Held()

    monkeypatch.setattr(runner, "make_backend", lambda *a, **k: SimpleNamespace(
        submit=lambda r: None, put_ready=lambda b: None, close=lambda: None))
    monkeypatch.setattr(runner.RunLoop, "run", run)
    ranks = type("Ranks", (Solo,), {"world": world})()
    with pytest.raises(_Held):
        runner._drive(micro(*sets, "steps=1"), tmp_path / "run", False, False, ranks)
    assert seen["devices"] == held


# ---------------------------------------------------------------------------------------------- a real run, resumed


def test_device_hours_never_decrease_over_a_real_run_and_its_resume(tmp_path):
    """The micro model, inline (1 device), PipelineRL, evaluations beside the steps: 4 steps with checkpoints every
    2, then resumed to 6. Along the steps (each evaluation's line after its step's line) device-hours never decrease,
    also across the resume; every line is 1 device x its metered wall clock; the resumed run starts from the
    checkpoint's compute (no reset) and its first step adds only its own time (no double count). (Along the file
    itself an evaluation beside the steps is logged when it is done, after later steps' lines, at the compute it
    started at: documented, docs/architecture.md ``pipeline/runner.py``.)"""
    from test_pipeline import micro

    from scalerl.pipeline.runner import train
    from scalerl.runlog import load_latest_checkpoint, read_metrics

    sets = ("backend=inline", "eval.every=2", "checkpoint_every=2")
    train(micro(*sets, "steps=4"), tmp_path, show_progress=False)
    saved = load_latest_checkpoint(tmp_path)["compute"]
    assert saved["device_seconds"] == pytest.approx(saved["wall_seconds"])  # inline: one device
    train(micro(*sets, "steps=6"), tmp_path, resume=True, show_progress=False)
    rows = read_metrics(tmp_path)
    assert sorted(r["step"] for r in rows if "val/pass_rate" not in r) == [1, 2, 3, 4, 5, 6]
    assert [r["step"] for r in rows if "val/pass_rate" in r] == [0, 2, 4, 6]
    ordered = sorted(rows, key=lambda r: (r["step"], "val/pass_rate" in r))
    hours = [r["compute/device_hours"] for r in ordered]
    assert hours == sorted(hours), hours
    for r in rows:
        assert r["compute/device_hours"] * 3600 == pytest.approx(r["compute/wall_s"], rel=1e-12, abs=1e-12)
    at4 = [r for r in rows if r["step"] == 4]
    at5 = next(r for r in rows if r["step"] == 5)
    assert max(r["compute/wall_s"] for r in at4) <= saved["wall_seconds"] < at5["compute/wall_s"]
    # step 5's own wait for its batch and its training are charged after the checkpoint's compute
    own = at5["timing/wait_s"] + at5["compute/train_seconds"] - saved["train_seconds"]
    assert at5["compute/wall_s"] - saved["wall_seconds"] >= own - 1e-9


@pytest.mark.parametrize("budget", [False, True])
def test_a_completed_run_does_not_meter_its_last_waits_a_stopped_one_does(tmp_path, monkeypatch, budget):
    """PipelineRL-1, G = 100 s, T = 50 s, 2 devices, steps end at 150, 250, 350 s (700 device-s), the last evaluation
    not overlapped, and its hold waiting 100 s more (a batch under way that the run will not train on: a PPO group
    generated whole past the last step). A run that did all 3 steps trains on nothing generated after them: its
    meter ends at its last step's 700 device-s and the last evaluation sits there too. A run stopped by its budget
    after step 2 keeps the trainer's next batch in its checkpoint: the same wait is metered (its resumed run trains
    on that batch)."""
    module = sys.modules[__name__]
    plain = module._sim_backend

    def slow_hold(clock, G, schedule):
        backend = plain(clock, G, schedule)
        hold = backend.hold

        def held(on: bool) -> None:
            hold(on)
            if on and backend.next_index >= 3 - budget:  # the run's last evaluation
                clock.now += 100.0
        backend.hold = held
        return backend

    monkeypatch.setattr(module, "_sim_backend", slow_hold)
    sets = ("backend=local", "schedule.name=pipeline_rl", "schedule.k=1", "eval.every=100", "checkpoint_every=100",
            "eval.overlap=false", "steps=3", *(["max_device_hours=0.11"] if budget else []))
    loop, _ = _loop(_cfg(*sets), tmp_path / "run", Clock(), G=100.0, T=50.0, E=0.0, C=0.0)
    last_eval = [_ds(r) for r in _rows(tmp_path / "run") if "val/pass_rate" in r][-1]
    if budget:
        assert loop.state.step == 2 and loop.state.meter.device_seconds == last_eval == 600.0 + 200.0
    else:
        assert loop.state.step == 3 and loop.state.meter.device_seconds == last_eval == 700.0
