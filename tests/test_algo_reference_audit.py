"""Independent audit of the algorithm registries against reference implementations written from the paper's
formulas (ScaleRL, arXiv 2510.13786: the losses, advantage normalisations and loss aggregations of §3, and the
ScaleRL objective of §4).

Every registered loss (``LOSSES``), advantage normalisation (``ADVANTAGE_NORMS``) and aggregation
(``AGGREGATIONS``) is compared, values and autograd gradients, against a naive loop-based reference here, on
random batches and on edge cases: zero-variance groups, a single sample, padded and all-masked rows, ratios far
outside the clip range on both sides, mixed lengths, truncated (zero-weight) samples. The references are plain
Python loops over prompts and sequences so that they share no code path with ``scalerl.algo``.

Conventions the references share with the code (documented there, not fixed by the paper):
* per-token loss terms are the *negated* objective (a quantity to minimise), 0 off the mask;
* stds are population stds (Eq. 5's ``std({r_j})``), ``eps`` added to the std;
* a sequence / prompt with no weighted token is left out of the mean it would belong to.
"""

from __future__ import annotations

import math

import pytest
import torch

from scalerl.algo import (
    ADVANTAGE_NORMS,
    AGGREGATIONS,
    LOSSES,
    compute_advantages,
    zero_variance_mask,
)
from scalerl.algo.losses import CISPOLoss, ClipLoss, DAPOLoss, GSPOLoss, ReinforceLoss

DT = torch.float64


# ---------------------------------------------------------------------------------------------- references


def ref_advantages(rewards: list[float], group: list[int], norm: str, eps: float) -> list[float]:
    """§3.2 (Fig. 14b): Â_i = r_i − mean_group(r); batch: Â / (std over all Â in the batch + eps);
    prompt: Â / (std_group(r) + eps); none: Â."""
    groups = sorted(set(group))
    members = {g: [i for i, gi in enumerate(group) if gi == g] for g in groups}
    mean = {g: sum(rewards[i] for i in members[g]) / len(members[g]) for g in groups}
    std = {
        g: math.sqrt(sum((rewards[i] - mean[g]) ** 2 for i in members[g]) / len(members[g])) for g in groups
    }
    centred = [rewards[i] - mean[group[i]] for i in range(len(rewards))]
    if norm == "none":
        return centred
    if norm == "prompt":
        return [centred[i] / (std[group[i]] + eps) for i in range(len(rewards))]
    assert norm == "batch"
    m = sum(centred) / len(centred)
    batch_std = math.sqrt(sum((c - m) ** 2 for c in centred) / len(centred))
    return [c / (batch_std + eps) for c in centred]


def ref_loss_terms(name: str, params: dict, logp: torch.Tensor, gen_logp: torch.Tensor, adv: torch.Tensor,
                   mask: torch.Tensor) -> torch.Tensor:
    """Per-token terms to minimise, [N, T], built element by element from the paper's formulas."""
    n, t = logp.shape
    rows = []
    for i in range(n):
        valid = [j for j in range(t) if mask[i, j] > 0]
        a = float(adv[i])
        if name == "gspo" and valid:
            # GSPO (§3.2): sequence ratio, length-normalised (s_i = (π/π_gen)^{1/|y_i|}), clipped like PPO
            s = torch.exp(sum(logp[i, j] - gen_logp[i, j] for j in valid) / len(valid))
            seq_term = -torch.minimum(s * a, torch.clamp(s, 1 - params["eps_low"], 1 + params["eps_high"]) * a)
        row = []
        for j in range(t):
            if j not in valid:
                row.append(torch.zeros((), dtype=logp.dtype))
                continue
            rho = torch.exp(logp[i, j] - gen_logp[i, j])
            if name == "cispo":
                # Eq. 4: sg(min(ρ, ε_max)) · Â · log π_train, no lower truncation (A.17.2)
                row.append(-torch.clamp(rho.detach(), max=params["eps_max"]) * a * logp[i, j])
            elif name in ("ppo", "grpo", "dapo"):
                # Eq. 3 / 7 / 8: min(ρÂ, clip(ρ, 1−ε−, 1+ε+)Â)
                clipped = torch.clamp(rho, 1 - params["eps_low"], 1 + params["eps_high"])
                row.append(-torch.minimum(rho * a, clipped * a))
            elif name == "reinforce":
                row.append(-a * logp[i, j])
            elif name == "gspo":
                row.append(seq_term)
            else:
                raise KeyError(name)
        rows.append(torch.stack(row))
    return torch.stack(rows)


def ref_aggregate(name: str, per_token: torch.Tensor, mask: torch.Tensor, group: list[int]) -> torch.Tensor:
    """§3.2 (Fig. 14a). prompt: per prompt Σ_i Σ_t wℓ / Σ_i Σ_t w, uniform mean over prompts; sample: per
    sequence Σ_t wℓ / Σ_t w, uniform mean over sequences; token: Σ wℓ / Σ w over the batch."""
    n = per_token.shape[0]
    if name == "token":
        den = float(mask.sum())
        return (per_token * mask).sum() / den if den > 0 else (per_token * 0).sum()
    if name == "sample":
        units = [(per_token[i] * mask[i]).sum() / mask[i].sum() for i in range(n) if float(mask[i].sum()) > 0]
    else:
        assert name == "prompt"
        units = []
        for g in sorted(set(group)):
            idx = [i for i in range(n) if group[i] == g]
            den = sum(float(mask[i].sum()) for i in idx)
            if den > 0:
                units.append(sum((per_token[i] * mask[i]).sum() for i in idx) / den)
    if not units:
        return (per_token * 0).sum()
    return torch.stack(units).mean()


def ref_sample_per_prompt(per_token: torch.Tensor, mask: torch.Tensor, group: list[int]) -> torch.Tensor:
    """The spec table's literal sample form: per prompt (1/G) Σ_i (1/|y_i|) Σ_t ℓ, then a mean over prompts."""
    per_prompt = []
    for g in sorted(set(group)):
        seqs = [(per_token[i] * mask[i]).sum() / mask[i].sum() for i in range(len(group))
                if group[i] == g and float(mask[i].sum()) > 0]
        if seqs:
            per_prompt.append(torch.stack(seqs).mean())
    return torch.stack(per_prompt).mean()


# ---------------------------------------------------------------------------------------------- batches

LOSS_PARAMS = {
    "cispo": {"eps_max": 4.0},
    "dapo": {"eps_low": 0.2, "eps_high": 0.26},
    "grpo": {"eps_low": 0.2, "eps_high": 0.2},
    "ppo": {"eps_low": 0.2, "eps_high": 0.2},
    "gspo": {"eps_low": 3e-3, "eps_high": 5e-3},
    "reinforce": {},
}


def _random_batch(seed: int, n_groups: int = 4, g: int = 4, t: int = 9, spread: float = 0.6):
    """Mixed lengths, a fully masked (truncated / dropped) row, log-ratios from small to far outside clip."""
    gen = torch.Generator().manual_seed(seed)
    n = n_groups * g
    logp = (-torch.rand(n, t, generator=gen, dtype=DT) * 3).requires_grad_(True)
    log_ratio = torch.randn(n, t, generator=gen, dtype=DT) * spread
    gen_logp = (logp.detach() - log_ratio)
    lengths = torch.randint(1, t + 1, (n,), generator=gen)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).to(DT)
    mask[3] = 0.0  # an all-masked row (a truncated sample left out of the loss)
    # padded positions carry garbage log-probs that must not leak into values or gradients
    gen_logp = torch.where(mask > 0, gen_logp, torch.full_like(gen_logp, -1e4))
    adv = torch.randn(n, generator=gen, dtype=DT)
    group = torch.arange(n_groups).repeat_interleave(g)
    return logp, gen_logp, adv, mask, group


def _make(name: str):
    return LOSSES.get(name)(**LOSS_PARAMS[name])


def _grad(value: torch.Tensor, leaf: torch.Tensor) -> torch.Tensor:
    (g,) = torch.autograd.grad(value, leaf, retain_graph=True)
    return g


# ---------------------------------------------------------------------------------------------- registries


def test_every_registered_entry_is_audited():
    assert set(LOSSES.names()) == set(LOSS_PARAMS)
    assert set(AGGREGATIONS.names()) == {"prompt", "sample", "token"}
    assert set(ADVANTAGE_NORMS.names()) == {"batch", "prompt", "none"}


# ---------------------------------------------------------------------------------------------- advantages


@pytest.mark.parametrize("norm", ["batch", "prompt", "none"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_advantages_match_reference(norm, seed):
    gen = torch.Generator().manual_seed(seed)
    group = torch.tensor([7, 7, 7, 2, 2, 9, 9, 9, 9, 4])  # unsorted, non-contiguous ids, a single-sample group
    rewards = torch.randint(0, 2, (10,), generator=gen).to(DT) * 2 - 1
    rewards[5:9] = 1.0  # a zero-variance group
    ours = compute_advantages(rewards, group, norm, eps=1e-6)
    ref = ref_advantages(rewards.tolist(), group.tolist(), norm, 1e-6)
    torch.testing.assert_close(ours, torch.tensor(ref, dtype=DT), rtol=1e-10, atol=1e-12)
    # zero-variance groups and single samples get exactly 0 advantage under every normalisation
    assert ours[5:9].abs().max() == 0.0 and ours[9] == 0.0


@pytest.mark.parametrize("norm", ["batch", "prompt", "none"])
def test_advantages_continuous_rewards(norm):
    gen = torch.Generator().manual_seed(3)
    group = torch.arange(5).repeat_interleave(6)
    rewards = torch.randn(30, generator=gen, dtype=DT) * 3 + 1
    ours = compute_advantages(rewards, group, norm, eps=1e-6)
    torch.testing.assert_close(ours, torch.tensor(ref_advantages(rewards.tolist(), group.tolist(), norm, 1e-6),
                                                  dtype=DT), rtol=1e-10, atol=1e-12)


def test_batch_norm_divides_by_batch_std_not_group_std():
    """§3.2 (Fig. 14b): batch level divides Â by the std of all Â in the batch; the group means are 0 so that std is
    sqrt(mean Â²). Groups with different spreads keep their relative scale (unlike prompt level)."""
    rewards = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, 1.0, 1.0, -1.0], dtype=DT)
    group = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    centred = torch.tensor([1, -1, 1, -1, 0.5, 0.5, 0.5, -1.5], dtype=DT)
    batch_std = math.sqrt(float((centred**2).mean()))
    torch.testing.assert_close(compute_advantages(rewards, group, "batch", eps=0.0), centred / batch_std)
    adv = compute_advantages(rewards, group, "batch", eps=0.0)
    assert float(adv.std(unbiased=False)) == pytest.approx(1.0, abs=1e-12)
    prompt = compute_advantages(rewards, group, "prompt", eps=0.0)
    assert float(prompt[:4].std(unbiased=False)) == pytest.approx(1.0)
    assert float(prompt[4:].std(unbiased=False)) == pytest.approx(1.0)
    # ±1 and 0/1 rewards give the same normalised advantages; 'none' doubles with ±1
    zero_one = (rewards + 1) / 2
    torch.testing.assert_close(compute_advantages(zero_one, group, "batch", eps=0.0), adv)
    torch.testing.assert_close(compute_advantages(rewards, group, "none"), 2 * compute_advantages(zero_one, group, "none"))


def test_advantages_single_sample_and_all_equal_are_finite_zero():
    for norm in ("batch", "prompt", "none"):
        one = compute_advantages(torch.tensor([1.0]), torch.tensor([0]), norm)
        assert one.tolist() == [0.0]
        same = compute_advantages(torch.ones(6), torch.tensor([0, 0, 0, 1, 1, 1]), norm)
        assert torch.isfinite(same).all() and same.abs().max() == 0.0


def test_zero_variance_mask_matches_reference():
    rewards = torch.tensor([1, 1, 1, -1, 1, -1, -1, -1, 1])
    group = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 3])
    # §3.2 (Fig. 6a): keep a prompt only when 0 < mean(correct) < 1, i.e. not all equal; a single sample is all equal
    expected = []
    for g in group.tolist():
        vals = [r for r, gg in zip(rewards.tolist(), group.tolist()) if gg == g]
        expected.append(0 < sum(v > 0 for v in vals) / len(vals) < 1)
    assert zero_variance_mask(rewards, group).tolist() == expected


# ---------------------------------------------------------------------------------------------- losses


@pytest.mark.parametrize("name", sorted(LOSS_PARAMS))
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("spread", [0.05, 0.6, 4.0])
def test_loss_values_and_gradients_match_reference(name, seed, spread):
    # GSPO's clip range is ~1e-3: a small spread puts sequences on both sides of it too
    spread = spread / 100 if name == "gspo" else spread
    logp, gen_logp, adv, mask, _ = _random_batch(seed, spread=spread)
    out = _make(name)(logp, gen_logp, adv, mask)
    ref = ref_loss_terms(name, LOSS_PARAMS[name], logp, gen_logp, adv, mask)
    torch.testing.assert_close(out.per_token, ref, rtol=1e-9, atol=1e-12)
    assert (out.per_token[mask == 0] == 0).all()
    # gradient of an arbitrary weighted sum, sequence-uniform so GSPO's copies compare exactly
    w = torch.rand(logp.shape[0], 1, generator=torch.Generator().manual_seed(seed), dtype=DT)
    g_ours = _grad((out.per_token * w * mask).sum(), logp)
    g_ref = _grad((ref * w * mask).sum(), logp)
    torch.testing.assert_close(g_ours, g_ref, rtol=1e-9, atol=1e-12)
    assert (g_ours[mask == 0] == 0).all() and torch.isfinite(g_ours).all()


def test_cispo_gradient_closed_form_stop_gradient_placement():
    """Eq. 4: ∂/∂log π of −sg(min(ρ, ε))·Â·log π is exactly −min(ρ, ε)·Â: the IS weight is detached, so the
    ρ inside it contributes no ρ·log π term, and no token's gradient is zeroed (ratios far below 1 too)."""
    log_ratios = torch.tensor([[-30.0, -2.0, 0.0, 1.0, math.log(4.0) - 1e-9, math.log(4.0) + 1e-3, 40.0]], dtype=DT)
    logp = torch.tensor([[-0.3, -1.2, -2.0, -0.7, -0.1, -4.0, -0.01]], dtype=DT, requires_grad=True)
    gen_logp = logp.detach() - log_ratios
    mask = torch.ones_like(logp)
    for a in (1.3, -0.8):
        adv = torch.tensor([a], dtype=DT)
        out = CISPOLoss(eps_max=4.0)(logp, gen_logp, adv, mask)
        g = _grad(out.per_token.sum(), logp)
        weight = torch.clamp(log_ratios.exp(), max=4.0)
        torch.testing.assert_close(g, -weight * a, rtol=1e-12, atol=0.0)
        torch.testing.assert_close(out.per_token.detach(), -weight * a * logp.detach())
        assert (g != 0).all()
        assert out.stats["is_ratio_capped_frac"] == pytest.approx(2 / 7)


@pytest.mark.parametrize("name", ["ppo", "grpo", "dapo"])
def test_clip_gradient_closed_form_both_sides(name):
    """Eq. 3/8: gradient −Â·ρ except where the clip binds: ρ > 1+ε+ with Â > 0, ρ < 1−ε− with Â < 0 (zero);
    ρ > 1+ε+ with Â < 0 and ρ < 1−ε− with Â > 0 keep the unclipped (pessimistic) gradient."""
    p = LOSS_PARAMS[name]
    rhos = torch.tensor([1e-8, 0.5, 1 - p["eps_low"] + 1e-6, 1.0, 1 + p["eps_high"] - 1e-6, 2.0, 1e8], dtype=DT)
    logp = torch.full((1, 7), -1.0, dtype=DT, requires_grad=True)
    gen_logp = logp.detach() - rhos.log()[None]
    mask = torch.ones_like(logp)
    for a in (0.9, -1.7):
        out = _make(name)(logp, gen_logp, torch.tensor([a], dtype=DT), mask)
        g = _grad(out.per_token.sum(), logp)[0]
        for k, rho in enumerate(rhos.tolist()):
            binds = (a > 0 and rho > 1 + p["eps_high"]) or (a < 0 and rho < 1 - p["eps_low"])
            expected = 0.0 if binds else -a * rho
            assert float(g[k]) == pytest.approx(expected, rel=1e-9, abs=1e-300), (k, rho, a)
            value = -min(rho * a, min(max(rho, 1 - p["eps_low"]), 1 + p["eps_high"]) * a)
            assert float(out.per_token.detach()[0, k]) == pytest.approx(value, rel=1e-9)


def test_gspo_sequence_ratio_is_length_normalised_and_clip_is_per_sequence():
    """GSPO: s_i = exp(mean_t log ρ_{i,t}) over the sequence's valid tokens; the clip acts on s_i, so either
    every token of a sequence has gradient or none; the gradient w.r.t. log π_t is −Â·s_i/|y_i| per copy."""
    logp = torch.tensor([[-1.0, -2.0, -0.5, 0.0], [-1.0, -1.0, -1.0, -1.0]], dtype=DT, requires_grad=True)
    log_ratio = torch.tensor([[1e-3, 3e-3, -1e-3, 0.0], [0.02, 0.02, 0.02, 0.02]], dtype=DT)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=DT)
    gen_logp = logp.detach() - log_ratio
    adv = torch.tensor([0.5, 0.5], dtype=DT)
    out = GSPOLoss(eps_low=3e-3, eps_high=5e-3)(logp, gen_logp, adv, mask)
    s0 = math.exp(3e-3 / 3)  # inside the clip
    g = _grad(out.per_token.sum(), logp)
    # sequence 0: 3 copies of −Â s0, each with gradient −Â s0 / 3 on every valid token → −Â s0 per token
    torch.testing.assert_close(g[0, :3], torch.full((3,), -0.5 * s0, dtype=DT))
    assert g[0, 3] == 0.0
    # sequence 1: s1 = e^0.02 > 1 + 5e-3 with Â > 0: clipped, no gradient at all
    assert (g[1] == 0).all()
    torch.testing.assert_close(out.per_token[1].detach(), torch.full((4,), -0.5 * (1 + 5e-3), dtype=DT))


def test_reinforce_is_plain_policy_gradient():
    logp, gen_logp, adv, mask, _ = _random_batch(5, spread=3.0)
    out = ReinforceLoss()(logp, gen_logp, adv, mask)
    g = _grad(out.per_token.sum(), logp)
    torch.testing.assert_close(g, -adv[:, None].expand_as(mask) * mask)


@pytest.mark.parametrize("name", sorted(LOSS_PARAMS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_extreme_ratios_and_garbage_padding_stay_finite(name, dtype):
    """Log-ratios of ±60 (ρ ~ 1e±26) and padding log-probs of −inf / NaN: values and gradients finite,
    padding contributes nothing."""
    logp = torch.tensor([[-0.1, -70.0, -1.0, float("nan")], [-60.5, -0.2, float("-inf"), 0.0]], dtype=dtype,
                        requires_grad=True)
    gen_logp = torch.tensor([[-60.1, -10.0, -1.0, 0.0], [-0.5, -60.2, 0.0, float("nan")]], dtype=dtype)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=dtype)
    for a in (1.0, -1.0):
        for agg in ("prompt", "sample", "token"):
            out = _make(name)(logp, gen_logp, torch.tensor([a, -a], dtype=dtype), mask)
            assert torch.isfinite(out.per_token).all()
            value = AGGREGATIONS.get(agg)(out.per_token, mask, torch.tensor([0, 0]))
            g = _grad(value, logp)
            assert torch.isfinite(value) and torch.isfinite(g).all(), (agg, g)
            assert (g[mask == 0] == 0).all()


# ---------------------------------------------------------------------------------------------- aggregation


@pytest.mark.parametrize("agg", ["prompt", "sample", "token"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_aggregation_matches_reference_values_and_gradients(agg, seed):
    gen = torch.Generator().manual_seed(seed)
    n, t = 12, 7
    per_token = torch.randn(n, t, generator=gen, dtype=DT, requires_grad=True)
    lengths = torch.randint(0, t + 1, (n,), generator=gen)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).to(DT)
    mask[0] = 0.0
    mask[4:6] = 0.0
    mask[2, 1] = 0.0  # a forced (interruption) token inside a sequence
    group = torch.tensor([5, 5, 5, 1, 1, 1, 8, 8, 8, 8, 3, 3])  # uneven group sizes, unsorted ids
    terms = per_token * (mask > 0)  # the loss contract: 0 off the mask
    ours = AGGREGATIONS.get(agg)(terms, mask, group)
    ref = ref_aggregate(agg, terms, mask, group.tolist())
    torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(_grad(ours, per_token), _grad(ref, per_token), rtol=1e-12, atol=1e-14)


def test_aggregations_differ_as_the_paper_says_on_mixed_lengths():
    """§3.2 (Fig. 14a): prompt = each prompt equal, tokens equal within a prompt; sample = each rollout equal; token =
    each token in the batch equal. Hand-worked numbers on a batch whose lengths differ."""
    # prompt 0: lengths 1 and 3, terms 1 | 0 0 0 ; prompt 1: lengths 2 and 1, terms 5 5 | 5
    per_token = torch.tensor([[1, 0, 0], [0, 0, 0], [5, 5, 0], [5, 0, 0]], dtype=DT)
    mask = torch.tensor([[1, 0, 0], [1, 1, 1], [1, 1, 0], [1, 0, 0]], dtype=DT)
    group = torch.tensor([0, 0, 1, 1])
    prompt = AGGREGATIONS.get("prompt")(per_token, mask, group)
    sample = AGGREGATIONS.get("sample")(per_token, mask, group)
    token = AGGREGATIONS.get("token")(per_token, mask, group)
    assert float(prompt) == pytest.approx((1 / 4 + 15 / 3) / 2)
    assert float(sample) == pytest.approx((1 + 0 + 5 + 5) / 4)
    assert float(token) == pytest.approx(16 / 7)
    assert len({round(float(x), 9) for x in (prompt, sample, token)}) == 3
    # equal G per prompt: the mean over sequences equals the spec's per-prompt (1/G)Σ then mean over prompts
    assert float(sample) == pytest.approx(float(ref_sample_per_prompt(per_token, mask, group.tolist())))
    # unequal kept counts (a truncated sample left out, App. A.6): the documented choice is one mean over the
    # kept sequences (each rollout counts equally, Eq. 3 with a fixed G), not a mean of per-prompt means
    mask_t = mask.clone()
    mask_t[1] = 0.0
    sample_t = AGGREGATIONS.get("sample")(per_token, mask_t, group)
    assert float(sample_t) == pytest.approx((1 + 5 + 5) / 3)
    assert float(ref_sample_per_prompt(per_token, mask_t, group.tolist())) == pytest.approx((1 + 5) / 2)


def test_prompt_aggregation_weights_each_prompt_equally():
    """Doubling a prompt's number of tokens (or samples) leaves its weight in the prompt mean unchanged."""
    gen = torch.Generator().manual_seed(11)
    base = torch.randn(4, 6, generator=gen, dtype=DT)
    mask = torch.ones(4, 6, dtype=DT)
    mask[0, 3:] = 0
    group = torch.tensor([0, 0, 1, 1])
    one = AGGREGATIONS.get("prompt")(base * mask, mask, group)
    # duplicate prompt 1's rows: its per-prompt mean is unchanged, so is the result
    dup = torch.cat([base, base[2:]]), torch.cat([mask, mask[2:]]), torch.tensor([0, 0, 1, 1, 1, 1])
    two = AGGREGATIONS.get("prompt")(dup[0] * dup[1], dup[1], dup[2])
    assert float(one) == pytest.approx(float(two), rel=1e-12)
    # whereas token and sample means move towards prompt 1
    assert float(AGGREGATIONS.get("token")(dup[0] * dup[1], dup[1], dup[2])) != pytest.approx(
        float(AGGREGATIONS.get("token")(base * mask, mask, group)))


def test_token_weights_count_fractionally():
    """A token of weight w counts w times: a weight-2 token equals the same token duplicated."""
    per_token = torch.tensor([[1.0, 3.0], [2.0, 0.0]], dtype=DT)
    mask = torch.tensor([[2.0, 1.0], [1.0, 0.0]], dtype=DT)
    group = torch.tensor([0, 0])
    assert float(AGGREGATIONS.get("token")(per_token, mask, group)) == pytest.approx((2 + 3 + 2) / 4)
    assert float(AGGREGATIONS.get("prompt")(per_token, mask, group)) == pytest.approx((2 + 3 + 2) / 4)
    assert float(AGGREGATIONS.get("sample")(per_token, mask, group)) == pytest.approx(((2 + 3) / 3 + 2) / 2)


@pytest.mark.parametrize("agg", ["prompt", "sample", "token"])
def test_all_masked_batch_is_zero_and_attached(agg):
    per_token = torch.zeros(3, 4, dtype=DT, requires_grad=True)
    mask = torch.zeros(3, 4, dtype=DT)
    value = AGGREGATIONS.get(agg)(per_token, mask, torch.tensor([0, 0, 1]))
    assert float(value.detach()) == 0.0 and value.requires_grad
    assert (_grad(value, per_token) == 0).all()


# ---------------------------------------------------------------------------------------------- end to end


def _scalerl_objective(logp, gen_logp, rewards, group, mask, eps_max=4.0):
    """§4: J_ScaleRL written out directly: zero-variance prompts dropped, Â on the kept ones with the batch
    std, CISPO terms, prompt-level 1/Σ|y_g| per prompt, uniform mean over prompts; returned negated."""
    keep = [g for g in sorted(set(group)) if 0 < sum(r > 0 for r, gg in zip(rewards, group) if gg == g)
            / sum(1 for gg in group if gg == g) < 1]
    rows = [i for i in range(len(group)) if group[i] in keep]
    adv = ref_advantages([rewards[i] for i in rows], [group[i] for i in rows], "batch", 1e-6)
    adv_of = dict(zip(rows, adv))
    per_prompt = []
    for g in keep:
        num, den = 0.0, 0.0
        for i in (i for i in rows if group[i] == g):
            for j in range(logp.shape[1]):
                if mask[i, j] > 0:
                    rho = math.exp(float(logp[i, j].detach() - gen_logp[i, j]))
                    num = num + min(rho, eps_max) * adv_of[i] * logp[i, j]
                    den += 1
        per_prompt.append(num / den)
    return -sum(per_prompt) / len(per_prompt)


def test_scalerl_recipe_end_to_end_matches_objective_and_zero_variance_prompts_have_no_gradient():
    logp, gen_logp, _, mask, group = _random_batch(21, n_groups=4, g=4, spread=1.5)
    rewards = [1, -1, 1, 1, 1, 1, 1, 1, -1, -1, 1, -1, -1, -1, -1, -1]  # groups 1 and 3 are zero-variance
    r, grp = torch.tensor(rewards, dtype=DT), group
    keep = zero_variance_mask(r, grp)
    assert keep.tolist() == [True] * 4 + [False] * 4 + [True] * 4 + [False] * 4
    adv = torch.zeros(len(rewards), dtype=DT)
    adv[keep] = compute_advantages(r[keep], grp[keep], "batch", eps=1e-6)
    out = CISPOLoss(eps_max=4.0)(logp[keep], gen_logp[keep], adv[keep], mask[keep])
    ours = AGGREGATIONS.get("prompt")(out.per_token, mask[keep], grp[keep])
    ref = _scalerl_objective(logp, gen_logp, rewards, grp.tolist(), mask)
    torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12)
    g_ours, g_ref = _grad(ours, logp), _grad(ref, logp)
    torch.testing.assert_close(g_ours, g_ref, rtol=1e-10, atol=1e-12)
    assert (g_ours[~keep] == 0).all()
    # unfiltered, zero-variance prompts still have zero advantage and therefore zero gradient for every loss
    adv_all = compute_advantages(r, grp, "batch")
    assert (adv_all[~keep] == 0).all()
    for name in LOSS_PARAMS:
        out = _make(name)(logp, gen_logp, adv_all, mask)
        for agg in ("prompt", "sample", "token"):
            g = _grad(AGGREGATIONS.get(agg)(out.per_token, mask, grp), logp)
            assert (g[~keep] == 0).all(), (name, agg)
            assert g[keep].abs().sum() > 0


def test_loss_classes_registered_under_their_names():
    assert LOSSES.get("cispo") is CISPOLoss and LOSSES.get("dapo") is DAPOLoss
    assert LOSSES.get("ppo") is ClipLoss and LOSSES.get("grpo") is ClipLoss
    assert LOSSES.get("gspo") is GSPOLoss and LOSSES.get("reinforce") is ReinforceLoss


# ---------------------------------------------------------------------------------------------- the trainer


SETS = ["model.d_model=32", "model.n_layers=2", "model.n_heads=2", "model.max_seq_len=64", "threads=1"]


def _ragged_rollouts(n: int = 16, groups: int = 4, seed: int = 3):
    """Right-padded sequences, prompts of 3-6 tokens and completions of 0-20 (one of them empty), with
    ±1 rewards; a group's rows share nothing (the plain forward)."""
    from scalerl.rollout import RolloutBatch

    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(3, 7, (n,), generator=g)
    completion = torch.randint(1, 20, (n,), generator=g)
    completion[5] = 0
    width = int((prompt + completion).max())
    ids = torch.zeros(n, width, dtype=torch.long)
    attn = torch.zeros(n, width, dtype=torch.bool)
    loss_mask = torch.zeros(n, width)
    for i in range(n):
        p, c = int(prompt[i]), int(completion[i])
        ids[i, : p + c] = torch.randint(3, 30, (p + c,), generator=g)
        attn[i, : p + c] = True
        loss_mask[i, p : p + c] = 1.0
    loss_mask[2, int(prompt[2]) + 1] = 0.0  # a forced (interruption) token inside a completion
    rewards = torch.where(torch.rand(n, generator=g) < 0.5, 1.0, -1.0)
    return RolloutBatch(
        index=0, problem_ids=[str(i) for i in range(groups)], group=torch.arange(n) % groups, input_ids=ids,
        attention_mask=attn, loss_mask=loss_mask, gen_logprobs=torch.zeros(n, width),
        versions=torch.zeros(n, width, dtype=torch.long), rewards=rewards, correct=rewards > 0,
        truncated=torch.zeros(n, dtype=torch.bool), interrupted=torch.zeros(n, dtype=torch.bool),
        completion_lengths=completion,
    )


@pytest.mark.parametrize("preset,sets", [
    ("scalerl", []),
    ("grpo_deepseek", []),
    ("dapo_qwen", []),
    ("scalerl", ["algo.loss.name=gspo", "algo.loss.params={}", "algo.aggregation=token"]),
    ("scalerl", ["algo.loss.name=reinforce", "algo.loss.params={}", "algo.aggregation=sample",
                 "algo.advantages.norm=prompt"]),
])
def test_trainer_objective_matches_reference_on_a_tiny_model(preset, sets):
    """``Trainer._objective`` (its forward, the configured loss and aggregation) against the references on an
    independent padded forward of the same model: value and every parameter's gradient."""
    from scalerl.build import build_model
    from scalerl.config import load_config
    from scalerl.trainer import Trainer

    cfg = load_config(preset, None, [*SETS, *sets])
    tr = Trainer(build_model(cfg.model, 0).model, cfg.algo, cfg.optim)
    tr.model.train()
    b = _ragged_rollouts()
    adv = compute_advantages(b.rewards, b.group, cfg.algo.advantages.norm, cfg.algo.advantages.eps)
    # generator log-probs near the policy's so that ratios straddle the clip range
    with torch.no_grad():
        logits = tr.model(b.input_ids[:, :-1], b.attention_mask[:, :-1]).float()
        base = torch.log_softmax(logits, -1).gather(-1, b.input_ids[:, 1:, None]).squeeze(-1)
    mask = b.loss_mask[:, 1:]
    spread = 3e-3 if cfg.algo.loss.name == "gspo" else 0.3
    noise = torch.randn(base.shape, generator=torch.Generator().manual_seed(0)) * spread
    b.gen_logprobs[:, 1:] = torch.where(mask > 0, base + noise, torch.zeros_like(base))

    tr.model.zero_grad(set_to_none=True)
    ours = tr._objective(b, adv)[0]
    ours.backward()
    g_ours = {k: p.grad.clone() for k, p in tr.model.named_parameters() if p.grad is not None}

    tr.model.zero_grad(set_to_none=True)
    logits = tr.model(b.input_ids[:, :-1], b.attention_mask[:, :-1]).float()
    logp = torch.log_softmax(logits, -1).gather(-1, b.input_ids[:, 1:, None]).squeeze(-1)
    terms = ref_loss_terms(cfg.algo.loss.name, tr.loss_fn.params.model_dump(), logp, b.gen_logprobs[:, 1:], adv,
                           mask)
    ref = ref_aggregate(cfg.algo.aggregation, terms, mask, b.group.tolist())
    ref.backward()
    torch.testing.assert_close(ours.detach(), ref.detach(), rtol=1e-5, atol=1e-6)
    assert g_ours and float(ref.detach().abs()) > 0
    for k, p in tr.model.named_parameters():
        if k in g_ours:
            torch.testing.assert_close(g_ours[k], p.grad, rtol=1e-4, atol=1e-6, msg=k)


# ---------------------------------------------------------------------------------------------- length, curriculum


def test_length_penalty_matches_eq9_on_correct_traces_only():
    """Eq. 9: R_length = clip((L_max − |y|)/L_cache − 1, −1, 0), added to correct traces only (App. A.10)."""
    from scalerl.algo import LENGTH_CONTROLS

    lc = LENGTH_CONTROLS.get("length_penalty")(l_max=14, l_cache=2, max_new_tokens=16)
    lengths = torch.tensor([1, 11, 12, 13, 14, 15, 16, 13])
    correct = torch.tensor([True] * 7 + [False])
    rewards = torch.where(correct, 1.0, -1.0)
    ref = [r + (min(0.0, max(-1.0, (14 - n) / 2 - 1)) if c else 0.0)
           for r, n, c in zip(rewards.tolist(), lengths.tolist(), correct.tolist())]
    shaped = lc.shape_rewards(rewards, lengths, correct)
    torch.testing.assert_close(shaped, torch.tensor(ref), rtol=0, atol=1e-7)
    assert shaped.tolist()[:7] == pytest.approx([1.0, 1.0, 1.0, 0.5, 0.0, 0.0, 0.0])
    for name in ("none", "interruption"):
        same = LENGTH_CONTROLS.get(name)().shape_rewards(rewards, lengths, correct)
        torch.testing.assert_close(same, rewards)


def test_interruption_budgets_uniform_in_the_closed_range():
    import numpy as np

    from scalerl.algo import LENGTH_CONTROLS

    lc = LENGTH_CONTROLS.get("interruption")(think_lo=10, think_hi=12, answer_budget=2, max_new_tokens=64)
    budgets = lc.think_budgets(3000, np.random.default_rng(0))
    assert set(budgets) == {10, 11, 12}
    for v in (10, 11, 12):
        assert budgets.count(v) / 3000 == pytest.approx(1 / 3, abs=0.04)


def test_npr_retires_at_pass_rate_ge_threshold_from_the_next_epoch():
    """§3.2 (Fig. 6b): a prompt with pass rate ≥ 0.9 leaves subsequent epochs (pass_rate(x) < 0.9 stays, §4)."""
    from scalerl.algo import CURRICULA

    ids = ["a", "b", "c", "d"]
    s = CURRICULA.get("npr")(ids, 0, threshold=0.9)
    served = s.next_ids(4)
    assert sorted(served) == ids
    outcome = {"a": (9, 10), "b": (17, 20), "c": (10, 10), "d": (0, 10)}  # 0.9, 0.85, 1.0, 0.0
    for pid in served:
        s.update(pid, *outcome[pid])
    assert not any(s.is_retired(p) for p in ids)  # nothing mid-epoch
    nxt = s.next_ids(2)
    assert sorted(nxt) == ["b", "d"] and s.retired == 2
    assert s.is_retired("a") and s.is_retired("c") and not s.is_retired("b")
    u = CURRICULA.get("uniform")(ids, 0)
    for pid in u.next_ids(4):
        u.update(pid, 10, 10)
    assert sorted(u.next_ids(4)) == ids and u.retired == 0
