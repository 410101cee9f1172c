"""Benchmark: the two fitting methods of ``scalerl.curves`` against the paper's literal procedure (App. A.5).

Naive reference, on the same curves and the same fit window:
  * the paper's procedure taken literally: A ∈ {0.450, 0.455, …, 0.800}, 100 linearly spaced Cmid ∈ [100, 40000],
    and ``scipy.optimize.curve_fit`` for B at every one of the 7,100 grid points; lowest squared error wins;
  * for the continuous optimum, that winner polished by ``curve_fit`` on (A, B, Cmid) together.

Checks (each on the same problem, so equal errors mean the same optimum):
  * ``--method paper`` run on the paper's literal grids reaches the naive grid optimum (squared error within 1e-6);
  * ``--method vp`` (default) reaches the polished continuous optimum (within 1e-6, or lower);
and the time of each, the ratio to the naive time, and the time of the interval on A.

Per curve the naive reference, both methods and the interval run in interleaved rounds (``bench/rounds.py``):
times are median [min-max] over rounds, speed-ups taken within a round, busy-machine rounds flagged loudly.

    python bench/fit_speed.py            # four Table 1 curves, 100 evaluations each, 3 rounds
    python bench/fit_speed.py --quick    # two curves
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.optimize import curve_fit

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/rounds.py
import rounds  # noqa: E402

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


def timed(fn, found: dict, name: str):  # noqa: ANN001, ANN201
    """A side for ``rounds.interleave``: runs ``fn``, keeps its result in ``found[name]``, returns its seconds."""
    def side() -> dict[str, float]:
        t = time.perf_counter()
        found[name] = fn()
        return {"seconds": time.perf_counter() - t}
    return side


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="two curves instead of four")
    rounds.add_arguments(ap)
    args = ap.parse_args()
    rows = ROWS[:2] if args.quick else ROWS
    worst_diff, speedups, ci_times, fit_times = 0.0, [], [], []
    for i, row in enumerate(rows):
        p = curve(row, seed=i)
        grid = vp.make_grid(p)
        found: dict = {}

        def naive_side() -> dict[str, float]:
            *found["naive"], seconds = naive(p)
            return {"seconds": seconds}

        res = rounds.interleave({
            "naive": naive_side,
            "paper": timed(lambda: paper.fit(p, PAPER_A, PAPER_CMID), found, "paper"),
            "vp": timed(lambda: vp.fit(p), found, "vp"),
            "A ci": timed(lambda: uncertainty.profile_interval(p, found["vp"], grid), found, "ci"),
        }, args.rounds, args.threads)
        rounds.report(res, f"{row}: fit times (s)", [("paper", "naive", "seconds", 50.0),
                                                     ("vp", "naive", "seconds", 50.0)], lower_is_better=["seconds"])
        e_grid, e_cont = found["naive"]
        for name, ref in (("paper", e_grid), ("vp", e_cont)):
            q = found[name]
            e = sse(p, q.A, q.B, q.Cmid)
            diff = (e - ref) / ref
            worst_diff = max(worst_diff, diff)
            speedups.append(statistics.median(rounds.ratios(res, name, "naive", "seconds", lower_is_better=True)))
            fit_times.append(statistics.median(r.values["seconds"] for r in res.side(name)))
            print(f"{row:16s} {name:7s} SSE {e:12.6e}  naive SSE {ref:12.6e}  rel diff {diff:+9.1e}")
        ci_times.append(statistics.median(r.values["seconds"] for r in res.side("A ci")))
    print(f"\nlargest median fit time {max(fit_times):.3f} s (target ≤ 1 s); smallest median speedup "
          f"{min(speedups):.0f}x (target ≥ 50x); largest median interval time {max(ci_times):.3f} s (target ≤ 5 s)")
    print(f"worst relative excess of squared error over the naive optimum: {worst_diff:+.1e} (target ≤ 1e-6)")

if __name__ == "__main__":
    main()
