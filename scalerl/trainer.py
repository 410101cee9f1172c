"""The optimizer step. Algorithm-blind: the loss, the aggregation and the advantage normalisation come
from the registries by the config's names (design.md); nothing here knows which recipe it runs.

One step on a ``RolloutBatch`` (§3.10):
  1-3. the batch-preparation stage (``pipeline/prepare.py``): staleness guard (§3.1), zero-variance filtering
     (§3.6), advantages on the kept groups (§3.5);
  4. recompute log-probs of the taken tokens (FP32 LM head when on, §3.3), per-token loss from the
     registry, aggregation (§3.4), backward, gradient clipping, AdamW with linear warm-up.
A non-finite loss or gradient skips the step: it is logged, never applied.

Over several ranks (torchrun, ``scalerl/fsdp.py``) the model is sharded with FSDP2 and ``split`` (a
``DataParallel``) says which prompts this rank trains on; steps 1-3 and every denominator of the aggregation
are computed on the whole batch, which every rank holds, so the step is the single-process one.
"""

from __future__ import annotations

import math
import sys
import time
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from scalerl import algo
from scalerl.config import AlgoConfig, OptimConfig
from scalerl.errors import UserError
from scalerl.models.fp32_head import enable_fp32_head, token_logprobs
from scalerl.pipeline.batch import RolloutBatch
from scalerl.pipeline.prepare import StageConfig, prepare
from scalerl.pipeline.schedules import Schedule

if TYPE_CHECKING:
    from scalerl.algo.losses import LossOutput
    from scalerl.fsdp import DataParallel

# sequences per forward in the update: buckets of similar length, each trimmed to its own longest sequence
ROWS_PER_BUCKET = 32


class Trainer:
    def __init__(
        self,
        model: torch.nn.Module,
        algo_cfg: AlgoConfig,
        optim: OptimConfig,
        schedule: Schedule,
        split: "DataParallel | None" = None,
    ) -> None:
        """``algo_cfg`` (the run's ``algo``) names the loss, aggregation and batch preparation; ``optim`` the
        optimizer's numbers; nothing else of the run's config reaches the trainer."""
        self.model = model
        self.optim = optim
        self.schedule = schedule
        self.split = split  # None: this process trains on the whole batch alone
        if algo_cfg.fp32_head:
            enable_fp32_head(model)
        self.stage = StageConfig(
            max_staleness=schedule.max_staleness(),
            zero_variance_filter=algo_cfg.zero_variance_filter,
            advantage_norm=algo_cfg.advantages.norm,
            advantage_eps=algo_cfg.advantages.eps,
            truncated=algo_cfg.truncated,
        )
        self.loss_fn = algo.build_loss(algo_cfg.loss)
        self.aggregate = algo.AGGREGATIONS.get(algo_cfg.aggregation, "algo.aggregation")
        if split is not None:
            split.check_linear(self.aggregate, algo_cfg.aggregation)
        o = optim
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
        self.timings: dict[str, float] = {}  # the last step's phases -> seconds (the runner logs timing/*_s)

    # ------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The trainer's state; over several ranks a collective whose result (unsharded, the same format as a
        single process's) is on rank 0, the other ranks getting empty model and optimizer entries."""
        if self.split is None:
            model, optimizer = self.model.state_dict(), self.optimizer.state_dict()
        else:
            model, optimizer = self.split.state(self.model, self.optimizer)
        return {
            "model": model,
            "optimizer": optimizer,
            "lr_schedule": self.lr_schedule.state_dict(),
            "version": self.version,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load ``state_dict()``'s result; over several ranks a collective where rank 0 passes the state and
        the other ranks ``{}``."""
        if self.split is None:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        else:
            state = self.split.load(self.model, self.optimizer, state)
        self.lr_schedule.load_state_dict(state["lr_schedule"])
        self.version = int(state["version"])

    # ------------------------------------------------------------------------------------------- step
    def step(self, batch: RolloutBatch) -> dict[str, float]:
        self.timings = {}
        prepared = prepare(batch, self.version, self.stage)  # staleness, zero-variance filter, advantages
        stats = {**prepared.stats, "lr": self.optimizer.param_groups[0]["lr"]}
        self.version += 1
        keep = prepared.keep
        if not keep.any():  # nothing to learn from: no optimizer step, and the LR warm-up does not advance
            stats.update({"loss": 0.0, "grad_norm": 0.0, "train/skipped": 1.0})
            return stats
        device = next(self.model.parameters()).device
        stats.update(self._update(batch.select(keep).to(device), prepared.advantages.to(device)))
        return stats

    def _update(self, b: RolloutBatch, adv: torch.Tensor) -> dict[str, float]:
        self.model.train()
        mask = b.loss_mask[:, 1:]
        t0 = time.perf_counter()
        if self.split is None:
            entropy_t, _, out = self._terms(b, adv)
            loss = objective = self.aggregate(out.per_token, mask, b.group)
            loss_stats, entropy = out.stats, _masked_mean(entropy_t, mask)
        else:
            objective, loss, loss_stats, entropy = self._split_terms(b, adv)
        stats = {f"train/{k}": float(v) for k, v in loss_stats.items()}
        stats["train/entropy"] = entropy
        stats["train/adv_abs_mean"] = adv.abs().mean().item()
        self.timings["logprob_forward"] = time.perf_counter() - t0
        return {**stats, **self._apply(objective, loss)}

    def _terms(self, b: RolloutBatch, adv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, "LossOutput"]:
        """Entropy (no gradient), log-probs of the taken tokens (FP32 head, §3.3), both [N, T-1], and the
        registry's per-token loss (§3.2) for the sequences of ``b`` with advantages ``adv``.

        The forward runs over buckets of the batch, each trimmed to its longest sequence (right padding never
        changes a causal model's real tokens), and the pieces go back to the batch's row order and width: the
        same values and gradients as one forward over the padded batch, on far fewer tokens. A model with a
        shared-prefix forward (``forward_prefixed``, the built-in one) gets buckets of whole groups and runs
        each group's prompt once for its G samples (they share it); other models, and several ranks, get
        buckets of rows of similar length and the plain forward."""
        autocast = (
            torch.autocast(device_type=b.input_ids.device.type, dtype=torch.bfloat16)
            if self.optim.bf16_autocast
            else nullcontext()
        )
        width = b.input_ids.shape[1]
        lengths = b.attention_mask.sum(dim=1)
        logp_parts, entropy_parts, order = [], [], []
        # a model with a shared-prefix forward runs each group's prompt once (not over several ranks: FSDP
        # gathers weights in the model's forward only)
        prefixed = getattr(self.model, "forward_prefixed", None) if self.split is None else None
        buckets = b.group_buckets(ROWS_PER_BUCKET) if prefixed else []
        splits = [b.split_prompts(rows) for rows in buckets]
        if not splits or any(sp is None for sp in splits):
            # over several ranks every rank must run the same number of forwards (FSDP gathers in each): one
            buckets = b.length_buckets(ROWS_PER_BUCKET if self.split is None else b.n)
            splits = [None] * len(buckets)
        for rows, sp in zip(buckets, splits):
            with autocast:
                if sp is None:
                    w = min(width, max(2, int(lengths[rows].max())))
                    targets = b.input_ids[rows, 1:w]
                    logits = self.model(b.input_ids[rows, : w - 1], b.attention_mask[rows, : w - 1])
                else:
                    last, cont = prefixed(sp.prompt_ids, sp.prompt_mask, sp.completions, sp.prompt_index)
                    # completion token j is predicted at the prompt's last token (j = 0) or at completion j - 1
                    targets, logits = sp.completions, torch.cat((last[sp.prompt_index, None], cont[:, :-1]), dim=1)
            logp, ent = token_logprobs(logits, targets).float(), _token_entropy(logits.detach())
            if sp is None:
                logp_parts.append(F.pad(logp, (0, width - 1 - logp.shape[1])))
                entropy_parts.append(F.pad(ent, (0, width - 1 - ent.shape[1])))
            else:  # back to the batch's layout: completion token j of a row sits at column start + j - 1
                logp_parts.append(_to_rows(logp, sp.starts, b.completion_lengths[rows], width - 1))
                entropy_parts.append(_to_rows(ent, sp.starts, b.completion_lengths[rows], width - 1))
            order.append(rows)
        inverse = torch.argsort(torch.cat(order))
        logp, entropy = torch.cat(logp_parts)[inverse], torch.cat(entropy_parts)[inverse]
        mask = b.loss_mask[:, 1:]
        return entropy, logp, self.loss_fn(logp, b.gen_logprobs[:, 1:], adv, mask, seq_lengths=mask.sum(dim=1))

    def _split_terms(self, b: RolloutBatch, adv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict, float]:
        """This rank's share of the step (``DataParallel``): ``(objective to backpropagate, whole-batch loss,
        whole-batch loss stats, whole-batch entropy)``. The aggregation (§3.4) sees the whole batch's mask and
        groups, so its denominators are the whole batch's; the stats come from the loss recomputed (without
        gradient) on the log-probs of every rank."""
        split, mask = self.split, b.loss_mask[:, 1:]
        rows = split.rows(b.group)
        entropy, logp, out = self._terms(b.select(rows.mask), adv[rows.mask])
        share = self.aggregate(split.scatter(out.per_token, rows), mask, b.group)
        local = torch.stack((logp.detach(), entropy), dim=1)
        logp_all, entropy_all = split.gather(local, rows).unbind(dim=1)
        with torch.no_grad():
            whole = self.loss_fn(logp_all, b.gen_logprobs[:, 1:], adv, mask, seq_lengths=mask.sum(dim=1))
            loss = self.aggregate(whole.per_token, mask, b.group)
        # FSDP averages the ranks' gradients; the shares sum to the loss, so scale each by the world size
        return share * split.world, loss, whole.stats, _masked_mean(entropy_all, mask)

    # consecutive steps not applied because something was non-finite; MAX_NONFINITE of them stop the run
    nonfinite_streak = 0

    def _apply(self, objective: torch.Tensor, loss: torch.Tensor) -> dict[str, float]:
        """Backward, clipping at the global gradient norm, AdamW and the LR schedule; skipped when the loss or
        the gradient norm is not finite (the same decision on every rank: both are whole-batch values). An
        update that leaves a non-finite weight (a huge learning rate) is undone: weights and optimizer state go
        back to their values before it, so a checkpoint never holds one. ``MAX_NONFINITE`` such skips in a row
        stop the run with a UserError naming the likely fix."""
        self.optimizer.zero_grad(set_to_none=True)
        if not torch.isfinite(loss):
            return self._skip_nonfinite("loss", {"loss": float("nan"), "grad_norm": float("nan")})
        t0 = time.perf_counter()
        objective.backward()
        t1 = time.perf_counter()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.optim.grad_clip)
        if not math.isfinite(float(grad_norm)):
            self.optimizer.zero_grad(set_to_none=True)
            return self._skip_nonfinite("gradient", {"loss": loss.item(), "grad_norm": float("nan")})
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        before = _snapshot(params, self.optimizer)
        try:
            self.optimizer.step()
            finite = math.isfinite(float(torch.nn.utils.get_total_norm([p.detach() for p in params])))
        except RuntimeError as exc:  # torch refuses a step size beyond float range, maybe after updating some params
            if "overflow" not in str(exc):
                raise
            finite = False
        if not finite:
            _restore(params, self.optimizer, before)
            self.optimizer.zero_grad(set_to_none=True)
            return self._skip_nonfinite("weights after the update", {"loss": loss.item(), "grad_norm": float(grad_norm)})
        self.lr_schedule.step()
        self.nonfinite_streak = 0
        self.timings.update(backward=t1 - t0, optimizer=time.perf_counter() - t1)
        return {"loss": loss.item(), "grad_norm": float(grad_norm), "train/nan_skipped": 0.0}

    def _skip_nonfinite(self, what: str, stats: dict[str, float]) -> dict[str, float]:
        self.nonfinite_streak += 1
        print(f"warning: step {self.version}: non-finite {what}; step skipped, weights unchanged", file=sys.stderr)
        if self.nonfinite_streak >= MAX_NONFINITE:
            raise UserError(
                f"training diverged: {self.nonfinite_streak} steps in a row gave a non-finite {what} and were skipped; "
                f"the last checkpoint holds finite weights. Lower optim.lr (now {self.optim.lr:g}) or raise "
                "optim.warmup_steps, then --resume"
            )
        return {**stats, "train/nan_skipped": 1.0}


MAX_NONFINITE = 5


def _snapshot(params: list[torch.Tensor], optimizer: torch.optim.Optimizer) -> tuple[list[torch.Tensor], dict]:
    """Copies of the weights and optimizer state an update changes, to undo it (costs their memory once)."""
    state = {id(p): {k: v.clone() if torch.is_tensor(v) else v for k, v in optimizer.state[p].items()} for p in params}
    return [p.detach().clone() for p in params], state


@torch.no_grad()
def _restore(params: list[torch.Tensor], optimizer: torch.optim.Optimizer, snap: tuple[list[torch.Tensor], dict]) -> None:
    weights, state = snap
    for p, w in zip(params, weights):
        p.copy_(w)
        if state[id(p)]:
            optimizer.state[p] = state[id(p)]
        else:
            optimizer.state.pop(p, None)  # the first update created the state; none before it


def _to_rows(values: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor, width: int) -> torch.Tensor:
    """values [n, C] of completion tokens (token j of row i at [i, j], real for j < lengths[i]) placed at the
    batch layout's columns [n, width]: token j of a completion starting at ``starts[i]`` is predicted at column
    starts[i] + j - 1; every other column is 0."""
    j = torch.arange(values.shape[1], device=values.device)
    real = j < lengths[:, None]
    cols = (starts[:, None] - 1 + j).clamp(0, width - 1)
    return values.new_zeros(values.shape[0], width).scatter_add(1, cols, torch.where(real, values, 0.0))


def _token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Policy entropy [N, T] at every position (paper A.12 tracks it; not a predictor)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean of ``values`` [N, T] weighted by ``mask`` over the trained token positions."""
    denom = mask.sum().clamp_min(1.0)
    return float((values * mask).sum() / denom)
