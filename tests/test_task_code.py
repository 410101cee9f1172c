"""Code tasks: test formats, code extraction after the thinking, grading in the sandbox (paper §4 / A.3):
correct iff every test passes; failures, timeouts and crashes are incorrect."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from scalerl.errors import UserError
from scalerl.tasks.answers import extract_code
from scalerl.tasks.code import check_solution, parse_tests
from scalerl.tasks.registry import TASKS
from scalerl.tasks.sandbox import SandboxLimits

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox's OS layer is Linux-only")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "tasks"
LIMITS = SandboxLimits(cpu_seconds=1, wall_seconds=10, memory_mb=256)

SOLUTIONS = {
    "add": "def add(a, b):\n    return a + b\n",
    "is-palindrome": "def is_palindrome(s):\n    return s == s[::-1]\n",
    "sum-lines": "n = int(input())\nprint(sum(int(input()) for _ in range(n)))\n",
    "reverse-words": "print(' '.join(input().split()[::-1]))\n",
    "fib": "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
}


@pytest.fixture(scope="module")
def task():
    return TASKS.get("code")(seed=0, n_train=10, n_val=1, path=str(EXAMPLES / "code_tiny.jsonl"), cpu_seconds=1)


def problems(task) -> dict:
    return {p.id: p for p in list(task.train_problems()) + list(task.val_problems())}


def fenced(code: str) -> str:
    return f"<think>plan the solution</think>Here it is:\n```python\n{code}```\nDone."


def test_correct_solutions_pass_and_wrong_ones_fail(task):
    by_id = problems(task)
    assert sorted(by_id) == sorted(SOLUTIONS)
    wrong = "def add(a, b):\n    return 0\ndef is_palindrome(s):\n    return False\ndef fib(n):\n    return n\nprint(0)\n"
    for problem_id, code in SOLUTIONS.items():
        assert task.grade(by_id[problem_id], fenced(code)), problem_id
        assert not task.grade(by_id[problem_id], fenced(wrong)), problem_id


def test_failures_timeouts_and_crashes_are_incorrect(task):
    add = problems(task)["add"]
    for code in (
        "def add(a, b):\n    while True:\n        pass\n",  # hangs inside the tests
        "def add(a, b):\n    return a + b\nimport sys\nsys.exit(0)\n",  # exits before the tests run
        "def add(a, b):\n    return a + b\nimport os\nos._exit(0)\n",
        "def add(a, b):\n    raise RuntimeError('boom')\n",
        "def add(a, b) return a + b\n",  # syntax error
        "",
    ):
        assert not task.grade(add, fenced(code)), code


def test_main_guard_of_a_function_solution_does_not_run(task):
    code = SOLUTIONS["add"] + "if __name__ == '__main__':\n    print(add(int(input()), 2))\n"
    assert task.grade(problems(task)["add"], fenced(code))


def test_code_is_taken_after_the_thinking(task):
    add = problems(task)["add"]
    assert task.grade(add, SOLUTIONS["add"])  # no tags, no fence: the raw text is the program
    assert not task.grade(add, f"<think>```python\n{SOLUTIONS['add']}```</think>I could not solve it.")
    assert not task.grade(add, f"<think>```python\n{SOLUTIONS['add']}```")  # cut off while thinking


def test_extract_code():
    text = "text\n```\nuntagged = 1\n```\n```python\nfirst = 1\n```\n```py\nlast = 2\n```\n"
    assert extract_code(text) == "last = 2\n"
    assert extract_code("```\nonly = 1\n```") == "only = 1\n"
    assert extract_code("```python\ntruncated = 1\n") == "truncated = 1\n"
    assert extract_code("plain = 1") == "plain = 1"


def test_stdio_comparison_ignores_trailing_whitespace_only():
    tests = parse_tests([{"input": "2 3\n", "output": "5\n"}], None, "t.jsonl", 0)
    assert check_solution("a, b = map(int, input().split())\nprint(a + b, '  ')\nprint()", tests, LIMITS).passed
    result = check_solution("print(6)", tests, LIMITS)
    assert not result.passed and result.reason == "wrong output on test case 1"
    assert not check_solution("print(' 5')", tests, LIMITS).passed  # leading whitespace matters
    assert check_solution("print(5)\nimport sys\nsys.exit(0)", tests, LIMITS).passed  # a program may end with exit


def test_parse_tests_formats():
    asserts = parse_tests(["assert f(1) == 2", "assert f(2) == 3"], None, "t.jsonl", 0)
    assert asserts == {"kind": "script", "source": "assert f(1) == 2\nassert f(2) == 3\n"}
    check = parse_tests("def check(candidate):\n    assert candidate(1) == 2\n", "f", "t.jsonl", 0)
    assert check["source"].endswith("\ncheck(f)\n")
    stdio = parse_tests(json.dumps({"inputs": ["1\n", "2\n"], "outputs": ["1\n", "4\n"]}), None, "t.jsonl", 0)
    assert stdio == {"kind": "stdio", "cases": [["1\n", "1\n"], ["2\n", "4\n"]]}
    calls = parse_tests({"fn_name": "f", "inputs": [[1, 2], ["a"]], "outputs": [3, "a!"]}, None, "t.jsonl", 0)
    assert calls["source"] == "assert f(*[1, 2]) == 3\nassert f(*['a']) == 'a!'\n"


@pytest.mark.parametrize("tests", [[], "", {"inputs": ["1"], "outputs": []}, [{"input": "1"}], 42])
def test_unusable_tests_are_user_errors(tests):
    with pytest.raises(UserError, match="t.jsonl: record 3: tests must be"):
        parse_tests(tests, None, "t.jsonl", 2)


def test_missing_fields_and_bad_params(tmp_path):
    path = tmp_path / "code.jsonl"
    path.write_text(json.dumps({"prompt": "Write f.", "asserts": ["assert f() == 1"]}) + "\n")
    with pytest.raises(UserError) as err:
        TASKS.get("code")(seed=0, n_train=1, n_val=1, path=str(path))
    assert "code.jsonl: record 1 has no tests field" in str(err.value)
    assert "fields present: asserts, prompt" in str(err.value)
    with pytest.raises(UserError, match="task.params.cpu_seconds"):
        TASKS.get("code")(seed=0, n_train=1, n_val=1, path=str(path), cpu_seconds=-1)
    path.write_text(json.dumps({"prompt": "Write f.", "tests": ["assert True"], "entry_point": "not valid"}) + "\n")
    with pytest.raises(UserError, match="entry_point 'not valid'"):
        TASKS.get("code")(seed=0, n_train=1, n_val=1, path=str(path))


def test_split_is_deterministic(tmp_path):
    path = tmp_path / "many.jsonl"
    path.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"Return {i}.", "tests": [f"assert f() == {i}"]}) + "\n"
                            for i in range(20)))
    first = TASKS.get("code")(seed=5, n_train=15, n_val=5, path=str(path))
    second = TASKS.get("code")(seed=5, n_train=15, n_val=5, path=str(path))
    assert [p.id for p in first.val_problems()] == [p.id for p in second.val_problems()]
    assert not {p.id for p in first.val_problems()} & {p.id for p in first.train_problems()}
    assert len(first.train_problems()) == 15
