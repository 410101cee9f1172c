"""The length-control state machine driven segment by segment, as the vLLM engine drives it (stop-and-continue,
§2, App. A.10), against the same machine driven token by token, as the Hugging Face engine drives it. And the engine
choice in the config (``engine=vllm``), which must fail in one line where vLLM cannot run.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from scalerl.algo.length_control import PAPER_PHRASE
from scalerl.build import build_model
from scalerl.engines.registry import check_engine
from scalerl.config import ModelConfig, load_config
from scalerl.engines.sequence import ThinkEndDetector
from scalerl.errors import UserError
from scalerl.engines.base import Sample
from scalerl.models.tokenizer import CharTokenizer
from test_engine_runtime import OneRow

TOK = CharTokenizer()
PHRASE = TOK.encode(PAPER_PHRASE)
DETECT = ThinkEndDetector(TOK, "</think>")


def _state(budget: int | None, answer: int = 3, max_new: int = 60) -> OneRow:
    return OneRow(TOK, budget, PAPER_PHRASE, answer, max_new, {TOK.eos_id}, DETECT)


def _by_token(state: OneRow, stream: list[int]) -> Sample:
    """The HF engine's way: one ``step`` per decode step; the token drawn at completion index i is stream[i]."""
    while not state.done:
        state.step(stream[len(state.sample.tokens)], -0.5, 0, DETECT)
    return state.sample


def _by_segment(state: OneRow, stream: list[int]) -> tuple[Sample, list[int]]:
    """The vLLM engine's way: sample ``sample_limit()`` tokens, then force the phrase if at the budget."""
    limits = []
    while True:
        if not state.done and state.at_budget():
            state.force_phrase(0)
        if state.done:
            return state.sample, limits
        limits.append(state.sample_limit())
        assert limits[-1] >= 1
        for _ in range(limits[-1]):
            state.step(stream[len(state.sample.tokens)], -0.5, 0, DETECT)
            if state.done:
                break


XS = TOK.encode("x" * 200)


@pytest.mark.parametrize(
    "budget, answer, max_new, stream, limits",
    [
        (4, 3, 60, XS, [4, 3]),  # thinking to the budget, the phrase, then the answer budget
        (4, 3, 10, XS, [4]),  # the phrase itself is cut by the hard cap
        (12, 3, 40, TOK.encode("ab</think>") + XS, [12, 28]),  # thinking closed inside the first segment
        (12, 3, 40, TOK.encode("abc") + [TOK.eos_id] + XS, [12]),  # EOS inside the first segment
        (None, 3, 20, XS, [20]),  # no budget: one segment up to the cap
    ],
)
def test_segments_give_the_token_by_token_sequence(budget, answer, max_new, stream, limits):
    token = _by_token(_state(budget, answer, max_new), stream)
    segment, got = _by_segment(_state(budget, answer, max_new), stream)
    assert got == limits
    for field in ("tokens", "logprobs", "forced", "finished", "truncated", "interrupted"):
        assert getattr(segment, field) == getattr(token, field), field


def test_forced_phrase_follows_the_budget_exactly():
    s, _ = _by_segment(_state(4, answer=3), XS)
    assert s.interrupted and s.truncated and not s.finished
    assert s.tokens[4 : 4 + len(PHRASE)] == PHRASE
    assert s.forced == [False] * 4 + [True] * len(PHRASE) + [False] * 3
    assert s.logprobs == [-0.5] * 4 + [0.0] * len(PHRASE) + [-0.5] * 3


def test_engine_shorthand_and_unknown_engine():
    assert load_config("scalerl", None, ["engine=vllm"]).engine.name == "vllm"
    assert load_config("scalerl", None, []).engine.name == "native"
    with pytest.raises(UserError, match="engine.name: unknown engine 'vlm'"):
        load_config("scalerl", None, ["engine=vlm"])


def test_vllm_needs_an_exportable_model():
    bundle = build_model(ModelConfig(d_model=32, n_layers=1, n_heads=2), 0)
    cfg = load_config("scalerl", None, ["engine=vllm"])
    with pytest.raises(UserError, match="exports to a Hugging Face checkpoint"):
        check_engine(cfg, dataclasses.replace(bundle, hf_export=None))
    check_engine(load_config("scalerl", None, []), bundle)  # the native engine serves any model


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_train_with_vllm_absent_is_one_line_and_writes_nothing(tmp_path: Path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "scalerl", "train", "--quiet", "--out", str(out), "--set", "engine=vllm",
         "--set", "warmup.steps=0", "--set", "model.d_model=32", "--set", "model.n_layers=1"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "engine.name: vllm is not installed" in proc.stderr
    assert not out.exists() or not any(out.iterdir())
