"""The trainer: one optimizer step of the RL objective on a batch the driver has already prepared.

Algorithm-blind: the loss (§3.2, Eq. 4 for CISPO) and the aggregation (§3.2, Fig. 14a) come from the registries by
the config's names; nothing here knows which recipe it runs, and nothing here knows the schedule. The driver
(``pipeline/prepare.py``) runs the batch-preparation stage first (staleness guard, truncation, zero-variance
filter, advantages) and hands the trainer the kept sequences and their advantages. A step is::

    logp, entropy = policy_logprobs(model, batch)               # π_train of the taken tokens ("The forward")
    out = loss(logp, batch.gen_logprobs, advantages, mask)      # per-token terms, ratio anchored on π_gen (Eq. 2)
    objective = aggregate(out.per_token, mask, batch.group)     # the scalar to minimise
    update.apply(objective)                                     # backward, clip, AdamW, guard ("The update")

This file holds the three, in that order: the ``Trainer``; the forward (log-probs of the taken tokens and the
entropy, over length buckets or shared prompts); the update (AdamW with warm-up, clipping, the non-finite guard).

Over several ranks (torchrun, ``scalerl/fsdp.py``) the model is sharded with FSDP2 and ``split`` (a
``DataParallel``) says which prompts this rank trains on; every denominator of the aggregation is the whole
batch's, which every rank holds, so the step is the single-process one.
"""

from __future__ import annotations

import math
import sys
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from scalerl import algo
from scalerl.config import AlgoConfig, OptimConfig
from scalerl.errors import UserError
from scalerl.models.fp32_head import enable_fp32_head, token_logprobs
from scalerl.rollout import RolloutBatch
from scalerl.timing import Stopwatch, timed

if TYPE_CHECKING:
    from scalerl.fsdp import DataParallel


class Trainer:
    def __init__(
        self, model: torch.nn.Module, algo_cfg: AlgoConfig, optim: OptimConfig, split: "DataParallel | None" = None
    ) -> None:
        """``algo_cfg`` (the run's ``algo``) names the loss and the aggregation; ``optim`` the optimizer's
        numbers; nothing else of the run's config reaches the trainer."""
        self.model = model
        self.bf16 = optim.bf16_autocast
        self.split = split  # None: this process trains on the whole batch alone
        if algo_cfg.fp32_head:
            enable_fp32_head(model)
        self.loss_fn = algo.build_loss(algo_cfg.loss)
        self.aggregate = algo.AGGREGATIONS.get(algo_cfg.aggregation, "algo.aggregation")
        if split is not None:
            split.check_linear(self.aggregate, algo_cfg.aggregation)
        self.update = GuardedUpdate(model, optim)
        self.version = 0  # policy version = steps taken (skipped ones included)
        self.timings: dict[str, float] = {}  # the last step's phases -> seconds (the runner logs timing/*_s)

    def step(self, batch: RolloutBatch, advantages: torch.Tensor) -> dict[str, float]:
        """One step on the kept sequences ``batch`` with their ``advantages`` [batch.n]; an empty batch (nothing
        to learn from) takes no optimizer step and does not advance the LR warm-up, but counts as a version."""
        self.timings = {}
        self.version += 1
        stats = {"lr": self.update.lr}
        if batch.n == 0:
            return {**stats, "loss": 0.0, "grad_norm": 0.0, "train/skipped": 1.0}
        device = next(self.model.parameters()).device
        b, adv = batch.to(device), advantages.to(device)
        self.model.train()
        with timed(self.timings, "logprob_forward"):
            objective_of = self._objective if self.split is None else self._split_objective
            objective, loss, loss_stats, entropy = objective_of(b, adv)
            stats.update({f"train/{k}": float(v) for k, v in loss_stats.items()})
            stats.update({"train/entropy": entropy, "train/adv_abs_mean": adv.abs().mean().item()})
        return {**stats, **self.update.apply(objective, loss, self.version, self.timings)}

    def _objective(self, b: RolloutBatch, adv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict, float]:
        """``(objective to backpropagate, loss, loss stats, entropy)`` for this process alone: the objective is
        the loss."""
        mask = b.loss_mask[:, 1:]
        logp, entropy = policy_logprobs(self.model, b, bf16=self.bf16)
        out = self.loss_fn(logp, b.gen_logprobs[:, 1:], adv, mask, seq_lengths=mask.sum(dim=1))
        loss = self.aggregate(out.per_token, mask, b.group)
        return loss, loss, out.stats, masked_mean(entropy, mask)

    def _split_objective(self, b: RolloutBatch, adv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict, float]:
        """This rank's share of the step (``DataParallel``). The aggregation sees the whole batch's mask and
        groups, so its denominators are the whole batch's; the loss and its stats come from the loss recomputed
        (without gradient) on the log-probs of every rank."""
        split, mask = self.split, b.loss_mask[:, 1:]
        rows = split.rows(b.group)
        mine = b.select(rows.mask)
        logp, entropy = policy_logprobs(self.model, mine, bf16=self.bf16, one_forward=True)
        out = self.loss_fn(logp, mine.gen_logprobs[:, 1:], adv[rows.mask], mine.loss_mask[:, 1:],
                           seq_lengths=mine.loss_mask[:, 1:].sum(dim=1))
        share = self.aggregate(split.scatter(out.per_token, rows), mask, b.group)
        local = torch.stack((logp.detach(), entropy), dim=1)
        logp_all, entropy_all = split.gather(local, rows).unbind(dim=1)
        with torch.no_grad():
            whole = self.loss_fn(logp_all, b.gen_logprobs[:, 1:], adv, mask, seq_lengths=mask.sum(dim=1))
            loss = self.aggregate(whole.per_token, mask, b.group)
        # FSDP averages the ranks' gradients; the shares sum to the loss, so scale each by the world size
        return share * split.world, loss, whole.stats, masked_mean(entropy_all, mask)

    # ------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The trainer's state; over several ranks a collective whose result (unsharded, the same format as a
        single process's) is on rank 0, the other ranks getting empty model and optimizer entries."""
        optimizer = self.update.optimizer
        if self.split is None:
            model, opt_state = self.model.state_dict(), optimizer.state_dict()
        else:
            model, opt_state = self.split.state(self.model, optimizer)
        return {"model": model, "optimizer": opt_state, "lr_schedule": self.update.lr_schedule.state_dict(),
                "version": self.version}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load ``state_dict()``'s result; over several ranks a collective where rank 0 passes the state and
        the other ranks ``{}``."""
        if self.split is None:
            self.model.load_state_dict(state["model"])
            self.update.optimizer.load_state_dict(state["optimizer"])
        else:
            state = self.split.load(self.model, self.update.optimizer, state)
        self.update.lr_schedule.load_state_dict(state["lr_schedule"])
        self.version = int(state["version"])


# ------------------------------------------------------------------------------------------ the forward
# Log-probs of the taken tokens under π_train (the numerator of Eq. 2's importance ratio, with the FP32 LM head
# when it is on, §3.2 / App. A.19) and the policy entropy (App. A.12). The forward runs over buckets of the batch,
# each trimmed to its longest sequence (right padding never changes a causal model's real tokens), and the pieces
# go back to the batch's row order and width: the same values and gradients as one forward over the padded batch,
# on far fewer tokens. A model with a shared-prefix forward (``forward_prefixed``, the built-in one) gets buckets of
# whole groups and runs each group's prompt once for its G samples (they share it); other models get buckets of
# rows of similar length and the plain forward.

# sequences per forward: buckets of similar length, each trimmed to its own longest sequence
ROWS_PER_BUCKET = 32


def policy_logprobs(
    model: nn.Module, b: RolloutBatch, *, bf16: bool, one_forward: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log-probs of the taken tokens with gradient, entropy without)``, both [N, T-1]: column ``t`` is token
    ``t + 1`` predicted at ``t``. ``bf16``: under bf16 autocast (the head stays FP32 when switched). With
    ``one_forward`` the whole batch is one plain forward (over several ranks every rank must run the same number
    of forwards, since FSDP gathers weights in each)."""
    autocast = torch.autocast(device_type=b.input_ids.device.type, dtype=torch.bfloat16) if bf16 else nullcontext()
    width = b.input_ids.shape[1]
    lengths = b.attention_mask.sum(dim=1)
    prefixed = None if one_forward else getattr(model, "forward_prefixed", None)
    buckets = b.group_buckets(ROWS_PER_BUCKET) if prefixed else []
    splits = [b.split_prompts(rows) for rows in buckets]
    if not splits or any(sp is None for sp in splits):
        buckets = b.length_buckets(b.n if one_forward else ROWS_PER_BUCKET)
        splits = [None] * len(buckets)
    logp_parts, entropy_parts, order = [], [], []
    for rows, sp in zip(buckets, splits):
        with autocast:
            if sp is None:
                w = min(width, max(2, int(lengths[rows].max())))
                targets = b.input_ids[rows, 1:w]
                logits = model(b.input_ids[rows, : w - 1], b.attention_mask[rows, : w - 1])
            else:
                last, cont = prefixed(sp.prompt_ids, sp.prompt_mask, sp.completions, sp.prompt_index)
                # completion token j is predicted at the prompt's last token (j = 0) or at completion j - 1
                targets, logits = sp.completions, torch.cat((last[sp.prompt_index, None], cont[:, :-1]), dim=1)
        logp, ent = token_logprobs(logits, targets).float(), token_entropy(logits.detach())
        if sp is None:
            logp_parts.append(F.pad(logp, (0, width - 1 - logp.shape[1])))
            entropy_parts.append(F.pad(ent, (0, width - 1 - ent.shape[1])))
        else:  # back to the batch's layout: completion token j of a row sits at column start + j - 1
            logp_parts.append(_to_rows(logp, sp.starts, b.completion_lengths[rows], width - 1))
            entropy_parts.append(_to_rows(ent, sp.starts, b.completion_lengths[rows], width - 1))
        order.append(rows)
    inverse = torch.argsort(torch.cat(order))
    return torch.cat(logp_parts)[inverse], torch.cat(entropy_parts)[inverse]


def _to_rows(values: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor, width: int) -> torch.Tensor:
    """values [n, C] of completion tokens (token j of row i at [i, j], real for j < lengths[i]) placed at the
    batch layout's columns [n, width]: token j of a completion starting at ``starts[i]`` is predicted at column
    starts[i] + j - 1; every other column is 0."""
    j = torch.arange(values.shape[1], device=values.device)
    real = j < lengths[:, None]
    cols = (starts[:, None] - 1 + j).clamp(0, width - 1)
    return values.new_zeros(values.shape[0], width).scatter_add(1, cols, torch.where(real, values, 0.0))


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Policy entropy [N, T] at every position (the paper tracks it, App. A.12; not a predictor)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean of ``values`` [N, T] weighted by ``mask`` over the trained token positions."""
    return float((values * mask).sum() / mask.sum().clamp_min(1.0))


# ------------------------------------------------------------------------------------------ the update
# Backward, clipping at the global gradient norm, AdamW with a linear LR warm-up (§2, App. A.3), and the non-finite
# guard: a step whose loss or gradient norm is not finite is skipped, logged, never applied (the same decision on
# every rank: both are whole-batch values); an update that leaves a non-finite weight (a huge learning rate) is
# undone, weights and optimizer state going back to their values before it, so a checkpoint never holds one.
# ``MAX_NONFINITE`` such skips in a row stop the run with a UserError naming the likely fix.

MAX_NONFINITE = 5


class GuardedUpdate:
    """AdamW and its LR schedule over ``model``'s trainable parameters, applied through the non-finite guard."""

    def __init__(self, model: nn.Module, optim: OptimConfig) -> None:
        self.model, self.optim = model, optim
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad],
            lr=optim.lr, betas=optim.betas, eps=optim.eps, weight_decay=optim.weight_decay,
        )
        warm = optim.warmup_steps
        self.lr_schedule = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / (warm + 1)) if warm else 1.0
        )
        self.nonfinite_streak = 0  # consecutive steps not applied because something was non-finite

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def apply(
        self, objective: torch.Tensor, loss: torch.Tensor, step: int, timings: dict[str, float]
    ) -> dict[str, float]:
        """Backpropagate ``objective`` (this process's share of ``loss``, the whole-batch value), clip, step:
        ``{"loss", "grad_norm", "train/nan_skipped"}``. ``step`` names the step in a warning; the ``backward`` and
        ``optimizer`` seconds go to ``timings``."""
        self.optimizer.zero_grad(set_to_none=True)
        if not torch.isfinite(loss):
            return self._skip(step, "loss", {"loss": float("nan"), "grad_norm": float("nan")})
        with timed(timings, "backward"):
            objective.backward()
        clock = Stopwatch().start()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.optim.grad_clip)
        if not math.isfinite(float(grad_norm)):
            self.optimizer.zero_grad(set_to_none=True)
            return self._skip(step, "gradient", {"loss": loss.item(), "grad_norm": float("nan")})
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
            return self._skip(step, "weights after the update", {"loss": loss.item(), "grad_norm": float(grad_norm)})
        self.lr_schedule.step()
        self.nonfinite_streak = 0
        timings["optimizer"] = clock.stop()
        return {"loss": loss.item(), "grad_norm": float(grad_norm), "train/nan_skipped": 0.0}

    def _skip(self, step: int, what: str, stats: dict[str, float]) -> dict[str, float]:
        self.nonfinite_streak += 1
        print(f"warning: step {step}: non-finite {what}; step skipped, weights unchanged", file=sys.stderr)
        if self.nonfinite_streak >= MAX_NONFINITE:
            raise UserError(
                f"training diverged: {self.nonfinite_streak} steps in a row gave a non-finite {what} and were skipped; "
                f"the last checkpoint holds finite weights. Lower optim.lr (now {self.optim.lr:g}) or raise "
                "optim.warmup_steps, then --resume"
            )
        return {**stats, "train/nan_skipped": 1.0}


def _snapshot(params: list[torch.Tensor], optimizer: torch.optim.Optimizer) -> tuple[list[torch.Tensor], dict[int, Any]]:
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
