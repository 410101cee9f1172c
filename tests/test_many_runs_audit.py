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


def _trainer_state(path, k, steps, key="eval/acc"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"log_history": [{"step": i + 1, key: float(v)} for i, v in enumerate(_values(k)[:steps])]}))


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
    # a run's own events with the subfolders add_scalars writes beside them (loss_train/, loss_val/): one run, no
    # warning (each subfolder was read as a run of its own, and left out for lacking the column)
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(tmp_path / "scalars" / "run1"))
    for i, v in enumerate(_values(0)):
        writer.add_scalar("eval/acc", float(v), i + 1)
        writer.add_scalars("loss", {"train": 1.0 / (i + 1), "val": 1.2 / (i + 1)}, i + 1)
    writer.close()
    for path in (tmp_path / "scalars", tmp_path / "scalars" / "run1"):
        runs = load_runs(path, x="step", y="eval/acc")
        assert len(runs) == 1 and not runs[0].notes and runs[0].x.size == COMPUTE.size


def test_runs_are_named_by_their_folders_dots_and_all_and_hf_output_dirs_by_theirs(tmp_path):
    for k, name in enumerate(("Qwen2.5-0.5B-grpo", "lr_1e-3.bs_64")):
        _tb_run(tmp_path / "dots" / name, k)
    assert [short_name(s.source) for s in load_runs(tmp_path / "dots", x="step", y="eval/acc")] == [
        "Qwen2.5-0.5B-grpo", "lr_1e-3.bs_64"]  # the suffix rule cut them at the dot: "Qwen2.5-0"
    for k, name in enumerate(("qwen-lr1e-6", "qwen-lr3e-6")):  # HF: <output_dir>/runs/<date>_<host>/, checkpoints
        _tb_run(tmp_path / "hf" / name / "runs" / f"Nov27_1{k}-00-00_gpu-{k}.cluster", k)
        _trainer_state(tmp_path / "hf" / name / "checkpoint-10" / "trainer_state.json", k, 10)
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


# ---------------------------------------------------------------------------------------------- second review


def test_a_run_left_out_does_not_move_the_cutoff_the_others_share(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    for k in range(3):
        _run_dir(sweep / f"run{k}", k)
    crashed = sweep / "run_crashed"
    crashed.mkdir()
    (crashed / "metrics.jsonl").write_text("".join(  # three evaluations, the last at compute 100: it fixed the cutoff
        json.dumps({"step": i, "compute/device_hours": c, "val/pass_rate": 0.2}) + "\n" for i, c in enumerate((0, 50, 100))))
    for until in ([], ["--fit-until", "0.5"]):
        code, out, err = run(["compare", sweep, *until, "--json"], capsys)
        assert code == 0, err
        folder = json.loads(out)
        code, out, err = run(["compare", *(sweep / f"run{k}" for k in range(3)), *until, "--json"], capsys)
        alone = json.loads(out)
        assert [(f["source"], f["fit_window"], f["A"]) for f in folder["fits"]] == [
            (f["source"], f["fit_window"], f["A"]) for f in alone["fits"]]
        assert any("left out 1 run(s) that cannot be fitted" in w for w in folder["warnings"])


def test_runs_left_out_are_named_when_too_few_are_left_to_compare(tmp_path, capsys):
    pct = tmp_path / "pct.csv"  # two runs in percent, one in fractions: only one can be fitted with bounds on
    pct.write_text('"Step","a - acc","b - acc","c - acc"\n' + "".join(
        f"{int(c)},{100 * _values(0)[i]:.3f},{100 * _values(1)[i]:.3f},{_values(2)[i]:.5f}\n" for i, c in enumerate(COMPUTE)))
    code, out, err = run(["compare", pct, "--x", "Step", "--y", "acc"], capsys)
    assert code == 2 and "at least two runs" in err and "--y-scale 0.01" in err and "\n" not in err.strip()
    code, out, err = run(["fit", pct, "--x", "Step", "--y", "acc", "--json"], capsys)
    doc = json.loads(out)
    assert len(doc["fits"]) == 1 and any("cannot be fitted" in w for w in doc["warnings"])  # top level, not a run's


def test_one_run_read_through_its_log_and_its_events_is_the_same_run(tmp_path, capsys):
    out_dir = tmp_path / "trl" / "qwen-grpo-a"
    _tb_run(out_dir / "runs" / "Nov27_10-00-00_host", 0)
    _trainer_state(out_dir / "checkpoint-40" / "trainer_state.json", 0, 40)
    _tb_run(tmp_path / "trl" / "qwen-grpo-b" / "runs" / "Nov27_11-00-00_host", 1)
    _trainer_state(tmp_path / "trl" / "qwen-grpo-b" / "checkpoint-40" / "trainer_state.json", 1, 40)
    events = next((out_dir / "runs" / "Nov27_10-00-00_host").iterdir())
    for second in (out_dir / "checkpoint-40" / "trainer_state.json", events, out_dir / "runs"):
        code, out, err = run(["compare", tmp_path / "trl", second, "--x", "step", "--y", "eval/acc"], capsys)
        assert code == 2 and "compare different runs" in err, (second, err)


def test_pytorch_runs_folders_and_a_relaunched_hf_run_are_told_apart(tmp_path, capsys):
    for k, date in enumerate(("Nov27_10-00-00_host", "Nov27_11-00-00_host", "Nov28_09-00-00_host")):
        _tb_run(tmp_path / "proj" / "runs" / date, k)  # SummaryWriter()'s default: runs/<date>_<host>
    for where in (tmp_path / "proj" / "runs", tmp_path / "proj"):
        code, out, err = run(["compare", where, "--x", "step", "--y", "eval/acc"], capsys)
        assert code == 0, err
        assert sorted(_names(out)) == ["Nov27_10-00-00_host", "Nov27_11-00-00_host", "Nov28_09-00-00_host"]


def test_a_relaunched_output_dir_mid_training_reads_its_latest_checkpoint(tmp_path):
    out_dir = tmp_path / "qwen-grpo-c"  # two launches: two runs/<date>/ folders, and the checkpoints
    _tb_run(out_dir / "runs" / "Nov27_10-00-00_host", 0)
    _tb_run(out_dir / "runs" / "Nov27_12-00-00_host", 1)
    _trainer_state(out_dir / "checkpoint-400" / "trainer_state.json", 2, 30)
    for path in (out_dir, tmp_path):
        (series,) = load_runs(path, x="step", y="eval/acc")
        assert series.source.endswith("checkpoint-400/trainer_state.json") and series.x.size == 30


def test_a_sweep_run_that_failed_before_its_log_is_named_not_dropped(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    for k in range(2):
        _run_dir(sweep / f"run{k}", k)
    (sweep / "run_failed").mkdir()
    (sweep / "run_failed" / "config.yaml").write_text("task: {name: arithmetic}\n")
    (sweep / "run_failed" / "sweep_error.log").write_text("Traceback ...\nRuntimeError: out of memory\n")
    code, out, err = run(["compare", sweep], capsys)
    assert code == 0 and sorted(_names(out)) == ["run0", "run1"]
    assert "left out 1 of its 3 runs" in err and "run_failed" in err


def test_a_repeated_name_never_takes_a_name_another_run_has(tmp_path):
    w = tmp_path / "dup2.csv"
    w.write_text('"Step","grpo - acc","grpo - acc","grpo (2) - acc"\n' + "".join(
        f"{int(c)},{_values(0)[i]:.5f},{_values(1)[i]:.5f},{_values(2)[i]:.5f}\n" for i, c in enumerate(COMPUTE)))
    runs = load_runs(w, x="Step", y="acc")
    assert [short_name(s.source) for s in runs] == ["grpo", "grpo (3)", "grpo (2)"]
    assert [s.y[0] for s in runs] == pytest.approx([round(_values(k)[0], 5) for k in (0, 1, 2)])


def test_names_with_dollars_draw_as_written_and_a_sweep_of_sixty_gets_sixty_colours(tmp_path, capsys):
    from scalerl.curves.plot import _colors

    w = _wandb(tmp_path / "dollar.csv", ["cost $x^", r"gain $\foo{$", "budget $10$"])
    code, out, err = run(["compare", w, "--x", "Step", "--y", "val/acc", "--plot", tmp_path / "d.png",
                          "--slope-plot", tmp_path / "s.png"], capsys)
    assert code == 0, err  # mathtext raised ParseFatalException (a traceback) on "\foo"
    assert (tmp_path / "d.png").stat().st_size > 0 and (tmp_path / "s.png").stat().st_size > 0
    assert len({tuple(c) for c in _colors(60)}) == 60


def test_a_wandb_export_without_a_known_extension_keeps_its_run_names(tmp_path):
    w = _wandb(tmp_path / "export", ["grpo.v2 [a] - b", "grpo lr=1e-6 (seed 1)"])
    assert [short_name(s.source) for s in load_runs(w, x="Step", y="val/acc")] == [
        "grpo.v2 [a] - b", "grpo lr=1e-6 (seed 1)"]


def test_names_do_not_depend_on_the_working_directory(tmp_path, monkeypatch):
    run_dir = _run_dir(tmp_path / "qwen-grpo-a", 0)
    monkeypatch.chdir(run_dir)
    assert short_name(load_runs(".")[0].source) == "qwen-grpo-a"
    _tb_run(tmp_path / "tb_run" / "runs" / "Nov27_10-00-00_host", 0)
    monkeypatch.chdir(tmp_path / "tb_run" / "runs" / "Nov27_10-00-00_host")
    assert short_name(load_runs(".", x="step", y="eval/acc")[0].source) == "Nov27_10-00-00_host"


def test_a_wide_table_shows_whole_names_once_it_is_widened(tmp_path):
    from rich.console import Console
    from rich.table import Table

    from scalerl.commands import add_row, print_table

    table = Table()
    table.add_column("run", overflow="fold")
    for col in ("A", "95% interval", "held-out |err| mean / max", "beats ruler"):
        table.add_column(col, no_wrap=True)
    name = "grpo_qwen2.5-7b_lr1e-6_bs512_seed2_49"
    add_row(table, name, "≥ 0.173", "[0.173, open]", "0.0136 / 0.0412 (12 points)", "yes")
    console = Console(file=io.StringIO(), width=60, force_terminal=True, color_system=None)
    print_table(table, console)
    assert name in console.file.getvalue()  # it was folded into 8-character pieces


def test_the_api_compares_as_the_cli_does(tmp_path):
    import warnings

    from scalerl import api

    sweep = tmp_path / "sweep"
    _run_dir(sweep / "long", 0)
    _run_dir(sweep / "short", 1, rows=_values(1)[:20])
    runs = api.load_all(sweep)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ranked = api.compare(runs).ranked
        with pytest.raises(UserError, match="compare different runs"):
            api.compare([sweep / "long", sweep / "long"])
    code_fits = {r.fit.source: r.fit.fit_window for r in ranked}
    assert len({w[0] for w in code_fits.values()}) == 1  # one shared early cutoff, as scalerl compare cuts
    with pytest.raises(UserError, match="holds 2 runs .*load_runs"):
        api.load(sweep)


# ---------------------------------------------------------------------------------------------- third review: what
# the several-runs work must not change in reading one run


def test_the_trainers_own_figure_keeps_its_label_and_dotted_run_folders_theirs():
    # the run's curve.png and the TRL callback's name their source "metrics.jsonl" / "trainer_state.json": the
    # label stays "metrics" (it became the name of the folder the trainer was started from)
    assert short_name("metrics.jsonl") == "metrics" and short_name("trainer_state.json") == "trainer_state"
    assert short_name("my.run/metrics.jsonl") == "my.run"  # a run's folder, even where it does not exist here


def test_an_output_dir_logging_its_events_beside_its_checkpoints_reads_the_events(tmp_path):
    out = tmp_path / "hfflat"  # logging_dir=output_dir: events in the output dir itself, checkpoints beside them
    _tb_run(out, 0)
    _trainer_state(out / "checkpoint-10" / "trainer_state.json", 0, 10, key="eval_accuracy")
    (series,) = load_runs(out, x="step", y="eval/acc")
    assert series.x.size == COMPUTE.size  # all the events, not the checkpoint's 10 entries


def test_event_files_given_one_by_one_are_runs_and_one_folder_with_its_file_is_one(tmp_path, capsys):
    from torch.utils.tensorboard import SummaryWriter

    flat = tmp_path / "flat"
    for k in range(2):
        writer = SummaryWriter(log_dir=str(flat), filename_suffix=f".run{k}")
        for i, v in enumerate(_values(k)):
            writer.add_scalar("eval/acc", float(v), i + 1)
        writer.close()
    files = sorted(flat.iterdir())
    code, out, err = run(["compare", *files, "--x", "step", "--y", "eval/acc"], capsys)
    assert code == 0, err
    code, out, err = run(["compare", flat, files[0], "--x", "step", "--y", "eval/acc"], capsys)
    assert code == 2 and "compare different runs" in err


def test_the_api_compares_series_of_one_files_columns(tmp_path):
    import warnings

    from scalerl import api

    w = _wandb(tmp_path / "chart.csv", ["a", "b"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ranked = api.compare([api.load(w, x="Step", y="a - val/acc"), api.load(w, x="Step", y="b - val/acc")]).ranked
    assert len(ranked) == 2


def test_repeated_plain_columns_read_as_before_and_a_one_run_file_that_cannot_be_fitted_is_an_error(tmp_path, capsys):
    dup = tmp_path / "dup.csv"  # not a W&B run column: the last of the repeats is read, as csv.DictReader read it
    dup.write_text("Step,val/pass_rate,val/pass_rate,,\n" + "".join(
        f"{int(c)},{_values(0)[i]:.5f},{_values(1)[i]:.5f},,\n" for i, c in enumerate(COMPUTE)))
    (series,) = load_runs(dup, x="Step")
    assert series.y.tolist() == pytest.approx(np.round(_values(1), 5).tolist()) and not series.notes
    both = tmp_path / "both.csv"  # its own y column (constant: nothing to fit) and one run's "<run> - y"
    both.write_text('"Step","val/pass_rate","a - val/pass_rate"\n' + "".join(
        f"{int(c)},0.5,{_values(0)[i]:.5f}\n" for i, c in enumerate(COMPUTE)))
    code, out, err = run(["fit", both, "--x", "Step"], capsys)
    assert code == 2 and "constant" in err  # the one run it reads: an error, not a warning and exit 0
