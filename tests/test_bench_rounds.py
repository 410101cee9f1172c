"""bench/rounds.py: interleaving order, per-round ratios (median and spread), and the busy-machine warning."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parent.parent / "bench" / "rounds.py"
_spec = importlib.util.spec_from_file_location("rounds", _PATH)
rounds = importlib.util.module_from_spec(_spec)
sys.modules["rounds"] = rounds
_spec.loader.exec_module(rounds)


def test_sides_alternate_and_ratios_pair_within_a_round(monkeypatch, capsys):
    loads = iter([0.1, 0.2, 0.3, 2.0, 0.1, 0.1])
    monkeypatch.setattr(rounds.os, "getloadavg", lambda: (next(loads), 0.0, 0.0))
    order: list[str] = []
    a_rates, b_rates = iter([10.0, 12.0, 9.0]), iter([5.0, 4.0, 3.0])

    def side(name, rates):  # noqa: ANN001, ANN202
        return lambda: (order.append(name), {"rate": next(rates), "s": 1.0})[1]

    res = rounds.interleave({"a": side("a", a_rates), "b": side("b", b_rates)}, rounds=3, threads=1)
    assert order == ["a", "b", "a", "b", "a", "b"]
    assert [r.load for r in res.side("b")] == [0.2, 2.0, 0.1]
    assert rounds.ratios(res, "a", "b", "rate") == pytest.approx([2.0, 3.0, 3.0])
    assert rounds.ratios(res, "a", "b", "s", lower_is_better=True) == pytest.approx([1.0, 1.0, 1.0])
    assert [(r.side, r.round) for r in res.busy()] == [("b", 2)]
    rounds.report(res, "t", [("a", "b", "rate", 2.5)])
    out = capsys.readouterr().out
    assert "3 [2-3]x" in out and "met" in out
    assert out.count("WARNING") == 2  # where the busy round started, and under the summary
