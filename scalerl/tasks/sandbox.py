"""Run untrusted Python (model-written code and its unit tests, paper §4 / A.3) in a contained child process.

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

Layout: the first half of this file is the child's launcher program, run once per sandboxed run as
``python -I -S -c CHILD_SOURCE CFG_FD STATUS_FD`` (under bubblewrap when it is used); it imports only a few cheap
standard modules, so start-up stays short, and hands the same child half to the worker. The host-side API
(``run_python``, ``SandboxLimits``, ``SandboxResult``, ``describe_isolation``) follows its entry point.
"""

from __future__ import annotations

import marshal
import os
import signal
import sys

UID_BASE = 1_000_000  # sandbox uids are UID_BASE + the launcher's pid: unique among live sandboxes
MARKER = "__scalerl_sandbox_done__ "
SETUP_FAILED = 125  # the worker's exit status when the sandbox could not be set up (not the code's fault)
SETUP_FAILED_REASON = "sandbox setup failed"  # how a result's reason starts then
LAUNCHER_KILLED = "sandbox launcher killed"  # ... and when the launcher was killed from outside
CPU_EXIT = 128 + signal.SIGXCPU  # the worker's exit status when its CPU time ran out

# ============================================================================ child side
# This part runs in the launcher process `python -I -S -c CHILD_SOURCE CFG_FD STATUS_FD`, started by the host
# in a new session. The launcher sets up namespaces, forks the worker, waits for it and reports its exit status
# and CPU time on STATUS_FD. The worker drops privileges, applies the limits, installs the audit hook and runs
# main.py.

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
PR_SET_PDEATHSIG, PR_SET_KEEPCAPS, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 8, 24, 38
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm")  # world-writable places, replaced by empty private ones
PROGRAM_DIRS = ("/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin", "/usr/libexec", "/usr/games", "/bin",
                "/sbin")  # hidden: no shell, no other program to run
HOST_SIDE = "# " + "=" * 76 + " host side"


def _libc() -> Any:
    """The C library, for the Linux calls the os module lacks (unshare, mount, prctl, capset); None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # the worker drops it from sys.modules; the audit hook refuses importing it again

    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        import ctypes

        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _enter_namespaces(libc: Any, layers: list[str], cfg: dict[str, Any]) -> None:
    """The fallback when bubblewrap is absent: new mount, network and PID namespaces, directly as root, else
    inside a new user namespace; then the private mounts. Best effort: without namespaces, no layer."""
    uid, gid = os.geteuid(), os.getegid()
    if uid == 0 and libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID) == 0:
        layers += ["mountns", "netns", "pidns"]
    elif libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID) == 0:
        try:
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{name}", "w") as fh:
                    fh.write(text)
        except OSError:
            pass
        layers += ["userns", "mountns", "netns", "pidns"]
    else:
        return
    try:
        _private_mounts(libc, cfg)
        layers.append("private_tmp")
    except OSError as exc:
        os.write(2, f"sandbox: private mounts not available ({exc}); /tmp stays shared\n".encode())


def _private_mounts(libc: Any, cfg: dict[str, Any]) -> None:
    """In the launcher's new mount namespace: an empty private tmpfs over /tmp, /var/tmp and /dev/shm, and over
    every directory that other users may not enter on the way to the interpreter's files (such as /root for a
    Python under /root), with the working directory and those files bound back, read-only. So the code needs
    no capability to import the standard library, and sees neither the host's /tmp nor /root."""
    work, roots = cfg["work"], cfg["bind_roots"]
    hidden = sorted({_closed_ancestor(root) for root in roots} - {None})
    back = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in [work, *roots]}
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    for target in [*[d for d in PRIVATE_DIRS if os.path.isdir(d)], *hidden]:
        mode = "1777" if target in PRIVATE_DIRS else "0755"
        _mount(libc, "tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode},size=1m")
    for path, fd in back.items():
        try:
            if os.path.samestat(os.stat(path), os.fstat(fd)):
                os.close(fd)
                continue  # not under a new tmpfs: still in place
        except OSError:
            pass
        os.makedirs(path, mode=0o755, exist_ok=True)
        _mount(libc, f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        if path != work:
            _mount(libc, None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        os.close(fd)


def _closed_ancestor(path: str) -> str | None:
    """The topmost directory on the way to ``path`` that other users may not enter (None if there is none)."""
    parts = path.strip("/").split("/")
    for i in range(1, len(parts) + 1):
        ancestor = "/" + "/".join(parts[:i])
        if not os.stat(ancestor).st_mode & 0o001:
            return ancestor
    return None


def _drop_privileges(libc: Any, uid: int | None) -> None:
    """Empty the capability bounding set (no program run later can gain a capability back), switch to ``uid``
    (and its gid, no supplementary groups) when given, then empty the effective, permitted and inheritable
    sets: the code runs without any capability."""
    import ctypes

    try:
        with open("/proc/sys/kernel/cap_last_cap") as fh:
            last = int(fh.read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # fails (EPERM) only without CAP_SETPCAP: nothing to drop
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        _check(libc.prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0), "prctl(KEEPCAPS)")
        os.setresuid(uid, uid, uid)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    _check(libc.capset(ctypes.byref(Header(_LINUX_CAPABILITY_VERSION_3, 0)), (Data * 2)()), "capset")


def _tasks_of_uid(uid: int) -> int:
    """Processes + threads owned by ``uid`` (what RLIMIT_NPROC counts)."""
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as fh:
                fields = dict(line.split(":", 1) for line in fh if ":" in line)
        except OSError:
            continue
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            count += int(fields.get("Threads", "1"))
    return count


def _apply_limits(cfg: dict[str, Any], nproc: int | None) -> None:
    import resource

    cpu = cfg["cpu"]
    for limit, value in (
        (resource.RLIMIT_AS, cfg["memory"]), (resource.RLIMIT_FSIZE, cfg["fsize"]), (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NOFILE, cfg["nofile"]), (resource.RLIMIT_NPROC, nproc),
    ):
        if value is not None:
            resource.setrlimit(limit, (value, value))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))


def _make_audit_hook(work: str, read_roots: list[str]) -> Callable[[str, tuple[Any, ...]], None]:
    """The in-process policy (see the module docstring). Paths are resolved with ``realpath`` against the
    current directory (or the directory of a ``dir_fd``)."""
    import posixpath

    realpath, join, fsdecode = posixpath.realpath, posixpath.join, os.fsdecode
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    readable_files = {"/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"}
    refused = {
        "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system", "os.startfile",
        "subprocess.Popen", "os.kill", "os.killpg", "signal.pthread_kill", "resource.setrlimit", "resource.prlimit",
        "os.chroot", "os.setns", "os.unshare",
    }
    refused_prefixes = ("socket.", "ctypes.", "syslog.", "_ctypes.")
    refused_imports = {"ctypes", "_ctypes", "_posixsubprocess", "_xxsubinterpreters", "_xxinterpchannels",
                       "_testcapi", "_testinternalcapi"}
    # event -> positions of (path, dir_fd) pairs that the event may change
    changes = {
        "os.remove": ((0, 1),), "os.rmdir": ((0, 1),), "os.mkdir": ((0, 2),), "os.rename": ((0, 2), (1, 3)),
        "os.link": ((1, 3),), "os.symlink": ((1, 2),), "os.chmod": ((0, 2),), "os.chown": ((0, 3),),
        "os.truncate": ((0, None),), "os.utime": ((0, 3),), "os.setxattr": ((0, None),),
        "os.removexattr": ((0, None),), "os.chflags": ((0, None),), "os.lchflags": ((0, None),),
        "shutil.rmtree": ((0, 1),), "shutil.copyfile": ((1, None),), "shutil.copytree": ((1, None),),
        "shutil.move": ((0, None), (1, None)),
    }

    def resolve(path: Any, dir_fd: Any = None) -> str | None:
        if isinstance(path, int):
            return None  # an already-open descriptor: it was checked when it was opened
        path = fsdecode(path)
        if isinstance(dir_fd, int) and dir_fd >= 0 and not path.startswith("/"):
            path = join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
        return realpath(path)

    def under(path: str, roots: list[str]) -> bool:
        return any(path == root or path.startswith(root + "/") for root in roots)

    def refuse(*what: Any) -> None:
        raise PermissionError(f"sandbox: {' '.join(map(str, what))} is not allowed")

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path, mode, flags = args
            resolved = resolve(path)
            if resolved is None:
                return
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & write_flags
            )
            if writing and not under(resolved, [work]):
                refuse("writing", resolved)
            if not writing and not under(resolved, [work, *read_roots]) and resolved not in readable_files:
                refuse("reading", resolved)
        elif event in ("os.listdir", "os.scandir") and args and args[0] is not None:
            resolved = resolve(args[0])
            if resolved is not None and not under(resolved, [work, *read_roots]):
                refuse("listing", resolved)
        elif event in changes:
            for path_at, fd_at in changes[event]:
                if path_at < len(args) and args[path_at] is not None:
                    dir_fd = args[fd_at] if fd_at is not None and fd_at < len(args) else None
                    resolved = resolve(args[path_at], dir_fd)
                    if resolved is not None and not under(resolved, [work]):
                        refuse(event, resolved)
        elif event in refused or event.startswith(refused_prefixes):
            refuse(event)
        elif event == "import" and args[0] in refused_imports:
            refuse("import", args[0])

    return hook


def _mount(libc: Any, source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(value: str | None) -> bytes | None:
        return None if value is None else value.encode()

    _check(libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def _harden(libc: Any, cfg: dict[str, Any], layers: list[str]) -> None:
    """With the capabilities of the launcher's own mount namespace (as root, or in a user namespace): hide the
    directories of programs (the interpreter itself bound back), put ``/dev/null`` over the ``_ctypes``
    extension (the launcher loaded it; the worker is a fresh interpreter that never did) and make the working
    directory ``noexec``. So the code runs no shell, no program it writes, and loads no ctypes, even with the
    audit hook switched off. Best effort: a note on stderr where the kernel refuses."""
    try:
        exe = os.path.realpath(sys.executable)
        keep = os.open(exe, os.O_PATH)
        for target in PROGRAM_DIRS:
            if os.path.isdir(target) and not os.path.islink(target):
                _mount(libc, "tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
                if exe.startswith(target + "/"):
                    os.makedirs(os.path.dirname(exe), mode=0o755, exist_ok=True)
                    os.close(os.open(exe, os.O_CREAT | os.O_WRONLY, 0o755))
                    _mount(libc, f"/proc/self/fd/{keep}", exe, None, MS_BIND)
        os.close(keep)
        import _ctypes  # loaded by _libc

        _mount(libc, "/dev/null", os.path.realpath(_ctypes.__file__), None, MS_BIND)
        _mount(libc, cfg["work"], cfg["work"], None, MS_BIND)
        _mount(libc, None, cfg["work"], None, MS_BIND | MS_REMOUNT | MS_NOEXEC | MS_NOSUID | MS_NODEV)
        layers += ["no_programs", "no_ctypes", "noexec_work"]
    except (OSError, AttributeError) as exc:
        os.write(2, f"sandbox: programs and ctypes stay reachable ({exc})\n".encode())


# The worker's first program: a fresh interpreter (no ctypes in memory) that reads this file's child side and
# its settings from a pipe, then runs _run_worker.
_WORKER_BOOT = """import marshal, os, sys
fd = int(sys.argv[1])
chunks = []
while chunk := os.read(fd, 65536):
    chunks.append(chunk)
os.close(fd)
payload = marshal.loads(b"".join(chunks))
scope = {"__name__": "scalerl_sandbox_worker"}
exec(compile(payload.pop("source"), "sandbox.py", "exec"), scope)
scope["_run_worker"](payload)
"""


def _start_worker(cfg: dict[str, Any], uid: int | None, libc: Any, payload_fd: int) -> None:
    """In the launcher's forked child: drop every privilege, apply the limits, then become a fresh interpreter
    running ``_WORKER_BOOT``; never returns."""
    if libc is not None:
        _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
        if cfg["os_isolation"]:
            _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
            _drop_privileges(libc, uid)
    if uid is not None:
        nproc = cfg["nproc"]
    else:  # RLIMIT_NPROC counts every task of our uid, the caller's included
        nproc = _tasks_of_uid(os.getuid()) + cfg["nproc"] if libc is not None else None
    _apply_limits(cfg, nproc)
    os.set_inheritable(payload_fd, True)
    flags = ["-I", "-B", "-u", *(["-S"] if not cfg["site_packages"] else [])]
    os.execv(sys.executable, [sys.executable, *flags, "-c", _WORKER_BOOT, str(payload_fd)])


def _run_worker(payload: dict[str, Any]) -> None:
    """In the worker's fresh interpreter: install the hook, run main.py; never returns."""
    cfg, nonce = payload["cfg"], payload["nonce"]
    del payload["nonce"]
    signal.signal(signal.SIGXCPU, lambda *_: os._exit(CPU_EXIT))
    import builtins

    for name in ("exit", "quit"):  # normally added by the site module, which -S skips
        if not hasattr(builtins, name):
            setattr(builtins, name, sys.exit)
    sys.path.insert(0, cfg["work"])
    sys.argv = ["main.py", *map(str, cfg["fds"])]  # descriptors handed to the program (a grading channel)
    main = sys.modules["__main__"] = type(sys)("__main__")  # a fresh __main__, not the boot program
    main.__file__ = "main.py"
    write, exit_now = os.write, os._exit
    if cfg["audit_hook"]:
        sys.addaudithook(_make_audit_hook(os.path.realpath(cfg["work"]), cfg["read_roots"]))

    try:
        with open("main.py", encoding="utf-8") as fh:
            code = compile(fh.read(), "main.py", "exec")
        exec(code, main.__dict__)
    except SystemExit as exc:
        if cfg["strict"] or exc.code not in (None, 0):  # not strict: sys.exit(0) is a normal end
            sys.__excepthook__(*sys.exc_info())
            _flush()
            exit_now(exc.code if isinstance(exc.code, int) and not cfg["strict"] else 1)
    except BaseException:  # noqa: BLE001 - any exception means the program did not finish
        sys.__excepthook__(*sys.exc_info())
        _flush()
        exit_now(1)
    _flush()
    if not cfg["strict"]:
        exit_now(0)
    try:
        write(1, f"\n{MARKER}{nonce}\n".encode())
    except OSError:  # the code closed its stdout
        exit_now(1)
    exit_now(0)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - the code may have replaced or closed the stream
            pass


def _launcher(cfg_fd: int, status_fd: int) -> int:
    with os.fdopen(cfg_fd, "rb") as fh:
        cfg = marshal.loads(fh.read())
    nonce = cfg.pop("nonce")
    layers = ["session", "rlimits", "empty_env", "fresh_interpreter"]
    import resource  # noqa: F401 - loaded before entering a user namespace, where it may no longer be readable

    libc = _libc()
    if cfg["bwrap"]:
        layers += cfg["bwrap"]  # bubblewrap set up the namespaces and the file system view before starting us
    elif cfg["os_isolation"] and libc:
        _enter_namespaces(libc, layers, cfg)
    if libc and cfg["os_isolation"] and "mountns" in layers and (os.geteuid() == 0 or "userns" in layers):
        _harden(libc, cfg, layers)
    os.chdir(cfg["work"])  # the directory on top of the new mounts: ".." no longer leads to the host's /tmp
    uid = cfg["uid"] if cfg["os_isolation"] and libc and os.geteuid() == 0 else None
    if uid is not None:
        os.chown(cfg["work"], uid, uid)
        layers.append("uid")
    if cfg["os_isolation"] and libc:
        layers += ["no_caps", "no_new_privs"]
    if cfg["audit_hook"]:
        layers.append("audit_hook")
    source = cfg.pop("child_source")  # handed over by the host: the child finds nothing of scalerl by path
    payload_r, payload_w = os.pipe()
    worker = os.fork()
    if worker == 0:
        try:
            os.close(status_fd)
            os.close(payload_w)
            _start_worker(cfg, uid, libc, payload_r)
        except BaseException as exc:  # noqa: BLE001 - report any setup failure and never fall through
            os.write(2, f"{SETUP_FAILED_REASON}: {type(exc).__name__}: {exc}\n".encode())
        os._exit(SETUP_FAILED)
    os.close(payload_r)
    try:
        with os.fdopen(payload_w, "wb") as fh:
            fh.write(marshal.dumps({"cfg": cfg, "nonce": nonce, "source": source}))
    except OSError:
        pass  # the worker failed before reading: its exit status tells
    del nonce
    _, status, usage = os.wait4(worker, 0)
    report = {"exit": os.waitstatus_to_exitcode(status), "cpu": usage.ru_utime + usage.ru_stime, "layers": layers,
              "uid": uid}
    os.write(status_fd, marshal.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(_launcher(int(sys.argv[1]), int(sys.argv[2])))


# ============================================================================ host side
# Imported here, below the launcher's entry point, so that the child never pays for them.
import math  # noqa: E402
import secrets  # noqa: E402
import select  # noqa: E402
import shutil  # noqa: E402
import stat  # noqa: E402
import subprocess  # noqa: E402
import sysconfig  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from functools import lru_cache  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable, Mapping  # noqa: E402

from scalerl.errors import UserError  # noqa: E402


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
        bwrap = _bubblewrap() if os_isolation else None
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
        read_roots = _read_roots(limits.site_packages)
        config = {
            "work": str(work.resolve()), "audit_hook": audit_hook, "strict": strict,
            "nonce": secrets.token_hex(16) if strict else "",  # only a strict run prints it at its end
            "os_isolation": os_isolation, "read_roots": read_roots, "cpu": max(1, math.ceil(limits.cpu_seconds)),
            "memory": limits.memory_mb << 20, "fsize": limits.file_size_mb << 20, "fds": list(pass_fds),
            "nproc": limits.max_processes, "nofile": limits.max_open_files, "bwrap": BWRAP_LAYERS if bwrap else [],
            "site_packages": limits.site_packages, "bind_roots": _bind_roots(read_roots),
            "child_source": child_source(),
        }
        prefix = _bwrap_command(bwrap, config["work"], read_roots) if bwrap else []
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
        with os.fdopen(cfg_w, "wb") as fh:
            cfg_w = -1
            fh.write(marshal.dumps(config))
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
    elif status is None or (code == SETUP_FAILED and _last_line(stderr).startswith(SETUP_FAILED_REASON)):
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


def _read_roots(site_packages: bool) -> list[str]:
    names = ["stdlib", "platstdlib"] + (["purelib", "platlib"] if site_packages else [])
    paths = sysconfig.get_paths()
    return sorted({os.path.realpath(paths[n]) for n in names if n in paths})


@lru_cache(maxsize=1)
def child_source() -> str:
    """The child half of this file: the launcher program, run as ``python -c SOURCE`` and handed on to the worker
    through the config pipe. Read here, on the host, once: the child never opens a file of the package, so the
    sandbox works wherever the package lives (a home directory or /tmp that the sandbox hides, a path with spaces,
    a read-only install)."""
    text = Path(__file__).read_text(encoding="utf-8")
    if HOST_SIDE not in text:
        raise RuntimeError(f"{__file__}: the host-side marker is missing")
    return text.split(HOST_SIDE)[0]


# what bubblewrap gives (see _bwrap_command); named in SandboxResult.isolation
BWRAP_LAYERS = ["bwrap", "mountns", "ro_root", "private_tmp", "netns", "pidns", "ipcns", "utsns"]
SANDBOX_ENV = "SCALERL_SANDBOX"  # auto (default): bubblewrap when it runs here; bwrap: require it; fallback


def _bubblewrap() -> str | None:
    """The bubblewrap executable to run each sandbox in, or None for the fallback (per ``SCALERL_SANDBOX``)."""
    choice = os.environ.get(SANDBOX_ENV, "auto").strip().lower() or "auto"
    if choice not in ("auto", "bwrap", "fallback"):
        raise UserError(f"{SANDBOX_ENV}={choice!r} is not one of auto, bwrap, fallback")
    if choice == "fallback":
        return None
    path, problem = _probe_bubblewrap()
    if path is None and choice == "bwrap":
        raise UserError(f"{SANDBOX_ENV}=bwrap but bubblewrap cannot run here ({problem}); install the Debian "
                        f"package bubblewrap, or set {SANDBOX_ENV}=fallback")
    return path


@lru_cache(maxsize=1)
def _probe_bubblewrap() -> tuple[str | None, str]:
    """(path, "") when bubblewrap runs a Python here with the sandbox's options, else (None, why not)."""
    path = shutil.which("bwrap")
    if path is None:
        return None, "bwrap not found"
    work = tempfile.mkdtemp(prefix="scalerl-bwrap-probe-")
    try:
        command = _bwrap_command(path, work, _read_roots(False)) + [sys.executable, "-I", "-S", "-c", "pass"]
        done = subprocess.run(command, capture_output=True, timeout=30, env={})
    except (OSError, subprocess.SubprocessError) as exc:
        return None, str(exc)
    finally:
        os.rmdir(work)
    if done.returncode != 0:
        return None, done.stderr.decode(errors="replace").strip().splitlines()[-1:][0] if done.stderr else "failed"
    return path, ""


def check_sandbox_starts() -> None:
    """Raise a :class:`UserError` (one line, exit 2 at start-up) when the sandbox cannot run a program here at
    all, so that a code task fails before training instead of grading every sample as a failure."""
    _check_starts(os.environ.get(SANDBOX_ENV, "auto").strip().lower() or "auto")


@lru_cache(maxsize=4)
def _check_starts(choice: str) -> None:
    result = run_python("pass", SandboxLimits(cpu_seconds=10, wall_seconds=60))
    if not result.passed:
        raise UserError(f"the code sandbox cannot run a program here ({result.reason}); "
                        f"try {SANDBOX_ENV}=fallback, or install the Debian package bubblewrap")


def describe_isolation() -> str:
    """One line for the run's log: which sandbox layer is active here."""
    path, problem = _probe_bubblewrap()
    if _bubblewrap() is not None:
        return f"code sandbox: bubblewrap ({path}: read-only minimal root, private /tmp, no network, new PID namespace)"
    why = f"{SANDBOX_ENV}=fallback" if not problem else problem
    return (f"code sandbox: fallback without bubblewrap ({why}): namespaces, private /tmp, own uid, no capabilities, "
            "no_new_privs, rlimits, audit hook")


def _bind_roots(read_roots: list[str]) -> list[str]:
    """The directories the code needs to see, outermost only: the interpreter's prefixes and ``read_roots``."""
    roots: list[str] = []
    for path in sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, *read_roots)}):
        if not any(path == root or path.startswith(root + "/") for root in roots):
            roots.append(path)
    return roots


def _bwrap_command(bwrap: str, work: str, read_roots: list[str]) -> list[str]:
    """bubblewrap's command line: a new root holding only /usr (and its /bin, /lib... links), the interpreter's
    files, all read-only (the launcher program comes on its command line); the working directory read-write; fresh /proc, /dev and an empty
    private /tmp; new PID, network, IPC and UTS namespaces. As root the launcher keeps its capabilities long
    enough to switch the code to its own uid and drop them all; otherwise a user namespace without any."""
    command = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
               "--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr"]
    if os.geteuid() != 0:
        command += ["--unshare-user", "--cap-drop", "ALL"]
    for name in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(name):
            command += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            command += ["--ro-bind", name, name]
    command += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    binds = [path for path in _bind_roots(read_roots) if not path.startswith("/usr/")]
    command += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp"]
    parents = sorted({os.path.dirname(p) for p in [*binds, work]})
    for parent in sorted({"/".join(p.split("/")[:i]) for p in parents for i in range(2, p.count("/") + 2)}):
        command += ["--perms", "0755", "--dir", parent]  # bubblewrap makes them 0700 otherwise: closed to the uid
    for path in binds:
        command += ["--ro-bind", path, path]
    command += ["--bind", work, work, "--chdir", work, "--"]
    return command
