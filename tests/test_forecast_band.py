"""The forecast band's parameter term (issue #26): the uncertainty of Eq. 1's further gain, from the law refitted at
the ends of A's profile interval (App. A.5), in the share of the gain the forecast follows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.special import ndtri

from scalerl.curves import fit_curve, load_series, trust

TESTBED = Path(__file__).resolve().parent / "data" / "testbed"


def _flat_level(level: float = 0.5) -> trust.Level:
    return trust.Level(law_end=level, state=0.0, var=0.0, phi=0.0, drift=0.0, noise=0.0, spacing=1.0, tail_bias=0.0)


def test_gain_sd_is_the_largest_gain_difference_over_the_interval_quantile():
    # law gain from x_end = 1 to c = 3: 2; alternatives: 4 and 1 -> differences 2 and 1; z = 2 -> sd 1.0
    law = lambda c: np.asarray(c, dtype=float)  # noqa: E731
    alts = (lambda c: 2 * np.asarray(c, dtype=float), lambda c: 0.5 * np.asarray(c, dtype=float))
    fc = trust.Forecast(0.0, 1.0, _flat_level(), 1.0, 0.0, False, alts, 2.0)
    assert float(fc.gain_sd(law, 3.0)) == pytest.approx(1.0)
    assert float(fc.sd(law, 3.0)) == pytest.approx(1.0)  # noise, level and horizon drift are all 0 here
    assert float(fc.gain_sd(law, 1.0)) == 0.0 and float(fc.gain_sd(law, 0.5)) == 0.0  # nothing ahead yet
    half = trust.Forecast(0.0, 1.0, _flat_level(), 0.5, 0.0, False, alts, 2.0)
    assert float(half.sd(law, 3.0)) == pytest.approx(0.5)  # only the followed share of the gain is uncertain
    held = trust.Forecast(0.0, 1.0, _flat_level(), 0.0, 0.0, False, alts, 2.0)
    assert float(held.sd(law, 3.0)) == 0.0
    lo, hi = fc.interval(law, 3.0, 0.8)
    assert float(hi - lo) == pytest.approx(2 * float(ndtri(0.9)) * 1.0)


def test_a_fit_before_the_midpoint_gets_a_band_as_wide_as_its_interval_on_A_allows():
    """A real testbed run (tests/data/testbed/PROVENANCE.txt), fitted on the first quarter of its budget: the curve
    is smooth, so noise alone gave a band [0.752, 0.859] at the budget around a forecast of 0.806, and the run
    ended at 0.741. A's interval ([0.73, 1.0]) allows that end; the band now does too."""
    s = load_series(TESTBED / "scalerl_s1.csv", x="device_hours", y="pass_rate")
    budget, end = float(s.x.max()), float(np.mean(s.y[-3:]))
    f = fit_curve(s.x, s.y, fit_until_fraction=0.25)
    assert not f.identified and f.A_ci[0] <= end  # the data allowed this end
    lo, hi = f.forecast_interval(np.array([budget]), 0.8)
    assert lo[0] <= end <= hi[0]
    # and the band's parameter term is what widened it: the law refitted at A's interval ends sets its size
    fc = f.forecaster
    assert fc.alternatives and float(fc.gain_sd(f.predict, budget)) > 0.02
    near_lo, near_hi = f.forecast_interval(np.array([f.fit_window[1] * 1.05]), 0.8)
    assert near_hi[0] - near_lo[0] < hi[0] - lo[0]  # the band still widens with the horizon


def test_a_fixed_A_has_no_parameter_term():
    s = load_series(TESTBED / "scalerl_s1.csv", x="device_hours", y="pass_rate")
    f = fit_curve(s.x, s.y, fit_until_fraction=0.25, A=0.75)
    assert f.forecaster.alternatives == ()


def test_a_window_the_law_passes_through_exactly_still_has_a_band():
    # compute 0 fixes R0; three more points fix A, B and Cmid exactly: the residuals are 0 and say nothing about the
    # noise, so the noise is read from the successive differences (no band of zero width)
    f = fit_curve([0.0, 1.0, 2.0, 3.0], [0.5, 0.55, 0.58, 0.6])
    assert f.n_points == 3 and f.rmse < 1e-6
    lo, hi = f.forecast_interval(np.array([3.0]), 0.8)
    assert hi[0] - lo[0] > 0.02


def test_the_level_band_holds_the_combined_estimates_distance_from_the_filter():
    # the forecast's residual is the mean of the filter's state (0.04) and the tail's mean (0.0): 0.02; with no
    # noise and a certain filter (var 0), its squared error under the filter's model is the gap (0.02)^2, not 0
    now = trust.Level(law_end=0.5, state=0.04, var=0.0, phi=1.0, drift=0.0, noise=0.0, spacing=1.0, tail_bias=0.0)
    resid, var = now.ahead(np.asarray(1.0), 1.0)
    assert float(resid) == pytest.approx(0.02) and float(var) == pytest.approx(0.02**2)
    # with phi = 0.5, two steps ahead the state has decayed to 0.01: residual 0.005, gap 0.005, and the filter's
    # own terms: var·phi^4 + drift·(1 − phi^4) + noise = 0.001·0.0625 + 0.002·0.9375 + 0.0001
    now = trust.Level(law_end=0.5, state=0.04, var=0.001, phi=0.5, drift=0.002, noise=0.0001, spacing=1.0,
                      tail_bias=0.0)
    resid, var = now.ahead(np.asarray(3.0), 1.0)
    assert float(resid) == pytest.approx(0.005)
    assert float(var) == pytest.approx(0.001 * 0.0625 + 0.002 * 0.9375 + 0.0001 + 0.005**2)
    # a held level (after a fall) is the last value itself: no gap
    held = now.held_at(0.45)
    assert float(held.ahead(np.asarray(3.0), 1.0)[1]) == pytest.approx(0.001 * 0.0625 + 0.002 * 0.9375 + 0.0001)


def test_a_band_at_the_window_end_is_not_zero_wide_when_the_noise_model_reads_all_drift():
    """A published run that collapses and recovers (tests/data/curves, cs336 question-only prompt): the noise
    model put every residual into drift (noise 0) and the filter was certain of the last residual, so the 80% band
    at the window's last step was [0.393, 0.393], excluding the 0.438 measured there."""
    s = load_series(Path(__file__).resolve().parent / "data" / "curves" /
                    "cs336-damek_qwen25-math-15b_grpo-question-only_gsm8k.csv", x="step", y="value")
    f = fit_curve(s.x, s.y, predict_at=[float(s.x.max())], source="q")
    assert f.forecaster.now.noise == 0.0  # the case: every residual read as drift
    lo, hi = (float(v[0]) for v in f.forecast_interval(np.asarray([float(s.x.max())]), level=0.8))
    assert hi - lo > 0.05 and lo <= float(s.y[-1]) <= hi
