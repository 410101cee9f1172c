"""Trainer -> generator weight channel (§3.1: after every optimizer step the weights go to the generator).

The trainer ``publish``es a state dict with its policy version; the generator ``poll``s between decode
steps and gets a consistent snapshot when a newer version exists. Across processes the tensors live in
shared memory and a lock keeps a reader from seeing a half-copied update; in one process the same object
works with a thread lock.

The channel also carries the trainer's ``hold``: while the trainer pauses (an evaluation it waits for), which the
compute meter leaves out, the generator starts no new group of batches (``pipeline/ready.py``), and ``busy``
tells the trainer's backend whether one is under way (``ProcessBackend.hold``), so no training work is done in
time the meter leaves out (App. A.3: compute is every device × the training wall clock). Both flags are plain
shared bytes, no lock: a generator killed while reading or writing one leaves nothing held.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
from typing import Mapping

import torch


class WeightChannel:
    def __init__(self, state_dict: Mapping[str, torch.Tensor], version: int = 0, ctx: mp.context.BaseContext | None = None) -> None:
        self.tensors = {k: v.detach().to("cpu").clone() for k, v in state_dict.items()}
        if ctx is not None:
            for t in self.tensors.values():
                t.share_memory_()
            self._version = ctx.Value("q", version, lock=False)
            self._lock = ctx.Lock()
            self._held = ctx.Value("b", 0, lock=False)  # the trainer holds the generators
            self._busy = ctx.Value("b", 0, lock=False)  # a generator has a group under way
        else:
            self._version = _Box(version)
            self._lock = threading.Lock()
            self._held, self._busy = _Box(0), _Box(0)

    def renew_lock(self, ctx: mp.context.BaseContext) -> None:
        """A new lock, for the trainer's process to call when a generator process has died: one killed inside
        :meth:`snapshot` dies holding the lock, and its replacement (and the trainer's next :meth:`publish`) would
        wait on it forever. Only readers (the generators) can die holding it, and a reader changes nothing, so the
        tensors are whole."""
        self._lock = ctx.Lock()

    def version(self) -> int:
        return int(self._version.value)

    def hold(self, on: bool) -> None:
        """The trainer pauses (``on``) or goes on: while held, :meth:`start_group` refuses."""
        self._held.value = int(on)

    def start_group(self) -> bool:
        """A generator is about to start a group: marked busy, unless the trainer holds it (False). Busy is set
        before held is read and the trainer sets held before it reads busy, so one of the two sees the other
        (plain bytes give no memory fence: at worst one group starts in a pause, the case without the hold)."""
        self._busy.value = 1
        if self._held.value:
            self._busy.value = 0
            return False
        return True

    def end_group(self) -> None:
        self._busy.value = 0

    def busy(self) -> bool:
        """Whether a generator has a group under way."""
        return bool(self._busy.value)

    @torch.no_grad()
    def publish(self, state_dict: Mapping[str, torch.Tensor], version: int, timeout: float | None = None) -> bool:
        """Copy in the weights at ``version`` (the version last, so a reader that sees it finds the tensors whole).
        With ``timeout``: False, nothing changed, when a reader has held the lock that long (the caller checks that
        it is alive: a dead one holds it forever, see :meth:`renew_lock`)."""
        lock = self._lock  # a process's lock, or a thread's (whose acquire takes no timeout of None)
        if not (lock.acquire() if timeout is None else lock.acquire(timeout=timeout)):
            return False
        try:
            for k, t in self.tensors.items():
                t.copy_(state_dict[k].detach())
            self._version.value = version
        finally:
            lock.release()
        return True

    @torch.no_grad()
    def snapshot(self) -> tuple[int, dict[str, torch.Tensor]]:
        with self._lock:
            return int(self._version.value), {k: t.clone() for k, t in self.tensors.items()}

    def poll(self, current_version: int) -> tuple[int, dict[str, torch.Tensor]] | None:
        """A ``WeightSource``: newer weights than ``current_version``, or None."""
        if self.version() <= current_version:
            return None
        return self.snapshot()


class _Box:
    def __init__(self, value: int) -> None:
        self.value = value
