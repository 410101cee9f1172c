"""The one length-control runtime (§3.8, ``scalerl/engines/runtime.py``): the built-in and the Hugging Face engines
drive it and interrupt at the same token for the same draws; rows advanced in any order give the lockstep
result; and it agrees token for token with the per-sequence machine the vLLM engine drives segment by segment.
"""

from __future__ import annotations

import pytest
import torch

from scalerl.algo.length_control import Interruption, LengthControl
from scalerl.engines.base import Sample
from scalerl.engines.runtime import LengthRuntime
from scalerl.engines.sequence import SequenceState, ThinkEndDetector
from scalerl.models.tokenizer import CharTokenizer

TOK = CharTokenizer()
LENGTH = Interruption(think_lo=3, think_hi=9, answer_budget=3, max_new_tokens=40)
PROMPTS = [TOK.encode("12+7="), TOK.encode("3*4="), TOK.encode("100-1=")]


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


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_runtime_agrees_with_the_per_sequence_machine(seed):
    """The vLLM engine's ``SequenceState`` and the runtime give the same samples from the same draws."""
    streams = _streams(8, 40, seed)
    run = _runtime(8, seed=seed)
    while not bool(run.done.all()):
        run.step(torch.tensor([s[min(int(i), 39)] for s, i in zip(streams, run.lengths)]), torch.full((8,), -0.5), 0)
    phrase = TOK.encode(LENGTH.phrase)
    detect = ThinkEndDetector(TOK, LENGTH.think_end)
    expected = []
    for row, stream in enumerate(streams):
        st = SequenceState(sample=Sample(prompt_tokens=[1], think_budget=run.budgets[row]), phrase=phrase,
                           answer_budget=LENGTH.answer_budget, max_new=LENGTH.max_new_tokens,
                           stop_ids=frozenset({TOK.eos_id}))
        while not st.done:
            st.step(stream[len(st.sample.tokens)], -0.5, 0, detect)
        expected.append([st.sample])
    assert _flat(run.samples([[1]] * 8, 1, TOK, ())) == _flat(expected)


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
