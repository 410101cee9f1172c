"""The trainer over several ranks: torch FSDP2 (``fully_shard``) plus data parallelism (docs/scale-out.md).

The paper's trainer is a data-parallel FSDP backend (π_train, §2). Here:

* sharding (``shard_model``): each transformer block is its own FSDP unit (its parameters, gradients and AdamW
  state live 1/N on each of N ranks and are all-gathered only while the block runs), the root takes the rest
  (embeddings, final norm, the tied LM head). Parameters become DTensors, which AdamW, gradient clipping (the
  global norm) and the FP32 head (§3.2, Fig. 5b) handle as they are.
* data parallelism (``DataParallel``): every rank holds the whole ``RolloutBatch`` and trains on its slice of
  the prompts (whole groups). Filtering (§3.2, Fig. 6a), advantages (§3.2, Fig. 14b) and the aggregation's denominators (§3.2, Fig. 14a)
  are computed on the whole batch, so one step is the single-process step on the whole batch.
* launch and state (``process_group``, ``Commands``, ``broadcast_batch``, ``full_state_dict``,
  ``full_trainer_state``): torchrun's ranks, rank 0's commands and batches, unsharded weights for the
  generators and checkpoints in the single-process format.

Heavy torch.distributed modules (FSDP, DTensor, checkpoint) are imported inside the functions that need
them, so a single-process run never pays for them.
"""

from __future__ import annotations

import itertools
import os
import pickle
import time
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any, Callable, Iterator, Mapping

import torch
import torch.distributed as dist
from torch import Tensor, nn

from scalerl.errors import UserError
from scalerl.rollout import RolloutBatch

# ------------------------------------------------------------------------------------------ launch


def launched_world() -> int:
    """Ranks in this run: torchrun's ``WORLD_SIZE``, 1 without torchrun."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def launched_rank() -> int:
    """This process's rank: torchrun's ``RANK``, 0 without torchrun."""
    return int(os.environ.get("RANK", "0"))


@contextmanager
def process_group() -> Iterator[torch.device]:
    """Join torchrun's process group and yield this rank's device: NCCL on ``cuda:LOCAL_RANK`` when CUDA is
    available, else gloo on the CPU. The group is destroyed on exit."""
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    try:
        yield device
    finally:
        dist.destroy_process_group()


class Commands:
    """Rank 0's commands to the other ranks, through the process group's key-value store.

    A rank waiting for rank 0 (which may be generating, evaluating or warming up for a long time) polls the
    store instead of blocking in a collective, so no collective timeout fires while it waits; the data a
    command announces (a batch, weights) then moves by collectives that every rank enters at once."""

    runs = itertools.count()  # every rank runs the same runs in order: their keys never mix

    def __init__(self) -> None:
        self.store = dist.distributed_c10d._get_default_store()
        self.prefix = f"scalerl/run{next(self.runs)}/command/"
        self.count = 0

    def send(self, name: str, arg: Any = None) -> None:
        self.store.set(f"{self.prefix}{self.count}", pickle.dumps((name, arg)))
        self.count += 1

    def receive(self) -> tuple[str, Any]:
        key = f"{self.prefix}{self.count}"
        pause = 1e-4
        while not self.store.check([key]):
            time.sleep(pause)
            pause = min(2 * pause, 0.01)
        self.count += 1
        return pickle.loads(self.store.get(key))


def broadcast_object(obj: Any) -> Any:
    """Rank 0's ``obj`` (picklable) on every rank."""
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


@dataclass(frozen=True)
class _TensorSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype


def broadcast_batch(batch: RolloutBatch | None, device: torch.device) -> RolloutBatch:
    """Rank 0's ``batch`` on every rank (the others pass None), its tensors on ``device``: the small fields
    and tensor shapes as one object, then each tensor by ``dist.broadcast``. ``texts`` stay on rank 0."""
    spec = None
    if batch is not None:
        spec = {
            f.name: _TensorSpec(tuple(v.shape), v.dtype) if isinstance(v, Tensor) else v
            for f in fields(batch)
            if f.name != "texts"
            for v in [getattr(batch, f.name)]
        }
    spec = broadcast_object(spec)
    values: dict[str, Any] = {}
    for name, value in spec.items():
        if isinstance(value, _TensorSpec):
            if batch is None:
                tensor = torch.empty(value.shape, dtype=value.dtype, device=device)
            else:
                tensor = getattr(batch, name).to(device).contiguous()
            dist.broadcast(tensor, src=0)
            value = tensor
        values[name] = value
    return RolloutBatch(**values)


# ------------------------------------------------------------------------------------------ sharding


def layer_stack(model: nn.Module) -> nn.ModuleList:
    """The model's transformer blocks: its largest ``ModuleList`` by parameter count (``blocks`` in the
    built-in model, ``model.layers`` in a Hugging Face Llama)."""
    stacks = [m for m in model.modules() if isinstance(m, nn.ModuleList)]
    if not stacks:
        raise ValueError(f"{type(model).__name__} has no ModuleList of blocks to shard")
    return max(stacks, key=lambda s: sum(p.numel() for p in s.parameters()))


def shard_model(model: nn.Module, mesh: Any = None) -> nn.Module:
    """Apply FSDP2 in place: each block of ``layer_stack(model)``, then the root. Call it on every rank of an
    initialised process group, before building the ``Trainer`` (whose AdamW must see the sharded params).

    ``mesh`` (a ``DeviceMesh``) defaults to all ranks, on CUDA when available (NCCL), else on CPU (gloo)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if mesh is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        mesh = init_device_mesh(device, (dist.get_world_size(),))
    for block in layer_stack(model):
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _options(**kwargs: bool) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, **kwargs)


def full_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """The unsharded weights on rank 0, on the CPU (to publish to the generators, to checkpoint); an empty dict
    on the other ranks. A collective: every rank must call it. Gathered one tensor at a time, so no rank ever
    holds the whole model on its device."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(model, options=_options(cpu_offload=True))


def load_full_state_dict(model: nn.Module, state: Mapping[str, Tensor]) -> None:
    """Load rank 0's unsharded ``state`` into the sharded ``model`` on every rank (the others pass ``{}``)."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    set_model_state_dict(model, dict(state), options=_options(broadcast_from_rank0=True))


def _trained_names(model: nn.Module) -> list[str]:
    """Names of the optimizer's parameters in its order (``Trainer`` gives AdamW ``model.parameters()``)."""
    return [name for name, p in model.named_parameters() if p.requires_grad]


def _optimizer_by_index(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """torch.distributed.checkpoint's optimizer state (keyed by parameter name) in ``Optimizer.state_dict``'s
    format (keyed by position), so that single- and multi-rank checkpoints are the same file."""
    index = {name: i for i, name in enumerate(names)}
    return {
        "state": {index[name]: value for name, value in state["state"].items()},
        "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in state["param_groups"]],
    }


def _optimizer_by_name(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The inverse of ``_optimizer_by_index``."""
    return {
        "state": {names[i]: value for i, value in state["state"].items()},
        "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]],
    }


def full_trainer_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """``(model state, optimizer state)`` unsharded, in the single-process format, on rank 0 (on the CPU);
    ``({}, {})`` on the others. A collective."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    weights = full_state_dict(model)
    if not optimizer.state:  # no step taken yet: the helper would take a zero step to create the state
        return weights, optimizer.state_dict() if dist.get_rank() == 0 else {}
    optim = get_optimizer_state_dict(model, optimizer, options=_options(cpu_offload=True))
    if dist.get_rank() != 0:
        return {}, {}
    return weights, _optimizer_by_index(optim, _trained_names(model))


def load_full_trainer_state(model: nn.Module, optimizer: torch.optim.Optimizer, weights: dict, optim: dict) -> None:
    """Load rank 0's unsharded model and optimizer state (``full_trainer_state``'s format, which is also a
    single-process checkpoint's) on every rank; the others pass ``{}``. A collective."""
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    load_full_state_dict(model, weights)
    stateless = broadcast_object(optim if optim and not optim["state"] else None)
    if stateless is not None:  # saved before any step: hyper-parameters only, the same on every rank
        optimizer.load_state_dict(stateless)
        return
    by_name = _optimizer_by_name(optim, _trained_names(model)) if optim else {}
    set_optimizer_state_dict(model, optimizer, by_name, options=_options(broadcast_from_rank0=True))


# ------------------------------------------------------------------------------------ data parallel


@dataclass(frozen=True)
class RankRows:
    """The sequences one rank trains on: ``mask`` [N] bool over the batch, whole prompt groups. ``owned`` is
    False for a rank left without a prompt: it runs one stand-in sequence with weight 0, so that it still
    joins the collectives of the forward and backward passes."""

    mask: Tensor
    owned: bool


class DataParallel:
    """How a ``Trainer`` splits a step over the ranks of the default process group (§3.2, Fig. 14a, Fig. 14b, Fig. 6a).

    Every rank holds the whole batch and computes the filtering, the advantages and every aggregation
    denominator on it, identically; each trains on ``rows`` (its share of the prompts). The loss the ranks
    backpropagate is ``world × aggregate(terms, mask, group)`` with the other ranks' terms set to 0 by
    ``scatter``: the aggregations are linear in the per-token terms, so these sum over the ranks to the
    whole-batch loss, and FSDP's mean of the ranks' gradients is its gradient. ``gather`` assembles per-token
    values of the whole batch (for logging: IS ratios of ICLR App. A.19, entropy of App. A.12) on every rank."""

    def __init__(self) -> None:
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()

    @staticmethod
    def check_linear(aggregate: Callable[[Tensor, Tensor, Tensor], Tensor], name: str) -> None:
        """Refuse an aggregation (§3.2, Fig. 14a) that is not linear in the per-token terms: its whole-batch loss would
        not be the sum of the ranks' shares. The registered ones (prompt, sample, token) are linear."""
        gen = torch.Generator().manual_seed(0)
        a, b = torch.randn(2, 4, 6, generator=gen, dtype=torch.float64)
        mask = (torch.rand(4, 6, generator=gen) > 0.3).double()
        group = torch.tensor([0, 0, 1, 2])
        terms = [aggregate(x * mask, mask, group) for x in (a, b, a + 3 * b)]
        if not torch.allclose(terms[2], terms[0] + 3 * terms[1]):
            raise UserError(
                f"algo.aggregation: {name!r} is not linear in the per-token terms, so a batch cannot be split "
                "over ranks; run it on one rank"
            )

    def rows(self, group: Tensor) -> RankRows:
        """This rank's prompts: contiguous chunks of the batch's groups, sizes differing by at most one."""
        groups = torch.unique(group)
        mine = torch.tensor_split(groups, self.world)[self.rank]
        if mine.numel() == 0:
            stand_in = torch.zeros_like(group, dtype=torch.bool)
            stand_in[0] = True
            return RankRows(stand_in, owned=False)
        return RankRows(torch.isin(group, mine), owned=True)

    def scatter(self, local: Tensor, rows: RankRows) -> Tensor:
        """``local`` [n, ...] (this rank's rows) placed in a zero tensor [N, ...] of the whole batch,
        differentiably (a stand-in row counts 0)."""
        index = rows.mask.nonzero().squeeze(1)
        full = local.new_zeros((rows.mask.numel(), *local.shape[1:]))
        return full.index_copy(0, index, local if rows.owned else local * 0)

    def gather(self, local: Tensor, rows: RankRows) -> Tensor:
        """``local`` [n, ...] of every rank assembled into [N, ...] of the whole batch, on every rank."""
        full = self.scatter(local.detach(), rows)
        dist.all_reduce(full)
        return full

    def state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
        return full_trainer_state(model, optimizer)

    def load(self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> dict[str, Any]:
        """Load rank 0's trainer ``state`` (the others pass ``{}``); returns its small entries (everything but
        ``model`` and ``optimizer``) on every rank."""
        small = broadcast_object({k: v for k, v in state.items() if k not in ("model", "optimizer")})
        load_full_trainer_state(model, optimizer, state.get("model", {}), state.get("optimizer", {}))
        return small
