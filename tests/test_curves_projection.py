"""Variable projection (Eq. 1): the closed-form (R0, A) for fixed (B, Cmid), with the bounds 0 ≤ R0 ≤ A ≤ 1,
against a generic constrained solver and numpy's least squares."""

import numpy as np
import pytest
from scipy.optimize import minimize

from scalerl.curves import projection
from scalerl.curves.sigmoid import efficiency


def _data(seed, n=30):
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(10, 1000, n))
    y = np.clip(rng.uniform(-0.2, 1.2) + rng.normal(0, 0.3, n) * np.linspace(0, 1, n), -0.5, 1.5)
    return x, y


def _sse(x, y, B, Cmid, R0, A):
    s = efficiency(x, B, Cmid)
    return float(np.sum((y - R0 * (1 - s) - A * s) ** 2))


@pytest.mark.parametrize("seed", range(12))
def test_bounded_solution_matches_a_constrained_solver(seed):
    x, y = _data(seed)
    B, Cmid = 0.5 + seed * 0.3, 50.0 * (1 + seed)
    R0, A, sse = projection.solve(projection.sums(x, y, B, Cmid), bounded=True)
    cons = [{"type": "ineq", "fun": lambda v: v[0]}, {"type": "ineq", "fun": lambda v: v[1] - v[0]},
            {"type": "ineq", "fun": lambda v: 1 - v[1]}]
    ref = min((minimize(lambda v: _sse(x, y, B, Cmid, *v), v0, constraints=cons, method="SLSQP",
                        options={"ftol": 1e-14, "maxiter": 500}) for v0 in ([0.1, 0.5], [0.5, 0.9], [0.0, 0.0])),
              key=lambda r: r.fun)
    assert 0 <= R0 <= A <= 1
    assert float(sse) == pytest.approx(_sse(x, y, B, Cmid, R0, A), rel=1e-9, abs=1e-12)
    assert float(sse) <= ref.fun * (1 + 1e-7) + 1e-12


@pytest.mark.parametrize("seed", range(4))
def test_unbounded_solution_is_ordinary_least_squares(seed):
    x, y = _data(seed)
    s = efficiency(x, 1.3, 300.0)
    coef, *_ = np.linalg.lstsq(np.column_stack([1 - s, s]), y, rcond=None)
    R0, A, sse = projection.solve(projection.sums(x, y, 1.3, 300.0), bounded=False)
    assert [float(R0), float(A)] == pytest.approx(list(coef), rel=1e-8, abs=1e-10)


def test_fixed_parameters_and_clipping():
    x = np.array([100.0, 200.0, 400.0, 800.0])
    s = efficiency(x, 2.0, 200.0)
    y = 0.2 * (1 - s) + 0.7 * s
    S = projection.sums(x, y, 2.0, 200.0)
    R0, A, sse = projection.solve(S, R0=0.2)
    assert float(A) == pytest.approx(0.7) and float(sse) == pytest.approx(0.0, abs=1e-14)
    R0, A, sse = projection.solve(S, A=0.7)
    assert float(R0) == pytest.approx(0.2)
    # data that wants A > 1 is clipped to the bound when bounded, not when unbounded
    y2 = 0.2 * (1 - s) + 1.4 * s
    S2 = projection.sums(x, y2, 2.0, 200.0)
    assert float(projection.solve(S2, R0=0.2)[1]) == 1.0
    assert float(projection.solve(S2, R0=0.2, bounded=False)[1]) == pytest.approx(1.4)


@pytest.mark.parametrize("seed", range(12))
def test_one_point_gives_the_grid_paths_numbers(seed):
    """A single (B, Cmid), as every residual of a local refinement asks for, skips the chunked grid path in
    ``sums`` and, when the unconstrained optimum is feasible, the triangle's edges in ``solve``: the numbers are
    the grid path's (the grid here has a second point, so it takes the full path)."""
    x, y = _data(seed)
    B, Cmid = 0.5 + seed * 0.3, 50.0 * (1 + seed)
    one = projection.sums(x, y, B, Cmid)
    grid = projection.sums(x, y, np.array([[B, 1.0]]), np.array([[Cmid, 10.0]]))
    for name in ("s", "ss", "ys"):
        assert float(getattr(one, name)) == pytest.approx(float(getattr(grid, name)[0, 0]), rel=1e-12)
    for R0, A in ((None, None), (0.1, None), (None, 0.9)):
        got, ref = projection.solve(one, R0, A, True), projection.solve(grid, R0, A, True)
        assert [float(v) for v in got] == pytest.approx([float(v[0, 0]) for v in ref], rel=1e-9, abs=1e-12)


def test_grid_shapes_broadcast_and_chunk(monkeypatch):
    x, y = _data(0, n=50)
    B, C = np.geomspace(0.5, 4, 7)[:, None], np.geomspace(20, 2000, 5)[None, :]
    full = projection.sums(x, y, B, C)
    monkeypatch.setattr(projection, "_CHUNK", 60)  # force several chunks
    chunked = projection.sums(x, y, B, C)
    assert full.s.shape == (7, 5)
    assert np.allclose(full.ys, chunked.ys) and np.allclose(full.ss, chunked.ss)
    _, _, sse = projection.solve(full)
    i, j = 3, 2
    assert sse[i, j] == pytest.approx(float(projection.solve(projection.sums(x, y, B[i, 0], C[0, j]))[2]))
