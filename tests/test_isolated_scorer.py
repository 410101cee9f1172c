"""Library scorers (Math-Verify, reasoning-gym's score_answer) run in a worker process with a hard time limit
(scalerl/tasks/isolated.py): a completion that makes one compute for ever is a grader failure, not a stalled run."""

from __future__ import annotations

import pickle
import threading

import pytest

from scalerl.tasks.grading import GradingFailed, grade
from scalerl.tasks.isolated import Isolated


def test_a_call_answers_through_the_worker_and_the_worker_is_restarted_after_it_dies():
    scorer = Isolated(timeout_s=30)
    try:
        assert scorer("scalerl.tasks.answers", "last_number", "so 3 then 41") == "41"
        first = scorer._proc
        first.kill()
        first.wait()
        assert scorer("scalerl.tasks.answers", "last_number", "7 or 8") == "8"  # a new worker
        assert scorer._proc is not first
    finally:
        scorer.close()
    assert first.poll() is not None


def test_only_scalerl_task_functions_run_and_a_raising_scorer_is_an_error_kind_failure():
    scorer = Isolated(timeout_s=30)
    try:
        with pytest.raises(GradingFailed) as refused:
            scorer("os", "getcwd")
        assert refused.value.kind == "error" and "not a scalerl.tasks module" in refused.value.detail
        with pytest.raises(GradingFailed) as raised:
            scorer("scalerl.tasks.answers", "last_number", None)  # TypeError inside the worker
        assert raised.value.kind == "error" and "TypeError" in raised.value.detail
    finally:
        scorer.close()


def test_a_pickled_scorer_is_a_fresh_one_with_its_own_worker():
    scorer = Isolated(timeout_s=7)
    try:
        scorer("scalerl.tasks.answers", "last_number", "1")
        copy = pickle.loads(pickle.dumps(scorer))
        assert copy.timeout_s == 7 and copy._proc is None
        assert copy("scalerl.tasks.answers", "last_number", "x 2") == "2"
        assert copy._proc.pid != scorer._proc.pid
        copy.close()
    finally:
        scorer.close()


def test_a_reasoning_gym_answer_that_never_finishes_is_a_timeout_and_the_next_one_is_graded():
    pytest.importorskip("reasoning_gym")
    import scalerl.tasks.math  # noqa: F401 - registers reasoning_gym
    from scalerl.tasks.registry import TASKS

    task = TASKS.get("reasoning_gym")(seed=0, n_train=4, n_val=2, dataset="countdown")
    task.grader._isolated.timeout_s = 2.0
    problem = task.val[0]
    try:
        hung = grade(task, problem, "<think>x</think>\\boxed{9**9**9**9}")  # one C-level power: no signal stops it
        assert not hung.correct and hung.failure.startswith("timeout:")
        assert grade(task, problem, f"<think>x</think>\\boxed{{{problem.answer}}}").correct  # in a new worker
        wrong = grade(task, problem, "<think>x</think>\\boxed{1+1}")
        assert not wrong.correct and wrong.failure is None  # a wrong answer is a verdict, not a failure
    finally:
        task.grader._isolated.close()


def test_math_verify_off_the_main_thread_cannot_stall_the_run(monkeypatch):
    pytest.importorskip("math_verify")
    from scalerl.tasks import math as math_task

    monkeypatch.setattr(math_task._ISOLATED, "timeout_s", 2.0)
    results: list = []

    def evaluate() -> None:  # as the evaluation beside the steps grades: a thread of the trainer's process
        results.append(grade(type("Task", (), {"grade": staticmethod(
            lambda problem, completion: math_task.grade_math("3", completion))})(), None, r"\boxed{10^{10^{10}}}"))
        results.append(math_task.grade_math(r"\frac{3}{4}", r"\boxed{0.75}"))

    worker = threading.Thread(target=evaluate)
    worker.start()
    worker.join(60)
    assert not worker.is_alive()
    assert not results[0].correct and (results[0].failure is None or results[0].failure.startswith("timeout:"))
    assert results[1] is True  # and the next answer is graded, in a new worker if the old one was stopped


def test_an_answer_longer_than_its_cap_is_refused_before_it_is_read():
    import os
    import struct

    from scalerl.tasks.scorer_worker import read_message

    r, w = os.pipe()
    try:
        os.write(w, struct.pack("!I", 1 << 30) + b"{")  # a worker claiming a 1 GiB answer
        with pytest.raises(ValueError, match="at most 65536"):
            read_message(r, None, 1 << 16)
    finally:
        os.close(r)
        os.close(w)
