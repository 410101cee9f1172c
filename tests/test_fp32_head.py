"""FP32 LM head (§3.2, Fig. 5b): logits in float32 on a bf16 model or under bf16 autocast, tied weights intact."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from scalerl.errors import UserError
from scalerl.models.fp32_head import (
    disable_fp32_head,
    enable_fp32_head,
    fp32_head_enabled,
    set_fp32_head,
    token_logprobs,
)

VOCAB, DIM = 97, 64


class TiedLM(nn.Module):
    """Embedding -> one linear layer -> head whose weight *is* the embedding matrix."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layer = nn.Linear(DIM, DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.embed.weight

    def get_output_embeddings(self) -> nn.Linear:
        return self.head

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.layer(self.embed(ids))))


def reference_logits(model: TiedLM, ids: torch.Tensor) -> torch.Tensor:
    """The same computation in float64 from the same (bf16-rounded) parameters and hidden states."""
    h = torch.tanh(model.layer(model.embed(ids))).double()
    return F.linear(h, model.embed.weight.double())


def make_model(dtype: torch.dtype = torch.bfloat16) -> TiedLM:
    torch.manual_seed(0)
    model = TiedLM()
    with torch.no_grad():
        model.embed.weight.mul_(4.0)  # large logits make bf16 rounding of the logits visible
    return model.to(dtype)


IDS = torch.randint(0, VOCAB, (3, 11), generator=torch.Generator().manual_seed(1))


def test_bf16_model_gets_float32_logits_closer_to_float64():
    model = make_model()
    ref = reference_logits(model, IDS)
    bf16_logits = model(IDS)
    assert bf16_logits.dtype == torch.bfloat16
    enable_fp32_head(model)
    fp32_logits = model(IDS)
    assert fp32_logits.dtype == torch.float32
    err_fp32 = (fp32_logits.double() - ref).abs().max().item()
    err_bf16 = (bf16_logits.double() - ref).abs().max().item()
    assert err_fp32 < 1e-4
    assert err_fp32 * 100 < err_bf16
    # log-probs keep the logits' dtype: fp32 on, bf16-rounded off
    targets = IDS.roll(-1, dims=1)
    lp_ref = token_logprobs(ref, targets)
    lp_fp32 = token_logprobs(fp32_logits, targets)
    lp_bf16 = token_logprobs(bf16_logits, targets)
    assert lp_fp32.dtype == torch.float32 and lp_bf16.dtype == torch.bfloat16
    assert (lp_fp32.double() - lp_ref).abs().max() * 100 < (lp_bf16.double() - lp_ref).abs().max()


def test_tied_weight_stays_tied_and_state_dict_unchanged():
    model = make_model()
    keys_before = list(model.state_dict())
    enable_fp32_head(model)
    assert model.head.weight is model.embed.weight
    assert model.head.weight.dtype == torch.bfloat16
    assert list(model.state_dict()) == keys_before
    assert sum(1 for _ in model.parameters()) == 3  # embed/head shared, layer weight, layer bias


def test_gradients_reach_the_tied_weight_like_the_reference():
    model = make_model()
    enable_fp32_head(model)
    targets = IDS.roll(-1, dims=1)
    loss = -token_logprobs(model(IDS), targets).mean()
    loss.backward()
    grad = model.embed.weight.grad
    assert grad is not None and grad.dtype == torch.bfloat16

    # autograd of the reference computation on a float64 copy of the same parameters
    ref_model = copy.deepcopy(model).double()
    disable_fp32_head(ref_model)
    assert ref_model.head.weight is ref_model.embed.weight
    ref_model.zero_grad()
    (-token_logprobs(ref_model(IDS), targets).mean()).backward()
    ref_grad = ref_model.embed.weight.grad
    # rows of tokens never fed in receive only the head's share, so both paths were counted
    unused = torch.ones(VOCAB, dtype=torch.bool)
    unused[IDS.unique()] = False
    assert ref_grad[unused].abs().sum() > 0 and ref_grad[~unused].abs().sum() > 0
    scale = ref_grad.abs().max()
    assert (grad.double() - ref_grad).abs().max() < 0.02 * scale  # the all-bf16 head is off by ~0.05


def test_under_bf16_autocast_only_the_head_leaves_autocast():
    model = make_model(torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain = model(IDS)
        enable_fp32_head(model)
        wrapped = model(IDS)
        inner = model.layer(model.embed(IDS))
    assert plain.dtype == torch.bfloat16
    assert wrapped.dtype == torch.float32
    assert inner.dtype == torch.bfloat16  # the rest of the model still runs under autocast
    # the head itself is exact fp32 math on the bf16 hidden states autocast produced
    h = torch.tanh(inner).double()
    ref = F.linear(h, model.embed.weight.double())
    assert (wrapped.double() - ref).abs().max() < 1e-4


def test_idempotent_and_reversible():
    model = make_model()
    assert not fp32_head_enabled(model)
    enable_fp32_head(enable_fp32_head(model))
    assert fp32_head_enabled(model)
    first = model(IDS)
    assert torch.equal(first, enable_fp32_head(model)(IDS))
    disable_fp32_head(model)
    assert not fp32_head_enabled(model)
    assert model(IDS).dtype == torch.bfloat16
    disable_fp32_head(model)  # a second disable is harmless
    set_fp32_head(model, True)
    assert torch.equal(model(IDS), first)
    set_fp32_head(model, False)
    assert not fp32_head_enabled(model)


def test_survives_deepcopy_and_pickle():
    """Engines get copies of the policy and process backends pickle it: the FP32 head must travel along."""
    model = enable_fp32_head(make_model())
    expected = model(IDS)
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert fp32_head_enabled(clone)
        assert clone.head.weight is clone.embed.weight
        assert torch.equal(clone(IDS), expected)


def test_token_logprobs_hand_values():
    logits = torch.tensor([[[0.0, 0.0], [2.0, 0.0]]])
    tokens = torch.tensor([[1, 0]])
    expected = torch.tensor([[-torch.log(torch.tensor(2.0)), 2.0 - torch.log(torch.exp(torch.tensor(2.0)) + 1)]])
    assert torch.allclose(token_logprobs(logits, tokens), expected)
    with pytest.raises(ValueError):
        token_logprobs(logits, torch.tensor([[1]]))


def test_model_without_linear_head_is_a_user_error():
    class NoHead(nn.Module):
        def get_output_embeddings(self):
            return None

    with pytest.raises(UserError, match="algo.fp32_head"):
        enable_fp32_head(NoHead())
    model = NoHead()
    assert disable_fp32_head(model) is model and not fp32_head_enabled(model)  # off needs no head


def test_tiny_llama_with_tied_embeddings():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=101,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    ids = torch.randint(0, 101, (2, 9), generator=torch.Generator().manual_seed(2))
    assert model(ids).logits.dtype == torch.bfloat16
    enable_fp32_head(model)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    out = model(ids, output_hidden_states=True)
    assert out.logits.dtype == torch.float32
    h = out.hidden_states[-1].double()
    ref = F.linear(h, model.lm_head.weight.double())
    assert (out.logits.double() - ref).abs().max() < 1e-4
    lp = token_logprobs(out.logits[:, :-1], ids[:, 1:])
    assert lp.dtype == torch.float32
    lp.sum().backward()
    assert model.model.embed_tokens.weight.grad is not None
    assert torch.isfinite(model.model.embed_tokens.weight.grad.float()).all()


def test_bf16_generation_has_a_mismatch_that_the_fp32_head_reduces():
    """§3.2, Fig. 5b: with the generator in float32 the head changes nothing (the ablation would be the base run exactly);
    generating in bf16 (engine.bf16_autocast, the paper's regime, set for every arm) gives a mismatch, smaller with the FP32 head."""
    import copy

    from scalerl.build import build_length_control, build_model, build_task
    from scalerl.engines.registry import build_engine
    from scalerl.config import load_config
    from scalerl.engines.precision import logprob_mismatch
    from scalerl.models.fp32_head import set_fp32_head
    from scalerl.models.registry import prompt_encoder
    from scalerl.presets import resolve_variant

    # loo-fp32 changes the head only: the bf16 regime is a setting of the whole sweep (both arms), not of the variant
    assert not resolve_variant("loo-fp32").engine.bf16_autocast and not resolve_variant("scalerl").engine.bf16_autocast
    small = ["model.d_model=32", "model.n_layers=2", "model.n_heads=2", "batch.generations=4"]
    cfg = load_config("scalerl", None, small)
    bundle = build_model(cfg.model, 0)
    encode = prompt_encoder(bundle)
    prompts = [encode(p.prompt) for p in list(build_task(cfg.task).train_problems())[:6]]
    spread = {}
    for bf16 in (False, True):
        for head in (True, False):
            run = load_config("scalerl", None, [*small, f"engine.bf16_autocast={bf16}", f"algo.fp32_head={head}"])
            gen = copy.copy(bundle)
            gen.model = copy.deepcopy(bundle.model)
            groups = build_engine(run, gen).generate(prompts, n=4, length=build_length_control(run), seed=1)
            trainer_model = set_fp32_head(copy.deepcopy(bundle.model).eval(), head)
            spread[bf16, head] = float(logprob_mismatch(trainer_model, groups).mean())
    assert spread[False, True] < 1e-5 and spread[False, False] < 1e-5
    assert spread[True, False] > 2 * spread[True, True] > 0
    assert spread[True, False] > 100 * spread[False, False]


def test_mismatch_batched_as_a_training_step_is_the_per_sequence_mismatch():
    """``logprob_mismatch`` recomputes the trainer's log-probs on right-padded rows several at a time (the
    trainer's own path): the same values as one sequence at a time, one per sampled token, forced ones left out."""
    from scalerl.algo.length_control import LENGTH_CONTROLS
    from scalerl.engines.builtin import BuiltinEngine
    from scalerl.engines.precision import logprob_mismatch
    from scalerl.config import ModelConfig
    from scalerl.models.tiny import build_tiny
    from scalerl.models.tokenizer import CharTokenizer

    tok = CharTokenizer()
    model = build_tiny(ModelConfig(d_model=32, n_layers=2, n_heads=2, max_seq_len=96), seed=0, tokenizer=tok)
    length = LENGTH_CONTROLS.get("interruption")(think_lo=4, think_hi=8, answer_budget=3, max_new_tokens=40)
    prompts = [tok.encode("3+4="), tok.encode("12*3-5="), tok.encode("7=")]
    groups = BuiltinEngine(model, tok).generate(prompts, n=3, length=length, seed=0)
    sampled = sum(not f for g in groups for s in g for f in s.forced)
    assert any(any(s.forced) for g in groups for s in g)  # some interruptions: forced tokens are left out
    one, batched = logprob_mismatch(model, groups, rows_per_forward=1), logprob_mismatch(model, groups)
    assert one.shape == batched.shape == (sampled,)
    torch.testing.assert_close(batched, one, rtol=0, atol=2e-6)
    assert float(one.max()) < 1e-4  # the engine's float32 log-probs are the trainer's
