"""``scalerl sweep --prune`` (issue 28): a sweep in rungs of compute on synthetic runs with known A
(``scalerl.curves.synthetic`` through ``SyntheticRunFn``, as the sweep tests run), resumed after a kill, with
--jobs, what sweep.json and the report say, and the one-line errors."""

from __future__ import annotations

import json
import math
import shutil
import textwrap
from pathlib import Path

import pytest

from scalerl.curves.synthetic import CurveParams
from scalerl.errors import UserError
from scalerl.experiments.prune_sweep import STATE, rung_name, run_pruned
from scalerl.experiments.pruning import RUNGS
from scalerl.experiments.spec import load_sweep
from scalerl.experiments.sweep import DONE, INDEX
from scalerl.experiments.synthetic_runs import Killed, SyntheticRunFn, capped_steps

BUDGET = 1.6  # device-hours per run: 160 steps at the stub's 0.01 device-hours a step
SETS = ["steps=160", "eval.every=2", f"max_device_hours={BUDGET}", "model.seed=0"]  # one model: checked once a rung
# small task splits: the stub never trains on them, and every sweep builds each run's task to check it first
SETS += ["task.n_train=64", "task.n_val=16"]
# two runs 0.02 apart at the top, two far below them; Cmid 0.3 device-hours: rung 1 (0.2) is before it
CURVES = {"a": CurveParams(0.1, 0.70, 1.5, 0.3), "b": CurveParams(0.1, 0.68, 1.5, 0.3),
          "c": CurveParams(0.1, 0.35, 1.5, 0.3), "d": CurveParams(0.1, 0.30, 1.5, 0.3)}


def sweep_of(tmp_path, sets=SETS):
    spec = tmp_path / "spec.yaml"
    spec.write_text(textwrap.dedent("""
        runs: {a: [seed=1], b: [seed=2], c: [seed=3], d: [seed=4]}
    """))
    return load_sweep(spec, sets)


@pytest.fixture(scope="module")
def pruned(tmp_path_factory):
    """The sequential pruned sweep of ``CURVES`` that several tests read (and never write): (records, state, out)."""
    tmp = tmp_path_factory.mktemp("pruned")
    records, state = run_pruned(sweep_of(tmp), tmp / "sweep", run_fn=SyntheticRunFn(CURVES), show_progress=False)
    return records, state, tmp / "sweep"


def outcome(state):
    """What pruning did to each run, and the numbers it decided on at every rung."""
    return {name: (r.state, r.stopped_at, round(r.compute, 9),
                   [(h["rung"], h["stop"], h["outlook"] and round(h["outlook"]["hi"], 9)) for h in r.history])
            for name, r in state.runs.items()}


def test_the_stub_stops_at_a_compute_budget_as_the_runner_does():
    assert capped_steps(160, 0.01, None) == 160
    assert capped_steps(160, 0.01, 0.2) == 20  # the first step whose compute reaches 0.2
    assert capped_steps(160, 0.01, 0.205) == 21
    assert capped_steps(10, 0.01, 5.0) == 10  # the steps end it first


def test_pruned_sweep_stops_the_runs_that_cannot_win_and_keeps_the_close_ones(pruned, tmp_path):
    records, state, out = pruned
    runs = state.runs
    assert runs["a"].state == runs["b"].state == "finished"  # 0.02 apart: never stopped
    assert runs["a"].compute >= BUDGET - 1e-9 and runs["b"].compute >= BUDGET - 1e-9
    for name in "cd":  # 0.35 below the best: stopped at a rung before the last
        assert runs[name].state == "pruned" and runs[name].stopped_at in RUNGS[:-1]
        assert runs[name].compute <= runs[name].stopped_at * BUDGET + 0.01 + 1e-9  # one step past the rung at most
        last = runs[name].history[-1]
        assert last["stop"] and last["outlook"]["hi"] < last["leader_lo"] - last["margin"]  # the numbers that decided
    assert {r.name: r.status for r in records} == {"a": "done", "b": "done", "c": "pruned", "d": "pruned"}
    spent = sum(r.compute for r in runs.values())
    assert state.totals()["spent_device_hours"] == pytest.approx(spent)
    assert state.totals()["unpruned_device_hours"] == pytest.approx(4 * BUDGET)
    assert spent < 3 * BUDGET

    index = json.loads((out / INDEX).read_text())
    assert index["status"] == "done"
    assert [(r["name"], r["status"]) for r in index["runs"]] == [("a", "done"), ("b", "done"), ("c", "pruned"),
                                                                 ("d", "pruned")]
    p = index["pruning"]
    assert p == json.loads((out / STATE).read_text())
    assert p["margin"] == 0.02 and p["decided"] == len(RUNGS) and p["spent_device_hours"] == pytest.approx(spent)
    assert p["runs"]["c"]["stopped_at"] == runs["c"].stopped_at and "cannot win" in p["runs"]["c"]["reason"]
    # a stopped run trained no further: its metrics end at its rung, and its marker records that rung's budget
    done = json.loads((out / "c" / DONE).read_text())
    assert done["budget"]["max_device_hours"] == pytest.approx(runs["c"].stopped_at * BUDGET)

    # run again (a copy: the fixture's sweep stays as it was): everything is decided, nothing runs
    out = shutil.copytree(out, tmp_path / "again")
    fake = SyntheticRunFn(CURVES)
    records, again = run_pruned(sweep_of(tmp_path), out, run_fn=fake, show_progress=False)
    assert fake.calls == [] and outcome(again) == outcome(state)
    assert {r.name: (r.status, r.action) for r in records}["c"] == ("pruned", "skip")


def test_a_killed_pruned_sweep_continues_where_it_stopped(pruned, tmp_path):
    _, expected, _ = pruned

    out = tmp_path / "killed"
    fake = SyntheticRunFn(CURVES, kill_at={"b": 30})  # b dies in rung 2 (steps 21-40)
    with pytest.raises(Killed):
        run_pruned(sweep_of(tmp_path), out, run_fn=fake, show_progress=False)
    saved = json.loads((out / STATE).read_text())
    assert saved["decided"] == 1  # rung 1 was decided and saved; rung 2 was under way
    assert {r["name"]: r["status"] for r in json.loads((out / INDEX).read_text())["runs"]}["b"] == "interrupted"
    before = len(fake.calls)

    _, state = run_pruned(sweep_of(tmp_path), out, run_fn=fake, show_progress=False)
    rerun = fake.calls[before:]
    assert rerun[0] == ("b", True)  # a finished rung 2 before the kill: skipped; b resumed from where it died
    assert ("a", False) not in rerun and all(resume for _, resume in rerun)
    assert outcome(state) == outcome(expected)  # the same decisions, on the same numbers, as without the kill
    metrics = [json.loads(x)["step"] for x in (out / "b" / "metrics.jsonl").read_text().splitlines()]
    assert metrics == list(range(len(metrics)))  # continued without a gap or a duplicate


@pytest.mark.slow  # two pruned sweeps, 2 worker processes spawned per rung: ~35 s on 2 cores
def test_pruned_sweep_with_jobs_decides_as_the_sequential_one(pruned, tmp_path):
    _, seq, _ = pruned
    records, par = run_pruned(sweep_of(tmp_path), tmp_path / "par", jobs=2, run_fn=SyntheticRunFn(CURVES),
                              show_progress=False)
    assert outcome(par) == outcome(seq)
    assert [r.status for r in records] == ["done", "done", "pruned", "pruned"]


def test_pruning_needs_a_compute_budget_and_keeps_its_margin(tmp_path):
    with pytest.raises(UserError, match=r"a, b, c, d has no compute budget; set max_device_hours") as err:
        run_pruned(sweep_of(tmp_path, ["steps=20"]), tmp_path / "x", run_fn=SyntheticRunFn(CURVES), show_progress=False)
    assert "\n" not in str(err.value) and not (tmp_path / "x").exists()
    out = tmp_path / "sweep"
    run_pruned(sweep_of(tmp_path), out, run_fn=SyntheticRunFn(CURVES), show_progress=False)
    with pytest.raises(UserError, match="pruned with --margin 0.02"):
        run_pruned(sweep_of(tmp_path), out, run_fn=SyntheticRunFn(CURVES), margin=0.05, show_progress=False)
    with pytest.raises(UserError, match="other runs or budgets"):
        run_pruned(sweep_of(tmp_path, [*SETS, "max_device_hours=3.2"]), out, run_fn=SyntheticRunFn(CURVES),
                   show_progress=False)


def test_a_failed_run_holds_the_rung_until_a_rerun_retries_it(tmp_path):
    out = tmp_path / "sweep"
    broken = SyntheticRunFn({k: v for k, v in CURVES.items() if k != "d"})  # d fails inside the run (KeyError)
    records, state = run_pruned(sweep_of(tmp_path), out, run_fn=broken, show_progress=False)
    assert {r.name: r.status for r in records}["d"] == "failed" and state.decided == 0
    _, state = run_pruned(sweep_of(tmp_path), out, run_fn=SyntheticRunFn(CURVES), show_progress=False)
    assert state.decided == len(RUNGS) and state.runs["d"].state == "pruned"


@pytest.mark.slow  # two sweeps and three reports: ~20 s on 2 cores
def test_report_shows_what_pruning_did_and_what_the_stopped_runs_would_have_reached(pruned, tmp_path):
    from scalerl.experiments.report import write_report
    from scalerl.experiments.sweep import run_sequential

    _, state, out = pruned
    plain = tmp_path / "plain"
    write_report(out, tmp_path / "r.html", quiet=True)
    page = (tmp_path / "r.html").read_text()
    assert "<h2>Pruning</h2>" in page
    t = state.totals()
    assert f"{t['spent_device_hours']:.4g}</b> of the <b>{t['unpruned_device_hours']:.4g}" in page
    assert f"{t['spent_share']:.0%}" in page and rung_name(state.runs["c"].stopped_at) in page
    assert "cannot win" in page and "unpruned: last reward" not in page

    run_sequential(sweep_of(tmp_path), plain, run_fn=SyntheticRunFn(CURVES), show_progress=False)
    write_report(plain, tmp_path / "plain.html", quiet=True)
    assert "<h2>Pruning</h2>" not in (tmp_path / "plain.html").read_text()
    write_report(out, tmp_path / "both.html", quiet=True, unpruned=plain)
    page = (tmp_path / "both.html").read_text()
    last_c = json.loads((plain / "c" / "metrics.jsonl").read_text().splitlines()[-1])
    assert "unpruned: last reward" in page and f"{last_c['val/pass_rate']:.3f}" in page
    assert f"{state.runs['c'].compute / last_c['compute/device_hours']:.0%}" in page  # its share of the unpruned compute
    with pytest.raises(UserError, match="not a pruned sweep"):
        write_report(plain, tmp_path / "x.html", quiet=True, unpruned=out)
    with pytest.raises(UserError, match="no such directory"):
        write_report(out, tmp_path / "x.html", quiet=True, unpruned=tmp_path / "nope")


def test_rung_names():
    assert [rung_name(r) for r in RUNGS] == ["1/8", "1/4", "1/2", "1"]
    assert math.isclose(sum(RUNGS[:-1]), 0.875)


def test_cli_prune_errors_are_one_line(tmp_path, capsys):
    from scalerl.cli import main

    spec = tmp_path / "spec.yaml"
    spec.write_text("runs: {a: [], b: []}\nset: [steps=5]\n")
    for argv, needle in [
        (["sweep", str(spec), "--out", str(tmp_path / "o"), "--prune"], "has no compute budget; set max_device_hours"),
        (["sweep", str(spec), "--out", str(tmp_path / "o"), "--prune", "--margin", "-1"], "--margin"),
        (["loo", "--out", str(tmp_path / "o"), "--prune", "--budget-hours", "0"], "--budget-hours"),
    ]:
        with pytest.raises(SystemExit) as exc:
            main(argv)
        err = capsys.readouterr().err.strip()
        assert exc.value.code == 2 and needle in err and len(err.splitlines()) == 1, (argv, err)
    assert not (tmp_path / "o").exists()


def test_the_testbed_pruning_spec_holds_the_loo_variants_and_both_learning_rates_on_two_seeds():
    """configs/sweeps/testbed_prune.yaml (issue 28's must-show) lists the LOO variants as data: they must stay the
    items of ``loo_variants`` (a component added or changed there is a component the spec would silently miss)."""
    from scalerl.config import load_config
    from scalerl.experiments.spec import load_sweep
    from scalerl.presets import loo_variants

    sweep = load_sweep(Path(__file__).resolve().parents[1] / "configs" / "sweeps" / "testbed_prune.yaml")
    runs = {r.name: r.overrides for r in sweep.runs}
    base_lr = load_config("scalerl", None, []).optim.lr
    expected = {"scalerl": [], **loo_variants("scalerl")}
    assert len(runs) == 2 * (len(expected) + 2)
    for name, items in expected.items():
        for seed in (0, 1):
            got = [o for o in runs[f"{name}-s{seed}"] if o not in ("model.seed=0", "steps=100000")]
            assert got == [*items, f"seed={seed}"], name
    configs = sweep.configs()
    assert {c.base_seed for c in configs.values()} == {0}  # one warmed-up model: the seeds vary RL only
    for factor in ("0.1", "10"):
        lrs = {c.optim.lr for n, c in configs.items() if n.startswith(f"lr-x{factor}-")}
        assert len(lrs) == 1 and lrs.pop() == pytest.approx(base_lr * float(factor)), factor
        assert {c.seed for n, c in configs.items() if n.startswith(f"lr-x{factor}-")} == {0, 1}
