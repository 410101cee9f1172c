"""Zero-variance filtering (§3.6, Fig. 6a).

A prompt whose G generations all got the same reward has zero advantage and so contributes no gradient;
ScaleRL drops such groups from the loss (Seed1.5-Thinking) and, unlike DAPO's dynamic sampling, does not
refill the batch. With 0/1 rewards this is the paper's condition ``0 < mean({r_j}) < 1``; with the ±1 rewards
of A.3 it reads "not all correct and not all incorrect". Both reduce to "the group's rewards are not all
equal", which is what is tested here (exact equality: rewards are discrete).
"""

from __future__ import annotations

from torch import Tensor

from scalerl.algo.groups import group_extreme, group_index


def _constant_groups(rewards: Tensor, group: Tensor) -> tuple[Tensor, Tensor]:
    """``(inverse [N], constant [n_groups] bool)``."""
    if rewards.shape != group.shape:
        raise ValueError(f"rewards and group must both be [N], got {tuple(rewards.shape)}, {tuple(group.shape)}")
    inverse, n_groups = group_index(group)
    values = rewards.float() if not rewards.is_floating_point() else rewards
    lo = group_extreme(values, inverse, n_groups, "amin")
    hi = group_extreme(values, inverse, n_groups, "amax")
    return inverse, lo == hi


def zero_variance_mask(rewards: Tensor, group: Tensor) -> Tensor:
    """Bool [N]: True for sequences whose group has some reward variance (kept), False for the rest."""
    inverse, constant = _constant_groups(rewards, group)
    return ~constant[inverse]


def zero_variance_frac(rewards: Tensor, group: Tensor) -> float:
    """Fraction of groups (prompts) that the filter drops; 0.0 for an empty batch (``train/zero_var_frac``)."""
    _, constant = _constant_groups(rewards, group)
    return float(constant.float().mean()) if constant.numel() else 0.0
