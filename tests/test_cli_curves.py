"""``scalerl fit`` and ``scalerl compare`` end to end, in-process: JSON contract (docs/architecture.md), figures, and every
bad input as one line on stderr with exit code 2, no traceback and no output file."""

import json
import re

import numpy as np
import pytest

from scalerl.cli import main
from scalerl.curves.synthetic import TABLE1, simulate_eval_curve


def run(argv, capsys):
    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def _csv(path, row="scalerl-8b", seed=0, n=100):
    P = TABLE1[row]
    c = np.concatenate([[0.0], np.linspace(160, 16000, n)])
    y = simulate_eval_curve(P, c, seed=seed)
    path.write_text("step,compute/device_hours,val/pass_rate\n" + "".join(
        f"{i * 100},{ci:.1f},{yi:.5f}\n" for i, (ci, yi) in enumerate(zip(c, y))))
    return path


def test_fit_json_contract_and_plot(tmp_path, capsys):
    src = _csv(tmp_path / "run.csv")
    png = tmp_path / "curve.png"
    code, out, err = run(["fit", src, "--fit-from", 1500, "--fit-until", "0.5", "--predict-at", "16000,32000",
                          "--target", 0.55, "--json", "--plot", png], capsys)
    assert code == 0, err
    d = json.loads(out)
    (f,) = d["fits"]
    assert set(f) >= {"source", "x", "y", "method", "R0", "A", "B", "Cmid", "A_ci", "identified", "n_points",
                      "fit_window", "rmse", "predictions", "heldout", "target"}
    assert f["source"] == str(src) and f["x"] == "compute/device_hours" and f["y"] == "val/pass_rate"
    assert f["method"] == "vp" and f["fit_window"] == [1600.0, 8000.0] and f["n_points"] == 41
    assert [p["x"] for p in f["predictions"]] == [16000.0, 32000.0]
    assert f["heldout"]["n"] == 50 and f["heldout"]["mean_abs_err"] < 0.05
    assert f["target"]["reachable"] and len(f["A_ci"]) == 2
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_fit_table_paper_method_and_default_predictions(tmp_path, capsys):
    src = _csv(tmp_path / "run.csv")
    code, out, err = run(["fit", src, "--fit-from", 1500, "--method", "paper"], capsys)
    assert code == 0, err
    assert "method paper" in out and "run" in out and "predicts val/pass_rate at 16,000" in out
    code, out, _ = run(["fit", src, "--json"], capsys)
    assert [p["x"] for p in json.loads(out)["fits"][0]["predictions"]] == [16000.0, 32000.0]  # end, 2× end


def test_fit_and_compare_tables_show_an_unidentified_A_as_a_bound(tmp_path, capsys):
    """A curve cut before Cmid: the fit table and the compare table print ``≥ lo`` for A, never the search's
    bound as a value; the identified curve beside it keeps its estimate."""
    full, early = _csv(tmp_path / "full.csv"), tmp_path / "early.csv"
    early.write_text("".join(full.read_text().splitlines(keepends=True)[:12]))  # compute <= ~1,600: before Cmid
    code, out, err = run(["fit", early, "--json"], capsys)
    (f,) = json.loads(out)["fits"]
    assert code == 0 and not f["identified"], err
    bound = f"≥ {f['A_ci'][0]:.3f}"
    for argv in (["fit", early], ["compare", full, early]):
        code, out, err = run(argv, capsys)
        assert code == 0, err
        row = next(line for line in out.splitlines() if "early" in line)
        assert bound in row and f"{f['A']:.3f}" not in row.replace(f"{f['A_ci'][0]:.3f}", ""), row


def test_no_bounds_for_plus_minus_one_rewards(tmp_path, capsys):
    src = _csv(tmp_path / "run.csv")
    lines = src.read_text().splitlines()
    pm = [lines[0]] + [f"{a},{b},{2 * float(c) - 1:.5f}" for a, b, c in (ln.split(",") for ln in lines[1:])]
    (tmp_path / "pm.csv").write_text("\n".join(pm) + "\n")
    code, _, err = run(["fit", tmp_path / "pm.csv"], capsys)
    assert code == 2 and "outside [0, 1]" in err and "--no-bounds" in err
    code, out, err = run(["fit", tmp_path / "pm.csv", "--no-bounds", "--fit-from", 1500, "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["fits"][0]["A"] == pytest.approx(2 * 0.61 - 1, abs=0.05)


def test_compare_ranks_and_draws(tmp_path, capsys):
    a = _csv(tmp_path / "a.csv", "scalerl-8b", 0)
    b = _csv(tmp_path / "b.csv", "scalerl-bs512", 1)
    c = _csv(tmp_path / "c.csv", "math+code-math", 2)
    code, out, err = run(["compare", a, b, c, "--fit-from", 1500, "--json", "--plot", tmp_path / "o.png",
                          "--slope-plot", tmp_path / "s.png"], capsys)
    assert code == 0, err
    d = json.loads(out)
    assert [r["rank"] for r in d["ranking"]] == [1, 2, 3] and d["margin"] == 0.02
    assert (tmp_path / "o.png").exists() and (tmp_path / "s.png").exists()
    code, out, err = run(["compare", a, b, "--fit-from", 1500], capsys)
    assert code == 0 and "Ranking" in out


def test_compare_refuses_the_same_run_given_twice(tmp_path, capsys):
    a = _csv(tmp_path / "a.csv", "scalerl-8b", 0)
    b = _csv(tmp_path / "b.csv", "scalerl-bs512", 1)
    code, out, err = run(["compare", a, b, a], capsys)
    assert code == 2 and err.strip() == f"error: {a} is given twice; compare different runs"
    (tmp_path / "link.csv").symlink_to(a)  # another name for the same file
    code, out, err = run(["compare", a, tmp_path / "link.csv"], capsys)
    assert code == 2 and "are the same run" in err and len(err.strip().splitlines()) == 1 and out == ""


def test_dropped_rows_are_a_warning_not_an_error(tmp_path, capsys):
    src = _csv(tmp_path / "run.csv")
    lines = src.read_text().splitlines()
    lines[5] = "400,640.0,oops"
    lines[9] = "800,1280.0,NaN"
    src.write_text("\n".join(lines) + "\n")
    code, out, err = run(["fit", src, "--json", "--fit-from", 0], capsys)  # from the first evaluation
    assert code == 0
    assert "dropped 2 row(s)" in err and "6, 10" in err
    assert json.loads(out)["fits"][0]["n_points"] == 98


def _bad(tmp_path):
    t = tmp_path
    (t / "empty.csv").write_text("")
    (t / "text.csv").write_text("c,r\n1,x\n2,y\n")
    (t / "few.csv").write_text("c,r\n0,0.1\n1,0.2\n2,0.3\n")
    (t / "back.csv").write_text("c,r\n0,0.1\n1,0.2\n3,0.3\n2,0.35\n4,0.4\n")
    (t / "flat.csv").write_text("c,r\n1,0.4\n2,0.4\n3,0.4\n4,0.4\n5,0.4\n")
    (t / "range.csv").write_text("c,r\n1,-1\n2,-0.5\n3,0.2\n4,0.6\n5,0.8\n")
    ok = _csv(t / "ok.csv")
    return [
        (["fit", t / "missing.csv"], "no such file"),
        (["fit", t / "empty.csv"], "empty"),
        (["fit", ok, "--y", "val/acc"], "columns there are: step, compute/device_hours, val/pass_rate"),
        (["fit", t / "text.csv", "--x", "c", "--y", "r"], "rows 2, 3 hold non-numbers"),
        (["fit", t / "few.csv", "--x", "c", "--y", "r"], "3 free parameters"),
        (["fit", t / "back.csv", "--x", "c", "--y", "r"], "row 5 has 2 after 3"),
        (["fit", t / "flat.csv", "--x", "c", "--y", "r"], "constant"),
        (["fit", t / "range.csv", "--x", "c", "--y", "r"], "outside [0, 1]"),
        (["fit", ok, "--fit-until", "abc"], "--fit-until 'abc' is not a number"),
        (["fit", ok, "--method", "magic"], "unknown fit method 'magic'; choose one of: paper, paper-data, vp"),
        (["fit", ok, "--fit-from", 15900], "free parameters"),
        (["compare", ok], "at least two runs"),
    ]


def test_bad_inputs_exit_2_with_one_line_and_no_output(tmp_path, capsys):
    for argv, needle in _bad(tmp_path):
        out_png = tmp_path / "never.png"
        code, out, err = run(argv + ["--plot", out_png], capsys)
        assert code == 2, (argv, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (argv, err)
        assert needle in lines[0], (argv, lines[0])
        assert "Traceback" not in err and out == ""
        assert not out_png.exists()
    code, _, err = run(["fit", tmp_path / "ok.csv", "--plot", tmp_path / "x.gif"], capsys)
    assert code == 2 and ".png, .svg or .pdf" in err and not (tmp_path / "x.gif").exists()


def test_an_unreliable_forecast_says_what_it_does(tmp_path, capsys):
    """A forecast flagged as leaving anything the window supports was printed as "holding the current level" with
    the curve's number beside it (0.631 on a run that never passed 0.30). Such a prediction is marked where it is
    printed, and a warning names it; a run that falls is held, and says so."""
    rising = tmp_path / "rising.csv"  # a published AIME24 curve (bench/curves/holdout4, ToRL), as fractions
    rising.write_text("step,value\n0,0.100\n100,0.133\n140,0.167\n160,0.300\n200,0.267\n220,0.300\n250,0.200\n"
                      "260,0.233\n")
    code, out, err = run(["fit", str(rising), "--x", "step", "--y", "value", "--fit-until", "0.75"], capsys)
    line = " ".join(out.split())
    assert code == 0 and "at 260: 0.631 [0.319, 0.944] (beyond what the data support)" in line
    assert "the forecast 0.631 at 260 is outside anything the window supports" in err
    falling = tmp_path / "falling.csv"
    y = [0.1, 0.3, 0.5, 0.6, 0.65, 0.66, 0.5, 0.4, 0.3, 0.25, 0.2, 0.2]
    falling.write_text("step,value\n" + "".join(f"{10 * i},{v}\n" for i, v in enumerate(y)))
    code, out, err = run(["fit", str(falling), "--x", "step", "--y", "value"], capsys)
    text = " ".join(out.split())
    assert "Eq. 1 cannot fall" in text and "the forecast holds the current level" in text


def test_no_table_cell_is_cut_however_long_the_run_names(tmp_path, capsys):
    """The fit and compare tables were printed 150 columns wide whatever they held: with a published run's long file
    name every column shrank and the values themselves were cut ("≥ 0.…" for A). Now a name folds onto more lines
    and the console widens to the table's narrowest layout (scalerl.commands.print_table)."""
    a = _csv(tmp_path / ("qwen25-math-15b_grpo-lr-5e-6-full-beforefix_seed42_gsm8k_eval" * 2 + ".csv"))
    b = _csv(tmp_path / ("qwen25-math-15b_reinforce-nobaseline_lr3e-5_math_validation" * 2 + ".csv"), seed=1)
    for cmd in (["fit", a, b, "--fit-until", "0.5"], ["compare", a, b]):
        code, out, err = run([*cmd, "--fit-from", 1500], capsys)
        assert code == 0, err
        assert "…" not in out
        fits = [line for line in out.splitlines() if line.startswith("│") and "qwen25" in line]
        # each row's A and interval are whole: "≥ 0.549", "[0.549, open]" (they were "≥ 0.…" and "[0.5…")
        assert len(fits) == 2 and all(re.search(r"│ (≥ )?0\.\d{3} │ \[0\.\d{3}, (open|0\.\d{3})\] │", f) for f in fits)


def test_print_table_widens_a_terminal_rather_than_cut_a_value():
    import io

    from rich.console import Console
    from rich.table import Table

    from scalerl.commands import add_row, print_table

    table = Table()
    table.add_column("run", overflow="fold")
    for col in ("A", "95% interval", "held-out |err| mean / max"):
        table.add_column(col, no_wrap=True)
    add_row(table, "a-run-name-without-spaces-" * 3, "≥ 0.173", "[0.173, open]", "0.0136 / 0.0412 (12 points)")
    console = Console(file=io.StringIO(), width=40, force_terminal=True, color_system=None)
    print_table(table, console)
    text = console.file.getvalue()
    assert "…" not in text and "[0.173, open]" in text and "0.0136 / 0.0412 (12 points)" in text


def test_an_accuracy_logged_in_percent_is_named_and_read_with_y_scale(tmp_path, capsys):
    """Many published logs print accuracy in percent (0-100). The bounds error says how to read them, and
    --y-scale 0.01 fits exactly what the same curve in fractions fits."""
    frac = _csv(tmp_path / "frac.csv")
    lines = frac.read_text().splitlines()
    pct = tmp_path / "pct.csv"
    pct.write_text("\n".join([lines[0], *(",".join([*l.split(",")[:2], f"{100 * float(l.split(',')[2]):.3f}"])
                                          for l in lines[1:])]) + "\n")
    code, out, err = run(["fit", pct, "--fit-from", 1500], capsys)
    assert code == 2 and "--y-scale 0.01" in err and "\n" not in err.strip() and "Traceback" not in err
    code, out, _ = run(["fit", pct, "--fit-from", 1500, "--y-scale", "0.01", "--json"], capsys)
    scaled = json.loads(out)["fits"][0]
    code, out, _ = run(["fit", frac, "--fit-from", 1500, "--json"], capsys)
    plain = json.loads(out)["fits"][0]
    assert scaled["A"] == pytest.approx(plain["A"], abs=2e-4) and scaled["B"] == pytest.approx(plain["B"], rel=0.01)
    for bad in ("0", "-1", "nan", "abc"):
        code, out, err = run(["compare", pct, frac, "--y-scale", bad], capsys)
        assert code == 2 and "--y-scale" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def _sweep_export(path, per_run_step=False):
    """A W&B chart export of a two-run sweep: a shared Step column, each run's metric with its __MIN/__MAX columns,
    blank where the run did not log (run a every 20 steps, run b every 10), as W&B writes them."""
    runs = {"lr1e-6": (0.60, 100.0, 20), "lr3e-6": (0.68, 70.0, 10)}
    head = ["Step"] + [f"{r} - {c}" for r in runs for c in
                       ((["_step"] if per_run_step else []) + ["val/acc", "val/acc__MIN", "val/acc__MAX"])]
    lines = [",".join(f'"{h}"' for h in head)]
    for step in range(0, 410, 10):
        cells = [str(step)]
        for A, c, every in runs.values():
            v = f"{0.3 + (A - 0.3) * (1 - np.exp(-step / c)):.5f}" if step % every == 0 else ""
            cells += ([str(step) if v else ""] if per_run_step else []) + [v, v, v]
        lines.append(",".join(cells))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_sweeps_wandb_export_gives_each_of_its_runs_to_fit_and_compare(tmp_path, capsys):
    """One W&B chart export holds the sweep's runs, one "<run> - val/acc" column each: compare ranks them from the
    one file (it was refused as "given twice", and --y val/acc named no single column), each named by its run;
    fit fits each; --y "<run> - val/acc" still takes one run."""
    sweep = _sweep_export(tmp_path / "sweep.csv")
    code, out, err = run(["compare", sweep, "--x", "Step", "--y", "val/acc", "--json"], capsys)
    assert code == 0, err
    ranked = json.loads(out)["ranking"]
    assert [r["source"] for r in ranked] == [f"{sweep} [lr3e-6]", f"{sweep} [lr1e-6]"]
    code, out, err = run(["fit", sweep, "--x", "Step", "--y", "val/acc", "--fit-from", 0, "--json"], capsys)
    fits = json.loads(out)["fits"]  # every point after step 0 (which fixes R0): 20 of run a, 40 of run b
    assert [f["n_points"] for f in fits] == [20, 40]
    for f, name in zip(fits, ("lr1e-6", "lr3e-6")):  # each is what --y "<run> - val/acc" fits, that run alone
        code, out, err = run(["fit", sweep, "--x", "Step", "--y", f"{name} - val/acc", "--fit-from", 0, "--json"],
                             capsys)
        alone = json.loads(out)["fits"]
        assert len(alone) == 1 and (alone[0]["A"], alone[0]["B"]) == (f["A"], f["B"])
    assert fits[0]["A"] < fits[1]["A"]
    code, out, err = run(["compare", sweep, "--x", "Step", "--y", "val/acc"], capsys)
    assert code == 0 and "│ lr3e-6" in out and "│ lr1e-6" in out
    # each run's own x column ("<run> - _step") where the export has one
    per_run = _sweep_export(tmp_path / "per_run.csv", per_run_step=True)
    code, out, err = run(["fit", per_run, "--x", "_step", "--y", "val/acc", "--fit-from", 0, "--json"], capsys)
    assert code == 0, err
    assert [f["n_points"] for f in json.loads(out)["fits"]] == [20, 40]
    # one run in a file is still not a comparison
    one = tmp_path / "one.csv"
    one.write_text('"Step","lr1e-6 - val/acc"\n10,0.4\n20,0.5\n30,0.55\n40,0.57\n50,0.58\n60,0.585\n70,0.59\n')
    code, out, err = run(["compare", one, "--x", "Step", "--y", "val/acc"], capsys)
    assert code == 2 and "at least two runs" in err


def test_api_load_all_gives_the_sweeps_runs_and_compare_ranks_them(tmp_path):
    import warnings

    from scalerl import api

    sweep = _sweep_export(tmp_path / "sweep.csv")
    runs = api.load_all(sweep, x="Step", y="val/acc")
    assert [s.source for s in runs] == [f"{sweep} [lr1e-6]", f"{sweep} [lr3e-6]"]
    assert [s.x.size for s in runs] == [21, 41]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ranked = api.compare(runs).ranked
    assert [r.fit.source for r in ranked] == [runs[1].source, runs[0].source]
    assert len(api.load_all(_csv(tmp_path / "one.csv"))) == 1  # any other file: its one series


def test_a_folder_of_runs_gives_each_run_to_fit_and_compare(tmp_path, capsys):
    """A directory that is no run itself but holds several (a scalerl sweep's output: one run directory each; a
    TensorBoard logdir: one folder of events per run, as OpenRLHF and `tensorboard --logdir` lay them out) gives
    each run, named by its folder; it was one error ("no metrics.jsonl", "events in several folders")."""
    from torch.utils.tensorboard import SummaryWriter

    from scalerl.curves import load_runs

    sweep = tmp_path / "sweep"
    for name, seed in (("cispo", 0), ("dapo", 1)):
        (sweep / name).mkdir(parents=True)
        _csv(tmp_path / f"{name}.csv", seed=seed)
        lines = (tmp_path / f"{name}.csv").read_text().splitlines()[1:]
        (sweep / name / "metrics.jsonl").write_text("".join(
            json.dumps({"step": int(s), "compute/device_hours": float(c), "val/pass_rate": float(v)}) + "\n"
            for s, c, v in (line.split(",") for line in lines)))
    (sweep / "sweep.json").write_text("{}")
    code, out, err = run(["compare", sweep, "--fit-from", 1500, "--json"], capsys)
    assert code == 0, err
    assert sorted(r["source"] for r in json.loads(out)["ranking"]) == [
        str(sweep / "cispo" / "metrics.jsonl"), str(sweep / "dapo" / "metrics.jsonl")]
    code, out, err = run(["compare", sweep, "--fit-from", 1500], capsys)
    assert "│ cispo" in out and "│ dapo" in out
    logdir = tmp_path / "logdir"
    c = np.linspace(100, 16000, 40)
    for name, row in (("ppo-a", "scalerl-8b"), ("ppo-b", "scalerl-32k")):
        writer = SummaryWriter(log_dir=str(logdir / name))
        for i, v in enumerate(simulate_eval_curve(TABLE1[row], c, seed=0)):
            writer.add_scalar("eval/acc", float(v), i + 1)
        writer.close()
    code, out, err = run(["fit", logdir, "--x", "step", "--y", "eval/acc", "--json"], capsys)
    assert code == 0, err
    assert [f["source"] for f in json.loads(out)["fits"]] == [str(logdir / "ppo-a"), str(logdir / "ppo-b")]
    code, out, err = run(["compare", logdir, "--x", "step", "--y", "eval/acc"], capsys)
    assert code == 0 and "│ ppo-a" in out and "│ ppo-b" in out
    # a run directory is still one run
    assert len(load_runs(sweep / "cispo")) == 1 and len(load_runs(logdir / "ppo-a", x="step", y="eval/acc")) == 1


def test_a_table_title_is_centred_over_the_table_in_a_log(capsys):
    """Printed to a pipe or a file (a console that soft-wraps so messages stay whole lines), the tables' titles came
    out flush left: rich centres a title only when the table is not soft-wrapped."""
    from pathlib import Path

    example = Path(__file__).resolve().parents[1] / "examples" / "curves" / "scalerl_8b.csv"
    code, out, _ = run(["fit", str(example), "--fit-from", "1500"], capsys)
    lines = out.splitlines()
    title, top = lines[0], lines[1]
    assert code == 0 and title.strip() == "Eq. 1 fits (method vp)" and top.startswith("┏")
    left = len(title) - len(title.lstrip())
    assert abs((left + len(title.strip()) / 2) - len(top) / 2) <= 1


def test_percentages_fitted_with_bounds_off_get_the_hint(tmp_path, capsys):
    """The bounds error names --y-scale 0.01 for values in [0, 100]; a user who passed --no-bounds instead had
    percentages fitted as rewards, A = 73.7, with no word."""
    x = np.arange(0, 1001, 20)
    y = 100 * (0.2 + 0.5 / (1 + (300 / np.maximum(x, 1e-9)) ** 1.5)) + np.random.default_rng(0).normal(0, 1, x.size)
    path = tmp_path / "pct.csv"
    path.write_text("step,acc\n" + "".join(f"{a},{b:.3f}\n" for a, b in zip(x, y)))
    code, out, err = run(["fit", path, "--x", "step", "--y", "acc", "--no-bounds", "--json"], capsys)
    fit = json.loads(out)["fits"][0]
    assert code == 0 and any("if they are percentages, --y-scale 0.01" in w for w in fit["warnings"])
    code, out, err = run(["fit", path, "--x", "step", "--y", "acc", "--y-scale", "0.01", "--json"], capsys)
    assert code == 0 and not any("percentages" in w for w in json.loads(out)["fits"][0]["warnings"])
    # rewards such as ±1 with bounds off: no hint
    path.write_text("step,r\n" + "".join(f"{a},{2 * b / 100 - 1:.4f}\n" for a, b in zip(x, y)))
    code, out, err = run(["fit", path, "--x", "step", "--y", "r", "--no-bounds", "--json"], capsys)
    assert code == 0 and not any("percentages" in w for w in json.loads(out)["fits"][0]["warnings"])


def test_a_control_sequence_in_a_files_names_is_shown_not_obeyed(tmp_path, capsys):
    """A CSV header holding ESC [2J cleared the terminal through the "no column" error; a run named with one did the
    same through the table and the warnings."""
    bad = tmp_path / "esc.csv"
    bad.write_text("step,\x1b[2Jacc\n0,0.1\n1,0.2\n2,0.3\n3,0.4\n4,0.45\n5,0.5\n")
    code, out, err = run(["fit", bad, "--x", "step", "--y", "acc"], capsys)
    assert code == 2 and "\x1b" not in err and "\\x1b[2Jacc" in err and len(err.strip().splitlines()) == 1
    named = tmp_path / "run\x1b[2J.csv"
    x = np.arange(0, 1001, 20)
    y = 0.2 + 0.5 / (1 + (300 / np.maximum(x, 1e-9)) ** 1.5)
    named.write_text("step,acc\n" + "".join(f"{a},{b:.4f}\n" for a, b in zip(x, y)))
    code, out, err = run(["fit", named, "--x", "step", "--y", "acc", "--fit-until", "0.1"], capsys)
    assert code == 0 and "\x1b" not in out + err and "\\x1b[2J" in out


def test_a_level_prints_as_given_and_the_power_laws_count_names_its_parameters(tmp_path, capsys):
    from scalerl.curves.fit import format_level

    assert (format_level(0.95), format_level(0.9), format_level(0.999999)) == ("95%", "90%", "99.9999%")  # not "100%"
    three = tmp_path / "three.csv"
    three.write_text("step,acc\n0,0.1\n10,0.2\n20,0.3\n")
    code, out, err = run(["fit", three, "--x", "step", "--y", "acc", "--model", "power"], capsys)
    assert code == 2 and "the power law has 3 free parameters here (A, D and B)" in err and "Eq. 1" not in err
