"""Zero-variance filtering (§3.2, Fig. 6a) and No-Positive-Resampling (§3.2, Fig. 6b) look at correctness, not at the shaped reward:
under DAPO's length penalty an all-correct group of differing lengths has no learning signal and is dropped."""

from __future__ import annotations

import torch

from scalerl.algo.curriculum import NPRSampler
from scalerl.algo.length_control import LengthPenalty
from scalerl.config import load_config
from scalerl.rollout import RolloutBatch
from scalerl.pipeline.runner import _update_curriculum


def _batch() -> RolloutBatch:
    """Group 0: all correct with lengths 2, 3, 7, 9 (shaped rewards differ); group 1: mixed."""
    n, t = 8, 12
    lengths = torch.tensor([2, 3, 7, 9, 4, 4, 4, 4])
    correct = torch.tensor([True, True, True, True, True, False, True, False])
    base = torch.where(correct, torch.tensor(1.0), torch.tensor(-1.0))
    rewards = LengthPenalty(max_new_tokens=10, l_max=10, l_cache=6).shape_rewards(base, lengths, correct)
    assert len(set(rewards[:4].tolist())) > 1  # the penalty makes the all-correct group's rewards unequal
    mask = torch.zeros(n, t)
    mask[:, 3:] = 1
    return RolloutBatch(
        index=0,
        problem_ids=["all_correct", "mixed"],
        group=torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]),
        input_ids=torch.randint(3, 20, (n, t)),
        attention_mask=torch.ones(n, t, dtype=torch.bool),
        loss_mask=mask,
        gen_logprobs=torch.full((n, t), -2.0),
        versions=torch.zeros(n, t, dtype=torch.long),
        rewards=rewards,
        correct=correct,
        truncated=torch.zeros(n, dtype=torch.bool),
        interrupted=torch.zeros(n, dtype=torch.bool),
        completion_lengths=lengths,
    )


def test_length_penalised_all_correct_group_is_dropped():
    from scalerl.build import build_model
    from scalerl.pipeline.prepare import StageConfig, train_step
    from scalerl.pipeline.schedules import SCHEDULES
    from scalerl.trainer import Trainer

    cfg = load_config(
        "dapo_qwen", None, ["model.d_model=16", "model.n_layers=1", "model.n_heads=2", "algo.zero_variance_filter=true"]
    )
    trainer = Trainer(build_model(cfg.model, 0).model, cfg.algo, cfg.optim)
    stats = train_step(trainer, _batch(), StageConfig.of(cfg.algo, SCHEDULES.get("pipeline_rl")(8)))
    assert stats["train/samples_kept"] == 4.0  # only the mixed group
    assert stats["train/zero_var_frac"] == 0.5


def test_no_positive_resampling_counts_correct_answers_not_shaped_reward():
    npr = NPRSampler(["all_correct", "mixed"], seed=0, threshold=0.9)
    _update_curriculum(npr, _batch())
    npr.next_ids(1)  # retirement takes effect as the next epoch begins (§3.2)
    assert npr.pass_rate("all_correct") == 1.0 and npr.is_retired("all_correct")
    assert npr.pass_rate("mixed") == 0.5 and not npr.is_retired("mixed")
