"""The built-in task: multi-operand addition/subtraction with a short chain of thought, exactly verifiable.

A prompt is an expression such as ``"7+5-9="``; the demonstrated completion works it left to right inside
``<think>...</think>`` and then states the answer: ``"<think>7+5=12 12-9=3</think>3"``. Two to five operands
(one digit by default; ``max_digits`` makes it harder) give a spread of difficulty, since every step is a chance
to slip: after the default warm-up two-operand prompts are solved several times as often as five-operand ones,
which is what zero-variance filtering (§3.6) and No-Positive-Resampling (§3.7) need. The thinking part is
~7-35 tokens, which interruptions (§3.8) can cut.

**The testbed's habit** (``sign_slip``, 0.6 by default; issue #11). RL from a base model first removes what the
base model does wrong by habit rather than by lack of skill, and only then, slowly, adds skill (§2: the early,
fast part of the curve). The warm-up's demonstrations carry such a habit: each negative partial sum loses its
minus sign with probability ``sign_slip`` and the working goes on from the wrong value (``"7-8=1 1+1=2"``), so
the warmed-up model slips on about a quarter of its answers. The problems, their answers and the grading are
untouched: only :meth:`ArithmeticTask.demonstration`, which the warm-up trains on, slips. ``sign_slip: 0`` gives
correct demonstrations.

**Where the ceiling comes from.** Without named tiers every operand count is its own tier
(``meta["tier"] = "operands_k"``), and the evaluator reports ``val/tier/operands_k/pass_rate``: two-operand
prompts end near 1, five-operand ones far below (more steps to get wrong, and working that the interruption's
thinking budget (§3.8) can cut). Named tiers (``tiers``) mix chosen operand ranges instead; e.g.
configs/testbed/tiers.yaml adds an *out-of-reach* tier (9-10 operands) whose working is always longer than
the thinking budget, so its answer is a guess.

Grading reads the text after the *last* ``</think>`` (``tasks/worked.py``, shared with the strings task).
Rewards (±1 by default, §3.0) come from the run config.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from scalerl.errors import UserError
from scalerl.models.tokenizer import END_THINK, THINK
from scalerl.tasks.base import Problem
from scalerl.tasks.registry import TASKS
from scalerl.tasks.worked import WorkedTask, draw_split


def _steps(operands: list[int], ops: list[str], slip: Callable[[int], int] = lambda v: v) -> tuple[list[str], int]:
    """The left-to-right partial sums as ``"a+b=c"`` strings, and the result; ``slip`` may alter each partial sum
    as it is written, and the working goes on from what was written."""
    acc, steps = operands[0], []
    for op, x in zip(ops, operands[1:]):
        new = slip(acc + x if op == "+" else acc - x)
        steps.append(f"{acc}{op}{x}={new}")
        acc = new
    return steps, acc


@dataclass(frozen=True)
class Tier:
    """One difficulty tier: operand counts drawn uniformly from ``operands`` (inclusive), ``digits`` at most per
    operand, and the tier's ``share`` of the draws. Repeated problems are redrawn, so a tier with few distinct
    problems (2-3 one-digit operands) ends up with less than its share of a large split."""

    name: str
    operands: tuple[int, int]
    digits: int
    share: float


def _tiers(spec: dict[str, Any], digits: int) -> list[Tier]:
    """``{"easy": {"operands": [2, 3], "share": 0.4, "digits": 1}, ...}`` as Tiers (``digits`` defaults to
    ``max_digits``); one line naming the mistake otherwise."""
    if not isinstance(spec, dict) or not spec:
        raise UserError("task.params.tiers must map tier names to {operands: [lo, hi], share: w}")
    tiers = []
    for name, t in spec.items():
        if not isinstance(t, dict) or set(t) - {"operands", "share", "digits"} or "operands" not in t:
            raise UserError(f"task.params.tiers.{name}: expected {{operands: [lo, hi], share: w, digits: d}}")
        lo, hi = (t["operands"], t["operands"]) if isinstance(t["operands"], int) else t["operands"]
        tier = Tier(str(name), (int(lo), int(hi)), int(t.get("digits", digits)), float(t.get("share", 1.0)))
        if not 2 <= tier.operands[0] <= tier.operands[1] or not 1 <= tier.digits <= 6 or not tier.share > 0:
            raise UserError(
                f"task.params.tiers.{name}: need 2 <= operands lo <= hi, 1 <= digits <= 6 and share > 0, got {t}"
            )
        tiers.append(tier)
    return tiers


@dataclass
class ArithmeticTask(WorkedTask):
    """Registered as ``task.name: arithmetic``. Params: ``min_operands`` (2), ``max_operands`` (5),
    ``max_digits`` per operand (1), ``subtraction`` (True), or instead of the operand range ``tiers`` (see the
    module docstring)."""

    seed: int = 0
    n_train: int = 4000
    n_val: int = 256
    min_operands: int = 2
    max_operands: int = 5
    max_digits: int = 1
    subtraction: bool = True
    tiers: dict[str, Any] | None = None
    sign_slip: float = 0.6
    name: str = "arithmetic"
    _train: list[Problem] = field(init=False, repr=False)
    _val: list[Problem] = field(init=False, repr=False)
    _tiers: list[Tier] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not 2 <= self.min_operands <= self.max_operands:
            raise UserError(
                f"task.params: need 2 <= min_operands <= max_operands, got {self.min_operands}..{self.max_operands}"
            )
        if not 1 <= self.max_digits <= 6:
            raise UserError(f"task.params.max_digits must be 1..6, got {self.max_digits}")
        if not 0.0 <= self.sign_slip < 1.0:
            raise UserError(f"task.params.sign_slip must be in [0, 1), got {self.sign_slip}")
        self._tiers = (
            _tiers(self.tiers, self.max_digits) if self.tiers is not None
            else [Tier("all", (self.min_operands, self.max_operands), self.max_digits, 1.0)]
        )
        self._val, self._train = self._draw()

    def _draw(self) -> tuple[list[Problem], list[Problem]]:
        """Distinct problems from one seeded stream (``draw_split``): the first ``n_val`` are validation."""
        shares = np.array([t.share for t in self._tiers]) / sum(t.share for t in self._tiers)

        def one(rng: np.random.Generator) -> Problem:
            tier = self._tiers[0] if len(self._tiers) == 1 else self._tiers[int(rng.choice(len(self._tiers), p=shares))]
            k = int(rng.integers(tier.operands[0], tier.operands[1] + 1))
            digits = rng.integers(1, tier.digits + 1, size=k)
            operands = [int(rng.integers(0, 10**d)) for d in digits]
            ops = ["-" if self.subtraction and rng.random() < 0.5 else "+" for _ in range(k - 1)]
            expr = str(operands[0]) + "".join(f"{op}{x}" for op, x in zip(ops, operands[1:]))
            steps, result = _steps(operands, ops)
            # without named tiers, each operand count is its own tier: the evaluator then shows which lengths
            # hold the pass rate below 1
            name = tier.name if self.tiers is not None else f"operands_{k}"
            return Problem(id=expr, prompt=expr + "=", answer=str(result),
                           meta={"operands": k, "steps": steps, "tier": name})

        return draw_split(one, np.random.default_rng([self.seed, 0x5CA1E]), self.n_val, self.n_train,
                          "allow more operands or digits")

    def demonstration(self, problem: Problem) -> str:
        """The left-to-right working in ``<think>...</think>``, then the answer: correct, unless ``sign_slip``
        (see the module docstring) drops the minus sign of negative partial sums, the slip carried on."""
        if not self.sign_slip:
            return super().demonstration(problem)
        rng = np.random.default_rng([self.seed, 0x51C9, *problem.prompt.encode()])
        numbers = [int(x) for x in re.findall(r"\d+", problem.prompt)]
        ops = re.findall(r"[+-]", problem.prompt[len(str(numbers[0])):])
        steps, answer = _steps(numbers, ops, lambda v: -v if v < 0 and rng.random() < self.sign_slip else v)
        return f"{THINK}{' '.join(steps)}{END_THINK}{answer}"


@TASKS.register("arithmetic")
def arithmetic(seed: int = 0, n_train: int = 4000, n_val: int = 256, **params: object) -> ArithmeticTask:
    """An operand range given as params (``--set task.params.max_operands=2``) replaces the preset's tiers."""
    if "min_operands" in params or "max_operands" in params:
        params["tiers"] = None
    return ArithmeticTask(seed=seed, n_train=n_train, n_val=n_val, **params)  # type: ignore[arg-type]
