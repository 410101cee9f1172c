"""What the built-in synthetic tasks (``arithmetic``, ``strings``) share: a split of distinct problems drawn from
one seeded stream, and completions that show their working inside ``<think>...</think>`` and then answer.

A problem's ``meta["steps"]`` holds its working; the demonstration (what the warm-up trains on) is those steps,
space-separated, inside the thinking delimiters, then the answer. Grading reads the text after the *last*
``</think>``, so an answer written after the interruption phrase (§4) counts; a completion without
``</think>`` is wrong.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from scalerl.errors import UserError
from scalerl.models.tokenizer import END_THINK, THINK
from scalerl.tasks.base import Problem


def draw_split(
    draw: Callable[[np.random.Generator], Problem], rng: np.random.Generator, n_val: int, n_train: int, hint: str
) -> tuple[list[Problem], list[Problem]]:
    """Distinct problems (by id) from ``draw(rng)``: the first ``n_val`` are validation, the next ``n_train``
    training, so the splits are disjoint and fixed by the seed. ``hint`` says how to allow more problems."""
    want = n_val + n_train
    seen: dict[str, Problem] = {}
    tries = 0
    while len(seen) < want:
        tries += 1
        if tries > 50 * want + 10_000:
            raise UserError(
                f"task.params allow fewer than {want} distinct problems (n_train + n_val); {hint}, "
                "or lower task.n_train / task.n_val"
            )
        p = draw(rng)
        seen.setdefault(p.id, p)
    problems = list(seen.values())
    return problems[:n_val], problems[n_val:]


class WorkedTask:
    """The Task methods of a built-in task; a subclass sets ``_train`` and ``_val``."""

    _train: list[Problem]
    _val: list[Problem]

    def train_problems(self) -> list[Problem]:
        return self._train

    def val_problems(self) -> list[Problem]:
        return self._val

    def demonstration(self, problem: Problem) -> str:
        """The correct completion: the working in ``<think>...</think>``, then the answer."""
        return f"{THINK}{' '.join(problem.meta['steps'])}{END_THINK}{problem.answer}"

    def grade(self, problem: Problem, completion: str) -> bool:
        head, sep, answer = completion.rpartition(END_THINK)
        return bool(sep) and answer.strip() == problem.answer
