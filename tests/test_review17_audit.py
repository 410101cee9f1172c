"""Defects a review of the seventeenth session's changes found, each fixed where it was (issue #26: the trust
signal and the flags the same on every surface; no traceback from any method; bad input shown, not obeyed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from scalerl.curves import compare_fits, fit_curve, paper, vp
from scalerl.curves.sigmoid import sigmoid

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "curves"


def _early():
    rng = np.random.default_rng(0)
    x = np.concatenate([[0], np.linspace(200, 6000, 30)])
    y = sigmoid(x, 0.1, 0.8, 1.5, 8000.0) + rng.normal(0, 0.01, x.size)
    y[0] = 0.1
    return x, y


def _fall():
    x = np.linspace(0, 4000, 41)
    y = 0.5 - 0.3 * x / 4000 + np.random.default_rng(3).normal(0, 0.01, x.size)
    return x, y


def test_an_optimum_outside_an_interval_open_at_one_end_is_a_warning_not_a_traceback():
    # --method paper --no-bounds with a one-value grid below the data's interval: the interval's top is open (None)
    f = fit_curve(*_early(), method="paper", a_grid=np.array([0.3]), bounded=False, source="early")
    assert not f.identified and any("lies outside its own interval [" in w and "open]" in w for w in f.warnings)


def test_a_grid_edge_at_the_laws_own_bound_is_no_edge():
    rng = np.random.default_rng(2)
    x = np.concatenate([[0], np.linspace(500, 40000, 60)])
    y = np.clip(sigmoid(x, 0.2, 1.0, 2.0, 2000.0) + rng.normal(0, 0.003, x.size), 0, 1)
    f = fit_curve(x, y, method="paper", a_grid=np.arange(0.5, 1.0 + 1e-9, 0.005), source="sat")
    assert f.A == pytest.approx(1.0) and f.identified and not any("edge" in w for w in f.warnings)


def test_paper_data_is_checked_for_its_grids_edges_too():
    rng = np.random.default_rng(1)
    x = np.linspace(1000, 10000, 40)
    y = sigmoid(x, 0.1, 0.7, 1.0, 30.0) + rng.normal(0, 0.003, x.size)
    p = vp.Problem(x, y, R0=0.1, A=None, bounded=True)
    _, cmid_grid = paper.data_grids(p)
    f = fit_curve(x, y, method="paper-data", fit_from=0, R0=0.1, source="pd")
    assert f.Cmid == pytest.approx(cmid_grid.min()) and not f.identified
    (w,) = [w for w in f.warnings if "edge" in w]
    assert "paper-data method's Cmid grid" in w and w.endswith("use --method vp")  # it takes no --cmid-grid


def test_an_interval_open_below_reads_not_bounded_everywhere(tmp_path):
    from scalerl.config import ForecastConfig
    from scalerl.curves.plot import _A_text
    from scalerl.forecast import Forecaster, describe_fit, describe_record

    x, y = _fall()
    fc = Forecaster(ForecastConfig())
    keys = {}
    for c, v in zip(x, y):
        keys = fc.update(float(c), float(v))
    fit = fc.last_fit
    assert fit.A_ci_open[0] and fit.format_A() == "not bounded"
    assert keys["forecast/A_lo_open"] == 1.0  # forecast/A_lo is the search's bound (R0), no lower bound
    assert describe_record({**keys, "compute/device_hours": float(x[-1])}).startswith("A not bounded, not identified")
    assert describe_fit(fit.to_json()).startswith("A not bounded, not identified")
    assert _A_text(fit) == " not bounded"  # the legend reads "A not bounded", not "Anot bounded"


def test_the_report_marks_a_forecast_beyond_what_the_data_support_and_escapes_names(tmp_path, capsys):
    from scalerl.curves import load_series
    from scalerl.experiments.report import write_report

    s = load_series(EXAMPLES / "scalerl_8b.csv")
    keep = s.x <= 3000  # a run cut before its midpoint: its forecast at 10x its compute runs far above its data
    root = tmp_path / "sweep"
    for name in ("early", "bad\x1b]0;PWNED\x07\x1b[31mred"):
        (root / name).mkdir(parents=True)
    with open(root / "early" / "metrics.jsonl", "w") as fh:
        for a, b in zip(s.x[keep], s.y[keep]):
            fh.write(json.dumps({"compute/device_hours": float(a), "val/pass_rate": float(b)}) + "\n")
    (root / "bad\x1b]0;PWNED\x07\x1b[31mred" / "metrics.jsonl").write_text(
        json.dumps({"compute/device_hours": 1.0, "val\x1b[2Jpass": 0.1}) + "\n")
    a = write_report(root, tmp_path / "r.html")
    (run,) = a.runs
    assert run.fit.reliable and not run.fit.supports(run.predictions[-1].reward)
    html = (tmp_path / "r.html").read_text()
    assert html.count("beyond what the data support") == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\\x1b]0;PWNED\\x07" in err


def test_the_power_laws_fall_messages_name_the_power_law():
    s = np.arange(0, 1001, 20, dtype=float)
    y = sigmoid(s, 0.2, 0.6, 2, 100) - 0.15 * np.clip((s - 300) / 700, 0, 1)
    y = y + np.random.default_rng(10).normal(0, 0.02, s.size)
    y[0] = 0.2
    f = fit_curve(s, y, model="power", source="risefall")
    (w,) = [w for w in f.warnings if "declines after its peak" in w]
    assert "the power law cannot fall" in w and "Eq. 1" not in w


def test_a_prediction_records_whether_the_data_support_it():
    s = __import__("scalerl.curves", fromlist=["load_series"]).load_series(EXAMPLES / "scalerl_8b.csv")
    f = fit_curve(s.x, s.y, fit_until=2000, predict_at=[3000.0, 160000.0], source="r")
    near, far = f.to_json()["predictions"]
    assert near["supported"] is True and far["supported"] is False
