"""Audit of the live forecast and the rules that act on it (scalerl/forecast.py, experiments/stopping.py,
experiments/pruning.py, experiments/prune_sweep.py, integrations/optuna.py): the live forecast and fit.json equal
``scalerl fit RUN --json`` on the same metrics.jsonl (overall and per domain, after --resume too), a failed fit
leaves nothing stale or non-finite, --stop-when stops at the evaluation its condition first holds, pruning keeps a
run exactly the margin below the leader, and the Optuna pruner neither mixes studies nor silently ignores an
unbounded metric."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from scalerl import curves
from scalerl.config import ForecastConfig, load_config
from scalerl.curves.sigmoid import sigmoid
from scalerl.forecast import Forecaster

FORECAST_KEYS = ("A", "A_lo", "A_hi", "B", "Cmid", "R0", "identified", "reliable")


def _offline(run_dir: Path, y: str = "val/pass_rate") -> dict:
    """``scalerl fit RUN_DIR --json`` (its default window, x axis and predictions), in this process."""
    import contextlib
    import io

    from scalerl.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(["fit", str(run_dir), "--y", y, "--json"])
        except SystemExit as exc:  # typer's standalone mode exits 0 after a command
            assert not exc.code
    return json.loads(out.getvalue())["fits"][0]


def _same_fit(live: dict, offline: dict) -> None:
    keys = set(live) | set(offline)
    differ = {k: (live.get(k), offline.get(k)) for k in keys if live.get(k) != offline.get(k)}
    assert not differ, differ


def _write_metrics(run_dir: Path, x, y) -> Forecaster:
    """A metrics.jsonl of evaluations as the runner logs them, each line with the live forecast's keys."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fc = Forecaster(ForecastConfig())
    lines = []
    for i, (xi, yi) in enumerate(zip(x, y)):
        rec = {"step": i, "compute/device_hours": float(xi), "val/pass_rate": float(yi)}
        rec.update(fc.update(float(xi), float(yi)))
        lines.append(rec)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return fc


# ------------------------------------------------------------------------------------ the live forecast = offline


def test_fit_json_is_what_scalerl_fit_json_computes_on_the_same_metrics(tmp_path):
    x = np.linspace(0.0, 3.0, 16)
    y = sigmoid(x, 0.2, 0.7, 2.0, 0.8) + 0.01 * np.random.default_rng(1).standard_normal(16)
    y[0] = 0.2
    fc = _write_metrics(tmp_path / "run", x, y)
    fc.write_final(tmp_path / "run", "t")
    live = json.loads((tmp_path / "run" / "fit.json").read_text())["fits"][0]
    offline = _offline(tmp_path / "run")
    assert live["predictions"]  # fit.json predicts where `scalerl fit` does: the last compute and twice it
    _same_fit(live, offline)


def test_two_evaluations_at_one_compute_are_fitted_as_scalerl_fit_fits_them(tmp_path):
    """Two evaluations with no training between them share a compute in metrics.jsonl; the live fit used to move
    the second by 1e-12, so the run's R0 (the mean at compute 0) and A differed from the offline fit's."""
    x = np.concatenate([[0.0, 0.0], np.linspace(0.25, 3.0, 12)])
    y = sigmoid(x, 0.2, 0.7, 2.0, 0.8) + 0.01 * np.random.default_rng(1).standard_normal(14)
    y[:2] = 0.2, 0.22
    _write_metrics(tmp_path / "run", x, y)
    last = [json.loads(r) for r in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()][-1]
    offline = _offline(tmp_path / "run")
    assert last["forecast/R0"] == offline["R0"] == pytest.approx(0.21)
    assert [last[f"forecast/{k}"] for k in ("A", "A_lo", "A_hi", "B", "Cmid")] == [
        offline["A"], *offline["A_ci"], offline["B"], offline["Cmid"]]


def test_compute_that_goes_back_is_held_not_fitted_out_of_order():
    fc = Forecaster(ForecastConfig())
    for xi, yi in zip([0.0, 1.0, 2.0, 1.5], [0.2, 0.3, 0.4, 0.45]):
        fc.update(xi, yi)
    assert fc.x == [0.0, 1.0, 2.0, 2.0]


def test_a_final_fit_that_fails_leaves_no_fit_json_of_an_earlier_part_of_the_run(tmp_path):
    (tmp_path / "fit.json").write_text('{"fits": [{"A": 0.7}]}')  # the fit of the run before it was resumed
    (tmp_path / "curve.png").write_bytes(b"old")
    fc = Forecaster(ForecastConfig())
    for i in range(8):
        out = fc.update(0.1 * i, 0.5)  # constant: no curve to fit
        assert out == {}
    assert fc.last_error and "constant" in fc.last_error
    assert fc.write_final(tmp_path, "t") == {"fit": None, "points": 8}
    assert not (tmp_path / "fit.json").exists() and not (tmp_path / "curve.png").exists()


def test_open_interval_A_hi_is_the_bound_and_every_forecast_value_finite():
    """docs/architecture.md: forecast/A_hi is logged with every fit (a number); a bounded fit's open top is the
    bound 1 with forecast/identified 0, never NaN/inf/null."""
    x = np.linspace(0.0, 0.5, 10)  # far before Cmid: A is not identified
    y = sigmoid(x, 0.1, 0.8, 2.0, 3.0) + 0.003 * np.random.default_rng(0).standard_normal(10)
    y[0] = 0.1
    fc = Forecaster(ForecastConfig())
    for xi, yi in zip(x, y):
        out = fc.update(float(xi), float(yi))
        assert all(isinstance(v, float) and math.isfinite(v) for v in out.values()), out
    assert out["forecast/identified"] == 0.0 and out["forecast/A_hi"] == 1.0
    assert fc.last_fit.A_ci_open[1]


# ------------------------------------------------------------------------------------------- a real (micro) run


class _SyntheticEval:
    """The run's evaluation replaced by a rising curve with two domains (no model evaluated: fast)."""

    calls: list[int] = []

    def __init__(self, real):
        self.task = SimpleNamespace(domains=("a", "b"))

    def __call__(self, seed):
        k = len(self.calls)
        self.calls.append(seed)
        noise = 0.02 * math.sin(7.0 * k)
        a = 0.1 + 0.6 * (1 - math.exp(-k / 4)) + noise
        b = 0.3 + 0.3 * (1 - math.exp(-k / 6)) - noise
        return {"val/pass_rate": (a + b) / 2, "val/a/pass_rate": a, "val/b/pass_rate": b}


@pytest.fixture
def synthetic_eval(monkeypatch):
    import scalerl.pipeline.runner as runner

    _SyntheticEval.calls = []
    real = runner.build_evaluation
    monkeypatch.setattr(runner, "build_evaluation", lambda *a, **k: _SyntheticEval(real(*a, **k)))


def _micro(*sets: str):
    sys.path.insert(0, str(Path(__file__).parent))
    from test_pipeline import MICRO

    return load_config("scalerl", None, [*MICRO, "backend=inline", "eval.every=1", *sets])


def test_a_runs_live_forecast_and_fit_json_equal_the_offline_fit_overall_and_per_domain_after_resume(
        tmp_path, synthetic_eval, monkeypatch):
    from scalerl.pipeline.runner import train
    from scalerl.runlog import read_metrics

    finals = []
    write_final = Forecaster.write_final
    monkeypatch.setattr(Forecaster, "write_final", lambda self, *a, **k: (finals.append(self.state_dict()),
                                                                          write_final(self, *a, **k))[1])
    out = tmp_path / "run"
    train(_micro("steps=7", "checkpoint_every=3"), out, show_progress=False)
    train(_micro("steps=12", "checkpoint_every=3"), out, resume=True, show_progress=False)
    evals = [r for r in read_metrics(out) if "val/pass_rate" in r]
    assert [r["step"] for r in evals] == list(range(13))  # each step evaluated once, none twice, none missing
    state = finals[-1]  # the forecaster the run wrote fit.json from
    assert state["x"] == [r["compute/device_hours"] for r in evals]  # the forecaster holds exactly these
    assert state["y"] == [r["val/pass_rate"] for r in evals]
    assert state["domains"]["a"]["y"] == [r["val/a/pass_rate"] for r in evals]
    fits = json.loads((out / "fit.json").read_text())["fits"]
    assert [f["y"] for f in fits] == ["val/pass_rate", "val/a/pass_rate", "val/b/pass_rate"]
    for prefix, y, live in (("forecast", "val/pass_rate", fits[0]), ("forecast/a", "val/a/pass_rate", fits[1]),
                            ("forecast/b", "val/b/pass_rate", fits[2])):
        offline = _offline(out, y)
        _same_fit(live, offline)
        last = evals[-1]
        assert [last[f"{prefix}/{k}"] for k in ("A", "B", "Cmid", "R0")] == [offline[k] for k in ("A", "B", "Cmid", "R0")]
        assert [last[f"{prefix}/A_lo"], last[f"{prefix}/A_hi"]] == offline["A_ci"]
        assert last[f"{prefix}/identified"] == float(offline["identified"])
        assert last[f"{prefix}/reliable"] == float(offline["reliable"])


# ------------------------------------------------------------------------------------------------- --stop-when


class _Meter(SimpleNamespace):
    pass


def _stop_after(rule_text: str, x, y, cfg) -> int | None:
    """The index of the evaluation after which ``--stop-when rule_text`` stops a run with these evaluations."""
    from scalerl.experiments.stopping import StopWhen, parse

    rule = StopWhen(tuple(parse(rule_text)))
    fc = Forecaster(ForecastConfig())
    for i, (xi, yi) in enumerate(zip(x, y)):
        fc.update(float(xi), float(yi))
        state = SimpleNamespace(forecaster=fc, step=i, meter=_Meter(device_hours=float(xi)), wall=lambda: 0.0)
        if rule(cfg, state).stop:
            return i
    return None


def test_reward_stops_at_the_first_evaluation_that_reaches_the_target_not_one_earlier_or_later():
    cfg = load_config(None, None, ["steps=20"])
    x = np.arange(8) * 0.1
    y = [0.1, 0.3, 0.5, 0.79, 0.799, 0.8, 0.81, 0.9]
    assert _stop_after("reward>=0.8", x, y, cfg) == 5
    assert _stop_after("reward>0.8", x, y, cfg) == 6
    assert _stop_after("reward>=0.95", x, y, cfg) is None


def test_gain_and_reach_stop_at_the_first_evaluation_where_they_hold_on_the_trusted_fit():
    from scalerl.experiments.pruning import forecast_band, trusted_fit

    cfg = load_config(None, None, ["steps=40", "max_device_hours=2.0"])
    x = np.linspace(0.0, 1.0, 21)
    y = sigmoid(x, 0.2, 0.6, 2.0, 0.15) + 0.004 * np.random.default_rng(5).standard_normal(21)
    y[0] = 0.2
    for rule in ("gain<0.01", "reach<0.7"):
        expect = None
        for k in range(1, 22):  # by hand: the first prefix whose trusted fit meets the condition
            fit = trusted_fit(x[:k], y[:k])
            if fit is None:
                continue
            now = float(x[k - 1])
            gain = float(fit.forecast([2.0])[0] - fit.forecast([now])[0])
            reach = forecast_band(fit, 2.0)[1]
            if (gain < 0.01) if rule.startswith("gain") else (reach < 0.7):
                expect = k - 1
                break
        assert expect is not None and expect >= 5  # never before 6 evaluations
        assert _stop_after(rule, x, y, cfg) == expect


# ------------------------------------------------------------------------------------------------------ pruning


def test_a_run_exactly_the_margin_below_the_leader_is_not_stopped():
    """"more than the margin below": 0.18 against a leader's lower end of 0.20 at margin 0.02 is at the margin
    (0.2 - 0.18 is 0.020000000000000018 in floats), so it is kept; 0.1799 is stopped."""
    from scalerl.experiments.pruning import Outlook, decide

    def o(lo: float, hi: float) -> Outlook:
        return Outlook((lo + hi) / 2, lo, hi, "A", 1.0)

    for leader_lo, hi, margin in ((0.2, 0.18, 0.02), (0.05, 0.03, 0.02), (0.14, 0.09, 0.05), (0.1, 0.09, 0.01)):
        d = decide({"lead": o(leader_lo, leader_lo + 0.05), "run": o(hi - 0.05, hi)}, margin)
        assert not d["run"].stop, (leader_lo, hi, margin)
        d = decide({"lead": o(leader_lo, leader_lo + 0.05), "run": o(hi - 0.05, hi - 1e-4)}, margin)
        assert d["run"].stop


def _curve(A: float, seed: int, n: int = 30, budget: float = 3000.0):
    from scalerl.curves.synthetic import CurveParams, simulate_eval_curve

    x = np.linspace(budget / n, budget, n)
    return x, simulate_eval_curve(CurveParams(0.3, A, 2.0, budget / 6), x, seed=seed, n_prompts=500, n_samples=8)


def _study(pruner, order, scale: float = 1.0):
    optuna = pytest.importorskip("optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", pruner=pruner, sampler=optuna.samplers.RandomSampler(seed=0))

    def objective(trial):
        x, y = _curve(order[trial.number], seed=10 + trial.number)
        for step, value in zip(x, y):
            trial.report(float(value) * scale, int(step))
            if trial.should_prune():
                raise optuna.TrialPruned()
        return float(y[-1]) * scale

    study.optimize(objective, n_trials=len(order))
    return [t.state.name for t in study.trials]


def test_an_optuna_pruner_reused_for_another_study_decides_on_that_studys_trials():
    """Outlooks were cached by (trial number, number of reports): a second study's trial 0 got the first study's
    trial 0's outlook, and the best run of the second study was pruned against a run that is not in it."""
    pytest.importorskip("optuna")
    from scalerl.integrations.optuna import ForecastPruner

    pruner = ForecastPruner(budget=3000)
    assert _study(pruner, [0.70, 0.45]) == ["COMPLETE", "PRUNED"]
    assert _study(pruner, [0.45, 0.70]) == ["COMPLETE", "COMPLETE"]  # 0.70 leads here: kept
    assert pruner.decisions[1].reason == "the leader"


def test_an_optuna_metric_outside_0_1_is_refused_while_bounded_and_pruned_with_bounded_false():
    """A percent-scale metric with the default bounded=True used to fail every fit silently (FitError caught): no
    run ever had a forecast, and runs were judged only as 'Eq. 1 does not describe it'."""
    pytest.importorskip("optuna")
    from scalerl.integrations.optuna import ForecastPruner

    with pytest.raises(ValueError, match=r"bounded=False.*|outside \[0, 1\]"):
        _study(ForecastPruner(budget=3000), [0.70, 0.45], scale=100.0)
    pruner = ForecastPruner(budget=3000, bounded=False, margin=2.0)
    assert _study(pruner, [0.70, 0.45], scale=100.0) == ["COMPLETE", "PRUNED"]
    assert pruner.decisions[1].stop and pruner.decisions[1].outlook.basis != "peak"
