"""The sandbox (scalerl.tasks.sandbox): hostile programs are contained and the host is untouched; benign
programs pass and fail as they should. Each hostile sample runs with both layers, and where the machine allows
also with the OS layer alone (audit hook off), to show it holds without the in-process hook."""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from scalerl.tasks.sandbox import SandboxLimits, run_python

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox's OS layer is Linux-only")

HOSTILE = SandboxLimits(cpu_seconds=1, wall_seconds=20, memory_mb=256, max_processes=8)
QUICK = SandboxLimits(cpu_seconds=1, wall_seconds=2, memory_mb=256, max_processes=8)


@pytest.fixture(scope="module")
def layers() -> tuple[str, ...]:
    """The isolation layers this machine gives (namespaces and a uid of its own need root or user namespaces)."""
    result = run_python("pass")
    assert result.passed, result.reason
    return result.isolation


def need(layers: tuple[str, ...], *wanted: str) -> None:
    missing = [name for name in wanted if name not in layers]
    if missing:
        pytest.skip(f"this machine does not give the sandbox {', '.join(missing)}")


def processes_of(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        uids = [line.split()[1] for line in status.splitlines() if line.startswith("Uid:")]
        if uids and int(uids[0]) == uid:
            pids.append(int(entry))
    return pids


# ------------------------------------------------------------------------------------------------- benign


def test_benign_program_passes_with_its_output_and_stdin():
    result = run_python("import heapq, collections\nname = input()\nprint('hello', name[::-1], heapq.nlargest(1, [3, 9, 2]))",
                        stdin="dlrow\n")
    assert result.passed and result.reason == "passed"
    assert result.stdout == "hello world [9]\n"
    assert not result.timed_out and not result.killed and result.returncode == 0


def test_failing_program_fails_with_the_exception_as_reason():
    result = run_python("def f(x):\n    return x + 1\nassert f(1) == 3, 'f is wrong'")
    assert not result.passed and not result.killed
    assert result.reason == "uncaught exception: AssertionError: f is wrong"
    assert "main.py" in result.stderr


def test_syntax_error_fails():
    result = run_python("def broken(:\n    pass")
    assert not result.passed and "SyntaxError" in result.reason


def test_solution_module_can_be_imported_by_the_tests():
    result = run_python("from solution import double\nassert double(21) == 42", files={"solution.py": "def double(x):\n    return 2 * x\n"})
    assert result.passed, result.reason


@pytest.mark.parametrize("exit_call", ["import sys; sys.exit(0)", "import os; os._exit(0)", "exit()", "raise SystemExit"])
def test_exiting_early_does_not_pass_strict_runs(exit_call):
    # a solution that exits before its tests run must not be rewarded
    program = f"{exit_call}\nassert False, 'the tests would have failed'"
    assert not run_python(program).passed
    assert run_python(program, strict=False).passed  # a stdin/stdout program may end with sys.exit(0)


def test_nonzero_exit_status_fails_even_when_not_strict():
    result = run_python("import sys\nsys.exit(3)", strict=False)
    assert not result.passed and result.returncode == 3


def test_working_directory_is_private_temporary_and_deleted():
    result = run_python("import os, tempfile\nopen('scratch.txt', 'w').write('x')\nos.mkdir('d')\n"
                        "os.rename('scratch.txt', 'd/moved.txt')\nprint(os.getcwd())\nprint(tempfile.mkdtemp())")
    assert result.passed, result.reason
    cwd, scratch = result.stdout.split()
    assert Path(scratch).parent == Path(cwd)  # TMPDIR points into the working directory
    assert not Path(cwd).exists()


def test_bad_limits_are_user_errors():
    from scalerl.errors import UserError

    with pytest.raises(UserError, match="cpu_seconds"):
        SandboxLimits(cpu_seconds=0)
    with pytest.raises(UserError, match="wall_seconds"):
        SandboxLimits(wall_seconds=0)


# ------------------------------------------------------------------------------------------------ hostile


def test_infinite_loop_is_stopped_by_the_cpu_limit():
    result = run_python("while True:\n    pass", HOSTILE)
    assert not result.passed and result.killed and not result.timed_out
    assert result.reason == "CPU time limit (1 s) exceeded"


def test_sleeping_program_is_stopped_by_the_wall_clock():
    result = run_python("import time\ntime.sleep(60)", SandboxLimits(cpu_seconds=1, wall_seconds=1))
    assert not result.passed and result.timed_out and result.killed
    assert result.reason.startswith("wall-clock timeout")


@pytest.mark.parametrize("bomb", ["x = bytearray(8 * 1024 ** 3)", "hog = []\nwhile True:\n    hog.append(bytearray(10 ** 7))"])
def test_memory_bomb_is_stopped_by_the_address_space_limit(bomb):
    result = run_python(bomb, HOSTILE)
    assert not result.passed
    assert result.reason == "memory limit (256 MB) exceeded: MemoryError"


def test_fork_bomb_is_refused_by_the_hook():
    result = run_python("import os\nwhile True:\n    os.fork()", HOSTILE)
    assert not result.passed and "os.fork is not allowed" in result.reason


def test_subprocess_ctypes_and_system_are_refused():
    for program in ("import subprocess\nsubprocess.run(['true'])", "import ctypes", "import os\nos.system('true')",
                    "import os\nos.kill(1, 9)"):
        result = run_python(program, QUICK)
        assert not result.passed and "is not allowed" in result.reason, (program, result.reason)


FORK_BOMB = """
import os, time
while True:
    try:
        pid = os.fork()
    except OSError:
        print('EAGAIN', flush=True)
        break
    if pid == 0:
        os.setsid()  # try to leave the process group the host kills
        continue
    print('F', flush=True)
time.sleep(60)
"""


def test_fork_bomb_is_contained_by_the_os_alone(layers):
    need(layers, "pidns")
    result = run_python(FORK_BOMB, SandboxLimits(cpu_seconds=1, wall_seconds=3, max_processes=8), audit_hook=False)
    assert not result.passed and result.timed_out
    assert "EAGAIN" in result.stdout and result.stdout.count("F") >= 1  # forking worked, then hit RLIMIT_NPROC
    if result.uid is not None:  # its own uid: at most 8 processes in all; none survives (PID namespace)
        assert result.stdout.count("F") <= 7
        deadline = time.monotonic() + 10
        while processes_of(result.uid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert processes_of(result.uid) == []


@pytest.mark.parametrize("hook", [True, False])
def test_writing_outside_the_working_directory_is_refused(tmp_path, layers, hook):
    if not hook:
        need(layers, "uid")
    target, canary = tmp_path / "pwned.txt", tmp_path / "canary.txt"
    canary.write_text("keep me")
    for program in (f"open({str(target)!r}, 'w').write('x')", f"import os\nos.remove({str(canary)!r})",
                    f"import os\nos.rename({str(canary)!r}, {str(target)!r})"):
        result = run_python(program, QUICK, audit_hook=hook)
        assert not result.passed and "PermissionError" in result.reason, (program, result.reason)
    assert not target.exists()
    assert canary.read_text() == "keep me"


def test_writing_into_world_writable_tmp_is_refused_by_the_hook():
    target = Path(tempfile.gettempdir()) / f"scalerl-sandbox-test-{uuid.uuid4().hex}"
    result = run_python(f"open({str(target)!r}, 'w').write('x')", QUICK)
    assert not result.passed and "writing" in result.reason
    assert not target.exists()


def test_reading_host_files_is_refused_by_the_hook(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    result = run_python(f"print(open({str(secret)!r}).read())", QUICK)
    assert not result.passed and "top secret" not in result.stdout


@pytest.mark.parametrize("hook", [True, False])
def test_no_network_even_to_localhost(layers, hook):
    if not hook:
        need(layers, "netns")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        program = f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=1)\ns.sendall(b'leak')"
        result = run_python(program, QUICK, audit_hook=hook)
        assert not result.passed
        server.settimeout(0.2)
        with pytest.raises(socket.timeout):
            server.accept()


@pytest.mark.parametrize("hook", [True, False])
def test_parent_environment_secrets_are_not_visible(monkeypatch, layers, hook):
    if not hook:
        need(layers, "uid")
    monkeypatch.setenv("SCALERL_FAKE_SECRET", "hunter2-do-not-leak")
    program = (
        "import os\nprint(dict(os.environ))\n"
        f"for path in ('/proc/{os.getpid()}/environ', '/proc/{os.getppid()}/environ'):\n"
        "    try:\n        print(open(path, 'rb').read())\n    except OSError as exc:\n        print('refused', exc)\n"
    )
    result = run_python(program, QUICK, audit_hook=hook)
    assert result.passed, result.reason
    assert "hunter2" not in result.stdout + result.stderr
    assert result.stdout.count("refused") == 2
