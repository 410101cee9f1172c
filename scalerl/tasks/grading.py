"""A grader that fails is a failed sample, not a failed run (docs/scale-out.md, "what survives what").

The reward comes only from a verdict (the rewards of App. A.3: correct or not): ``True`` returned by the task's
own grader (math-verify, exact match, the code task's tests run in their sandbox, App. A.3). When the grader cannot
reach a verdict (it raised, timed out, ran out of memory, or its sandbox could not start or was killed), the
sample is graded *incorrect*, with the reason, and counted (``grader/failures``, ``grader/failures/<kind>``).
A failure never becomes a pass: only the grader's own ``True`` does, and the graded text never reaches the
code that decides which of the two happened.

What is a verdict and not a grader failure: the program of a code sample failing in its sandbox (its exception,
its CPU, memory or wall-clock limit, its crash) is that sample being wrong. A run stops only when most of a
batch cannot be graded (``faults.max_ungraded_fraction``): then the grader, not the policy, is broken.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from scalerl.errors import RunStopped

# why a grader reached no verdict; the metric ``grader/failures/<kind>`` counts each
KINDS = ("error", "timeout", "memory", "crash", "no_interpreter", "sandbox")
DETAIL_CHARS = 200  # a reason is one short line


class GradingFailed(Exception):
    """Raised by a grader that could not reach a verdict (not: the answer is wrong), e.g. its sandbox could not
    start. ``kind`` is one of ``KINDS``."""

    def __init__(self, kind: str, detail: str) -> None:
        if kind not in KINDS:
            raise ValueError(f"grader failure kind {kind!r} is not one of {KINDS}")
        self.kind, self.detail = kind, " ".join(str(detail).split())[:DETAIL_CHARS]
        super().__init__(f"{self.kind}: {self.detail}")


def failure_kind(exc: BaseException) -> str:
    """The ``KINDS`` entry for an exception out of a grader."""
    if isinstance(exc, GradingFailed):
        return exc.kind
    if isinstance(exc, MemoryError):
        return "memory"
    if isinstance(exc, TimeoutError) or "timeout" in type(exc).__name__.lower():  # math-verify's own, too
        return "timeout"
    return "error"


@dataclass(frozen=True)
class Grade:
    """One sample's grading: ``correct`` only from the grader's verdict; ``failure`` ("<kind>: <detail>") when
    the grader reached none (``correct`` is then False)."""

    correct: bool
    failure: str | None = None


def grade(task: Any, problem: Any, completion: str) -> Grade:
    """``task.grade(problem, completion)`` as a ``Grade``; an exception out of the grader (not Ctrl-C) is a
    failed sample with its reason, never a pass and never the end of the run."""
    try:
        return Grade(correct=bool(task.grade(problem, completion)))
    except Exception as exc:  # noqa: BLE001 - any grader, any failure: the sample fails, the run goes on
        if isinstance(exc, GradingFailed):
            return Grade(False, str(exc))
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:DETAIL_CHARS]
        return Grade(False, f"{failure_kind(exc)}: {detail}")


def kind_of(reason: str) -> str:
    """The kind a failure reason starts with."""
    return reason.split(":", 1)[0]


def failure_metrics(reasons: Iterable[str]) -> dict[str, float]:
    """``grader/failures`` (every step, 0 when none) and ``grader/failures/<kind>`` for the kinds that occurred."""
    counts = Counter(kind_of(r) for r in reasons)
    return {"grader/failures": float(sum(counts.values())),
            **{f"grader/failures/{k}": float(v) for k, v in sorted(counts.items())}}


def check_gradable(step: int, n: int, reasons: Sequence[str], max_fraction: float) -> None:
    """A ``RunStopped`` (one line) when more than ``max_fraction`` of a batch's ``n`` samples could not be graded."""
    if n and len(reasons) / n > max_fraction:
        kinds = ", ".join(f"{k} {v}" for k, v in Counter(kind_of(r) for r in reasons).most_common())
        raise RunStopped(
            f"step {step}: {len(reasons)} of {n} samples could not be graded ({kinds}; first: {reasons[0]}); the "
            f"grader is failing, not the policy, so the run stops (faults.max_ungraded_fraction={max_fraction:g}); "
            "fix the grader and continue with --resume"
        )


class FailureWarnings:
    """One warning line the first time each kind of grader failure occurs in a run (then only the metric)."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def check(self, step: int, n: int, reasons: Sequence[str]) -> str | None:
        new = [r for r in reasons if kind_of(r) not in self.seen]
        if not new:
            return None
        self.seen.update(kind_of(r) for r in new)
        return (f"warning: step {step}: {len(reasons)} of {n} samples could not be graded and count as incorrect "
                f"({new[0]}); counted in grader/failures")
