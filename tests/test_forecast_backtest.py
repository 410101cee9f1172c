"""bench/forecast_backtest.py and its real-curve corpus (issue #26): provenance, naive forecasts, an end-to-end run."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from scalerl.curves import fit_curve, load_series
from scalerl.curves.series import Series

_PATH = Path(__file__).resolve().parents[1] / "bench" / "forecast_backtest.py"
_spec = importlib.util.spec_from_file_location("forecast_backtest", _PATH)
bt = importlib.util.module_from_spec(_spec)
sys.modules["forecast_backtest"] = bt  # dataclasses look their module up
_spec.loader.exec_module(bt)

REQUIRED = ("id", "file", "source_repo", "path", "commit", "url", "metric", "model", "recipe", "dataset", "licence",
            "extraction", "n_points")


def _series(x: list[float], y: list[float], name: str = "tiny") -> Series:
    return Series(source=name, x_name="step", y_name="value", x=np.asarray(x, float), y=np.asarray(y, float),
                  rows=np.arange(1, len(x) + 1))


# (folder, at least this many curves, from at least this many repositories): the tuning corpus (issue #26 asks
# for 20 curves from 4 sources) and the six held-out sets (bench/curves/holdout*/README.md)
CORPORA = [(bt.CORPUS, 20, 5), (bt.CORPUS / "holdout", 20, 3), (bt.CORPUS / "holdout2", 7, 3),
           (bt.CORPUS / "holdout3", 25, 9), (bt.CORPUS / "holdout4", 17, 5), (bt.CORPUS / "holdout5", 13, 4),
           (bt.CORPUS / "holdout6", 4, 2)]


@pytest.mark.parametrize("corpus, min_curves, min_sources", CORPORA, ids=lambda v: getattr(v, "name", None))
def test_every_manifest_entry_has_provenance_and_a_readable_file(corpus, min_curves, min_sources):
    entries = bt.load_manifest(corpus)
    assert len({e["id"] for e in entries}) == len(entries) >= min_curves
    assert len({e["source_repo"] for e in entries}) >= min_sources
    read = {s.source: s for s in bt.corpus_series(corpus)}  # what the backtest fits
    for e in entries:
        missing = [k for k in REQUIRED if not e.get(k)]
        assert not missing, f"{e.get('id')}: missing {missing}"
        assert re.fullmatch(r"[0-9a-f]{40}", e["commit"]), e["id"]
        assert e["url"].startswith(f"https://github.com/{e['source_repo']}/"), e["id"]
        s = load_series(corpus / e["file"], x="step", y="value")
        assert s.x.size == e["n_points"] >= 8, e["id"]
        assert not s.notes, f"{e['id']}: rows dropped while reading: {s.notes}"
        y = s.y * e.get("scale", 1.0)  # a source that wrote percentages says so (scale 0.01)
        assert np.all(np.diff(s.x) > 0) and np.all((y >= 0) & (y <= 1)), e["id"]
        assert np.array_equal(read[e["id"]].y, y) and np.array_equal(read[e["id"]].x, s.x), e["id"]


def test_naive_forecasts_on_a_hand_worked_curve():
    # y = 0.1 + 0.05·log2(x); cut 0.5 of x = 32 puts x ≤ 16 in the window and x = 32 (y = 0.35) held out
    x = [1, 2, 4, 8, 16, 32]
    y = [0.10, 0.15, 0.20, 0.25, 0.30, 0.35]
    row = bt.backtest_curve(_series(x, y), 0.5, "test", crashes := [])
    assert (row.n_window, row.n_heldout) == (5, 1) and not crashes
    assert row.errors["last"] == pytest.approx(0.05)  # 0.30 carried forward
    assert row.errors["mean3"] == pytest.approx(0.10)  # mean(0.20, 0.25, 0.30) = 0.25
    assert row.errors["loglin"] == pytest.approx(0.0, abs=1e-12)  # the curve is exactly a + b·ln(x)
    assert row.best_naive == ("loglin", pytest.approx(0.0, abs=1e-12))


def test_power_law_baseline_recovers_an_exact_power_law_and_gives_up_on_too_few_points():
    x = np.array([1.0, 2, 3, 4, 5, 6, 8, 10])
    y = 0.8 - 0.5 / x
    pred = bt.power_law(x[:6], y[:6], x[6:])
    assert pred == pytest.approx(y[6:], abs=1e-6)
    assert bt.power_law(x[:2], y[:2], x[6:]) is None


def test_a_crashing_forecast_is_recorded_not_raised(monkeypatch):
    def boom(xw, yw, xh):  # noqa: ANN001, ANN202
        raise ZeroDivisionError("boom")

    monkeypatch.setitem(bt.BASELINES, "power", boom)
    curve = _series([1, 2, 4, 8, 16, 32], [0.1, 0.15, 0.2, 0.25, 0.3, 0.35])
    row = bt.backtest_curve(curve, 0.5, "test", crashes := [])
    assert row.errors["power"] is None and row.errors["last"] == pytest.approx(0.05)
    assert [(c.method, c.error) for c in crashes] == [("power", "ZeroDivisionError: boom")]
    assert "ZeroDivisionError" in crashes[0].traceback


def test_backtest_runs_end_to_end_on_two_corpus_curves(tmp_path):
    ids = ["gpg_qwen2-7b_gsm8k", "rlscaling_qwen3-0.6b-base_grpo_gsm8k"]
    out = tmp_path / "bt.json"
    code = bt.main(["--only", ",".join(ids), "--no-synthetic", "--cuts", "0.5", "--quiet", "--json", str(out)])
    assert code == 0
    result = json.loads(out.read_text())
    rows = result["sets"]["corpus"]["0.5"]["curves"]
    assert [r["curve"] for r in rows] == ids
    for r in rows:
        s = next(s for s in bt.corpus_series() if s.source == r["curve"])
        want = fit_curve(s.x, s.y, fit_until_fraction=0.5).heldout["mean_abs_err"]  # what `scalerl fit` reports
        assert r["errors"]["scalerl"] == pytest.approx(want)
        assert all(r["errors"][m] is not None for m in ("last", "mean3", "loglin"))
    agg = result["sets"]["corpus"]["0.5"]["aggregate"]
    assert agg["scored"] == 2 and agg["methods"]["scalerl"]["n"] == 2
    assert 0 <= agg["within_tolerance"] <= 2


def test_unknown_curve_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        bt.main(["--only", "no-such-curve", "--no-synthetic"])
    assert e.value.code == 2 and "no corpus curve named no-such-curve" in capsys.readouterr().err
