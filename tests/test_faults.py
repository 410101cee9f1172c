"""Chaos: a run survives its generator process dying (docs/scale-out.md, "what survives what"). The local
backend's generator is killed with SIGKILL at random steps; the run replaces it, regenerates exactly the
batches lost with it, and finishes with every prompt trained once; under PPO-off-policy (§3.1: each group
generated with frozen weights) its prompts and rewards equal an uninterrupted run's."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest

from scalerl import cli
from scalerl.errors import RunStopped
from scalerl.pipeline.runner import train
from scalerl.runlog import read_metrics
from tests.test_pipeline import _consumed, micro, train_lines

STEPS = 10


def _generator() -> mp.Process | None:
    return next((p for p in mp.active_children() if p.name == "scalerl-generator" and p.is_alive()), None)


class Killer(threading.Thread):
    """SIGKILLs this process's generator once the run has trained each of ``at`` steps (a new generator each
    time: it waits for the replacement of the one it killed)."""

    def __init__(self, run_dir: Path, at: list[int]) -> None:
        super().__init__(daemon=True)
        self.run_dir, self.at, self.killed, self.stop = run_dir, sorted(at), [], threading.Event()

    def trained(self) -> int:
        path = self.run_dir / "consumed.jsonl"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def run(self) -> None:
        last = None
        for step in self.at:
            while not self.stop.is_set():
                proc = _generator()
                if self.trained() >= step and proc is not None and proc.pid != last:
                    os.kill(proc.pid, signal.SIGKILL)
                    last = proc.pid
                    self.killed.append(step)
                    break
                time.sleep(0.02)


def _run(run_dir: Path, schedule: str, kill_at: list[int], *sets: str) -> Killer:
    cfg = micro("backend=local", f"steps={STEPS}", f"schedule.name={schedule}", "schedule.k=2",
                "checkpoint_every=100", "eval.every=5", *sets)
    killer = Killer(run_dir, kill_at)
    killer.start()
    try:
        train(cfg, run_dir, show_progress=False)
    finally:
        killer.stop.set()
        killer.join(timeout=5)
    return killer


@pytest.mark.parametrize("schedule", ["ppo_off_policy", "pipeline_rl"])
def test_generator_killed_at_random_steps_is_replaced_and_nothing_is_lost(tmp_path, schedule):
    kill_at = sorted(random.Random(schedule).sample(range(0, STEPS - 3), 3))  # step 0: before the first batch
    _run(tmp_path / "ref", schedule, [])
    killer = _run(tmp_path / "chaos", schedule, kill_at)
    assert killer.killed == kill_at  # every kill happened, while the run was still going

    lines = train_lines(tmp_path / "chaos")
    assert [r["step"] for r in lines] == list(range(1, STEPS + 1))  # every step once: none lost, none twice
    assert lines[-1]["faults/generator_restarts"] == len(kill_at)  # each replacement counted
    assert [r["step"] for r in read_metrics(tmp_path / "chaos") if "val/pass_rate" in r] == [0, 5, 10]
    consumed, ref = _consumed(tmp_path / "chaos"), _consumed(tmp_path / "ref")
    assert [s for s, _ in consumed] == list(range(1, STEPS + 1))
    if schedule == "ppo_off_policy":  # lost groups regenerated whole, on their own frozen weights: identical
        assert consumed == ref
        ref_rewards = [r["train/reward_mean"] for r in train_lines(tmp_path / "ref")]
        assert [r["train/reward_mean"] for r in lines] == ref_rewards
        assert [r["loss"] for r in lines] == [r["loss"] for r in train_lines(tmp_path / "ref")]


def test_a_generator_that_keeps_dying_stops_the_run_with_a_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(RunStopped) as err:
        _run(run_dir, "ppo_off_policy", [2, 2, 2], "faults.max_generator_restarts=1")
    assert "died 2 times in a row" in str(err.value) and "\n" not in str(err.value)
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    assert latest == f"step_{len(_consumed(run_dir)):07d}.pt"  # every trained step kept


def test_run_stopped_is_one_line_and_exit_code_1(monkeypatch, capsys):
    def stopped(**_):
        raise RunStopped("the generator process died 4 times in a row")

    monkeypatch.setattr(cli, "app", stopped)
    with pytest.raises(SystemExit) as exc:
        cli.main([])
    assert exc.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == ["error: the generator process died 4 times in a row"]
