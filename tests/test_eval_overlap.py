"""The evaluation beside the steps (``eval.overlap``, issue #31): the same numbers as an evaluation the steps wait
for, logged at the step and compute it evaluates; never lost to a checkpoint or a crash; and the background call
it runs on (its value, its error, its thread count, its priority)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from types import SimpleNamespace

import pytest
import torch

from scalerl.pipeline import runner
from scalerl.pipeline.background import BackgroundCall
from scalerl.pipeline.runner import train
from scalerl.pipeline.state import RunState
from scalerl.runlog import read_metrics
from tests.test_pipeline import micro

SAME = ("val/pass_rate", "val/truncation_rate", "val/n")


def _evals(run_dir) -> list[dict]:
    return [r for r in read_metrics(run_dir) if "val/pass_rate" in r]


def test_background_call_returns_the_value_and_its_duration():
    call = BackgroundCall(lambda a, b: (time.sleep(0.05), a + b)[1], 2, 3)
    assert call.result() == 5
    assert call.seconds >= 0.05


def test_background_call_raises_the_callers_error_in_the_caller():
    def boom() -> None:
        raise ValueError("from the thread")

    with pytest.raises(ValueError, match="from the thread"):
        BackgroundCall(boom).result()


def test_background_call_keeps_the_callers_torch_threads():
    """OpenMP keeps the thread count per thread: without the hand-over a new thread would use every core."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert BackgroundCall(torch.get_num_threads).result() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a per-thread nice value is Linux's")
def test_background_call_lowers_only_its_own_priority():
    def own_nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    caller = own_nice()
    assert BackgroundCall(own_nice, nice=19).result() == 19
    assert own_nice() == caller  # the caller's thread (and process) keep theirs


def test_overlapped_evaluation_logs_what_a_waited_for_one_logs(tmp_path):
    """Inline backend (the steps do not depend on timing): the same steps, and at each evaluated step the same
    pass rates, whether the evaluation ran beside the next steps on a copy of the weights or the steps waited."""
    sets = ("backend=inline", "steps=7", "eval.every=3", "checkpoint_every=100")
    train(micro(*sets, "eval.overlap=false"), tmp_path / "wait", show_progress=False)
    train(micro(*sets, "eval.overlap=true"), tmp_path / "beside", show_progress=False)
    waited, beside = _evals(tmp_path / "wait"), _evals(tmp_path / "beside")
    assert [r["step"] for r in beside] == [r["step"] for r in waited] == [0, 3, 6, 7]
    assert [[r[k] for k in SAME] for r in beside] == [[r[k] for k in SAME] for r in waited]
    rewards = [[r["train/reward_mean"] for r in read_metrics(tmp_path / d) if "loss" in r] for d in ("wait", "beside")]
    assert rewards[0] == rewards[1]
    # each evaluation carries the compute of the step it evaluated: between that step's row and the next one's
    steps = {r["step"]: r["compute/device_hours"] for r in read_metrics(tmp_path / "beside") if "loss" in r}
    for r in beside[1:]:
        assert steps[r["step"]] <= r["compute/device_hours"] <= steps.get(r["step"] + 1, float("inf"))
    assert beside[0]["compute/device_hours"] == 0.0  # R0 at zero compute


class _Slow(BackgroundCall):
    """An evaluation that is still running when the next steps (and a checkpoint) come."""

    def __init__(self, fn, *args, **kwargs) -> None:
        super().__init__(lambda *a: (time.sleep(0.4), fn(*a))[1], *args, **kwargs)


def test_a_later_checkpoint_waits_for_the_evaluation_before_it(tmp_path, monkeypatch):
    """Every checkpoint is written after the evaluations of earlier steps are logged, so a run resumed from it
    never skips one (an evaluation of the checkpoint's own step may still run: a resume repeats it)."""
    monkeypatch.setattr(runner, "BackgroundCall", _Slow)
    seen: dict[int, list[int]] = {}
    save = RunState.save

    def spy(self, out, *args, **kwargs):
        seen[self.step] = [r["step"] for r in _evals(out)]
        return save(self, out, *args, **kwargs)

    monkeypatch.setattr(RunState, "save", spy)
    train(micro("backend=inline", "steps=7", "eval.every=2", "checkpoint_every=3"), tmp_path, show_progress=False)
    assert seen == {3: [0, 2], 6: [0, 2, 4], 7: [0, 2, 4, 6]}  # the 6th and 7th still ran at the checkpoint of 6, 7
    assert [r["step"] for r in _evals(tmp_path)] == [0, 2, 4, 6, 7]  # and were logged before the run returned


def test_a_resumed_run_evaluates_the_step_whose_evaluation_was_lost(tmp_path):
    """A crash while the evaluation of the checkpoint's step ran beside the steps: the resumed run evaluates
    there before it trains on."""
    sets = ("backend=inline", "eval.every=3", "checkpoint_every=3")
    train(micro(*sets, "steps=3"), tmp_path, show_progress=False)
    metrics = tmp_path / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows if not ("val/pass_rate" in r and r["step"] == 3)))
    assert [r["step"] for r in _evals(tmp_path)] == [0]
    train(micro(*sets, "steps=6"), tmp_path, resume=True, show_progress=False)
    assert [r["step"] for r in _evals(tmp_path)] == [0, 3, 6]


def test_a_stop_rule_sees_each_evaluation_before_the_next_step(tmp_path):
    """With a stop rule the steps wait for the evaluation: the rule is asked at the step it evaluated."""
    asked: list[int] = []

    def rule(cfg, state):
        asked.append(state.step)
        return SimpleNamespace(stop=False, reason="", text="", metrics={})

    train(micro("backend=inline", "steps=6", "eval.every=3", "checkpoint_every=100"), tmp_path,
          show_progress=False, stop_rule=rule)
    assert asked == [0, 3, 6]


def test_background_call_runs_where_its_priority_cannot_be_set(monkeypatch):
    """The priority is an optimisation: a sandbox that refuses it still gets the call's value."""
    def refuse(*args):
        raise PermissionError("setpriority")

    monkeypatch.setattr(os, "setpriority", refuse)
    assert BackgroundCall(lambda: 42, nice=19).result() == 42
