"""Eq. 1, its inverse, its linearised form (Fig. 7) and the power law it tends to (App. A.4), against hand-worked values."""

import numpy as np
import pytest

from scalerl.curves.sigmoid import efficiency, linearised, power_law, power_law_from_sigmoid, sigmoid, sigmoid_inverse


def test_eq1_hand_worked_values():
    # R0=0.2, A=0.6, B=2, Cmid=100: at C=100 half the gain; at C=200, (Cmid/C)^B = 1/4 -> gain 0.4 * 4/5
    assert sigmoid(100.0, 0.2, 0.6, 2.0, 100.0) == pytest.approx(0.4)
    assert sigmoid(200.0, 0.2, 0.6, 2.0, 100.0) == pytest.approx(0.2 + 0.4 * 0.8)
    assert sigmoid(50.0, 0.2, 0.6, 2.0, 100.0) == pytest.approx(0.2 + 0.4 * 0.2)


def test_compute_zero_is_r0_and_large_compute_tends_to_a():
    c = np.array([0.0, 1e-300, 1e300])
    r = sigmoid(c, 0.3, 0.61, 1.92, 2542.0)
    assert r[0] == 0.3 and r[1] == pytest.approx(0.3) and r[2] == pytest.approx(0.61)
    assert np.all(np.isfinite(efficiency(c, 50.0, 1e-5)))  # no overflow for steep curves


def test_inverse_round_trip_and_unreachable():
    c = np.geomspace(10, 1e5, 9)
    r = sigmoid(c, 0.3, 0.61, 1.92, 2542.0)
    assert np.allclose(sigmoid_inverse(r, 0.3, 0.61, 1.92, 2542.0), c, rtol=1e-9)
    assert sigmoid_inverse(0.61, 0.3, 0.61, 1.92, 2542.0) == np.inf
    assert sigmoid_inverse(0.7, 0.3, 0.61, 1.92, 2542.0) == np.inf
    assert sigmoid_inverse(0.2, 0.3, 0.61, 1.92, 2542.0) == 0.0


def test_linearised_form_is_c_to_the_b():
    # Fig. 7: F(R_C) = C^B on the curve, so log F against log C has slope B
    c = np.geomspace(100, 50000, 20)
    R0, A, B, Cmid = 0.3, 0.645, 1.70, 10909.0
    F = linearised(sigmoid(c, R0, A, B, Cmid), R0, A, B, Cmid)
    assert np.allclose(F, c**B, rtol=1e-8)
    slope = np.polyfit(np.log(c), np.log(F), 1)[0]
    assert slope == pytest.approx(B, rel=1e-9)
    assert np.isnan(linearised(np.array([0.2, 0.7]), R0, A, B, Cmid)).all()  # outside (R0, A)


def test_sigmoid_tends_to_power_law_at_high_compute():
    # App. A.4: for C >> Cmid, R ≈ A − D·C^-B with D = (A − R0)·Cmid^B
    R0, A, B, Cmid = 0.3, 0.61, 1.92, 2542.0
    A2, D, B2 = power_law_from_sigmoid(R0, A, B, Cmid)
    c = np.array([1e5, 1e6])
    gap_sig = A - sigmoid(c, R0, A, B, Cmid)
    gap_pow = A2 - power_law(c, A2, D, B2)
    assert np.allclose(gap_sig / gap_pow, 1.0, rtol=1e-2)
    assert power_law(4.0, 1.0, 2.0, 0.5) == pytest.approx(0.0)  # 1 − 2/√4
