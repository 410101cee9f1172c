"""Advantages (§3.2, Fig. 14b) and zero-variance filtering (§3.2, Fig. 6a), hand-checked."""

from __future__ import annotations

import math

import pytest
import torch

from scalerl.algo.advantages import ADVANTAGE_NORMS, compute_advantages
from scalerl.algo.filters import zero_variance_frac, zero_variance_mask
from scalerl.errors import UserError

# group 7: one of four correct; group 3: two of four (ids need not be contiguous or sorted)
REWARDS = torch.tensor([1.0, -1.0, -1.0, -1.0, 1.0, 1.0, -1.0, -1.0])
GROUP = torch.tensor([7, 7, 7, 7, 3, 3, 3, 3])
CENTRED = torch.tensor([1.5, -0.5, -0.5, -0.5, 1.0, 1.0, -1.0, -1.0])


def test_registered_norms():
    assert ADVANTAGE_NORMS.names() == ["batch", "none", "prompt"]


def test_none_is_group_mean_baseline():
    torch.testing.assert_close(compute_advantages(REWARDS, GROUP, "none"), CENTRED)


def test_prompt_norm_divides_by_group_std():
    std7 = math.sqrt((2.25 + 3 * 0.25) / 4)  # population std of (1, -1, -1, -1)
    expected = torch.cat([CENTRED[:4] / (std7 + 1e-6), CENTRED[4:] / (1.0 + 1e-6)])
    torch.testing.assert_close(compute_advantages(REWARDS, GROUP, "prompt", eps=1e-6), expected)


def test_batch_norm_divides_by_std_of_all_advantages():
    batch_std = math.sqrt((2.25 + 3 * 0.25 + 4 * 1.0) / 8)
    out = compute_advantages(REWARDS, GROUP, "batch", eps=1e-6)
    torch.testing.assert_close(out, CENTRED / (batch_std + 1e-6))
    assert out.std(correction=0).item() == pytest.approx(1.0, abs=1e-5)


def test_zero_one_and_plus_minus_one_rewards_agree_after_normalisation():
    zero_one = (REWARDS + 1) / 2
    for norm in ("batch", "prompt"):
        torch.testing.assert_close(
            compute_advantages(zero_one, GROUP, norm, eps=1e-9), compute_advantages(REWARDS, GROUP, norm, eps=1e-9)
        )
    doubled = 2 * compute_advantages(zero_one, GROUP, "none")
    torch.testing.assert_close(compute_advantages(REWARDS, GROUP, "none"), doubled)


def test_constant_group_gets_zero_advantage_and_integer_rewards_work():
    out = compute_advantages(torch.tensor([1, 1, 0, 1]), torch.tensor([0, 0, 1, 1]), "prompt")
    assert out.dtype == torch.float32
    assert out[:2].tolist() == [0.0, 0.0]
    assert out[2].item() == pytest.approx(-1.0, abs=1e-5) and out[3].item() == pytest.approx(1.0, abs=1e-5)
    assert compute_advantages(torch.zeros(0), torch.zeros(0, dtype=torch.long)).numel() == 0


def test_unknown_norm_is_a_user_error():
    with pytest.raises(UserError, match="algo.advantages.norm: unknown advantage normalisation 'std'"):
        compute_advantages(REWARDS, GROUP, "std")


@pytest.mark.parametrize(("low", "high"), [(-1.0, 1.0), (0.0, 1.0)])
def test_zero_variance_filter_removes_exactly_the_constant_groups(low, high):
    rewards = torch.tensor([high, high, high, low, low, low, high, low, low, high])
    group = torch.tensor([0, 0, 0, 1, 1, 1, 4, 4, 9, 9])
    keep = zero_variance_mask(rewards, group)
    assert keep.tolist() == [False] * 6 + [True] * 4
    assert zero_variance_frac(rewards, group) == pytest.approx(2 / 4)
    kept = compute_advantages(rewards[keep], group[keep], "batch")
    assert kept.abs().min().item() > 0.5  # every kept sequence carries signal


def test_zero_variance_edge_cases():
    assert zero_variance_frac(torch.zeros(0), torch.zeros(0, dtype=torch.long)) == 0.0
    assert zero_variance_mask(torch.tensor([1, 0]), torch.tensor([0, 0])).tolist() == [True, True]
    assert zero_variance_mask(torch.tensor([1.0]), torch.tensor([0])).tolist() == [False]  # a lone sample
