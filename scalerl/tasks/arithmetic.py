"""The built-in task: multi-operand addition/subtraction with a short chain of thought, exactly verifiable.

A prompt is an expression such as ``"7+5-9="``; the demonstrated completion works it left to right inside
``<think>...</think>`` and then states the answer: ``"<think>7+5=12 12-9=3</think>3"``. Grading reads the text
after the *last* ``</think>`` (``tasks/worked.py``, shared with the strings task); rewards (±1 by default, App. A.3)
come from the run config.

**The testbed** (issue #11): the registered task's defaults (``task.name: arithmetic``; the class itself defaults
to no tiers and no habit) are chosen so that a ScaleRL run on 2 cores traverses the sigmoid of §2.1
within the demo's budget: it rises, passes Cmid and flattens at a ceiling below 1 whose reason the per-tier
evaluation shows (``val/tier/<name>/pass_rate``). Two tiers (:data:`TESTBED_TIERS`):

* ``three_operands`` (share 0.8): three one-digit operands. The warm-up teaches the working to near-perfect
  skill. There are only 4,000 such problems and repeats are redrawn, so the default splits hold fewer than 80%:
  193 of the 256 validation prompts, 2,167 of the 3,000 training ones.
* ``nine_operands`` (share 0.2, ``taught: false``): nine two-digit operands, never demonstrated. The working (51+
  tokens) is always longer than the interruption's largest thinking budget (48, §2, App. A.10), so the answer is forced
  early and is a guess that almost never lands. This tier is the visible reason the ceiling sits near 0.75.

**The habit RL removes** (``answer_slip``, 0.9). RL from a base model first removes what the base model does
wrong by habit rather than by lack of skill (App. A.6: the early, fast part of the curve). The warm-up's
demonstrations show the right working, but the copy of a negative result into the answer drops its minus sign
with probability ``answer_slip`` (``"<think>1-5=-4</think>4"``), so the warmed-up model gets about a quarter of
the taught tier wrong. It is one decision at one place, the first token after ``</think>``: RL removes it within
tens of steps and then has nothing left to gain, so the curve flattens and a fit identifies A. Problems, answers
and grading are untouched: only :meth:`ArithmeticTask.demonstration`, which the warm-up trains on, slips.

``sign_slip`` (0 by default; the earlier testbed's habit) drops the minus sign of negative *partial sums* inside
the working and goes on from the wrong value (``"7-8=1 1+1=2"``). That costs the model practice too (each slip
hides a negative running value from the steps after it), so after RL removes the habit the model meets sums it
rarely saw and the curve keeps rising slowly: with it, A stayed open at the top in most runs (docs/RESULTS.md).

Without named tiers (an operand range, e.g. ``--set task.params.max_operands=5``) every operand count is its own
tier (``meta["tier"] = "operands_k"``), all taught. A tier with ``taught: false`` is left out of the warm-up's
demonstrations, as a base model that never saw such problems.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from scalerl.errors import UserError, check_flag, check_int, check_number
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


# The testbed (the module docstring; docs/RESULTS.md "The testbed")
TESTBED_TIERS: dict[str, dict[str, Any]] = {
    "three_operands": {"operands": [3, 3], "share": 0.8},
    "nine_operands": {"operands": [9, 9], "digits": 2, "share": 0.2, "taught": False},
}
TESTBED_ANSWER_SLIP = 0.9


@dataclass(frozen=True)
class Tier:
    """One difficulty tier: operand counts drawn uniformly from ``operands`` (inclusive), ``digits`` at most per
    operand, and the tier's ``share`` of the draws. Repeated problems are redrawn, so a tier with few distinct
    problems (2-3 one-digit operands) ends up with less than its share of a large split. ``taught: false`` keeps
    the tier's problems out of the warm-up's demonstrations; RL and evaluation still see them."""

    name: str
    operands: tuple[int, int]
    digits: int
    share: float
    taught: bool = True  # False: the warm-up shows no demonstration of it (a base model that never saw it)


def _tiers(spec: dict[str, Any], digits: int) -> list[Tier]:
    """``{"easy": {"operands": [2, 3], "share": 0.4, "digits": 1}, ...}`` as Tiers (``digits`` defaults to
    ``max_digits``, ``taught`` to true); one line naming the mistake otherwise."""
    if not isinstance(spec, dict) or not spec:
        raise UserError("task.params.tiers must map tier names to {operands: [lo, hi], share: w}")
    tiers = []
    for name, t in spec.items():
        if not isinstance(t, dict) or set(t) - {"operands", "share", "digits", "taught"} or "operands" not in t:
            raise UserError(
                f"task.params.tiers.{name}: expected {{operands: [lo, hi], share: w, digits: d, taught: true|false}}"
            )
        if not isinstance(t.get("taught", True), bool):
            raise UserError(f"task.params.tiers.{name}.taught must be true or false, got {t['taught']!r}")
        where = f"task.params.tiers.{name}"
        operands = t["operands"]
        if isinstance(operands, (list, tuple)) and len(operands) == 2:
            lo, hi = (check_int(f"{where}.operands", x) for x in operands)
        elif isinstance(operands, (list, tuple, str)):
            raise UserError(f"{where}.operands must be a count or [lo, hi], got {operands!r}")
        else:
            lo = hi = check_int(f"{where}.operands", operands)
        share = t.get("share", 1.0)
        check_number(f"{where}.share", share)  # finite: an infinite share made every share NaN
        tier = Tier(str(name), (lo, hi), check_int(f"{where}.digits", t.get("digits", digits)), float(share),
                    t.get("taught", True))
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
    n_train: int = 3000
    n_val: int = 256
    min_operands: int = 2
    max_operands: int = 5
    max_digits: int = 1
    subtraction: bool = True
    tiers: dict[str, Any] | None = None
    sign_slip: float = 0.0
    answer_slip: float = 0.0
    name: str = "arithmetic"
    _train: list[Problem] = field(init=False, repr=False)
    _val: list[Problem] = field(init=False, repr=False)
    _tiers: list[Tier] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("min_operands", "max_operands", "max_digits"):
            check_int(f"task.params.{name}", getattr(self, name))
        check_flag("task.params.subtraction", self.subtraction)
        if not 2 <= self.min_operands <= self.max_operands:
            raise UserError(
                f"task.params: need 2 <= min_operands <= max_operands, got {self.min_operands}..{self.max_operands}"
            )
        if not 1 <= self.max_digits <= 6:
            raise UserError(f"task.params.max_digits must be 1..6, got {self.max_digits}")
        for habit in ("sign_slip", "answer_slip"):
            check_number(f"task.params.{habit}", getattr(self, habit), 0.0, 1.0, high_open=True)
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

    def demonstration(self, problem: Problem) -> str | None:
        """The left-to-right working in ``<think>...</think>``, then the answer: correct, unless ``sign_slip``
        drops the minus sign of negative partial sums (the slip carried on) or ``answer_slip`` drops it from a
        negative answer (see the module docstring). None for a problem of an untaught tier: the warm-up skips it."""
        if not self._taught(problem):
            return None
        if not self.sign_slip and not self.answer_slip:
            return super().demonstration(problem)
        rng = np.random.default_rng([self.seed, 0x51C9, *problem.prompt.encode()])
        numbers = [int(x) for x in re.findall(r"\d+", problem.prompt)]
        ops = re.findall(r"[+-]", problem.prompt[len(str(numbers[0])):])
        steps, answer = _steps(numbers, ops, lambda v: -v if v < 0 and rng.random() < self.sign_slip else v)
        if answer < 0 and rng.random() < self.answer_slip:
            answer = -answer  # the working shows the minus sign; the copy into the answer drops it
        return f"{THINK}{' '.join(steps)}{END_THINK}{answer}"

    def _taught(self, problem: Problem) -> bool:
        return all(t.taught for t in self._tiers if t.name == problem.meta.get("tier"))


@TASKS.register("arithmetic")
def arithmetic(seed: int = 0, n_train: int = 3000, n_val: int = 256, **params: object) -> ArithmeticTask:
    """The registered task (what configs build) is the testbed: :data:`TESTBED_TIERS` and ``answer_slip``
    :data:`TESTBED_ANSWER_SLIP` unless given. An operand range given as params (``--set
    task.params.max_operands=2``) replaces the tiers."""
    if "min_operands" in params or "max_operands" in params:
        params["tiers"] = None
    else:
        params.setdefault("tiers", {k: dict(v) for k, v in TESTBED_TIERS.items()})
    params.setdefault("answer_slip", TESTBED_ANSWER_SLIP)
    return ArithmeticTask(seed=seed, n_train=n_train, n_val=n_val, **params)  # type: ignore[arg-type]
