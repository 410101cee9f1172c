"""Did pruning pay on the testbed? An unpruned and a pruned run of the same sweep, side by side (issue #28).

Reads two sweep directories of one spec (``configs/sweeps/testbed_prune.yaml``) and the same budget, one run
without ``--prune`` and one with it, and prints for each run: the compute it got in each (device-hours) and the
share, its state in the pruned sweep (finished or stopped, at which rung), and the fitted A of its unpruned curve
(``fit_series`` on the whole run, the CLI's defaults). Then the issue's checks:

* the winner: the first of the paper's ranking (``compare_fits``: A, then B within the 0.02 margin) over the
  unpruned sweep's runs whose A is identified, against the same ranking over the runs the pruned sweep let finish
  (an A that is not identified is a bound, not a measurement: a run still climbing at the end has A = 1.000 at
  the search bound and would rank first; the plain ranking's first run is printed too);
* every run that *ends* more than the margin below the winner (its mean over the last 5 evaluations of the
  unpruned sweep, against the winner's) got at most 30% of its unpruned compute in the pruned sweep;
* the total compute of both sweeps.

    python bench/prune_testbed.py runs/tb runs/tb-pruned
    python bench/prune_testbed.py runs/tb runs/tb-pruned --json prune_testbed.json
    python bench/prune_testbed.py runs/tb runs/tb-pruned --replay    # the decisions again, by today's rule
    python bench/prune_testbed.py runs/tb --simulate                  # pruning decided on the unpruned curves
    python bench/prune_testbed.py runs/tb --scan                      # the rule at every share of the budget

``--replay`` decides every rung again from the points each run had there in the pruned sweep (``prune.json``'s
history gives the compute at each rung), with the rule as the code now states it (``pruning.decide`` is pure),
and then reports the sweep as if the runs the rule now stops earlier had stopped there: a replay of recorded
points, not a new run (a rerun would also see other noise and other machine load).

``--simulate`` needs no pruned sweep: it decides every rung (``pruning.RUNGS``) on the unpruned sweep's own points
up to that rung's share of each run's budget, the points a pruned sweep of the same runs would have had there.
The runs of a sweep are independent, so this is the pruned sweep without its rerun (and without its noise): the
way to try a change of the rule on a recorded sweep before paying for a new one.

``--scan`` applies the rule once at each share of the budget from 1/8 to 3/4 (steps of 1/40) to every run's
unpruned points up to that share, as an Optuna pruner would whenever a trial reports, and counts the stops: *wrong*
when the run ends within the margin of the winner's end, *right* otherwise. A rule is safe at the sweep's rungs by
luck if it is not safe between them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from scalerl import atomic
from scalerl.curves import DEFAULT_X, DEFAULT_Y, FitError, compare_fits, fit_series, load_series
from scalerl.curves.compare import DEFAULT_MARGIN
from scalerl.errors import UserError
from scalerl.experiments.prune_sweep import points, rung_name
from scalerl.experiments.pruning import RUNGS, decide, fit_outlook

SHARE_LIMIT = 0.30  # issue #28: a run outside the winner's margin gets at most 30% of its unpruned compute


def load_run(run_dir: Path) -> tuple[Any, Any]:
    """(the run's series or None, the fit of its whole curve or None), read once."""
    try:
        series = load_series(run_dir, DEFAULT_X, DEFAULT_Y)
    except (UserError, OSError):
        return None, None
    try:
        return series, fit_series(series)
    except (FitError, UserError):
        return series, None


LAST_N = 5  # where a run ends: the mean of its last 5 evaluations


def winner(fits: dict[str, Any], margin: float, identified_only: bool = True) -> str | None:
    """The first run of the paper's ranking over ``fits`` (name -> FitResult), over the identified ones only
    unless ``identified_only`` is False."""
    named = {name: f for name, f in fits.items() if f is not None and (f.identified or not identified_only)}
    if not named:
        return None
    for name, f in named.items():
        f.source = name
    return compare_fits(list(named.values()), margin).ranked[0].fit.source


def replay(pruned: Path, state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``state['runs']`` decided again rung by rung from the recorded points (see the module docstring): a run the
    rule now stops at an earlier rung gets that rung's compute and state ``pruned``."""
    runs = {name: dict(r) for name, r in state["runs"].items()}
    recorded = {name: points(pruned / name) for name in runs}
    alive = set(runs)
    rungs = sorted({h["rung"] for r in runs.values() for h in r.get("history", [])})
    for share in rungs[:-1] if len(rungs) > 1 and rungs[-1] >= 1.0 else rungs:
        outlooks, compute = {}, {}
        for name in sorted(alive):
            at = [h for h in runs[name].get("history", []) if h["rung"] == share]
            if not at:
                continue
            x, y = recorded[name]
            keep = x <= at[0]["compute"] * (1 + 1e-9)
            compute[name] = float(at[0]["compute"])
            outlooks[name] = fit_outlook(x[keep], y[keep], float(runs[name]["budget"]))
        for name, d in decide(outlooks, state.get("margin", DEFAULT_MARGIN)).items():
            if d.stop:
                was = runs[name]
                if was.get("state") != "pruned" or (was.get("stopped_at") or 2.0) > share:
                    was.update(state="pruned", stopped_at=share, reason=d.reason, replayed_compute=compute[name])
                alive.discard(name)
    return runs


def budgets(sweep: Path) -> dict[str, float]:
    """Each run directory's per-run budget (``max_device_hours`` of its config.yaml)."""
    out = {d.name: float(yaml.safe_load((d / "config.yaml").read_text(encoding="utf-8"))["max_device_hours"])
           for d in sorted(sweep.iterdir()) if (d / "config.yaml").is_file()}
    if not out:
        raise UserError(f"{sweep} holds no run directories (each with its config.yaml)")
    return out


def simulated_state(unpruned: Path, margin: float) -> dict[str, Any]:
    """A pruning record for the unpruned sweep as if every run had been decided at every rung (``--simulate``)."""
    runs = {}
    for name, budget in budgets(unpruned).items():
        x, _ = points(unpruned / name)
        history = [{"rung": share, "compute": float(x[x <= share * budget].max())}
                   for share in RUNGS if np.any(x <= share * budget)]
        runs[name] = {"budget": budget, "state": "finished", "history": history}
    return {"margin": margin, "runs": runs}


def scan(unpruned: Path, margin: float = DEFAULT_MARGIN) -> list[dict[str, Any]]:
    """``--scan`` (module docstring): per share, the runs stopped, wrongly (ending within ``margin`` of the
    winner's end) or rightly."""
    budget = budgets(unpruned)
    loaded = {name: load_run(unpruned / name) for name in budget}  # each run read once: its points and its fit
    win = winner({name: fit for name, (_, fit) in loaded.items()}, margin)
    if win is None:
        raise UserError(f"{unpruned}: no run has an identified A, so there is no winner to compare with")
    curves = {name: (s.x, s.y) for name, (s, _) in loaded.items() if s is not None and s.y.size}
    ends = {name: float(y[-LAST_N:].mean()) for name, (_, y) in curves.items()}
    out = []
    for share in np.arange(5, 31) / 40:
        outlooks = {}
        for name, (x, y) in curves.items():
            keep = x <= share * budget[name] * (1 + 1e-9)
            outlooks[name] = fit_outlook(x[keep], y[keep], budget[name])
        stopped = sorted(name for name, d in decide(outlooks, margin).items() if d.stop)
        wrong = [name for name in stopped if ends.get(name, -np.inf) >= ends[win] - margin]
        out.append({"share": float(share), "wrong": wrong, "right": [n for n in stopped if n not in wrong]})
    return out


def analyse(unpruned: Path, pruned: Path | None, margin: float = DEFAULT_MARGIN,
            replayed: bool = False) -> dict[str, Any]:
    """The checks of the module docstring; ``pruned`` None: ``--simulate`` on the unpruned sweep."""
    if pruned is None:
        state, pruned, replayed = simulated_state(unpruned, margin), unpruned, True
    else:
        state = json.loads((pruned / "sweep.json").read_text(encoding="utf-8")).get("pruning")
    if not state:
        raise UserError(f"{pruned}/sweep.json has no 'pruning' record: run the sweep with --prune")
    runs = replay(pruned, state) if replayed else state["runs"]
    loaded_u = {name: load_run(unpruned / name) for name in runs}
    loaded_p = loaded_u if pruned == unpruned else {name: load_run(pruned / name) for name in runs}  # --simulate
    fits_u = {name: fit for name, (_, fit) in loaded_u.items()}
    fits_p = {name: loaded_p[name][1] for name, r in runs.items() if r.get("state") == "finished"}
    win_u, win_p = winner(fits_u, margin), winner(fits_p, margin)
    plain_u = winner(fits_u, margin, identified_only=False)
    a_win = fits_u[win_u].A if win_u else None
    ends = {name: float(s.y[-LAST_N:].mean()) if s is not None and s.y.size else None
            for name, (s, _) in loaded_u.items()}
    end_win = ends.get(win_u) if win_u else None
    rows = []
    for name, r in runs.items():
        s_u, s_p = loaded_u[name][0], loaded_p[name][0]
        c_u = float(s_u.x.max()) if s_u is not None and s_u.x.size else 0.0
        c_p = float(s_p.x.max()) if s_p is not None and s_p.x.size else 0.0
        c_p = float(r.get("replayed_compute", c_p))
        f = fits_u[name]
        outside = bool(ends[name] is not None and end_win is not None and ends[name] < end_win - margin)
        share = c_p / c_u if c_u > 0 else None
        rows.append({"run": name, "state": r.get("state"),
                     "stopped_at": rung_name(r["stopped_at"]) if r.get("stopped_at") else None,
                     "reason": r.get("reason"), "compute_unpruned": c_u, "compute_pruned": c_p, "share": share,
                     "A_unpruned": f.A if f is not None else None, "end_unpruned": ends[name],
                     "identified": bool(f.identified) if f is not None else None,
                     "outside_margin": outside,
                     "within_limit": (share is not None and share <= SHARE_LIMIT) if outside else None})
    total_u = sum(r["compute_unpruned"] for r in rows)
    total_p = sum(r["compute_pruned"] for r in rows)
    same = win_u == win_p or (win_p is not None and fits_u.get(win_p) is not None and a_win is not None
                              and abs(fits_u[win_p].A - a_win) <= margin)
    outside = [r for r in rows if r["outside_margin"]]
    return {"margin": margin, "winner_unpruned": win_u, "winner_pruned": win_p, "A_winner_unpruned": a_win,
            "end_winner_unpruned": end_win, "first_of_plain_ranking_unpruned": plain_u,
            "same_winner_or_within_margin": bool(same), "rows": rows,
            "total_compute_unpruned": total_u, "total_compute_pruned": total_p,
            "total_share": total_p / total_u if total_u else None,
            "outside_margin": len(outside), "outside_within_limit": sum(bool(r["within_limit"]) for r in outside)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("unpruned", type=Path)
    ap.add_argument("pruned", type=Path, nargs="?", help="the --prune sweep (leave out with --simulate)")
    ap.add_argument("--margin", type=float, default=DEFAULT_MARGIN)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--replay", action="store_true", help="decide every rung again by today's rule (see above)")
    ap.add_argument("--simulate", action="store_true", help="decide on the unpruned sweep's own points (see above)")
    ap.add_argument("--scan", action="store_true", help="the rule at every share of the budget (see above)")
    args = ap.parse_args()
    if args.scan:
        rows = scan(args.unpruned, args.margin)
        for r in rows:
            print(f"share {r['share']:.3f}: {len(r['wrong'])} wrong stop(s) {', '.join(r['wrong'])}; "
                  f"{len(r['right'])} right")
        if args.json:
            atomic.write_text(args.json, json.dumps(rows, indent=2))
        return 0
    if (args.pruned is None) != args.simulate:
        ap.error("give the pruned sweep, or --simulate without it")
    res = analyse(args.unpruned, args.pruned, args.margin, args.replay)
    if args.replay or args.simulate:
        what = "the unpruned sweep's points" if args.simulate else "the pruned sweep's recorded points"
        print(f"REPLAY of {what} with the rule as it now stands (not a new run)")
    print(f"{'run':<16} {'A (unpruned)':>12} {'ends at':>7} {'unpruned dh':>11} {'pruned dh':>9} {'share':>6}  "
          "pruned sweep")
    for r in res["rows"]:
        a = "-" if r["A_unpruned"] is None else f"{r['A_unpruned']:.3f}" + ("" if r["identified"] else "?")
        end = "-" if r["end_unpruned"] is None else f"{r['end_unpruned']:.3f}"
        share = "-" if r["share"] is None else f"{r['share']:.0%}"
        where = r["state"] + (f" at {r['stopped_at']}" if r["stopped_at"] else "")
        flag = "" if not r["outside_margin"] else ("  outside margin: ok" if r["within_limit"]
                                                   else "  outside margin: OVER 30%")
        print(f"{r['run']:<16} {a:>12} {end:>7} {r['compute_unpruned']:>11.4f} {r['compute_pruned']:>9.4f} {share:>6}  "
              f"{where}{flag}")
    print(f"('?': A not identified; 'ends at': mean of the last {LAST_N} unpruned evaluations)")
    print(f"first of the plain ranking (every fit, identified or not): {res['first_of_plain_ranking_unpruned']}")
    print(f"winner: unpruned {res['winner_unpruned']} (A {res['A_winner_unpruned']:.3f}, ends at "
          f"{res['end_winner_unpruned']:.3f}), "
          f"pruned {res['winner_pruned']}: {'same or within' if res['same_winner_or_within_margin'] else 'NOT within'}"
          f" the margin {res['margin']}")
    print(f"runs ending more than {res['margin']} below the winner: {res['outside_margin']}, of which "
          f"{res['outside_within_limit']} got at most {SHARE_LIMIT:.0%} of their unpruned compute")
    print(f"total compute: unpruned {res['total_compute_unpruned']:.4f}, pruned {res['total_compute_pruned']:.4f} "
          f"device-hours ({res['total_share']:.0%})")
    if args.json:
        atomic.write_text(args.json, json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
