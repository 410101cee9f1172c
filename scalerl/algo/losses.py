"""Policy-gradient losses (§3.2, §4): per-token terms, registered by name in ``LOSSES``.

A loss is configured by its typed params (``scalerl/schema.py``, e.g. ``CISPOParams``). Calling it::

    out = loss(logp, gen_logp, advantages, mask, seq_lengths=None)

* ``logp`` [N, T]: the trainer's log-probs of the taken tokens (with grad), π_train.
* ``gen_logp`` [N, T]: the generator's recorded log-probs of the same tokens, π_gen (no grad).
* ``advantages`` [N]: one advantage per sequence (``scalerl.algo.advantages``).
* ``mask`` [N, T]: float loss weights; a token takes part when its weight is > 0 (policy-sampled completion
  tokens). Prompt, padding and forced interruption tokens have weight 0.
* ``seq_lengths``: accepted so that a length-aware loss can be registered without changing the trainer; the
  built-in losses read lengths from ``mask``.

Every importance ratio is anchored on the generator: ρ = π_train / π_gen (Eq. 2). With one optimizer step per
batch the trainer's own "old" log-probs equal its current ones, so a ratio against them would stay 1 and
neither CISPO's cap nor PPO's clip would ever fire; π_gen carries the real off-policyness (stale weights under
PipelineRL-k, kernel mismatch without the FP32 head, §3.2, Fig. 5b).

``LossOutput.per_token`` holds the terms to *minimise* (negated objective), unweighted and exactly 0 where
``mask`` is 0; the aggregation (``scalerl.algo.aggregation``) applies the weights and averages.

``LossOutput.stats`` (logged by the trainer as ``train/<key>``), over the tokens with weight > 0:

* ``is_ratio_mean``, ``is_ratio_max``, ``is_ratio_min``: the token-level ρ = π_train / π_gen for every loss
  (the paper's train/generator mismatch diagnostic, A.19), so runs with different losses compare.
* ``is_ratio_capped_frac``: fraction of tokens whose gradient the loss's bound changes: CISPO, ρ above the
  cap ε_max; clipped losses, the clip is active (gradient exactly zero); REINFORCE, always 0.
* clipped losses add ``clip_low_frac`` and ``clip_high_frac`` (active at 1 − ε_low with Â < 0, at
  1 + ε_high with Â > 0); GSPO adds ``seq_ratio_mean``, ``seq_ratio_min``, ``seq_ratio_max`` over sequences.

With no token of weight > 0 the ratio statistics are 1.0 and the fractions 0.0.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch
from torch import Tensor

from scalerl import schema
from scalerl.registry import Registry

LOSSES: Registry[type["Loss"]] = Registry("loss")

# (per-token terms to minimise [N, T], bool [N, T] where the loss's bound is active, extra stats)
_Terms = tuple[Tensor, Tensor, dict[str, float]]


@dataclass
class LossOutput:
    per_token: Tensor  # [N, T] terms to minimise, 0 where mask is 0
    stats: dict[str, float] = field(default_factory=dict)


def _masked_stats(values: Tensor, valid: Tensor, prefix: str) -> dict[str, float]:
    """Mean, max and min of ``values`` where ``valid``; 1.0 for all three when nothing is valid."""
    picked = values.detach()[valid]
    if picked.numel() == 0:
        return {f"{prefix}_mean": 1.0, f"{prefix}_max": 1.0, f"{prefix}_min": 1.0}
    return {
        f"{prefix}_mean": float(picked.mean()),
        f"{prefix}_max": float(picked.max()),
        f"{prefix}_min": float(picked.min()),
    }


def _log_ratio(logp: Tensor, gen_logp: Tensor, valid: Tensor) -> Tensor:
    """log π_train − log π_gen, set to 0 off the mask *before* any exp: padding log-probs may be anything,
    and exp of a huge value would put NaN into the gradient even behind a where()."""
    return torch.where(valid, logp - gen_logp.detach(), torch.zeros_like(logp))


def _frac(flags: Tensor, valid: Tensor) -> float:
    n = int(valid.sum())
    return float((flags & valid).sum()) / n if n else 0.0


class Loss(schema.Configured, ABC):
    """A per-token policy-gradient loss; subclasses give ``_terms``. Its hyper-parameters are its
    ``params_model`` object (``scalerl/schema.py``: types, bounds, defaults), read as ``self.params``."""

    def __call__(
        self,
        logp: Tensor,
        gen_logp: Tensor,
        advantages: Tensor,
        mask: Tensor,
        seq_lengths: Tensor | None = None,
    ) -> LossOutput:
        if logp.dim() != 2 or logp.shape != gen_logp.shape or logp.shape != mask.shape:
            raise ValueError(
                f"logp, gen_logp and mask must share one [N, T] shape, got {tuple(logp.shape)}, "
                f"{tuple(gen_logp.shape)}, {tuple(mask.shape)}"
            )
        if advantages.shape != logp.shape[:1]:
            raise ValueError(f"advantages must be [N] = [{logp.shape[0]}], got {tuple(advantages.shape)}")
        valid = mask > 0
        log_ratio = _log_ratio(logp, gen_logp, valid)
        ratio, extra = self._ratio(log_ratio, valid)
        adv = advantages.detach().to(logp.dtype)[:, None].expand_as(logp)
        terms, capped, bound_stats = self._terms(logp, ratio, adv, valid)
        stats = _masked_stats(log_ratio.exp(), valid, "is_ratio")
        stats["is_ratio_capped_frac"] = _frac(capped, valid)
        stats.update(bound_stats)
        stats.update(extra)
        return LossOutput(per_token=torch.where(valid, terms, torch.zeros_like(terms)), stats=stats)

    def ratio(self, logp: Tensor, gen_logp: Tensor, mask: Tensor) -> Tensor:
        """The importance ratio this loss weighs tokens by, [N, T] (1 off the mask)."""
        valid = mask > 0
        return self._ratio(_log_ratio(logp, gen_logp, valid), valid)[0]

    def _ratio(self, log_ratio: Tensor, valid: Tensor) -> tuple[Tensor, dict[str, float]]:
        """Token-level ρ = π_train / π_gen (with grad) and any extra stats; GSPO overrides."""
        return log_ratio.exp(), {}

    @abstractmethod
    def _terms(self, logp: Tensor, ratio: Tensor, adv: Tensor, valid: Tensor) -> _Terms:
        """``(per-token terms to minimise, bool [N, T] where the bound is active, extra stats)``."""


@LOSSES.implement
class CISPOLoss(Loss):
    """CISPO (Eq. 4, §4): ``−sg(min(ρ, ε_max)) · Â · log π_train`` per token.

    Truncated importance sampling on top of REINFORCE: the weight is capped from above only (no lower
    truncation, A.17.2) and carries no gradient, so no token's gradient is ever dropped, only down-weighted.
    ε_max ∈ {4, 5, 8} behaved alike in the paper (Fig. 19b); 4.0 follows the clouddatalabs port.
    """

    params_model = schema.CISPOParams

    def _terms(self, logp: Tensor, ratio: Tensor, adv: Tensor, valid: Tensor) -> _Terms:
        ratio, eps_max = ratio.detach(), self.params.eps_max
        weight = torch.clamp(ratio, max=eps_max)
        return -weight * adv * logp, ratio > eps_max, {}


@LOSSES.implement
class ReinforceLoss(Loss):
    """Plain on-policy policy gradient ``−Â · log π_train`` (no ratio, no bound)."""

    params_model = schema.ReinforceParams

    def _terms(self, logp: Tensor, ratio: Tensor, adv: Tensor, valid: Tensor) -> _Terms:
        return -adv * logp, torch.zeros_like(valid), {}


@LOSSES.implement
class ClipLoss(Loss):
    """PPO's clipped surrogate ``−min(ρ Â, clip(ρ, 1 − ε_low, 1 + ε_high) Â)`` (Eq. 3, 5–7).

    Registered as ``ppo`` and ``grpo`` with the symmetric ε = 0.2 of PPO and of the DeepSeek GRPO recipe
    (A.16): per token the two are the same objective; what makes a run "GRPO" is the sample-level
    aggregation and group-std advantages, which are separate config entries. Where the clip is active
    (ρ > 1 + ε_high with Â > 0, or ρ < 1 − ε_low with Â < 0) the term is constant and its gradient is 0.
    """

    params_model = schema.ClipParams

    def _terms(self, logp: Tensor, ratio: Tensor, adv: Tensor, valid: Tensor) -> _Terms:
        eps_low, eps_high = self.params.eps_low, self.params.eps_high
        clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
        terms = -torch.minimum(ratio * adv, clipped * adv)
        high = (adv > 0) & (ratio.detach() > 1.0 + eps_high)
        low = (adv < 0) & (ratio.detach() < 1.0 - eps_low)
        return terms, low | high, {"clip_low_frac": _frac(low, valid), "clip_high_frac": _frac(high, valid)}


@LOSSES.implement
class DAPOLoss(ClipLoss):
    """DAPO's asymmetric clip ("clip-higher", Eq. 8): ε_low 0.2, ε_high 0.28 (Yu et al.); the paper's DAPO
    recipe uses ε_high 0.26 (A.17.1), which the preset sets."""

    params_model = schema.DAPOParams


@LOSSES.implement
class GSPOLoss(ClipLoss):
    """GSPO (§3.2, A.17.3): the clip acts on the length-normalised sequence ratio
    ``s_i = exp(mean_t(log π_train − log π_gen))`` over the sequence's weighted tokens, the same value for
    every token of the sequence. Defaults are ScaleRL's best setting, lower 3e-3 and upper 5e-3 (Fig. 20);
    the 1/|y_i| normalisation is inferred from that clip scale (the paper does not state it)."""

    params_model = schema.GSPOParams

    def _ratio(self, log_ratio: Tensor, valid: Tensor) -> tuple[Tensor, dict[str, float]]:
        count = valid.sum(dim=1).clamp(min=1).to(log_ratio.dtype)
        seq = (log_ratio.sum(dim=1) / count).exp()
        has_tokens = valid.any(dim=1)
        extra = _masked_stats(seq, has_tokens, "seq_ratio")
        return seq[:, None].expand_as(log_ratio), extra
