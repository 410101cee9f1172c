"""The built-in engine: FP32 log-probs, reproducibility, in-flight weight updates (§3.1), interruptions and
truncation (§2, App. A.10)."""

import numpy as np
import pytest
import torch

from scalerl.config import ModelConfig
from scalerl.engines.base import Engine
from scalerl.engines.builtin import BuiltinEngine
from scalerl.engines.runtime import sample_tokens
from scalerl.models.tiny import build_tiny
from scalerl.models.tokenizer import INTERRUPTION_PHRASE, CharTokenizer

MICRO = ModelConfig(d_model=32, n_layers=2, n_heads=2, max_seq_len=96)
TOK = CharTokenizer()
PROMPTS = [TOK.encode("12+7="), TOK.encode("3-40+5+61=")]  # different lengths: left padding


class Length:
    """Duck-typed stand-in for scalerl.algo.length_control objects."""

    def __init__(self, max_new_tokens=24, lo=None, hi=None, phrase="", answer_budget=4, think_end="</think>"):
        self.max_new_tokens, self.lo, self.hi = max_new_tokens, lo, hi
        self.phrase, self.answer_budget, self.think_end = phrase, answer_budget, think_end

    def think_budgets(self, n, rng: np.random.Generator):
        if self.lo is None:
            return [None] * n
        return [int(b) for b in rng.integers(self.lo, self.hi + 1, size=n)]


def engine(seed=0, **kw) -> BuiltinEngine:
    return BuiltinEngine(build_tiny(MICRO, seed), TOK, **kw)


@torch.no_grad()
def full_logprobs(model, sample) -> torch.Tensor:
    """log-softmax of one full forward over prompt + completion, at the completion tokens."""
    seq = torch.tensor(sample.prompt_tokens + sample.tokens)[None]
    logits = model(seq)[0, len(sample.prompt_tokens) - 1 : -1].float()
    return logits.log_softmax(-1).gather(-1, torch.tensor(sample.tokens)[:, None])[:, 0]


def test_sampler_draws_from_the_softmax():
    logits = torch.tensor([[0.0, 1.0, 2.0, -float("inf")]]).expand(40_000, 4)
    tok = sample_tokens(logits, torch.Generator().manual_seed(0))
    freq = torch.bincount(tok, minlength=4).double() / tok.numel()
    assert torch.allclose(freq, logits[0].double().softmax(-1), atol=0.01) and freq[3] == 0


def test_logprobs_equal_full_forward_with_fp32_head():
    eng = engine(fp32_head=True)
    assert isinstance(eng, Engine)
    out = eng.generate(PROMPTS, n=3, length=Length(), seed=1)
    assert [len(g) for g in out] == [3, 3]
    for prompt, group in zip(PROMPTS, out):
        for s in group:
            assert s.prompt_tokens == prompt and len(s.tokens) == len(s.logprobs) == len(s.versions) > 0
            assert torch.allclose(torch.tensor(s.logprobs), full_logprobs(eng.model, s), atol=1e-5)
            assert s.text == TOK.decode([t for t in s.tokens if t not in (TOK.eos_id, TOK.pad_id)])
            assert s.finished != s.truncated


def test_same_seed_same_samples():
    a = engine().generate(PROMPTS, 4, Length(), seed=5)
    b = engine().generate(PROMPTS, 4, Length(), seed=5)
    c = engine().generate(PROMPTS, 4, Length(), seed=6)
    tokens = lambda out: [s.tokens for g in out for s in g]  # noqa: E731
    assert tokens(a) == tokens(b) and [s.logprobs for g in a for s in g] == [s.logprobs for g in b for s in g]
    assert tokens(a) != tokens(c)


def test_reused_cache_buffers_give_what_a_fresh_engine_gives():
    """The KV cache lives in two buffers the engine keeps (``CacheArena``): a call after a larger one, whose
    values are still in the buffers, samples exactly what a fresh engine samples, with the same log-probs, and a
    call of the same size allocates nothing new."""
    eng = engine()
    eng.generate(PROMPTS * 3, 6, Length(max_new_tokens=30), seed=9)  # fills the buffers with other values
    ptr = eng.arena._buffers[0].data_ptr()
    reused = eng.generate(PROMPTS, 4, Length(), seed=5)
    fresh = engine().generate(PROMPTS, 4, Length(), seed=5)
    assert [s.tokens for g in reused for s in g] == [s.tokens for g in fresh for s in g]
    assert [s.logprobs for g in reused for s in g] == [s.logprobs for g in fresh for s in g]
    assert eng.arena._buffers[0].data_ptr() == ptr  # smaller: served from the same buffer
    for group in reused:
        for s in group:
            assert torch.allclose(torch.tensor(s.logprobs), full_logprobs(eng.model, s), atol=1e-5)


def test_decoding_reads_no_cache_slot_its_call_did_not_write(monkeypatch):
    """The prefill copies only the prompts' slots into the buffers and a compaction only the slots written so
    far; what else a buffer holds is never read: with every buffer filled with NaN (which any read, masked or
    not, would carry into the logits), a call compacting at every step samples what a fresh engine samples."""
    from scalerl.engines import builtin

    monkeypatch.setattr(builtin.BuiltinEngine, "compact_at", 1.0)
    length = Length(max_new_tokens=40, lo=3, hi=20, phrase=" " + INTERRUPTION_PHRASE, answer_budget=3)
    eng = engine()
    eng.generate(PROMPTS * 3, 6, Length(max_new_tokens=30), seed=9)
    for buf in eng.arena._buffers:
        buf.fill_(float("nan"))
    poisoned = eng.generate(PROMPTS, 4, length, seed=5)
    fresh = engine().generate(PROMPTS, 4, length, seed=5)
    assert [s.tokens for g in poisoned for s in g] == [s.tokens for g in fresh for s in g]
    assert [s.logprobs for g in poisoned for s in g] == [s.logprobs for g in fresh for s in g]
    assert all(np.isfinite(s.logprobs).all() for g in poisoned for s in g)


def test_cache_arena_grows_and_follows_the_dtype():
    from scalerl.engines.builtin import CacheArena

    arena = CacheArena()
    like = torch.zeros(1)
    a = arena.take(0, [2, 3], like)
    assert a.shape == (2, 3) and a.is_contiguous() and torch.equal(a, torch.zeros(2, 3))
    a.fill_(7.0)
    assert torch.equal(arena.take(0, [3, 2], like), torch.full((3, 2), 7.0))  # same storage, reshaped
    assert arena.take(1, [2, 3], like).data_ptr() != a.data_ptr()  # the other buffer
    big = arena.take(0, [4, 5], like)
    assert big.shape == (4, 5) and torch.equal(big, torch.zeros(4, 5))  # grown: a new zeroed buffer
    assert arena.take(0, [2], torch.zeros(1, dtype=torch.bfloat16)).dtype == torch.bfloat16


def test_inflight_update_switches_version_mid_sequence_on_the_kept_cache():
    eng = engine()
    # the new weights differ only in the final norm, which no cached key/value depends on: tokens sampled
    # after the update must then match a full forward under the new weights exactly
    new = {k: v.clone() for k, v in eng.model.state_dict().items()}
    new["norm.weight"] *= 3.0
    old_model, new_model = build_tiny(MICRO, 0), build_tiny(MICRO, 0)
    new_model.load_state_dict(new)
    polls = []

    def source(current):
        polls.append(current)
        return (1, new) if len(polls) == 4 else None  # 1st poll is before prefill: the update follows token 2

    ptr = eng.model.norm.weight.data_ptr()
    out = eng.generate(PROMPTS, 4, Length(max_new_tokens=12), seed=3, weight_source=source)
    assert eng.version == 1 and eng.model.norm.weight.data_ptr() == ptr and polls[:4] == [0, 0, 0, 0]
    samples = [s for g in out for s in g if len(s.tokens) > 3]
    assert len(samples) >= 4
    for s in samples:
        assert s.versions == [0, 0, 0] + [1] * (len(s.tokens) - 3)
        lp = torch.tensor(s.logprobs)
        assert torch.allclose(lp[:3], full_logprobs(old_model, s)[:3], atol=1e-5)
        assert torch.allclose(lp[3:], full_logprobs(new_model, s)[3:], atol=1e-5)
        assert not torch.allclose(lp[3:], full_logprobs(old_model, s)[3:], atol=1e-3)


def test_inflight_update_keeps_stale_kv_cache():
    eng = engine()
    new = build_tiny(MICRO, 1).state_dict()  # every weight changes
    polls = []

    def source(current):  # new weights at the 2nd poll: after prefill and the first sampled token
        polls.append(current)
        return (7, new) if len(polls) == 2 else None

    out = eng.generate(PROMPTS[:1], 1, Length(max_new_tokens=8), seed=2, weight_source=source)
    s = out[0][0]
    assert len(s.tokens) >= 3
    assert s.versions == [0] + [7] * (len(s.tokens) - 1)
    # reference: prefill under the old weights, then decode on that cache under the new weights
    ref = build_tiny(MICRO, 0).eval()
    prompt = torch.tensor(s.prompt_tokens)[None]
    n = len(s.prompt_tokens)
    cache = ref.new_cache(1, n + 8)
    key_mask = torch.ones(1, n + 8, dtype=torch.bool)
    with torch.no_grad():
        ref.prefill(prompt, key_mask[:, :n], cache)
        ref.load_state_dict(new)
        want = []
        for t in range(len(s.tokens) - 1):
            logits = ref.decode_step(torch.tensor([s.tokens[t]]), torch.tensor([n + t]), cache, n + t,
                                     key_mask[:, : n + t + 1])
            want.append(logits.log_softmax(-1)[0, s.tokens[t + 1]])
    assert torch.allclose(torch.tensor(s.logprobs[1:]), torch.stack(want), atol=1e-5)
    # a recomputed cache would give the plain new-weights forward instead
    fresh = build_tiny(MICRO, 1)
    assert not torch.allclose(torch.tensor(s.logprobs[1:]), full_logprobs(fresh, s)[1:], atol=1e-4)


def test_interruption_forces_the_phrase_at_the_budget():
    phrase = " " + INTERRUPTION_PHRASE
    ids = TOK.encode(phrase)
    length = Length(max_new_tokens=60, lo=5, hi=12, phrase=phrase, answer_budget=3)
    out = engine().generate(PROMPTS, 8, length, seed=4)
    end = TOK.token_id("</think>")
    n_interrupted = 0
    for s in (s for g in out for s in g):
        b = s.think_budget
        assert 5 <= b <= 12
        if s.interrupted:
            n_interrupted += 1
            assert end not in s.tokens[:b] and TOK.eos_id not in s.tokens[:b]
            assert s.tokens[b : b + len(ids)] == ids
            assert s.forced == [False] * b + [True] * len(ids) + [False] * (len(s.tokens) - b - len(ids))
            assert all(lp == 0.0 for lp, f in zip(s.logprobs, s.forced) if f)
            answer = len(s.tokens) - b - len(ids)
            assert answer <= 3 and (s.finished or (s.truncated and answer == 3))
            answer_text = TOK.decode([t for t in s.tokens[b + len(ids):] if t not in (TOK.eos_id, TOK.pad_id)])
            assert s.text.endswith(INTERRUPTION_PHRASE + answer_text)
        else:  # closed its thinking or ended before the budget
            assert not any(s.forced) and (end in s.tokens[:b] or s.finished)
    assert n_interrupted >= 8


def test_truncation_at_max_new_tokens():
    out = engine().generate(PROMPTS, 8, Length(max_new_tokens=6), seed=0)
    for s in (s for g in out for s in g):
        assert len(s.tokens) <= 6
        if TOK.eos_id in s.tokens:
            assert s.finished and not s.truncated and s.tokens.index(TOK.eos_id) == len(s.tokens) - 1
        else:
            assert s.truncated and not s.finished and len(s.tokens) == 6
    assert sum(s.truncated for g in out for s in g) >= 8


def test_stops_when_all_sequences_end():
    eng = engine(fp32_head=False)
    head = torch.nn.Linear(MICRO.d_model, TOK.vocab_size, bias=True)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.fill_(-50.0)
        head.bias[TOK.eos_id] = 50.0  # always EOS
    eng.model.set_output_embeddings(head)
    out = eng.generate(PROMPTS, 2, Length(max_new_tokens=20), seed=0)
    assert eng.last_stats["steps"] == 1
    for s in (s for g in out for s in g):
        assert s.tokens == [TOK.eos_id] and s.finished and not s.truncated and s.text == ""


def test_load_weights_in_place():
    eng = engine()
    ptr = eng.model.embed.weight.data_ptr()
    eng.load_weights(build_tiny(MICRO, 9).state_dict(), version=4)
    assert eng.version == 4 and eng.model.embed.weight.data_ptr() == ptr
    assert torch.equal(eng.model.embed.weight, build_tiny(MICRO, 9).embed.weight)


def test_length_budget_beyond_context_is_a_user_error():
    from scalerl.errors import UserError

    with pytest.raises(UserError, match="max_seq_len"):
        engine().generate(PROMPTS, 1, Length(max_new_tokens=200), seed=0)


@pytest.mark.parametrize("ignore_eos", [False, True])
def test_dropping_finished_sequences_changes_no_sample(monkeypatch, ignore_eos):
    """Finished rows leave the model's batch (COMPACT_AT); the samples are those of the uncompacted batch."""
    from scalerl.engines import builtin

    phrase = " " + INTERRUPTION_PHRASE
    length = Length(max_new_tokens=60, lo=5, hi=30, phrase=phrase, answer_budget=3)
    runs = {}
    for at in (0.0, 0.75, 1.0):  # never, the default, at every step
        monkeypatch.setattr(builtin.BuiltinEngine, "compact_at", at)
        eng = engine()
        rows: list[int] = []
        decode = eng.model.decode_step
        eng.model.decode_step = lambda tok, *a, **k: (rows.append(tok.numel()), decode(tok, *a, **k))[1]
        runs[at] = (eng.generate(PROMPTS, 8, length, seed=3, ignore_eos=ignore_eos), rows)
    (ref, ref_rows) = runs[0.0]
    assert set(ref_rows) == {16}
    for at in (0.75, 1.0):
        out, rows = runs[at]
        for a, b in zip((s for g in ref for s in g), (s for g in out for s in g)):
            assert (a.tokens, a.forced, a.versions, a.finished, a.truncated, a.interrupted) == (
                b.tokens, b.forced, b.versions, b.finished, b.truncated, b.interrupted)
            torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=1e-5)
        assert sum(rows) < sum(ref_rows) and min(rows) < 16
