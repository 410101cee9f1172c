"""Does the forecast band hold far ahead? Every run of a finished sweep, fitted on the first part of its budget and
checked at its end (issue #26: the band at a long horizon).

The real-curve corpus (``bench/forecast_backtest.py``) scores horizons of at most a window or so; a pruned sweep
(issue #28) decides on forecasts four and eight window-lengths ahead. For each run directory of SWEEP (its
``metrics.jsonl``: device-hours, validation pass rate, the curves' defaults) and each cut ``c``, Eq. 1 is fitted on
the evaluations up to ``c`` × the run's last compute (``fit_curve(..., fit_until_fraction=c)``, the CLI's
defaults), and the script prints the forecast at the run's last compute with its 80% band, where the run ended (the
mean of its last 3 evaluations), whether that is inside the band, and the share of all held-out evaluations inside
their bands. A fit the library declines is counted as such.

    python bench/forecast_horizon.py runs/tb                 # cuts 1/8, 1/4, 1/2
    python bench/forecast_horizon.py runs/tb --cuts 0.25 --json horizon.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from scalerl import atomic
from scalerl.curves import DEFAULT_X, DEFAULT_Y, FitError, fit_curve, load_series
from scalerl.errors import UserError

LEVEL = 0.8
END_N = 3  # where a run ended: the mean of its last 3 evaluations


def check_run(x: np.ndarray, y: np.ndarray, cut: float) -> dict[str, Any]:
    """One run at one cut: the forecast at its last compute, its band, the end, and the held-out coverage."""
    try:
        fit = fit_curve(x, y, fit_until_fraction=cut)
    except (FitError, UserError) as e:
        return {"cut": cut, "declined": str(e)}
    end, last = float(np.mean(y[-END_N:])), np.array([float(x[-1])])
    lo, hi = fit.forecast_interval(last, LEVEL)
    later = x > cut * float(x.max())
    lo_h, hi_h = fit.forecast_interval(x[later], LEVEL)
    inside_h = (y[later] >= lo_h) & (y[later] <= hi_h)
    return {"cut": cut, "declined": None, "forecast": float(fit.forecast(last)[0]), "lo": float(lo[0]),
            "hi": float(hi[0]), "end": end, "end_inside": bool(lo[0] <= end <= hi[0]),
            "covered": int(inside_h.sum()), "heldout": int(later.sum()), "identified": bool(fit.identified)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sweep", type=Path, help="a sweep directory (one run directory per run)")
    ap.add_argument("--cuts", default="0.125,0.25,0.5", help="fractions of each run's budget to fit up to")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    cuts = [float(c) for c in args.cuts.split(",")]
    runs = sorted(d for d in args.sweep.iterdir() if (d / "metrics.jsonl").is_file()) if args.sweep.is_dir() else []
    if not runs:
        print(f"error: {args.sweep} holds no run directories with a metrics.jsonl", file=sys.stderr)
        return 2
    out: dict[str, list[dict[str, Any]]] = {}
    for d in runs:
        s = load_series(d, DEFAULT_X, DEFAULT_Y)
        out[d.name] = [check_run(s.x, s.y, c) for c in cuts]
        cells = []
        for r in out[d.name]:
            cells.append(f"{r['cut']:g}: declined" if r["declined"] else
                         f"{r['cut']:g}: {r['forecast']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}] end {r['end']:.3f} "
                         f"{'in' if r['end_inside'] else 'OUT'}")
        print(f"{d.name:<16} " + " | ".join(cells))
    summary = {}
    for i, c in enumerate(cuts):
        rows = [r[i] for r in out.values() if not r[i]["declined"]]
        summary[c] = {"runs": len(rows), "end_inside": sum(r["end_inside"] for r in rows),
                      "heldout_coverage": (sum(r["covered"] for r in rows) / max(sum(r["heldout"] for r in rows), 1)),
                      "mean_end_err": float(np.mean([abs(r["forecast"] - r["end"]) for r in rows])) if rows else None}
        sm = summary[c]
        err = "-" if sm["mean_end_err"] is None else f"{sm['mean_end_err']:.4f}"  # every fit declined: no error
        print(f"cut {c:g}: {sm['runs']} fitted, end inside the {LEVEL:.0%} band on {sm['end_inside']}; "
              f"held-out evaluations inside their bands {sm['heldout_coverage']:.0%}; mean |forecast − end| {err}")
    if args.json:
        atomic.write_text(args.json, json.dumps({"runs": out, "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
