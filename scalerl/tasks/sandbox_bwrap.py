"""The sandbox's bubblewrap launcher: which launcher runs the child program here (``SCALERL_SANDBOX``: auto |
bwrap | fallback), the probe that tells whether bubblewrap runs at all, and its command line, which gives the
child a new root holding only /usr and the interpreter's files (``scalerl.tasks.sandbox`` has the threat model;
docs/tasks.md "The sandbox" the layers)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from functools import lru_cache

from scalerl.errors import UserError

# what bubblewrap gives (see bwrap_command); named in SandboxResult.isolation
BWRAP_LAYERS = ["bwrap", "mountns", "ro_root", "private_tmp", "netns", "pidns", "ipcns", "utsns"]
SANDBOX_ENV = "SCALERL_SANDBOX"  # auto (default): bubblewrap when it runs here; bwrap: require it; fallback


def sandbox_choice() -> str:
    """``SCALERL_SANDBOX`` as given (lower case; ``auto`` when unset or empty), not yet checked."""
    return os.environ.get(SANDBOX_ENV, "auto").strip().lower() or "auto"


def bubblewrap() -> str | None:
    """The bubblewrap executable to run each sandbox in, or None for the fallback (per ``SCALERL_SANDBOX``)."""
    choice = sandbox_choice()
    if choice not in ("auto", "bwrap", "fallback"):
        raise UserError(f"{SANDBOX_ENV}={choice!r} is not one of auto, bwrap, fallback")
    if choice == "fallback":
        return None
    path, problem = probe_bubblewrap()
    if path is None and choice == "bwrap":
        raise UserError(f"{SANDBOX_ENV}=bwrap but bubblewrap cannot run here ({problem}); install the Debian "
                        f"package bubblewrap, or set {SANDBOX_ENV}=fallback")
    return path


@lru_cache(maxsize=1)
def probe_bubblewrap() -> tuple[str | None, str]:
    """(path, "") when bubblewrap runs a Python here with the sandbox's options, else (None, why not)."""
    path = shutil.which("bwrap")
    if path is None:
        return None, "bwrap not found"
    work = tempfile.mkdtemp(prefix="scalerl-bwrap-probe-")
    try:
        command = bwrap_command(path, work, read_roots(False)) + [sys.executable, "-I", "-S", "-c", "pass"]
        done = subprocess.run(command, capture_output=True, timeout=30, env={})
    except (OSError, subprocess.SubprocessError) as exc:
        return None, str(exc)
    finally:
        os.rmdir(work)
    if done.returncode != 0:
        return None, done.stderr.decode(errors="replace").strip().splitlines()[-1:][0] if done.stderr else "failed"
    return path, ""


def describe_isolation() -> str:
    """One line for the run's log: which sandbox layer is active here."""
    path, problem = probe_bubblewrap()
    if bubblewrap() is not None:
        return f"code sandbox: bubblewrap ({path}: read-only minimal root, private /tmp, no network, new PID namespace)"
    why = f"{SANDBOX_ENV}=fallback" if not problem else problem
    return (f"code sandbox: fallback without bubblewrap ({why}): namespaces, private /tmp, own uid, no capabilities, "
            "no_new_privs, rlimits, audit hook")


def read_roots(site_packages: bool) -> list[str]:
    """The directories the code may read besides its working directory: the standard library (and the installed
    packages with ``site_packages``)."""
    names = ["stdlib", "platstdlib"] + (["purelib", "platlib"] if site_packages else [])
    paths = sysconfig.get_paths()
    return sorted({os.path.realpath(paths[n]) for n in names if n in paths})


def bind_roots(readable: list[str]) -> list[str]:
    """The directories the code needs to see, outermost only: the interpreter's prefixes and ``readable``."""
    roots: list[str] = []
    for path in sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, *readable)}):
        if not any(path == root or path.startswith(root + "/") for root in roots):
            roots.append(path)
    return roots


def bwrap_command(bwrap: str, work: str, readable: list[str]) -> list[str]:
    """bubblewrap's command line: a new root holding only /usr (and its /bin, /lib... links), the interpreter's
    files, all read-only (the child program comes on its command line); the working directory read-write; fresh
    /proc, /dev and an empty private /tmp; new PID, network, IPC and UTS namespaces. As root the launcher keeps
    its capabilities long enough to switch the code to its own uid and drop them all; otherwise a user namespace
    without any."""
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
    binds = [path for path in bind_roots(readable) if not path.startswith("/usr/")]
    command += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp"]
    parents = sorted({os.path.dirname(p) for p in [*binds, work]})
    for parent in sorted({"/".join(p.split("/")[:i]) for p in parents for i in range(2, p.count("/") + 2)}):
        command += ["--perms", "0755", "--dir", parent]  # bubblewrap makes them 0700 otherwise: closed to the uid
    for path in binds:
        command += ["--ro-bind", path, path]
    command += ["--bind", work, work, "--chdir", work, "--"]
    return command
