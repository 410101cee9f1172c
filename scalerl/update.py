"""The parameter update after the loss: backward, clipping at the global gradient norm, AdamW with a linear LR
warm-up (the paper's optimizer, §2 / App. A.3), and the non-finite guard.

The guard: a step whose loss or gradient norm is not finite is skipped, logged, never applied (the same decision on
every rank: both are whole-batch values); an update that leaves a non-finite weight (a huge learning rate) is undone,
weights and optimizer state going back to their values before it, so a checkpoint never holds one.
``MAX_NONFINITE`` such skips in a row stop the run with a UserError naming the likely fix.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

import torch
from torch import nn

from scalerl.config import OptimConfig
from scalerl.errors import UserError

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
        t0 = time.perf_counter()
        objective.backward()
        t1 = time.perf_counter()
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
        timings.update(backward=t1 - t0, optimizer=time.perf_counter() - t1)
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
