"""One absolute early-point cutoff for every run of one comparison (§2, App. A.7; issue #27 item 6): a run that
spent twice the compute is not cut at twice the compute."""

import json

import numpy as np
import pytest

from scalerl.curves.fit import EARLY_FRACTION
from scalerl.curves.synthetic import TABLE1, simulate_eval_curve
from scalerl.experiments.analysis import analyse
from scalerl.experiments.cutoff import shared_fit_from
from test_cli_curves import run


def _run_dir(path, end, n=60, seed=0):
    """A run directory whose metrics.jsonl holds evaluations up to ``end`` GPU-h."""
    path.mkdir(parents=True)
    c = np.concatenate([[0.0], np.linspace(end / n, end, n)])
    y = simulate_eval_curve(TABLE1["scalerl-8b"], c, seed=seed)
    (path / "metrics.jsonl").write_text("".join(
        json.dumps({"step": i, "compute/device_hours": float(ci), "val/pass_rate": float(yi)}) + "\n"
        for i, (ci, yi) in enumerate(zip(c, y))))
    return path


def test_shared_cutoff_hand_values():
    short, long = np.linspace(100, 8000, 80), np.linspace(100, 16000, 160)
    assert shared_fit_from([short, long]) == EARLY_FRACTION * 8000  # the paper's share of the common window
    assert shared_fit_from([short, long], fit_until_fraction=0.5) == EARLY_FRACTION * 4000
    assert shared_fit_from([np.array([0.0, 1.0, 2.0])]) == 0.0  # too few points to cut any


def test_report_and_compare_cut_every_run_at_one_compute(tmp_path, capsys):
    a = _run_dir(tmp_path / "runs" / "a", 8000)
    b = _run_dir(tmp_path / "runs" / "b", 16000, n=120, seed=1)
    cut = EARLY_FRACTION * 8000
    report = analyse(tmp_path / "runs")
    assert report.fit_from == pytest.approx(cut)
    for r in report.runs:  # every point at or past the shared cutoff is fitted, none before it
        assert list(r.fit.in_window) == list(r.fit.x >= report.fit_from), r.name
    code, out, err = run(["compare", a, b, "--json"], capsys)
    assert code == 0, err
    first = [f["fit_window"][0] for f in json.loads(out)["fits"]]
    assert all(w >= report.fit_from for w in first) and max(first) - min(first) < 16000 / 120 + 1e-9
