"""bench/forecast_headroom.py: the hindsight forecasts that bound what any forecast of a real curve can reach (#26)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from scalerl.curves.series import Series

_BENCH = Path(__file__).resolve().parents[1] / "bench"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, _BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


fb = sys.modules.get("forecast_backtest") or _load("forecast_backtest")
hr = _load("forecast_headroom")


def _series(y: list[float] | np.ndarray, name: str) -> Series:
    y = np.asarray(y, float)
    x = np.arange(1, y.size + 1, dtype=float)
    return Series(source=name, x_name="step", y_name="value", x=x, y=y, rows=np.arange(1, y.size + 1))


def test_hindsight_level_is_the_median_held_flat():
    # median 0.2: errors 0.1, 0, 0.4
    assert hr.hindsight_level_err(np.array([0.1, 0.2, 0.6])) == pytest.approx(0.5 / 3)
    # the median is the best constant: any other constant does no better
    y = np.array([0.3, 0.5, 0.52, 0.9, 0.1])
    for c in np.linspace(0, 1, 101):
        assert hr.hindsight_level_err(y) <= np.mean(np.abs(y - c)) + 1e-12


def test_noise_floor_by_hand_and_on_white_noise():
    # second differences 1, -1, 1: mean |.| = 1, over sqrt(1.5)
    assert hr.noise_floor(np.array([0.0, 1.0, 0.0, 1.0, 0.0])) == pytest.approx(1 / np.sqrt(1.5))
    assert hr.noise_floor(np.array([0.2, 0.3])) is None
    # a straight line has no noise; white noise of sd s around a line: a perfect forecast's mean |error| is
    # s*sqrt(2/pi), and the estimate finds it
    assert hr.noise_floor(np.linspace(0.1, 0.9, 50)) == pytest.approx(0.0, abs=1e-12)
    rng = np.random.default_rng(0)
    s = 0.02
    y = np.linspace(0.3, 0.6, 20000) + rng.normal(0, s, 20000)
    assert hr.noise_floor(y) == pytest.approx(s * np.sqrt(2 / np.pi), rel=0.03)


def test_headroom_columns_on_two_curves():
    rng = np.random.default_rng(1)
    flat = 0.5 + rng.normal(0, 0.01, 40)
    rising = 0.8 - 0.5 * np.exp(-np.arange(40) / 15) + rng.normal(0, 0.01, 40)
    h = hr.headroom([_series(flat, "flat"), _series(rising, "rising")], 0.5, "t")
    assert h["scored"] == 2 and h["best_naive_method"] in fb.NAIVE
    r = h["ratios"]
    # the per-curve best can only be at or below the best single method; the noise floor is below both
    assert r["per-curve best naive"] <= 1 + 1e-12
    assert 0 < r["noise floor"] < r["per-curve best naive"]
    # the columns are the means of the per-curve numbers over the best method's mean, recomputed here
    crashes: list = []
    rows = [fb.backtest_curve(s, 0.5, "t", crashes) for s in (_series(flat, "flat"), _series(rising, "rising"))]
    base = np.mean([row.errors[h["best_naive_method"]] for row in rows])
    assert h["best_naive_mean"] == pytest.approx(base)
    assert r["scalerl"] == pytest.approx(np.mean([row.errors["scalerl"] for row in rows]) / base)
    held = [hr.hindsight_level_err(y[np.arange(1, 41) > 20]) for y in (flat, rising)]
    assert r["hindsight level"] == pytest.approx(np.mean(held) / base)


def test_the_script_runs_on_a_held_out_set(capsys):
    assert hr.main(["--cuts", "0.5", "--corpus", str(fb.CORPUS / "holdout6")]) == 0
    out = capsys.readouterr().out
    assert "holdout6" in out and "per-curve best naive" in out


def test_a_folder_without_a_manifest_is_one_line_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        hr.main(["--corpus", str(tmp_path)])
    assert e.value.code == 2
    assert "has no manifest.json" in capsys.readouterr().err
