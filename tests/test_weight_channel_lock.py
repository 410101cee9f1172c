"""A generator process killed while it reads the weights dies holding the channel's lock (issue 29: a crash never
loses a finished step). Its replacement and the trainer's next publish must not wait on that lock forever: the
backend renews it before starting the replacement (``ProcessBackend._replace``)."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal

import torch

from scalerl.pipeline.weights import WeightChannel


def _hold_the_lock_and_hang(channel: WeightChannel, ready) -> None:  # noqa: ANN001
    channel._lock.acquire()  # as a reader inside snapshot() does
    ready.set()
    signal.pause()


def test_a_reader_killed_holding_the_lock_does_not_block_its_replacement_or_the_trainer():
    ctx = mp.get_context("spawn")
    channel = WeightChannel({"w": torch.zeros(3)}, version=0, ctx=ctx)
    ready = ctx.Event()
    proc = ctx.Process(target=_hold_the_lock_and_hang, args=(channel, ready))
    proc.start()
    assert ready.wait(60)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(30)
    assert not channel._lock.acquire(timeout=0.2)  # the dead reader still holds it: what hung the replacement
    channel.renew_lock(ctx)
    channel.publish({"w": torch.ones(3)}, version=1)  # the trainer goes on
    version, tensors = channel.snapshot()  # and so does the next reader
    assert version == 1 and torch.equal(tensors["w"], torch.ones(3))
