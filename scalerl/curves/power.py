"""The power-law alternative to Eq. 1 (``--model power``, App. A.4): ``R(C) = A − D·C^(−B)`` for ``C ≥ C0``.

For a fixed exponent B the law is linear in (A, D), so the best (A, D) has a closed form (also under the bounds
``A ≤ 1``, ``D ≥ 0`` of a rising pass rate); only B is searched, on a dense log grid refined by a bounded 1-D
minimisation. This is the exact least-squares power law on the fit window, so a comparison with the sigmoid is a
comparison of the laws, not of optimisers. The paper prefers the sigmoid because this law's asymptote is unstable:
it must drop the low-compute points, and on the window it is left with it overshoots A (App. A.4: A = 1.0 from
1.5k–50k GPU-h where the sigmoid finds 0.645); docs/predict.md shows the same on the example curves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar

from scalerl.curves.sigmoid import Array
from scalerl.curves.vp import B_RANGE

N_B = 200


@dataclass(frozen=True)
class PowerParams:
    A: float
    D: float  # in the data's compute units: R = A − D·C^(−B)
    B: float
    sse: float


def _solve(x: Array, y: Array, B: float, A: float | None, bounded: bool) -> tuple[float, float, float]:
    """(A, D', sse) at exponent B with ``t = (x / max x)^(−B)`` (scaled so that large B does not overflow)."""
    t = (x / x.max()) ** (-B)
    if A is None:
        tc, yc = t - t.mean(), y - y.mean()
        tt = float(tc @ tc)
        D = -float(tc @ yc) / tt if tt > 0 else 0.0
        A = float(y.mean() + D * t.mean())
        if bounded and A > 1.0:
            A = 1.0
            D = float((A - y) @ t) / float(t @ t)
        if bounded and D < 0:
            D, A = 0.0, min(float(y.mean()), 1.0)
    else:
        D = float((A - y) @ t) / float(t @ t)
        if bounded:
            D = max(D, 0.0)
    r = y - (A - D * t)
    return A, D, float(r @ r)


def fit(x: Array, y: Array, *, A: float | None = None, bounded: bool = True) -> PowerParams:
    """The least-squares power law on the points ``(x, y)`` (all ``x > 0``); ``A`` fixes the asymptote."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    log_b = np.linspace(np.log(B_RANGE[0]), np.log(B_RANGE[1]), N_B)
    sse = np.array([_solve(x, y, float(np.exp(lb)), A, bounded)[2] for lb in log_b])
    k = int(sse.argmin())
    res = minimize_scalar(
        lambda lb: _solve(x, y, float(np.exp(lb)), A, bounded)[2],
        bounds=(log_b[max(k - 1, 0)], log_b[min(k + 1, N_B - 1)]),
        method="bounded",
        options={"xatol": 1e-10},
    )
    lb = float(res.x) if res.fun <= sse[k] else float(log_b[k])
    B = float(np.exp(lb))
    A_, D_scaled, e = _solve(x, y, B, A, bounded)
    return PowerParams(A_, D_scaled * float(x.max()) ** B, B, e)
