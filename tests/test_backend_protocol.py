"""Every generator backend speaks the driver's ``Backend`` protocol (``scalerl/pipeline/ready.py``): the same
members, with the same parameters, so the step loop never asks which backend it drives (§3.1)."""

from __future__ import annotations

import inspect

import pytest

from scalerl.pipeline.backends import InlineBackend, ProcessBackend
from scalerl.pipeline.ray_backend import RayBackend
from scalerl.pipeline.ready import Backend

MEMBERS = [name for name in vars(Backend) if not name.startswith("_")] + list(Backend.__annotations__)


def test_the_protocol_names_what_the_driver_calls():
    assert sorted(set(MEMBERS)) == sorted(
        ["devices", "concurrent", "submit", "publish", "next_batch", "put_ready", "ready_batches", "faults", "hold",
         "close"]
    )


@pytest.mark.parametrize("cls", [InlineBackend, ProcessBackend, RayBackend])
def test_each_backend_has_every_member_with_the_protocols_parameters(cls):
    for name in vars(Backend):
        if name.startswith("_") or not callable(getattr(Backend, name)):
            continue
        assert callable(getattr(cls, name, None)), f"{cls.__name__} lacks {name}"
        want = list(inspect.signature(getattr(Backend, name)).parameters)
        got = list(inspect.signature(getattr(cls, name)).parameters)
        assert got == want, f"{cls.__name__}.{name}{got} is not the protocol's {want}"
    assert isinstance(cls.concurrent, bool)
    if cls is not RayBackend:  # Ray's counts its generators, set when it is built
        assert isinstance(cls.devices, int) and cls.devices >= 1

