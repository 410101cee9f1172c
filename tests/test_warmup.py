"""Supervised warm-up: it teaches the task (pass rate rises from zero), and its disk cache returns the very
same weights without training again."""

import torch

from scalerl.config import ModelConfig, WarmupConfig
from scalerl.engines.builtin import BuiltinEngine
from scalerl.models.tiny import build_tiny
from scalerl.models.tokenizer import CharTokenizer
from scalerl.models.warmup import _batch, warmup
from scalerl.models.registry import encode_prompt
from scalerl.tasks.arithmetic import ArithmeticTask

MICRO = ModelConfig(d_model=32, n_layers=2, n_heads=2, max_seq_len=48)
TOK = CharTokenizer()
TASK = ArithmeticTask(seed=0, n_train=70, n_val=30, min_operands=2, max_operands=2, max_digits=1, subtraction=False)
QUICK = WarmupConfig(steps=120, batch_size=32, lr=1e-2)


class NoInterruptions:
    max_new_tokens, phrase, answer_budget, think_end = 16, "", 0, "</think>"

    def think_budgets(self, n, rng):
        return [None] * n


def pass_rate(model) -> float:
    val = TASK.val_problems()
    out = BuiltinEngine(model, TOK).generate([encode_prompt(TOK, p.prompt) for p in val], 4, NoInterruptions(), 0)
    return sum(TASK.grade(p, s.text) for p, group in zip(val, out) for s in group) / (4 * len(val))


def test_batch_targets_are_the_shifted_completion():
    ids, mask, targets = _batch([([1, 5, 6], [7, 8, 2]), ([1, 5], [9, 2])], pad_id=0)
    assert ids.tolist() == [[1, 5, 6, 7, 8, 2], [1, 5, 9, 2, 0, 0]]
    assert mask.tolist() == [[True] * 6, [True] * 4 + [False] * 2]
    # logits at t predict token t+1; prompt tokens and padding carry no loss
    assert targets.tolist() == [[-100, -100, 7, 8, 2, -100], [-100, 9, 2, -100, -100, -100]]


def test_warmup_teaches_and_cache_returns_identical_weights(tmp_path):
    model = build_tiny(MICRO, 0)
    before = pass_rate(model)
    stats = warmup(model, TOK, TASK, QUICK, seed=0, cache_dir=tmp_path)
    assert not stats["cached"] and stats["steps"] == 120 and stats["loss_last"] < stats["loss_first"] / 3
    after = pass_rate(model)
    assert before == 0.0 and after >= 0.05

    again = build_tiny(MICRO, 0)
    hit = warmup(again, TOK, TASK, QUICK, seed=0, cache_dir=tmp_path)
    assert hit["cached"] and hit["loss_last"] == stats["loss_last"]
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    assert [p.name for p in tmp_path.rglob("*")] == ["warmup", hit["path"].rsplit("/", 1)[1]]  # no temp files

    # a different seed or config is a different cache entry
    other = build_tiny(MICRO, 0)
    miss = warmup(other, TOK, TASK, QUICK.model_copy(update={"steps": 2}), seed=0, cache_dir=tmp_path)
    assert not miss["cached"]


def test_zero_steps_and_cache_off_leave_no_files(tmp_path):
    model = build_tiny(MICRO, 0)
    w = model.embed.weight.clone()
    assert warmup(model, TOK, TASK, WarmupConfig(steps=0), seed=0, cache_dir=tmp_path)["steps"] == 0
    assert torch.equal(model.embed.weight, w)
    warmup(model, TOK, TASK, WarmupConfig(steps=2, batch_size=4, cache=False), seed=0, cache_dir=tmp_path)
    assert not torch.equal(model.embed.weight, w) and not any(tmp_path.iterdir())


def test_steps_default_to_the_model_kind():
    """issue 34: unset, the warm-up is the built-in model's (1280 steps) for weights built here and none for
    pretrained weights; a number asks for that many either way. warmup() without a resolved config is the former."""
    from scalerl.config import SCRATCH_WARMUP_STEPS

    assert WarmupConfig().steps is None and SCRATCH_WARMUP_STEPS == 1280
    assert WarmupConfig().steps_for(pretrained=False) == 1280 and WarmupConfig().steps_for(pretrained=True) == 0
    assert WarmupConfig(steps=7).steps_for(pretrained=True) == 7 and WarmupConfig(steps=0).steps_for(False) == 0
    assert WarmupConfig(batch_size=3).resolved(True) == WarmupConfig(steps=0, batch_size=3)
