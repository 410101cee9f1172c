"""The paper's fitting procedure (``--method paper``, §2.1 and App. A.5), made fast.

The paper grid-searches ``A ∈ {0.450, 0.455, …, 0.800}`` and 100 linearly spaced ``Cmid ∈ [100, 40000]``, fits B
with ``scipy.optimize.curve_fit`` at every grid point, and keeps the grid point with the lowest squared error.
Those literal grids (:data:`PAPER_A`, :data:`PAPER_CMID`) are ``--method paper``'s default; they assume a pass
rate against GPU-hours at the paper's scale (``--a-grid``/``--cmid-grid`` change them). ``--method paper-data``
runs the same search on grids taken from the data instead (:func:`data_grids`: A in steps of 0.005 from the
lowest reward in the window up to 1 when bounded; 100 log-spaced Cmid from a tenth of the window's first compute
to ten times its last), for curves in other units. B is found for every grid point at once: the squared error on a dense
log-spaced B grid is evaluated from the projection sums (:mod:`.projection`), and only the grid points whose
parabolic estimate of their best error can compete with the best are refined with a bounded 1-D minimisation.
``bench/fit_speed.py`` checks the optimum against the literal per-point ``curve_fit``.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize_scalar

from scalerl.curves import projection
from scalerl.curves.series import FitError
from scalerl.curves.sigmoid import Array
from scalerl.curves.vp import B_RANGE, Params, Problem

A_STEP = 0.005  # the paper's grid step on A
N_CMID = 100  # the paper's number of Cmid values
N_B = 96  # dense B values per (A, Cmid) before refinement
_SLACK = 1e-3  # relative margin on the parabolic estimate when choosing which grid points to refine
N_REFINE = 64  # at most this many grid points (lowest estimates first) are refined


PAPER_A = np.round(np.arange(0.450, 0.800 + A_STEP / 2, A_STEP), 3)  # App. A.5
PAPER_CMID = np.linspace(100.0, 40000.0, N_CMID)  # App. A.5, GPU-hours


def data_grids(p: Problem) -> tuple[Array, Array]:
    """Data-derived grids over A and Cmid (see the module docstring)."""
    lo = float(p.y.min()) if p.R0 is None else max(float(p.y.min()), p.R0)
    if p.bounded:
        a_grid = np.arange(np.floor(lo / A_STEP) * A_STEP, 1.0 + A_STEP / 2, A_STEP)
        a_grid = a_grid[(a_grid >= 0) & (a_grid <= 1)]
    else:
        span = float(np.ptp(p.y))
        a_grid = np.linspace(lo, float(p.y.max()) + 2 * span, 200)
    cmid_grid = np.geomspace(p.x.min() / 10, p.x.max() * 10, N_CMID)
    return a_grid, cmid_grid


def _sse_at(p: Problem, A: float, Cmid: float, log_B: float) -> float:
    S = projection.sums(p.x, p.y, np.exp(log_B), Cmid)
    return float(projection.solve(S, p.R0, A, p.bounded)[2])


def fit(p: Problem, a_grid: Array | None = None, cmid_grid: Array | None = None) -> Params:
    """The grid point (A, Cmid) with B fitted by least squares that has the lowest squared error; the paper's
    literal grids unless others are given."""
    a_grid = PAPER_A if a_grid is None else np.asarray(a_grid, dtype=float)
    cmid_grid = PAPER_CMID if cmid_grid is None else np.asarray(cmid_grid, dtype=float)
    if p.A is not None:  # a fixed asymptote is a grid of one
        a_grid = np.array([p.A])
    log_b = np.linspace(np.log(B_RANGE[0]), np.log(B_RANGE[1]), N_B)
    S = projection.sums(p.x, p.y, np.exp(log_b)[None, :], cmid_grid[:, None])  # (n_cmid, n_b)
    _, _, sse = projection.solve(S, p.R0, a_grid[:, None, None], p.bounded)  # (n_a, n_cmid, n_b)
    k = np.clip(sse.argmin(axis=2), 1, N_B - 2)
    y0, y1, y2 = (np.take_along_axis(sse, (k + d)[..., None], axis=2)[..., 0] for d in (-1, 0, 1))
    curvature = y0 - 2 * y1 + y2
    with np.errstate(divide="ignore", invalid="ignore"):
        estimate = np.where(curvature > 0, y1 - (y2 - y0) ** 2 / (8 * curvature), y1)
    # the parabola can undershoot below 0 (or give NaN) on flat or step-like profiles: an SSE is never below 0
    attained = sse.min(axis=2)  # the best error each grid point already reaches on the dense B grid
    estimate = np.clip(np.fmin(estimate, attained), 0.0, None)
    # a point competes when its estimate is below the best error *attained* anywhere: the estimate is no bound (the
    # parabola undershoots at a kink or where the B profile still falls at the edge of the B grid), so a cutoff
    # taken from the lowest estimate could exclude the grid's best point and return a far worse one
    cutoff = float(np.nanmin(attained)) * (1 + _SLACK) + 1e-15
    best: Params | None = None
    step = log_b[1] - log_b[0]
    admitted = np.argwhere(estimate <= cutoff)
    if len(admitted) > N_REFINE:  # a flat landscape (a falling or constant curve) admits thousands: keep the best
        admitted = admitted[np.argsort(attained[tuple(admitted.T)], kind="stable")[:N_REFINE]]
    for i, j in admitted:
        A, Cmid, centre = float(a_grid[i]), float(cmid_grid[j]), float(log_b[k[i, j]])
        res = minimize_scalar(
            lambda lb: _sse_at(p, A, Cmid, lb),
            bounds=(max(centre - step, log_b[0]), min(centre + step, log_b[-1])),
            method="bounded",
            options={"xatol": 1e-10},
        )
        # never worse than the grid point's own best B on the dense grid
        lb = float(res.x) if res.fun <= attained[i, j] else float(log_b[sse[i, j].argmin()])
        S1 = projection.sums(p.x, p.y, np.exp(lb), Cmid)
        R0, _, e = projection.solve(S1, p.R0, A, p.bounded)
        if best is None or float(e) < best.sse:
            best = Params(float(R0), A, float(np.exp(lb)), Cmid, float(e))
    if best is None:  # unreachable (the cutoff admits the grid's best point); a FitError rather than a traceback
        raise FitError("the paper-method grid search found no finite fit on this window")
    return best
