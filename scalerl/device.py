"""Which torch device a run's ``device`` field names (docs/architecture.md ``config.py``: ``auto`` | ``cpu`` | ``cuda[:N]``).
torch is imported when asked, so this foundation module stays importable without it."""

from __future__ import annotations

from scalerl.errors import UserError


def resolve_device(name: str):
    """``auto`` is the first CUDA device when there is one, else the CPU."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"device: {name!r} is not a device; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device: {name!r} asked for, but this machine has no CUDA device; use device=cpu")
    return device
