"""The Ray backend (``scalerl/pipeline/ray_backend.py``): two generator actors on a local Ray run the same
schedules as the local backend with the same staleness bound (§3.1), batches come from both actors, an error
in an actor's task is a RuntimeError in the driver, not a hang, and an actor that dies is replaced with nothing
lost (docs/scale-out.md, "what survives what")."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from scalerl.build import build_model, build_task
from scalerl.cli import main
from scalerl.pipeline import runner
from scalerl.pipeline.backends import backend_devices, make_backend
from scalerl.rollout import Request
from scalerl.pipeline.schedules import SCHEDULES
from scalerl.runlog import read_metrics
from test_faults import _computed
from test_pipeline import _consumed, micro, train_lines

RUN = ["backend=ray", "ray.generators=2", "steps=6", "schedule.k=2", "checkpoint_every=100", "eval.every=100"]


def test_ray_config_and_devices():
    cfg = micro("backend=ray", "ray.generators=3", "ray.num_cpus_per_generator=0.5")
    assert (cfg.ray.address, cfg.ray.generators, cfg.ray.num_cpus_per_generator) == (None, 3, 0.5)
    assert backend_devices(cfg) == 4  # the trainer plus one device per generator


def test_address_needs_the_ray_backend(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--quiet", "--out", str(tmp_path / "run"), "--backend", "local", "--address", "auto"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --address") and "--backend ray" in err and "\n" not in err
    assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def ray_mod():
    return pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_session(ray_mod):
    """A Ray session the tests own (the backend must use it and leave it running); closed after the module."""
    started = not ray_mod.is_initialized()
    if started:
        ray_mod.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield ray_mod
    if started:
        ray_mod.shutdown()


def _train_capturing_backend(monkeypatch, out: Path, *sets: str):
    made = []

    def capture(*args, **kwargs):
        made.append(make_backend(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(runner, "make_backend", capture)
    runner.train(micro(*RUN, *sets), out, show_progress=False)
    return made[0]


@pytest.mark.ray
def test_pipeline_rl_on_two_actors(tmp_path, monkeypatch, ray_mod):
    started_here = not ray_mod.is_initialized()  # the first Ray test: the backend starts Ray with 2 CPUs
    backend = _train_capturing_backend(monkeypatch, tmp_path, "schedule.name=pipeline_rl")
    assert ray_mod.is_initialized() != started_here  # it shut down exactly what it started
    lines = train_lines(tmp_path)
    assert [r["step"] for r in lines] == list(range(1, 7))
    assert all(r["train/staleness_max"] <= 2 for r in lines)
    assert all(r["train/stale_dropped"] == 0 for r in lines)
    assert any(r["train/staleness_max"] > 0 for r in lines)  # the actors really ran ahead of the trainer
    assert sorted(backend.actor_of) == list(range(6))
    assert set(backend.actor_of.values()) == {0, 1}  # both actors generated batches
    assert lines[-1]["compute/device_hours"] > 0
    evals = [r["step"] for r in read_metrics(tmp_path) if "val/pass_rate" in r]
    assert evals == [0, 6]


@pytest.mark.ray
def test_actors_are_held_while_the_trainer_waits_for_an_evaluation(tmp_path, monkeypatch, ray_session):
    """Evaluations the steps wait for (``eval.overlap=false``) hold the actors (``RayBackend.hold``), released
    after each, and the run goes on to its end with the schedule's bound (no actor is left held)."""
    from scalerl.pipeline.ray_backend import RayBackend

    holds = []
    hold = RayBackend.hold
    monkeypatch.setattr(RayBackend, "hold", lambda self, on: (holds.append(on), hold(self, on))[1])
    _train_capturing_backend(monkeypatch, tmp_path, "schedule.name=pipeline_rl", "eval.every=2",
                             "eval.overlap=false")
    lines = train_lines(tmp_path)
    assert [r["step"] for r in lines] == list(range(1, 7))
    assert all(r["train/staleness_max"] <= 2 for r in lines)
    assert [r["step"] for r in read_metrics(tmp_path) if "val/pass_rate" in r] == [0, 2, 4, 6]
    assert holds == [True, False] * 4


@pytest.mark.ray
def test_ppo_off_policy_on_two_actors(tmp_path, monkeypatch, ray_session):
    backend = _train_capturing_backend(monkeypatch, tmp_path, "schedule.name=ppo_off_policy")
    assert ray_session.is_initialized()  # a session the backend did not start is left running
    lines = train_lines(tmp_path)
    # each group of k=2 batches is generated with frozen weights, then trained on: staleness b mod k
    assert [r["train/staleness_max"] for r in lines] == [0, 1, 0, 1, 0, 1]
    assert all(r["train/stale_dropped"] == 0 for r in lines)
    assert set(backend.actor_of.values()) == {0, 1}  # groups go to the actors in turn
    for group in range(3):
        assert backend.actor_of[2 * group] == backend.actor_of[2 * group + 1]  # a group is one actor's batch


@pytest.mark.ray
def test_a_task_error_is_a_runtime_error_and_a_dead_actor_is_replaced(ray_session):
    cfg = micro(*RUN, "ray.generators=1")
    problem = next(iter(build_task(cfg.task).train_problems())).id
    backend = make_backend(cfg, SCHEDULES.get("pipeline_rl")(2), build_model(cfg.model, cfg.seed).model.state_dict(), 0)
    try:
        backend.submit([Request(0, ["no-such-problem"], 1)])  # the actor raises KeyError on it: a bug, not a death
        with pytest.raises(RuntimeError, match="(?s)actor 0 failed on batches \\[0\\].*KeyError.*no-such-problem"):
            backend.next_batch(0)
        assert backend.faults() == {"faults/generator_restarts": 0.0}
        dead = backend.actors[0]
        ray_session.kill(dead)
        backend.submit([Request(1, [problem], 2)])  # a good request to a dead actor: a new one generates it
        assert backend.next_batch(1).problem_ids == [problem]
        assert backend.faults() == {"faults/generator_restarts": 1.0} and backend.actors[0] is not dead
    finally:
        backend.close()


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _ours(pid: int) -> bool:
    """Whether ``pid`` descends from this process: the Ray session this process started (its raylet forks the
    workers). Another suite's actors on the same machine are not ours to kill (two suites run side by side once
    killed each other's actors while they started)."""
    while pid > 1:
        if pid == os.getpid():
            return True
        pid = _parent(pid)
    return False


def _actor_pids() -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and b"ray::GeneratorActor" in Path(f"/proc/{entry}/cmdline").read_bytes() \
                    and _ours(int(entry)):
                pids.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return sorted(pids)


class ActorKiller(threading.Thread):
    """SIGKILLs a generator actor's process (a crash, as the kernel's OOM killer would) once the run has
    trained each of ``at`` steps, never the same process twice."""

    def __init__(self, run_dir: Path, at: list[int]) -> None:
        super().__init__(daemon=True)
        self.run_dir, self.at, self.killed, self.stop = run_dir, at, [], threading.Event()

    def run(self) -> None:
        gone: set[int] = set()
        for step in self.at:
            while not self.stop.is_set():
                consumed = self.run_dir / "consumed.jsonl"
                trained = len(consumed.read_text().splitlines()) if consumed.exists() else 0
                alive = [p for p in _actor_pids() if p not in gone]
                if trained >= step and alive:
                    os.kill(alive[0], signal.SIGKILL)
                    gone.add(alive[0])
                    self.killed.append(step)
                    break
                time.sleep(0.02)


@pytest.mark.ray
def test_actors_killed_during_a_run_are_replaced_and_nothing_is_lost(tmp_path, monkeypatch, ray_session):
    sets = ("schedule.name=ppo_off_policy", "steps=8", "ray.generators=1")  # one actor: every kill is seen
    runner.train(micro(*RUN, *sets, "backend=inline"), tmp_path / "ref", show_progress=False)
    killer = ActorKiller(tmp_path / "chaos", [1, 4])
    killer.start()
    try:
        runner.train(micro(*RUN, *sets), tmp_path / "chaos", show_progress=False)
    finally:
        killer.stop.set()
        killer.join(timeout=5)
    assert killer.killed == [1, 4]
    lines = train_lines(tmp_path / "chaos")
    assert [r["step"] for r in lines] == list(range(1, 9)) and lines[-1]["faults/generator_restarts"] == 2
    # every prompt trained once, as without the kills; under PPO-off-policy the same numbers too
    assert _consumed(tmp_path / "chaos") == _consumed(tmp_path / "ref")
    assert _computed(read_metrics(tmp_path / "chaos")) == _computed(read_metrics(tmp_path / "ref"))
