"""Zero-variance filtering (§3.2, Fig. 6a).

A prompt whose G generations are all correct or all incorrect has no learning signal; ScaleRL drops such
groups from the loss (Seed1.5-Thinking) and, unlike DAPO's dynamic sampling, does not refill the batch. The
paper's condition ``0 < mean({r_j}) < 1`` is on the 0/1 (or ±1, A.3) *correctness* reward, so the trainer passes
correctness here, not the shaped reward: under DAPO's length penalty an all-correct group of differing lengths
has unequal shaped rewards, and keeping it would turn length differences into unit-scale advantages under
prompt-level normalisation (DAPO's dynamic sampling also filters on accuracy). The test is "the values are not
all equal" (exact equality: the values are discrete).
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
    """Fraction of the groups (prompts) in ``rewards``/``group`` that the filter drops; 0.0 for an empty batch
    (``train/zero_var_frac``: the batch stage passes the sequences the filter sees, those still kept after the
    staleness guard and the truncation step, each truncated one read as incorrect)."""
    _, constant = _constant_groups(rewards, group)
    return float(constant.float().mean()) if constant.numel() else 0.0
