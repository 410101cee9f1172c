"""Code tasks: test formats, code extraction after the thinking, grading in the sandbox (App. A.3):
correct iff every test passes; failures, timeouts and crashes are incorrect."""

from __future__ import annotations

import glob
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from scalerl.errors import UserError
from scalerl.tasks.answers import extract_code
from scalerl.tasks.code import check_solution, parse_tests
from scalerl.tasks.grading import grade
from scalerl.tasks.registry import TASKS
from scalerl.tasks.sandbox import SandboxLimits
from tests.test_pipeline import _children

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox's OS layer is Linux-only")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "tasks"
LIMITS = SandboxLimits(cpu_seconds=10, wall_seconds=60, memory_mb=256)  # margin: no verdict depends on speed

SOLUTIONS = {
    "add": "def add(a, b):\n    return a + b\n",
    "is-palindrome": "def is_palindrome(s):\n    return s == s[::-1]\n",
    "sum-lines": "n = int(input())\nprint(sum(int(input()) for _ in range(n)))\n",
    "reverse-words": "print(' '.join(input().split()[::-1]))\n",
    "fib": "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
}


@pytest.fixture(scope="module")
def task():
    return TASKS.get("code")(seed=0, n_train=10, n_val=1, path=str(EXAMPLES / "code_tiny.jsonl"), cpu_seconds=3)


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


@pytest.mark.parametrize("value", [None, True, 0, -7, 2**100, 1.5, -0.0, float("inf"), float("-inf"), 1 + 2j, "a'\"\n",
                                   b"\x00\xff", [], (), (1,), {}, set(), frozenset(), {1, 2}, frozenset({"x"}),
                                   {"k": [1, (2, {3: None})], (1, 2): {4.5}}])
def test_wire_round_trips_plain_values(value):
    from scalerl.tasks.code_wire import decode, encode

    back = decode(encode(value))
    assert back == value and type(back) is type(value)
    assert repr(back) == repr(value)


def test_wire_refuses_what_is_not_plain_data():
    import math

    from scalerl.tasks.code_wire import decode, encode

    class Liar:
        def __eq__(self, other):
            return True

    class Int(int):
        pass

    for value in (Liar(), Int(3), [Int(3)], {"k": Liar()}, print, math, object, [[[]]] * 0 or None.__class__):
        with pytest.raises(TypeError):
            encode(value)
    assert math.isnan(decode(encode(float("nan"))))
    nested = []
    for _ in range(300):
        nested = [nested]
    with pytest.raises(TypeError, match="nested"):
        encode(nested)
    for text in ("__import__('os').system('true')", "Liar()", "x", "[1, f()]", "float('1e400x')", "lambda: 1", "1 + 2"):
        with pytest.raises((ValueError, SyntaxError)):
            decode(text)


def script(tests: list[str] | str, entry_point: str | None = None) -> dict:
    return parse_tests(tests, entry_point, "t.jsonl", 0)


def test_results_cross_as_plain_values_and_exceptions_as_builtins():
    code = ("import math, collections\nLIMIT = 10\n_cache = {'a': (1, 2)}\n"
            "def f(x):\n    return (x, [x / 2], {'s': {x}}, None, float('nan'))\n"
            "def g(x):\n    if x < 0:\n        raise ValueError('negative')\n    return math.sqrt(x)\n"
            "def h():\n    raise KeyError('k')\n")
    tests = script(["r = f(3)", "assert r[:4] == (3, [1.5], {'s': {3}}, None) and math.isnan(r[4])",
                    "assert g(9) == 3.0 and LIMIT == 10 and _cache == {'a': (1, 2)}",
                    "try:\n    g(-1)\nexcept ValueError as e:\n    assert 'negative' in str(e)\nelse:\n    assert False",
                    "try:\n    h()\nexcept KeyError:\n    pass\nelse:\n    assert False",
                    "assert isinstance(collections.Counter('aab'), dict)"])
    result = check_solution(code, tests, LIMITS)
    assert result.passed, (result.reason, result.stderr[-500:])
    bad = check_solution(code.replace("x / 2", "x // 2"), tests, LIMITS)
    assert not bad.passed and "AssertionError" in bad.reason


def test_humaneval_check_and_fn_name_calls_go_through_the_proxy():
    check = script("def check(candidate):\n    assert candidate('aba') is True\n    assert candidate('ab') is False\n",
                   "is_palindrome")
    assert check_solution("def is_palindrome(s):\n    return s == s[::-1]\n", check, LIMITS).passed
    assert not check_solution("def is_palindrome(s):\n    return 1 if s == s[::-1] else 0\n", check, LIMITS).passed
    calls = script({"fn_name": "fib", "inputs": [[0], [10]], "outputs": [0, 55]})
    assert check_solution(SOLUTIONS["fib"], calls, LIMITS).passed


def test_lying_results_and_shadowed_builtins_fail():
    tests = script(["assert add(1, 2) == 3", "assert abs(add(1, 2) - 3) < 1e-9", "assert isinstance(add(1, 2), int)"])
    assert check_solution("def add(a, b):\n    return a + b\n", tests, LIMITS).passed
    liar = "class T:\n    __eq__ = lambda s, o: True\n    __sub__ = lambda s, o: 0\ndef add(a, b):\n    return T()\n"
    assert "not plain data" in check_solution(liar, tests, LIMITS).reason
    shadow = "def add(a, b):\n    return 0\ndef abs(x):\n    return 0\ndef isinstance(*a):\n    return True\n"
    assert not check_solution(shadow, script(["assert abs(add(1, 2) - 3) < 1e-9"]), LIMITS).passed


def test_the_solution_never_holds_the_tests_or_a_token():
    # the tests' text and the runner's token are in the other sandbox: a solution searching its own memory,
    # files and frames finds neither, and exiting 0 from inside a call is a failure
    code = ("import gc, os, re\n"
            "def strings():\n    seen = set()\n    for o in gc.get_objects():\n"
            "        seen.update(r for r in gc.get_referents(o) if isinstance(r, str))\n"
            "        if isinstance(o, dict):\n            seen.update(str(v) for v in o.values())\n    return seen\n"
            "def probe():\n    key, seen = 'SECRET_' + 'EXPECTED', strings()\n"
            "    files = ' '.join(open(p).read() for p in os.listdir('.') if os.path.isfile(p))\n"
            "    return [sum(key in s for s in seen), key in files, sum(bool(re.fullmatch('[0-9a-f]{32}', s)) for s in seen)]\n"
            "def leave():\n    os._exit(0)\n")
    result = check_solution(code, script(["assert probe() == [0, False, 0], probe()  # SECRET_EXPECTED"]), LIMITS)
    assert result.passed, result.reason
    assert not check_solution(code, script(["leave()"]), LIMITS).passed


def _kill_the_sandbox_that_started(stop: threading.Event) -> None:
    """SIGKILL the launcher (this process's child) of the sandbox whose program wrote ``started`` in its
    working directory: the sandbox dies mid-batch, from outside, as under the kernel's OOM killer."""
    while not stop.is_set():
        for marker in glob.glob(os.path.join(tempfile.gettempdir(), "scalerl-sandbox-*", "work", "started")):
            for pid in _children(os.getpid()):
                try:
                    if os.readlink(f"/proc/{pid}/cwd") == os.path.dirname(marker):
                        os.kill(pid, signal.SIGKILL)
                        return
                except OSError:
                    continue
        time.sleep(0.02)


def test_a_sandbox_killed_mid_batch_fails_that_sample_with_a_reason_and_the_batch_goes_on(task):
    by_id = problems(task)
    waits = "open('started', 'w').close()\nimport time\ntime.sleep(60)\n"  # killed long before its wall limit
    batch = [(by_id["add"], fenced(SOLUTIONS["add"])), (by_id["sum-lines"], fenced(waits)),
             (by_id["sum-lines"], fenced(SOLUTIONS["sum-lines"]))]
    stop = threading.Event()
    killer = threading.Thread(target=_kill_the_sandbox_that_started, args=(stop,), daemon=True)
    killer.start()
    try:
        grades = [grade(task, p, text) for p, text in batch]
    finally:
        stop.set()
        killer.join(timeout=5)
    assert [g.correct for g in grades] == [True, False, True]
    assert grades[0].failure is None and grades[2].failure is None
    assert grades[1].failure is not None and grades[1].failure.startswith("crash: sandbox launcher killed by signal SIGKILL")


def test_the_program_failing_is_a_verdict_not_a_grader_failure(task):
    by_id = problems(task)
    for code in ("raise SystemExit(3)\n", "x = 'a' * (10 ** 10)\n"):  # its exit, its memory limit
        g = grade(task, by_id["sum-lines"], fenced(code))
        assert (g.correct, g.failure) == (False, None), code


def test_a_missing_interpreter_is_a_failed_sample_never_a_pass(task, monkeypatch):
    by_id = problems(task)
    monkeypatch.setattr(sys, "executable", "/nonexistent/python3")
    g = grade(task, by_id["add"], fenced(SOLUTIONS["add"]))
    assert (g.correct, g.failure) == (False, "no_interpreter: the sandbox's interpreter /nonexistent/python3 is missing")
