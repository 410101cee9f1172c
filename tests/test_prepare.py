"""The batch-preparation stage (``scalerl/pipeline/prepare.py``, issue 14): its steps in order, and the driver's
step (the stage, then the trainer) on a fixed batch giving the loss and gradients of the pipeline written out by hand (staleness guard §3.1,
zero-variance filter Fig. 6a, advantages on the kept groups Fig. 14b, loss §3.2, aggregation Fig. 14a) to 1e-6."""

from __future__ import annotations

import copy

import pytest
import torch

from scalerl import algo
from scalerl.build import build_model
from scalerl.config import load_config
from scalerl.models.fp32_head import enable_fp32_head, token_logprobs
from scalerl.rollout import RolloutBatch
from scalerl.pipeline.prepare import ORDER, PREP_STEPS, StageConfig, prepare, train_step
from scalerl.pipeline.schedules import SCHEDULES
from scalerl.trainer import Trainer
from test_trainer_update import ragged_batch

SETS = ["model.d_model=32", "model.n_layers=2", "model.n_heads=2", "model.max_seq_len=64", "threads=1",
        "optim.grad_clip=1e9"]


def _batch(seed: int = 0) -> RolloutBatch:
    """24 right-padded rollouts in 6 groups of 4: group 0 all correct, group 1 all wrong, the rest mixed;
    every sampled token from policy version 4."""
    b = ragged_batch(n=24, groups=6, seed=seed)
    b.group = torch.arange(24) // 4
    b.versions = torch.where(b.loss_mask > 0, 4, -1)
    idx = torch.arange(24)
    b.correct = (b.group == 0) | ((b.group >= 2) & (idx % 2 == 0))
    b.rewards = torch.where(b.correct, 1.0, -1.0)
    return b


def test_steps_are_registered_in_order():
    assert set(ORDER) == set(PREP_STEPS.names()) and ORDER.index("zero_variance") < ORDER.index("advantages")


def test_staleness_guard_drops_the_whole_group():
    b = _batch()
    b.versions[9, b.loss_mask[9] > 0] = 0  # sequence 9 (group 2) is 6 versions old at trainer version 6
    assert bool((b.loss_mask[9] > 0).any())
    p = prepare(b, 6, StageConfig(max_staleness=4, zero_variance_filter=False, advantage_norm="batch", advantage_eps=1e-6))
    assert p.keep.tolist() == [g != 2 for g in b.group.tolist()]
    assert p.stats["train/stale_dropped"] == 1.0 and p.stats["train/staleness_max"] == 6.0


def test_advantages_are_taken_after_the_filter():
    b = _batch()
    p = prepare(b, 4, StageConfig(max_staleness=4, zero_variance_filter=True, advantage_norm="batch", advantage_eps=1e-6))
    assert p.keep.tolist() == [g >= 2 for g in b.group.tolist()]
    expected = algo.compute_advantages(b.rewards[p.keep], b.group[p.keep], "batch", 1e-6)
    torch.testing.assert_close(p.advantages, expected, rtol=0, atol=0)
    assert abs(float(p.advantages.std(correction=0)) - 1.0) < 1e-5  # unit scale over the kept groups
    assert p.stats["train/zero_var_frac"] == pytest.approx(2 / 6)


@pytest.mark.parametrize("preset", ["scalerl", "grpo_deepseek"])
def test_trainer_step_gives_the_hand_written_loss_and_gradients(preset):
    torch.manual_seed(0)
    cfg = load_config(preset, None, [*SETS, "algo.zero_variance_filter=true"])
    b = _batch(seed=1)
    model = build_model(cfg.model, 0).model
    reference = copy.deepcopy(model)
    tr = Trainer(model, cfg.algo, cfg.optim)
    stats = train_step(tr, b, StageConfig.of(cfg.algo, SCHEDULES.get(cfg.schedule.name)(cfg.schedule.k)))

    # the same step written out: filter, advantages on the kept groups, loss, aggregation, gradients
    if cfg.algo.fp32_head:
        enable_fp32_head(reference)
    reference.train()
    keep = algo.zero_variance_mask(b.correct, b.group)
    k = b.select(keep)
    adv = algo.compute_advantages(k.rewards, k.group, cfg.algo.advantages.norm, cfg.algo.advantages.eps)
    logits = reference(k.input_ids[:, :-1], k.attention_mask[:, :-1])
    logp = token_logprobs(logits, k.input_ids[:, 1:]).float()
    mask = k.loss_mask[:, 1:]
    out = algo.build_loss(cfg.algo.loss)(logp, k.gen_logprobs[:, 1:], adv, mask)
    loss = algo.AGGREGATIONS.get(cfg.algo.aggregation)(out.per_token, mask, k.group)
    loss.backward()

    assert stats["train/samples_kept"] == float(keep.sum()) == 16.0
    assert stats["loss"] == pytest.approx(float(loss.detach()), abs=1e-6)
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-5, msg=name)


def test_truncated_samples_are_left_out_of_the_loss_by_default():
    """App. A.6, A.15: a truncated sample is excluded from the loss (alone, not its group) and counted in the
    truncation rate; ``algo.truncated: train`` trains on it with the incorrect reward, as before. Group 2 holds
    sequences 8-11 (8 and 10 correct); 9 is truncated (incorrect): excluded, its group keeps 8, 10, 11 and the
    baseline is their mean (1 + 1 - 1) / 3. Group 3's only incorrect ones (13, 15) truncated leaves it all
    correct: the zero-variance filter then drops it."""
    b = _batch()
    b.truncated[[9, 13, 15]] = True
    paper = prepare(b, 4, StageConfig(max_staleness=4, zero_variance_filter=True, advantage_norm="none",
                                      advantage_eps=1e-6))
    assert paper.stats["train/truncation_rate"] == pytest.approx(3 / 24)
    assert paper.stats["train/truncated_dropped"] == 3.0
    expected = [g >= 2 and i not in (9, 13, 15) and g != 3 for i, g in enumerate(b.group.tolist())]
    assert paper.keep.tolist() == expected
    group2 = [i for i in range(24) if expected[i] and b.group[i] == 2]
    assert group2 == [8, 10, 11]
    adv = dict(zip([i for i in range(24) if expected[i]], paper.advantages.tolist()))
    assert adv[8] == pytest.approx(1 - 1 / 3) and adv[11] == pytest.approx(-1 - 1 / 3)
    old = prepare(b, 4, StageConfig(max_staleness=4, zero_variance_filter=True, advantage_norm="none",
                                    advantage_eps=1e-6, truncated="train"))
    assert old.keep.tolist() == [g >= 2 for g in b.group.tolist()] and old.stats["train/truncated_dropped"] == 0.0


def test_truncated_is_a_config_choice_the_stage_reads():
    cfg = load_config("scalerl", None, SETS)
    assert cfg.algo.truncated == "exclude"
    assert StageConfig.of(cfg.algo, SCHEDULES.get("pipeline_rl")(2)).truncated == "exclude"
    cfg = load_config("scalerl", None, [*SETS, "algo.truncated=train"])
    assert StageConfig.of(cfg.algo, SCHEDULES.get("pipeline_rl")(2)).truncated == "train"


def test_the_stage_takes_its_staleness_bound_from_the_schedule():
    """PipelineRL-k bounds staleness by k; PPO-off-policy-k by k - 1 (§3.1)."""
    cfg = load_config("scalerl", None, SETS)
    assert StageConfig.of(cfg.algo, SCHEDULES.get("pipeline_rl")(8)).max_staleness == 8
    assert StageConfig.of(cfg.algo, SCHEDULES.get("ppo_off_policy")(4)).max_staleness == 3
