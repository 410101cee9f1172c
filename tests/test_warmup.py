"""Supervised warm-up: it teaches the task (pass rate rises from zero) with either optimizer, Muon takes the
hidden matrices and AdamW the rest, and its disk cache returns the very same weights without training again."""

import pytest
import torch

from scalerl.config import ModelConfig, WarmupConfig
from scalerl.engines.builtin import BuiltinEngine
from scalerl.models.tiny import build_tiny
from scalerl.models.tokenizer import CharTokenizer
from scalerl.errors import UserError
from scalerl.models.warmup import _batch, _lr_factor, _optimizers, warmup
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


@pytest.mark.parametrize("optimizer", ["muon", "adamw"])
def test_warmup_teaches_and_cache_returns_identical_weights(tmp_path, optimizer):
    quick = QUICK.model_copy(update={"optimizer": optimizer})
    model = build_tiny(MICRO, 0)
    before = pass_rate(model)
    stats = warmup(model, TOK, TASK, quick, seed=0, cache_dir=tmp_path)
    assert not stats["cached"] and stats["steps"] == 120 and stats["loss_last"] < stats["loss_first"] / 3
    after = pass_rate(model)
    assert before == 0.0 and after >= 0.05

    again = build_tiny(MICRO, 0)
    hit = warmup(again, TOK, TASK, quick, seed=0, cache_dir=tmp_path)
    assert hit["cached"] and hit["loss_last"] == stats["loss_last"]
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    assert [p.name for p in tmp_path.rglob("*")] == ["warmup", hit["path"].rsplit("/", 1)[1]]  # no temp files

    # a different seed or config is a different cache entry
    other = build_tiny(MICRO, 0)
    miss = warmup(other, TOK, TASK, quick.model_copy(update={"steps": 2}), seed=0, cache_dir=tmp_path)
    assert not miss["cached"]
    flip = {"muon": "adamw", "adamw": "muon"}[optimizer]  # the optimizer is part of the key too
    assert not warmup(build_tiny(MICRO, 0), TOK, TASK, quick.model_copy(update={"steps": 2, "optimizer": flip}),
                      seed=0, cache_dir=tmp_path)["cached"]


def test_zero_steps_and_cache_off_leave_no_files(tmp_path):
    model = build_tiny(MICRO, 0)
    w = model.embed.weight.clone()
    assert warmup(model, TOK, TASK, WarmupConfig(steps=0), seed=0, cache_dir=tmp_path)["steps"] == 0
    assert torch.equal(model.embed.weight, w)
    warmup(model, TOK, TASK, WarmupConfig(steps=2, batch_size=4, cache=False), seed=0, cache_dir=tmp_path)
    assert not torch.equal(model.embed.weight, w) and not any(tmp_path.iterdir())


def test_steps_default_to_the_model_kind():
    """issue 34: unset, the warm-up is the built-in model's for weights built here and none for pretrained weights;
    a number asks for that many either way. warmup() without a resolved config is the former. Issue 31: each
    optimizer has its own steps, batch size and decay (448 Muon steps of 48 reach what 1280 AdamW steps of 64
    reached)."""
    assert WarmupConfig().steps is None and WarmupConfig().optimizer == "muon"
    assert WarmupConfig().steps_for(pretrained=False) == 448 and WarmupConfig().steps_for(pretrained=True) == 0
    assert WarmupConfig(optimizer="adamw").steps_for(pretrained=False) == 1280
    assert WarmupConfig(steps=7).steps_for(pretrained=True) == 7 and WarmupConfig(steps=0).steps_for(False) == 0
    assert WarmupConfig(batch_size=3).resolved(True) == WarmupConfig(steps=0, batch_size=3, decay=0.5)
    assert WarmupConfig().resolved(False) == WarmupConfig(steps=448, batch_size=48, decay=0.5)
    assert WarmupConfig(optimizer="adamw").resolved(False) == WarmupConfig(optimizer="adamw", steps=1280,
                                                                          batch_size=64, decay=0.2)
    assert WarmupConfig(decay=0.3).resolved(False).decay == 0.3


def test_learning_rate_rises_stays_and_falls_over_the_decay_share():
    # 100 steps, decay 0.5: rise over 5 steps, flat to step 50, linear fall to 1/50 at the last step
    factors = [_lr_factor(s, 100, 0.5) for s in (0, 4, 10, 50, 75, 99)]
    assert factors == pytest.approx([0.2, 1.0, 1.0, 1.0, 0.5, 0.02])
    assert _lr_factor(79, 100, 0.2) == 1.0 and _lr_factor(90, 100, 0.2) == pytest.approx(0.5)


def _names(model: torch.nn.Module, opt: torch.optim.Optimizer) -> set[str]:
    name = {id(p): n for n, p in model.named_parameters()}
    return {name[id(p)] for group in opt.param_groups for p in group["params"]}


def test_muon_takes_the_hidden_matrices_and_adamw_the_embedding_head_and_norms():
    model = build_tiny(MICRO, 0)  # tied head: lm_head.weight is embed.weight
    muon, adamw = _optimizers(model, WarmupConfig(muon_lr=0.05, lr=1e-3))
    assert isinstance(muon, torch.optim.Muon) and type(adamw) is torch.optim.AdamW
    everything = {n for n, _ in model.named_parameters()}
    hidden = {f"blocks.{i}.{m}.weight" for i in range(MICRO.n_layers) for m in ("qkv", "out", "gate_up", "down")}
    assert _names(model, muon) == hidden and _names(model, adamw) == everything - hidden
    assert "embed.weight" in _names(model, adamw) and "norm.weight" in _names(model, adamw)
    assert muon.param_groups[0]["lr"] == 0.05 and adamw.param_groups[0]["lr"] == 1e-3
    [only] = _optimizers(model, WarmupConfig(optimizer="adamw"))
    assert type(only) is torch.optim.AdamW and _names(model, only) == everything


def test_muon_split_of_a_hugging_face_model_with_an_untied_head():
    from transformers import LlamaConfig, LlamaForCausalLM

    from scalerl.models.hf import HFPolicy

    cfg = LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=False)
    model = HFPolicy(LlamaForCausalLM(cfg))
    muon, adamw = _optimizers(model, WarmupConfig())
    assert {n.rsplit(".", 2)[-2] for n in _names(model, muon)} == {"q_proj", "k_proj", "v_proj", "o_proj",
                                                                    "gate_proj", "up_proj", "down_proj"}
    assert {"hf.model.embed_tokens.weight", "hf.lm_head.weight", "hf.model.norm.weight"} <= _names(model, adamw)


def test_muon_on_a_torch_without_it_is_a_one_line_error(monkeypatch):
    monkeypatch.delattr(torch.optim, "Muon")
    with pytest.raises(UserError, match="warmup.optimizer=adamw"):
        _optimizers(build_tiny(MICRO, 0), WarmupConfig())
