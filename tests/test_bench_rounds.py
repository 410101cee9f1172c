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
    # other processes' CPU share before each run; the 1-min load alone no longer decides (it holds our own runs)
    busy = iter([0.0, 0.1, 0.9, 0.9, 0.0, 0.0])
    monkeypatch.setattr(rounds, "cpu_busy", lambda seconds=rounds.PROBE_S: next(busy))
    monkeypatch.setattr(rounds, "SETTLE_S", 0.0)
    order: list[str] = []
    a_rates, b_rates = iter([10.0, 12.0, 9.0]), iter([5.0, 4.0, 3.0])

    def side(name, rates):  # noqa: ANN001, ANN202
        return lambda: (order.append(name), {"rate": next(rates), "s": 1.0})[1]

    res = rounds.interleave({"a": side("a", a_rates), "b": side("b", b_rates)}, rounds=3, threads=1)
    assert order == ["a", "b", "a", "b", "a", "b"]
    assert [r.load for r in res.side("b")] == [0.2, 2.0, 0.1]
    assert [r.cpu_busy for r in res.runs] == [0.0, 0.1, 0.9, 0.9, 0.0, 0.0]
    assert rounds.ratios(res, "a", "b", "rate") == pytest.approx([2.0, 3.0, 3.0])
    assert rounds.ratios(res, "a", "b", "s", lower_is_better=True) == pytest.approx([1.0, 1.0, 1.0])
    assert [(r.side, r.round) for r in res.busy()] == [("a", 2), ("b", 2)]
    rounds.report(res, "t", [("a", "b", "rate", 2.5)])
    out = capsys.readouterr().out
    assert "3 [2-3]x" in out and "met" in out
    assert out.count("WARNING") == 3  # where each busy run started, and under the summary


def test_settle_waits_for_other_work_to_end(monkeypatch):
    readings = iter([0.8, 0.6, 0.1, 0.9])
    monkeypatch.setattr(rounds, "cpu_busy", lambda seconds=rounds.PROBE_S: next(readings))
    assert rounds.settle(limit=60.0) == 0.1  # stops at the first quiet reading
    readings = iter([0.8, 0.7])
    assert rounds.settle(limit=0.0) == 0.8  # gives up at the limit and reports the busy reading


def test_cpu_busy_sees_a_busy_process():
    import threading
    import time

    stop = time.monotonic() + 1.5
    t = threading.Thread(target=lambda: [None for _ in iter(lambda: time.monotonic() < stop, False)])
    t.start()
    busy = rounds.cpu_busy(1.0)
    t.join()
    assert 0.0 <= busy <= 1.0
    assert busy >= 0.4 / (rounds.os.cpu_count() or 1)  # one spinning thread is at least ~one core's share


def test_step_time_refuses_a_tree_without_scalerl_and_configs(tmp_path, capsys):
    """bench/step_time.py runs each side from a tree's scalerl/ and configs/ (presets are read from configs/ beside
    the package): a tree missing either is one error line and exit 2, before anything runs."""
    spec = importlib.util.spec_from_file_location("step_time", _PATH.parent / "step_time.py")
    step_time = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(step_time)
    (tmp_path / "scalerl").mkdir()
    (tmp_path / "scalerl" / "__init__.py").write_text("")
    assert step_time.main([str(tmp_path), "--rounds", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no scalerl/ package and configs/ folder" in err
    assert step_time.main([str(tmp_path), "--steps", "1"]) == 2


def test_run_in_tree_imports_scalerl_from_the_tree_even_when_run_from_a_checkout(tmp_path, monkeypatch):
    """``python -c`` puts the working directory first on sys.path: run from a checkout, a child would import that
    checkout's scalerl whatever PYTHONPATH says, and an A/B of two trees would time one of them twice."""
    (tmp_path / "scalerl").mkdir()
    (tmp_path / "scalerl" / "__init__.py").write_text("")
    monkeypatch.chdir(_PATH.parent.parent)  # the repository root, which holds its own scalerl/
    where = rounds.run_in_tree(tmp_path, "import scalerl; print(scalerl.__file__)")
    assert Path(where) == (tmp_path / "scalerl" / "__init__.py").resolve()


def test_step_time_passes_config_overrides_to_both_sides(monkeypatch):
    """``bench/step_time.py --set`` (the issue's second model size) reaches each side's config."""
    spec = importlib.util.spec_from_file_location("step_time", _PATH.parent / "step_time.py")
    step_time = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(step_time)
    seen = []
    monkeypatch.setattr(step_time.rounds, "run_in_tree", lambda tree, code, threads: seen.append(code) or (
        '{"generate": 1, "logprob_forward": 1, "backward": 1, "step": 3}'))
    step_time.phases(Path("/x"), 3, 2, ["model.d_model=256", "model.n_layers=8"])
    assert "bench_config(['model.d_model=256', 'model.n_layers=8'], 3, \"inline\", 2)" in seen[0]


def test_attention_bench_refuses_bad_sizes(capsys):
    spec = importlib.util.spec_from_file_location("attention", _PATH.parent / "attention.py")
    attention = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(attention)
    assert attention.main(["--context", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--context" in err
