"""Sweeps: spec parsing and grid naming, malformed specs as one-line errors, and resumption after a kill."""

from __future__ import annotations

import json
import textwrap

import pytest

from scalerl.curves.synthetic import CurveParams
from scalerl.errors import UserError
from scalerl.experiments.spec import grid_runs, load_sweep
from scalerl.experiments.sweep import DONE, INDEX, run_parallel, run_sequential, threads_per_job
from scalerl.experiments.synthetic_runs import Killed, SyntheticRunFn

# small task splits: the stubbed runs never train on them, and every sweep builds each run's task to check it first
SMALL_TASK = ["task.n_train=64", "task.n_val=16"]
FAST = ["steps=12", "eval.every=3", *SMALL_TASK]
CURVE = CurveParams(0.1, 0.6, 1.5, 0.05)


def write_spec(tmp_path, text: str):
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_grid_is_a_cartesian_product_with_readable_names():
    runs = grid_runs({"batch.prompts": [4, 8], "batch.generations": [2, 4]})
    assert runs == {
        "prompts-4_generations-2": ["batch.prompts=4", "batch.generations=2"],
        "prompts-4_generations-4": ["batch.prompts=4", "batch.generations=4"],
        "prompts-8_generations-2": ["batch.prompts=8", "batch.generations=2"],
        "prompts-8_generations-4": ["batch.prompts=8", "batch.generations=4"],
    }
    # two fields ending in the same name are told apart by their whole path
    assert list(grid_runs({"optim.lr": [0.001], "warmup.lr": [0.5]})) == ["optim-lr-0.001_warmup-lr-0.5"]


def test_spec_layers_base_set_run_and_command_line(tmp_path):
    spec = write_spec(tmp_path, """
        base: scalerl
        set: [steps=7, batch.prompts=4]
        runs:
          small: [batch.generations=2]
          big: [batch.generations=4, steps=9]
    """)
    sweep = load_sweep(spec, ["eval.every=2"])
    cfgs = sweep.configs()
    assert list(cfgs) == ["small", "big"]
    assert (cfgs["small"].steps, cfgs["small"].batch.prompts, cfgs["small"].batch.generations) == (7, 4, 2)
    assert (cfgs["big"].steps, cfgs["big"].batch.generations, cfgs["big"].eval.every) == (9, 4, 2)
    assert cfgs["big"].name == "big"


@pytest.mark.parametrize(
    "text, needle",
    [
        ("base: scalerl\n", "exactly one of 'runs:'"),
        ("runs: {a: []}\ngrid: {steps: [1]}\n", "exactly one of 'runs:'"),
        ("runs: {a: []}\nbogus: 1\n", "bogus: unknown key"),
        ("runs: {a: [batch.nonsense=3]}\n", "run 'a'"),
        ("runs: {a: batch.prompts=3}\n", "runs.a"),
        ("runs: {'bad/name': []}\n", "not usable as a directory name"),
        ("grid: {steps: []}\n", "grid field 'steps' has no values"),
        ("base: nope\nruns: {a: []}\n", "unknown preset 'nope'"),
        ("runs: [a, b\n", "not valid YAML"),
        ("runs: {1e5: [seed=1]}\n", "the run name 100000.0 is not text (YAML read it as a float); quote it"),
        ("runs: {yes: [seed=1]}\n", "the run name True is not text"),
    ],
)
def test_malformed_spec_is_one_line_user_error(tmp_path, text, needle):
    with pytest.raises(UserError) as err:
        load_sweep(write_spec(tmp_path, text))
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_cli_malformed_spec_exits_2_without_output(tmp_path, capsys):
    from scalerl.cli import main

    spec = write_spec(tmp_path, "runs: {a: [algo.loss.name=nope]}\n")
    with pytest.raises(SystemExit) as exc:
        main(["sweep", str(spec), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2
    assert err.startswith("error: sweep spec") and "unknown loss" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


MICRO_SET = "[model.d_model=32, model.n_layers=1, model.n_heads=2, task.n_train=64, task.n_val=8, warmup.steps=0]"


@pytest.mark.parametrize("bad, problem", [
    ("[task.name=math, task.params.source=file, task.params.path=missing.jsonl]", "not found"),  # a data file
    ("[model.max_seq_len=16]", "exceeds model.max_seq_len 16"),  # a sequence length too small for the prompts
    ("[task.params.bogus=1]", "bogus"),  # a task parameter
])
def test_every_run_is_checked_before_the_first_starts(tmp_path, monkeypatch, capsys, bad, problem):
    from scalerl.cli import main
    from scalerl.experiments import sweep as sweep_module

    started = []
    monkeypatch.setattr(sweep_module, "train_run", lambda *args: started.append(args) or {})
    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path, f"set: {MICRO_SET}\nruns: {{good: [], bad: {bad}, after: []}}\n")
    with pytest.raises(SystemExit) as exc:
        main(["sweep", str(spec), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("error: sweep spec") and "run 'bad'" in err and problem in err
    assert started == [] and not (tmp_path / "out").exists()  # nothing started, nothing written


def test_loo_checks_every_variant_before_the_first_starts(tmp_path, monkeypatch, capsys):
    from scalerl.cli import main
    from scalerl.experiments import sweep as sweep_module

    started = []
    monkeypatch.setattr(sweep_module, "train_run", lambda *args: started.append(args) or {})
    with pytest.raises(SystemExit) as exc:
        main(["loo", "--out", str(tmp_path / "loo"), "--only", "loo-dapo", "--budget-steps", "2", "--quiet",
              "--set", "model.d_model=32", "--set", "task.n_train=64", "--set", "model.max_seq_len=16"])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("error: loo --base scalerl: run 'scalerl'") and "model.max_seq_len 16" in err
    assert started == [] and not (tmp_path / "loo").exists()


def _steps(run_dir):
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_killed_sweep_restarts_without_redoing_finished_runs(tmp_path):
    spec = write_spec(tmp_path, "runs: {a: [seed=1], b: [seed=2], c: [seed=3]}\n")
    sweep = load_sweep(spec, FAST)
    out = tmp_path / "sweep"
    fake = SyntheticRunFn({n: CURVE for n in "abc"}, kill_at={"b": 5})
    with pytest.raises(Killed):
        run_sequential(sweep, out, run_fn=fake, show_progress=False)
    index = json.loads((out / INDEX).read_text())
    assert [(r["name"], r["status"]) for r in index["runs"]] == [("a", "done"), ("b", "interrupted"), ("c", "pending")]
    assert (out / "a" / DONE).exists() and not (out / "b" / DONE).exists()

    records = run_sequential(sweep, out, run_fn=fake, show_progress=False)
    # a is not run again; b is resumed; c starts fresh
    assert fake.calls == [("a", False), ("b", False), ("b", True), ("c", False)]
    assert [(r.name, r.status, r.action) for r in records] == [("a", "done", "skip"), ("b", "done", "resume"), ("c", "done", "new")]
    assert _steps(out / "b") == list(range(13))  # continued after step 5, no gap, no duplicate
    assert json.loads((out / INDEX).read_text())["runs"][1]["status"] == "done"

    run_sequential(sweep, out, run_fn=fake, show_progress=False)
    assert len(fake.calls) == 4  # everything finished: nothing runs


def test_raised_budget_extends_finished_runs(tmp_path):
    spec = write_spec(tmp_path, "runs: {a: []}\n")
    out = tmp_path / "sweep"
    fake = SyntheticRunFn({"a": CURVE})
    run_sequential(load_sweep(spec, FAST), out, run_fn=fake, show_progress=False)
    records = run_sequential(load_sweep(spec, ["steps=15", "eval.every=3", *SMALL_TASK]), out, run_fn=fake,
                             show_progress=False)
    assert records[0].action == "extend" and fake.calls[-1] == ("a", True)
    assert _steps(out / "a") == list(range(16))


def test_run_directory_with_another_config_is_refused(tmp_path):
    spec = write_spec(tmp_path, "runs: {a: []}\n")
    out = tmp_path / "sweep"
    fake = SyntheticRunFn({"a": CURVE})
    run_sequential(load_sweep(spec, FAST), out, run_fn=fake, show_progress=False)
    with pytest.raises(UserError, match="another config .*batch.prompts"):
        run_sequential(load_sweep(spec, [*FAST, "batch.prompts=3"]), out, run_fn=fake, show_progress=False)
    # where and how a run executes may change (the runner's RESUMABLE_FIELDS): still the same, finished run
    records = run_sequential(load_sweep(spec, [*FAST, "tensorboard=false", "backend=inline"]), out, run_fn=fake,
                             show_progress=False)
    assert records[0].action == "skip" and len(fake.calls) == 1


def test_a_failing_run_is_recorded_and_the_others_still_run(tmp_path):
    spec = write_spec(tmp_path, "runs: {a: [], b: [], c: []}\n")
    out = tmp_path / "sweep"
    fake = SyntheticRunFn({"a": CURVE, "c": CURVE})  # no curve for b: KeyError inside the run
    records = run_sequential(load_sweep(spec, FAST), out, run_fn=fake, show_progress=False)
    assert [r.status for r in records] == ["done", "failed", "done"]
    assert "KeyError" in records[1].error and "KeyError" in (out / "b" / "sweep_error.log").read_text()


def test_parallel_sweep_writes_what_the_sequential_one_does(tmp_path):
    """--jobs 2: each run in its own process with the cores split between them; the same metrics as one after
    another, failures recorded, finished runs skipped on a second invocation."""
    spec = write_spec(tmp_path, "runs: {a: [seed=1], b: [seed=2], c: [seed=3], d: []}\n")
    fake = SyntheticRunFn({n: CURVE for n in "abc"})  # no curve for d: it fails inside its worker
    seq = run_sequential(load_sweep(spec, FAST), tmp_path / "seq", run_fn=fake, show_progress=False)
    par = run_parallel(load_sweep(spec, FAST), tmp_path / "par", 2, run_fn=fake, show_progress=False)
    assert [(r.name, r.status, r.action) for r in par] == [(r.name, r.status, r.action) for r in seq]
    assert par[3].status == "failed" and "KeyError" in par[3].error
    for name in "abc":
        assert (tmp_path / "par" / name / "metrics.jsonl").read_text() == (tmp_path / "seq" / name / "metrics.jsonl").read_text()
        assert f"threads: {threads_per_job(2)}" in (tmp_path / "par" / name / "config.yaml").read_text()
    assert json.loads((tmp_path / "par" / INDEX).read_text())["status"] == "failed"
    again = run_parallel(load_sweep(spec, FAST), tmp_path / "par", 2, run_fn=fake, show_progress=False)
    assert [r.action for r in again[:3]] == ["skip"] * 3


def test_threads_per_job_splits_the_cores(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert [threads_per_job(j) for j in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]


def test_real_tiny_sweep_through_the_runner_skips_and_extends(tmp_path):
    """Two micro runs through scalerl.pipeline.runner.train; a second invocation skips both, a raised budget
    resumes both from their checkpoints and continues their metrics without a gap."""
    from scalerl.config import CONFIG_DIR

    spec = CONFIG_DIR / "sweeps" / "micro.yaml"
    out = tmp_path / "micro"
    records = run_sequential(load_sweep(spec, ["steps=4", "eval.every=2"]), out, show_progress=False)
    assert [(r.name, r.status, r.action) for r in records] == [("scalerl", "done", "new"), ("no-fp32", "done", "new")]
    before = (out / "scalerl" / "metrics.jsonl").read_text()
    records = run_sequential(load_sweep(spec, ["steps=4", "eval.every=2"]), out, show_progress=False)
    assert [r.action for r in records] == ["skip", "skip"]
    assert (out / "scalerl" / "metrics.jsonl").read_text() == before
    records = run_sequential(load_sweep(spec, ["steps=6", "eval.every=2"]), out, show_progress=False)
    assert [(r.status, r.action) for r in records] == [("done", "extend")] * 2
    for name in ("scalerl", "no-fp32"):
        train_steps = [json.loads(x)["step"] for x in (out / name / "metrics.jsonl").read_text().splitlines()
                       if "val/pass_rate" not in json.loads(x)]
        assert train_steps == [1, 2, 3, 4, 5, 6]
        assert json.loads((out / name / DONE).read_text())["budget"] == {"steps": 6, "max_minutes": None}


def test_the_check_builds_each_task_config_once(tmp_path, monkeypatch):
    """Every run is checked before the first starts; runs that share a task config share its build (a 3,000-problem
    testbed per run made the check of a 36-run sweep take seconds for nothing)."""
    from scalerl.experiments import sweep as sweep_module
    from scalerl.pipeline import runner

    built = []
    real = runner.build_task
    monkeypatch.setattr(runner, "build_task", lambda cfg: built.append(cfg.model_dump_json()) or real(cfg))
    monkeypatch.setattr(sweep_module, "train_run", lambda *args: {})
    spec = write_spec(tmp_path, f"""
        set: {MICRO_SET}
        runs: {{a: [optim.lr=0.001], b: [optim.lr=0.002], c: [task.seed=1], d: [optim.lr=0.003]}}
    """)
    sweep = load_sweep(spec)
    sweep_module.check_runs(sweep, sweep.configs(), [r.name for r in sweep.runs])
    assert len(built) == 2 and len(set(built)) == 2  # the shared task once, task.seed=1's once
