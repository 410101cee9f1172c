"""Run untrusted Python (model-written code and its unit tests, paper App. A.3) in a contained child process.

Threat model. The code comes from a policy being trained with RL, which exploits whatever the grader lets it get
away with, and may be broken in every way (infinite loops, memory and fork bombs, writes everywhere, attempts to
read secrets or the tests). The sandbox keeps the *host* intact on Linux; the grader (``scalerl.tasks.code``)
keeps the *verdict* honest by running the tests in a second sandbox. Layers, none of which depends on Python:

  * bubblewrap (``bwrap``), when a probe run succeeds (``SCALERL_SANDBOX``: auto | bwrap | fallback): a new
    root holding only /usr and the interpreter's files, read-only; the working directory is the
    only writable place; empty private /tmp; fresh /proc and /dev; new PID, network, IPC and UTS namespaces.
  * Fallback without it: new mount, PID and network namespaces (as root, or inside a user namespace); an empty
    private tmpfs over /tmp, /var/tmp, /dev/shm and over directories other users may not enter on the way to
    the interpreter (such as /root), the interpreter's files bound back read-only.
  * In both, with the launcher's capabilities in its mount namespace: the program directories (/usr/bin...)
    hidden, ``/dev/null`` over the ``_ctypes`` extension, and a ``noexec`` working directory: no shell, no
    program the code writes, no ctypes. Then, as root, a fresh uid (``UID_BASE`` + the launcher's host pid)
    so that file permissions hold and RLIMIT_NPROC binds; every capability dropped (the bounding set
    emptied); PR_SET_NO_NEW_PRIVS; PR_SET_PDEATHSIG.
  * The code's process is a fresh interpreter exec'd after the privileges were dropped: it never loaded ctypes
    (the launcher did, to make these calls) and holds none of the launcher's state.
  * Limits: CPU time (RLIMIT_CPU, whole seconds: SIGXCPU, then SIGKILL a second later), address space, file
    size (stdout/stderr included), open files, processes + threads, no core dumps; a wall-clock timeout after
    which the host SIGKILLs the process tree (bubblewrap dies with its parent, the PID namespace with it).
  * Environment: empty (``HOME``/``TMPDIR`` are the working directory, a fresh temporary directory deleted
    afterwards with everything in it).

Last and weakest, an in-process audit hook (``sys.addaudithook``, PEP 578) refuses process creation and
signals, sockets, ctypes, writes outside the working directory, and reads or listings outside it and the
standard library. **It is not a security boundary**: Python code reaches its closure through ``gc`` and
switches it off (tests/test_sandbox.py does). It turns most hostile actions into a clean ``PermissionError``;
the layers above are what hold.

Not contained: kernel exploits; side channels; CPU contention (limits are per process); without root and
without user namespaces, only the rlimits, the timeout and the hook; unprivileged bubblewrap leaves ctypes
loadable (no capability to mask it); no seccomp filter. For untrusted code at scale, also run the trainer
itself in a VM or a gVisor/Firecracker container.

The verdict of ``run_python`` (``strict``, the default): ``passed`` means the program ran to its end with no
uncaught exception (``SystemExit`` included) and the runner then printed a per-run random token. The token is
in the program's own process, so a program that grades itself can be fooled by itself; the code grader never
relies on it for a solution: the tests run in another sandbox (see ``scalerl.tasks.code``).

Three modules, the host side here:

  * ``sandbox_child``: the child program, the whole file run once per sandboxed run as
    ``python -I -B -u [-S] -c SOURCE CFG_FD STATUS_FD`` (namespaces, mounts, privilege drop, limits, audit hook,
    the worker that runs the code); standard library only, read here by ``child_source``.
  * ``sandbox_bwrap``: the bubblewrap launcher (the ``SCALERL_SANDBOX`` choice, the probe, the command line).
  * this module: the API (``run_python``, ``SandboxLimits``, ``SandboxResult``, ``check_sandbox_starts``,
    ``describe_isolation``), starting the child, waiting for it or killing it, and reading its verdict.
"""

from __future__ import annotations

import marshal
import math
import os
import secrets
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping

from scalerl.errors import UserError
from scalerl.tasks.sandbox_bwrap import (
    BWRAP_LAYERS, SANDBOX_ENV, bind_roots, bubblewrap, bwrap_command, describe_isolation, read_roots, sandbox_choice,
)
from scalerl.tasks.sandbox_child import CPU_EXIT, MARKER, SETUP_FAILED, SETUP_FAILED_REASON

__all__ = ["SANDBOX_ENV", "SandboxLimits", "SandboxResult", "check_sandbox_starts", "child_source",
           "describe_isolation", "run_python"]

UID_BASE = 1_000_000  # sandbox uids are UID_BASE + the launcher's pid: unique among live sandboxes
LAUNCHER_KILLED = "sandbox launcher killed"  # how a result's reason starts when the launcher was killed from outside
CHILD = Path(__file__).with_name("sandbox_child.py")


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed run (per process; see the module docstring)."""

    cpu_seconds: float = 5.0
    wall_seconds: float | None = None  # default: 2 x cpu_seconds + 1
    memory_mb: int = 512  # address space (RLIMIT_AS); Python itself needs ~30 MB
    file_size_mb: int = 16  # largest file the code may write, its stdout and stderr included
    max_processes: int = 16  # processes + threads the sandbox uid may hold (RLIMIT_NPROC)
    max_open_files: int = 64
    output_bytes: int = 1_000_000  # stdout / stderr kept in the result (the tail)
    site_packages: bool = False  # let the code import installed packages (numpy...), not just the stdlib

    def __post_init__(self) -> None:
        positive = {"cpu_seconds": self.cpu_seconds, "memory_mb": self.memory_mb, "file_size_mb": self.file_size_mb,
                    "max_processes": self.max_processes, "max_open_files": self.max_open_files,
                    "output_bytes": self.output_bytes, "wall_seconds": self.wall_seconds}
        for name, value in positive.items():
            if value is not None and value <= 0:
                raise UserError(f"sandbox limit {name} must be positive, got {value}")

    @property
    def wall(self) -> float:
        return self.wall_seconds if self.wall_seconds is not None else 2 * self.cpu_seconds + 1


@dataclass(frozen=True)
class SandboxResult:
    passed: bool  # ran to its end without an uncaught exception (not strict: exited with status 0)
    timed_out: bool  # the wall-clock limit ran out and the host killed it
    killed: bool  # ended by a signal: timeout, CPU limit, or a crash
    reason: str  # one line: "passed", or why not
    returncode: int | None  # the code's exit status (negative: killed by that signal); None if unknown
    stdout: str  # up to limits.output_bytes, the tail if longer
    stderr: str
    stdout_truncated: bool
    wall_s: float
    cpu_s: float | None
    isolation: tuple[str, ...]  # the layers that were in force, e.g. ("netns", "pidns", "uid", ...)
    uid: int | None  # the uid the code ran under, when the sandbox switched to its own

    @property
    def sandbox_fault(self) -> str | None:
        """Why the sandbox itself gave no verdict on the code: ``"sandbox"`` (it could not be set up) or
        ``"crash"`` (its launcher was killed from outside); None when the result is the code's own."""
        if self.reason.startswith(SETUP_FAILED_REASON):
            return "sandbox"
        return "crash" if self.reason.startswith(LAUNCHER_KILLED) else None


def run_python(
    source: str,
    limits: SandboxLimits | None = None,
    *,
    files: Mapping[str, str] | None = None,
    stdin: str | None = None,
    strict: bool = True,
    audit_hook: bool = True,
    os_isolation: bool = True,
    pass_fds: tuple[int, ...] = (),
) -> SandboxResult:
    """Run ``source`` as ``__main__`` in a fresh sandbox; ``files`` are written next to it first (``solution.py``
    can then be imported); ``stdin`` is its standard input (empty by default).

    ``strict``: passing needs the program to run to its end (for a program followed by its tests); otherwise
    any exit status 0 passes, ``sys.exit(0)`` included (for a stdin/stdout program). ``audit_hook`` and
    ``os_isolation`` switch the two layers (both on by default; tests turn one off to see the other hold).
    ``pass_fds``: descriptors (pipe ends) the program gets, their numbers in ``sys.argv[1:]``; they are handed
    over: closed in this process once the sandbox has started."""
    limits = limits or SandboxLimits()
    try:
        bwrap = bubblewrap() if os_isolation else None
        host_dir = Path(tempfile.mkdtemp(prefix="scalerl-sandbox-"))
    except BaseException:
        _close_all(pass_fds)
        raise
    try:
        os.chmod(host_dir, 0o711)  # the sandbox uid may pass through to work/, not list or open host files
        work = host_dir / "work"
        work.mkdir(mode=0o700)
        for name, text in {**(files or {}), "main.py": source}.items():
            target = (work / name).resolve()
            if work.resolve() not in target.parents:
                raise ValueError(f"sandbox file name {name!r} leaves the working directory")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        (host_dir / "stdin").write_text(stdin or "", encoding="utf-8")
        readable = read_roots(limits.site_packages)
        config = {
            "work": str(work.resolve()), "audit_hook": audit_hook, "strict": strict,
            "nonce": secrets.token_hex(16) if strict else "",  # only a strict run prints it at its end
            "os_isolation": os_isolation, "read_roots": readable, "cpu": max(1, math.ceil(limits.cpu_seconds)),
            "memory": limits.memory_mb << 20, "fsize": limits.file_size_mb << 20, "fds": list(pass_fds),
            "nproc": limits.max_processes, "nofile": limits.max_open_files, "bwrap": BWRAP_LAYERS if bwrap else [],
            "site_packages": limits.site_packages, "bind_roots": bind_roots(readable),
            "child_source": child_source(),
        }
        prefix = bwrap_command(bwrap, config["work"], readable) if bwrap else []
    except BaseException:
        _close_all(pass_fds)
        _remove_tree(host_dir)
        raise
    try:
        return _launch(host_dir, work, config, limits, prefix, pass_fds)
    finally:
        _remove_tree(host_dir)


def _close_all(fds: tuple[int, ...]) -> None:
    for fd in fds:
        os.close(fd)


def _launch(host_dir: Path, work: Path, config: dict[str, Any], limits: SandboxLimits, prefix: list[str],
            pass_fds: tuple[int, ...]) -> SandboxResult:
    cfg_r, cfg_w = os.pipe()
    status_r, status_w = os.pipe()
    command = [*prefix, sys.executable, "-I", "-B", "-u", *([] if limits.site_packages else ["-S"])]
    command += ["-c", child_source(), str(cfg_r), str(status_w)]
    started = time.monotonic()
    try:
        try:
            with open(host_dir / "stdin", "rb") as fin, open(host_dir / "stdout", "wb") as fout, \
                    open(host_dir / "stderr", "wb") as ferr:
                proc = subprocess.Popen(
                    command, stdin=fin, stdout=fout, stderr=ferr, cwd=work, pass_fds=(cfg_r, status_w, *pass_fds),
                    env={"HOME": str(work), "TMPDIR": str(work)}, start_new_session=True,
                )
        finally:
            _close_all(pass_fds)  # the sandbox holds them now: its end of file is the other side's
        os.close(cfg_r)
        os.close(status_w)
        cfg_r = status_w = -1
        # the sandbox uid (used when we are root): unique among live sandboxes, as the launcher's host pid is
        config["uid"] = UID_BASE + proc.pid
        try:
            with os.fdopen(cfg_w, "wb") as fh:
                cfg_w = -1
                fh.write(marshal.dumps(config))
        except BrokenPipeError:
            pass  # the sandbox ended before reading its settings (it could not start): its exit status tells
        timed_out = _wait_then_kill_group(proc, limits.wall)
        wall = time.monotonic() - started
        status = _read_status(status_r)
    finally:
        for fd in (cfg_r, cfg_w, status_w, status_r):
            if fd >= 0:
                os.close(fd)
    stdout, truncated = _tail(host_dir / "stdout", limits.output_bytes)
    stderr, _ = _tail(host_dir / "stderr", limits.output_bytes)
    token = MARKER + config["nonce"]
    completed = token in stdout
    stdout = stdout.replace("\n" + token + "\n", "").replace(token, "")
    completed = completed or not config["strict"]
    return _verdict(status, proc.returncode, timed_out, completed, stdout, stderr, truncated, wall, limits)


def _wait_then_kill_group(proc: subprocess.Popen[bytes], wall: float) -> bool:
    """Wait up to ``wall`` seconds for the launcher, then SIGKILL its whole process group and reap it.

    The group is killed *before* the launcher is reaped (a pidfd tells when it has exited), so the group id
    cannot have been reused by an unrelated process in between."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pidfd = -1
    if pidfd >= 0:
        try:
            timed_out = not select.select([pidfd], [], [], wall)[0]
        finally:
            os.close(pidfd)
    else:  # no pidfd (old kernel, not Linux): reap first, then clean up the group (a small reuse race)
        try:
            proc.wait(wall)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    return timed_out


def _read_status(fd: int) -> dict[str, Any] | None:
    os.set_blocking(fd, False)
    chunks = []
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    except BlockingIOError:
        pass
    try:
        return marshal.loads(b"".join(chunks))
    except (EOFError, ValueError, TypeError):
        return None


def _tail(path: Path, limit: int) -> tuple[str, bool]:
    size = path.stat().st_size
    with open(path, "rb") as fh:
        fh.seek(max(0, size - limit))
        data = fh.read()
    return data.decode("utf-8", errors="replace"), size > limit


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _verdict(
    status: dict[str, Any] | None, launcher_rc: int, timed_out: bool, completed: bool, stdout: str, stderr: str,
    truncated: bool, wall: float, limits: SandboxLimits,
) -> SandboxResult:
    code = status.get("exit") if status else None
    cpu = status.get("cpu") if status else None
    killed = timed_out or (code is not None and (code < 0 or code == CPU_EXIT))
    if timed_out:
        reason = f"wall-clock timeout after {limits.wall:g} s"
    elif status is None and launcher_rc < 0:  # killed from outside (the code cannot reach its launcher)
        reason = f"{LAUNCHER_KILLED} by signal {_signal_name(-launcher_rc)} before it reported; no verdict"
    elif status is None or (code == SETUP_FAILED and status.get("setup_failed")):
        # only the launcher's word counts (its worker failed before the exec); the code exiting 125 after
        # printing the same line is the code's own failure, a verdict
        reason = f"{SETUP_FAILED_REASON} (launcher exit status {launcher_rc}): {_last_line(stderr)}"
    elif code == 0 and completed:
        reason = "passed"
    elif code == 0:
        reason = "exited before the end of the program (exit status 0 without the runner's completion token)"
    elif code == CPU_EXIT or code == -signal.SIGXCPU or (code == -signal.SIGKILL and (cpu or 0) >= limits.cpu_seconds):
        reason = f"CPU time limit ({limits.cpu_seconds:g} s) exceeded"
    elif code < 0:
        reason = f"killed by signal {_signal_name(-code)}"
    elif "MemoryError" in _last_line(stderr):
        reason = f"memory limit ({limits.memory_mb} MB) exceeded: MemoryError"
    elif code == 1 and _last_line(stderr):
        reason = f"uncaught exception: {_last_line(stderr)}"
    else:
        reason = f"exited with status {code}"
    return SandboxResult(
        passed=reason == "passed", timed_out=timed_out, killed=killed, reason=reason, returncode=code,
        stdout=stdout, stderr=stderr, stdout_truncated=truncated, wall_s=wall, cpu_s=cpu,
        isolation=tuple(status.get("layers", ())) if status else (), uid=status.get("uid") if status else None,
    )


def _signal_name(number: int) -> str | int:
    return signal.Signals(number).name if number in signal.valid_signals() else number


def _remove_tree(path: Path) -> None:
    """Delete the sandbox directory even where the code took permissions away (it cannot when it ran as
    another uid; it can when it ran as ours)."""

    def make_writable(func: Callable[..., Any], name: str, _exc: Any) -> None:
        parent = os.path.dirname(name)
        for target in (parent, name):
            try:
                os.chmod(target, stat.S_IRWXU)
            except OSError:
                pass
        func(name)

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=make_writable)
    else:
        shutil.rmtree(path, onerror=make_writable)


@lru_cache(maxsize=1)
def child_source() -> str:
    """The child program (``sandbox_child.py``, the whole file): run as ``python -c SOURCE`` and handed on to the
    worker through the config pipe. Read here, on the host, once: the child never opens a file of the package,
    so the sandbox works wherever the package lives (a home directory or /tmp that the sandbox hides, a path with
    spaces, a read-only install)."""
    return CHILD.read_text(encoding="utf-8")


def check_sandbox_starts() -> None:
    """Raise a :class:`UserError` (one line, exit 2 at start-up) when the sandbox cannot run a program here at
    all, so that a code task fails before training instead of grading every sample as a failure."""
    _check_starts(sandbox_choice())


@lru_cache(maxsize=4)
def _check_starts(choice: str) -> None:
    result = run_python("pass", SandboxLimits(cpu_seconds=10, wall_seconds=60))
    if not result.passed:
        raise UserError(f"the code sandbox cannot run a program here ({result.reason}); "
                        f"try {SANDBOX_ENV}=fallback, or install the Debian package bubblewrap")
