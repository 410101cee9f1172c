"""The one length-control runtime (§2, App. A.10, ``scalerl/engines/runtime.py``): the built-in and the Hugging Face engines
drive it and interrupt at the same token for the same draws; rows advanced in any order give the lockstep
result; and the vLLM engine's segment-by-segment driving gives the token-by-token samples.
"""

from __future__ import annotations

import pytest
import torch

from scalerl.algo.length_control import Interruption, LengthControl
from scalerl.engines.base import Sample
from scalerl.engines.runtime import LengthRuntime
from scalerl.models.tokenizer import CharTokenizer

TOK = CharTokenizer()
LENGTH = Interruption(think_lo=3, think_hi=9, answer_budget=3, max_new_tokens=40)
PROMPTS = [TOK.encode("12+7="), TOK.encode("3*4="), TOK.encode("100-1=")]


class OneRow:
    """One sequence of a ``LengthRuntime`` with a fixed thinking budget, stepped one token at a time (the state
    machine's tests in tests/test_engine_sequence.py and tests/test_engine_hf.py drive it through this)."""

    def __init__(self, tokenizer, budget: int | None, phrase: str, answer: int, max_new: int, stop_ids, detect) -> None:
        from types import SimpleNamespace as NS

        length = NS(phrase=phrase, think_end="</think>", answer_budget=answer, think_budgets=lambda n, rng: [budget] * n)
        self.tokenizer = tokenizer
        self.run = LengthRuntime(length, tokenizer, 1, 0, max_new, stop_ids, "cpu", detect)

    @property
    def done(self) -> bool:
        return bool(self.run.done[0])

    @property
    def thinking(self) -> bool:
        return bool(self.run.thinking[0])

    @property
    def sample(self) -> Sample:
        return self.run.samples([[1]], 1, self.tokenizer, ())[0][0]

    def step(self, token: int, logprob: float, version: int, detect=None) -> None:
        self.run.step(torch.tensor([token]), torch.tensor([logprob]), version)

    def at_budget(self) -> bool:
        return bool(self.run.at_budget()[0])

    def sample_limit(self) -> int:
        return int(self.run.sample_limit()[0])

    def force_phrase(self, version: int) -> None:
        while self.at_budget():
            self.step(self.tokenizer.pad_id, 0.0, version)


def _streams(n_seq: int, length: int, seed: int) -> list[list[int]]:
    """Scripted draws: mostly letters, sometimes EOS or the ``</think>`` token, so every ending occurs."""
    g = torch.Generator().manual_seed(seed)
    letters = TOK.encode("abcdefgh")
    pool = letters * 6 + [TOK.eos_id, TOK.token_id("</think>")]
    picks = torch.randint(len(pool), (n_seq, length), generator=g).tolist()
    return [[pool[i] for i in row] for row in picks]


def _runtime(n_seq: int, length=LENGTH, seed: int = 5) -> LengthRuntime:
    return LengthRuntime(length, TOK, n_seq, seed, length.max_new_tokens, (TOK.eos_id,))


def _flat(groups: list[list[Sample]]) -> list[tuple]:
    return [(s.tokens, s.forced, s.logprobs, s.finished, s.truncated, s.interrupted) for g in groups for s in g]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rows_advanced_one_at_a_time_give_the_lockstep_samples(seed):
    streams = _streams(6, 40, seed)
    lockstep = _runtime(6, seed=seed)
    while not bool(lockstep.done.all()):
        t = lockstep.lengths
        lockstep.step(torch.tensor([s[min(int(i), 39)] for s, i in zip(streams, t)]), torch.full((6,), -0.5), 0)
    one_by_one = _runtime(6, seed=seed)
    for row in reversed(range(6)):  # each row to its end before the next starts
        only = torch.zeros(6, dtype=torch.bool)
        only[row] = True
        while not bool(one_by_one.done[row]):
            at = int(one_by_one.lengths[row])
            drawn = torch.full((6,), streams[row][at])
            one_by_one.step(drawn, torch.full((6,), -0.5), 0, rows=only)
    prompts = [[1]] * 6
    assert _flat(lockstep.samples(prompts, 1, TOK, ())) == _flat(one_by_one.samples(prompts, 1, TOK, ()))
    assert any(s.interrupted for g in lockstep.samples(prompts, 1, TOK, ()) for s in g)


def test_sample_limit_stops_at_the_budget_then_the_answer_budget():
    run = _runtime(1, Interruption(think_lo=4, think_hi=4, answer_budget=3, max_new_tokens=40))
    assert int(run.sample_limit()[0]) == 4
    x = torch.tensor(TOK.encode("x"))
    for _ in range(4):
        run.step(x, torch.zeros(1), 0)
    assert bool(run.at_budget()[0]) and int(run.sample_limit()[0]) == 0
    for _ in TOK.encode(LENGTH.phrase):
        run.step(x, torch.zeros(1), 0)
    assert int(run.sample_limit()[0]) == 3 and bool(run.interrupted[0])


def test_builtin_and_hf_engines_interrupt_at_the_same_token():
    pytest.importorskip("transformers")
    from scalerl.config import ModelConfig
    from scalerl.engines.builtin import BuiltinEngine
    from scalerl.engines.hf import HFEngine
    from scalerl.models.hf import HFPolicy
    from scalerl.models.tiny import build_tiny, to_hf_llama

    torch.set_num_threads(1)
    tiny = build_tiny(ModelConfig(d_model=32, n_layers=2, n_heads=2, max_seq_len=96), 0, TOK)
    hf = HFPolicy(to_hf_llama(tiny))
    length = Interruption(think_lo=3, think_hi=12, answer_budget=4, max_new_tokens=40)
    for seed in (0, 1):
        a = BuiltinEngine(tiny, TOK).generate(PROMPTS, 4, length, seed=seed)
        b = HFEngine(hf, TOK).generate(PROMPTS, 4, length, seed=seed)
        for x, y in zip((s for g in a for s in g), (s for g in b for s in g)):
            assert (x.tokens, x.forced, x.finished, x.truncated, x.interrupted, x.think_budget) == (
                y.tokens, y.forced, y.finished, y.truncated, y.interrupted, y.think_budget)
            torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4, rtol=1e-4)
        assert any(s.interrupted for g in a for s in g)
    # no length control: both sample up to the same cap
    none = LengthControl(max_new_tokens=12)
    assert _flat(BuiltinEngine(tiny, TOK).generate(PROMPTS, 2, none, seed=3))[0][:3] == \
        _flat(HFEngine(hf, TOK).generate(PROMPTS, 2, none, seed=3))[0][:3]


class _FakeVLLM:
    """Stands in for ``vllm.LLM`` (``llm_engine.add_request``/``step``, ``reset_prefix_cache``): every request
    finishes at the next ``step``; the token after a context is ``pick(context)``, the same rule the
    token-by-token reference below samples by."""

    def __init__(self, pick) -> None:
        self.pick, self.queue, self.requests = pick, [], []
        self.llm_engine = self

    def reset_prefix_cache(self) -> None:
        pass

    def add_request(self, request_id, prompt, params) -> None:
        self.queue.append((request_id, prompt["prompt_token_ids"], params))
        self.requests.append(params.max_tokens)

    def step(self):
        from types import SimpleNamespace as NS

        outs = []
        for request_id, context, params in self.queue:
            tokens: list[int] = []
            while len(tokens) < params.max_tokens:
                tokens.append(self.pick(context + tokens))
                if tokens[-1] in params.stop_token_ids:
                    break
            stopped = bool(tokens) and tokens[-1] in params.stop_token_ids
            completion = NS(token_ids=tokens, logprobs=[{t: NS(logprob=-0.5)} for t in tokens],
                            finish_reason="stop" if stopped else "length")
            outs.append(NS(request_id=request_id, finished=True, outputs=[completion]))
        self.queue = []
        return outs


def _pick(context: list[int]) -> int:
    pool = TOK.encode("abcdefgh") * 5 + [TOK.eos_id, TOK.token_id("</think>")]
    return pool[hash(tuple(context)) % len(pool)]


def test_vllm_segments_give_the_token_by_token_samples():
    """The vLLM engine's stop-and-continue driving of the runtime (segments up to each decision point, the phrase
    forced between them) gives what token-by-token driving gives, for the same draws."""
    import itertools
    from types import SimpleNamespace as NS

    from scalerl.engines.vllm import VLLMEngine

    prompts = [TOK.encode("12+7="), TOK.encode("3*4="), TOK.encode("9-2="), TOK.encode("5+5=")]
    engine = object.__new__(VLLMEngine)
    engine.tokenizer, engine.stop_ids, engine.version, engine.max_model_len = TOK, frozenset({TOK.eos_id}), 0, 128
    engine.llm, engine._ids, engine._final_only = _FakeVLLM(_pick), itertools.count(), None
    engine._sampling = lambda **kw: NS(**kw)
    for seed in range(4):
        got = engine.generate(prompts, 2, LENGTH, seed=seed)
        ref = _runtime(8, seed=seed)
        while not bool(ref.done.all()):
            drawn = [_pick(prompts[r // 2] + ref.tokens[r, : int(ref.lengths[r])].tolist()) for r in range(8)]
            ref.step(torch.tensor(drawn), torch.full((8,), -0.5), 0)
        assert _flat(got) == _flat(ref.samples(prompts, 2, TOK, (TOK.eos_id, TOK.pad_id)))
        assert any(s.interrupted for g in got for s in g)
    assert max(engine.llm.requests) > 1  # whole segments, not one token per request
