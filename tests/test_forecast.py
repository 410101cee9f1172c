"""The live forecast and fit.json (§2.1): an unidentified A is shown as a lower bound, never the search's bound as an
estimate; fit.json carries the paper's extrapolation check (fit on the first half, scored on the second)."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from rich.console import Console

from scalerl.config import ForecastConfig, load_config
from scalerl.curves.sigmoid import sigmoid
from scalerl.forecast import Forecaster, describe_A, describe_record
from scalerl.progress import RunDisplay


def test_unidentified_A_reads_as_a_lower_bound_with_its_reason():
    assert describe_A(0.62, 0.58, 0.66, True, True) == "A = 0.620 [0.580, 0.660]"
    text = describe_A(1.0, 0.404, 1.0, False, False)
    assert text == "A ≥ 0.40, not identified yet: the run has not passed Cmid"
    assert "1.0" not in text  # the search's upper bound is no estimate
    assert describe_A(1.0, 0.45, 1.0, False, True).endswith("the interval on A is open at the top")


def test_live_display_shows_the_bound_not_the_search_limit():
    out = io.StringIO()
    display = RunDisplay(load_config(), enabled=True, console=Console(file=out, width=200))
    record = {"step": 300, "val/pass_rate": 0.494, "compute/device_hours": 0.2, "forecast/A": 1.0,
              "forecast/A_lo": 0.399, "forecast/A_hi": 1.0, "forecast/Cmid": 1.015, "forecast/identified": 0.0}
    assert describe_record(record) == ("A ≥ 0.40, not identified yet: the run has not passed Cmid; no track record yet "
                                       "(too few evaluations to backtest the forecast on this run's past)")
    with display:
        display.start(300, {})
        display.eval(record)
        display.eval({"step": 325, "val/pass_rate": 0.5, "val/tier/easy/pass_rate": 0.9,
                      "val/tier/out_of_reach/pass_rate": 0.0})
    shown = out.getvalue()
    assert "A ≥ 0.40, not identified yet" in shown and "1.000" not in shown
    assert "(by tier: easy 0.900, out_of_reach 0.000)" in shown  # where the ceiling comes from


def _curve(n: int = 24, noise: float = 0.004, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    x = np.linspace(0, 3.0, n)
    y = sigmoid(x, 0.2, 0.7, 2.0, 0.8) + noise * np.random.default_rng(seed).standard_normal(n)
    y[0] = 0.2
    return x, y


def test_fit_json_holds_the_half_budget_extrapolation_check(tmp_path):
    x, y = _curve()
    fc = Forecaster(ForecastConfig())
    for xi, yi in zip(x, y):
        fc.update(float(xi), float(yi))
    summary = fc.write_final(tmp_path, "t")
    data = json.loads((tmp_path / "fit.json").read_text())
    check = data["extrapolation"]
    assert summary["extrapolation"] == check
    assert data["fits"][0]["identified"] and data["fits"][0]["A"] == pytest.approx(0.7, abs=0.03)
    # hand-check: the evaluations after half the compute are the held-out ones, scored against the half fit
    later = x > 1.5
    assert check["n"] == int(later.sum()) and check["fit_until"] <= 1.5
    from scalerl import curves

    half = curves.fit_curve(x[~later], y[~later])
    err = np.abs(y[later] - half.forecast(x[later]))  # the reported forecast is what is scored
    assert check["mean_abs_err"] == pytest.approx(err.mean(), abs=1e-9)
    assert check["max_abs_err"] == pytest.approx(err.max(), abs=1e-9)
    assert check["end_true"] == pytest.approx(y[-1]) and abs(check["end_pred"] - y[-1]) < 0.03
    lo, hi = check["A_ci"]
    assert check["covers_full_A"] == ((lo <= data["fits"][0]["A"] <= hi) if check["identified"] else None)
    from scalerl.curves.extrapolation import HeldOut

    vacuous = HeldOut(1.0, 3, 0.01, 0.02, 1.0, 0.6, 0.6, A_ci=(0.4, 1.0), identified=False)
    assert vacuous.covers(0.7) is None  # an interval open at the top covers anything: no evidence
    assert HeldOut(1.0, 3, 0.01, 0.02, 0.7, 0.6, 0.6, A_ci=(0.65, 0.75), identified=True).covers(0.8) is False


def test_fit_json_says_why_there_is_no_check_when_the_half_is_too_short(tmp_path):
    fc = Forecaster(ForecastConfig())
    x = np.array([0.0, 0.5, 6, 7, 8, 9, 10, 11]) / 5  # the first half holds one evaluation after R0
    for xi, yi in zip(x, sigmoid(x, 0.2, 0.7, 2.0, 0.8)):
        fc.update(float(xi), float(yi))
    data = json.loads((tmp_path / "fit.json").read_text()) if fc.write_final(tmp_path, "t")["fit"] else None
    assert data is not None and "note" in data["extrapolation"] and "mean_abs_err" not in data["extrapolation"]


def test_demo_budget_is_steps_with_a_time_cap_as_safety_net(monkeypatch, tmp_path, capsys):
    """The demo's curve must not depend on the machine's load: its RL budget is a step count."""
    import scalerl.pipeline.runner as runner
    from scalerl.cli import main
    from scalerl.commands.train import DEMO_SAFETY_MINUTES, DEMO_STEPS

    seen = []

    def fake_train(cfg, out, resume, show_progress):
        seen.append(cfg)
        return {"fit": None, "points": 0}

    monkeypatch.setattr(runner, "train", fake_train)
    for args in ([], ["--steps", "40", "--minutes", "2"]):
        with pytest.raises(SystemExit) as exit_:  # no fit: the demo's checks fail, and its exit status says so
            main(["demo", "--out", str(tmp_path / "d"), "--quiet", *args])
        assert exit_.value.code == 1
    assert [(c.steps, c.max_minutes) for c in seen] == [(DEMO_STEPS, DEMO_SAFETY_MINUTES), (40, 2.0)]
    assert seen[0].name == load_config("scalerl").name  # the demo runs the scalerl preset


def test_end_of_run_summary_prints_the_bound_and_the_extrapolation_check(tmp_path, capsys):
    from scalerl.commands.train import print_summary

    fit = {"A": 1.0, "A_ci": [0.404, 1.0], "identified": False, "fit_window": [0.01, 0.2], "Cmid": 1.015,
           "B": 1.03, "R0": 0.371, "x": "compute/device_hours"}
    print_summary(tmp_path, {"fit": fit, "extrapolation": {"note": "no evaluation after the first half"}})
    out = capsys.readouterr().out
    assert "A ≥ 0.40, not identified yet: the run has not passed Cmid" in out and "A = 1.000" not in out
    assert "extrapolation check (§4, §5): not possible: no evaluation after the first half" in out
    check = {"n": 6, "mean_abs_err": 0.012, "max_abs_err": 0.025, "end_pred": 0.61, "end_true": 0.6,
             "covers_full_A": True}
    fit = {**fit, "A": 0.62, "A_ci": [0.58, 0.66], "identified": True, "fit_window": [0.01, 3.0]}
    print_summary(tmp_path, {"fit": fit, "extrapolation": check})
    out = " ".join(capsys.readouterr().out.split())
    assert "A = 0.620 [0.580, 0.660] (95% interval)" in out
    assert "mean |error| 0.012, max 0.025" in out and "covers the full run's A" in out
    domain = {**fit, "A": 0.97, "A_ci": [0.95, 0.99], "B": 2.5, "Cmid": 0.02, "R0": 0.4}
    print_summary(tmp_path, {"fit": fit, "extrapolation": check, "domains": {"strings": domain, "code": None}})
    out = " ".join(capsys.readouterr().out.split())
    assert "domain strings: A = 0.970 [0.950, 0.990] (95% interval), B = 2.50, Cmid = 0.02, R0 = 0.400" in out
    assert "domain code: too few evaluations to fit" in out


def test_demo_checks_itself_against_the_issue_targets():
    from scalerl.commands.train import demo_checks

    good = {"fit": {"A": 0.62, "A_ci": [0.58, 0.66], "identified": True},
            "extrapolation": {"end_pred": 0.61, "end_true": 0.595}}
    assert [ok for ok, _ in demo_checks(good)] == [True, True, True]
    wide = {**good, "fit": {**good["fit"], "A_ci": [0.5, 0.7]}}
    assert [ok for ok, _ in demo_checks(wide)] == [True, False, True]
    off = {**good, "extrapolation": {"end_pred": 0.66, "end_true": 0.6}}
    assert [ok for ok, _ in demo_checks(off)] == [True, True, False]
    unidentified = {"fit": {"A": 1.0, "A_ci": [0.4, 1.0], "identified": False}, "extrapolation": {"note": "x"}}
    assert [ok for ok, _ in demo_checks(unidentified)] == [False, False, False]
    assert demo_checks({"fit": None}) == []
    # a mixture: each domain's fit is checked as the overall one is (§5: one sigmoid per domain)
    domains = {"arithmetic": good["fit"], "strings": wide["fit"], "code": None}
    checks = demo_checks({**good, "domains": domains})
    assert [ok for ok, _ in checks] == [True, True, True, True, True, True, False, False]
    assert [what.split(":")[0] for _, what in checks[3:]] == ["arithmetic"] * 2 + ["strings"] * 2 + ["code"]


def test_a_demo_whose_checks_fail_exits_non_zero(monkeypatch, tmp_path, capsys):
    import scalerl.pipeline.runner as runner
    from scalerl.cli import main

    good = {"fit": {"A": 0.62, "A_ci": [0.58, 0.66], "identified": True, "B": 2.0, "Cmid": 1.0, "R0": 0.3,
                    "fit_window": [0.1, 2.0], "x": "compute/device_hours"},
            "extrapolation": {"n": 5, "mean_abs_err": 0.01, "max_abs_err": 0.02, "end_pred": 0.61, "end_true": 0.595,
                              "covers_full_A": True}}
    wide = {**good, "fit": {**good["fit"], "A_ci": [0.5, 0.7]}}
    monkeypatch.setattr(runner, "train", lambda cfg, out, resume, show_progress: good)
    main(["demo", "--out", str(tmp_path / "d"), "--quiet"])  # every check passes: exit 0 (no SystemExit)
    monkeypatch.setattr(runner, "train", lambda cfg, out, resume, show_progress: wide)
    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--out", str(tmp_path / "d"), "--quiet"])
    assert exit_.value.code == 1 and "demo: 1 of 3 checks failed" in capsys.readouterr().err


def test_demo_runs_a_named_preset(monkeypatch, tmp_path):
    import scalerl.pipeline.runner as runner
    from scalerl.cli import main
    from scalerl.commands.train import DEMO_STEPS

    seen = []
    monkeypatch.setattr(runner, "train", lambda cfg, out, resume, show_progress: seen.append(cfg) or {"fit": None})
    for args in ([], ["--steps", "7"]):
        with pytest.raises(SystemExit):
            main(["demo", "--preset", "multitask", "--out", str(tmp_path / "d"), "--quiet", *args])
    assert seen[0].name == "multitask" and [e.name for e in seen[0].task.mix] == ["arithmetic", "strings"]
    # the preset states its own budget, which the demo keeps unless --steps is given
    assert [c.steps for c in seen] == [load_config("multitask").steps, 7] and seen[0].steps != DEMO_STEPS


def test_describe_fit_gives_the_reason_A_is_not_identified():
    from scalerl.forecast import describe_fit

    base = {"A": 0.8, "A_ci": [0.78, 0.835], "A_ci_open": [False, False], "identified": False, "fit_window": [1, 10],
            "Cmid": 2.0, "reliable": True}
    assert describe_fit({**base, "reliable": False}) == "A ≥ 0.78, not identified yet: Eq. 1 does not describe this run"
    assert describe_fit(base).endswith("too few evaluations past Cmid (or residuals) to pin it down")
    assert describe_fit({**base, "A_ci": [0.78, 1.0], "A_ci_open": [False, True]}).endswith("open at the top")
    assert describe_fit({**base, "Cmid": 20.0}).endswith("the run has not passed Cmid")
    unbounded = {**base, "A_ci": [None, None], "A_ci_open": [True, True]}
    assert describe_fit(unbounded) == "A not bounded, not identified yet: the interval on A is open at the top"  # not "A ≥ 0.00"


def test_a_metrics_line_gives_the_reason_and_no_verdict_without_a_track_record():
    """The live line said "the interval on A is open at the top" for a fit flagged unreliable because B was at its
    bound, pointed to a fit.json that is written only at the end of the run, and logged better_than_ruler = 0 for a
    fit with no track record (read as "lost to the ruler")."""
    record = {"step": 10, "compute/device_hours": 0.2, "forecast/A": 0.8, "forecast/A_lo": 0.6, "forecast/A_hi": 1.0,
              "forecast/Cmid": 0.1, "forecast/identified": 0.0, "forecast/reliable": 0.0}
    line = describe_record(record)
    assert "not identified yet: Eq. 1 does not describe this run" in line and "open at the top" not in line
    assert "no track record yet" in line and "`scalerl fit` on the run directory says why" in line
    assert "fit.json" not in line
    fc = Forecaster(ForecastConfig(min_points=4))
    x, y = _curve(n=4)
    keys = {}
    for c, v in zip(x, y):
        keys = fc.update(float(c), float(v))
    assert fc.last_fit.trust["forecast_err"] is None  # four points: too few for the inner backtest
    assert "forecast/A" in keys and "forecast/better_than_ruler" not in keys and "forecast/trust_err" not in keys
    x, y = _curve()
    fc = Forecaster(ForecastConfig())
    for c, v in zip(x, y):
        keys = fc.update(float(c), float(v))
    assert keys["forecast/better_than_ruler"] == float(keys["forecast/trust_err"] < keys["forecast/carry_forward_err"])


def test_the_end_of_a_training_run_prints_the_trust_line(tmp_path, capsys):
    """``scalerl train`` ended with the forecast's A, B, Cmid and no word of how the forecast did on the run's own
    past, which fit.json, ``scalerl fit`` and the run card all give."""
    from scalerl.commands.train import print_summary

    x, y = _curve()
    fc = Forecaster(ForecastConfig())
    for c, v in zip(x, y):
        fc.update(float(c), float(v))
    summary = fc.write_final(tmp_path, "t")
    print_summary(tmp_path, summary)
    out = " ".join(capsys.readouterr().out.split())
    assert f"trust: {summary['fit']['trust']['summary']}" in out
