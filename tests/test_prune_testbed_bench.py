"""bench/prune_testbed.py --simulate (issue #28): pruning decided on an unpruned sweep's own points, rung by rung."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

from scalerl.curves.sigmoid import sigmoid
from scalerl.experiments.pruning import RUNGS

_PATH = Path(__file__).resolve().parents[1] / "bench" / "prune_testbed.py"
_spec = importlib.util.spec_from_file_location("prune_testbed", _PATH)
pt = importlib.util.module_from_spec(_spec)
sys.modules["prune_testbed"] = pt
_spec.loader.exec_module(pt)

BUDGET = 0.04


def _sweep(root: Path, runs: dict[str, float]) -> Path:
    """One run directory per (name, A): 40 evaluations of Eq. 1 up to the budget, small noise."""
    x = np.linspace(0.0, BUDGET, 41)
    for i, (name, A) in enumerate(runs.items()):
        rng = np.random.default_rng(i)
        y = sigmoid(x, 0.3, A, 2.0, 0.3 * BUDGET) + rng.normal(0, 0.004, x.size)
        y[0] = 0.3
        d = root / name
        d.mkdir(parents=True)
        (d / "config.yaml").write_text(f"max_device_hours: {BUDGET}\n")
        rows = [{"step": k, "compute/device_hours": float(c), "val/pass_rate": float(v)}
                for k, (c, v) in enumerate(zip(x, y))]
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def test_simulate_stops_the_runs_far_below_and_keeps_the_winner(tmp_path):
    root = _sweep(tmp_path / "sweep", {"good-a": 0.75, "good-b": 0.745, "bad-a": 0.50, "bad-b": 0.52})
    state = pt.simulated_state(root, 0.02)
    assert set(state["runs"]) == {"good-a", "good-b", "bad-a", "bad-b"}
    assert [h["rung"] for h in state["runs"]["good-a"]["history"]] == list(RUNGS)
    res = pt.analyse(root, None)
    rows = {r["run"]: r for r in res["rows"]}
    assert res["winner_unpruned"] in {"good-a", "good-b"} and res["same_winner_or_within_margin"]
    for name in ("bad-a", "bad-b"):  # 0.2 below the winner: outside the margin, stopped by the half-budget rung
        assert rows[name]["outside_margin"] and rows[name]["state"] == "pruned"
        assert rows[name]["share"] <= 0.5 + 0.03
    for name in ("good-a", "good-b"):
        assert rows[name]["state"] == "finished" and rows[name]["share"] == 1.0
    assert res["total_compute_pruned"] < res["total_compute_unpruned"]


def test_scan_decides_at_every_share_and_calls_a_stop_of_a_tied_run_wrong(tmp_path, monkeypatch):
    root = _sweep(tmp_path / "sweep", {"good-a": 0.75, "good-b": 0.745, "bad-a": 0.50, "bad-b": 0.52})
    rows = pt.scan(root, 0.02)
    assert [r["share"] for r in rows] == [k / 40 for k in range(5, 31)]
    assert not any(r["wrong"] for r in rows) and set(rows[-1]["right"]) == {"bad-a", "bad-b"}
    # a rule that stops everyone but the leader: each stop of the run that ties the winner is counted wrong
    from scalerl.experiments.pruning import Decision

    def stop_all_but_leader(outlooks, margin):
        live = {n: o for n, o in outlooks.items() if o is not None}
        lead = max(live, key=lambda n: live[n].lo) if live else None
        return {n: Decision(n != lead and o is not None, "test", o, lead, None) for n, o in outlooks.items()}

    monkeypatch.setattr(pt, "decide", stop_all_but_leader)
    late = pt.scan(root, 0.02)[-1]
    assert {"good-a", "good-b"} & set(late["wrong"]) and set(late["right"]) == {"bad-a", "bad-b"}
