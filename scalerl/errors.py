"""User errors: one line naming the problem, exit code 2, no traceback, nothing half-written."""

from __future__ import annotations

import math
import numbers
import os
import tempfile
from pathlib import Path
from typing import Any


# C0 controls but tab and newline, and DEL: shown as their escapes
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F) if c not in (0x09, 0x0A)}


def printable(text: str) -> str:
    """``text`` with terminal control characters (ESC, BEL, carriage return, ...; not tab or newline) written as
    ``\\x1b`` etc.: a column
    name or a run name read from a file reaches the terminal in messages and tables, and an escape sequence in it
    would act there (clear the screen, move the cursor) instead of being seen."""
    return text.translate(_CONTROL)


class UserError(Exception):
    """A mistake in what the user asked for (bad path, bad column, bad config value, too few points).

    The CLI prints ``error: <message>`` on one line and exits with code 2. A bug is a traceback; a user
    mistake never is. Messages should name the problem and, where possible, how to fix it.
    """

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))  # always one line


class RunStopped(UserError):
    """A run that cannot go on for a reason outside the user's request (its generator keeps dying): one line,
    exit code 1, after the run's checkpoint is written."""

    exit_code = 1


class RunFileNotWritten(RunStopped):
    """A file of the run (its checkpoint, a line of metrics.jsonl or consumed.jsonl) could not be written (its disk
    is full, say): one line, exit code 1; what was written before is intact, so ``--resume`` continues from the
    last checkpoint. The run does not try to write a checkpoint on the way out: it would meet the same disk."""


class CheckpointNotWritten(RunFileNotWritten):
    """A run whose checkpoint could not be written (its disk is full, say): one line, exit code 1; the last
    checkpoint written before it is intact (the write is atomic), so ``--resume`` continues from there."""


def read_user_text(path: str | os.PathLike[str], what: str = "file") -> str:
    """The text of a file the user named (config, sweep spec, task data), or a UserError naming why it
    cannot be read: missing, a directory, unreadable, or not UTF-8."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8-sig")  # a byte-order mark (some editors write one) is not content
    except FileNotFoundError:
        raise UserError(f"{what} not found: {p}") from None
    except IsADirectoryError:
        raise UserError(f"{what} {p} is a directory; give a file") from None
    except PermissionError:
        raise UserError(f"{what} {p} cannot be read (permission denied)") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} {p} is not UTF-8 text (byte {exc.start}); convert it to UTF-8") from None
    except OSError as exc:
        raise UserError(f"{what} {p} cannot be read ({exc.strerror})") from None


def _check_name_lengths(target: Path, what: str) -> None:
    """Each name in ``target`` and the whole path fit the file system's limits (255 bytes a name on Linux)."""
    limit, path_limit = 255, 4096
    try:
        limit, path_limit = os.pathconf("/", "PC_NAME_MAX"), os.pathconf("/", "PC_PATH_MAX")
    except (OSError, ValueError, AttributeError):
        pass
    for name in target.parts:
        if len(os.fsencode(name)) > limit:
            raise UserError(f"{what} {str(target)[:80]}...: the name {name[:40]}... is longer than the file system "
                            f"allows ({limit} bytes); choose a shorter one")
    if len(os.fsencode(str(target.absolute()))) >= path_limit:
        raise UserError(f"{what} {str(target)[:80]}...: the path is longer than the file system allows "
                        f"({path_limit} bytes); choose a shorter one")


def _probe_dir(directory: Path, what: str, target: Path) -> None:
    """``directory`` exists or can be made under its nearest existing ancestor, and files can be created in it."""
    existing = directory
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise UserError(f"{what} {target}: {existing} is a file, not a directory; choose another path")
    try:  # a real probe: os.access says yes to root even on read-only places
        fd, probe = tempfile.mkstemp(prefix=".scalerl-probe-", dir=existing)
    except OSError as exc:
        raise UserError(f"{what} {target}: cannot write in {existing} ({exc.strerror}); choose another path") from None
    os.close(fd)
    os.unlink(probe)


def check_writable_file(path: str | os.PathLike[str], what: str = "output") -> None:
    """Before any work starts: ``path`` can be written as a file (not a directory, in a writable place)."""
    p = Path(path)
    _check_name_lengths(p, what)
    if p.is_dir():
        raise UserError(f"{what} {p} is a directory; give a file name")
    if p.exists() and not os.access(p, os.W_OK):
        raise UserError(f"{what} {p} is not writable; choose another path")
    _probe_dir(p.parent if str(p.parent) else Path("."), what, p)


def check_writable_dir(path: str | os.PathLike[str], what: str = "--out") -> None:
    """Before any work starts: ``path`` is (or can be made) a directory where files can be created."""
    p = Path(path)
    _check_name_lengths(p, what)
    if p.exists() and not p.is_dir():
        raise UserError(f"{what} {p} is a file, not a directory; choose another path")
    _probe_dir(p, what, p)


def check_number(flag: str, value: float | None, low: float | None = None, high: float | None = None,
                 low_open: bool = False, high_open: bool = False) -> None:
    """A UserError unless ``value`` (None: not given) is a finite number (not true/false, not text) within
    [low, high] (open ends where asked)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise UserError(f"{flag} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise UserError(f"{flag} must be a finite number, got {value}")
    if low is not None and (value <= low if low_open else value < low):
        raise UserError(f"{flag} must be {'>' if low_open else '≥'} {low:g}, got {value:g}")
    if high is not None and (value >= high if high_open else value > high):
        raise UserError(f"{flag} must be {'<' if high_open else '≤'} {high:g}, got {value:g}")


def check_int(flag: str, value: Any) -> int:
    """``value`` when it is a whole number (not true/false, not 2.5: an operand count or a length of 3.5 was read
    as 3 by a task's generator); a one-line UserError naming ``flag`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise UserError(f"{flag} must be a whole number, got {value!r}")
    return int(value)


def check_flag(flag: str, value: Any) -> bool:
    """``value`` when it is true or false (``"no"`` would be read as true); a one-line UserError otherwise."""
    if not isinstance(value, bool):
        raise UserError(f"{flag} must be true or false, got {value!r}")
    return value
