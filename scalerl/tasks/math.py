"""Math tasks (App. A.3): prompts from the user's JSONL / JSON / parquet files or from reasoning-gym's seeded
generators; answers checked after stripping ``<think>…</think>`` (A.3), with Math-Verify for files and the
dataset's own ``score_answer`` for reasoning-gym.

The task grades text; the reward values (±1 by default, App. A.3) come from the run config. How the answer is
found in a completion is documented in ``scalerl.tasks.answers``.

``math_verify`` and ``reasoning_gym`` are optional (extra ``math``) and imported only when a task needs them.
Math-Verify bounds its work with ``signal.alarm``, which only works in the main thread: ``answers_match`` uses
a 5 s timeout there and none in other threads (where a pathological expression could take long).
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from scalerl.errors import UserError
from scalerl.tasks.answers import after_thinking, extract_answer, extract_boxed, extract_marked_answer, last_number
from scalerl.tasks.base import Problem
from scalerl.tasks.files import StaticTask, field_of, file_problems, format_prompt, record_id, resolve_template
from scalerl.tasks.files import validate_params
from scalerl.tasks.registry import TASKS

QUESTION_FIELDS = ("question", "problem", "prompt")
ANSWER_FIELDS = ("answer", "final_answer", "solution")
VERIFY_TIMEOUT_S = 5


class MathParams(BaseModel):
    """``task.params`` of the ``math`` task (see docs/tasks.md)."""

    model_config = ConfigDict(extra="forbid")

    source: Literal["file", "reasoning_gym"] = "file"
    path: str | None = None  # file source: the problems (train, and validation unless val_path is given)
    val_path: str | None = None  # file source: a separate held-out validation file
    dataset: str | None = None  # reasoning_gym source: the generator name, e.g. basic_arithmetic
    dataset_config: dict[str, Any] = Field(default_factory=dict)  # keyword arguments of that generator
    template: str | None = None  # a name in scalerl.tasks.files.TEMPLATES or a string with {question}

    @model_validator(mode="after")
    def _source_fields(self) -> "MathParams":
        if self.source == "file":
            if not self.path:
                raise ValueError("source 'file' needs path (a .jsonl, .json or .parquet file)")
            if self.dataset is not None or self.dataset_config:
                raise ValueError("dataset / dataset_config belong to source 'reasoning_gym'")
        else:
            if not self.dataset:
                raise ValueError("source 'reasoning_gym' needs dataset (e.g. basic_arithmetic)")
            if self.path is not None or self.val_path is not None:
                raise ValueError("path / val_path belong to source 'file'")
        return self


def require(module: str) -> Any:
    """Import an optional dependency of the ``math`` extra, or say how to install it."""
    try:
        return __import__(module)
    except ImportError:
        package = module.replace("_", "-")
        raise UserError(f"this task needs {package}; install it with: pip install 'scalerl[math]'") from None


# ------------------------------------------------------------------------------------------- Math-Verify


def _latex(text: str) -> str:
    """Math-Verify reads LaTeX inside math delimiters; a bare answer ("x^2+1", "\\frac12") gets ``$…$``."""
    return text if any(d in text for d in ("$", "\\(", "\\[")) else f"${text}$"


@functools.lru_cache(maxsize=8192)
def _parse(text: str, timeout: int | None) -> tuple[Any, ...]:
    from math_verify import parse

    parsed = parse(_latex(text), parsing_timeout=timeout)
    if not parsed:
        parsed = parse(text, parsing_timeout=timeout)
    return tuple(parsed)


def _normal(text: str) -> str:
    return "".join(text.split()).strip("$").rstrip(".")


def gold_answer(value: Any) -> str:
    """A reference answer as text; a worked solution (MATH-style) is reduced to its ``\\boxed{}`` answer."""
    text = str(value).strip()
    boxed = extract_boxed(text)
    return boxed if boxed is not None else text


def answers_match(gold: str, candidate: str) -> bool:
    """Math-Verify equivalence (``verify(parse(gold), parse(candidate))``); identical text short-circuits."""
    if _normal(gold) == _normal(candidate):
        return True
    require("math_verify")
    from math_verify import verify

    timeout = VERIFY_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    gold_parsed, candidate_parsed = _parse(gold, timeout), _parse(candidate, timeout)
    if not gold_parsed or not candidate_parsed:
        return False
    return bool(verify(list(gold_parsed), list(candidate_parsed), timeout_seconds=timeout))


def grade_math(gold: str, completion: str) -> bool:
    """True when the final answer after the thinking matches ``gold``."""
    candidate = extract_answer(after_thinking(completion))
    return candidate is not None and answers_match(gold, candidate)


def grade_problem(problem: Problem, completion: str) -> bool:
    return grade_math(problem.answer, completion)


def _file_problem(template: str, record: dict[str, Any], source: str, index: int) -> Problem:
    question = str(field_of(record, QUESTION_FIELDS, "question", source, index))
    answer = gold_answer(field_of(record, ANSWER_FIELDS, "answer", source, index))
    return Problem(id=record_id(record, source, index), prompt=format_prompt(template, question), answer=answer)


# --------------------------------------------------------------------------------------------- reasoning-gym


class ReasoningGymGrader:
    """Grades with the generator's own ``score_answer``; correct iff the score is 1.

    The candidate is the marked answer (``\\boxed{}``, ``<answer>`` tags, "the answer is …"), or, when nothing is
    marked, the whole answer text or its last number (reasoning-gym answers are not always numbers)."""

    def __init__(self, dataset: Any, entries: dict[str, dict[str, Any]]) -> None:
        self.dataset = dataset
        self.entries = entries

    def __call__(self, problem: Problem, completion: str) -> bool:
        text = after_thinking(completion).strip()
        marked = extract_marked_answer(text)
        candidates = [marked] if marked is not None else [text, last_number(text)]
        entry = self.entries[problem.id]
        for candidate in candidates:
            if not candidate:
                continue
            try:
                if self.dataset.score_answer(answer=candidate, entry=entry) >= 1.0:
                    return True
            except Exception:  # a third-party scorer must not crash training on odd model text
                continue
        return False


def reasoning_gym_task(
    name: str, seed: int, n_train: int, n_val: int, dataset: str, config: dict[str, Any], template: str
) -> StaticTask:
    """``n_val`` held-out and up to ``n_train`` training problems from generator ``dataset`` with ``seed``.

    The first ``n_val`` generated items are the validation split; training items whose question also occurs
    there are dropped, so the validation split stays held out (training may come out slightly short)."""
    rg = require("reasoning_gym")
    try:
        data = rg.create_dataset(dataset, size=n_train + n_val, seed=seed, **config)
        items = [data[i] for i in range(len(data))]
    except (ValueError, TypeError, KeyError, AssertionError) as exc:
        raise UserError(f"task.params.dataset {dataset!r} with dataset_config {config}: {exc}") from None
    problems = [
        Problem(id=f"{dataset}-{seed}-{i}", prompt=format_prompt(template, str(e["question"])), answer=str(e["answer"]))
        for i, e in enumerate(items)
    ]
    val = problems[:n_val]
    held_out = {items[i]["question"] for i in range(n_val)}
    train = [p for p, e in zip(problems[n_val:], items[n_val:]) if e["question"] not in held_out]
    entries = {p.id: e for p, e in zip(problems, items)}
    return StaticTask(name, train, val, ReasoningGymGrader(data, entries))


# ------------------------------------------------------------------------------------------------ factories


@TASKS.register("math")
def make_math_task(*, seed: int = 0, n_train: int = 4000, n_val: int = 256, **params: Any) -> StaticTask:
    """The ``math`` task: ``source: file`` (default; ``path``, optional ``val_path``) or
    ``source: reasoning_gym`` (``dataset``, ``dataset_config``); optional ``template``."""
    p = validate_params(MathParams, params, "math")
    template = resolve_template(p.template)
    if p.source == "reasoning_gym":
        return reasoning_gym_task("math", seed, n_train, n_val, p.dataset or "", p.dataset_config, template)
    require("math_verify")  # fail at construction, not at the first grade
    train, val = file_problems(p.path or "", p.val_path, seed, n_train, n_val, functools.partial(_file_problem, template))
    return StaticTask("math", train, val, grade_problem)


@TASKS.register("reasoning_gym")
def make_reasoning_gym_task(*, seed: int = 0, n_train: int = 4000, n_val: int = 256, **params: Any) -> StaticTask:
    """Shorthand for ``math`` with ``source: reasoning_gym`` (params ``dataset``, ``dataset_config``, ``template``)."""
    p = validate_params(MathParams, {"source": "reasoning_gym", **params}, "reasoning_gym")
    return reasoning_gym_task(
        "reasoning_gym", seed, n_train, n_val, p.dataset or "", p.dataset_config, resolve_template(p.template)
    )
