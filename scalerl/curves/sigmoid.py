"""The compute–reward laws of the paper: the sigmoid of Eq. 1, its inverse, its linearised "slope" form (Fig. 7),
and the power law it reduces to at high compute (App. A.4).

All functions are numpy-vectorised and take compute ``C ≥ 0``. ``C = 0`` is the start of training: the sigmoid
gives exactly ``R0`` there (docs/architecture.md: "a compute value of 0 with a reward is the initial reward R0").
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import expit

Array = NDArray[np.float64]


def _log_compute(c: ArrayLike) -> Array:
    c = np.asarray(c, dtype=float)
    with np.errstate(divide="ignore"):
        return np.log(c)  # log 0 = -inf gives a compute-efficiency factor of exactly 0


def efficiency(c: ArrayLike, B: ArrayLike, Cmid: ArrayLike) -> Array:
    """Eq. 1's "compute efficiency" factor ``1 / (1 + (Cmid/C)^B)``, in (0, 1); 0 at C = 0, 1/2 at C = Cmid.

    Written as ``expit(B·(log C − log Cmid))`` so that it neither overflows nor divides by zero."""
    return expit(np.asarray(B, dtype=float) * (_log_compute(c) - np.log(np.asarray(Cmid, dtype=float))))


def sigmoid(c: ArrayLike, R0: ArrayLike, A: ArrayLike, B: ArrayLike, Cmid: ArrayLike) -> Array:
    """Eq. 1: ``R(C) = R0 + (A − R0) / (1 + (Cmid/C)^B)``."""
    R0 = np.asarray(R0, dtype=float)
    return R0 + (np.asarray(A, dtype=float) - R0) * efficiency(c, B, Cmid)


def sigmoid_inverse(r: ArrayLike, R0: float, A: float, B: float, Cmid: float) -> Array:
    """The compute at which Eq. 1 reaches reward ``r``: ``Cmid · (f/(1−f))^(1/B)`` with ``f = (r−R0)/(A−R0)``.

    Returns 0 where ``r`` is at or before ``R0`` and ``inf`` where the curve never gets there (``r`` at or past A)."""
    r = np.asarray(r, dtype=float)
    if A == R0:
        return np.where(r == R0, 0.0, np.inf)
    f = (r - R0) / (A - R0)
    with np.errstate(divide="ignore", invalid="ignore"):
        c = Cmid * (f / (1.0 - f)) ** (1.0 / B)
    return np.where(f <= 0, 0.0, np.where(f >= 1, np.inf, c))


def linearised(r: ArrayLike, R0: float, A: float, B: float, Cmid: float) -> Array:
    """Fig. 7: ``F(R) = Cmid^B / ((A − R0)/(R − R0) − 1)``, which equals ``C^B`` on the curve, so ``log F`` against
    ``log C`` is a line of slope B. NaN where R is not strictly between R0 and A (F is undefined there)."""
    r = np.asarray(r, dtype=float)
    f = (r - R0) / (A - R0) if A != R0 else np.full_like(r, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        F = Cmid**B / (1.0 / f - 1.0)
    return np.where((f > 0) & (f < 1), F, np.nan)


def power_law(c: ArrayLike, A: float, D: float, B: float) -> Array:
    """App. A.4: ``R(C) = A − D·C^(−B)`` (valid above a threshold compute C0).

    For ``C ≫ Cmid`` the sigmoid tends to it with ``D = (A − R0)·Cmid^B`` (see :func:`power_law_from_sigmoid`)."""
    c = np.asarray(c, dtype=float)
    with np.errstate(divide="ignore"):
        return A - D * c ** (-B)


def power_law_from_sigmoid(R0: float, A: float, B: float, Cmid: float) -> tuple[float, float, float]:
    """The high-compute power law ``(A, D, B)`` that Eq. 1 approaches: ``D = (A − R0)·Cmid^B`` (App. A.4)."""
    return A, (A - R0) * Cmid**B, B
