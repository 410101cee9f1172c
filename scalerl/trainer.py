"""The trainer: one optimizer step of the RL objective on a batch the driver has already prepared.

Algorithm-blind: the loss (§3.2, Eq. 4 for CISPO) and the aggregation (§3.2, Fig. 14a) come from the registries by
the config's names; nothing here knows which recipe it runs, and nothing here knows the schedule. The driver
(``pipeline/prepare.py``) runs the batch-preparation stage first (staleness guard, truncation, zero-variance
filter, advantages) and hands the trainer the kept sequences and their advantages. A step is::

    logp, entropy = policy_logprobs(model, batch)               # π_train of the taken tokens (logprobs.py)
    out = loss(logp, batch.gen_logprobs, advantages, mask)      # per-token terms, ratio anchored on π_gen (Eq. 2)
    objective = aggregate(out.per_token, mask, batch.group)     # the scalar to minimise
    update.apply(objective)                                     # backward, clip, AdamW, non-finite guard (update.py)

Over several ranks (torchrun, ``scalerl/fsdp.py``) the model is sharded with FSDP2 and ``split`` (a
``DataParallel``) says which prompts this rank trains on; every denominator of the aggregation is the whole
batch's, which every rank holds, so the step is the single-process one.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch

from scalerl import algo
from scalerl.config import AlgoConfig, OptimConfig
from scalerl.logprobs import masked_mean, policy_logprobs
from scalerl.models.fp32_head import enable_fp32_head
from scalerl.rollout import RolloutBatch
from scalerl.update import GuardedUpdate

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
        t0 = time.perf_counter()
        objective, loss, loss_stats, entropy = (self._objective if self.split is None else self._split_objective)(b, adv)
        stats.update({f"train/{k}": float(v) for k, v in loss_stats.items()})
        stats.update({"train/entropy": entropy, "train/adv_abs_mean": adv.abs().mean().item()})
        self.timings["logprob_forward"] = time.perf_counter() - t0
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
