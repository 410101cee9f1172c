"""Math tasks (App. A.3): prompts from the user's JSONL / JSON / parquet files or from reasoning-gym's seeded
generators; answers checked after stripping ``<think>…</think>`` (A.3), with Math-Verify for files and the
dataset's own ``score_answer`` for reasoning-gym.

The task grades text; the reward values (±1 by default, App. A.3) come from the run config. How the answer is
found in a completion is documented in ``scalerl.tasks.answers``.

``math_verify`` and ``reasoning_gym`` are optional (extra ``math``) and imported only when a task needs them.
Math-Verify bounds its work with ``signal.alarm``, which only works in the main thread: ``answers_match`` uses
its 5 s timeout there, and from any other thread (the evaluation beside the steps) runs it in a worker process's
main thread, killed after :data:`scalerl.tasks.isolated.SCORER_TIMEOUT_S` (a candidate such as ``10^{10^{10}}``
would otherwise hold the interpreter lock for good). reasoning-gym's ``score_answer`` always runs in such a worker:
no signal interrupts ``9**9**9**9``.
"""

from __future__ import annotations

import ast
import functools
import threading
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from scalerl.errors import UserError
from scalerl.tasks.answers import after_thinking, extract_answer, extract_boxed, extract_marked_answer, last_number
from scalerl.tasks.base import Problem
from scalerl.tasks.files import StaticTask, field_of, file_problems, format_prompt, record_id, resolve_template
from scalerl.tasks.files import validate_params
from scalerl.tasks.grading import GradingFailed
from scalerl.tasks.isolated import Isolated
from scalerl.tasks.registry import TASKS

QUESTION_FIELDS = ("question", "problem", "prompt")
ANSWER_FIELDS = ("answer", "final_answer", "solution")
VERIFY_TIMEOUT_S = 5
_ISOLATED = Isolated()  # Math-Verify off the main thread (answers_match)


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
        raise UserError(f"this task needs {package}; install it with: pip install -e '.[math]' (in the scalerl checkout)") from None


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
    if threading.current_thread() is not threading.main_thread():  # no alarm here: in the worker's main thread
        return bool(_ISOLATED("scalerl.tasks.math", "verify_answers", gold, candidate))
    return verify_answers(gold, candidate)


def verify_answers(gold: str, candidate: str) -> bool:
    """``verify(parse(gold), parse(candidate))`` with Math-Verify's :data:`VERIFY_TIMEOUT_S` (main thread only)."""
    from math_verify import verify

    gold_parsed, candidate_parsed = _parse(gold, VERIFY_TIMEOUT_S), _parse(candidate, VERIFY_TIMEOUT_S)
    if not gold_parsed or not candidate_parsed:
        return False
    return bool(verify(list(gold_parsed), list(candidate_parsed), timeout_seconds=VERIFY_TIMEOUT_S))


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


# What a candidate answer may call when a scorer evaluates it as code: math functions only. Several reasoning-gym
# scorers evaluate the model's text: ``eval(answer)`` (n_queens, spiral_matrix, binary_matrix, string_insertion)
# or sympy's ``parse_expr`` (countdown, puzzle24, the integration and polynomial tasks), which is ``eval`` too.
# Without a guard, an answer such as ``__import__('numpy').__setattr__('isclose', …) or 1+2`` runs in the
# trainer's process and rewrites the scorer itself: that answer, and every later one, scores 1.
SAFE_CALLS = frozenset({
    "sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan", "atan2", "acot", "asec", "acsc",
    "sinh", "cosh", "tanh", "coth", "sech", "csch", "asinh", "acosh", "atanh", "acoth",
    "exp", "log", "ln", "sqrt", "cbrt", "root", "Abs", "abs", "sign", "floor", "ceiling", "factorial", "binomial",
    "gamma", "erf", "Integral", "Derivative", "Max", "Min", "max", "min", "Mod", "gcd", "lcm", "re", "im",
    "conjugate", "arg", "Rational", "Integer", "Float", "Symbol", "Lambda", "Function",
})
_UNSAFE_NODES = (ast.NamedExpr, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
                 ast.GeneratorExp, ast.JoinedStr, ast.Await, ast.Yield, ast.YieldFrom)


def _calls_only_math(code: str) -> bool:
    """True when ``code`` is not a Python expression (evaluating it fails before anything runs), or is one
    whose every call is a math function by name (``Function('f')(x)``, sympy's undefined function, included),
    calls no attribute, defines no function, binds no name, names no dunder and formats no f-string. Reading an
    attribute is left alone (prose such as "Mr. Smith" parses as one)."""
    return all(_calls_only_math_in(variant) for variant in {code, code.lstrip(" \t"), code.strip()})


def _calls_only_math_in(code: str) -> bool:
    try:  # eval() drops leading spaces and tabs that ast.parse refuses: the caller tries both
        tree = ast.parse(code, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return True
    for node in ast.walk(tree):
        if isinstance(node, _UNSAFE_NODES):
            return False
        if (isinstance(node, ast.Name) and "__" in node.id) or (isinstance(node, ast.Attribute) and "__" in node.attr):
            return False
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id == "Function":
                continue  # sympy's undefined function applied: Function('f')(x)
            if not (isinstance(func, ast.Name) and func.id in SAFE_CALLS):
                return False
    return True


@functools.lru_cache(maxsize=1)
def _sympy_parsing() -> tuple[Any, dict[str, Any], tuple[Any, ...]] | None:
    """sympy's ``stringify_expr``, the global names ``parse_expr`` evaluates with, and its transformation sets
    (standard with ``^`` as power, as ``sympify`` does, and all of them); None without sympy."""
    try:
        import builtins
        import types

        from sympy import Max, Min
        from sympy.parsing import sympy_parser
    except ImportError:
        return None
    names: dict[str, Any] = {}
    exec("from sympy import *", names)  # what parse_expr does when no global_dict is given
    names.update({k: v for k, v in vars(builtins).items() if isinstance(v, types.BuiltinFunctionType)})
    names.update(max=Max, min=Min)
    sets = (sympy_parser.standard_transformations + (sympy_parser.convert_xor,), tuple(sympy_parser.T))
    return sympy_parser.stringify_expr, names, sets


def may_run_code(text: str) -> bool:
    """True when evaluating ``text`` as Python (``eval``) or as sympy input (``parse_expr`` / ``sympify``) could
    call anything but a math function: such a candidate is never handed to a scorer. Prose, numbers, lists,
    JSON and math expressions (``-x*asin(2*x) - sqrt(1 - 4*x**2)/2 + C``) are not code in this sense."""
    if not _calls_only_math(text):
        return True
    parsing = _sympy_parsing()
    if parsing is None:
        return False
    stringify, names, transformation_sets = parsing
    for transformations in transformation_sets:
        try:
            code = stringify(text, {}, dict(names), transformations)
        except Exception:  # noqa: BLE001 - sympy cannot read it: parse_expr raises before evaluating anything
            continue
        if not _calls_only_math(code):
            return True
    return False


class ReasoningGymGrader:
    """Grades with the generator's own ``score_answer``; correct iff the score is 1.

    The candidate is the marked answer (``\\boxed{}``, ``<answer>`` tags, "the answer is …"), or, when nothing is
    marked, the whole answer text or its last number (reasoning-gym answers are not always numbers). A candidate
    that would run code if a scorer evaluated it (``may_run_code``) is not scored: it is incorrect. The scorer
    runs in a worker process with a time limit (:mod:`scalerl.tasks.isolated`): a candidate it raises on is wrong,
    one it does not finish within the limit is a grader failure (no verdict, graded incorrect)."""

    def __init__(self, entries: dict[str, dict[str, Any]], spec: tuple[str, int, int, dict[str, Any]]) -> None:
        self.entries = entries
        self.spec = spec  # (generator, size, seed, config): the worker process builds the same dataset
        self._isolated = Isolated()

    def __call__(self, problem: Problem, completion: str) -> bool:
        text = after_thinking(completion).strip()
        marked = extract_marked_answer(text)
        candidates = [marked] if marked is not None else [text, last_number(text)]
        entry = self.entries[problem.id]
        for candidate in candidates:
            if not candidate or may_run_code(candidate):
                continue
            try:
                if self._isolated("scalerl.tasks.math", "reasoning_gym_score", *self.spec, entry, candidate) >= 1.0:
                    return True
            except GradingFailed as exc:
                if exc.kind != "error":  # it hung or its worker died: no verdict (a grader failure)
                    raise
                continue  # the scorer raised on odd model text: that candidate is wrong
        return False


_DATASETS: dict[str, Any] = {}  # in the scorer's worker process: the reasoning-gym datasets built so far


def reasoning_gym_score(dataset: str, size: int, seed: int, config: dict[str, Any], entry: dict[str, Any],
                        answer: str) -> float:
    """``score_answer`` of generator ``dataset`` (built as :func:`reasoning_gym_task` builds it, once per worker)
    for ``answer`` on ``entry``; run in :class:`~scalerl.tasks.isolated.Isolated`'s worker process."""
    key = repr((dataset, size, seed, sorted(config.items())))
    if key not in _DATASETS:
        _DATASETS[key] = require("reasoning_gym").create_dataset(dataset, size=size, seed=seed, **config)
    return float(_DATASETS[key].score_answer(answer=answer, entry=entry))


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
    return StaticTask(name, train, val, ReasoningGymGrader(entries, (dataset, n_train + n_val, seed, dict(config))))


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
