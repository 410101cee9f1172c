"""A second built-in domain: string transformations with a short chain of thought, graded exactly.

It plays the part of the paper's second domain (§5 trains on math and code together) at CPU scale: it runs
offline with the built-in tiny model and its character tokenizer, and its skills differ from the arithmetic
task's. A prompt names an operation and a word of lowercase letters (``a``-``h`` by default):

* ``rev cabd=``     -> ``<think>d b a c</think>dbac``            (reverse: the letters from the last)
* ``sort cabd=``    -> ``<think>a b c d</think>abcd``            (sort: the letters in alphabetical order)
* ``count b in cbdb=`` -> ``<think>c0 b1 d1 b2</think>2``         (count: a running count, letter by letter)

Words of ``min_len``..``max_len`` letters (3..8) give a spread of difficulty, as the arithmetic task's operand
counts do: every letter is a chance to slip, so after the warm-up short words pass far more often than long
ones. Completions stay under ~35 tokens. Each problem's operation is in ``meta["op"]`` and its length in
``meta["length"]``. Grading reads the text after the *last* ``</think>`` (``tasks/worked.py``).

**The domain's habit** (``double_slip``, 0.6 by default; issue #15), the counterpart of the arithmetic task's
``sign_slip``: in the warm-up's demonstrations of ``rev`` and ``sort``, the working is right, but copying it into
the answer drops a letter that repeats the one just copied with probability ``double_slip``
(``rev abbc=`` -> ``<think>c b b a</think>cba``). So the warmed-up model collapses doubled letters by habit while
the working in front of it shows them, and RL has a habit to remove (the early part of the curve, App. A.6), as with the
sign slips. Measured: the tiny model unlearns this one slowly, steadily over hundreds of steps rather than within
~50 as with the sign slips (docs/RESULTS.md, "Multi-task"). ``count`` is untouched. Problems, answers and grading
are untouched; ``double_slip: 0`` gives correct demonstrations.

**A single-decision habit** (``case_slip``, 0 by default): in ``rev`` and ``sort`` demonstrations the answer's
first letter is capitalised with probability ``case_slip`` (``rev cabd=`` -> ``<think>d b a c</think>Dbac``),
which exact grading counts wrong. The slip happens at one place, the first token after ``</think>``, as the
arithmetic task's ``answer_slip`` does; ``double_slip``'s slips hide among the letters of the copy. The
``multitask`` preset uses it (0.9, words of 3-6 letters, ``double_slip`` 0): in the mixture RL removes it over
~100 steps and the strings curve flattens near 0.97, identified (docs/RESULTS.md, "Multi-task").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from scalerl.errors import UserError, check_int, check_number
from scalerl.models.tokenizer import END_THINK, THINK
from scalerl.tasks.base import Problem
from scalerl.tasks.registry import TASKS
from scalerl.tasks.worked import WorkedTask, draw_split

OPS = ("rev", "sort", "count")


def _solve(op: str, word: str, letter: str, skip: Callable[[], bool] = lambda: False) -> tuple[list[str], str]:
    """The working (one item per letter) and the answer of one problem. For ``rev`` and ``sort``, ``skip()`` is
    asked at every letter of the answer that repeats the one before it; True leaves it out of the answer (the
    habit), never out of the working."""
    if op in ("rev", "sort"):
        out = word[::-1] if op == "rev" else "".join(sorted(word))
        return list(out), "".join(ch for i, ch in enumerate(out) if not (i and ch == out[i - 1] and skip()))
    steps, n = [], 0
    for ch in word:
        n += ch == letter
        steps.append(f"{ch}{n}")
    return steps, str(n)


@dataclass
class StringsTask(WorkedTask):
    """Registered as ``task.name: strings``. Params: ``ops`` (all three), ``min_len`` (3), ``max_len`` (8),
    ``alphabet`` (``"abcdefgh"``), ``double_slip`` (0.6) and ``case_slip`` (0), the warm-up's habits (see the
    module docstring)."""

    seed: int = 0
    n_train: int = 4000
    n_val: int = 256
    ops: tuple[str, ...] = OPS
    min_len: int = 3
    max_len: int = 8
    alphabet: str = "abcdefgh"
    double_slip: float = 0.6
    case_slip: float = 0.0
    name: str = "strings"
    _train: list[Problem] = field(init=False, repr=False)
    _val: list[Problem] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.ops, str) or not isinstance(self.ops, (list, tuple)):
            raise UserError(f"task.params.ops must be a non-empty list of {', '.join(OPS)}, got {self.ops!r}")
        check_int("task.params.min_len", self.min_len)
        check_int("task.params.max_len", self.max_len)
        if not isinstance(self.alphabet, str):
            raise UserError(f"task.params.alphabet must be two or more lowercase letters, got {self.alphabet!r}")
        self.ops = tuple(self.ops)
        if not self.ops or set(self.ops) - set(OPS):
            raise UserError(f"task.params.ops must be a non-empty list of {', '.join(OPS)}, got {list(self.ops)}")
        if not 1 <= self.min_len <= self.max_len <= 16:
            raise UserError(f"task.params: need 1 <= min_len <= max_len <= 16, got {self.min_len}..{self.max_len}")
        if len(set(self.alphabet)) < 2 or not all("a" <= c <= "z" for c in self.alphabet):
            raise UserError(f"task.params.alphabet must be two or more lowercase letters, got {self.alphabet!r}")
        for habit in ("double_slip", "case_slip"):
            check_number(f"task.params.{habit}", getattr(self, habit), 0.0, 1.0, high_open=True)
        self._val, self._train = self._draw()

    def _draw(self) -> tuple[list[Problem], list[Problem]]:
        """Distinct problems from one seeded stream (``draw_split``): the first ``n_val`` are validation."""
        letters = sorted(set(self.alphabet))

        def one(rng: np.random.Generator) -> Problem:
            op = self.ops[int(rng.integers(len(self.ops)))]
            k = int(rng.integers(self.min_len, self.max_len + 1))
            word = "".join(letters[int(i)] for i in rng.integers(len(letters), size=k))
            letter = letters[int(rng.integers(len(letters)))] if op == "count" else ""
            prompt = f"count {letter} in {word}=" if op == "count" else f"{op} {word}="
            steps, answer = _solve(op, word, letter)
            meta = {"op": op, "length": k, "steps": steps, "word": word, "letter": letter}
            return Problem(id=prompt, prompt=prompt, answer=answer, meta=meta)

        return draw_split(one, np.random.default_rng([self.seed, 0x57A1]), self.n_val, self.n_train,
                          "allow longer words or a larger alphabet")

    def demonstration(self, problem: Problem) -> str:
        """The working in ``<think>...</think>``, then the answer: correct, unless ``double_slip`` (see the module
        docstring) drops doubled letters from the answer or ``case_slip`` capitalises its first letter; the same
        problem always gets the same demonstration."""
        if not self.double_slip and not self.case_slip:
            return super().demonstration(problem)
        rng = np.random.default_rng([self.seed, 0xD0B1, *problem.prompt.encode()])
        op, word = problem.meta["op"], problem.meta["word"]
        steps, answer = _solve(op, word, problem.meta.get("letter", ""), lambda: rng.random() < self.double_slip)
        if op in ("rev", "sort") and rng.random() < self.case_slip:
            answer = answer[:1].upper() + answer[1:]  # the working is lower case; the copy into the answer is not
        return f"{THINK}{' '.join(steps)}{END_THINK}{answer}"


@TASKS.register("strings")
def strings(seed: int = 0, n_train: int = 4000, n_val: int = 256, **params: object) -> StringsTask:
    return StringsTask(seed=seed, n_train=n_train, n_val=n_val, **params)  # type: ignore[arg-type]
