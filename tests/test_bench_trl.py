"""bench/rl_vs_trl.py: the timed-window arithmetic, the TRL tokenizer's agreement with the built-in one, and a
micro run of each side of the benchmark."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from scalerl.models.tokenizer import INTERRUPTION_PHRASE, CharTokenizer
from scalerl.models.registry import encode_prompt
from scalerl.tasks.arithmetic import ArithmeticTask

_PATH = Path(__file__).resolve().parent.parent / "bench" / "rl_vs_trl.py"
_spec = importlib.util.spec_from_file_location("rl_vs_trl", _PATH)
bench = importlib.util.module_from_spec(_spec)
sys.modules["rl_vs_trl"] = bench  # dataclasses look their module up there
_spec.loader.exec_module(bench)

MICRO = [
    "model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.max_seq_len=96",
    "batch.prompts=2", "batch.generations=2", "task.n_train=16", "task.n_val=4", "warmup.steps=0",
    "algo.length.params.think_lo=6", "algo.length.params.think_hi=10", "algo.length.params.answer_budget=4",
    "algo.length.params.max_new_tokens=36",
]


def test_timed_window_starts_after_warmup():
    # step ends at 10, 12, 15, 19 s; one warm-up step: the window opens when step 1 ends (10 s), closes at 19 s
    r = bench.timed_window("x", [10.0, 12.0, 15.0, 19.0], [4, 4, 4, 4], [40, 8, 12, 20], warmup_steps=1,
                           kept=[4, 2, 4, 0])
    assert (r.steps, r.samples, r.tokens) == (3, 12, 40)
    assert r.seconds == pytest.approx(9.0)
    assert r.samples_per_s == pytest.approx(12 / 9)
    assert r.tokens_per_s == pytest.approx(40 / 9)
    assert r.mean_length == pytest.approx(40 / 12)
    assert r.kept == pytest.approx(6 / 12)
    no_warm = bench.timed_window("x", [10.0, 12.0], [4, 4], [1, 1], warmup_steps=0)
    assert no_warm.seconds == 12.0 and no_warm.kept is None
    with pytest.raises(ValueError):
        bench.timed_window("x", [1.0], [4], [1], warmup_steps=1)


def test_hf_tokenizer_matches_builtin():
    pytest.importorskip("tokenizers")
    tok = CharTokenizer()
    hf = bench.hf_char_tokenizer(tok)
    assert (hf.pad_token_id, hf.bos_token_id, hf.eos_token_id, len(hf)) == (0, 1, 2, tok.vocab_size)
    task = ArithmeticTask(seed=3, n_train=200, n_val=1)
    shown = 0
    for p in task.train_problems():
        assert hf(p.prompt)["input_ids"] == encode_prompt(tok, p.prompt)
        text = task.demonstration(p)
        if text is None:  # the testbed's untaught tier has no demonstration
            continue
        shown += 1
        assert hf(text, add_special_tokens=False)["input_ids"] == tok.encode(text)
    assert shown > 100
    # greedy longest match on the multi-character tokens, and exact decoding with specials skipped
    text = "<think>1+2=3 Okay, time is up. Let me stop thinking and formulate an answer. </think>3\n "
    ids = tok.encode(text)
    assert hf(text, add_special_tokens=False)["input_ids"] == ids
    assert len(tok.encode(INTERRUPTION_PHRASE)) < 20
    assert hf.decode(ids + [tok.eos_id, tok.pad_id], skip_special_tokens=True) == text


def test_micro_scalerl_side_counts_every_step():
    cfg = bench.bench_config([*MICRO, "threads=1"], steps=3, backend="inline", threads=1)
    assert cfg.algo.zero_variance_filter is False and cfg.eval.every == 4
    r = bench.run_scalerl(cfg, warmup_steps=1, label="scalerl")
    assert (r.steps, r.samples, r.kept) == (2, 8, 1.0)
    assert 1 <= r.mean_length <= 36 and r.seconds > 0


def test_micro_trl_side_grades_every_completion():
    pytest.importorskip("trl")
    pytest.importorskip("datasets")
    cfg = bench.bench_config(MICRO, steps=3, backend="inline", threads=1)
    r = bench.run_trl(cfg, warmup_steps=1, threads=1)
    assert (r.steps, r.samples, r.kept) == (2, 8, None)
    assert 1 <= r.mean_length <= 36 and r.seconds > 0
