"""Bad input that an audit of every command found getting past the checks of tests/test_bad_input.py: a traceback,
a long run started before the mistake was noticed, or files written into the wrong place. Each case must be one
line on stderr starting ``error:``, exit code 2, no traceback, and the workspace untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from test_bad_input import MICRO, _sets, assert_refused, ws  # noqa: F401  (ws: the shared workspace fixture)

HEADER = "compute/device_hours,val/pass_rate\n"


@pytest.fixture
def wsa(ws: Path) -> Path:  # noqa: F811
    """The shared workspace plus the inputs the audit found getting through."""
    c = np.linspace(100, 16000, 40)
    y = 0.1 + 0.5 / (1 + (2500 / c) ** 1.9)
    (ws / "hugey.csv").write_text(HEADER + "".join(f"{a:.1f},{b * 1e300:.5g}\n" for a, b in zip(c, y)))
    big = "1" + "0" * 400  # a JSON integer beyond float's range
    (ws / "bigint.jsonl").write_text("".join(f'{{"compute/device_hours": {big}, "val/pass_rate": {b}}}\n' for b in y))
    (ws / "deep.jsonl").write_text("[" * 100_000 + "\n" + "]" * 100_000 + "\n")
    (ws / "deepline.jsonl").write_text('{"a": ' * 100_000 + "1" + "}" * 100_000 + "\n{}\n")
    (ws / "liststep.json").write_text(json.dumps({"log_history": [{"step": [i], "eval_x": 1} for i in range(3)]}, indent=1))
    (ws / "loss_name_list.yaml").write_text("algo:\n  loss:\n    name: [1]\n")
    (ws / "hugeint.yaml").write_text("steps: 1" + "0" * 5000 + "\n")
    specs = ws / "specs"
    (specs / "longname.yaml").write_text("set: [" + ", ".join(MICRO) + "]\nruns: {" + "a" * 300 + ": []}\n")
    (specs / "htmlrun.yaml").write_text("set: [" + ", ".join(MICRO) + "]\nruns: {r.html: []}\n")
    (specs / "hugeint.yaml").write_text("runs: {a: [steps=1" + "0" * 5000 + "]}\n")
    return ws


@pytest.fixture
def no_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any run that starts fails the test at once: these mistakes must be refused before the first step."""

    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("a run started on bad input")

    monkeypatch.setattr("scalerl.pipeline.runner.train", started)
    monkeypatch.setattr("scalerl.experiments.sweep.train_run", started)


FIT = ["fit", "a.csv"]
TRAIN = ["train", "--out", "newrun", *_sets(*MICRO)]
SWEEP = ["sweep", "specs/good.yaml", "--out", "sw"]
LOO = ["loo", "--out", "loo", "--budget-steps", "2", "--only", "loo-dapo", *_sets(*MICRO)]

CASES: dict[str, list[str]] = {
    # --- curve readers (scalerl/curves/readers.py, series.py)
    "fit-jsonl-int-beyond-float": ["fit", "bigint.jsonl"],
    "fit-json-nested-too-deep": ["fit", "deep.jsonl"],
    "fit-jsonl-line-nested-too-deep": ["fit", "deepline.jsonl"],
    "fit-trainer-state-step-not-number": ["fit", "liststep.json"],
    "fit-reward-beyond-float-fit": ["fit", "hugey.csv", "--no-bounds"],
    # --- fit options (scalerl/commands/curves.py)
    "a-grid-inf": [*FIT, "--method", "paper", "--a-grid", "0:inf:0.1"],
    "a-grid-step-too-small": [*FIT, "--method", "paper", "--a-grid", "0:1:1e-12"],
    "a-grid-outside-bounds": [*FIT, "--method", "paper", "--a-grid", "2:3:0.1"],
    "cmid-grid-zero": [*FIT, "--method", "paper", "--cmid-grid", "0:0:1"],
    "cmid-grid-negative": [*FIT, "--method", "paper", "--cmid-grid", "-5:-1:3"],
    "cmid-grid-too-many": [*FIT, "--method", "paper", "--cmid-grid", "1:2:1e12"],
    "compare-cmid-grid-negative": ["compare", "a.csv", "b.csv", "--method", "paper", "--cmid-grid", "-5:-1:3"],
    "predict-at-no-number": [*FIT, "--predict-at", ","],
    # --- empty values (scalerl/cli.py): Path("") is the current directory
    "train-out-empty": ["train", "--out", "", *_sets(*MICRO)],
    "train-out-equals-empty": ["train", "--out=", *_sets(*MICRO)],
    "fit-path-empty": ["fit", ""],
    "report-out-empty": ["report", "emptydir", "--out", ""],
    # --- presets (scalerl/config.py)
    "preset-empty": [*TRAIN, "--preset", ""],
    "preset-a-path": [*TRAIN, "--preset", "../configs/scalerl"],
    "presets-show-unknown-base": ["presets", "--show", "scalerl", "--base", "bogus"],
    # --- config values (scalerl/config.py)
    "config-loss-name-a-list": [*TRAIN, "--config", "loss_name_list.yaml"],
    "config-int-too-long": [*TRAIN, "--config", "hugeint.yaml"],
    "set-int-too-long": [*TRAIN, "--set", "steps=1" + "0" * 5000],
    "set-section-mapping-then-bad": [*TRAIN, "--set", "model={d_model: 32}", "--set", "steps=0"],
    "set-seed-negative": [*TRAIN, "--set", "seed=-1"],
    "set-seed-beyond-32-bits": [*TRAIN, "--set", f"seed={2**32}"],
    "set-task-seed-negative": [*TRAIN, "--set", "task.seed=-1"],
    "set-model-seed-negative": [*TRAIN, "--set", "model.seed=-1"],
    "set-forecast-fit-from-negative": [*TRAIN, "--set", "forecast.fit_from=-1"],
    "set-reward-correct-not-above-incorrect": [*TRAIN, "--set", "reward.correct=-1"],
    "ray-address-malformed": [*TRAIN, "--backend", "ray", "--address", "x y"],
    # --- demo (scalerl/commands/train.py): --minutes 0 ran the 20-minute default
    "demo-minutes-zero": ["demo", "--out", "demo", "--minutes", "0"],
    # --- sweeps and leave-one-out (scalerl/commands/experiments.py): refused before the first run
    "sweep-run-name-too-long": ["sweep", "specs/longname.yaml", "--out", "sw"],
    "sweep-spec-int-too-long": ["sweep", "specs/hugeint.yaml", "--out", "sw"],
    "sweep-report-not-html": [*SWEEP, "--report", "r.txt"],
    "sweep-report-is-out": ["sweep", "specs/good.yaml", "--out", "sw.html", "--report", "sw.html"],
    "sweep-report-is-a-run": ["sweep", "specs/htmlrun.yaml", "--out", "sw", "--report", "sw/r.html"],
    "loo-report-not-html": [*LOO, "--report", "r.txt"],
}


@pytest.mark.parametrize("argv", list(CASES.values()), ids=list(CASES))
def test_refused_before_anything_happens(argv, wsa, no_training, capsys, monkeypatch):
    assert_refused(argv, wsa, capsys, monkeypatch)


def test_set_section_as_mapping_is_not_the_shorthand():
    """``--set model={d_model: 64}`` sets fields of the section (it used to be read as the ``model=NAME``
    shorthand and fail with a KeyError)."""
    from scalerl.config import load_config

    cfg = load_config("scalerl", None, ["model={d_model: 64}", "model=tiny"])
    assert (cfg.model.name, cfg.model.d_model) == ("tiny", 64)


def test_empty_argument_after_double_dash_is_left_to_the_command():
    from scalerl.cli import empty_argument

    assert empty_argument(["fit", "--", ""]) is None
    assert empty_argument(["fit", "a.csv", "--x", ""]) == "argument 4 (after --x)"
    assert empty_argument(["--plot=", "fit"]) == "the value of --plot"


def test_negative_cmid_grid_is_one_line_from_the_entry_point(wsa):
    """The real entry point, in a subprocess, where numpy's RuntimeWarnings of a search over log(Cmid < 0) reach
    stderr: the grid is refused before any fit, so the error is the only line."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-m", "scalerl", *FIT, "--method", "paper", "--cmid-grid", "-5:-1:3"],
                          capture_output=True, text=True, env=env, cwd=wsa, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --cmid-grid"), done.stderr
