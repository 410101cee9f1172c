"""One call running on a thread beside the training loop (the evaluation of §2.1 while the next steps train).

``concurrent.futures`` would do, but its worker threads are joined at interpreter exit: a Ctrl-C during a long
evaluation would then hang until the evaluation ended. This thread is a daemon; ``result()`` re-raises what the
call raised, in the caller's thread. The thread uses the caller's number of torch threads: OpenMP keeps that
setting per thread, and a new thread would otherwise take every core (measured: a 1-thread caller's matmul
ran on 2 threads in a fresh thread).

A call still running when the interpreter exits (Ctrl-C or an error during an evaluation beside the steps) is
stopped first, at its next Python line, by an exit hook: left running, the thread woke inside a torch operator while
the interpreter was finalizing and the process died of SIGABRT ("terminate called without an active exception")
instead of exiting with its code (130 for Ctrl-C)."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import sys
import threading
import time
from typing import Any, Callable

import torch

EXIT_WAIT_S = 5.0  # at interpreter exit, how long to wait for a running call to stop at its next Python line
_RUNNING: set["BackgroundCall"] = set()
_RUNNING_LOCK = threading.Lock()


class BackgroundCall:
    """``BackgroundCall(fn, *args)`` starts ``fn(*args)`` on a daemon thread; :meth:`result` waits for it and
    returns its value (or raises its exception); :attr:`seconds` is the call's own duration. ``nice``: the
    thread's own nice value on Linux (a higher one: it runs on what the other threads and processes leave idle;
    elsewhere a thread has no nice value of its own, and it runs at the process's)."""

    def __init__(self, fn: Callable[..., Any], *args: Any, name: str = "scalerl-background", nice: int = 0) -> None:
        self._fn, self._args = fn, args
        self._value: Any = None
        self._error: BaseException | None = None
        self.seconds = 0.0
        self._threads = torch.get_num_threads()
        self._nice = nice
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        with _RUNNING_LOCK:
            _RUNNING.add(self)
        self._thread.start()

    def _run(self) -> None:
        start = time.perf_counter()
        try:
            if self._nice and sys.platform.startswith("linux"):
                with contextlib.suppress(OSError):  # a sandbox that forbids it: the call runs at the process's
                    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self._nice)
            torch.set_num_threads(self._threads)
            self._value = self._fn(*self._args)
        except BaseException as exc:  # handed to the caller by result()
            self._error = exc
        finally:
            self.seconds = time.perf_counter() - start
            with _RUNNING_LOCK:
                _RUNNING.discard(self)

    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value

    def stop(self, timeout: float) -> None:
        """Raise ``SystemExit`` in the call's thread (at its next Python line) and wait up to ``timeout`` seconds
        for it to end: for the exit hook, and for a run ending by an exception while the call runs (its result is
        not wanted, and the call must not go on beside whatever the process does next: a sweep's next run)."""
        ident = self._thread.ident
        if ident is None or not self._thread.is_alive():
            return
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(SystemExit))
        self._thread.join(timeout)


@atexit.register
def _stop_running_calls() -> None:
    """Stop every call still running before the interpreter finalizes (see the module's docstring)."""
    with _RUNNING_LOCK:
        running = list(_RUNNING)
    for call in running:
        call.stop(EXIT_WAIT_S)
