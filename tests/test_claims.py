"""The replicate claims (§3.1, §3.2, §4, Fig. 7) on runs with known curves: pooled fits recover the parameters, and each
verdict follows its rule (a direction counts only when identified and every seed agrees; A beyond ±0.02)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from scalerl.curves.sigmoid import sigmoid
from scalerl.experiments.claims import efficiency_claim, higher_A_claim, loo_claim, pooled_fit

C = np.linspace(0, 4.0, 25)


def write_run(path, A, B=2.0, Cmid=1.0, R0=0.2, noise=0.003, seed=0, until=4.0):
    path.mkdir(parents=True)
    x = C[C <= until]
    y = sigmoid(x, R0, A, B, Cmid) + noise * np.random.default_rng(seed).standard_normal(x.size)
    y[0] = R0
    lines = [json.dumps({"step": i, "compute/device_hours": float(c), "val/pass_rate": float(v)})
             for i, (c, v) in enumerate(zip(x, y))]
    (path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return path


def recipe(tmp_path, name, **kw):
    return pooled_fit(name, [write_run(tmp_path / f"{name}-s{s}", seed=s + 10 * len(name), **kw) for s in (0, 1)])


def test_pooled_fit_recovers_the_curve_and_keeps_each_seed(tmp_path):
    r = recipe(tmp_path, "a", A=0.7, B=2.0, Cmid=1.0)
    assert r.fit.identified and r.fit.A == pytest.approx(0.7, abs=0.01) and r.fit.B == pytest.approx(2.0, rel=0.15)
    assert len(r.seeds) == 2 and r.fit.x.size == 2 * C.size
    lo, hi = r.fit.A_ci
    assert lo < 0.7 < hi and hi - lo < 0.05


def test_efficiency_claim_reads_the_midpoint_compute_at_a_common_A(tmp_path):
    fast = recipe(tmp_path, "pipe", A=0.7, Cmid=0.8)
    slow = recipe(tmp_path, "ppo", A=0.7, Cmid=1.6)
    claim = efficiency_claim(fast, slow)
    assert claim.verdict == "yes" and "2.0" in claim.numbers  # ppo needs ~2x the compute
    assert efficiency_claim(slow, fast).verdict == "no"


def test_higher_A_needs_the_margin_and_every_seed(tmp_path):
    dapo = recipe(tmp_path, "dapo", A=0.60)
    assert higher_A_claim([recipe(tmp_path, "cispo", A=0.68), recipe(tmp_path, "gspo", A=0.66)], dapo).verdict == "yes"
    assert higher_A_claim([recipe(tmp_path, "tie", A=0.61)], dapo).verdict == "inconclusive"  # within ±0.02
    assert higher_A_claim([recipe(tmp_path, "low", A=0.52)], dapo).verdict == "no"
    early = recipe(tmp_path, "early", A=0.75, Cmid=3.0, until=1.5)  # stopped before Cmid: not identified
    assert not early.fit.identified
    assert higher_A_claim([early], dapo).verdict == "inconclusive"


def test_loo_claim_yes_when_A_holds_and_B_moves_no_when_A_moves_and_B_does_not(tmp_path):
    base = recipe(tmp_path, "base", A=0.7, B=2.0)
    steep = recipe(tmp_path, "loo-x", A=0.705, B=3.5)
    claim = loo_claim(base, [steep])
    assert claim.verdict == "yes" and "loo-x" in claim.numbers
    lower = recipe(tmp_path, "loo-y", A=0.6, B=2.0)
    assert loo_claim(base, [lower]).verdict == "no"


def test_forecast_check_scores_the_half_fit_and_checks_A_only_when_both_fits_identify_it(tmp_path):
    from scalerl.curves.sigmoid import sigmoid as curve
    from scalerl.experiments.analysis import analyse_run
    from scalerl.experiments.claims import forecast_check as check_run

    def forecast_check(name, run_dir):  # the check reads the report's analysis of the run
        return check_run(analyse_run(run_dir, name))

    # well past Cmid: both the half and the full fit identify A, and the half predicts the end closely
    done = forecast_check("done", write_run(tmp_path / "done", A=0.7, B=3.0, Cmid=0.8, noise=0.002))
    assert done.end_true == pytest.approx(float(json.loads((tmp_path / "done" / "metrics.jsonl").read_text()
                                                           .splitlines()[-1])["val/pass_rate"]))
    assert abs(done.end_pred - float(curve(4.0, 0.2, 0.7, 3.0, 0.8))) < 0.01
    assert done.A_full_identified and done.covers is True and done.row()[-1] == "yes"
    # stopped before Cmid: the full fit cannot identify A, so its A is shown as a bound and nothing is "covered"
    early = forecast_check("early", write_run(tmp_path / "early", A=0.7, B=2.0, Cmid=3.5, noise=0.01, until=2.0))
    assert not early.A_full_identified and early.covers is None
    assert early.row()[5].startswith("≥ ") and early.row()[5].endswith("(not identified)")
