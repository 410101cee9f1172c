"""Time per forecast fit, one scalerl tree against another (issue #26: "0.05 s per fit" on the synthetic set).

Each side is a subprocess with ``PYTHONPATH`` set to one tree's ``scalerl/`` (e.g. a ``git archive`` of an older
commit), timing ``fit_series(s, fit_until_fraction=0.5)`` (the fit, its interval on A, the forecast and its band,
the inner backtest) on every curve of the synthetic backtest set (Table 1 × 6 seeds) after one untimed fit; a
side's figure is the median seconds per fit. The sides run in interleaved rounds (``bench/rounds.py``), and the
ratio baseline / ours is taken within each round.

    git archive 683e68e scalerl | tar -x -C /tmp/before
    python bench/forecast_fit_time.py /tmp/before            # ours = the tree this script is in
    python bench/forecast_fit_time.py /tmp/before --rounds 5
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rounds  # noqa: E402

HERE = Path(__file__).resolve().parent
CHILD = """
import statistics, sys, time
sys.path.insert(0, {bench!r})
import forecast_backtest as bt
from scalerl.curves import fit_series
curves = bt.synthetic_series()
fit_series(curves[0], fit_until_fraction=0.5)
ts = []
for s in curves:
    t = time.perf_counter(); fit_series(s, fit_until_fraction=0.5); ts.append(time.perf_counter() - t)
print(statistics.median(ts))
"""


def seconds_per_fit(tree: Path, threads: int) -> float:
    return float(rounds.run_in_tree(tree, CHILD.format(bench=str(HERE)), threads))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("baseline", type=Path, help="a tree holding the baseline's scalerl/ package")
    ap.add_argument("--ours", type=Path, default=HERE.parent, help="a tree holding ours (default: this checkout)")
    rounds.add_arguments(ap)
    args = ap.parse_args(argv)
    for tree in (args.baseline, args.ours):
        if not (tree / "scalerl" / "__init__.py").is_file():
            print(f"error: {tree} holds no scalerl/ package", file=sys.stderr)
            return 2
    results = rounds.interleave({"baseline": lambda: seconds_per_fit(args.baseline, args.threads),
                                 "ours": lambda: seconds_per_fit(args.ours, args.threads)},
                                rounds=args.rounds, threads=args.threads)
    rounds.report(results, "seconds per fit_series(..., fit_until_fraction=0.5), 60 synthetic curves",
                  [("ours", "baseline", "value", None)], lower_is_better=["value"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
