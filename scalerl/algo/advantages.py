"""Advantages (§3.2, Fig. 14b): group-mean baseline, then a normalisation picked by name.

``Â_i = r_i − mean_group(r)`` for every sequence ``i``; ``ADVANTAGE_NORMS`` then divides it:

* ``batch`` (ScaleRL, REINFORCE++, Magistral): by the std of all ``Â`` in the batch, plus ``eps``.
* ``prompt`` (GRPO): by the std of the group's rewards, plus ``eps``.
* ``none`` (Dr. GRPO): not at all.

Standard deviations are population stds (divide by the count), the ``std({r_j})`` of Eq. 5. Because the
baseline and both stds are shift-invariant and scale-equivariant, ±1 and 0/1 rewards give identical
``batch``/``prompt`` advantages; with ``none`` the ±1 ones are twice the 0/1 ones.

Order with zero-variance filtering (§3.2, Fig. 6a), which the paper leaves open: the trainer filters first and
computes advantages on the kept groups only, so the ``batch`` std is taken *after* filtering. Dropped groups
have ``Â = 0`` and never enter the loss; counting their zeros in the std would shrink it and inflate every
kept advantage by an amount that depends on how many prompts happened to be all-solved or all-failed in the
batch. After filtering, the advantages that do enter the loss have unit scale whatever that fraction.
"""

from __future__ import annotations

from typing import Callable

from torch import Tensor

from scalerl.algo.groups import group_index, group_mean
from scalerl.registry import Registry

# (centred advantages [N], group inverse index [N], n_groups, eps) -> normalised advantages [N]
Normalisation = Callable[[Tensor, Tensor, int, float], Tensor]

ADVANTAGE_NORMS: Registry[Normalisation] = Registry("advantage normalisation")


@ADVANTAGE_NORMS.register("batch")
def batch_norm(centred: Tensor, inverse: Tensor, n_groups: int, eps: float) -> Tensor:
    """Divide by the std of every advantage in the batch (the paper's ``Â_std``)."""
    return centred / (centred.std(correction=0) + eps)


@ADVANTAGE_NORMS.register("prompt")
def prompt_norm(centred: Tensor, inverse: Tensor, n_groups: int, eps: float) -> Tensor:
    """Divide by the group's reward std (= the std of its centred rewards)."""
    group_std = group_mean(centred.square(), inverse, n_groups).sqrt()
    return centred / (group_std[inverse] + eps)


@ADVANTAGE_NORMS.register("none")
def no_norm(centred: Tensor, inverse: Tensor, n_groups: int, eps: float) -> Tensor:
    """Keep the group-centred rewards as they are."""
    return centred


def compute_advantages(rewards: Tensor, group: Tensor, norm: str = "batch", eps: float = 1e-6) -> Tensor:
    """Per-sequence advantages [N] from rewards [N] and prompt ids ``group`` [N] (§3.2, Fig. 14b).

    Call it on the sequences kept by zero-variance filtering (see the module docstring)."""
    if rewards.shape != group.shape or rewards.dim() != 1:
        raise ValueError(f"rewards and group must both be [N], got {tuple(rewards.shape)}, {tuple(group.shape)}")
    normalise = ADVANTAGE_NORMS.get(norm, "algo.advantages.norm")
    values = rewards if rewards.is_floating_point() else rewards.float()
    if values.numel() == 0:
        return values.clone()
    inverse, n_groups = group_index(group)
    centred = values - group_mean(values, inverse, n_groups)[inverse]
    return normalise(centred, inverse, n_groups, eps)
