"""Audit of the experiments layer (sweep, loo, report, --prune): each test reproduces one defect found by using
the commands end to end at tiny scale, on the synthetic runs the other sweep/report tests use."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import typer

from scalerl.curves.synthetic import CurveParams
from scalerl.errors import UserError
from scalerl.experiments.spec import load_sweep, make_sweep
from scalerl.experiments.sweep import INDEX, RunRecord, run_sequential
from scalerl.experiments.synthetic_runs import SyntheticRunFn

SMALL_TASK = ["task.n_train=64", "task.n_val=16"]
FAST = ["steps=12", "eval.every=3", *SMALL_TASK]
CURVE = CurveParams(0.1, 0.6, 1.5, 0.05)


def _spec(tmp_path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_a_skipped_run_keeps_its_final_fit_in_the_index_and_the_table(tmp_path):
    """A rerun skips a finished run; sweep.json (and the closing table) must still give its final fit, read from
    its marker, not an empty summary."""
    spec = _spec(tmp_path, "runs: {a: [seed=1]}\n")
    first = run_sequential(load_sweep(spec, FAST), tmp_path / "s", run_fn=SyntheticRunFn({"a": CURVE}),
                           show_progress=False)
    assert first[0].summary
    again = run_sequential(load_sweep(spec, FAST), tmp_path / "s", run_fn=SyntheticRunFn({"a": CURVE}),
                           show_progress=False)
    assert again[0].action == "skip" and again[0].summary == first[0].summary
    assert json.loads((tmp_path / "s" / INDEX).read_text())["runs"][0]["summary"] == first[0].summary


def test_loo_variants_differ_from_the_base_in_exactly_their_component_and_a_set_cannot_undo_one():
    """§4: each LOO variant reverts one component. A --set on that component would make the variant the base
    itself (ranked against itself); it is refused before anything runs."""
    from scalerl.experiments.loo import loo_sweep
    from scalerl.presets import LOO_COMPONENTS, config_diff

    configs = loo_sweep("scalerl", SMALL_TASK, budget_steps=4).configs()
    base = configs.pop("scalerl")
    for name, cfg in configs.items():
        component = LOO_COMPONENTS[name][0]
        assert [d[0] for d in config_diff(base, cfg)] == [component], name
    for override in ("algo.fp32_head=false", "algo.curriculum.name=uniform", "schedule.name=ppo_off_policy"):
        with pytest.raises(UserError, match="must differ from 'scalerl' only in"):
            loo_sweep("scalerl", [override], budget_steps=4)


def test_report_survives_run_names_that_matplotlib_would_parse_as_math(tmp_path):
    """A run directory is any name; one with '$...$' in it (drawn in the legends) stopped the whole report with a
    mathtext ParseSyntaxException. HTML special characters are escaped; figures are embedded PNGs."""
    from scalerl.experiments.report import write_report

    root = tmp_path / "sweep"
    sweep = make_sweep({"a": ["seed=1"], "b": ["seed=2"]}, extra=["steps=60", "eval.every=5", *SMALL_TASK])
    run_sequential(sweep, root, run_fn=SyntheticRunFn({"a": CURVE, "b": CurveParams(0.1, 0.5, 1.5, 0.05)}),
                   show_progress=False)
    odd = ["p$\\frac{1}$q", '<b>&"x\'', "λ-ρun é"]
    (root / INDEX).unlink()
    (root / "a").rename(root / odd[0])
    (root / "b").rename(root / odd[1])
    (root / odd[2]).mkdir()  # a run with no fit at all: reported as not reported, the others still are
    (root / odd[2] / "metrics.jsonl").write_text('{"step": 0, "compute/device_hours": 0.0, "val/pass_rate": 0.1}\n')
    out = tmp_path / "r.html"
    write_report(root, out, quiet=True)
    page = out.read_text()
    assert "p$\\frac{1}$q" in page and "&lt;b&gt;&amp;&quot;x&#x27;" in page and "λ-ρun é" in page
    assert '<b>&"x' not in page and "http://" not in page and "https://" not in page and "<script" not in page
    srcs = __import__("re").findall(r'<img src="([^"]*)"', page)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert all(base64.b64decode(s.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n" for s in srcs)


def test_pruned_runs_are_marked_and_not_ranked_with_the_completed_ones(tmp_path):
    """A run stopped by --prune has a fit on the compute it got only; the ranking (App. A.5) is of the runs that
    completed, and a stopped run is listed after them, marked, without a rank."""
    from scalerl.experiments.prune_sweep import run_pruned
    from scalerl.experiments.report import write_report

    curves = {"a": CurveParams(0.1, 0.70, 1.5, 0.3), "c": CurveParams(0.1, 0.30, 1.5, 0.3)}
    spec = _spec(tmp_path, "runs: {a: [seed=1], c: [seed=3]}\n")
    sets = ["steps=160", "eval.every=2", "max_device_hours=1.6", "model.seed=0", *SMALL_TASK]
    _, state = run_pruned(load_sweep(spec, sets), tmp_path / "p", run_fn=SyntheticRunFn(curves), show_progress=False)
    assert state.runs["c"].state == "pruned"
    a = write_report(tmp_path / "p", tmp_path / "r.html", quiet=True)
    assert [(i.name, i.rank, i.pruned) for i in a.ranking] == [("a", 1, False), ("c", 0, True)]
    page = (tmp_path / "r.html").read_text()
    ranking = page[page.index("<h2>Ranking</h2>"):page.index("<h2>Linearised")]
    assert "stopped by --prune" in ranking and "not ranked" in ranking


def test_a_failed_run_exits_1_even_when_no_report_can_be_made(tmp_path, capsys):
    """--report after a sweep whose runs left nothing to fit: the failed run must still be named, exit code 1
    (not the report's error, exit 2, hiding it)."""
    from scalerl.commands.experiments import _finish

    (tmp_path / "s" / "a").mkdir(parents=True)
    records = [RunRecord("a", str(tmp_path / "s" / "a"), [], status="failed", error="boom")]
    with pytest.raises(typer.Exit) as exc:
        _finish(records, tmp_path / "s", tmp_path / "r.html", quiet=True)
    assert exc.value.exit_code == 1
    err = capsys.readouterr().err
    assert "1 run(s) failed: a" in err and "no report" in err


SLOW_RUN = '''
import os, time
from pathlib import Path

class SlowRun:
    """A run that records its process id and then takes long (a real run, as far as the sweep can tell)."""

    def __call__(self, cfg, out, resume, show_progress=False):
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "pid").write_text(str(os.getpid()))
        for _ in range(600):
            time.sleep(0.2)
        return {}
'''

DRIVER = '''
import sys
sys.path.insert(0, {tmp!r})
import slowrun
from scalerl.experiments.spec import load_sweep
from scalerl.experiments.sweep import run_parallel
run_parallel(load_sweep({spec!r}, {fast!r}), {out!r}, 2, run_fn=slowrun.SlowRun(), show_progress=False)
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its new parent) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


def _wait(cond, limit: float = 60.0) -> bool:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.2)
    return cond()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_parallel_runs_end_with_the_sweep_that_started_them(tmp_path, sig):
    """--jobs 2, the sweep process killed (SIGKILL) or interrupted (SIGINT to it alone): its runs must not go on
    in their worker processes. Left going, a run races the rerun that resumes it in the same directory (both
    appending to metrics.jsonl: duplicated rows), and an interrupted sweep waited for its runs to finish. The third
    run is handed to a worker's queue before a worker is free (so it cannot be cancelled) yet never starts: it
    stays ``pending``, where it was marked ``interrupted`` as if it had run."""
    (tmp_path / "slowrun.py").write_text(SLOW_RUN)
    spec = _spec(tmp_path, "runs: {a: [seed=1], b: [seed=2], c: [seed=3]}\n")
    out = tmp_path / "s"
    code = DRIVER.format(tmp=str(tmp_path), spec=str(spec), fast=FAST, out=str(out))
    proc = subprocess.Popen([sys.executable, "-c", code], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    pids: list[int] = []
    try:
        assert _wait(lambda: all((out / n / "pid").exists() and (out / n / "pid").read_text() for n in "ab"))
        pids = [int((out / n / "pid").read_text()) for n in "ab"]
        proc.send_signal(sig)
        proc.wait(timeout=60)
        assert _wait(lambda: not any(_alive(p) for p in pids)), "the runs went on after their sweep ended"
        if sig == signal.SIGINT:
            statuses = {r["name"]: r["status"] for r in json.loads((out / INDEX).read_text())["runs"]}
            assert statuses == {"a": "interrupted", "b": "interrupted", "c": "pending"}
            assert not (out / "c").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in pids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)

