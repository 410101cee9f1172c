"""The sandbox (scalerl.tasks.sandbox) and the code grader: hostile programs are contained and the host is
untouched; benign programs pass and fail as they should. Every test runs twice: under bubblewrap (skipped where it
cannot run) and under the fallback. Hostile samples run with both layers, and also with the in-process audit hook
switched off (by the test, or by the sample itself through gc), to show the OS layer holds without it. The last
section is the audit's nine uncontained classes, with variants: all contained, all graded incorrect (reward -1)."""

from __future__ import annotations

import ast
import json
import os
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from scalerl.config import RewardConfig
from scalerl.tasks.base import Problem
from scalerl.tasks.code import CodeGrader, parse_tests
from scalerl.tasks.registry import TASKS
from scalerl.tasks.sandbox import SANDBOX_ENV, SandboxLimits, child_source, run_python
from scalerl.tasks.sandbox_bwrap import probe_bubblewrap

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox's OS layer is Linux-only")


@pytest.fixture(autouse=True, params=["bwrap", "fallback"])
def sandbox_mode(request, monkeypatch) -> str:
    """Each test under bubblewrap (where it runs here) and under the fallback layers."""
    if request.param == "bwrap" and probe_bubblewrap()[0] is None:
        pytest.skip(f"bubblewrap cannot run here: {probe_bubblewrap()[1]}")
    monkeypatch.setenv(SANDBOX_ENV, request.param)
    return request.param

TASKS_CODE = TASKS.get("code")
CODE_EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "tasks" / "code_tiny.jsonl"
HOSTILE = SandboxLimits(cpu_seconds=1, wall_seconds=20, memory_mb=256, max_processes=8)
QUICK = SandboxLimits(cpu_seconds=1, wall_seconds=2, memory_mb=256, max_processes=8)
# for programs that must run to their end: a margin of many times their CPU time on any machine, so that no
# verdict below depends on the machine's speed (HOSTILE and QUICK are only for programs that must be stopped)
ROOMY = SandboxLimits(cpu_seconds=20, wall_seconds=120, memory_mb=256, max_processes=8)


@pytest.fixture
def layers(sandbox_mode) -> tuple[str, ...]:
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


# ------------------------------------------------------------------------------------------------ where it lives

PACKAGE = Path(__file__).resolve().parent.parent / "scalerl"
PROBE = ("import sys, scalerl.tasks.sandbox as s\n"
         "r = s.run_python('import json; print(json.dumps([1, 2]))', s.SandboxLimits(cpu_seconds=20, wall_seconds=120))\n"
         "print(s.__file__)\nprint(r.reason)\nsys.exit(0 if r.passed and r.stdout.strip() == '[1, 2]' else 1)")


def run_from_copy(parent: Path, *, read_only: bool = False) -> None:
    """Copy the package under ``parent``, import it from there in a fresh interpreter and run a program in the
    sandbox (in this test's mode, which the environment carries)."""
    import shutil
    import subprocess

    shutil.copytree(PACKAGE, parent / "scalerl", ignore=shutil.ignore_patterns("__pycache__"))
    if read_only:  # like site-packages owned by another user: nothing of it writable to us, nor to the sandbox
        for path in [parent, *parent.rglob("*")]:
            if os.geteuid() == 0:
                os.chown(path, 65534, 65534)
            os.chmod(path, 0o555 if path.is_dir() else 0o444)
    try:
        done = subprocess.run([sys.executable, "-B", "-c", PROBE], cwd=parent, capture_output=True, text=True,
                              timeout=300, env={**os.environ, "PYTHONPATH": str(parent)})
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.splitlines()[0] == str(parent / "scalerl" / "tasks" / "sandbox.py")  # the copy ran
    finally:
        if read_only:
            for path in [parent, *parent.rglob("*")]:
                os.chmod(path, 0o755)


@pytest.mark.parametrize("where", ["tmp", "closed home", "spaces", "read-only"])
def test_the_sandbox_works_wherever_the_package_lives(tmp_path, where):
    # /tmp is replaced by an empty tmpfs inside the sandbox and a directory other users may not enter (a home
    # such as /root) is hidden: a launcher that opened the package's files by path failed in both (issue 25)
    parent = tmp_path / {"tmp": "clone", "closed home": "home/user/clone", "spaces": "my projects/a clone",
                         "read-only": "site-packages"}[where]
    parent.mkdir(parents=True)
    if where == "closed home":
        (tmp_path / "home" / "user").chmod(0o700)
    run_from_copy(parent, read_only=where == "read-only")


def test_the_sandbox_works_from_the_real_home_directory():
    home = Path.home()
    if not os.access(home, os.W_OK):
        pytest.skip(f"the home directory {home} is not writable here")
    parent = Path(tempfile.mkdtemp(prefix="scalerl-sandbox-home-", dir=home))
    try:
        run_from_copy(parent)
    finally:
        import shutil

        shutil.rmtree(parent, ignore_errors=True)


def test_the_child_program_is_one_whole_file_of_the_standard_library_only():
    # the child runs in an isolated interpreter that sees nothing of the package: what it runs is the whole file
    # (no marker cutting it in two), and the file imports no scalerl module, only the standard library
    child = PACKAGE / "tasks" / "sandbox_child.py"
    text = child.read_text(encoding="utf-8")
    assert child_source() == text
    imported = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"relative import of {node.module!r}"
            imported.add(node.module)
    top = {name.split(".")[0] for name in imported}
    assert "scalerl" not in top and top <= sys.stdlib_module_names, top - sys.stdlib_module_names
    assert {"os", "marshal", "ctypes"} <= top  # the parse saw the child's imports, function-level ones included


def test_a_sandbox_that_cannot_start_is_one_error_at_start_up(monkeypatch):
    # a code task must refuse to start rather than grade every sample -1 (issue 25)
    from scalerl.errors import UserError
    from scalerl.tasks import sandbox

    monkeypatch.setattr(sandbox, "child_source", lambda: "raise SystemExit('cannot set up')")
    sandbox._check_starts.cache_clear()
    try:
        assert "sandbox setup failed" in run_python("pass").reason
        with pytest.raises(UserError, match="the code sandbox cannot run a program here"):
            TASKS_CODE(seed=0, n_train=2, n_val=1, path=str(CODE_EXAMPLE))
    finally:
        sandbox._check_starts.cache_clear()


def test_a_sandbox_that_ends_before_reading_its_settings_is_a_setup_failure_not_a_broken_pipe(monkeypatch):
    # the host writes the settings after starting the sandbox; one that has already exited closed that pipe
    # (seen under load as BrokenPipeError out of run_python): its exit status is the verdict
    import marshal as real_marshal
    import time as real_time

    from scalerl.tasks import sandbox

    class SlowMarshal:
        loads = staticmethod(real_marshal.loads)

        @staticmethod
        def dumps(value):
            real_time.sleep(1.0)  # the sandbox below exits at once: by now its end of the pipe is closed
            return real_marshal.dumps(value)

    monkeypatch.setattr(sandbox, "child_source", lambda: "raise SystemExit('cannot set up')")
    monkeypatch.setattr(sandbox, "marshal", SlowMarshal)
    result = run_python("pass")
    assert not result.passed and "sandbox setup failed" in result.reason


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
        # refused by the hook or the uid (PermissionError), or the host's /tmp is not even there (private /tmp)
        assert not result.passed and ("PermissionError" in result.reason or "FileNotFoundError" in result.reason), (
            program, result.reason)
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


def test_layers_are_named_and_no_capability_is_left(sandbox_mode, layers):
    expected = {"bwrap", "ro_root"} if sandbox_mode == "bwrap" else {"mountns"}
    assert expected <= set(layers) and "no_caps" in layers and ("bwrap" in layers) == (sandbox_mode == "bwrap")
    status = run_python("print(open('/proc/self/status').read())", QUICK, audit_hook=False)
    assert status.passed, status.reason
    caps = {line.split(":")[0]: int(line.split()[1], 16) for line in status.stdout.splitlines() if line.startswith("Cap")}
    assert caps == {"CapInh": 0, "CapPrm": 0, "CapEff": 0, "CapBnd": 0, "CapAmb": 0}
    assert "NoNewPrivs:\t1" in status.stdout


# ------------------------------------------------------------------ the audit's nine classes, and variants

# Switches the in-process audit hook off from pure Python (its closure is reachable through gc), as the audit
# did; prints how many hooks it disarmed. What follows it meets the OS layer alone.
BYPASS_REFUSE = """
import gc
def _disarm():
    n = 0
    for obj in gc.get_objects():
        if type(obj).__name__ == 'function' and obj.__name__ == 'hook' and obj.__closure__:
            for cell in obj.__closure__:
                if getattr(cell.cell_contents, '__name__', '') == 'refuse':
                    cell.cell_contents = lambda *a: None
                    n += 1
    return n
print('DISARMED', _disarm())
"""
BYPASS_UNDER = BYPASS_REFUSE.replace("'refuse'", "'under'").replace("lambda *a: None", "lambda *a: True").replace(
    "                    n += 1", "                    n += 1\n                elif isinstance(cell.cell_contents, set):\n"
    "                    cell.cell_contents.clear()")
BYPASSES = {"hook": "", "gc-refuse": BYPASS_REFUSE, "gc-under": BYPASS_UNDER}


def escape_sample(action: str, bypass: str) -> str:
    """A solution whose ``add`` is right only if ``action`` (which raises when it is stopped) succeeded."""
    body = "\n".join("    " + line for line in action.strip().splitlines())
    return f"{bypass}\ntry:\n{body}\n    ESCAPED = True\nexcept BaseException as exc:\n    ESCAPED = False\n" \
           "    print('STOPPED', type(exc).__name__, exc)\nprint('ESCAPED', ESCAPED)\n" \
           "def add(a, b):\n    return a + b if ESCAPED else None\n"


def outside_python(path: str) -> set[str]:
    """Entries of ``path`` on the host other than the way to the interpreter (which the sandbox shows)."""
    way = {Path(sys.base_prefix).resolve().relative_to(path).parts[0]} if str(Path(sys.base_prefix).resolve()).startswith(path + "/") else set()
    return set(os.listdir(path)) - way


ESCAPES = {  # class -> variant -> action (raises when contained)
    "read /etc/shadow": {
        "open": "assert open('/etc/shadow').read()",
        "os.open": "import os\nassert os.read(os.open('/etc/shadow', os.O_RDONLY), 100)",
        "pathlib": "import pathlib\nassert pathlib.Path('/etc/shadow').read_bytes()",
    },
    "load ctypes": {
        "import": "import ctypes\nassert ctypes.CDLL(None).getpid() > 0",
        "_ctypes": "import _ctypes\nassert _ctypes.dlopen",
        "loader": "import glob, sys, importlib.machinery, importlib.util\n"
                  "path = glob.glob(sys.base_prefix + '/lib/python3*/lib-dynload/_ctypes.*so')[0]\n"
                  "spec = importlib.util.spec_from_file_location('_ctypes', path)\n"
                  "importlib.util.module_from_spec(spec)",
    },
    "run /bin/sh": {
        "subprocess": "import subprocess\nassert b'pwned' in subprocess.run(['/bin/sh', '-c', 'echo pwned'], "
                      "capture_output=True).stdout",
        "os.system": "import os\nassert os.system('echo pwned > pwned.txt') == 0 and open('pwned.txt').read()",
        "own script": "import os, subprocess\nopen('x.sh', 'w').write('#!/bin/sh\\necho pwned\\n')\n"
                      "os.chmod('x.sh', 0o755)\nassert b'pwned' in subprocess.run(['./x.sh'], capture_output=True).stdout",
        "own binary": "import os, shutil, subprocess, sys\nshutil.copy(sys.executable, 'py')\nos.chmod('py', 0o755)\n"
                      "assert b'pwned' in subprocess.run(['./py', '-c', 'print(\"pwned\")'], capture_output=True).stdout",
    },
    "list /root": {
        "listdir": "import os\nassert set(os.listdir('/root')) - {WAY}",
        "scandir": "import os\nassert {e.name for e in os.scandir('/root')} - {WAY}",
        "glob": "import glob\nassert {p[6:] for p in glob.glob('/root/*') + glob.glob('/root/.*')} - {WAY}",
    },
}


@pytest.fixture(scope="module")
def root_way() -> str:
    """The entries of /root the sandbox shows on purpose: the first step of the way to the interpreter's files (a
    Python under /root, a virtual environment in a home directory), as the items of a set literal."""
    prefixes = {str(Path(p).resolve()) for p in (sys.base_prefix, sys.prefix)}
    names = sorted({p.split("/")[2] for p in prefixes if p.startswith("/root/")})
    return ", ".join(map(repr, names)) or "''"


def add_problem() -> Problem:
    tests = parse_tests(["assert add(2, 3) == 5", "assert add(-1, 1) == 0", "assert add(10, 20) == 30"],
                        None, "hostile.jsonl", 0)
    return Problem(id="add", prompt="Write add(a, b).", answer=json.dumps(tests))


def reward(code: str) -> float:
    """The reward the trainer gives this solution (paper A.3: +1 correct, -1 otherwise)."""
    verdict = CodeGrader(HOSTILE_GRADING)(add_problem(), f"```python\n{code}```")
    return RewardConfig().correct if verdict else RewardConfig().incorrect


HOSTILE_GRADING = SandboxLimits(cpu_seconds=20, wall_seconds=120, memory_mb=256, max_processes=8)  # see ROOMY
ESCAPE_CASES = [(c, v, b) for c, variants in ESCAPES.items() for v in variants for b in ("hook", "gc-refuse")]


@pytest.mark.parametrize("klass,variant,bypass", ESCAPE_CASES, ids=[" / ".join(c) for c in ESCAPE_CASES])
def test_escapes_are_contained_with_or_without_the_audit_hook(klass, variant, bypass, root_way):
    if klass == "read /etc/shadow" and not Path("/etc/shadow").exists():
        pytest.skip("no /etc/shadow here")
    sample = escape_sample(ESCAPES[klass][variant].replace("WAY", root_way), BYPASSES[bypass])
    result = run_python("import solution", HOSTILE, files={"solution.py": sample})
    assert result.passed, result.reason
    if BYPASSES[bypass]:  # the audit's bypass works: the OS layer alone stopped the action
        assert "DISARMED 1" in result.stdout, result.stdout
    assert "ESCAPED False" in result.stdout, result.stdout
    assert "pwned" not in result.stdout and "root:" not in result.stdout
    assert reward(sample) == -1.0


@pytest.mark.parametrize("bypass", list(BYPASSES))
@pytest.mark.parametrize("place", ["/tmp", "/dev/shm", "/var/tmp"])
def test_writing_to_shared_tmp_is_contained(bypass, place):
    if not os.access(place, os.W_OK):
        pytest.skip(f"{place} is not writable here")
    target = Path(place) / f"scalerl-hostile-{uuid.uuid4().hex}"
    sample = escape_sample(f"open({str(target)!r}, 'w').write('x')\nraise RuntimeError('wrote')", BYPASSES[bypass])
    result = run_python("import solution", HOSTILE, files={"solution.py": sample})
    assert result.passed and (not BYPASSES[bypass] or "DISARMED 1" in result.stdout), result.stdout
    assert not target.exists()  # refused by the hook, or written into the sandbox's private, vanished /tmp
    assert reward(sample) == -1.0


@pytest.mark.parametrize("bypass", [BYPASS_REFUSE, BYPASS_UNDER], ids=["gc-refuse", "gc-under"])
def test_the_gc_bypass_is_real(bypass):
    # the hook refuses listing /proc; once disarmed from Python, it no longer does: the rest is the OS layer
    program = "import os\nprint(len(os.listdir('/proc')) > 0)"
    assert "listing /proc is not allowed" in run_python(program, HOSTILE).reason
    result = run_python(bypass + program, ROOMY)
    assert result.passed and "DISARMED 1" in result.stdout and "True" in result.stdout, result.stdout


def test_the_working_directory_does_not_lead_back_to_the_host(tmp_path):
    # a relative path climbing out of the working directory stays inside the sandbox's own view
    marker = f"scalerl-hostile-{uuid.uuid4().hex}"
    program = BYPASS_REFUSE + f"for up in range(1, 4):\n    try:\n        open('../' * up + {marker!r}, 'w').write('x')\n" \
        "    except OSError as exc:\n        print(exc)"
    run_python(program, HOSTILE)
    # os.walk, not glob: other processes' temporary directories come and go while we look
    assert not [root for root, _, names in os.walk(tempfile.gettempdir(), onerror=lambda _: None) if marker in names]


EQ_LIES = {
    "object": "class Liar:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
              "def add(a, b):\n    return Liar()\n",
    "int subclass": "class Liar(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
                    "def add(a, b):\n    return Liar(0)\n",
    "str subclass": "class Liar(str):\n    __eq__ = lambda self, other: True\n    __hash__ = str.__hash__\n"
                    "def add(a, b):\n    return Liar('')\n",
    "repr lies too": "class Liar:\n    __eq__ = lambda self, other: True\n    __repr__ = lambda self: 'Liar()'\n"
                     "def add(a, b):\n    return Liar()\n",
    "in a list": "class Liar:\n    __eq__ = lambda self, other: True\n"
                 "def add(a, b):\n    return [Liar()][0]\n",
    "shadowed builtins": "def add(a, b):\n    return 0\ndef isinstance(*a):\n    return True\n"
                         "def AssertionError(*a):\n    return None\n",
}

READ_TESTS = {  # a solution that finds the tests and returns what their asserts expect
    "cwd files": "import glob\nsources = [open(p).read() for p in glob.glob('*.py') + glob.glob('**/*.py', recursive=True)]",
    "other processes": "import glob, os\nsources = []\nfor p in glob.glob('/proc/[0-9]*/cwd/*.py') + glob.glob('/proc/[0-9]*/fd/*'):\n"
                       "    try:\n        sources.append(open(p).read() if os.path.isfile(p) else '')\n    except Exception:\n        pass",
    # (small files, 20 MB at most: a virtual environment under /tmp is visible read-only and holds gigabytes)
    "the whole tmp": "import os\nbudget = 20_000_000\nsources = []\nfor top in ('/tmp', '/var/tmp', '/dev/shm'):\n"
                     "    for root, _, names in os.walk(top):\n        for n in names:\n"
                     "            try:\n                size = os.path.getsize(os.path.join(root, n))\n"
                     "                if size < 1_000_000 and size < budget:\n                    budget -= size\n"
                     "                    sources.append(open(os.path.join(root, n)).read())\n"
                     "            except Exception:\n                pass",
    "the stack": "import inspect, sys\nsources = [repr(f.frame.f_globals) + repr(f.frame.f_locals) for f in inspect.stack()]\n"
                 "sources += [open(a).read() for a in sys.argv if a.endswith('.py')]",
    "gc": "import gc\nsources = [o for o in gc.get_objects() if isinstance(o, str) and 'assert' in o]",
}
READ_TESTS_TAIL = """
import re
expected = {}
for text in sources:
    for args, value in re.findall(r"add\\((-?\\d+), ?(-?\\d+)\\) == (-?\\d+)".replace(r"(-?\\d+), ?(-?\\d+)", r"(-?\\d+, ?-?\\d+)"), text):
        expected[args.replace(' ', '')] = int(value)
print('FOUND', len(expected))
def add(a, b):
    return expected.get(f'{a},{b}')
"""

TOKENS = {  # a solution that looks for the runner's completion token and prints it, then exits 0
    "stack frames": "import sys\nfound = set()\nf = sys._getframe()\nwhile f:\n"
                    "    found |= {str(v) for v in list(f.f_locals.values()) + list(f.f_globals.values()) if isinstance(v, (str, dict))}\n"
                    "    f = f.f_back",
    "gc strings": "import gc, re\nfound = {o for o in gc.get_objects() if isinstance(o, str) and re.fullmatch('[0-9a-f]{32}', o)}",
    "gc dicts": "import gc\nfound = set()\nfor o in gc.get_objects():\n    if isinstance(o, dict) and 'nonce' in o:\n        found.add(str(o['nonce']))",
}
TOKENS_TAIL = """
import os, re
for text in found:
    for token in re.findall('[0-9a-f]{32}', text):
        print('\\n__scalerl_sandbox_done__ ' + token, flush=True)
def add(a, b):
    return None
os._exit(0)
"""

CHEATS = {**{f"__eq__ always true / {k}": v for k, v in EQ_LIES.items()},
          **{f"reads the tests / {k}": v + READ_TESTS_TAIL for k, v in READ_TESTS.items()},
          **{f"token from a frame, exit 0 / {k}": v + TOKENS_TAIL for k, v in TOKENS.items()},
          "exits 0 at import / sys.exit": "import sys\nsys.exit(0)\n",
          "exits 0 at import / os._exit": "import os\nos._exit(0)\n"}


CHEAT_CASES = [(name, bypass) for name in CHEATS for bypass in ("hook", "gc-refuse")
               if bypass == "hook" or not name.startswith("__eq__")]  # a lying __eq__ needs no bypass


@pytest.mark.parametrize("name,bypass", CHEAT_CASES, ids=[" / ".join(c) for c in CHEAT_CASES])
def test_cheats_get_reward_minus_one(name, bypass):
    assert reward(BYPASSES[bypass] + CHEATS[name]) == -1.0


def test_the_tests_are_not_in_the_solutions_view():
    sample = BYPASS_REFUSE + "sources = []\n" + "\n".join(READ_TESTS.values()).replace("sources = ", "sources += ")
    sample += READ_TESTS_TAIL
    result = run_python("import solution", ROOMY, files={"solution.py": sample, "tests.py": "assert add(2, 3) == 5"})
    assert result.passed and "FOUND 1" in result.stdout, result.stdout  # the search works when the tests are there
    assert reward(sample) == -1.0  # and finds nothing when graded


def test_an_honest_solution_still_gets_reward_plus_one():
    assert reward("def add(a, b):\n    return a + b\n") == 1.0
