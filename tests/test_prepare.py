"""The batch-preparation stage (``scalerl/pipeline/prepare.py``, issue 14): its steps in order, and the trainer's
step on a fixed batch giving the loss and gradients of the pipeline written out by hand (staleness guard §3.1,
zero-variance filter §3.6, advantages on the kept groups §3.5, loss §3.2, aggregation §3.4) to 1e-6."""

from __future__ import annotations

import copy

import pytest
import torch

from scalerl import algo
from scalerl.build import build_model
from scalerl.config import load_config
from scalerl.models.fp32_head import enable_fp32_head, token_logprobs
from scalerl.pipeline.batch import RolloutBatch
from scalerl.pipeline.prepare import ORDER, PREP_STEPS, StageConfig, prepare
from scalerl.pipeline.schedules import SCHEDULES
from scalerl.trainer import Trainer

SETS = ["model.d_model=32", "model.n_layers=2", "model.n_heads=2", "model.max_seq_len=64", "threads=1",
        "optim.grad_clip=1e9"]


def _batch(seed: int = 0, n: int = 24, groups: int = 6) -> RolloutBatch:
    """Right-padded rollouts: 6 groups of 4; group 0 all correct, group 1 all wrong, the rest mixed."""
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(3, 6, (n,), generator=g)
    completion = torch.randint(1, 14, (n,), generator=g)
    width = int((prompt + completion).max())
    ids = torch.zeros(n, width, dtype=torch.long)
    attn = torch.zeros(n, width, dtype=torch.bool)
    loss_mask, gen_lp = torch.zeros(n, width), torch.zeros(n, width)
    versions = torch.full((n, width), -1, dtype=torch.long)
    for i in range(n):
        p, c = int(prompt[i]), int(completion[i])
        ids[i, : p + c] = torch.randint(3, 30, (p + c,), generator=g)
        attn[i, : p + c] = True
        loss_mask[i, p : p + c] = 1.0
        gen_lp[i, p : p + c] = -torch.rand(c, generator=g) * 3
        versions[i, p : p + c] = 4
    group = torch.arange(n) // (n // groups)
    correct = torch.rand(n, generator=g) < 0.5
    correct[group == 0], correct[group == 1] = True, False
    correct[(group >= 2) & (torch.arange(n) % 4 == 0)] = True
    correct[(group >= 2) & (torch.arange(n) % 4 == 1)] = False
    rewards = torch.where(correct, 1.0, -1.0)
    return RolloutBatch(
        index=0, problem_ids=[str(i) for i in range(groups)], group=group, input_ids=ids, attention_mask=attn,
        loss_mask=loss_mask, gen_logprobs=gen_lp, versions=versions, rewards=rewards, correct=correct,
        truncated=torch.zeros(n, dtype=torch.bool), interrupted=torch.zeros(n, dtype=torch.bool),
        completion_lengths=completion,
    )


def test_steps_are_registered_in_order():
    assert set(ORDER) == set(PREP_STEPS.names()) and ORDER.index("zero_variance") < ORDER.index("advantages")


def test_staleness_guard_drops_the_whole_group():
    b = _batch()
    b.versions[9, b.loss_mask[9] > 0] = 0  # sequence 9 (group 2) is 6 versions old at trainer version 6
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
    tr = Trainer(model, cfg, SCHEDULES.get(cfg.schedule.name)(cfg.schedule.k))
    stats = tr.step(b)

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
