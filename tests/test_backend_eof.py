"""The local backend reads the end of a generator's pipe (a message cut off by a kill, a batch's tensors gone with
their sender) as the generator's death, whatever the process's state: it can never deliver again, so it is made
sure gone and replaced, and the run goes on (issue 29: a crash never loses a finished step). Seen on a loaded
machine: an end of file from a generator still reported alive five seconds later ended the run with EOFError."""

from __future__ import annotations

import pytest

from scalerl.pipeline import backends
from scalerl.pipeline.backends import DEAD, ProcessBackend


class _EndedPipe:
    def __init__(self, error: type[BaseException]) -> None:
        self.error = error

    def get(self, timeout: float) -> dict:
        raise self.error


class _Proc:
    """A generator process that exits by itself after ``alive_for`` polls, or only when killed."""

    def __init__(self, alive_for: float) -> None:
        self.polls, self.alive_for, self.killed = 0, alive_for, False

    def join(self, timeout: float | None = None) -> None:
        return None

    def is_alive(self) -> bool:
        self.polls += 1
        return not self.killed and self.polls <= self.alive_for

    def kill(self) -> None:
        self.killed = True


def _get(proc: _Proc, error: type[BaseException] = EOFError) -> object:
    backend = ProcessBackend.__new__(ProcessBackend)  # only the reader's state: no process is started
    backend.results, backend.proc = _EndedPipe(error), proc
    return backend._get(timeout=1.0)


@pytest.mark.parametrize("error", [EOFError, OSError])
def test_an_ended_pipe_from_a_dead_generator_is_its_death(error):
    proc = _Proc(alive_for=0)
    assert _get(proc, error) is DEAD and not proc.killed


def test_an_ended_pipe_from_a_generator_still_alive_kills_it_and_is_its_death(monkeypatch):
    monkeypatch.setattr(backends, "EXIT_GRACE_S", 0.01)
    proc = _Proc(alive_for=float("inf"))
    assert _get(proc) is DEAD  # replaced by the caller, not a crash of the run
    assert proc.killed
