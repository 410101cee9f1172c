"""The default fitter (``--method vp``): variable projection over (B, Cmid) for Eq. 1 (§2.1).

For fixed (B, Cmid) the best (R0, A) has a closed form (:mod:`.projection`), so the search is only
two-dimensional: a vectorised log-spaced grid over (B, Cmid) finds the basin, and ``scipy.optimize.least_squares``
refines the best few grid minima on the projected residual (Golub–Pereyra). This finds the global least-squares
optimum of the 3- or 4-parameter problem without the initial-guess sensitivity of a plain ``curve_fit``, and
costs a few milliseconds for a 100-point curve (``bench/fit_speed.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from scalerl.curves import projection
from scalerl.curves.sigmoid import Array, efficiency

B_RANGE = (0.05, 20.0)  # Eq. 1 steepness searched; the paper's fits have B ≈ 1.1–2.5 (Table 1)
CMID_SPAN = 100.0  # Cmid searched from (smallest positive compute)/100 to (largest compute)·100
N_B, N_CMID = 48, 64
N_STARTS = 3


@dataclass(frozen=True)
class Problem:
    """One fitting problem: the points of the fit window (compute > 0), what is held fixed, and the bounds."""

    x: Array
    y: Array
    R0: float | None = None  # fixed initial reward (from a point at compute 0), or None to fit it
    A: float | None = None  # fixed asymptote (compare's refit at a common A, the profile interval), or None
    bounded: bool = True  # 0 ≤ R0 ≤ A ≤ 1

    @property
    def n_params(self) -> int:
        return 2 + (self.R0 is None) + (self.A is None)

    @property
    def log_B_bounds(self) -> tuple[float, float]:
        return float(np.log(B_RANGE[0])), float(np.log(B_RANGE[1]))

    @property
    def log_Cmid_bounds(self) -> tuple[float, float]:
        return float(np.log(self.x.min() / CMID_SPAN)), float(np.log(self.x.max() * CMID_SPAN))

    def fixing(self, A: float) -> "Problem":
        return replace(self, A=A)


@dataclass(frozen=True)
class Params:
    R0: float
    A: float
    B: float
    Cmid: float
    sse: float


@dataclass(frozen=True)
class Grid:
    """The (B, Cmid) grid and its sums, kept so that profiles over A reuse them without touching the data."""

    B: Array  # shape (N_B, 1)
    Cmid: Array  # shape (1, N_CMID)
    sums: projection.Sums


def make_grid(p: Problem) -> Grid:
    B = np.exp(np.linspace(*p.log_B_bounds, N_B))[:, None]
    Cmid = np.exp(np.linspace(*p.log_Cmid_bounds, N_CMID))[None, :]
    return Grid(B, Cmid, projection.sums(p.x, p.y, B, Cmid))


def at(p: Problem, B: float, Cmid: float) -> Params:
    """The projected solution (best R0, A) at one (B, Cmid)."""
    R0, A, sse = projection.solve(projection.sums(p.x, p.y, B, Cmid), p.R0, p.A, p.bounded)
    return Params(float(R0), float(A), float(B), float(Cmid), float(sse))


def _residual(theta: Array, p: Problem) -> Array:
    B, Cmid = np.exp(theta)
    q = at(p, B, Cmid)
    s = efficiency(p.x, B, Cmid)
    return p.y - (q.R0 * (1 - s) + q.A * s)


def refine(p: Problem, B: float, Cmid: float, tol: float = 1e-12) -> Params:
    """Local least-squares refinement of (log B, log Cmid) on the projected residual, within the search box.

    The Jacobian is taken by finite differences of the *projected* residual, so it includes how the optimal
    (R0, A) move with (B, Cmid); Kaufman's cheaper approximation drops that term and, because A and Cmid are
    strongly correlated along the curve's ridge, needed 5–10× more iterations here."""
    lo, hi = zip(p.log_B_bounds, p.log_Cmid_bounds)
    theta0 = np.clip(np.log([B, Cmid]), lo, hi)
    res = least_squares(
        _residual, theta0, jac="2-point", bounds=(lo, hi), args=(p,), method="trf", xtol=tol, ftol=tol, gtol=tol
    )
    return at(p, *np.exp(res.x))


def grid_minima(sse: Array, k: int) -> list[tuple[int, int]]:
    """Indices of the ``k`` lowest local minima of a 2-D array (each no larger than its 8 neighbours)."""
    padded = np.pad(sse, 1, constant_values=np.inf)
    rows, cols = sse.shape
    neigh = [padded[1 + di : 1 + di + rows, 1 + dj : 1 + dj + cols] for di in (-1, 0, 1) for dj in (-1, 0, 1)]
    is_min = sse <= np.min(neigh, axis=0)
    idx = np.argwhere(is_min)
    order = np.argsort(sse[is_min], kind="stable")[:k]
    return [tuple(map(int, idx[i])) for i in order]


def fit(p: Problem, grid: Grid | None = None, n_starts: int = N_STARTS, tol: float = 1e-12) -> Params:
    """The least-squares optimum of Eq. 1 for problem ``p``: grid over (B, Cmid), then local refinement of the
    ``n_starts`` best grid minima to ``tol``. ``grid`` (from :func:`make_grid` on the same points) saves
    recomputing sums."""
    g = grid or make_grid(p)
    _, _, sse = projection.solve(g.sums, p.R0, p.A, p.bounded)
    best = [refine(p, float(g.B[i, 0]), float(g.Cmid[0, j]), tol) for i, j in grid_minima(sse, n_starts)]
    return min(best, key=lambda q: q.sse)
