"""Atomic file writes: a reader never sees a half-written checkpoint, metrics file, fit or report.

Every file that matters is written to a temporary sibling and moved into place with ``os.replace``,
which is atomic on POSIX and Windows when source and target are on the same file system.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# the names atomic_path gives its temporaries: ".<target>.<mkstemp's 8 characters>.tmp<suffix>"
_TEMPORARY = re.compile(r"^\..+\.[A-Za-z0-9_]{8}\.tmp(\.[^.]*)?$")


def remove_stale_temporaries(directory: str | os.PathLike[str]) -> list[Path]:
    """Delete the temporaries a killed writer left in ``directory`` (never a finished file); returns them.

    Call it only where no other process is writing, e.g. when a run starts in its own directory."""
    d = Path(directory)
    stale = [p for p in d.iterdir() if p.is_file() and _TEMPORARY.match(p.name)] if d.is_dir() else []
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it replaces ``path``, on error it is removed.

    For libraries that want a filename (``torch.save``, ``matplotlib.savefig``)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp" + target.suffix, dir=target.parent)
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
    """Append one JSON object as one line, in a single ``write`` call followed by ``fsync``.

    A crash can leave at most a truncated *last* line, never a corrupted earlier one; readers skip a
    trailing partial line (see ``scalerl.curves.readers``)."""
    line = json.dumps(record, separators=(",", ":")) + "\n"
    fd = os.open(os.fspath(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
