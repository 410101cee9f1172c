"""Timing: the seconds a run's phases take (the ``timing/<phase>_s`` metrics) and the stopwatches behind the wall
clocks (the run's, and the compute meter's training clock, whose device-hours are the x-axis of the paper's
compute-performance curves, Eq. 1; idle time counts, §3.1 and App. A.11).

* ``with timed(timings, "generate"): ...`` adds the block's seconds to ``timings["generate"]`` (several blocks under
  one name add up: micro-batches, the k batches of a group); the seconds are added when the block raises too, since
  the time was spent.
* :func:`timing_metrics` names a ``{phase: seconds}`` dict as the metrics ``timing/<phase>_s``.
* :class:`Stopwatch` for a clock that is started and read or stopped in different places (a callback pair, a
  resumed run's wall clock).

Torch-free (foundation layer).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Iterator, Mapping


class Stopwatch:
    """``Stopwatch(clock=time.perf_counter)``: ``start()`` (idempotent, returns the stopwatch), ``seconds`` (since
    the start while running, 0.0 when stopped), ``stop()`` (stops; returns the seconds of the interval it closes,
    0.0 if it was not running)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self._since: float | None = None

    @property
    def running(self) -> bool:
        return self._since is not None

    def start(self) -> Stopwatch:
        if self._since is None:
            self._since = self.clock()
        return self

    @property
    def seconds(self) -> float:
        return self.clock() - self._since if self._since is not None else 0.0

    def stop(self) -> float:
        seconds = self.seconds
        self._since = None
        return seconds


@contextmanager
def timed(timings: dict[str, float], name: str, clock: Callable[[], float] = time.perf_counter) -> Iterator[None]:
    """Add the seconds the ``with`` block takes to ``timings[name]`` (from 0.0 when absent), also when it raises."""
    watch = Stopwatch(clock).start()
    try:
        yield
    finally:
        timings[name] = timings.get(name, 0.0) + watch.stop()


def timing_metrics(*timings: Mapping[str, float]) -> dict[str, float]:
    """The phases of ``timings`` (later mappings win on a shared name) as the metrics ``timing/<phase>_s``."""
    return {f"timing/{name}_s": seconds for t in timings for name, seconds in t.items()}
