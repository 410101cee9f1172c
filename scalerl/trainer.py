"""The optimizer step. Algorithm-blind: the loss, the aggregation and the advantage normalisation come
from the registries by the config's names (design.md); nothing here knows which recipe it runs.

One step on a ``RolloutBatch`` (§3.10):
  1. staleness guard: a sequence whose oldest sampled token is more than the schedule's bound behind the
     trainer's version is dropped with its whole group (§3.1; by construction this never fires, and the
     count is logged so a run proves it);
  2. zero-variance filtering: groups whose rewards are all equal are dropped, no refill (§3.6);
  3. advantages on the kept groups: group-mean baseline, batch/prompt/none normalisation (§3.5);
  4. recompute log-probs of the taken tokens (FP32 LM head when on, §3.3), per-token loss from the
     registry, aggregation (§3.4), backward, gradient clipping, AdamW with linear warm-up.
A non-finite loss or gradient skips the step: it is logged, never applied.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Any

import torch

from scalerl import algo
from scalerl.config import RunConfig
from scalerl.models.fp32_head import enable_fp32_head, token_logprobs
from scalerl.pipeline.batch import RolloutBatch
from scalerl.pipeline.schedules import Schedule


class Trainer:
    def __init__(self, model: torch.nn.Module, cfg: RunConfig, schedule: Schedule) -> None:
        self.model = model
        self.cfg = cfg
        self.schedule = schedule
        if cfg.algo.fp32_head:
            enable_fp32_head(model)
        self.loss_fn = algo.build_loss(cfg.algo.loss)
        self.aggregate = algo.AGGREGATIONS.get(cfg.algo.aggregation, "algo.aggregation")
        o = cfg.optim
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad],
            lr=o.lr,
            betas=o.betas,
            eps=o.eps,
            weight_decay=o.weight_decay,
        )
        warm = o.warmup_steps
        self.lr_schedule = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / (warm + 1)) if warm else 1.0
        )
        self.version = 0  # policy version = optimizer steps taken (skipped ones included)

    # ------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "lr_schedule": self.lr_schedule.state_dict(),
            "version": self.version,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.lr_schedule.load_state_dict(state["lr_schedule"])
        self.version = int(state["version"])

    # ------------------------------------------------------------------------------------------- step
    def _groups_where(self, bad: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
        """[N] True for every sequence whose group contains a ``bad`` sequence."""
        bad_groups = torch.unique(group[bad])
        return torch.isin(group, bad_groups)

    def step(self, batch: RolloutBatch) -> dict[str, float]:
        cfg = self.cfg
        oldest = batch.oldest_version()
        has_tokens = oldest >= 0
        staleness = torch.where(has_tokens, self.version - oldest, torch.zeros_like(oldest))
        stale = staleness > self.schedule.max_staleness()
        keep = ~self._groups_where(stale, batch.group)
        if cfg.algo.zero_variance_filter:
            keep &= algo.zero_variance_mask(batch.rewards, batch.group)
        stats: dict[str, float] = {
            "train/reward_mean": batch.rewards.mean().item(),
            "train/pass_rate": batch.correct.float().mean().item(),
            "train/truncation_rate": batch.truncated.float().mean().item(),
            "train/interruption_rate": batch.interrupted.float().mean().item(),
            "train/completion_len_mean": batch.completion_lengths.float().mean().item(),
            "train/staleness_mean": staleness[has_tokens].float().mean().item() if has_tokens.any() else 0.0,
            "train/staleness_max": float(staleness.max().item()) if has_tokens.any() else 0.0,
            "train/stale_dropped": float(stale.sum().item()),
            "train/inflight_frac": (batch.version_span() > 0).float().mean().item(),
            "train/zero_var_frac": algo.zero_variance_frac(batch.rewards, batch.group),
            "train/samples": float(batch.n),
            "train/samples_kept": float(keep.sum().item()),
            "lr": self.optimizer.param_groups[0]["lr"],
        }
        self.version += 1
        if not keep.any():  # nothing to learn from: no optimizer step, and the LR warm-up does not advance
            stats.update({"loss": 0.0, "grad_norm": 0.0, "train/skipped": 1.0})
            return stats
        device = next(self.model.parameters()).device
        stats.update(self._update(batch.select(keep).to(device)))
        return stats

    def _update(self, b: RolloutBatch) -> dict[str, float]:
        cfg = self.cfg
        adv = algo.compute_advantages(b.rewards, b.group, cfg.algo.advantages.norm, cfg.algo.advantages.eps)
        self.model.train()
        autocast = (
            torch.autocast(device_type=b.input_ids.device.type, dtype=torch.bfloat16)
            if cfg.optim.bf16_autocast
            else nullcontext()
        )
        with autocast:
            logits = self.model(b.input_ids[:, :-1], b.attention_mask[:, :-1])
        targets = b.input_ids[:, 1:]
        mask = b.loss_mask[:, 1:]
        logp = token_logprobs(logits, targets).float()
        out = self.loss_fn(logp, b.gen_logprobs[:, 1:], adv, mask, seq_lengths=mask.sum(dim=1))
        loss = self.aggregate(out.per_token, mask, b.group)
        stats = {f"train/{k}": float(v) for k, v in out.stats.items()}
        stats["train/entropy"] = _masked_entropy(logits.detach(), mask)
        stats["train/adv_abs_mean"] = adv.abs().mean().item()
        self.optimizer.zero_grad(set_to_none=True)
        if not torch.isfinite(loss):
            return {**stats, "loss": float("nan"), "grad_norm": float("nan"), "train/nan_skipped": 1.0}
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.optim.grad_clip)
        if not math.isfinite(float(grad_norm)):
            self.optimizer.zero_grad(set_to_none=True)
            return {**stats, "loss": loss.item(), "grad_norm": float("nan"), "train/nan_skipped": 1.0}
        self.optimizer.step()
        self.lr_schedule.step()
        return {**stats, "loss": loss.item(), "grad_norm": float(grad_norm), "train/nan_skipped": 0.0}


def _masked_entropy(logits: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean policy entropy over the trained token positions (paper A.12 tracks it; not a predictor)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    ent = -(logp.exp() * logp).sum(dim=-1)
    denom = mask.sum().clamp_min(1.0)
    return float((ent * mask).sum() / denom)
