"""A trainer sharded over several devices with torch FSDP2 (``fully_shard``): docs/scale-out.md.

The paper's trainer is an FSDP backend (π_train, §3.1 of reference/paper_spec.md). Here each transformer
block becomes its own FSDP unit (its parameters, gradients and AdamW state live 1/N on each of N ranks and
are all-gathered only while the block runs), then the root takes the rest (embeddings, final norm, the tied
LM head). ``Trainer`` needs no change: its parameters become DTensors, and AdamW, gradient clipping and the
FP32 head (§3.3) work on them as they are.

Every rank runs the same step on the same batch, so one step equals the single-device step (FSDP averages
the gradients of the ranks): sharding buys memory, not throughput. Splitting a batch across ranks would
need the batch-level advantage normalisation (§3.5) and the loss aggregation denominators (§3.4) reduced
across ranks first, which ``Trainer`` does not do.
"""

from __future__ import annotations

from typing import Mapping

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor


def layer_stack(model: nn.Module) -> nn.ModuleList:
    """The model's transformer blocks: its largest ``ModuleList`` by parameter count (``blocks`` in the
    built-in model, ``model.layers`` in a Hugging Face Llama)."""
    stacks = [m for m in model.modules() if isinstance(m, nn.ModuleList)]
    if not stacks:
        raise ValueError(f"{type(model).__name__} has no ModuleList of blocks to shard")
    return max(stacks, key=lambda s: sum(p.numel() for p in s.parameters()))


def shard_model(model: nn.Module, mesh: DeviceMesh | None = None) -> nn.Module:
    """Apply FSDP2 in place: each block of ``layer_stack(model)``, then the root. Call it on every rank of an
    initialised process group, before building the ``Trainer`` (whose AdamW must see the sharded params).

    ``mesh`` defaults to all ranks, on CUDA when available (NCCL), else on CPU (gloo)."""
    if mesh is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        mesh = init_device_mesh(device, (torch.distributed.get_world_size(),))
    for block in layer_stack(model):
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The unsharded weights, e.g. to publish to the generators. A collective: every rank must call it."""
    state: Mapping[str, torch.Tensor] = model.state_dict()
    return {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach() for k, v in state.items()}
