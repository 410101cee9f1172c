"""Findings on the fitting procedure (§2.1, App. A.4, A.5, A.7): ``--method paper`` is the literal A.5 grid search,
early points are left out by default, ``compare`` refits with the runs' own method, and the power law is fitted
and shown to be the worse extrapolator."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import curve_fit

from scalerl.cli import main
from scalerl.curves import compare_fits, fit_curve, load_series
from scalerl.curves.fit import EARLY_FRACTION, default_fit_from
from scalerl.curves.sigmoid import sigmoid
from scalerl.curves.synthetic import TABLE1

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "curves"
TRUE_A = {"scalerl_8b": TABLE1["scalerl-8b"].A, "scalerl_bs512": TABLE1["scalerl-bs512"].A,
          "scalerl_24gen": TABLE1["scalerl-24gen"].A}


def _cli_json(argv, capsys) -> dict:
    main([str(a) for a in argv])
    return json.loads(capsys.readouterr().out)


def _brute_force(x, y, R0, a_grid, cmid_grid):
    """App. A.5 taken literally: curve_fit for B (default initialisation) at every (A, Cmid); lowest SSE wins."""
    best = (np.inf, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for A in a_grid:
            for Cmid in cmid_grid:
                try:
                    (B,), _ = curve_fit(lambda c, B: sigmoid(c, R0, A, B, Cmid), x, y)
                except RuntimeError:
                    continue
                r = y - sigmoid(x, R0, A, B, Cmid)
                if r @ r < best[0]:
                    best = (float(r @ r), (float(A), float(B), float(Cmid)))
    return best[1]


def _window(name, lo=1500.0):
    s = load_series(EXAMPLES / f"{name}.csv", "compute/device_hours", "val/pass_rate")
    m = s.x >= lo
    return s.x[m], s.y[m], float(s.y[s.x == 0][0])


def test_method_paper_is_the_literal_a5_procedure(capsys):
    (f,) = _cli_json(["fit", EXAMPLES / "scalerl_8b.csv", "--method", "paper", "--fit-from", 1500, "--json"], capsys)["fits"]
    x, y, R0 = _window("scalerl_8b")
    A, B, Cmid = _brute_force(x, y, R0, np.round(np.arange(0.450, 0.8001, 0.005), 3), np.linspace(100, 40000, 100))
    assert abs(f["A"] - A) <= 0.005 + 1e-9
    assert abs(f["Cmid"] - Cmid) <= (40000 - 100) / 99 + 1e-6
    assert f["B"] == pytest.approx(B, rel=0.02)


def test_grid_flags_set_the_paper_grids(capsys):
    argv = ["fit", EXAMPLES / "scalerl_bs512.csv", "--method", "paper", "--fit-from", 1500, "--a-grid", "0.55:0.65:0.01",
            "--cmid-grid", "1000:5000:21", "--json"]
    (f,) = _cli_json(argv, capsys)["fits"]
    x, y, R0 = _window("scalerl_bs512")
    A, B, Cmid = _brute_force(x, y, R0, np.round(np.arange(0.55, 0.6501, 0.01), 2), np.linspace(1000, 5000, 21))
    assert (f["A"], f["Cmid"]) == pytest.approx((A, Cmid)) and f["B"] == pytest.approx(B, rel=0.02)
    with pytest.raises(SystemExit) as info:
        main(["fit", str(EXAMPLES / "scalerl_8b.csv"), "--a-grid", "0.5:0.6:0.01"])  # vp has no grid
    assert info.value.code == 2


def test_early_points_are_left_out_by_default_and_R0_stays_fixed():
    x = np.concatenate([[0.0], np.linspace(160, 16000, 100)])
    y = sigmoid(x, 0.3, 0.6, 2.0, 2500) + 0.002 * np.sin(x)
    f = fit_curve(x, y)
    assert f.fit_window[0] >= EARLY_FRACTION * 16000 - 1e-9 and f.fit_window[0] < EARLY_FRACTION * 16000 + 160
    assert f.R0_fixed and f.R0 == pytest.approx(y[0])
    assert fit_curve(x, y, fit_from=0).fit_window[0] == 160  # 0: from the first evaluation
    assert default_fit_from(x[:8]) < 160 * 2  # a short curve keeps at least six points
    # the live forecast fits the same window
    from scalerl.config import ForecastConfig
    from scalerl.forecast import Forecaster

    fc = Forecaster(ForecastConfig())
    for c, r in zip(x, y):
        out = fc.update(float(c), float(r))
    assert out["forecast/A"] == pytest.approx(f.A) and out["forecast/B"] == pytest.approx(f.B)


def test_compare_refits_at_the_shared_A_with_the_runs_method():
    fits = []
    for name in ("scalerl_8b", "scalerl_bs512"):
        s = load_series(EXAMPLES / f"{name}.csv", "compute/device_hours", "val/pass_rate")
        fits.append(fit_curve(s.x, s.y, method="paper", fit_from=1500, ci=False))
    result = compare_fits(fits, margin=0.05)
    for r in result.ranked:
        assert r.refit is not None and r.refit.method == "paper"
        assert r.refit.Cmid in set(np.linspace(100, 40000, 100))  # a point of the paper's Cmid grid


def test_power_law_overshoots_A_and_extrapolates_worse_than_the_sigmoid(capsys):
    """App. A.4: fitted on 1.5k–8k GPU-h and scored on 8k–16k, the power law's A runs far above the truth while
    the sigmoid's stays within the ±0.02 margin, and the sigmoid's held-out error is lower on average."""
    err = {"sigmoid": [], "power": []}
    for name, true_A in TRUE_A.items():
        for model in ("sigmoid", "power"):
            argv = ["fit", EXAMPLES / f"{name}.csv", "--model", model, "--fit-from", 1500, "--fit-until", 8000, "--json"]
            (f,) = _cli_json(argv, capsys)["fits"]
            assert f["model"] == model
            err[model].append(f["heldout"]["mean_abs_err"])
            if model == "sigmoid":
                assert abs(f["A"] - true_A) < 0.02
            else:
                assert f["A"] - true_A > 0.08
    assert np.mean(err["sigmoid"]) < 0.7 * np.mean(err["power"])


def _gpuh_curve(seed, R0, A, B, Cmid, sd=0.005):
    """Eq. 1 with white noise every 160 GPU-hours to 16k (the paper's scale), R0 measured at compute 0."""
    from tests.test_curves_compare import noisy_sigmoid

    return noisy_sigmoid(np.arange(0, 16001, 160, dtype=float), seed, R0, A, B, Cmid, sd)


def test_a_grid_methods_optimum_on_the_edge_of_its_grid_is_not_identified():
    """The paper's literal A grid is [0.45, 0.80]: a run whose ceiling is 0.30 came back as A = 0.450, outside its own
    interval [0.296, 0.303], marked identified with no warning, and compare tied it with a 0.40 run and put it first."""
    from scalerl.curves import compare_fits, fit_curve

    low = fit_curve(*_gpuh_curve(1, 0.05, 0.30, 1.8, 3000), method="paper", source="low")
    assert low.A == 0.45 and not low.identified
    assert any("on the edge of the paper method's A grid [0.45, 0.8]" in w for w in low.warnings)
    assert low.A_ci[0] < 0.31  # the interval is the data's: it holds the true 0.30 ...
    assert low.format_A().startswith("≥ 0.29")  # ... and its lower end is what the table shows
    high = fit_curve(*_gpuh_curve(3, 0.05, 0.40, 1.0, 3000), method="paper", source="high")
    ranked = [r.fit.source for r in compare_fits([low, high]).ranked]
    assert ranked == ["high", "low"]  # by the lower ends the data give, not a tie at the grid's edge
    # the same data by the default method, and the paper method on a grid that holds the optimum: identified
    assert fit_curve(*_gpuh_curve(1, 0.05, 0.30, 1.8, 3000), source="vp").identified
    import numpy as np

    inside = fit_curve(*_gpuh_curve(1, 0.05, 0.30, 1.8, 3000), method="paper", a_grid=np.arange(0.2, 0.5, 0.005),
                       source="wide")
    assert inside.identified and abs(inside.A - 0.30) < 0.01 and not any("edge" in w for w in inside.warnings)
    # and a Cmid on the edge of its grid: the paper's Cmid grid starts at 100 GPU-hours
    fast = fit_curve(*_gpuh_curve(2, 0.05, 0.60, 3.0, 40), method="paper", source="fast")
    assert not fast.identified and any("Cmid grid" in w for w in fast.warnings)
