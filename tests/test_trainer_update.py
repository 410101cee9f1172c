"""The update's forward over length buckets (trimmed padding) gives the same loss, gradients, log-probs and
entropy as one forward over the whole right-padded batch (§3.2 unchanged, fewer tokens computed)."""

from __future__ import annotations

import pytest
import torch

from scalerl import algo, trainer as trainer_mod
from scalerl.build import build_model
from scalerl.config import load_config
from scalerl.models.fp32_head import token_logprobs
from scalerl.rollout import RolloutBatch
from scalerl.trainer import Trainer, policy_logprobs, token_entropy

SETS = ["model.d_model=32", "model.n_layers=2", "model.n_heads=2", "model.max_seq_len=64", "threads=1",
        "algo.zero_variance_filter=false"]


def ragged_batch(n: int = 40, groups: int = 10, seed: int = 0, shared: bool = False) -> RolloutBatch:
    """``n`` right-padded sequences: prompts of 3-6 tokens, completions of 0-40 (most short, a few long).
    ``shared``: the rows of a group (``i % groups``) continue one prompt, as the samples of a problem do."""
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(3, 7, (n,), generator=g)
    completion = torch.randint(0, 12, (n,), generator=g)
    completion[::9] = 40  # a few long ones set the padded width
    prompts = [torch.randint(3, 30, (int(k),), generator=g) for k in prompt[:groups]]
    if shared:
        prompt = prompt[torch.arange(n) % groups]
    width = int((prompt + completion).max())
    ids = torch.zeros(n, width, dtype=torch.long)
    attn = torch.zeros(n, width, dtype=torch.bool)
    loss_mask = torch.zeros(n, width)
    gen_lp = torch.zeros(n, width)
    for i in range(n):
        p, c = int(prompt[i]), int(completion[i])
        ids[i, : p + c] = torch.randint(3, 30, (p + c,), generator=g)
        if shared:
            ids[i, :p] = prompts[i % groups]
        attn[i, : p + c] = True
        loss_mask[i, p : p + c] = 1.0
        gen_lp[i, p : p + c] = -torch.rand(c, generator=g) * 3
    rewards = torch.where(torch.rand(n, generator=g) < 0.4, 1.0, -1.0)
    return RolloutBatch(
        index=0, problem_ids=[str(i) for i in range(groups)], group=torch.arange(n) % groups, input_ids=ids,
        attention_mask=attn, loss_mask=loss_mask, gen_logprobs=gen_lp, versions=torch.zeros(n, width, dtype=torch.long),
        rewards=rewards, correct=rewards > 0, truncated=torch.zeros(n, dtype=torch.bool),
        interrupted=torch.zeros(n, dtype=torch.bool), completion_lengths=completion,
    )


def padded_terms(tr: Trainer, b: RolloutBatch, adv: torch.Tensor):
    """The update's terms as computed before bucketing: one forward over the whole padded batch."""
    logits = tr.model(b.input_ids[:, :-1], b.attention_mask[:, :-1])
    logp = token_logprobs(logits, b.input_ids[:, 1:]).float()
    mask = b.loss_mask[:, 1:]
    return token_entropy(logits.detach()), logp, tr.loss_fn(logp, b.gen_logprobs[:, 1:], adv, mask,
                                                               seq_lengths=mask.sum(dim=1))


def bucketed_terms(tr: Trainer, b: RolloutBatch, adv: torch.Tensor):
    """The same terms through the trainer's forward (``policy_logprobs``: buckets, shared prefixes)."""
    logp, entropy = policy_logprobs(tr.model, b, bf16=tr.bf16)
    mask = b.loss_mask[:, 1:]
    return entropy, logp, tr.loss_fn(logp, b.gen_logprobs[:, 1:], adv, mask, seq_lengths=mask.sum(dim=1))


def advantages(b: RolloutBatch, cfg) -> torch.Tensor:
    return algo.compute_advantages(b.rewards, b.group, cfg.algo.advantages.norm, cfg.algo.advantages.eps)


def loss_and_grads(tr: Trainer, terms, b: RolloutBatch, adv: torch.Tensor):
    tr.model.zero_grad(set_to_none=True)
    entropy, logp, out = terms(tr, b, adv)
    mask = b.loss_mask[:, 1:]
    loss = tr.aggregate(out.per_token, mask, b.group)
    loss.backward()
    grads = {k: p.grad.clone() for k, p in tr.model.named_parameters()}
    return loss.detach(), grads, entropy * mask, logp.detach() * mask


@pytest.mark.parametrize("preset", ["scalerl", "grpo_deepseek"])
def test_bucketed_update_matches_the_padded_batch(monkeypatch, preset):
    monkeypatch.setattr(trainer_mod, "ROWS_PER_BUCKET", 8)  # 5 buckets of 8 rows
    cfg = load_config(preset, None, SETS)
    tr = Trainer(build_model(cfg.model, 0).model, cfg.algo, cfg.optim)
    tr.model.train()
    b = ragged_batch()

    adv = advantages(b, cfg)
    ref = loss_and_grads(tr, padded_terms, b, adv)
    new = loss_and_grads(tr, bucketed_terms, b, adv)
    torch.testing.assert_close(new[0], ref[0], atol=1e-6, rtol=1e-6)
    for k in ref[1]:
        torch.testing.assert_close(new[1][k], ref[1][k], atol=1e-6, rtol=1e-5, msg=k)
    torch.testing.assert_close(new[2], ref[2], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(new[3], ref[3], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("preset", ["scalerl", "grpo_deepseek"])
@pytest.mark.parametrize("bf16", [False, True])
def test_shared_prefix_update_matches_the_padded_batch(monkeypatch, preset, bf16):
    """When a group's samples share their prompt (always, from the engines), the built-in model runs each prompt
    once per group (``TinyLM.forward_prefixed``): the same loss, gradients, log-probs and entropy as the padded
    forward of every whole sequence, and the plain forward is never called."""
    monkeypatch.setattr(trainer_mod, "ROWS_PER_BUCKET", 8)  # buckets of 2 groups of 4 rows
    cfg = load_config(preset, None, [*SETS, f"optim.bf16_autocast={str(bf16).lower()}"])
    tr = Trainer(build_model(cfg.model, 0).model, cfg.algo, cfg.optim)
    tr.model.train()
    b = ragged_batch(shared=True)

    adv = advantages(b, cfg)
    ref = loss_and_grads(tr, padded_terms, b, adv) if not bf16 else None
    calls: list[int] = []
    tr.model.register_forward_hook(lambda m, args, out: calls.append(1))
    new = loss_and_grads(tr, bucketed_terms, b, adv)
    assert not calls  # every bucket took the shared-prefix forward
    if bf16:  # bf16 rounds differently per layout: finite and close to the fp32 reference is what holds
        cfg32 = load_config(preset, None, SETS)
        tr32 = Trainer(tr.model, cfg32.algo, cfg32.optim)
        ref = loss_and_grads(tr32, padded_terms, b, adv)
        torch.testing.assert_close(new[3], ref[3], atol=0.1, rtol=0.1)
        return
    torch.testing.assert_close(new[0], ref[0], atol=1e-6, rtol=1e-6)
    for k in ref[1]:
        torch.testing.assert_close(new[1][k], ref[1][k], atol=1e-6, rtol=1e-5, msg=k)
    torch.testing.assert_close(new[2], ref[2], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(new[3], ref[3], atol=1e-5, rtol=1e-5)


def test_groups_that_do_not_share_a_prompt_take_the_plain_forward(monkeypatch):
    """A batch whose group rows differ in their prompts (not what the engines produce) is never merged: the
    update falls back to the plain bucketed forward."""
    cfg = load_config("scalerl", None, SETS)
    tr = Trainer(build_model(cfg.model, 0).model, cfg.algo, cfg.optim)
    b = ragged_batch(shared=False)
    assert any(b.split_prompts(rows) is None for rows in b.group_buckets(8))
    calls: list[int] = []
    tr.model.register_forward_hook(lambda m, args, out: calls.append(1))
    tr.step(b, advantages(b, cfg))
    assert calls


def test_update_forwards_only_the_buckets_real_width(monkeypatch):
    """The model sees each bucket trimmed to its longest sequence: far fewer token positions than N x T."""
    monkeypatch.setattr(trainer_mod, "ROWS_PER_BUCKET", 8)
    cfg = load_config("scalerl", None, SETS)
    tr = Trainer(build_model(cfg.model, 0).model, cfg.algo, cfg.optim)
    seen: list[int] = []
    tr.model.register_forward_hook(lambda m, args, out: seen.append(args[0].numel()))
    b = ragged_batch()
    tr.step(b, advantages(b, cfg))
    n, t = b.input_ids.shape
    lengths = b.attention_mask.sum(1).sort().values
    expected = sum(max(2, int(c.max())) - 1 for c in lengths.split(8) for _ in c)
    assert sum(seen) == expected < 0.6 * n * (t - 1)
    for phase in ("logprob_forward", "backward", "optimizer"):
        assert tr.timings[phase] >= 0.0


def test_collate_pads_right_and_weights_only_sampled_tokens():
    """Hand-worked: two completions of one prompt, one with a forced token, one empty."""
    from scalerl.algo.length_control import LengthControl
    from scalerl.engines.base import Sample
    from scalerl.rollout import Request
    from scalerl.pipeline.generator import collate
    from scalerl.tasks.base import Problem

    a = Sample([1, 5], tokens=[7, 8, 9], logprobs=[-0.5, 0.0, -1.5], versions=[3, 3, 4], forced=[False, True, False])
    b = Sample([1, 5])
    batch = collate(Request(0, ["p"], 0), [Problem("p", "x", "y")], [[a, b]], [[True, False]], pad_id=0,
                    reward_correct=1.0, reward_incorrect=-1.0, length_control=LengthControl())
    assert batch.input_ids.tolist() == [[1, 5, 7, 8, 9], [1, 5, 0, 0, 0]]
    assert batch.attention_mask.tolist() == [[True] * 5, [True, True, False, False, False]]
    assert batch.loss_mask.tolist() == [[0, 0, 1, 0, 1], [0] * 5]
    assert batch.gen_logprobs.tolist() == [[0, 0, -0.5, 0, -1.5], [0] * 5]
    assert batch.versions.tolist() == [[-1, -1, 3, 3, 4], [-1] * 5]
    assert batch.rewards.tolist() == [1.0, -1.0] and batch.completion_lengths.tolist() == [3, 0]


def test_every_phase_of_a_step_is_timed_in_metrics(tmp_path):
    """docs/architecture.md: timing/<phase>_s on every step line (eval on eval lines, checkpoint after one was written)."""
    from scalerl.pipeline.runner import train
    from scalerl.runlog import read_metrics

    cfg = load_config("scalerl", None, [
        *SETS, "batch.prompts=2", "batch.generations=2", "task.n_train=16", "task.n_val=4", "eval.n_samples=1",
        "eval.every=2", "checkpoint_every=1", "warmup.steps=0", "algo.length.params.max_new_tokens=36",
        "algo.length.params.think_lo=6", "algo.length.params.think_hi=10", "algo.length.params.answer_budget=4",
        "tensorboard=false", "steps=3",
        "algo.truncated=train",  # the untrained model truncates nearly everything: keep it, so every step updates
    ])
    train(cfg, tmp_path, show_progress=False)
    lines = read_metrics(tmp_path)
    steps = [r for r in lines if "loss" in r]
    phases = ("generate", "grade", "collate", "wait", "logprob_forward", "backward", "optimizer", "publish")
    for r in steps:
        for phase in phases:
            assert r[f"timing/{phase}_s"] >= 0.0, (phase, r["step"])
    assert all("timing/checkpoint_s" in r for r in steps[1:])
    assert all(r["timing/eval_s"] > 0.0 for r in lines if "val/pass_rate" in r)
