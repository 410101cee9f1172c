"""A grader that fails is a failed sample, not a failed run (``scalerl/tasks/grading.py``): the reason is kept
and counted, a failure is never a pass, and only most of a batch failing stops the run, on one line."""

from __future__ import annotations

import pytest

from scalerl.errors import RunStopped
from scalerl.tasks.base import Problem
from scalerl.tasks.grading import (
    FailureWarnings, GradingFailed, check_gradable, failure_metrics, grade,
)

PROBLEM = Problem("p", "1+1=", "2")


class Task:
    """Grades with ``verdict``: a value to return, or an exception to raise."""

    def __init__(self, verdict):
        self.verdict = verdict

    def grade(self, problem, completion):
        if isinstance(self.verdict, BaseException):
            raise self.verdict
        return self.verdict


@pytest.mark.parametrize("raised, kind", [
    (ZeroDivisionError("division by zero"), "error"),
    (MemoryError(), "memory"),
    (TimeoutError("took too long"), "timeout"),
    (type("TimeoutException", (Exception,), {})("math-verify"), "timeout"),  # a library's own timeout class
    (GradingFailed("no_interpreter", "the sandbox cannot start /usr/bin/python3"), "no_interpreter"),
])
def test_a_grader_that_raises_gives_a_failed_sample_with_its_reason(raised, kind):
    g = grade(Task(raised), PROBLEM, "2")
    assert g.correct is False  # never a pass
    assert g.failure is not None and g.failure.startswith(f"{kind}: ") and "\n" not in g.failure


def test_only_the_graders_own_verdict_passes():
    assert grade(Task(True), PROBLEM, "2") == grade(Task(True), PROBLEM, "2")
    assert grade(Task(True), PROBLEM, "2").correct and grade(Task(True), PROBLEM, "2").failure is None
    assert not grade(Task(False), PROBLEM, "2").correct and grade(Task(False), PROBLEM, "2").failure is None

    class Unjudgeable:  # a verdict that cannot even be read as true or false: a failure, not a pass
        def __bool__(self):
            raise ValueError("no truth value")

    g = grade(Task(Unjudgeable()), PROBLEM, "2")
    assert (g.correct, g.failure) == (False, "error: ValueError: no truth value")


def test_ctrl_c_is_not_a_grading_failure():
    with pytest.raises(KeyboardInterrupt):
        grade(Task(KeyboardInterrupt()), PROBLEM, "2")


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError):
        GradingFailed("bogus", "x")


def test_metrics_count_every_failure_and_each_kind():
    reasons = ["error: ZeroDivisionError: x", "crash: sandbox launcher killed", "error: KeyError: 'a'"]
    assert failure_metrics(reasons) == {"grader/failures": 3.0, "grader/failures/crash": 1.0,
                                        "grader/failures/error": 2.0}
    assert failure_metrics([]) == {"grader/failures": 0.0}  # logged every step


def test_most_of_a_batch_ungraded_stops_with_one_line():
    check_gradable(3, 16, ["error: x"] * 8, 0.5)  # half is not most: the run goes on
    with pytest.raises(RunStopped) as err:
        check_gradable(3, 16, ["crash: sandbox launcher killed"] * 8 + ["error: x"], 0.5)
    text = str(err.value)
    assert "step 3: 9 of 16 samples could not be graded" in text and "crash 8, error 1" in text
    assert "faults.max_ungraded_fraction=0.5" in text and "\n" not in text
    check_gradable(3, 16, ["error: x"] * 16, 1.0)  # 1.0: never stops


def test_a_warning_line_the_first_time_each_kind_occurs():
    warn = FailureWarnings()
    assert warn.check(1, 16, []) is None
    first = warn.check(1, 16, ["error: ZeroDivisionError: x"])
    assert first is not None and first.startswith("warning: step 1: 1 of 16") and "ZeroDivisionError" in first
    assert warn.check(2, 16, ["error: KeyError: y"]) is None  # the same kind again: the metric only
    assert "crash" in (warn.check(3, 16, ["error: z", "crash: killed"]) or "")
