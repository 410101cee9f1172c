"""How far below the best naive forecast can any forecast of a real curve go? (issue #26's targets, measured)

``bench/forecast_backtest.py`` scores scalerl's forecast of the held-out part of each real curve against four naive
forecasts (last value, mean of the last 3, log-linear, power law). Its target for a set is a mean error at most
0.85× that of the naive method with the smallest mean on the set (chosen in hindsight, per set and cut). This
script puts beside it what forecasts that *know the held-out part* reach on the same curves, the same cuts and the
same scored curves (those scalerl scored):

  per-curve best naive   the best of the four naive forecasts picked per curve in hindsight: what a perfect
                         selector among them would score (``ratio_to_per_curve_best`` of the backtest, inverted);
  hindsight level        the held-out points' own median held flat: the best constant forecast (by mean absolute
                         error) of each curve's held-out part;
  noise floor            the evaluation noise alone: the mean absolute second difference of the held-out points
                         over √1.5 (for white noise of sd σ around a locally straight curve, E|y_j − (y_{j−1} +
                         y_{j+1})/2| = σ·√1.5·√(2/π), and a perfect forecast's mean absolute error is σ·√(2/π));
                         curves with fewer than 3 held-out points are left out of this column.

Each column is a mean over the set's scored curves divided by the best naive method's mean (lower is better; the
target for scalerl is ≤ 0.85). A set whose per-curve best naive is above 0.85 is one where picking the right naive
forecast for every curve, with hindsight, would not meet the target; the gap between a column and scalerl is the
room left to a forecaster that knows only the fit window.

    python bench/forecast_headroom.py                         # every set under bench/curves, cuts 0.25, 0.5, 0.75
    python bench/forecast_headroom.py --cuts 0.5 --corpus bench/curves/holdout5
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import forecast_backtest as fb  # noqa: E402

from scalerl.curves.series import Series  # noqa: E402
from scalerl.errors import UserError  # noqa: E402

COLUMNS = ("scalerl", "per-curve best naive", "hindsight level", "noise floor")


def heldout_part(series: Series, cut: float) -> np.ndarray:
    """The held-out values at ``cut`` (x above cut·max x), as ``forecast_backtest.backtest_curve`` splits them."""
    x, y = np.asarray(series.x, float), np.asarray(series.y, float)
    return y[x > cut * float(x.max())]


def hindsight_level_err(yh: np.ndarray) -> float:
    """Mean absolute error of the held-out points' own median held flat (the best constant in hindsight)."""
    return float(np.mean(np.abs(yh - np.median(yh))))


def noise_floor(yh: np.ndarray) -> float | None:
    """The mean absolute error a perfect forecast would make on white evaluation noise around a locally straight
    curve, estimated from the held-out points' second differences; None with fewer than 3 points."""
    if yh.size < 3:
        return None
    return float(np.mean(np.abs(yh[1:-1] - (yh[:-2] + yh[2:]) / 2))) / np.sqrt(1.5)


def headroom(series: list[Series], cut: float, set_name: str) -> dict[str, object]:
    """One set at one cut: the best naive method and each column's mean over its mean (see the module docstring)."""
    crashes: list[fb.Crash] = []
    rows = [(s, fb.backtest_curve(s, cut, set_name, crashes)) for s in series]
    scored = [(s, r) for s, r in rows if r.errors.get("scalerl") is not None and r.best_naive]
    if not scored:
        return {"scored": 0}
    means = {m: statistics.fmean(r.errors[m] for _, r in scored if r.errors.get(m) is not None) for m in fb.NAIVE
             if all(r.errors.get(m) is not None for _, r in scored)}
    best = min(means, key=means.__getitem__)
    base = means[best]
    floors = [(noise_floor(heldout_part(s, cut)), r.errors[best]) for s, r in scored]
    floors = [(f, b) for f, b in floors if f is not None]
    cols = {
        "scalerl": statistics.fmean(r.errors["scalerl"] for _, r in scored) / base,
        "per-curve best naive": statistics.fmean(r.best_naive[1] for _, r in scored) / base,
        "hindsight level": statistics.fmean(hindsight_level_err(heldout_part(s, cut)) for s, _ in scored) / base,
        # over the curves it exists for, against the best method's mean on those same curves
        "noise floor": (statistics.fmean(f for f, _ in floors) / statistics.fmean(b for _, b in floors))
        if floors else None,
    }
    return {"scored": len(scored), "best_naive_method": best, "best_naive_mean": base, "ratios": cols,
            "crashes": len(crashes)}


def default_sets(root: Path = fb.CORPUS) -> list[Path]:
    """``bench/curves`` and every folder in it that holds a manifest.json (the held-out sets)."""
    return [root, *sorted(p for p in root.iterdir() if (p / "manifest.json").is_file())]


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.table import Table

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cuts", type=fb._cuts, default=fb.CUTS, help="fractions of the largest x (0.25,0.5,0.75)")
    ap.add_argument("--corpus", type=Path, action="append", default=None, metavar="DIR",
                    help="a real-curve set (a folder with manifest.json); repeat for several (default: all)")
    args = ap.parse_args(argv)
    sets = args.corpus or default_sets()
    for d in sets:
        if not (d / "manifest.json").is_file():
            ap.error(f"--corpus: {d} has no manifest.json (see bench/curves/README.md)")
    table = Table("set", "cut", "scored", "best naive (mean)", *COLUMNS, title="Mean error over the best naive "
                  "method's (lower is better; scalerl's target ≤ 0.85)")
    try:
        for d in sets:
            series, name = fb.corpus_series(d), "corpus" if d.resolve() == fb.CORPUS else d.name
            for cut in args.cuts:
                h = headroom(series, cut, name)
                if not h["scored"]:
                    table.add_row(name, f"{cut:g}", "0", "-", *("-" for _ in COLUMNS))
                    continue
                r = h["ratios"]
                table.add_row(name, f"{cut:g}", str(h["scored"]), f"{h['best_naive_method']} ({h['best_naive_mean']:.4f})",
                              *("-" if r[c] is None else f"{r[c]:.2f}" for c in COLUMNS))
    except UserError as e:
        ap.error(str(e))
    Console(width=160).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
