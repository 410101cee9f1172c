"""Synthetic validation curves with the paper's parameters (Table 1) and a realistic evaluation noise (§2.1).

The paper evaluates mean@16 on 1,000 held-out prompts every 100 steps (§2.1). A simulated evaluation here draws,
at each compute, 16 Bernoulli samples for each of 1,000 prompts whose pass probabilities differ by a fixed
per-prompt difficulty (a logit offset), calibrated so that the *mean* pass probability equals Eq. 1 exactly.
On top, a slow drift of the policy (an AR(1) in reward, φ ≈ 0.9) makes consecutive evaluations correlated, as
they are in real runs. Used by the tests, ``bench/fit_speed.py`` and ``examples/curves/make_example.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from scalerl.curves.sigmoid import Array, sigmoid


@dataclass(frozen=True)
class CurveParams:
    """Eq. 1's parameters for one run. ``R0`` is not in Table 1; the value used here is an assumption."""

    R0: float
    A: float
    B: float
    Cmid: float


# Table 1 (App. A.13): Cmid in GPU-hours, B, A. R0 is not reported; 0.30 is an assumed starting pass rate.
TABLE1: dict[str, CurveParams] = {
    "scalerl-8b": CurveParams(0.30, 0.610, 1.92, 2542.0),
    "scalerl-32k": CurveParams(0.30, 0.645, 1.89, 11272.0),
    "scalerl-8gen": CurveParams(0.30, 0.585, 2.44, 2542.0),
    "scalerl-24gen": CurveParams(0.30, 0.590, 2.22, 3054.0),
    "scalerl-32gen": CurveParams(0.30, 0.595, 2.07, 2936.0),
    "scalerl-scout": CurveParams(0.30, 0.710, 1.65, 4242.0),
    "scalerl-bs512": CurveParams(0.30, 0.605, 1.77, 2818.0),
    "scalerl-bs2048": CurveParams(0.30, 0.645, 1.70, 10909.0),
    "math+code-math": CurveParams(0.30, 0.595, 2.05, 2896.0),
    "math+code-code": CurveParams(0.30, 0.615, 1.09, 1675.0),
}


def _calibrated_logits(target: Array, difficulty: Array) -> Array:
    """Per-compute logit shift g with ``mean_i expit(g − d_i) = target`` (Newton; the mean is monotone in g)."""
    g = np.log(target / (1 - target))
    for _ in range(50):
        p = expit(g[:, None] - difficulty[None, :])
        f = p.mean(axis=1) - target
        g = g - f / np.maximum((p * (1 - p)).mean(axis=1), 1e-12)
        if np.max(np.abs(f)) < 1e-12:
            break
    return g


def simulate_eval_curve(
    params: CurveParams,
    compute: Array,
    *,
    n_prompts: int = 1000,
    n_samples: int = 16,
    difficulty_sd: float = 1.5,
    drift_sd: float = 0.01,
    drift_phi: float = 0.9,
    seed: int = 0,
) -> Array:
    """Measured validation pass rates at each ``compute`` for a run whose expected curve is Eq. 1 with ``params``.

    ``drift_sd`` is the stationary standard deviation of the AR(1) drift (φ = ``drift_phi``) in reward units."""
    rng = np.random.default_rng(seed)
    compute = np.asarray(compute, dtype=float)
    truth = np.clip(sigmoid(compute, params.R0, params.A, params.B, params.Cmid), 1e-6, 1 - 1e-6)
    difficulty = rng.normal(0.0, difficulty_sd, n_prompts)
    p = expit(_calibrated_logits(truth, difficulty)[:, None] - difficulty[None, :])
    evals = rng.binomial(n_samples, p).mean(axis=1) / n_samples
    drift = np.empty(compute.size)
    level = rng.normal(0.0, drift_sd)
    innovation_sd = drift_sd * np.sqrt(1 - drift_phi**2)
    for t in range(compute.size):
        drift[t] = level
        level = drift_phi * level + rng.normal(0.0, innovation_sd)
    return np.clip(evals + drift, 0.0, 1.0)
