"""Per-prompt group reductions over a flat batch of sequences.

A batch holds ``N`` sequences; ``group`` [N] (long) gives the prompt each one answers. Group ids need not be
contiguous or sorted (after zero-variance filtering some ids are gone), so every reduction first maps them
onto ``0..n_groups-1``. Used by advantages (§3.2, Fig. 14b), zero-variance filtering (§3.2, Fig. 6a) and prompt-level loss
aggregation (§3.2, Fig. 14a).
"""

from __future__ import annotations

import torch
from torch import Tensor


def group_index(group: Tensor) -> tuple[Tensor, int]:
    """``(inverse, n_groups)``: ``inverse[i]`` in ``0..n_groups-1`` is sequence ``i``'s group."""
    if group.dim() != 1:
        raise ValueError(f"group must be 1-D [N], got shape {tuple(group.shape)}")
    uniq, inverse = torch.unique(group, return_inverse=True)
    return inverse, int(uniq.numel())


def group_sum(values: Tensor, inverse: Tensor, n_groups: int) -> Tensor:
    """Sum of ``values`` [N] within each group -> [n_groups] (differentiable)."""
    out = torch.zeros(n_groups, dtype=values.dtype, device=values.device)
    return out.index_add(0, inverse, values)


def group_mean(values: Tensor, inverse: Tensor, n_groups: int) -> Tensor:
    """Mean of ``values`` [N] within each group -> [n_groups]."""
    counts = torch.bincount(inverse, minlength=n_groups).to(values.dtype)
    return group_sum(values, inverse, n_groups) / counts


def group_extreme(values: Tensor, inverse: Tensor, n_groups: int, reduce: str) -> Tensor:
    """``reduce`` = ``"amin"`` or ``"amax"`` of ``values`` [N] within each group -> [n_groups]."""
    out = torch.zeros(n_groups, dtype=values.dtype, device=values.device)
    return out.scatter_reduce(0, inverse, values, reduce=reduce, include_self=False)


def safe_ratio(num: Tensor, den: Tensor) -> Tensor:
    """``num / den`` elementwise, 0 where ``den == 0`` (there ``num`` is a sum over nothing), with no NaN
    in the value or the gradient."""
    return num / torch.where(den > 0, den, torch.ones_like(den))
