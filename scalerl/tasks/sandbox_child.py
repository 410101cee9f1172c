"""The sandbox's child program. This whole file is what runs inside the sandbox: ``scalerl.tasks.sandbox`` (which
has the threat model and the layers) reads it with ``child_source`` and starts it.

The host starts it in a new session, under bubblewrap when it is used, as the *launcher*:
``python -I -B -u [-S] -c SOURCE CFG_FD STATUS_FD``. The launcher reads its settings from CFG_FD, sets up
namespaces and private mounts (the fallback without bubblewrap), hides programs and ctypes, then forks the
*worker* and reports the worker's exit status, CPU time and layers on STATUS_FD. The worker drops every
privilege, applies the limits and execs a fresh interpreter, which receives this same source and its settings
through a pipe, installs the audit hook and runs ``main.py``; at the end of a strict run it prints ``MARKER``
and the run's nonce, the host's sign that the program ran to its end.

Standard library only, and few modules (not even ``typing``), so that start-up stays short; never ``scalerl``:
the child opens no file of the package, so the sandbox works wherever the package lives (tests/test_sandbox.py
checks both).
"""

from __future__ import annotations

import marshal
import os
import signal
import sys

TYPE_CHECKING = False  # a constant of our own: the child never imports typing
if TYPE_CHECKING:
    from typing import Any, Callable

MARKER = "__scalerl_sandbox_done__ "  # + the run's nonce: printed when a strict run reaches its end
SETUP_FAILED = 125  # the worker's exit status when the sandbox could not be set up (not the code's fault)
SETUP_FAILED_REASON = "sandbox setup failed"  # how the worker's last line on stderr starts then
CPU_EXIT = 128 + signal.SIGXCPU  # the worker's exit status when its CPU time ran out

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
PR_SET_PDEATHSIG, PR_SET_KEEPCAPS, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 8, 24, 38
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm")  # world-writable places, replaced by empty private ones
PROGRAM_DIRS = ("/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin", "/usr/libexec", "/usr/games", "/bin",
                "/sbin")  # hidden: no shell, no other program to run


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


# The worker's first program: a fresh interpreter (no ctypes in memory) that reads this program and its settings
# from a pipe, then runs _run_worker.
_WORKER_BOOT = """import marshal, os, sys
fd = int(sys.argv[1])
chunks = []
while chunk := os.read(fd, 65536):
    chunks.append(chunk)
os.close(fd)
payload = marshal.loads(b"".join(chunks))
scope = {"__name__": "scalerl_sandbox_worker"}
exec(compile(payload.pop("source"), "sandbox_child.py", "exec"), scope)
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
    # the worker's setup reports a failure here; the descriptor closes at its exec (os.pipe's ends are not
    # inheritable), so the code, which runs after the exec, cannot claim a setup failure of its own making
    setup_r, setup_w = os.pipe()
    worker = os.fork()
    if worker == 0:
        try:
            os.close(status_fd)
            os.close(payload_w)
            os.close(setup_r)
            _start_worker(cfg, uid, libc, payload_r)
        except BaseException as exc:  # noqa: BLE001 - report any setup failure and never fall through
            line = f"{SETUP_FAILED_REASON}: {type(exc).__name__}: {exc}\n".encode()
            os.write(2, line)
            try:
                os.write(setup_w, line[:512])
            except OSError:
                pass
        os._exit(SETUP_FAILED)
    os.close(payload_r)
    os.close(setup_w)
    try:
        with os.fdopen(payload_w, "wb") as fh:
            fh.write(marshal.dumps({"cfg": cfg, "nonce": nonce, "source": source}))
    except OSError:
        pass  # the worker failed before reading: its exit status tells
    del nonce
    _, status, usage = os.wait4(worker, 0)
    os.set_blocking(setup_r, False)
    try:
        setup_failed = bool(os.read(setup_r, 512))
    except OSError:  # nothing written: the worker reached its exec
        setup_failed = False
    os.close(setup_r)
    report = {"exit": os.waitstatus_to_exitcode(status), "cpu": usage.ru_utime + usage.ru_stime, "layers": layers,
              "uid": uid, "setup_failed": setup_failed}
    os.write(status_fd, marshal.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(_launcher(int(sys.argv[1]), int(sys.argv[2])))
