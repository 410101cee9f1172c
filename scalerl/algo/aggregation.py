"""Loss aggregation (§3.2, Fig. 14a): how per-token terms become one scalar, independent of the loss.

``AGGREGATIONS.get(name)(per_token, mask, group) -> scalar``, with ``per_token`` [N, T] (from a loss),
``mask`` [N, T] float token weights, ``group`` [N] long prompt index of each sequence. A token with weight
``w`` counts ``w`` times; in ``per_token`` it must already be 0 where ``w`` is 0.

* ``prompt`` (ScaleRL, DAPO Eq. 8): within a prompt, the weighted sum over all of its group's tokens divided
  by the group's total weight; then a uniform mean over prompts. Each prompt weighs the same, and within a
  prompt every token does.
* ``sample`` (GRPO Eq. 3/7): each sequence's weighted token mean, then a mean over sequences. Each sequence
  weighs the same whatever its length.
* ``token``: the weighted mean over every token in the batch. Each token weighs the same.

A sequence (or a prompt's whole group) with zero total weight has no terms and is left out of the mean it
would belong to, rather than counted as a 0 that dilutes the others; zero-variance filtered groups
(§3.2, Fig. 6a) therefore drop out of ``prompt`` and ``sample`` means when the trainer zeros their weights. A batch
with no weighted token at all gives a 0 that is still attached to the graph.
"""

from __future__ import annotations

from typing import Callable

from torch import Tensor

from scalerl.algo.groups import group_index, group_sum, safe_ratio
from scalerl.registry import Registry

Aggregation = Callable[[Tensor, Tensor, Tensor], Tensor]

AGGREGATIONS: Registry[Aggregation] = Registry("aggregation")


def _sequence_sums(per_token: Tensor, mask: Tensor, group: Tensor) -> tuple[Tensor, Tensor]:
    """Per-sequence weighted term sums and total weights, both [N]."""
    if per_token.dim() != 2 or per_token.shape != mask.shape:
        raise ValueError(
            f"per_token and mask must share one [N, T] shape, got {tuple(per_token.shape)}, {tuple(mask.shape)}"
        )
    if group.shape != per_token.shape[:1]:
        raise ValueError(f"group must be [N] = [{per_token.shape[0]}], got {tuple(group.shape)}")
    weights = mask.to(per_token.dtype)
    return (per_token * weights).sum(dim=1), weights.sum(dim=1)


def _mean_of_units(num: Tensor, den: Tensor) -> Tensor:
    """Uniform mean of ``num / den`` over the units (sequences or prompts) with ``den > 0``."""
    units = (den > 0).sum().clamp(min=1)
    return safe_ratio(num, den).sum() / units


@AGGREGATIONS.register("prompt")
def prompt_mean(per_token: Tensor, mask: Tensor, group: Tensor) -> Tensor:
    """Per-prompt token mean, then uniform mean over prompts (ScaleRL's choice, highest A in Fig. 14a)."""
    num, den = _sequence_sums(per_token, mask, group)
    inverse, n_groups = group_index(group)
    return _mean_of_units(group_sum(num, inverse, n_groups), group_sum(den, inverse, n_groups))


@AGGREGATIONS.register("sample")
def sample_mean(per_token: Tensor, mask: Tensor, group: Tensor) -> Tensor:
    """Per-sequence token mean, then mean over sequences (GRPO)."""
    num, den = _sequence_sums(per_token, mask, group)
    return _mean_of_units(num, den)


@AGGREGATIONS.register("token")
def token_mean(per_token: Tensor, mask: Tensor, group: Tensor) -> Tensor:
    """Weighted mean over all tokens of the batch."""
    num, den = _sequence_sums(per_token, mask, group)
    return safe_ratio(num.sum(), den.sum())
