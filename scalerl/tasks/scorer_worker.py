"""The worker process of :class:`scalerl.tasks.isolated.Isolated`: ``python -m scalerl.tasks.scorer_worker R W``.

Reads requests ``(module, function, args)`` (pickled, length-prefixed) from descriptor ``R``, calls
``module.function(*args)`` in its main thread (so Math-Verify's ``signal.alarm`` timeouts work here) and writes
``{"value": result}`` or ``{"error": "<type>: <message>"}`` as JSON to descriptor ``W``. Only functions of
``scalerl.tasks`` modules are called. It exits when ``R`` ends (its parent closed it or died)."""

from __future__ import annotations

import importlib
import json
import os
import pickle
import select
import struct
import sys
import time

_HEADER = struct.Struct("!I")


def read_message(fd: int, deadline: float | None = None, max_bytes: int | None = None) -> bytes:
    """One length-prefixed message from ``fd``; EOFError when the pipe ends first, TimeoutError past ``deadline``
    (``time.monotonic``; None: wait as long as it takes), ValueError for one longer than ``max_bytes``."""
    (size,) = _HEADER.unpack(_read_exactly(fd, _HEADER.size, deadline))
    if max_bytes is not None and size > max_bytes:
        raise ValueError(f"a message of {size} bytes (at most {max_bytes})")
    return _read_exactly(fd, size, deadline)


def _read_exactly(fd: int, n: int, deadline: float | None) -> bytes:
    out = bytearray()
    while len(out) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
        chunk = os.read(fd, n - len(out))
        if not chunk:
            raise EOFError("pipe closed")
        out += chunk
    return bytes(out)


def write_message(fd: int, data: bytes) -> None:
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _answer(module: str, function: str, args: tuple) -> dict:
    if not module.startswith("scalerl.tasks."):
        return {"error": f"ValueError: {module} is not a scalerl.tasks module"}
    try:
        value = getattr(importlib.import_module(module), function)(*args)
        json.dumps(value)
        return {"value": value}
    except Exception as exc:  # noqa: BLE001 - a scorer's failure is the caller's grader failure, not the worker's end
        return {"error": " ".join(f"{type(exc).__name__}: {exc}".split())[:200]}


def main(argv: list[str]) -> int:
    read_fd, write_fd = int(argv[1]), int(argv[2])
    while True:
        try:
            module, function, args = pickle.loads(read_message(read_fd))
        except EOFError:
            return 0
        write_message(write_fd, json.dumps(_answer(module, function, args)).encode())


if __name__ == "__main__":
    sys.exit(main(sys.argv))
