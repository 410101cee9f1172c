"""The batch-preparation stage: what the algorithm does to a batch of rollouts before the loss, in one place.

Registered steps (``PREP_STEPS``), run in this order by :func:`prepare` on a :class:`Prepared` batch:

1. ``staleness``: a sequence whose oldest sampled token is more than the schedule's bound behind the trainer's
   version is dropped with its whole group (§3.1; by construction this never fires, and the count is logged so
   a run proves it);
2. ``truncation``: with ``algo.truncated: exclude`` (the default, the paper's: "the effective batch size (after
   excluding truncated samples)", App. A.15; A.6) a truncated sequence (the hard cap reached without EOS) is left
   out of the loss, alone, not with its group; it still counts in ``train/truncation_rate`` (measured on the whole
   batch). ``truncated: train`` keeps it, trained with the incorrect reward (a hidden length penalty);
3. ``zero_variance``: when ``algo.zero_variance_filter`` is on, groups whose *kept* generations are all correct
   or all incorrect are dropped, no refill (§3.2, Fig. 6a); correctness, not the shaped reward, decides.
   ``train/zero_var_frac`` counts those groups among the groups with a kept generation, as the filter sees them;
4. ``advantages``: group-mean baseline and the configured normalisation on the kept sequences only (§3.2,
   Fig. 14b; the batch std is therefore taken after filtering, argued in ``algo/advantages.py``).

The driver runs the stage on the whole batch (every rank alike, :func:`train_step`) and hands the trainer the kept
sequences and their advantages; the trainer takes log-probs → loss → aggregation → optimizer step. Two pieces of
per-batch work sit at the stage's ends, where their inputs are: reward shaping (§2, App. A.10) in
``pipeline.generator.collate``, beside the length control that generated the batch, and :func:`update_curriculum`
(§3.2, Fig. 6b) in the driver, which owns the prompt sampler.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import torch

from scalerl import algo
from scalerl.config import AlgoConfig
from scalerl.pipeline.schedules import Schedule
from scalerl.rollout import RolloutBatch
from scalerl.registry import Registry

if TYPE_CHECKING:
    from scalerl.trainer import Trainer


@dataclass(frozen=True)
class StageConfig:
    """The numbers and names the stage needs (from the algorithm config and the schedule)."""

    max_staleness: int
    zero_variance_filter: bool
    advantage_norm: str
    advantage_eps: float
    truncated: str = "exclude"  # algo.truncated: "exclude" (App. A.6, A.15) or "train"

    @classmethod
    def of(cls, algo_cfg: AlgoConfig, schedule: Schedule) -> "StageConfig":
        """The stage of a run with algorithm ``algo_cfg`` under ``schedule`` (whose bound is the staleness
        guard's)."""
        return cls(
            max_staleness=schedule.max_staleness(),
            zero_variance_filter=algo_cfg.zero_variance_filter,
            advantage_norm=algo_cfg.advantages.norm,
            advantage_eps=algo_cfg.advantages.eps,
            truncated=algo_cfg.truncated,
        )


@dataclass
class Prepared:
    batch: RolloutBatch
    version: int  # the trainer's policy version before this step
    keep: torch.Tensor  # [N] bool: sequences that reach the loss
    stats: dict[str, float] = field(default_factory=dict)
    advantages: torch.Tensor | None = None  # [keep.sum()] for the kept sequences, in batch order


Step = Callable[[Prepared, StageConfig], None]
PREP_STEPS: Registry[Step] = Registry("batch step")
ORDER = ("staleness", "truncation", "zero_variance", "advantages")


def _groups_where(bad: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """[N] True for every sequence whose group contains a ``bad`` sequence."""
    return torch.isin(group, torch.unique(group[bad]))


@PREP_STEPS.register("staleness")
def staleness_guard(p: Prepared, cfg: StageConfig) -> None:
    b = p.batch
    oldest = b.oldest_version()
    has_tokens = oldest >= 0
    staleness = torch.where(has_tokens, p.version - oldest, torch.zeros_like(oldest))
    stale = staleness > cfg.max_staleness
    p.keep &= ~_groups_where(stale, b.group)
    p.stats.update({
        "train/staleness_mean": staleness[has_tokens].float().mean().item() if has_tokens.any() else 0.0,
        "train/staleness_max": float(staleness.max().item()) if has_tokens.any() else 0.0,
        "train/stale_dropped": float(stale.sum().item()),
        "train/inflight_frac": (b.version_span() > 0).float().mean().item(),
    })


@PREP_STEPS.register("truncation")
def truncation(p: Prepared, cfg: StageConfig) -> None:
    dropped = p.batch.truncated & p.keep if cfg.truncated == "exclude" else torch.zeros_like(p.keep)
    p.keep &= ~dropped
    p.stats["train/truncated_dropped"] = float(dropped.sum().item())


@PREP_STEPS.register("zero_variance")
def zero_variance_filter(p: Prepared, cfg: StageConfig) -> None:
    """Drop the groups whose kept sequences are all correct or all wrong (§3.2, Fig. 6a), when the filter is on.
    ``train/zero_var_frac`` is the share of those groups among the groups the filter sees (logged with the filter
    off too): only the sequences still kept (after the staleness guard and the truncation step) count, each with
    its correctness as the reward reads it (a truncated sample kept under ``truncated: train`` is wrong)."""
    b = p.batch
    kept = p.keep.clone()
    # correctness, not shaped reward (§3.2, Fig. 6a), of the sequences still kept
    seen_correct, seen_group = (b.correct & ~b.truncated)[kept], b.group[kept]
    if cfg.zero_variance_filter:
        p.keep[kept] = algo.zero_variance_mask(seen_correct, seen_group)
    p.stats["train/zero_var_frac"] = algo.zero_variance_frac(seen_correct, seen_group)


@PREP_STEPS.register("advantages")
def advantages(p: Prepared, cfg: StageConfig) -> None:
    b = p.batch
    p.advantages = algo.compute_advantages(
        b.rewards[p.keep], b.group[p.keep], cfg.advantage_norm, cfg.advantage_eps
    )


def prepare(batch: RolloutBatch, version: int, cfg: StageConfig, steps: tuple[str, ...] = ORDER) -> Prepared:
    """Run ``steps`` in order on ``batch``; the result says which sequences reach the loss, with what advantages,
    and the batch's statistics (``train/*``)."""
    p = Prepared(batch=batch, version=version, keep=torch.ones(batch.n, dtype=torch.bool))
    p.stats.update({
        "train/reward_mean": batch.rewards.mean().item(),
        "train/pass_rate": batch.correct.float().mean().item(),
        "train/truncation_rate": batch.truncated.float().mean().item(),
        "train/interruption_rate": batch.interrupted.float().mean().item(),
        "train/completion_len_mean": batch.completion_lengths.float().mean().item(),
    })
    for name in steps:
        PREP_STEPS.get(name)(p, cfg)
    p.stats.update({
        "train/samples": float(batch.n),
        "train/samples_kept": float(p.keep.sum().item()),
        "train/tokens_kept": float(batch.attention_mask[p.keep].sum().item()),  # trained tokens (compute.py)
    })
    return p


def train_step(trainer: "Trainer", batch: RolloutBatch, stage: StageConfig) -> dict[str, float]:
    """One RL step on ``batch``: the stage at the trainer's version, then the trainer's step on the sequences it
    kept with their advantages; the batch's statistics and the step's, in one row."""
    prepared = prepare(batch, trainer.version, stage)
    return {**prepared.stats, **trainer.step(batch.select(prepared.keep), prepared.advantages)}


def update_curriculum(curriculum: Any, batch: RolloutBatch) -> None:
    """The prompt sampler's pass counts from this batch (§3.2, Fig. 6b): every group, before filtering (an
    all-correct group is exactly what No-Positive-Resampling must see), by correctness, not shaped reward."""
    for gi, pid in enumerate(batch.problem_ids):
        sel = batch.group == gi
        curriculum.update(pid, int(batch.correct[sel].sum()), int(sel.sum()))
