"""Audit of the paths that hold several runs (scalerl.curves.readers.load_runs; ``scalerl fit`` / ``compare``): a W&B
chart export of a sweep and a folder of runs (a scalerl sweep's output, HF/TRL output directories, a TensorBoard
logdir). Each case is one a review found wrong on the first version: a run dropped or read against another run's
column without a word, two runs shown under one name, a traceback, a run read twice."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from test_cli_curves import run

from scalerl.curves import load_runs
from scalerl.curves.plot import short_name
from scalerl.curves.synthetic import TABLE1, simulate_eval_curve
from scalerl.errors import UserError

COMPUTE = np.linspace(100, 16000, 40)
ROWS = ("scalerl-8b", "scalerl-32k", "scalerl-8b")  # A 0.61, 0.645, 0.61 (seed decides the noise)


def _values(k: int) -> np.ndarray:
    return simulate_eval_curve(TABLE1[ROWS[k % 3]], COMPUTE, seed=k)


def _wandb(path, runs, x_per_run=(), blank=(), metric="val/acc"):
    """A W&B chart export: a shared Step column, each run's ``"<run> - val/acc"`` (and __MIN/__MAX) columns; runs in
    ``x_per_run`` also have their own ``"<run> - tokens"``; runs in ``blank`` never logged."""
    head = ["Step"]
    for r in runs:
        head += ([f"{r} - tokens"] if r in x_per_run else []) + [f"{r} - {metric}", f"{r} - {metric}__MIN"]
    lines = [",".join(json.dumps(h) for h in head)]
    for i, c in enumerate(COMPUTE):
        cells = [f"{int(c)}"]
        for k, r in enumerate(runs):
            v = "" if r in blank else f"{_values(k)[i]:.5f}"
            cells += ([f"{int(c) * 7}"] if r in x_per_run else []) + [v, v]
        lines.append(",".join(cells))
    path.write_text("\n".join(lines) + "\n")
    return path


def _run_dir(path, k, rows=None):
    """A scalerl-like run directory: metrics.jsonl with compute/device_hours and val/pass_rate."""
    path.mkdir(parents=True, exist_ok=True)
    ys = _values(k) if rows is None else rows
    (path / "metrics.jsonl").write_text("".join(
        json.dumps({"step": i, "compute/device_hours": float(c), "val/pass_rate": float(v)}) + "\n"
        for i, (c, v) in enumerate(zip(COMPUTE, ys))))
    return path


def _tb_run(path, k, tag="eval/acc"):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(path))
    for i, v in enumerate(_values(k)):
        writer.add_scalar(tag, float(v), i + 1)
    writer.close()
    return path


def _names(out):
    return [line.split("│")[2].strip() for line in out.splitlines() if line.startswith("│ ")]


def test_a_config_yaml_of_another_tool_beside_the_data_is_not_read_as_a_runs(tmp_path, capsys):
    # compare checks whether the runs validate on different tasks by their folders' config.yaml: another tool's
    # config.yaml (a string, or a task that is not a mapping) was an AttributeError traceback
    # (the check runs for the default --y, val/pass_rate)
    sweep = _wandb(tmp_path / "sweep.csv", ["a", "b"], metric="val/pass_rate")
    for text in ("task: gsm8k\n", "task:\n  mix: [1, 2]\n", "[1, 2]\n"):
        (tmp_path / "config.yaml").write_text(text)
        code, out, err = run(["compare", sweep, "--x", "Step"], capsys)
        assert code == 0, err
        assert sorted(_names(out)) == ["a", "b"]


def test_every_folder_of_tensorboard_events_is_a_run_at_any_depth(tmp_path, capsys):
    # runs a/, b/ and c/nested/: c was dropped silently (only the shallowest folders were taken)
    for name, k in (("a", 0), ("b", 1), ("c/nested", 2)):
        _tb_run(tmp_path / "logdir" / name, k)
    runs = load_runs(tmp_path / "logdir", x="step", y="eval/acc")
    assert [short_name(s.source) for s in runs] == ["a", "b", "nested"]
    # events in the logdir itself and in subfolders: each folder a run
    _tb_run(tmp_path / "mixed", 0)
    _tb_run(tmp_path / "mixed" / "sub", 1)
    assert len(load_runs(tmp_path / "mixed", x="step", y="eval/acc")) == 2


def test_runs_are_named_by_their_folders_dots_and_all_and_hf_output_dirs_by_theirs(tmp_path):
    for k, name in enumerate(("Qwen2.5-0.5B-grpo", "lr_1e-3.bs_64")):
        _tb_run(tmp_path / "dots" / name, k)
    assert [short_name(s.source) for s in load_runs(tmp_path / "dots", x="step", y="eval/acc")] == [
        "Qwen2.5-0.5B-grpo", "lr_1e-3.bs_64"]  # the suffix rule cut them at the dot: "Qwen2.5-0"
    for k, name in enumerate(("qwen-lr1e-6", "qwen-lr3e-6")):  # HF: <output_dir>/runs/<date>_<host>/
        _tb_run(tmp_path / "hf" / name / "runs" / f"Nov27_1{k}-00-00_gpu-{k}.cluster", k)
    assert [short_name(s.source) for s in load_runs(tmp_path / "hf", x="step", y="eval/acc")] == [
        "qwen-lr1e-6", "qwen-lr3e-6"]
    # scalerl's own runs: <run>/tb
    _tb_run(tmp_path / "sweep" / "cispo" / "tb", 0)
    assert short_name(str(tmp_path / "sweep" / "cispo" / "tb")) == "cispo"


def test_a_folder_holding_one_run_is_that_run_and_nested_sweeps_are_found(tmp_path):
    one = tmp_path / "one"
    _run_dir(one / "a", 0)
    (one / "a" / "tb").mkdir()
    _tb_run(one / "a" / "tb", 0, tag="val/pass_rate")
    (one / "queued").mkdir()
    (one / "queued" / "config.yaml").write_text("task: {name: arithmetic}\n")
    (one / "notes.txt").write_text("loose file\n")
    (runs,) = [load_runs(one)]
    assert len(runs) == 1 and runs[0].source.endswith("a/metrics.jsonl")  # its metrics.jsonl, not a/tb's events
    nested = tmp_path / "nested"
    for k, name in enumerate(("g0/r0", "g0/r1", "g1/r0")):
        _run_dir(nested / name, k)
    runs = load_runs(nested)
    assert len(runs) == 3
    from scalerl.curves.plot import display_names

    assert display_names([s.source for s in runs]) == ["g0/r0", "r1", "g1/r0"]  # r0 twice: their paths


def test_a_folder_of_trl_runs_mid_training_and_a_linked_logdir(tmp_path):
    for k in range(2):
        for step in (10, 40):
            state = tmp_path / "trl" / f"run{k}" / f"checkpoint-{step}" / "trainer_state.json"
            state.parent.mkdir(parents=True)
            state.write_text(json.dumps({"log_history": [{"step": i + 1, "eval_reward": float(v)}
                                                         for i, v in enumerate(_values(k)[:step])]}))
    runs = load_runs(tmp_path / "trl", x="step", y="eval_reward")
    assert [(short_name(s.source), s.x.size) for s in runs] == [("run0", 40), ("run1", 40)]
    # a logdir whose runs are links (rglob did not follow them: "no event files")
    for k in range(2):
        _tb_run(tmp_path / "real" / f"r{k}", k)
        (tmp_path / "linked").mkdir(exist_ok=True)
        (tmp_path / "linked" / f"r{k}").symlink_to(tmp_path / "real" / f"r{k}", target_is_directory=True)
    (tmp_path / "linked" / "loop").symlink_to(tmp_path / "linked", target_is_directory=True)  # a cycle: once
    assert [short_name(s.source) for s in load_runs(tmp_path / "linked", x="step", y="eval/acc")] == ["r0", "r1"]


def test_runs_of_a_sweep_that_cannot_be_read_or_fitted_are_left_out_with_a_warning(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    _run_dir(sweep / "r0", 0)
    _run_dir(sweep / "r1", 1)
    (sweep / "r2").mkdir()
    (sweep / "r2" / "metrics.jsonl").write_text("")  # queued: its log is empty
    _run_dir(sweep / "r3", 3, rows=np.zeros(COMPUTE.size))  # constant: nothing to fit
    code, out, err = run(["compare", sweep], capsys)
    assert code == 0, err
    assert sorted(_names(out)) == ["r0", "r1"]
    assert "left out 1 of its 4 runs that cannot be read" in err and "r2/metrics.jsonl: the file is empty" in err
    assert "left out 1 run(s) that cannot be fitted" in err and "r3/metrics.jsonl" in err
    # a path given on its own is an error as before
    code, out, err = run(["compare", sweep / "r0", sweep / "r3"], capsys)
    assert code == 2 and "constant" in err and "\n" not in err.strip()
    # W&B: a run that never logged is left out the same way
    code, out, err = run(["compare", _wandb(tmp_path / "w.csv", ["a", "b", "c"], blank=("b",)), "--x", "Step",
                          "--y", "val/acc"], capsys)
    assert code == 0 and sorted(_names(out)) == ["a", "c"] and "w.csv [b]: no row has both" in err


def test_a_run_is_never_read_against_another_runs_x_column(tmp_path, capsys):
    # A has its own "A - tokens"; B has none and the file has no shared "tokens": B was fitted against A's tokens
    w = _wandb(tmp_path / "w.csv", ["A", "B"], x_per_run=("A",))
    runs = load_runs(w, x="tokens", y="val/acc")
    assert [short_name(s.source) for s in runs] == ["A"]
    assert np.array_equal(runs[0].x, COMPUTE.astype(int) * 7)
    assert any("no column 'B - tokens', and the file has no column 'tokens'" in n for n in runs[0].notes)
    # with the shared Step both are read
    assert len(load_runs(w, x="Step", y="val/acc")) == 2


def test_two_runs_of_one_display_name_are_both_read(tmp_path, capsys):
    # W&B display names need not be unique: the header repeats, and reading by name kept the last column only
    w = tmp_path / "dup.csv"
    w.write_text('"Step","grpo - val/acc","grpo - val/acc","other - val/acc"\n'
                 + "".join(f"{int(c)},{_values(0)[i]:.5f},{_values(1)[i]:.5f},{_values(2)[i]:.5f}\n"
                           for i, c in enumerate(COMPUTE)))
    runs = load_runs(w, x="Step", y="val/acc")
    assert [short_name(s.source) for s in runs] == ["grpo", "grpo (2)", "other"]
    assert np.allclose(runs[0].y, np.round(_values(0), 5)) and np.allclose(runs[1].y, np.round(_values(1), 5))
    assert any("repeat" in n for n in runs[0].notes)


def test_run_names_keep_brackets_and_dashes_and_alike_names_from_two_files_are_told_apart(tmp_path, capsys):
    w = _wandb(tmp_path / "br.csv", ["grpo [seed 1]", "lr=1e-3 - bs 64", "run]1"])
    assert [short_name(s.source) for s in load_runs(w, x="Step", y="val/acc")] == [
        "grpo [seed 1]", "lr=1e-3 - bs 64", "run]1"]
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    a = _wandb(tmp_path / "a" / "sweep.csv", ["runA", "runB"])
    b = _wandb(tmp_path / "b" / "sweep.csv", ["runA", "runC"])
    code, out, err = run(["compare", a, b, "--x", "Step", "--y", "val/acc"], capsys)
    assert code == 0, err
    assert sorted(_names(out)) == ["a/sweep.csv [runA]", "b/sweep.csv [runA]", "runB", "runC"]


def test_compare_refuses_a_run_read_twice(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    _run_dir(sweep / "r0", 0)
    _run_dir(sweep / "r1", 1)
    (tmp_path / "link").symlink_to(sweep / "r0", target_is_directory=True)
    for paths in ([sweep, sweep / "r0"], [tmp_path / "link", sweep / "r0"], [sweep, sweep]):
        code, out, err = run(["compare", *paths], capsys)
        assert code == 2 and "compare different runs" in err and "\n" not in err.strip()
    w = _wandb(tmp_path / "w.csv", ["a", "b"])
    code, out, err = run(["compare", w, tmp_path / "w.csv", "--x", "Step", "--y", "val/acc"], capsys)
    assert code == 2 and "compare different runs" in err


def test_the_forecast_line_and_the_figure_name_the_metric_not_the_runs_column(tmp_path, capsys):
    w = _wandb(tmp_path / "w.csv", ["a", "b"])
    runs = load_runs(w, x="Step", y="val/acc")
    assert {s.y_name for s in runs} == {"val/acc"} and {s.x_name for s in runs} == {"Step"}
    code, out, err = run(["fit", w, "--x", "Step", "--y", "val/acc"], capsys)
    assert "a predicts val/acc at" in out and "a - val/acc" not in out


def test_y_scale_is_recorded_named_in_its_errors_and_kept_to_a_sane_range(tmp_path, capsys):
    pct = tmp_path / "pct.csv"
    pct.write_text("Step,acc\n" + "".join(f"{int(c)},{100 * v:.3f}\n" for c, v in zip(COMPUTE, _values(0))))
    code, out, err = run(["fit", pct, "--x", "Step", "--y", "acc", "--y-scale", "0.01", "--json"], capsys)
    assert code == 0 and json.loads(out)["y_scale"] == 0.01
    code, out, err = run(["compare", pct, _wandb(tmp_path / "w.csv", ["a"]), "--x", "Step", "--y", "acc",
                          "--y-scale", "0.01", "--json"], capsys)
    assert code == 2  # w.csv has no 'acc'
    code, out, err = run(["fit", pct, "--x", "Step", "--y", "acc", "--y-scale", "0.1"], capsys)
    assert code == 2 and "after --y-scale 0.1" in err and "read as percentages" not in err  # already scaled
    for bad in ("1e-7", "1e7"):
        code, out, err = run(["fit", pct, "--x", "Step", "--y", "acc", "--y-scale", bad], capsys)
        assert code == 2 and "--y-scale must be" in err
    # a reward of 1.05 (a bonus) is not told it looks like a percentage
    bonus = tmp_path / "bonus.csv"
    bonus.write_text("Step,r\n" + "".join(f"{int(c)},{1.05 * v / max(_values(0)):.4f}\n"
                                           for c, v in zip(COMPUTE, _values(0))))
    code, out, err = run(["fit", bonus, "--x", "Step", "--y", "r"], capsys)
    assert code == 2 and "outside [0, 1]" in err and "percentages" not in err


def test_print_table_gives_the_console_its_width_back():
    from rich.console import Console
    from rich.table import Table

    from scalerl.commands import add_row, print_table

    table = Table()
    for col in ("A", "95% interval", "held-out |err| mean / max"):
        table.add_column(col, no_wrap=True)
    add_row(table, "≥ 0.173", "[0.173, open]", "0.0136 / 0.0412 (12 points)")
    console = Console(file=io.StringIO(), width=30, force_terminal=True, color_system=None)
    print_table(table, console)
    assert console.width == 30  # the lines after the table (the forecast lines) wrap at the terminal again


def test_a_path_that_is_no_run_and_holds_none_is_still_named(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="a directory without metrics.jsonl"):
        load_runs(tmp_path / "empty")
