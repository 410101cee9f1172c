"""Variable projection for Eq. 1 (§2.1): for fixed (B, Cmid), the sigmoid is *linear* in (R0, A).

``R(C) = R0·(1 − s) + A·s`` with ``s = efficiency(C; B, Cmid)``, so the best (R0, A) for a given (B, Cmid) is a
2-variable least-squares problem with a closed-form answer, also under the bounds ``0 ≤ R0 ≤ A ≤ 1`` of a bounded
metric (a convex quadratic over a triangle: the unconstrained optimum if it is feasible, else the best of the
three edges). Everything here is vectorised over arbitrary grids of (B, Cmid) and over fixed values of A, so a
whole grid of candidate curves costs a few array operations. The fitters (:mod:`.vp`, :mod:`.paper`) and the
profile interval (:mod:`.uncertainty`) all reduce to these sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scalerl.curves.sigmoid import Array, efficiency

_CHUNK = 2_000_000  # elements of the (grid × points) efficiency array computed at once


@dataclass(frozen=True)
class Sums:
    """Sufficient statistics of the data for every grid point: ``Σs, Σs², Σys`` (grid-shaped) and
    ``n, Σy, Σy²`` (scalars). From them the squared error of any (R0, A) follows without touching the data."""

    n: int
    sy: float
    syy: float
    s: Array
    ss: Array
    ys: Array


def sums(x: Array, y: Array, B: Array | float, Cmid: Array | float) -> Sums:
    """The sums for every (B, Cmid) in the broadcast of ``B`` and ``Cmid``, computed in memory-bounded chunks."""
    B, Cmid = np.broadcast_arrays(np.asarray(B, dtype=float), np.asarray(Cmid, dtype=float))
    shape = B.shape
    if not shape:  # one (B, Cmid), as a local refinement asks for every residual: no chunking to do
        s = efficiency(x, B, Cmid)
        return Sums(int(x.size), float(y.sum()), float(y @ y), s.sum(), s @ s, s @ y)
    Bf, Cf = B.reshape(-1), Cmid.reshape(-1)
    out = np.empty((3, Bf.size))
    step = max(1, _CHUNK // max(1, x.size))
    for i in range(0, Bf.size, step):
        s = efficiency(x[None, :], Bf[i : i + step, None], Cf[i : i + step, None])
        out[0, i : i + step] = s.sum(axis=1)
        out[1, i : i + step] = np.einsum("ij,ij->i", s, s)
        out[2, i : i + step] = s @ y
    return Sums(int(x.size), float(y.sum()), float(y @ y), *(o.reshape(shape) for o in out))


def _sse(S: Sums, R0: Array, A: Array) -> Array:
    # Σ (y − R0·u − A·s)² with u = 1 − s, expanded in the sums
    suu, ssu, syu = S.n - 2 * S.s + S.ss, S.s - S.ss, S.sy - S.ys
    sse = S.syy - 2 * (A * S.ys + R0 * syu) + A * A * S.ss + 2 * A * R0 * ssu + R0 * R0 * suu
    return np.maximum(sse, 0.0)


def _limit(S: Sums) -> float:
    """Without bounds, a linear parameter whose basis vanishes at every point (s ≈ 0: Cmid far beyond the data)
    runs off to ±inf; it is kept within a box a thousand times the data's scale."""
    return 1e3 * (1.0 + float(np.sqrt(S.syy / S.n)))


def solve(
    S: Sums, R0: float | Array | None = None, A: float | Array | None = None, bounded: bool = True
) -> tuple[Array, Array, Array]:
    """Best ``(R0, A)`` and its squared error for every grid point; ``R0`` or ``A`` given means held fixed.

    With ``bounded`` the solution satisfies ``0 ≤ R0 ≤ A ≤ 1`` (a fixed value is taken as given)."""
    tiny = 1e-300
    ss = np.maximum(S.ss, tiny)
    suu = np.maximum(S.n - 2 * S.s + S.ss, tiny)
    ssu, syu = S.s - S.ss, S.sy - S.ys
    if R0 is not None and A is not None:
        R0a, Aa = np.broadcast_arrays(np.asarray(R0, float), np.asarray(A, float))
        return R0a + 0 * ss, Aa + 0 * ss, _sse(S, R0a, Aa)
    if R0 is not None:
        R0a = np.asarray(R0, dtype=float) + 0 * ss
        Aa = (S.ys - R0a * ssu) / ss
        Aa = np.clip(Aa, R0a, 1.0) if bounded else np.clip(Aa, -_limit(S), _limit(S))
        return R0a, Aa, _sse(S, R0a, Aa)
    if A is not None:
        Aa = np.asarray(A, dtype=float) + 0 * ss
        R0a = (syu - Aa * ssu) / suu
        R0a = np.clip(R0a, 0.0, Aa) if bounded else np.clip(R0a, -_limit(S), _limit(S))
        return R0a, Aa, _sse(S, R0a, Aa)
    # both free: normal equations [ss ssu; ssu suu] [A; R0] = [ys; syu]
    det = ss * suu - ssu * ssu
    ok = det > 1e-12 * ss * suu
    det = np.where(ok, det, 1.0)
    Ai = np.where(ok, (S.ys * suu - syu * ssu) / det, S.sy / S.n)
    Ri = np.where(ok, (syu * ss - S.ys * ssu) / det, S.sy / S.n)
    if not bounded:
        Ri, Ai = np.clip(Ri, -_limit(S), _limit(S)), np.clip(Ai, -_limit(S), _limit(S))
        return Ri, Ai, _sse(S, Ri, Ai)
    feasible = (Ri >= 0) & (Ri <= Ai) & (Ai <= 1)
    if feasible.all():  # a convex quadratic's unconstrained optimum inside the triangle is the constrained one
        return Ri, Ai, _sse(S, Ri, Ai)  # (the common case of a local refinement: one point, away from the bounds)
    # the three edges of the triangle 0 ≤ R0 ≤ A ≤ 1, each a clipped one-variable problem
    A_e0 = np.clip(S.ys / ss, 0.0, 1.0)  # R0 = 0
    R_e1 = np.clip((syu - ssu) / suu, 0.0, 1.0)  # A = 1
    c_e2 = np.clip(S.sy / S.n, 0.0, 1.0) + 0 * ss  # R0 = A = c (a flat line)
    cands = [
        (np.where(feasible, Ri, 0.0), np.where(feasible, Ai, 0.0)),
        (0 * ss, A_e0),
        (R_e1, 1.0 + 0 * ss),
        (c_e2, c_e2),
    ]
    errs = np.stack([_sse(S, r, a) for r, a in cands])
    errs[0] = np.where(feasible, errs[0], np.inf)
    k = np.argmin(errs, axis=0)
    R = np.choose(k, [c[0] for c in cands])
    Aout = np.choose(k, [c[1] for c in cands])
    return R, Aout, np.take_along_axis(errs, k[None], axis=0)[0]
