"""Code tasks (App. A.3: code is "checked by a custom execution environment with unit tests"; the math+code
runs add the DeepCoder prompts): a completion is correct iff its program passes every test of the problem in
the sandbox. Any failure, timeout or crash is incorrect.

The program is taken from the text after the last ``</think>`` (``scalerl.tasks.answers.extract_code``: the last
```python block, else the last untagged block, else the whole text). Test formats (docs/tasks.md):

* a list of assert statements, or a string of test code (e.g. HumanEval's ``def check(candidate): …``, called
  with ``entry_point`` when given): the solution is saved as ``solution.py`` and imported (its
  ``if __name__ == "__main__":`` block does not run) in one sandbox; the tests run in another, where each of
  the solution's functions is a proxy: its arguments go to the solution's sandbox and its result comes back as
  plain data (``code_wire``), so the tests compare real values and the solution never sees the tests. The
  verdict is the tests' sandbox running to its end, never the solution's exit status;
* a list of ``{"input": …, "output": …}`` cases, or ``{"inputs": [...], "outputs": [...]}`` (APPS / DeepCoder
  style): the solution runs as a program once per case with that standard input; its standard output must
  equal the expected one up to trailing whitespace on each line and trailing blank lines. With ``fn_name`` in
  that object, the cases are calls instead: ``fn_name(*inputs[i]) == outputs[i]``.
"""

from __future__ import annotations

import ast
import dataclasses
import errno
import functools
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from scalerl.errors import UserError
from scalerl.tasks.answers import after_thinking, extract_code
from scalerl.tasks.base import Problem
from scalerl.tasks.files import StaticTask, field_of, file_problems, format_prompt, record_id, resolve_template
from scalerl.tasks.files import validate_params
from scalerl.tasks.grading import GradingFailed
from scalerl.tasks.registry import TASKS
from scalerl.tasks.sandbox import SandboxLimits, SandboxResult, check_sandbox_starts, describe_isolation, run_python

PROMPT_FIELDS = ("prompt", "question", "problem")
TESTS_FIELDS = ("tests", "test", "test_cases", "input_output")

_HERE = Path(__file__).resolve().parent
# the two sides of a script test (see the module docstring), read once
SERVER, CHECKER, WIRE = ((_HERE / name).read_text(encoding="utf-8")
                         for name in ("code_server.py", "code_checker.py", "code_wire.py"))


class CodeParams(BaseModel):
    """``task.params`` of the ``code`` task (see docs/tasks.md)."""

    model_config = ConfigDict(extra="forbid")

    path: str  # the problems (train, and validation unless val_path is given)
    val_path: str | None = None  # a separate held-out validation file
    template: str | None = None  # a name in scalerl.tasks.files.TEMPLATES or a string with {question}
    cpu_seconds: float = Field(5.0, gt=0)  # per test program (per case for stdin/stdout tests)
    wall_seconds: float | None = Field(None, gt=0)
    memory_mb: int = Field(512, ge=64)
    site_packages: bool = False  # let solutions import installed packages, not just the standard library


def parse_tests(value: Any, entry_point: str | None, source: str, index: int) -> dict[str, Any]:
    """A problem's tests in one of the documented formats -> ``{"kind": "script", "source": …}`` or
    ``{"kind": "stdio", "cases": [[input, output], …]}``; a UserError naming the record otherwise."""
    where = f"{source}: record {index + 1}"
    if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            pass  # test code that happens to start with a bracket
    if isinstance(value, str) and value.strip():
        call = f"\ncheck({entry_point})\n" if entry_point and "def check(" in value else "\n"
        return {"kind": "script", "source": _runs_a_check(value + call, where)}
    if isinstance(value, list) and value and all(isinstance(t, str) for t in value):
        return {"kind": "script", "source": _runs_a_check("\n".join(value) + "\n", where)}
    if isinstance(value, list) and value and all(isinstance(t, dict) and {"input", "output"} <= t.keys() for t in value):
        return {"kind": "stdio", "cases": [[_text(t["input"]), _text(t["output"])] for t in value]}
    if isinstance(value, dict) and {"inputs", "outputs"} <= value.keys():
        inputs, outputs = value["inputs"], value["outputs"]
        if isinstance(inputs, list) and isinstance(outputs, list) and inputs and len(inputs) == len(outputs):
            if value.get("fn_name"):
                name = str(value["fn_name"])
                _check_identifier(name, where, "fn_name")
                calls = [f"assert {name}(*{_args(i)!r}) == {o!r}" for i, o in zip(inputs, outputs)]
                return {"kind": "script", "source": "\n".join(calls) + "\n"}
            return {"kind": "stdio", "cases": [[_text(i), _text(o)] for i, o in zip(inputs, outputs)]}
    raise UserError(
        f"{where}: tests must be a non-empty list of assert statements, a string of test code, a list of "
        "{input, output} cases, or {inputs: [...], outputs: [...]} of equal length"
    )


def _runs_a_check(source: str, where: str) -> str:
    """``source`` when its top level runs something that can fail (an assert, a call, a raise); a UserError
    otherwise. Test code that only defines functions (HumanEval's ``def check(candidate)`` without an
    ``entry_point`` to call it with, pytest-style ``def test_…``) never runs a check: every program, however
    wrong, would pass it."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source  # broken tests fail every program in the sandbox: no pass to forge
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
            continue
        if any(isinstance(sub, (ast.Assert, ast.Call, ast.Raise)) for sub in ast.walk(node)):
            return source
    hint = " (it defines check(); give the record an entry_point to call it with)" if "def check(" in source else ""
    raise UserError(f"{where}: the test code never runs a check at its top level (no assert, call or raise){hint}; "
                    "every program would pass it")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "\n".join(map(str, value)) if isinstance(value, list) else str(value)


def _args(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _check_identifier(name: str, where: str, field: str) -> None:
    if not name.isidentifier():
        raise UserError(f"{where}: {field} {name!r} is not a Python identifier")


def _same_output(actual: str, expected: str) -> bool:
    def lines(text: str) -> list[str]:
        out = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
        while out and not out[-1]:
            out.pop()
        return out

    return lines(actual) == lines(expected)


def check_solution(code: str, tests: dict[str, Any], limits: SandboxLimits) -> SandboxResult:
    """Run ``code`` against ``tests`` (from ``parse_tests``); the result of the first failing run, else of the
    last run. ``passed`` is true iff every test passed."""
    if tests["kind"] == "script":
        return _check_script(code, tests["source"], limits)
    result = None
    for number, (stdin, expected) in enumerate(tests["cases"], 1):
        result = run_python(code, limits, stdin=stdin, strict=False)
        if not result.passed:
            return result
        if result.stdout_truncated or not _same_output(result.stdout, expected):
            return dataclasses.replace(result, passed=False, reason=f"wrong output on test case {number}")
    assert result is not None  # parse_tests never gives an empty case list
    return result


def _check_script(code: str, tests: str, limits: SandboxLimits) -> SandboxResult:
    """The solution in one sandbox, the tests in another, joined by two pipes that carry plain data only;
    the result is the tests' run (passed iff they ran to their end), or, when it failed because the solution's
    sandbox itself gave no verdict (``SandboxResult.sandbox_fault``), that sandbox's result."""
    to_solution_r, to_solution_w = os.pipe()
    to_checker_r, to_checker_w = os.pipe()
    with ThreadPoolExecutor(1) as pool:
        solution = pool.submit(run_python, SERVER, limits, files={"solution.py": code, "_wire.py": WIRE},
                               strict=False, pass_fds=(to_solution_r, to_checker_w))
        try:
            verdict = run_python(CHECKER, limits, files={"tests.py": tests, "_wire.py": WIRE},
                                 pass_fds=(to_checker_r, to_solution_w))
        finally:
            served = solution.result()
    if not verdict.passed and verdict.sandbox_fault is None and served.sandbox_fault is not None:
        return served  # a failure of the grader's machinery, not of the code: never turned into a pass
    return verdict


@functools.lru_cache(maxsize=4096)
def _tests_of(answer: str) -> dict[str, Any]:
    return json.loads(answer)


class CodeGrader:
    """Correct iff the program in the completion passes all the problem's tests in the sandbox. The program
    failing there (its exception, CPU, memory or wall-clock limit) is the verdict: incorrect. The sandbox
    failing (it cannot start: no interpreter, no process or memory for it; it could not be set up; it was
    killed from outside) is no verdict: ``GradingFailed`` (``tasks/grading.py``: the sample is incorrect, with
    the reason, and counted)."""

    def __init__(self, limits: SandboxLimits) -> None:
        self.limits = limits

    def __call__(self, problem: Problem, completion: str) -> bool:
        code = extract_code(after_thinking(completion))
        if not code.strip():
            return False
        if not os.access(sys.executable, os.X_OK):  # removed under a running trainer (a venv rebuilt, say)
            raise GradingFailed("no_interpreter", f"the sandbox's interpreter {sys.executable} is missing")
        try:
            result = check_solution(code, _tests_of(problem.answer), self.limits)
        except FileNotFoundError as exc:  # the interpreter (or bubblewrap) is gone
            raise GradingFailed("no_interpreter", f"the sandbox cannot start {exc.filename or exc}") from None
        except OSError as exc:  # no process, memory or descriptor left for a sandbox
            kind = "memory" if exc.errno == errno.ENOMEM else "crash"
            raise GradingFailed(kind, f"the sandbox cannot start: {exc}") from None
        if result.sandbox_fault is not None:
            raise GradingFailed(result.sandbox_fault, result.reason)
        return result.passed


def _code_problem(template: str, record: dict[str, Any], source: str, index: int) -> Problem:
    prompt = str(field_of(record, PROMPT_FIELDS, "prompt", source, index))
    entry_point = record.get("entry_point")
    if entry_point is not None:
        _check_identifier(str(entry_point), f"{source}: record {index + 1}", "entry_point")
    tests = parse_tests(field_of(record, TESTS_FIELDS, "tests", source, index), entry_point, source, index)
    # the answer carries the tests, so a Problem can be graded wherever it travels
    return Problem(id=record_id(record, source, index), prompt=format_prompt(template, prompt), answer=json.dumps(tests))


@TASKS.register("code")
def make_code_task(*, seed: int = 0, n_train: int = 4000, n_val: int = 256, **params: Any) -> StaticTask:
    """The ``code`` task: problems with unit tests from ``path`` (optional ``val_path``, ``template``) and the
    sandbox limits per test run (``cpu_seconds``, ``wall_seconds``, ``memory_mb``, ``site_packages``)."""
    p = validate_params(CodeParams, params, "code")
    limits = SandboxLimits(
        cpu_seconds=p.cpu_seconds, wall_seconds=p.wall_seconds, memory_mb=p.memory_mb, site_packages=p.site_packages
    )
    make = functools.partial(_code_problem, resolve_template(p.template))
    train, val = file_problems(p.path, p.val_path, seed, n_train, n_val, make)
    check_sandbox_starts()  # a sandbox that cannot start is one error now, not reward -1 on every sample
    print(describe_isolation(), file=sys.stderr)  # the run's log names the active sandbox layer
    return StaticTask("code", train, val, CodeGrader(limits))
