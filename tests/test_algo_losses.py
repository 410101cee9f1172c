"""Losses (§3.2, §4): values and gradients on hand-worked batches, checked against autograd."""

from __future__ import annotations

import math

import pytest
import torch

from scalerl.algo.losses import LOSSES, CISPOLoss, ClipLoss, DAPOLoss, GSPOLoss, ReinforceLoss

STAT_KEYS = {"is_ratio_mean", "is_ratio_max", "is_ratio_min", "is_ratio_capped_frac"}


def _leaf(values: list[list[float]]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64, requires_grad=True)


def _grad(loss, logp, gen_logp, adv, mask) -> tuple[torch.Tensor, torch.Tensor, dict]:
    out = loss(logp, gen_logp, adv, mask)
    (g,) = torch.autograd.grad(out.per_token.sum(), logp)
    return out.per_token.detach(), g, out.stats


def test_registry_names_and_defaults():
    assert LOSSES.names() == ["cispo", "dapo", "grpo", "gspo", "ppo", "reinforce"]
    assert LOSSES.get("cispo")().eps_max == 4.0
    assert (LOSSES.get("dapo")().eps_low, LOSSES.get("dapo")().eps_high) == (0.2, 0.28)
    assert (LOSSES.get("grpo")().eps_low, LOSSES.get("grpo")().eps_high) == (0.2, 0.2)
    assert (LOSSES.get("ppo")().eps_low, LOSSES.get("ppo")().eps_high) == (0.2, 0.2)
    assert (LOSSES.get("gspo")().eps_low, LOSSES.get("gspo")().eps_high) == (3e-3, 5e-3)


def test_cispo_cap_fires_exactly_above_eps_and_gradient_is_capped_weight_times_advantage():
    rhos = [0.5, 3.9, 4.0, 4.1, 10.0]
    logp = _leaf([[-1.0, -2.0, -0.5, -3.0, -0.1]])
    gen_logp = logp.detach() - torch.tensor([[math.log(r) for r in rhos]], dtype=torch.float64)
    adv = torch.tensor([0.7], dtype=torch.float64)
    mask = torch.ones(1, 5, dtype=torch.float64)
    per_token, g, stats = _grad(CISPOLoss(eps_max=4.0), logp, gen_logp, adv, mask)
    weights = torch.tensor([[0.5, 3.9, 4.0, 4.0, 4.0]], dtype=torch.float64)
    torch.testing.assert_close(g, -weights * 0.7)  # d/dlogp of -sg(w)·Â·logp, token by token
    torch.testing.assert_close(per_token, -weights * 0.7 * logp.detach())
    assert stats["is_ratio_capped_frac"] == pytest.approx(2 / 5)  # 4.1 and 10, not 4.0
    assert stats["is_ratio_max"] == pytest.approx(10.0)
    assert stats["is_ratio_min"] == pytest.approx(0.5)
    assert stats["is_ratio_mean"] == pytest.approx(sum(rhos) / 5)
    # no lower truncation: a tiny ratio keeps its (tiny) weight
    _, g_small, _ = _grad(CISPOLoss(), logp, logp.detach() + 5.0, adv, mask)
    torch.testing.assert_close(g_small, torch.full_like(g_small, -math.exp(-5.0) * 0.7))


def test_cispo_gradient_matches_autograd_on_a_toy_policy():
    torch.manual_seed(0)
    theta = torch.randn(3, 4, 6, dtype=torch.float64, requires_grad=True)  # [N, T, V] logits
    tokens = torch.randint(0, 6, (3, 4))
    logp = torch.log_softmax(theta, -1).gather(-1, tokens[..., None]).squeeze(-1)
    gen_logp = logp.detach() + torch.tensor([[0.3, -2.0, 0.1, -0.2]] * 3, dtype=torch.float64)  # ρ up to e²
    adv = torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.float64)
    loss = CISPOLoss(eps_max=4.0)
    (g,) = torch.autograd.grad(loss(logp, gen_logp, adv, mask).per_token.sum(), theta, retain_graph=True)
    rho = (logp - gen_logp).detach().exp()
    coef = -torch.clamp(rho, max=4.0) * adv[:, None] * mask  # sg(min(ρ, ε))·Â per token
    (expected,) = torch.autograd.grad((coef * logp).sum(), theta)
    torch.testing.assert_close(g, expected)
    assert (rho[mask > 0] > 4.0).any()  # the cap is exercised


def test_cispo_anchor_is_the_generator_not_the_trainer():
    logp = _leaf([[-1.0, -1.0]])
    out = CISPOLoss(eps_max=2.0)(logp, logp.detach() - math.log(3.0), torch.tensor([1.0]), torch.ones(1, 2))
    assert out.stats["is_ratio_mean"] == pytest.approx(3.0)
    assert out.stats["is_ratio_capped_frac"] == 1.0


@pytest.mark.parametrize("loss", [ClipLoss(), ClipLoss(eps_low=0.2, eps_high=0.2), DAPOLoss()])
def test_clip_losses_clip_on_the_correct_side(loss):
    lo, hi = 1 - loss.eps_low, 1 + loss.eps_high
    rhos = [lo - 0.1, lo + 0.05, 1.0, hi - 0.05, hi + 0.1]
    logp = _leaf([[math.log(r) for r in rhos]] * 2)
    gen_logp = torch.zeros(2, 5, dtype=torch.float64)
    adv = torch.tensor([2.0, -3.0], dtype=torch.float64)
    per_token, g, stats = _grad(loss, logp, gen_logp, adv, torch.ones(2, 5))
    rho = torch.tensor(rhos, dtype=torch.float64)
    # positive advantage: only the upper side clips (last token); the low ratio keeps its gradient
    torch.testing.assert_close(g[0], torch.tensor([-2.0 * r if r <= hi else 0.0 for r in rhos], dtype=torch.float64))
    # negative advantage: only the lower side clips (first token)
    torch.testing.assert_close(g[1], torch.tensor([3.0 * r if r >= lo else 0.0 for r in rhos], dtype=torch.float64))
    expected = -torch.minimum(rho[None] * adv[:, None], rho.clamp(lo, hi)[None] * adv[:, None])
    torch.testing.assert_close(per_token, expected)
    assert per_token[0, 4].item() == pytest.approx(-2.0 * hi)
    assert per_token[1, 0].item() == pytest.approx(3.0 * lo)
    assert stats["clip_high_frac"] == pytest.approx(1 / 10)
    assert stats["clip_low_frac"] == pytest.approx(1 / 10)
    assert stats["is_ratio_capped_frac"] == pytest.approx(2 / 10)


def test_dapo_upper_bound_is_higher_than_grpo():
    logp = _leaf([[math.log(1.25)]])
    adv = torch.tensor([1.0])
    _, g_grpo, _ = _grad(LOSSES.get("grpo")(), logp, torch.zeros(1, 1), adv, torch.ones(1, 1))
    _, g_dapo, _ = _grad(LOSSES.get("dapo")(), logp, torch.zeros(1, 1), adv, torch.ones(1, 1))
    assert g_grpo.item() == 0.0  # 1.25 > 1.2: clipped
    assert g_dapo.item() == pytest.approx(-1.25)  # 1.25 < 1.28: not clipped


def test_gspo_ratio_is_length_normalised_sequence_ratio_shared_by_tokens():
    logp = _leaf([[-1.0, -2.0, -3.0, -50.0], [-0.5, -0.5, -9.0, -9.0]])
    gen_logp = torch.tensor([[-1.001, -2.004, -2.998, 0.0], [-0.5, -0.499, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.float64)
    loss = GSPOLoss()
    ratio = loss.ratio(logp, gen_logp, mask)
    s0 = math.exp((0.001 + 0.004 - 0.002) / 3)
    s1 = math.exp((0.0 - 0.001) / 2)
    torch.testing.assert_close(ratio.detach(), torch.tensor([[s0] * 4, [s1] * 4], dtype=torch.float64))
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    per_token, g, stats = _grad(loss, logp, gen_logp, adv, mask)
    # both ratios inside [1 - 3e-3, 1 + 5e-3]: term -s·Â on every masked token, gradient -s·Â·|y|/|y| per token
    torch.testing.assert_close(per_token, torch.tensor([[-s0] * 3 + [0.0], [s1] * 2 + [0.0] * 2], dtype=torch.float64))
    torch.testing.assert_close(g, torch.tensor([[-s0] * 3 + [0.0], [s1] * 2 + [0.0] * 2], dtype=torch.float64))
    assert stats["seq_ratio_max"] == pytest.approx(s0)
    assert stats["seq_ratio_min"] == pytest.approx(s1)


def test_gspo_clips_the_sequence_ratio():
    logp = _leaf([[0.01, 0.01], [-0.01, -0.01]])  # s = e^0.01 > 1.005 and e^-0.01 < 0.997
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    _, g, stats = _grad(GSPOLoss(), logp, torch.zeros(2, 2, dtype=torch.float64), adv, torch.ones(2, 2))
    assert torch.count_nonzero(g) == 0
    assert stats["is_ratio_capped_frac"] == 1.0
    _, g_flip, _ = _grad(GSPOLoss(), logp, torch.zeros(2, 2, dtype=torch.float64), -adv, torch.ones(2, 2))
    assert torch.count_nonzero(g_flip) == 4  # the other side is not clipped


def test_reinforce_is_plain_policy_gradient():
    logp = _leaf([[-1.0, -2.0], [-0.5, -0.25]])
    gen_logp = torch.tensor([[-3.0, 0.0], [-0.5, 0.0]], dtype=torch.float64)
    per_token, g, stats = _grad(ReinforceLoss(), logp, gen_logp, torch.tensor([0.5, -2.0]), torch.ones(2, 2))
    torch.testing.assert_close(per_token, torch.tensor([[0.5, 1.0], [-1.0, -0.5]], dtype=torch.float64))
    torch.testing.assert_close(g, torch.tensor([[-0.5, -0.5], [2.0, 2.0]], dtype=torch.float64))
    assert stats["is_ratio_capped_frac"] == 0.0


@pytest.mark.parametrize("name", LOSSES.names())
def test_masked_tokens_are_zero_without_nan_and_stats_are_reported(name):
    logp = _leaf([[-1.0, -1e4], [-0.2, -0.3]])  # padding log-prob far off
    gen_logp = torch.tensor([[-1.1, 0.0], [-0.25, -0.3]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    per_token, g, stats = _grad(LOSSES.get(name)(), logp, gen_logp, torch.tensor([1.0, -1.0]), mask)
    assert per_token[0, 1] == 0 and g[0, 1] == 0
    assert torch.isfinite(g).all()
    assert STAT_KEYS <= stats.keys()
    assert all(isinstance(v, float) for v in stats.values())
    # nothing masked in: neutral stats, zero terms
    empty = LOSSES.get(name)()(logp, gen_logp, torch.tensor([1.0, -1.0]), torch.zeros(2, 2))
    assert torch.count_nonzero(empty.per_token) == 0
    assert empty.stats["is_ratio_mean"] == 1.0 and empty.stats["is_ratio_capped_frac"] == 0.0


@pytest.mark.parametrize(
    ("name", "params", "field"),
    [
        ("cispo", {"eps_max": -1.0}, "eps_max"),
        ("cispo", {"eps_max": 0}, "eps_max"),
        ("cispo", {"eps_max": True}, "eps_max"),
        ("dapo", {"eps_low": -0.2}, "eps_low"),
        ("ppo", {"eps_high": "0.2"}, "eps_high"),
        ("gspo", {"eps_high": -5e-3}, "eps_high"),
    ],
)
def test_invalid_hyperparameters_name_the_field(name, params, field):
    with pytest.raises(ValueError, match=rf"^{field}: "):
        LOSSES.get(name)(**params)


def test_integer_hyperparameters_are_accepted_as_floats():
    assert CISPOLoss(eps_max=5).eps_max == 5.0
    assert isinstance(CISPOLoss(eps_max=5).eps_max, float)


def test_shape_mismatch_is_a_bug():
    with pytest.raises(ValueError, match="shape"):
        CISPOLoss()(torch.zeros(2, 3), torch.zeros(2, 4), torch.zeros(2), torch.ones(2, 3))
    with pytest.raises(ValueError, match="advantages"):
        CISPOLoss()(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(3), torch.ones(2, 3))
