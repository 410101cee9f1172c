"""The built-in task: multi-operand addition/subtraction with a short chain of thought, exactly verifiable.

A prompt is an expression such as ``"7+5-9="``; the demonstrated completion works it left to right inside
``<think>...</think>`` and then states the answer: ``"<think>7+5=12 12-9=3</think>3"``. Two to five operands
(one digit by default; ``max_digits`` makes it harder) give a spread of difficulty, since every step is a chance
to slip: after the default warm-up two-operand prompts are solved several times as often as five-operand ones,
which is what zero-variance filtering (§3.6) and No-Positive-Resampling (§3.7) need. The thinking part is
~7-35 tokens, which interruptions (§3.8) can cut.

Grading reads the text after the *last* ``</think>``, so an answer written after the interruption phrase
counts; a completion without ``</think>`` is wrong. Rewards (±1 by default, §3.0) come from the run config.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scalerl.errors import UserError
from scalerl.models.tokenizer import END_THINK, THINK
from scalerl.tasks.base import Problem
from scalerl.tasks.registry import TASKS


def _steps(operands: list[int], ops: list[str]) -> tuple[list[str], int]:
    """The left-to-right partial sums as ``"a+b=c"`` strings, and the result."""
    acc, steps = operands[0], []
    for op, x in zip(ops, operands[1:]):
        new = acc + x if op == "+" else acc - x
        steps.append(f"{acc}{op}{x}={new}")
        acc = new
    return steps, acc


@dataclass
class ArithmeticTask:
    """Registered as ``task.name: arithmetic``. Params: ``min_operands`` (2), ``max_operands`` (5),
    ``max_digits`` per operand (1), ``subtraction`` (True)."""

    seed: int = 0
    n_train: int = 4000
    n_val: int = 256
    min_operands: int = 2
    max_operands: int = 5
    max_digits: int = 1
    subtraction: bool = True
    name: str = "arithmetic"
    _train: list[Problem] = field(init=False, repr=False)
    _val: list[Problem] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not 2 <= self.min_operands <= self.max_operands:
            raise UserError(
                f"task.params: need 2 <= min_operands <= max_operands, got {self.min_operands}..{self.max_operands}"
            )
        if not 1 <= self.max_digits <= 6:
            raise UserError(f"task.params.max_digits must be 1..6, got {self.max_digits}")
        self._val, self._train = self._draw()

    def _draw(self) -> tuple[list[Problem], list[Problem]]:
        """Distinct problems from one seeded stream: the first ``n_val`` are validation, the next ``n_train``
        training, so the two splits are disjoint and each is fixed by the seed."""
        rng = np.random.default_rng([self.seed, 0x5CA1E])
        want = self.n_val + self.n_train
        seen: dict[str, Problem] = {}
        tries = 0
        while len(seen) < want:
            tries += 1
            if tries > 50 * want + 10_000:
                raise UserError(
                    f"task.params allow fewer than {want} distinct problems (n_train + n_val); allow more operands "
                    "or digits, or lower task.n_train / task.n_val"
                )
            k = int(rng.integers(self.min_operands, self.max_operands + 1))
            digits = rng.integers(1, self.max_digits + 1, size=k)
            operands = [int(rng.integers(0, 10**d)) for d in digits]
            ops = ["-" if self.subtraction and rng.random() < 0.5 else "+" for _ in range(k - 1)]
            expr = str(operands[0]) + "".join(f"{op}{x}" for op, x in zip(ops, operands[1:]))
            if expr not in seen:
                steps, result = _steps(operands, ops)
                seen[expr] = Problem(
                    id=expr, prompt=expr + "=", answer=str(result), meta={"operands": k, "steps": steps}
                )
        problems = list(seen.values())
        return problems[: self.n_val], problems[self.n_val :]

    def train_problems(self) -> list[Problem]:
        return self._train

    def val_problems(self) -> list[Problem]:
        return self._val

    def demonstration(self, problem: Problem) -> str:
        """The correct completion: the left-to-right working in ``<think>...</think>``, then the answer."""
        return f"{THINK}{' '.join(problem.meta['steps'])}{END_THINK}{problem.answer}"

    def grade(self, problem: Problem, completion: str) -> bool:
        head, sep, answer = completion.rpartition(END_THINK)
        return bool(sep) and answer.strip() == problem.answer


@TASKS.register("arithmetic")
def arithmetic(seed: int = 0, n_train: int = 4000, n_val: int = 256, **params: object) -> ArithmeticTask:
    return ArithmeticTask(seed=seed, n_train=n_train, n_val=n_val, **params)  # type: ignore[arg-type]
