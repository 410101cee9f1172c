"""Loss aggregation (§3.2, Fig. 14a): hand values and the weight invariants of prompt, sample and token averaging."""

from __future__ import annotations

import pytest
import torch

from scalerl.algo.aggregation import AGGREGATIONS


def _mask(lengths: list[int], width: int = 6) -> torch.Tensor:
    return (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).double()


def _token_weights(name: str, mask: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """d(aggregate)/d(per_token): the weight each token gets."""
    per_token = torch.zeros(mask.shape, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(AGGREGATIONS.get(name)(per_token, mask, group), per_token)
    return g


GROUP = torch.tensor([0, 0, 1, 1])


def test_hand_values():
    per_token = torch.tensor([[1.0, 3.0, 0.0], [2.0, 0.0, 0.0], [4.0, 4.0, 4.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    group = torch.tensor([5, 5, 2, 2])  # ids need not be contiguous; seq 3 has no tokens
    # prompt: group 5 -> (1+3+2)/3 = 2, group 2 -> 12/3 = 4 -> mean 3
    assert AGGREGATIONS.get("prompt")(per_token, mask, group).item() == pytest.approx(3.0)
    # sample: seq means 2, 2, 4 (empty seq left out) -> 8/3
    assert AGGREGATIONS.get("sample")(per_token, mask, group).item() == pytest.approx(8 / 3)
    # token: 18 / 6
    assert AGGREGATIONS.get("token")(per_token, mask, group).item() == pytest.approx(3.0)


def test_prompt_lengthening_a_sample_leaves_other_prompts_weight_unchanged():
    short = _token_weights("prompt", _mask([2, 3, 4, 1]), GROUP)
    longer = _token_weights("prompt", _mask([6, 3, 4, 1]), GROUP)
    torch.testing.assert_close(short[2:], longer[2:])  # prompt 1 untouched
    assert short[2:].sum().item() == pytest.approx(0.5)
    assert longer[:2].sum().item() == pytest.approx(0.5)  # each prompt weighs 1/#prompts
    # within a prompt every token weighs the same
    w = longer[:2][_mask([6, 3, 4, 1])[:2] > 0]
    torch.testing.assert_close(w, torch.full_like(w, 0.5 / 9))


def test_sample_every_sequence_weighs_the_same_whatever_its_length():
    w = _token_weights("sample", _mask([1, 3, 6, 2]), GROUP)
    torch.testing.assert_close(w.sum(dim=1), torch.full((4,), 0.25, dtype=torch.float64))


def test_token_every_token_weighs_the_same():
    mask = _mask([1, 3, 6, 2])
    w = _token_weights("token", mask, GROUP)
    torch.testing.assert_close(w, mask / 12)


def test_prompt_differs_from_token_when_groups_have_different_lengths():
    mask = _mask([1, 1, 6, 6])
    per_token = torch.cat([torch.full((2, 6), 1.0), torch.full((2, 6), 0.0)]) * mask
    assert AGGREGATIONS.get("prompt")(per_token, mask, GROUP).item() == pytest.approx(0.5)
    assert AGGREGATIONS.get("token")(per_token, mask, GROUP).item() == pytest.approx(2 / 14)


def test_fractional_weights_count_proportionally():
    per_token = torch.tensor([[2.0, 4.0]])
    mask = torch.tensor([[1.0, 0.5]])
    for name in AGGREGATIONS:
        assert AGGREGATIONS.get(name)(per_token, mask, torch.tensor([0])).item() == pytest.approx(4.0 / 1.5)


@pytest.mark.parametrize("name", ["prompt", "sample", "token"])
def test_groups_without_tokens_drop_out_and_empty_batch_gives_zero(name):
    mask = _mask([2, 2, 0, 0])
    w = _token_weights(name, mask, GROUP)
    assert w[:2].sum().item() == pytest.approx(1.0)  # the empty prompt does not dilute the other
    per_token = torch.zeros(2, 3, requires_grad=True)
    out = AGGREGATIONS.get(name)(per_token, torch.zeros(2, 3), torch.tensor([0, 1]))
    assert out.item() == 0.0
    (g,) = torch.autograd.grad(out, per_token)
    assert torch.isfinite(g).all()


def test_shape_mismatch_is_a_bug():
    with pytest.raises(ValueError, match="group"):
        AGGREGATIONS.get("prompt")(torch.zeros(2, 3), torch.ones(2, 3), torch.tensor([0, 0, 1]))
