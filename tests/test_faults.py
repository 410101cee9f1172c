"""Chaos: a run survives its generator process dying and its grader failing (docs/scale-out.md, "what survives
what"). The local backend's generator is killed with SIGKILL at random steps, at a random moment within each;
the run replaces it, regenerates exactly the batches lost with it, and finishes with every prompt trained once;
under PPO-off-policy (§3.1: each group generated with frozen weights) its prompts and metrics equal an
uninterrupted run's. A grader that raises fails its samples, which then train exactly as incorrect ones; one
that fails on most of a batch stops the run with a checkpoint, from which it resumes once fixed."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import signal
import threading
import time
import zlib
from pathlib import Path

import pytest

from scalerl import cli
from scalerl.errors import RunStopped
from scalerl.pipeline import runner
from scalerl.pipeline.backends import ProcessBackend
from scalerl.pipeline.runner import train
from scalerl.runlog import read_metrics
from tests.test_pipeline import _consumed, micro, train_lines

STEPS = 10
PUBLISH = ProcessBackend.publish  # the real one: each run's hold wraps this, not the previous run's wrapper


def _generator() -> mp.Process | None:
    return next((p for p in mp.active_children() if p.name == "scalerl-generator" and p.is_alive()), None)


class Killer(threading.Thread):
    """SIGKILLs this process's generator once the run has trained each of ``at`` steps, after a random delay
    of up to ``JITTER_S`` (so a kill lands while a batch is being generated, sent or waited for), a new
    generator each time: it waits for the replacement of the one it killed.

    However fast the run is, each kill lands while the trainer still needs the generator: :meth:`hold` keeps
    the trainer from publishing the weights after step ``s`` until the kill planned at ``s`` is done, so the
    batches the run has not yet trained on cannot all have been generated (a micro run once finished its
    last steps within the delay and the kill went unnoticed)."""

    JITTER_S = 0.1

    def __init__(self, run_dir: Path, at: list[int]) -> None:
        super().__init__(daemon=True)
        self.run_dir, self.at, self.killed, self.stop = run_dir, sorted(at), [], threading.Event()
        self.last: int | None = None  # the pid of the generator killed last
        self.delays = random.Random(str(at)).uniform  # seeded: a failing case can be run again

    def hold(self, version: int) -> None:
        """Called by the trainer before it publishes weights ``version``: wait while the next kill is planned at
        a step before ``version`` and the generator it is for is alive (one already killed is replaced only
        once the trainer finds it dead, so the trainer goes on then)."""
        planned = len(self.killed)
        while (not self.stop.is_set() and len(self.killed) == planned < len(self.at) and self.at[planned] < version
               and (proc := _generator()) is not None and proc.pid != self.last):
            time.sleep(0.005)

    def trained(self) -> int:
        path = self.run_dir / "consumed.jsonl"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def run(self) -> None:
        for step in self.at:
            while not self.stop.is_set():
                proc = _generator()
                if self.trained() >= step and proc is not None and proc.pid != self.last:
                    time.sleep(self.delays(0, self.JITTER_S))
                    if not proc.is_alive():
                        continue  # it died by itself meanwhile (or the run ended): look again
                    os.kill(proc.pid, signal.SIGKILL)
                    self.last = proc.pid
                    self.killed.append(step)
                    break
                time.sleep(0.02)


def _run(monkeypatch, run_dir: Path, schedule: str, kill_at: list[int], *sets: str) -> Killer:
    cfg = micro("backend=local", f"steps={STEPS}", f"schedule.name={schedule}", "schedule.k=2",
                "checkpoint_every=100", "eval.every=5", *sets)
    killer = Killer(run_dir, kill_at)

    def held(backend, state_dict, version):
        killer.hold(version)
        PUBLISH(backend, state_dict, version)

    monkeypatch.setattr(ProcessBackend, "publish", held)
    killer.start()
    try:
        train(cfg, run_dir, show_progress=False)
    finally:
        killer.stop.set()
        killer.join(timeout=5)
    return killer


@pytest.mark.parametrize("schedule", ["ppo_off_policy", "pipeline_rl"])
def test_generator_killed_at_random_steps_is_replaced_and_nothing_is_lost(tmp_path, monkeypatch, schedule):
    kill_at = sorted(random.Random(schedule).sample(range(0, STEPS - 3), 3))  # step 0: before the first batch
    _run(monkeypatch, tmp_path / "ref", schedule, [])
    killer = _run(monkeypatch, tmp_path / "chaos", schedule, kill_at)
    assert killer.killed == kill_at  # every kill happened, while the run was still going

    lines = train_lines(tmp_path / "chaos")
    assert [r["step"] for r in lines] == list(range(1, STEPS + 1))  # every step once: none lost, none twice
    assert lines[-1]["faults/generator_restarts"] == len(kill_at)  # each replacement counted
    assert [r["step"] for r in read_metrics(tmp_path / "chaos") if "val/pass_rate" in r] == [0, 5, 10]
    consumed, ref = _consumed(tmp_path / "chaos"), _consumed(tmp_path / "ref")
    assert [s for s, _ in consumed] == list(range(1, STEPS + 1))
    if schedule == "ppo_off_policy":  # lost groups regenerated whole, on their own frozen weights: identical
        assert consumed == ref
        assert _computed(read_metrics(tmp_path / "chaos")) == _computed(read_metrics(tmp_path / "ref"))


# what depends on the wall clock or on the faults themselves, not on what was computed
CLOCKED = ("timing/", "throughput/", "time/", "compute/", "faults/", "forecast/")


def _computed(rows: list[dict]) -> list[dict]:
    """Each metrics row without what the clock decides: the losses, rewards, statistics and evaluations."""
    return [{k: v for k, v in r.items() if not k.startswith(CLOCKED)} for r in rows]


def test_a_generator_that_keeps_dying_stops_the_run_with_a_checkpoint(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    with pytest.raises(RunStopped) as err:
        _run(monkeypatch, run_dir, "ppo_off_policy", [2, 2, 2], "faults.max_generator_restarts=1")
    assert "died 2 times in a row" in str(err.value) and "\n" not in str(err.value)
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    assert latest == f"step_{len(_consumed(run_dir)):07d}.pt"  # every trained step kept


def test_run_stopped_is_one_line_and_exit_code_1(monkeypatch, capsys):
    def stopped(**_):
        raise RunStopped("the generator process died 4 times in a row")

    monkeypatch.setattr(cli, "app", stopped)
    with pytest.raises(SystemExit) as exc:
        cli.main(["train"])  # any command: the app is replaced
    assert exc.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == ["error: the generator process died 4 times in a row"]


class BrokenGrader:
    """The run's task with a grader that fails on the samples ``picked(problem, completion)`` chooses: it raises
    (``raises``), or it answers "incorrect" (to compare with)."""

    def __init__(self, task, picked, raises: bool = True) -> None:
        self.task, self.picked, self.raises = task, picked, raises

    def __getattr__(self, name: str):
        return getattr(self.task, name)

    def grade(self, problem, completion: str) -> bool:
        if self.picked(problem, completion):
            if self.raises:
                raise ZeroDivisionError("the grader broke")
            return False
        return self.task.grade(problem, completion)


def _grader(monkeypatch, picked, raises: bool = True) -> None:
    build = runner.build_task
    monkeypatch.setattr(runner, "build_task", lambda cfg: BrokenGrader(build(cfg), picked, raises))


def some(problem, completion: str) -> bool:
    return zlib.crc32(completion.encode()) % 5 == 0  # about a fifth of the samples, the same in every run


def test_a_grader_failing_on_some_samples_fails_them_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    cfg = micro("backend=inline", "steps=4", "checkpoint_every=100", "eval.every=2")
    with monkeypatch.context() as patch:
        _grader(patch, some, raises=False)
        train(cfg, tmp_path / "incorrect", show_progress=False)
    capsys.readouterr()
    _grader(monkeypatch, some)
    train(cfg, tmp_path / "broken", show_progress=False)
    err = capsys.readouterr().err

    broken, incorrect = read_metrics(tmp_path / "broken"), read_metrics(tmp_path / "incorrect")
    steps = [r for r in broken if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4]  # the run went on
    assert sum(r["grader/failures"] for r in steps) > 0  # failures happened, and were counted each step
    assert all(r["grader/failures"] == r.get("grader/failures/error", 0.0) for r in steps)
    assert any(r.get("val/grader_failures", 0) > 0 for r in broken if "val/pass_rate" in r)
    # a failed sample is exactly an incorrect one: the same rewards, losses and evaluations
    def graded(rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if not k.startswith(("grader/", "val/grader_failures"))}
                for r in _computed(rows)]

    assert graded(broken) == graded(incorrect)
    lines = [line for line in err.splitlines() if "could not be graded" in line]
    assert len(lines) == 1 and "error: ZeroDivisionError: the grader broke" in lines[0]  # once, with the reason


def test_a_grader_failing_on_most_of_a_batch_stops_the_run_which_resumes_once_fixed(tmp_path, monkeypatch):
    cfg = micro("backend=inline", "steps=3", "checkpoint_every=100", "eval.every=100")
    train(cfg, tmp_path / "ref", show_progress=False)
    run_dir = tmp_path / "run"
    with monkeypatch.context() as patch:
        _grader(patch, lambda problem, completion: True)
        with pytest.raises(RunStopped) as err:
            train(cfg, run_dir, show_progress=False)
    assert str(err.value).startswith("step 1: 16 of 16 samples could not be graded (error 16; first: error: "
                                     "ZeroDivisionError: the grader broke)")
    assert "\n" not in str(err.value) and "faults.max_ungraded_fraction=0.5" in str(err.value)
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step_0000000.pt"  # kept, nothing trained
    assert not (run_dir / "consumed.jsonl").exists() or _consumed(run_dir) == []

    train(cfg, run_dir, resume=True, show_progress=False)  # the grader fixed
    assert _consumed(run_dir) == _consumed(tmp_path / "ref")
    assert [r["train/reward_mean"] for r in train_lines(run_dir)] == [r["train/reward_mean"] for r in train_lines(tmp_path / "ref")]


def test_a_run_stopped_while_an_evaluation_runs_beside_it_still_keeps_its_checkpoint(tmp_path, monkeypatch):
    """The stop's wait for the evaluation still running beside the steps must not hold (or read from) the dead
    generator whose queues are already closed: it once raised ``ValueError: Queue ... is closed`` there, and the
    stop's checkpoint was lost."""
    build = runner.build_evaluation

    class Slow:
        def __init__(self, evaluation):
            self.evaluation = evaluation

        def __call__(self, seed):
            time.sleep(3.0)  # still running when the generator has died for the last time
            return self.evaluation(seed)

        def __getattr__(self, name):
            return getattr(self.evaluation, name)

    monkeypatch.setattr(runner, "build_evaluation", lambda *a, **k: Slow(build(*a, **k)))
    run_dir = tmp_path / "run"
    with pytest.raises(RunStopped):
        _run(monkeypatch, run_dir, "ppo_off_policy", [2, 2, 2], "faults.max_generator_restarts=1")
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    assert latest == f"step_{len(_consumed(run_dir)):07d}.pt"
    assert [r["step"] for r in read_metrics(run_dir) if "val/pass_rate" in r] == [0]  # its evaluation logged
