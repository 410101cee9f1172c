"""Benchmark: the two fitting methods of ``scalerl.curves`` against the paper's literal procedure (§2, App. A.5).

Naive reference, on the same curves and the same fit window:
  * the paper's procedure taken literally: A ∈ {0.450, 0.455, …, 0.800}, 100 linearly spaced Cmid ∈ [100, 40000],
    and ``scipy.optimize.curve_fit`` for B at every one of the 7,100 grid points; lowest squared error wins;
  * for the continuous optimum, that winner polished by ``curve_fit`` on (A, B, Cmid) together.

Checks (each on the same problem, so equal errors mean the same optimum):
  * ``--method paper`` run on the paper's literal grids reaches the naive grid optimum (squared error within 1e-6);
  * ``--method vp`` (default) reaches the polished continuous optimum (within 1e-6, or lower);
and the time of each, the ratio to the naive time, and the time of the interval on A.

    python bench/fit_speed.py            # four Table 1 curves, 100 evaluations each
    python bench/fit_speed.py --quick    # two curves
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from scipy.optimize import curve_fit

from scalerl.curves import paper, uncertainty, vp
from scalerl.curves.sigmoid import sigmoid
from scalerl.curves.synthetic import TABLE1, simulate_eval_curve

PAPER_A = np.round(np.arange(0.450, 0.8001, 0.005), 3)
PAPER_CMID = np.linspace(100, 40000, 100)
ROWS = ["scalerl-8b", "scalerl-scout", "scalerl-bs2048", "math+code-code"]


def curve(row: str, seed: int) -> vp.Problem:
    """100 evaluations up to 6.3 × Cmid GPU-h (16k for the 8B run), R0 at compute 0, fitted from 1.5k GPU-h."""
    P = TABLE1[row]
    C = np.concatenate([[0.0], np.linspace(P.Cmid * 0.063, P.Cmid * 6.3, 100)])
    y = simulate_eval_curve(P, C, seed=seed)
    m = C >= 1500
    return vp.Problem(C[m], y[m], R0=float(y[0]))


def sse(p: vp.Problem, A: float, B: float, Cmid: float) -> float:
    r = p.y - sigmoid(p.x, p.R0, A, B, Cmid)
    return float(r @ r)


def naive(p: vp.Problem) -> tuple[float, float, float]:
    """(grid optimum error, polished continuous optimum error, seconds)."""
    t = time.perf_counter()
    best = (np.inf, 0.0, 0.0, 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for A in PAPER_A:
            for Cmid in PAPER_CMID:
                try:
                    (B,), _ = curve_fit(lambda c, B: sigmoid(c, p.R0, A, B, Cmid), p.x, p.y)
                except RuntimeError:
                    continue
                e = sse(p, A, B, Cmid)
                if e < best[0]:
                    best = (e, A, B, Cmid)
        e_grid, A, B, Cmid = best
        bounds = ([p.R0, 1e-3, 1e-6], [1.0, 100.0, np.inf])
        q, _ = curve_fit(lambda c, A, B, Cm: sigmoid(c, p.R0, A, B, Cm), p.x, p.y, p0=(min(A, 1.0), B, Cmid),
                         bounds=bounds, xtol=1e-15, ftol=1e-15, gtol=1e-15, max_nfev=20000)
    return e_grid, min(e_grid, sse(p, *q)), time.perf_counter() - t


def timed(fn, repeat: int = 3):  # noqa: ANN001, ANN201
    best, out = np.inf, None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return out, best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="two curves instead of four")
    args = ap.parse_args()
    rows = ROWS[:2] if args.quick else ROWS
    print(f"{'curve':16s} {'method':7s} {'time s':>8s} {'naive s':>8s} {'speedup':>8s} "
          f"{'SSE':>12s} {'naive SSE':>12s} {'rel diff':>9s}")
    worst_diff, ratios, ci_times, fit_times = 0.0, [], [], []
    for i, row in enumerate(rows):
        p = curve(row, seed=i)
        e_grid, e_cont, t_naive = naive(p)
        q_paper, t_paper = timed(lambda: paper.fit(p, PAPER_A, PAPER_CMID))
        q_vp, t_vp = timed(lambda: vp.fit(p))
        grid = vp.make_grid(p)
        _, t_ci = timed(lambda: uncertainty.profile_interval(p, q_vp, grid))
        for name, q, t, ref in (("paper", q_paper, t_paper, e_grid), ("vp", q_vp, t_vp, e_cont)):
            e = sse(p, q.A, q.B, q.Cmid)
            diff = (e - ref) / ref
            worst_diff = max(worst_diff, diff)
            ratios.append(t_naive / t)
            fit_times.append(t)
            print(f"{row:16s} {name:7s} {t:8.3f} {t_naive:8.1f} {t_naive / t:7.0f}x {e:12.6e} {ref:12.6e} {diff:+9.1e}")
        ci_times.append(t_ci)
        print(f"{row:16s} {'A ci':7s} {t_ci:8.3f}")
    print(f"\nlargest fit time {max(fit_times):.3f} s (target ≤ 1 s); smallest speedup {min(ratios):.0f}x "
          f"(target ≥ 50x); largest interval time {max(ci_times):.3f} s (target ≤ 5 s)")
    print(f"worst relative excess of squared error over the naive optimum: {worst_diff:+.1e} (target ≤ 1e-6)")


if __name__ == "__main__":
    main()
