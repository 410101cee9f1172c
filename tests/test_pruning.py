"""Forecast-guided pruning (issue 28): the rule of scalerl.experiments.pruning, stated once, and the Optuna pruner
that applies it to a real study on synthetic curves with known A."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scalerl.curves.synthetic import CurveParams, simulate_eval_curve
from scalerl.experiments.pruning import Outlook, decide, fit_outlook


def o(value: float, lo: float, hi: float, basis: str = "A") -> Outlook:
    return Outlook(value, lo, hi, basis, 1.0)


def test_the_rule_on_hand_worked_intervals():
    outlooks = {"best": o(0.60, 0.58, 0.62), "far": o(0.50, 0.48, 0.55), "near": o(0.54, 0.50, 0.565),
                "open": o(0.45, -math.inf, 1.0, "forecast"), "young": None}
    d = decide(outlooks, margin=0.02)
    assert d["best"].reason == "the leader" and not d["best"].stop
    assert d["far"].stop and "0.550" in d["far"].reason and "0.580" in d["far"].reason  # 0.55 < 0.58 - 0.02
    assert not d["near"].stop  # 0.565 is within 0.02 of 0.58: it may still win
    assert not d["open"].stop and not d["young"].stop  # no upper bound below the leader; no forecast at all
    assert {k: v.leader for k, v in d.items()} == dict.fromkeys(outlooks, "best")
    assert not any(v.stop for v in decide({"a": None, "b": None}).values())
    assert decide(outlooks, margin=0.1)["far"].stop is False  # a wider margin keeps it: 0.55 > 0.58 - 0.1


def test_a_run_is_never_stopped_while_its_interval_overlaps_the_best_within_the_margin():
    rng = np.random.default_rng(0)
    for _ in range(500):
        n, margin = int(rng.integers(2, 8)), float(rng.uniform(0, 0.05))
        outlooks = {}
        for i in range(n):
            lo, width = rng.uniform(0.3, 0.8), rng.uniform(0.0, 0.2)
            outlooks[f"r{i}"] = None if rng.random() < 0.15 else o(lo + width / 2, lo, lo + width)
        d = decide(outlooks, margin)
        live = [k for k, v in outlooks.items() if v is not None]
        if not live:
            continue
        best_lo = max(outlooks[k].lo for k in live)
        for name, decision in d.items():
            if outlooks[name] is None:
                assert not decision.stop
            elif outlooks[name].hi >= best_lo - margin:
                assert not decision.stop, (name, outlooks[name], best_lo, margin)
            else:
                assert decision.stop
        assert sum(not v.stop for v in d.values()) >= 1  # the leader always survives


def curve(A: float, seed: int, n: int = 40, budget: float = 4000.0) -> tuple[np.ndarray, np.ndarray]:
    x = np.linspace(budget / n, budget, n)
    return x, simulate_eval_curve(CurveParams(0.3, A, 2.0, budget / 6), x, seed=seed, n_prompts=500, n_samples=8)


def test_outlook_of_a_run_past_its_midpoint_holds_its_true_A():
    x, y = curve(0.65, seed=1)
    out = fit_outlook(x, y, budget=4000.0)
    assert out is not None and out.lo <= 0.65 + 0.01 and out.hi >= 0.65 - 0.01
    assert fit_outlook(x[:4], y[:4], budget=4000.0) is None  # too few evaluations: no outlook, never stopped


def test_optuna_pruner_stops_runs_that_cannot_win_and_keeps_the_best():
    optuna = pytest.importorskip("optuna")
    from scalerl.integrations.optuna import ForecastPruner

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    true_A = {0: 0.70, 1: 0.50, 2: 0.69, 3: 0.45}
    pruner = ForecastPruner(budget=4000)
    study = optuna.create_study(direction="maximize", pruner=pruner, sampler=optuna.samplers.RandomSampler(seed=0))
    reported: dict[int, int] = {}

    def objective(trial):
        run = trial.suggest_categorical("run", list(true_A))
        x, y = curve(true_A[run], seed=10 + trial.number)
        for step, value in zip(x, y):
            trial.report(float(value), int(step))
            reported[trial.number] = reported.get(trial.number, 0) + 1
            if trial.should_prune():
                raise optuna.TrialPruned()
        return float(np.mean(y[-5:]))

    for run in true_A:
        study.enqueue_trial({"run": run})
    study.optimize(objective, n_trials=len(true_A))
    states = {t.params["run"]: t.state for t in study.trials}
    assert states[0] == optuna.trial.TrialState.COMPLETE and states[2] == optuna.trial.TrialState.COMPLETE
    assert states[1] == states[3] == optuna.trial.TrialState.PRUNED  # 0.2 below the best: far outside 0.02
    assert reported[1] < 40 and reported[3] < 40
    assert pruner.decisions[1].stop and pruner.decisions[1].leader == 0
    with pytest.raises(ValueError, match="maximize"):
        optuna.create_study(direction="minimize", pruner=pruner).optimize(objective, n_trials=1)


def test_a_forecast_outlook_is_the_printed_forecast_at_the_centre_of_its_band():
    """While A is not identified the outlook is the forecast at the budget (FitResult.forecast, the level plus the
    share of the law's gain the run earned), the same number the band is centred on, not the bare law."""
    from scalerl.curves import fit_curve
    from scalerl.experiments.pruning import outlook_of

    C = np.concatenate([[0.0], np.linspace(60.0, 900.0, 12)])  # well before Cmid = 2000: A is not identified
    y = simulate_eval_curve(CurveParams(0.3, 0.65, 2.0, 2000.0), C, seed=3)
    y[-4:] -= 0.02  # the window ends below the law: the forecast's level follows the data, the law does not
    fit = fit_curve(C, y)
    out = outlook_of(fit, 4000.0)
    assert not fit.identified and out is not None and out.basis == "forecast"
    assert out.value == pytest.approx(float(fit.forecast(4000.0)))
    assert abs(float(fit.predict(4000.0)) - out.value) > 1e-6  # the bare law is another number here
    lo, hi = fit.forecast_interval(4000.0, level=0.95)  # pruning's level (pruning.DEFAULT_LEVEL)
    assert out.lo == pytest.approx(float(lo)) and out.hi == pytest.approx(float(hi)) and out.lo <= out.value <= out.hi


# the lr x10 run of the testbed sweep (docs/RESULTS.md, issue 28): up to 0.72, then falling to 0.63
FALLEN_X = np.array([0.0, 0.0015, 0.0028, 0.004, 0.0055, 0.0064, 0.0074, 0.0087, 0.0102])
FALLEN_Y = np.array([0.545, 0.615, 0.708, 0.711, 0.71, 0.724, 0.704, 0.682, 0.634])


def test_a_run_that_rose_and_stopped_rising_is_judged_on_its_best_so_far():
    """A step then a sag (Eq. 1 flags B at its bound): no forecast to act on, but it has shown what it reaches."""
    from scipy.special import ndtri

    from scalerl.experiments.pruning import stalled_outlook, trusted_fit

    assert trusted_fit(FALLEN_X, FALLEN_Y) is None  # Eq. 1 cannot fall: no forecast to act on
    o = fit_outlook(FALLEN_X, FALLEN_Y, budget=0.04)
    assert o is not None and o.basis == "peak" and o == stalled_outlook(FALLEN_X, FALLEN_Y)
    # hand-worked: best mean of 3 = (0.711 + 0.71 + 0.724) / 3 = 0.715 (evaluations 4-6 of 9); σ = 1.4826 · median
    # |Δy| / √2 with |Δy| = .070 .093 .003 .001 .014 .020 .022 .048 → median 0.021; z = 1.9600 at 95 %
    sigma = 1.4826 * 0.021 / np.sqrt(2)
    assert o.hi == pytest.approx(0.715 + float(ndtri(0.975)) * sigma, abs=1e-5)  # 0.758
    assert o.value == pytest.approx(0.634) and o.lo < o.value
    # below the leader's lower end by more than the margin: stopped, and the reason says on what
    leader = Outlook(0.79, 0.785, 0.82, "A", 0.01)
    d = decide({"fallen": o, "best": leader}, margin=0.02)
    assert d["fallen"].stop and "best so far (it stopped rising" in d["fallen"].reason
    # a fallen run whose best so far comes within the margin of the leader is kept
    assert not decide({"fallen": o, "best": Outlook(0.73, 0.74, 0.76, "A", 0.01)}, margin=0.02)["fallen"].stop


def test_a_run_still_rising_or_never_risen_gets_no_peak_outlook():
    from scalerl.experiments.pruning import stalled_outlook

    y = FALLEN_Y.copy()
    y[-3:] = [0.722, 0.728, 0.731]  # its best is its latest: still rising
    assert stalled_outlook(FALLEN_X, y) is None
    flat = np.array([0.55, 0.56, 0.54, 0.555, 0.55, 0.545, 0.55, 0.54, 0.548])  # has not risen: a late starter?
    assert stalled_outlook(FALLEN_X, flat) is None
    assert stalled_outlook(FALLEN_X[:5], FALLEN_Y[:5]) is None  # too few evaluations to judge anything


@pytest.mark.parametrize("share", [0.275, 0.3])
def test_no_run_that_ties_the_winner_is_stopped_on_the_testbed_sweep(share):
    """The 22 runs of the testbed's unpruned sweep (tests/data/testbed/PROVENANCE.txt), decided on their evaluations up
    to ``share`` of the budget, as an Optuna pruner decides at whatever point a trial reports: no run that ended within
    the margin of the best end is stopped. With 80% forecast bands the leader at 0.3 was a run whose band's lower end
    (0.786) lay 0.04 above where it ended (0.746), and five runs that tied the winner were stopped (four at 0.275); at
    the 95% of A's interval none is."""
    import csv
    from collections import defaultdict
    from pathlib import Path

    points, ends = defaultdict(list), {}
    with open(Path(__file__).parent / "data" / "testbed" / "sweep_first_30pct.csv", newline="") as f:
        for row in csv.DictReader(f):
            points[row["run"]].append((float(row["compute"]), float(row["pass_rate"])))
            ends[row["run"]] = float(row["ends_at"])
    assert len(points) == 22
    budget, best = 0.04, max(ends.values())
    outlooks = {}
    for run, xy in points.items():
        x, y = np.array(xy).T
        keep = x <= share * budget + 1e-12
        outlooks[run] = fit_outlook(x[keep], y[keep], budget)
    stopped = {run for run, d in decide(outlooks).items() if d.stop}
    assert not {run for run in stopped if ends[run] >= best - 0.02}
    assert stopped >= {"lr-x0.1-s0", "lr-x0.1-s1"}  # the two runs far below are still stopped
