"""Scorers that are Python libraries (Math-Verify, reasoning-gym's ``score_answer``), run with a hard time limit.

A policy's text can make such a scorer compute for ever: ``3`` against ``10^{10^{10}}`` for Math-Verify,
``9**9**9**9`` for a Countdown scorer. In the trainer's process that is one long C-level operation that holds the
interpreter lock and that no signal interrupts: the run stalls, its steps and the evaluation beside them alike.
Math-Verify's own timeout is ``signal.alarm``, which works only in the main thread and only between bytecodes.

So :class:`Isolated` runs the call in a worker process of its own (``python -m scalerl.tasks.scorer_worker``,
started on first use, one per process that grades, reused across calls). A call that has not answered within
its limit kills the worker: that sample is a grader failure (``timeout``: graded incorrect, counted, the run goes
on; :mod:`scalerl.tasks.grading`) and the next call starts a new worker. Requests go to the worker pickled (it
trusts the trainer); answers come back as JSON holding a number or an error line, never a pickle: what runs
there reads the policy's text, so nothing it could write may be executed on this side.
"""

from __future__ import annotations

import atexit
import json
import os
import pickle
import subprocess
import sys
import threading
import time
import weakref
from typing import Any

from scalerl.tasks.grading import GradingFailed
from scalerl.tasks.scorer_worker import read_message, write_message

SCORER_TIMEOUT_S = 10.0  # a call to a library scorer that takes longer is a grader failure (its worker is killed)
ANSWER_BYTES = 1 << 16  # an answer is a number or an error line: a longer one is the worker's failure
_LIVE: "weakref.WeakSet[Isolated]" = weakref.WeakSet()


class Isolated:
    """``Isolated(timeout_s)(module, function, *args)``: ``module.function(*args)`` in the worker process,
    its result (a JSON number, bool or string), within ``timeout_s`` seconds; :class:`GradingFailed` when it takes
    longer (``timeout``), raises (``error``) or the worker dies (``crash``). Safe to share between threads (one
    call at a time) and to pickle (a copy starts its own worker); a forked child starts its own worker too."""

    def __init__(self, timeout_s: float = SCORER_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._send = self._recv = -1
        self._pid = os.getpid()
        _LIVE.add(self)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit, modules may be gone already
            pass

    def __getstate__(self) -> dict[str, Any]:
        return {"timeout_s": self.timeout_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["timeout_s"])  # type: ignore[misc]

    def __call__(self, module: str, function: str, *args: Any) -> Any:
        with self._lock:
            if self._pid != os.getpid():  # forked: the worker and its pipes are the parent's
                self._proc, self._send, self._recv, self._pid = None, -1, -1, os.getpid()
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            try:
                write_message(self._send, pickle.dumps((module, function, args)))
                answer = json.loads(read_message(self._recv, time.monotonic() + self.timeout_s, ANSWER_BYTES))
            except TimeoutError:
                self.close()
                raise GradingFailed("timeout", f"{module}.{function} took longer than {self.timeout_s:g} s; "
                                               "its worker was stopped") from None
            except (OSError, EOFError, ValueError) as exc:
                self.close()
                raise GradingFailed("crash", f"{module}.{function}: its worker process ended ({exc})") from None
        if "error" in answer:
            raise GradingFailed("error", str(answer["error"]))
        return answer["value"]

    def _start(self) -> None:
        self.close()
        to_worker_r, to_worker_w = os.pipe()
        from_worker_r, from_worker_w = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "scalerl.tasks.scorer_worker", str(to_worker_r), str(from_worker_w)],
                pass_fds=(to_worker_r, from_worker_w), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, close_fds=True)
        except OSError as exc:
            for fd in (to_worker_r, to_worker_w, from_worker_r, from_worker_w):
                os.close(fd)
            raise GradingFailed("crash", f"could not start the scorer's worker process ({exc})") from None
        os.close(to_worker_r)
        os.close(from_worker_w)
        self._send, self._recv = to_worker_w, from_worker_r

    def close(self) -> None:
        """Stop the worker (it is started again by the next call)."""
        proc, self._proc = self._proc, None
        for fd in (self._send, self._recv):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._send = self._recv = -1
        if proc is not None and self._pid == os.getpid():
            proc.kill()
            proc.wait()


@atexit.register
def _close_all() -> None:
    for scorer in list(_LIVE):
        scorer.close()
