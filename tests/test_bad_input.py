"""Every bad input is one line on stderr and exit code 2: no traceback, nothing half-written (issue 13).

One table of cases across usage errors, fit/compare, train/resume, task data, sweeps and reports. Each runs the
CLI in-process (``scalerl.cli.main``) against a small workspace and checks the exit code, that stderr is one
line starting ``error:``, and that no file in the workspace was created, changed or removed. A few cases run the
real entry point in a subprocess, where typer's own error handling would otherwise print a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from scalerl.cli import main
from scalerl.config import load_config, to_yaml

MICRO = [
    "model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.max_seq_len=96", "batch.prompts=4",
    "batch.generations=4", "task.n_train=64", "task.n_val=8", "eval.n_samples=1", "warmup.steps=0",
    "algo.length.params.think_lo=6", "algo.length.params.think_hi=10", "algo.length.params.answer_budget=4",
    "algo.length.params.max_new_tokens=36", "tensorboard=false", "threads=1", "backend=inline", "steps=4",
]
LATIN1 = b"name: caf\xe9\nsteps: 5\n"  # not UTF-8


def _sets(*items: str) -> list[str]:
    return [a for s in items for a in ("--set", s)]


def _csv(path: Path, seed: int) -> None:
    c = np.linspace(100, 16000, 40)
    y = 0.1 + 0.5 / (1 + (2500 / c) ** 1.9) + np.random.default_rng(seed).normal(0, 0.005, c.size)
    path.write_text("compute/device_hours,val/pass_rate\n" + "".join(f"{a:.1f},{b:.5f}\n" for a, b in zip(c, y)))


def _run_dir(path: Path, checkpoint: bytes | None, latest: str | None = "step_0000002.pt", metrics: bool = False) -> None:
    path.mkdir()
    (path / "config.yaml").write_text(to_yaml(load_config("scalerl", None, MICRO)))
    ck = path / "checkpoints"
    ck.mkdir()
    if checkpoint is not None:
        (ck / "step_0000002.pt").write_bytes(checkpoint)
    if latest is not None:
        (ck / "latest").write_text(latest + "\n")
    if metrics:
        (path / "metrics.jsonl").write_text('{"step": 0, "val/pass_rate": 0.1}\n')


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """The workspace every case runs in (the current directory): inputs good and bad."""
    _csv(tmp_path / "a.csv", 0)
    _csv(tmp_path / "b.csv", 1)
    (tmp_path / "afile").write_text("not a directory\n")
    (tmp_path / "emptydir").mkdir()
    (tmp_path / "latin1.yaml").write_bytes(LATIN1)
    (tmp_path / "broken.yaml").write_text("steps: [1,\n")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "header.csv").write_text("compute/device_hours,val/pass_rate\n")
    (tmp_path / "text.csv").write_text("compute/device_hours,val/pass_rate\nabc,def\nghi,jkl\n")
    (tmp_path / "short.csv").write_text("compute/device_hours,val/pass_rate\n1,0.1\n2,0.2\n")
    (tmp_path / "latin1.csv").write_bytes(b"compute/device_hours,val/pass_rate\n1,\xe9\n")
    buf = tmp_path / "good.pt"
    torch.save({"step": 2, "w": torch.ones(64)}, buf)
    good = buf.read_bytes()
    buf.unlink()
    _run_dir(tmp_path / "dangling", None)
    _run_dir(tmp_path / "emptyckpt", b"")
    _run_dir(tmp_path / "truncckpt", good[: len(good) // 2])
    _run_dir(tmp_path / "held", None, latest=None, metrics=True)
    (tmp_path / "badcfg").mkdir()
    (tmp_path / "badcfg" / "config.yaml").write_bytes(LATIN1)
    data = tmp_path / "data"
    data.mkdir()
    (data / "latin1.jsonl").write_bytes(b'{"question": "caf\xe9", "answer": "1"}\n')
    (data / "broken.jsonl").write_text('{"question": "1+1", "answer": "2"}\n{"question": \n')
    (data / "notlist.json").write_text('{"question": "1+1"}')
    (data / "empty.jsonl").write_text("\n")
    (data / "nofield.jsonl").write_text('{"x": 1}\n' * 20)
    (data / "notobj.jsonl").write_text("[1, 2]\n")
    (data / "data.txt").write_text("1+1=2\n")
    (data / "few.jsonl").write_text('{"question": "1+1", "answer": "2"}\n' * 3)
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "latin1.yaml").write_bytes(b"description: caf\xe9\nruns: {a: []}\n")
    (specs / "broken.yaml").write_text("runs: [a, b\n")
    (specs / "list.yaml").write_text("- a\n")
    (specs / "unknown.yaml").write_text("runs: {a: []}\nbogus: 1\n")
    (specs / "both.yaml").write_text("runs: {a: []}\ngrid: {steps: [1]}\n")
    (specs / "badset.yaml").write_text("runs: {a: [steps=0]}\n")
    (specs / "badname.yaml").write_text("runs: {'../escape': []}\n")
    (specs / "nan.yaml").write_text("runs: {a: [optim.lr=.nan]}\n")
    (specs / "good.yaml").write_text("set: [" + ", ".join(MICRO) + "]\nruns: {a: []}\n")
    (tmp_path / "sweepdir").mkdir()
    (tmp_path / "sweepdir" / "sweep.json").write_bytes(b"\xff\xfe not json")
    return tmp_path


FIT = ["fit", "a.csv"]
CMP = ["compare", "a.csv", "b.csv"]
TRAIN = ["train", "--out", "newrun", *_sets(*MICRO)]
TASK = [*TRAIN, *_sets("task.name=math", "task.params.source=file")]
SWEEP = ["sweep", "specs/good.yaml", "--out", "sw"]

CASES: dict[str, list[str]] = {
    # --- usage errors (typer's bundled click and click alike)
    "no-command": [],
    "unknown-command": ["bogus"],
    "fit-no-path": ["fit"],
    "compare-no-path": ["compare"],
    "fit-unknown-option": [*FIT, "--bogus"],
    "fit-from-not-number": [*FIT, "--fit-from", "abc"],
    "fit-level-not-number": [*FIT, "--level", "abc"],
    "fit-option-needs-value": [*FIT, "--method"],
    "compare-margin-not-number": [*CMP, "--margin", "abc"],
    "train-no-out": ["train", "--set", "steps=1"],
    "train-unknown-option": [*TRAIN, "--bogus"],
    "train-extra-argument": [*TRAIN, "extra"],
    "sweep-no-spec": ["sweep"],
    "sweep-no-out": ["sweep", "specs/good.yaml"],
    "report-no-dir": ["report"],
    "report-no-out": ["report", "emptydir"],
    "presets-unknown-option": ["presets", "--bogus"],
    "loo-no-out": ["loo"],
    "loo-budget-not-number": ["loo", "--out", "loo", "--budget-steps", "x"],
    "demo-minutes-not-number": ["demo", "--out", "demo", "--minutes", "x"],
    # --- fit / compare: numbers
    "predict-at-nan": [*FIT, "--predict-at", "nan"],
    "predict-at-nan-json": [*FIT, "--predict-at", "nan", "--json"],
    "predict-at-inf": [*FIT, "--predict-at", "inf"],
    "predict-at-negative": [*FIT, "--predict-at", "-5"],
    "predict-at-word": [*FIT, "--predict-at", "1000,x"],
    "target-nan": [*FIT, "--target", "nan"],
    "target-nan-json": [*FIT, "--target", "nan", "--json"],
    "target-negative": [*FIT, "--target", "-0.5"],
    "target-above-one": [*FIT, "--target", "1.5"],
    "target-inf-no-bounds": [*FIT, "--target", "inf", "--no-bounds"],
    "level-zero": [*FIT, "--level", "0"],
    "level-one": [*FIT, "--level", "1"],
    "level-nan": [*FIT, "--level", "nan"],
    "level-negative": [*FIT, "--level", "-0.5"],
    "fit-from-nan": [*FIT, "--fit-from", "nan"],
    "fit-from-negative": [*FIT, "--fit-from", "-1"],
    "fit-from-inf": [*FIT, "--fit-from", "inf"],
    "fit-until-nan": [*FIT, "--fit-until", "nan"],
    "fit-until-zero": [*FIT, "--fit-until", "0"],
    "fit-until-word": [*FIT, "--fit-until", "abc"],
    "fit-until-percent-over": [*FIT, "--fit-until", "150%"],
    "fit-until-inf": [*FIT, "--fit-until", "inf"],
    "margin-nan": [*CMP, "--margin", "nan"],
    "margin-nan-json": [*CMP, "--margin", "nan", "--json"],
    "margin-negative": [*CMP, "--margin", "-0.1"],
    "margin-inf": [*CMP, "--margin", "inf"],
    "compare-level-nan": [*CMP, "--level", "nan"],
    "compare-fit-from-negative": [*CMP, "--fit-from", "-3"],
    # --- fit / compare: inputs and outputs
    "method-unknown": [*FIT, "--method", "bogus"],
    "x-column-unknown": [*FIT, "--x", "bogus"],
    "y-column-unknown": [*FIT, "--y", "bogus"],
    "fit-plot-name-too-long": [*FIT, "--plot", "p" * 300 + ".png"],
    "fit-plot-path-too-long": [*FIT, "--plot", "/".join(["d" * 200] * 25) + "/p.png"],
    "train-out-name-too-long": ["train", "--out", "r" * 300, *_sets(*MICRO)],
    "fit-missing-file": ["fit", "missing.csv"],
    "fit-empty-dir": ["fit", "emptydir"],
    "fit-empty-csv": ["fit", "empty.csv"],
    "fit-header-only": ["fit", "header.csv"],
    "fit-text-values": ["fit", "text.csv"],
    "fit-too-few-points": ["fit", "short.csv"],
    "fit-not-utf8-csv": ["fit", "latin1.csv"],
    "plot-is-dir": [*FIT, "--plot", "emptydir"],
    "plot-bad-suffix": [*FIT, "--plot", "out.txt"],
    "plot-under-file": [*FIT, "--plot", "afile/curve.png"],
    "plot-unwritable": [*FIT, "--plot", "/proc/scalerl-curve.png"],
    "compare-one-run": ["compare", "a.csv"],
    "compare-missing-file": ["compare", "a.csv", "missing.csv"],
    "compare-plot-under-file": [*CMP, "--plot", "afile/x.png"],
    "compare-slope-plot-bad-suffix": [*CMP, "--slope-plot", "x.gif"],
    "compare-slope-plot-unwritable": [*CMP, "--slope-plot", "/proc/scalerl-slope.png"],
    # --- train: where it writes
    "train-out-is-file": ["train", "--out", "afile", *_sets(*MICRO)],
    "train-out-under-file": ["train", "--out", "afile/run", *_sets(*MICRO)],
    "train-out-unwritable": ["train", "--out", "/proc/scalerl-run", *_sets(*MICRO)],
    "train-out-holds-run": ["train", "--out", "held", *_sets(*MICRO)],
    "demo-out-is-file": ["demo", "--out", "afile"],
    # --- train: config files and presets
    "config-missing": [*TRAIN, "--config", "missing.yaml"],
    "config-not-utf8": [*TRAIN, "--config", "latin1.yaml"],
    "config-not-yaml": [*TRAIN, "--config", "broken.yaml"],
    "config-a-list": [*TRAIN, "--config", "list.yaml"],
    "config-a-directory": [*TRAIN, "--config", "emptydir"],
    "preset-unknown": [*TRAIN, "--preset", "bogus"],
    "preset-loo-unknown": [*TRAIN, "--preset", "loo-bogus"],
    "address-without-ray": [*TRAIN, "--address", "auto"],
    # --- train: --set values
    "set-no-equals": [*TRAIN, "--set", "steps"],
    "set-unknown-field": [*TRAIN, "--set", "bogus.field=1"],
    "set-into-value": [*TRAIN, "--set", "steps.x=1"],
    "set-steps-zero": [*TRAIN, "--set", "steps=0"],
    "set-steps-word": [*TRAIN, "--set", "steps=abc"],
    "set-lr-nan": [*TRAIN, "--set", "optim.lr=.nan"],
    "set-lr-inf": [*TRAIN, "--set", "optim.lr=.inf", "--set", "optim.warmup_steps=0"],
    "set-lr-negative": [*TRAIN, "--set", "optim.lr=-1"],
    "set-betas-out-of-range": [*TRAIN, "--set", "optim.betas=[2, 3]"],
    "set-betas-one-value": [*TRAIN, "--set", "optim.betas=[0.9]"],
    "set-eps-inf": [*TRAIN, "--set", "optim.eps=.inf"],
    "set-grad-clip-nan": [*TRAIN, "--set", "optim.grad_clip=.nan"],
    "set-threads-huge": [*TRAIN, "--set", "threads=100000"],
    "set-threads-zero": [*TRAIN, "--set", "threads=0"],
    "set-max-minutes-inf": [*TRAIN, "--set", "max_minutes=.inf"],
    "set-reward-nan": [*TRAIN, "--set", "reward.correct=.nan"],
    "set-max-seq-len-below-min": [*TRAIN, "--set", "model.max_seq_len=8"],
    "set-max-seq-len-too-short": [*TRAIN, "--set", "model.max_seq_len=16"],
    "set-generations-one": [*TRAIN, "--set", "batch.generations=1"],
    "set-loss-unknown": [*TRAIN, "--set", "algo.loss.name=bogus"],
    "set-schedule-unknown": [*TRAIN, "--set", "schedule.name=bogus"],
    "set-backend-unknown": [*TRAIN, "--set", "backend=bogus"],
    "set-engine-unknown": [*TRAIN, "--set", "engine.name=bogus"],
    "set-dtype-unknown": [*TRAIN, "--set", "model.dtype=float8"],
    "set-eval-every-zero": [*TRAIN, "--set", "eval.every=0"],
    "set-gpu-share-over-one": [*TRAIN, "--set", "engine.gpu_memory_utilization=2"],
    # --- resume
    "resume-no-run": ["train", "--out", "emptydir", "--resume"],
    "resume-missing-dir": ["train", "--out", "nothing", "--resume"],
    "resume-with-preset": ["train", "--out", "dangling", "--resume", "--preset", "grpo_deepseek"],
    "resume-with-config": ["train", "--out", "dangling", "--resume", "--config", "list.yaml"],
    "resume-with-broken-config": ["train", "--out", "dangling", "--resume", "--config", "broken.yaml"],
    "resume-changes-model": ["train", "--out", "dangling", "--resume", "--set", "model.d_model=64"],
    "resume-changes-loss": ["train", "--out", "dangling", "--resume", "--set", "algo.loss.name=dapo"],
    "resume-dangling-latest": ["train", "--out", "dangling", "--resume"],
    "resume-empty-checkpoint": ["train", "--out", "emptyckpt", "--resume"],
    "resume-truncated-checkpoint": ["train", "--out", "truncckpt", "--resume"],
    "resume-config-not-utf8": ["train", "--out", "badcfg", "--resume"],
    "resume-set-nan": ["train", "--out", "dangling", "--resume", "--set", "max_minutes=.nan"],
    # --- task data
    "task-file-missing": [*TASK, "--set", "task.params.path=data/missing.jsonl"],
    "task-file-not-utf8": [*TASK, "--set", "task.params.path=data/latin1.jsonl"],
    "task-file-bad-json": [*TASK, "--set", "task.params.path=data/broken.jsonl"],
    "task-file-json-not-list": [*TASK, "--set", "task.params.path=data/notlist.json"],
    "task-file-empty": [*TASK, "--set", "task.params.path=data/empty.jsonl"],
    "task-file-no-fields": [*TASK, "--set", "task.params.path=data/nofield.jsonl"],
    "task-file-record-not-object": [*TASK, "--set", "task.params.path=data/notobj.jsonl"],
    "task-file-format": [*TASK, "--set", "task.params.path=data/data.txt"],
    "task-file-too-few": [*TASK, "--set", "task.params.path=data/few.jsonl"],
    "task-file-is-dir": [*TASK, "--set", "task.params.path=data"],
    "task-unknown": [*TRAIN, "--set", "task.name=bogus"],
    # --- sweeps
    "sweep-spec-missing": ["sweep", "specs/missing.yaml", "--out", "sw"],
    "sweep-spec-not-utf8": ["sweep", "specs/latin1.yaml", "--out", "sw"],
    "sweep-spec-not-yaml": ["sweep", "specs/broken.yaml", "--out", "sw"],
    "sweep-spec-a-list": ["sweep", "specs/list.yaml", "--out", "sw"],
    "sweep-spec-unknown-key": ["sweep", "specs/unknown.yaml", "--out", "sw"],
    "sweep-spec-runs-and-grid": ["sweep", "specs/both.yaml", "--out", "sw"],
    "sweep-spec-bad-override": ["sweep", "specs/badset.yaml", "--out", "sw"],
    "sweep-spec-bad-run-name": ["sweep", "specs/badname.yaml", "--out", "sw"],
    "sweep-spec-nan": ["sweep", "specs/nan.yaml", "--out", "sw"],
    "sweep-out-is-file": ["sweep", "specs/good.yaml", "--out", "afile"],
    "sweep-out-unwritable": ["sweep", "specs/good.yaml", "--out", "/proc/scalerl-sweep"],
    "sweep-report-is-dir": [*SWEEP, "--report", "emptydir"],
    "sweep-report-under-file": [*SWEEP, "--report", "afile/r.html"],
    "sweep-set-unknown": [*SWEEP, "--set", "bogus=1"],
    "sweep-set-nan": [*SWEEP, "--set", "optim.lr=.nan"],
    "loo-unknown-variant": ["loo", "--out", "loo", "--only", "loo-bogus", *_sets(*MICRO)],
    "loo-out-is-file": ["loo", "--out", "afile"],
    # --- reports
    "report-missing-dir": ["report", "missing", "--out", "r.html"],
    "report-empty-dir": ["report", "emptydir", "--out", "r.html"],
    "report-bad-sweep-index": ["report", "sweepdir", "--out", "r.html"],
    "report-out-not-html": ["report", "emptydir", "--out", "r.txt"],
    "report-out-is-dir": ["report", "emptydir", "--out", "emptydir"],
    "report-out-under-file": ["report", "emptydir", "--out", "afile/r.html"],
    "report-out-unwritable": ["report", "emptydir", "--out", "/proc/scalerl-r.html"],
    "report-margin-nan": ["report", "emptydir", "--out", "r.html", "--margin", "nan"],
    "report-margin-negative": ["report", "emptydir", "--out", "r.html", "--margin", "-1"],
    # --- forecast-guided pruning and stopping (issue 28)
    "sweep-prune-no-compute-budget": [*SWEEP, "--prune"],
    "sweep-prune-margin-negative": [*SWEEP, "--prune", "--margin", "-0.1"],
    "sweep-prune-margin-nan": [*SWEEP, "--prune", "--margin", "nan"],
    "loo-budget-hours-zero": ["loo", "--out", "loo", "--budget-hours", "0", "--prune"],
    "loo-prune-no-compute-budget": ["loo", "--out", "loo", "--budget-steps", "5", "--prune"],
    "train-stop-when-unknown": [*TRAIN, "--stop-when", "loss<0.1"],
    "train-stop-when-wrong-op": [*TRAIN, "--stop-when", "gain>0.005"],
    "train-stop-when-not-number": [*TRAIN, "--stop-when", "reward>=high"],
    "train-stop-when-out-of-range": [*TRAIN, "--stop-when", "reach<2"],
    "train-stop-when-empty": [*TRAIN, "--stop-when", " , "],
}


def _tree(root: Path) -> dict[str, tuple[int, int] | None]:
    """Every path under ``root`` with, for files, size and modification time (a directory's own time changes
    when the writability probe creates and deletes a file in it, which leaves nothing behind)."""
    return {
        str(p.relative_to(root)): None if p.is_dir() else (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }


def assert_refused(argv: list[str], ws: Path, capsys, monkeypatch) -> None:
    """``scalerl argv`` run in ``ws``: exit 2, one ``error:`` line on stderr, no traceback, ``ws`` untouched."""
    monkeypatch.chdir(ws)
    before = _tree(ws)
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code
    _, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2, f"exit {code}: {err[-1500:]}"
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-1500:]
    assert "Traceback" not in err
    assert _tree(ws) == before  # nothing created, changed or removed


@pytest.mark.parametrize("argv", list(CASES.values()), ids=list(CASES))
def test_bad_input_is_one_line_and_exit_2(argv, ws, capsys, monkeypatch):
    assert_refused(argv, ws, capsys, monkeypatch)


def test_suite_covers_every_class():
    assert len(CASES) >= 100


@pytest.mark.parametrize(
    "argv, needle",
    [
        ([], "no command given"),
        (["bogus"], "No such command"),
        (["fit"], "Missing argument"),
        (["train", "--set", "steps=1"], "Missing option '--out'"),
    ],
)
def test_entry_point_usage_errors(argv, needle, tmp_path):
    """The real entry point, in a subprocess: exit 2, one line, no traceback."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-m", "scalerl", *argv], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_failing_sweep_run_exits_nonzero_and_index_says_failed(ws, capsys, monkeypatch):
    def broken(cfg, out, resume, show_progress):
        raise RuntimeError("boom")

    monkeypatch.chdir(ws)
    monkeypatch.setattr("scalerl.experiments.sweep.train_run", broken)
    with pytest.raises(SystemExit) as exc:
        main([*SWEEP, "--quiet"])
    assert exc.value.code == 1
    assert "1 run(s) failed" in capsys.readouterr().err
    index = json.loads((ws / "sw" / "sweep.json").read_text())
    assert index["status"] == "failed" and index["runs"][0]["status"] == "failed"
