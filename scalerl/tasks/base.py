"""What a task is: prompts with a deterministic train/validation split, and a verifier.

A task owns its data and its grading (docs/architecture.md). It grades *text*; the reward numbers (±1 by default,
paper A.3) come from the run config, so the same task serves ±1 and 0/1 rewards.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable


@dataclass(frozen=True)
class Problem:
    id: str  # stable across runs with the same seed; the curriculum and checkpoints key on it
    prompt: str  # the text the model is given (already formatted, chat template applied if any)
    answer: str  # reference answer (or a key into test cases for code tasks)
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@runtime_checkable
class Task(Protocol):
    name: str

    def train_problems(self) -> Sequence[Problem]:
        """The training split (deterministic given the task's seed)."""

    def val_problems(self) -> Sequence[Problem]:
        """The held-out validation split; never trained on."""

    def grade(self, problem: Problem, completion: str) -> bool:
        """True when ``completion`` (everything the model wrote after the prompt) solves ``problem``. Raising
        means no verdict: the sample is graded incorrect with the reason and counted (``tasks/grading.py``)."""
