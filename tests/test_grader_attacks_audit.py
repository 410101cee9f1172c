"""Graders as attack surface: answers a policy could write to be rewarded without solving the problem.

Each test is one attack that forged a reward before its fix, and checks that an honest answer still passes."""

from __future__ import annotations

import sys

import pytest

from scalerl.errors import UserError
from scalerl.tasks.code import check_solution, parse_tests
from scalerl.tasks.math import may_run_code
from scalerl.tasks.registry import TASKS
from scalerl.tasks.sandbox import SandboxLimits

LIMITS = SandboxLimits(cpu_seconds=10, wall_seconds=60, memory_mb=256)  # margin: no verdict depends on speed
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox's OS layer is Linux-only")


def script(tests, entry_point=None) -> dict:
    return parse_tests(tests, entry_point, "t.jsonl", 0)


# ------------------------------------------------------------------------------------------------ code


@linux_only
def test_a_stop_iteration_from_the_solution_does_not_cut_the_tests_short():
    # raised out of a call inside map(), a StopIteration ends the map: all(map(f, xs)) would be all([]) == True
    tests = script(["assert all(map(is_prime, [2, 3, 5, 7]))", "assert not list(filter(is_prime, [4, 6, 9]))"])
    for exc in ("StopIteration", "StopAsyncIteration"):
        forged = check_solution(f"def is_prime(n):\n    raise {exc}\n", tests, LIMITS)
        assert not forged.passed, forged.reason
        assert "RuntimeError" in forged.reason
    honest = check_solution("def is_prime(n):\n    return n > 1 and all(n % d for d in range(2, n))\n", tests, LIMITS)
    assert honest.passed, (honest.reason, honest.stderr[-500:])
    # other built-in exceptions still come back as themselves
    raises = script(["try:\n    f(-1)\nexcept ValueError:\n    pass\nelse:\n    assert False"])
    assert check_solution("def f(x):\n    raise ValueError('negative')\n", raises, LIMITS).passed


@pytest.mark.parametrize("tests", [
    "def check(candidate):\n    assert candidate(1, 2) == 3\n",  # HumanEval's check() with no entry_point
    "def test_add():\n    assert add(1, 2) == 3\n",  # pytest style: nothing calls it
    ["def test_add():\n    assert add(1, 2) == 3"],
    "METADATA = {'author': 'x'}\n\ndef check(candidate):\n    assert candidate(1, 2) == 3\n",
])
def test_test_code_that_never_runs_a_check_is_refused(tests):
    # before: accepted, and every program (``def add(a, b): return 0``) passed the never-called check
    with pytest.raises(UserError, match="never runs a check"):
        script(tests)


def test_test_code_that_runs_its_checks_is_kept():
    check = "def check(candidate):\n    assert candidate(1, 2) == 3\n"
    assert script(check, "add")["source"].endswith("check(add)\n")
    assert script(check + "\ncheck(add)\n")["source"].startswith(check)
    assert script(["assert add(1, 2) == 3"])["source"] == "assert add(1, 2) == 3\n"
    assert "unittest.main()" in script("import unittest\nclass T(unittest.TestCase):\n    pass\nunittest.main()\n")["source"]
    assert script({"fn_name": "add", "inputs": [[1, 2]], "outputs": [3]})["kind"] == "script"


def test_a_dataset_record_with_uncalled_tests_stops_the_task_at_start_up(tmp_path):
    path = tmp_path / "code.jsonl"
    path.write_text('{"id": "a", "prompt": "add", "tests": "def check(candidate):\\n    assert candidate(1, 2) == 3\\n"}\n'
                    '{"id": "b", "prompt": "add", "tests": ["assert add(1, 2) == 3"]}\n')
    with pytest.raises(UserError, match="record 1.*entry_point"):
        TASKS.get("code")(seed=0, n_train=1, n_val=1, path=str(path))


@linux_only
def test_humaneval_check_with_entry_point_still_grades_both_ways():
    tests = script("def check(candidate):\n    assert candidate(1, 2) == 3\n", "add")
    assert check_solution("def add(a, b):\n    return a + b\n", tests, LIMITS).passed
    assert not check_solution("def add(a, b):\n    return 0\n", tests, LIMITS).passed


# --------------------------------------------------------------------------------------------- reasoning-gym


def _countdown_forge(numbers) -> str:
    """An answer that, evaluated by countdown's scorer (sympy's parse_expr, i.e. eval), replaces numpy.isclose
    in the grader's process with a function that is always true; it uses exactly the problem's numbers."""
    return ("(__import__('numpy').__setattr__('isclose', eval('lambda *a, **k: True')) or "
            + "+".join(map(str, numbers)) + ")")


def test_an_answer_that_runs_code_in_the_grader_is_not_scored(monkeypatch):
    pytest.importorskip("reasoning_gym")
    np = pytest.importorskip("numpy")
    monkeypatch.setattr(np, "isclose", np.isclose)  # put back whatever a failing run of this test did
    real_isclose = np.isclose
    task = TASKS.get("reasoning_gym")(seed=0, n_train=4, n_val=2, dataset="countdown")
    problems = list(task.val_problems()) + list(task.train_problems())
    first, later = problems[0], problems[1]
    numbers = task.grader.entries[first.id]["metadata"]["numbers"]
    for wrapped in (f"<think>hmm</think>\\boxed{{{_countdown_forge(numbers)}}}",
                    f"<think>hmm</think><answer>{_countdown_forge(numbers)}</answer>",
                    f"<think>hmm</think>{_countdown_forge(numbers)}"):
        assert not task.grade(first, wrapped)
        assert np.isclose is real_isclose  # the grader's process is untouched
    # and a plain wrong answer with the right numbers is still wrong afterwards
    later_numbers = task.grader.entries[later.id]["metadata"]["numbers"]
    assert not task.grade(later, "<think>hmm</think><answer>" + "+".join(map(str, later_numbers)) + "</answer>")
    for problem in problems:  # honest answers still pass
        assert task.grade(problem, f"<think>working</think><answer>{problem.answer}</answer>"), problem.id
        assert task.grade(problem, f"<think>working</think>{problem.answer}"), problem.id


@pytest.mark.parametrize("attack", [
    "__import__('os').getpid()",
    " __import__('os').getpid()",  # eval() drops leading blanks that ast.parse refuses
    "eval('1')",
    "ｅｖａｌ('1')",  # identifiers are NFKC-normalised by the compiler
    "(sin := eval)('1')",
    "[sin('1') for sin in [eval]]",  # a comprehension rebinding an allowed name
    "(lambda: 1)()",
    "f'{1}'",
    "x.y()",
    "Symbol('x').func('y')",
    "open('x')",
    "getattr(1, 'a')",
    "breakpoint()",
    "var('x')",  # a sympy name parse_expr knows
    "sin(x) + exec('1')",
    "().__class__",
])
def test_may_run_code_flags_code(attack):
    assert may_run_code(attack)


@pytest.mark.parametrize("honest", [
    "3", "-7", "3/4", "6*(98 - 54) - 34 - 66", "94*4 - 61 - 6", "-x*asin(2*x) - sqrt(1 - 4*x**2)/2 + C",
    "-Integral(x**3*cos(2*x), x) + C", "x^2 + 1", "5!", "[[1, 2], [3, 4]]", '{"a": [1, 2]}', "Mr. Smith",
    "yes", "True", "the, date, for, any, painting", "(1, 2), (3, 4)", "e4 e5 Nf3",
])
def test_may_run_code_leaves_answers_alone(honest):
    assert not may_run_code(honest)


def test_reasoning_gym_gold_answers_are_never_taken_for_code():
    rg = pytest.importorskip("reasoning_gym")
    for name in ("countdown", "puzzle24", "simple_integration", "intermediate_integration", "polynomial_multiplication",
                 "n_queens", "spiral_matrix", "binary_matrix", "string_insertion", "number_sorting", "basic_arithmetic",
                 "propositional_logic", "word_sorting", "complex_arithmetic"):
        data = rg.create_dataset(name, size=10, seed=1)
        for i in range(len(data)):
            assert not may_run_code(str(data[i]["answer"])), (name, data[i]["answer"])


# ------------------------------------------------------------------------------------------ answer extraction


def _boxed_reference(text: str) -> str | None:
    """The specification of ``extract_boxed``, scanning from every box (quadratic): the last box that closes."""
    import re

    found = None
    for match in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        depth = 1
        for pos in range(match.end(), len(text)):
            depth += {"{": 1, "}": -1}.get(text[pos], 0)
            if depth == 0:
                found = text[match.end():pos]
                break
    return found.strip() if found is not None else None


class _CountingText(str):
    """A text that counts how many times a character of it is looked up."""

    reads = 0

    def __getitem__(self, key):
        type(self).reads += 1
        return str.__getitem__(self, key)


def test_many_unclosed_boxes_are_read_in_one_pass():
    # before: each "\boxed{" was scanned to the end of the text, so a completion of n unclosed boxes cost ~n²
    # character reads (40,000 characters: seconds of grading per sample, a stall the policy could choose)
    from scalerl.tasks.answers import extract_boxed

    text = _CountingText("\\boxed{" * 1000 + " 5")
    _CountingText.reads = 0
    assert extract_boxed(text) is None
    assert _CountingText.reads <= len(text)


def test_boxed_extraction_is_unchanged():
    import random

    from scalerl.tasks.answers import extract_boxed

    rng = random.Random(0)
    pieces = ["{", "}", "\\boxed{", "\\fbox {", "\\boxed", "a", "1", " ", "x}"]
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        assert extract_boxed(text) == _boxed_reference(text), text
    assert extract_boxed(r"so $\boxed{\frac{a}{\sqrt{b^{2}}}}$, then \boxed{\boxed{3}}") == "3"


# ---------------------------------------------------------------------------------------------- the sandbox


@linux_only
def test_a_program_cannot_pass_its_own_failure_off_as_the_sandbox_failing():
    # before: exit status 125 and a last stderr line "sandbox setup failed…" read as "the sandbox gave no verdict":
    # the sample counted as a grader failure, and a batch mostly of them stopped the run (max_ungraded_fraction)
    from scalerl.tasks.grading import Grade, grade

    fake = "import os, sys\nsys.stderr.write('sandbox setup failed: fake\\n')\nsys.stderr.flush()\nos._exit(125)\n"
    for tests in (script(["assert add(1, 2) == 3"]), script([{"input": "", "output": "3\n"}])):
        result = check_solution(fake, tests, LIMITS)
        assert not result.passed and result.sandbox_fault is None, result.reason
    task = TASKS.get("code")(seed=0, n_train=1, n_val=1, path=str(_code_file()), cpu_seconds=3)
    for problem in list(task.train_problems()) + list(task.val_problems()):
        assert grade(task, problem, f"```python\n{fake}```") == Grade(False, None)


def _code_file():
    from pathlib import Path

    return Path(__file__).resolve().parent.parent / "examples" / "tasks" / "code_tiny.jsonl"


@linux_only
def test_a_real_setup_failure_of_the_worker_is_still_no_verdict(monkeypatch):
    from scalerl.tasks import sandbox

    source = sandbox.child_source()
    head = "def _start_worker(cfg: dict[str, Any], uid: int | None, libc: Any, payload_fd: int) -> None:\n"
    assert head in source
    broken = source.replace(head, head + "    raise OSError('no uid for the worker')\n", 1)
    monkeypatch.setattr(sandbox, "child_source", lambda: broken)
    result = sandbox.run_python("pass", LIMITS)
    assert result.sandbox_fault == "sandbox" and "no uid for the worker" in result.reason, result.reason
