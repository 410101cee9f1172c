"""The built-in tiny transformer: causality, padding invariance, KV-cache decoding, exact Llama export."""

import pytest
import torch

from scalerl.config import ModelConfig
from scalerl.errors import UserError
from scalerl.models.registry import MODELS
from scalerl.models.tiny import TinyConfig, TinyLM, attend, build_tiny, to_hf_llama

MICRO = ModelConfig(d_model=32, n_layers=2, n_heads=2, max_seq_len=48)


@pytest.fixture(scope="module")
def model() -> TinyLM:
    torch.manual_seed(0)
    m = build_tiny(MICRO, seed=3).eval()
    with torch.no_grad():  # non-trivial norm weights, so a wrong export or norm shows up
        for name, p in m.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return m


def ids(n: int, t: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, 100, (n, t), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("case", ["causal", "key_mask", "prefixed", "no_mask"])
def test_attention_equals_pytorchs_sdpa_values_and_gradients(case):
    """``attend`` (two matmuls around a softmax on a CPU, given a mask) is PyTorch's scaled dot-product attention:
    the same outputs and the same gradients to q, k and v, for each kind of attention the model asks for (plain
    causal, PyTorch's own kernel; a decode step's key mask; the prefixed forward's prompt-plus-causal mask,
    broadcast over heads; none)."""
    g = torch.Generator().manual_seed(7)
    n, h, t, s, d = 3, 2, 5, 9, 8
    t = s if case in ("causal", "no_mask") else (1 if case == "key_mask" else t)
    q, k, v = (torch.randn(n, h, m, d, generator=g, dtype=torch.float64) for m in (t, s, s))
    mask, causal = None, case == "causal"
    if case == "key_mask":
        mask = torch.rand(n, 1, 1, s, generator=g) < 0.6
        mask[..., -1] = True  # the token itself
    elif case == "prefixed":
        prompt = torch.rand(n, 1, 1, s - t, generator=g) < 0.7
        causal_part = torch.ones(t, t, dtype=torch.bool).tril().expand(n, 1, t, t)
        mask = torch.cat((prompt.expand(n, 1, t, s - t), causal_part), -1)
    grads = []
    for fn in (attend, lambda *a, causal: torch.nn.functional.scaled_dot_product_attention(
            *a[:3], attn_mask=a[3], is_causal=causal and a[3] is None)):
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        out = fn(*leaves, mask, causal=causal)
        (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
        grads.append((out.detach(), *(x.grad for x in leaves)))
    for ours, ref in zip(*grads):
        torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12)


@torch.no_grad()
def test_attention_in_half_precision_is_sdpas_own():
    """In bfloat16 (bf16 autocast, engine.bf16_autocast) ``attend`` is PyTorch's kernel itself, which keeps the
    scores in float32: two bf16 matmuls would round the scores before the softmax."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (3 * torch.randn(4, 2, 1 if i == 0 else 20, 8, generator=g) for i in range(3))
    mask = torch.rand(4, 1, 1, 20, generator=g) < 0.8
    mask[..., -1] = True
    b = [x.bfloat16() for x in (q, k, v)]
    assert torch.equal(attend(*b, mask), torch.nn.functional.scaled_dot_product_attention(*b, attn_mask=mask))


@torch.no_grad()
def test_causal(model):
    x = ids(2, 12)
    y = x.clone()
    y[:, 7:] = ids(2, 5, seed=1)
    a, b = model(x), model(y)
    assert torch.allclose(a[:, :7], b[:, :7], atol=1e-6)
    assert not torch.allclose(a[:, 7:], b[:, 7:], atol=1e-3)


@torch.no_grad()
def test_left_and_right_padding_match_unpadded(model):
    short, long = ids(1, 6, seed=2), ids(1, 10, seed=3)
    ref_short, ref_long = model(short)[0], model(long)[0]
    pad = torch.zeros(1, 4, dtype=torch.long)
    left = torch.cat([torch.cat([pad, short], 1), long])
    left_mask = left != 0
    out = model(left, left_mask)
    assert torch.allclose(out[0, 4:], ref_short, atol=1e-5)
    assert torch.allclose(out[1], ref_long, atol=1e-5)
    assert torch.isfinite(out).all()
    right = torch.cat([torch.cat([short, pad], 1), long])
    out = model(right, right != 0)
    assert torch.allclose(out[0, :6], ref_short, atol=1e-5)


@torch.no_grad()
def test_kv_cache_decode_matches_full_forward(model):
    lens = [3, 6]
    prompts = [ids(1, n, seed=10 + n)[0] for n in lens]
    cont = ids(2, 5, seed=20)
    p_max = max(lens)
    x = torch.zeros(2, p_max, dtype=torch.long)
    key_mask = torch.zeros(2, p_max + 5, dtype=torch.bool)
    for i, p in enumerate(prompts):
        x[i, p_max - len(p):] = p
        key_mask[i, p_max - len(p):p_max] = True
    cache = model.new_cache(2, p_max + 5)
    assert cache.shape == (2, 2, 2, 2, p_max + 5, 16)
    steps = [model.prefill(x, key_mask[:, :p_max], cache)]
    pos = key_mask[:, :p_max].sum(-1)
    for t in range(4):
        key_mask[:, p_max + t] = True
        steps.append(model.decode_step(cont[:, t], pos + t, cache, p_max + t, key_mask[:, :p_max + t + 1]))
    for i, p in enumerate(prompts):
        full = model(torch.cat([p, cont[i, :4]])[None])[0]
        want = full[len(p) - 1:]
        got = torch.stack([s[i] for s in steps])
        assert torch.allclose(got, want, atol=1e-5)


@torch.no_grad()
def test_hf_llama_export_matches(model):
    pytest.importorskip("transformers")
    hf = to_hf_llama(model)
    x = ids(3, 20, seed=4)
    assert torch.allclose(hf(x).logits, model(x), atol=1e-5)
    mask = torch.ones_like(x, dtype=torch.bool)
    mask[0, :5] = False  # left padding: HF needs the same position ids
    pos = (mask.long().cumsum(-1) - 1).clamp(min=0)
    got = hf(x, attention_mask=mask.long(), position_ids=pos).logits
    assert torch.allclose(got[0, 5:], model(x, mask)[0, 5:], atol=1e-5)
    assert hf.lm_head.weight.data_ptr() == hf.model.embed_tokens.weight.data_ptr()


def test_tied_head_seeded_init_and_registry():
    bundle = MODELS.get("tiny")(MICRO, 7)
    m = bundle.model
    assert m.get_output_embeddings().weight is m.embed.weight
    assert bundle.spec == {
        "n_params": sum(p.numel() for p in m.parameters()),
        "n_layers": 2,
        "d_model": 32,
        "vocab_size": bundle.tokenizer.vocab_size,
    }
    same, other = build_tiny(MICRO, 7), build_tiny(MICRO, 8)
    assert all(torch.equal(a, b) for a, b in zip(m.state_dict().values(), same.state_dict().values()))
    assert not torch.equal(m.embed.weight, other.embed.weight)


def test_bfloat16_keeps_rotary_tables_in_float32():
    m = build_tiny(MICRO.model_copy(update={"dtype": "bfloat16"}), 0)
    assert m.embed.weight.dtype == torch.bfloat16 and m.rope_cos.dtype == torch.float32
    assert m(ids(1, 5)).shape == (1, 5, m.cfg.vocab_size)


def test_too_long_and_bad_shape_are_user_errors():
    m = build_tiny(MICRO, 0)
    with pytest.raises(UserError, match="max_seq_len"):
        m(ids(1, 49))
    with pytest.raises(UserError, match="n_heads"):
        TinyLM(TinyConfig(vocab_size=10, d_model=30, n_heads=4))
