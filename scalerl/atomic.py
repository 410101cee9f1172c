"""Atomic file writes: a reader never sees a half-written checkpoint, metrics file, fit or report.

Every file that matters is written to a temporary sibling and moved into place with ``os.replace``,
which is atomic on POSIX and Windows when source and target are on the same file system.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import glob
import json
import os
import re
import shutil
import socket
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# the names atomic_path gives its temporaries: ".<target>.<owner>.<mkstemp's 8 characters>.tmp<suffix>"
_TEMPORARY = re.compile(r"^\..+\.[A-Za-z0-9_]{8}\.tmp(\.[^.]*)?$")


def remove_stale_temporaries(directory: str | os.PathLike[str]) -> list[Path]:
    """Delete the temporaries a killed writer left in ``directory`` (never a finished file); returns them.

    Call it only where no other process is writing, e.g. when a run starts in its own directory."""
    d = Path(directory)
    stale = [p for p in d.iterdir() if p.is_file() and _TEMPORARY.match(p.name)] if d.is_dir() else []
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


@functools.lru_cache(maxsize=1)
def _host() -> str:
    return socket.gethostname().replace(".", "_")


def owner() -> str:
    """This process as its temporaries name it: ``<host>-<pid>`` (dots in the host name as ``_``), so that a later
    writer can tell a temporary whose writer was killed from one still being written, here or on another host
    sharing the file system."""
    return f"{_host()}-{os.getpid()}"


def _owner_gone(stamp: str) -> bool:
    host, _, pid = stamp.rpartition("-")
    if host != _host() or not pid.isdigit():
        return False  # another host's writer (or not a stamp): not ours to judge
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # alive, another user's
    return False


def remove_orphans(directory: str | os.PathLike[str], prefix: str) -> None:
    """Delete the entries ``<prefix><owner>.…`` in ``directory`` whose writer (:func:`owner`) was a process of this
    host that no longer runs: what a writer killed mid-write left (a model-sized export folder, a warm-up cache's
    temporary). A temporary still being written, or written from another host, is left alone."""
    d = Path(directory)
    for p in d.glob(glob.escape(prefix) + "*") if d.is_dir() else ():
        if _owner_gone(p.name[len(prefix):].split(".", 1)[0]):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it replaces ``path``, on error it is removed.

    For libraries that want a filename (``torch.save``, ``matplotlib.savefig``). The temporaries of this target
    that a killed writer left are removed first (:func:`remove_orphans`)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_orphans(target.parent, f".{target.name}.")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{owner()}.", suffix=".tmp" + target.suffix, dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the mode open() would
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Open a temporary sibling of ``path`` for writing; it replaces ``path`` only if the block succeeds."""
    if "b" in mode:
        encoding = None
    with atomic_path(path) as tmp, open(tmp, mode, encoding=encoding) as fh:
        yield fh
        fh.flush()


def write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_open(path) as fh:
        fh.write(text)


def write_json(path: str | os.PathLike[str], obj: Any, indent: int | None = 2) -> None:
    write_text(path, json.dumps(obj, indent=indent, sort_keys=False) + "\n")


def append_jsonl(path: str | os.PathLike[str], record: dict[str, Any]) -> None:
    """Append one JSON object as one line, written whole (a short write is continued) and fsynced.

    A crash can leave at most a truncated *last* line, never a corrupted earlier one; readers skip a
    trailing partial line (see ``scalerl.curves.readers``). A write that fails (a full disk: the kernel first
    writes what fits, then raises ``ENOSPC``) takes back what it wrote of the line before raising, so the file
    still ends on a whole line and the next append does not run into half of this one."""
    data = (json.dumps(record, separators=(",", ":")) + "\n").encode("utf-8")
    fd = os.open(os.fspath(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start = os.fstat(fd).st_size  # one writer per file (the run's rank 0): the line goes here
        view = memoryview(data)
        try:
            while view:
                written = os.write(fd, view)
                if written <= 0:
                    raise OSError(errno.EIO, f"could not append to {os.fspath(path)}: write returned {written}")
                view = view[written:]
        except BaseException:
            if len(view) < len(data):  # part of the line is in the file: take it back
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, start)
            raise
        os.fsync(fd)
    finally:
        os.close(fd)
