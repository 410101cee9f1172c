"""``scalerl train --stop-when`` (issue 28): the expression parser, the decisions on hand-made curves, the live
display, the one-line errors, and the runner stopping at a compute budget or on the rule and resuming from there."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from rich.console import Console

from scalerl.config import load_config, to_yaml
from scalerl.curves.sigmoid import sigmoid
from scalerl.curves.synthetic import CurveParams, simulate_eval_curve
from scalerl.errors import UserError
from scalerl.experiments.stopping import Condition, check, parse, run_budget


def test_parser_reads_each_condition_and_their_combinations():
    assert parse("gain<0.005") == [Condition("gain", "<", 0.005)]
    assert parse(["reward>=0.8", "reach < 0.8"]) == [Condition("reward", ">=", 0.8), Condition("reach", "<", 0.8)]
    assert parse("gain<0.01, reward>0.5 or reach<0.7") == [
        Condition("gain", "<", 0.01), Condition("reward", ">", 0.5), Condition("reach", "<", 0.7)]
    assert str(parse("reward>=0.80")[0]) == "reward>=0.8"


@pytest.mark.parametrize("expr, needle", [
    ("", "no condition given"),
    ("gain", "not NAME OP NUMBER"),
    ("loss<0.1", "unknown condition 'loss'"),
    ("gain>0.1", "gain (the forecast gain over the rest of the budget) takes <, not >"),
    ("reward<0.8", "takes >= or >, not <"),
    ("gain<abc", "'abc' is not a number"),
    ("gain<nan", "finite"),
    ("gain<0", "above 0"),
    ("reward>=1.5", "between 0 and 1"),
    ("reach<-0.1", "between 0 and 1"),
    ("gain<0.01,,reward>=0.5", "an empty condition"),
])
def test_bad_expressions_are_one_line_user_errors(expr, needle):
    with pytest.raises(UserError) as err:
        parse(expr)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_cli_bad_stop_when_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys):
    from scalerl.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["train", "--out", str(tmp_path / "run"), "--stop-when", "gain>0.1"])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1
    assert err.startswith("error: --stop-when 'gain>0.1'") and not (tmp_path / "run").exists()


def test_run_budget_is_the_compute_at_the_end_of_the_run():
    cfg = load_config(None, None, ["steps=40"])
    assert run_budget(cfg, 10, 0.5, 60.0) == pytest.approx(2.0)  # 0.05 device-hours a step, 40 steps
    assert run_budget(cfg, 0, 0.0, 0.0) is None  # nothing trained yet: unknown
    minutes = load_config(None, None, ["steps=40", "max_minutes=2"])
    assert run_budget(minutes, 10, 0.5, 60.0) == pytest.approx(1.0)  # the 2 minutes end it at step 20
    hours = load_config(None, None, ["steps=40", "max_device_hours=0.75"])
    assert run_budget(hours, 10, 0.5, 60.0) == 0.75


def curve(A: float, Cmid: float, upto: float, n: int = 30) -> tuple[np.ndarray, np.ndarray]:
    x = np.linspace(0.0, upto, n)
    return x, simulate_eval_curve(CurveParams(0.2, A, 2.0, Cmid), x, seed=3, n_prompts=2000, n_samples=16)


def test_gain_stops_a_run_that_has_levelled_off_and_not_one_still_rising():
    x, y = curve(0.6, Cmid=0.1, upto=1.0)  # past 10x Cmid: flat
    flat = check(parse("gain<0.02"), x, y, budget=2.0)
    assert flat.stop and "gain<0.02 holds" in flat.reason and flat.metrics["stop/gain"] < 0.02
    x, y = curve(0.6, Cmid=1.0, upto=1.0)  # at Cmid: half the gain still to come by 2.0
    rising = check(parse("gain<0.02"), x, y, budget=2.0)
    assert not rising.stop and rising.metrics["stop/gain"] > 0.05
    assert "0.02" in rising.text and "away" in rising.text


def test_reach_stops_when_the_target_is_above_the_interval_and_reward_when_reached():
    x, y = curve(0.5, Cmid=0.3, upto=1.0)
    far = check(parse("reach<0.9"), x, y, budget=2.0)
    assert far.stop and far.metrics["stop/reach"] < 0.9
    near = check(parse("reach<0.45"), x, y, budget=2.0)
    assert not near.stop and near.metrics["stop/reach"] >= 0.45
    assert check(parse("reward>=0.4"), x, y, budget=2.0).stop == (y[-1] >= 0.4)
    assert check(parse("reward>=0.99"), x, y, budget=2.0).stop is False


def test_no_trustworthy_forecast_never_stops_on_gain_or_reach():
    x, y = curve(0.6, Cmid=0.1, upto=1.0, n=5)  # fewer than 6 evaluations
    v = check(parse("gain<0.5, reach<0.99"), x, y, budget=2.0)
    assert not v.stop and v.text.count("no trustworthy forecast yet") == 2 and v.metrics == {}
    falling = sigmoid(np.linspace(0, 1, 20), 0.6, 0.2, 2.0, 0.3)  # a curve that falls: Eq. 1 is not for it
    v = check(parse("reach<0.99"), np.linspace(0, 1, 20), falling, budget=2.0)
    assert not v.stop


def test_live_display_shows_how_far_each_condition_is():
    from scalerl.progress import RunDisplay

    out = io.StringIO()
    x, y = curve(0.6, Cmid=1.0, upto=1.0)
    verdict = check(parse("gain<0.02,reward>=0.9"), x, y, budget=2.0)
    display = RunDisplay(load_config(), enabled=True, console=Console(file=out, width=300))
    with display:
        display.start(0, {})
        display.eval({"step": 10, "val/pass_rate": float(y[-1])}, verdict.text)
    shown = out.getvalue()
    assert "stop-when: gain" in shown and "(stops at <0.02" in shown and "reward" in shown and "away" in shown


def micro_config(*sets: str):
    from scalerl.config import CONFIG_DIR
    from scalerl.experiments.spec import load_sweep

    return load_sweep(CONFIG_DIR / "sweeps" / "micro.yaml", list(sets)).configs()["scalerl"]


@pytest.mark.slow
def test_runner_stops_at_a_compute_budget_checkpoints_there_and_resumes(tmp_path, monkeypatch):
    from scalerl.compute import ComputeMeter
    from scalerl.pipeline.runner import train
    from scalerl.runlog import checkpoint_files

    # a meter that reads 1 device-hour once anything was generated: the first step reaches the budget of 0.5
    monkeypatch.setattr(ComputeMeter, "device_hours", property(lambda m: float(m.gen_tokens > 0)))
    out = tmp_path / "run"
    cfg = micro_config("steps=6", "eval.every=1", "max_device_hours=0.5")  # step 1 evaluates in the loop
    train(cfg, out, show_progress=False)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "val/pass_rate" not in r] == [1]
    assert [r["step"] for r in rows if "val/pass_rate" in r] == [0, 1]  # evaluated where it stopped
    assert 1 in checkpoint_files(out)  # checkpointed there too (checkpoint_every is 2)
    train(cfg.model_copy(update={"max_device_hours": None}), out, resume=True, show_progress=False)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "val/pass_rate" not in r] == [1, 2, 3, 4, 5, 6]


@pytest.mark.slow
def test_runner_stops_on_the_rule_and_says_why(tmp_path, capsys):
    from scalerl.cli import main

    out = tmp_path / "run"
    cfg = micro_config("steps=6", "eval.every=2")
    (tmp_path / "c.yaml").write_text(to_yaml(cfg))
    main(["train", "--out", str(out), "--config", str(tmp_path / "c.yaml"), "--quiet", "--stop-when", "reward>=0"])
    printed = capsys.readouterr().out
    assert "stopped before the budget (--stop-when): reward>=0 holds" in printed
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0] and rows[0]["stop/reward"] == rows[0]["val/pass_rate"]
    # the reason is kept in the run directory: fit.json (no fit of one evaluation beside it) and the run card
    assert json.loads((out / "fit.json").read_text()) == {"fits": [], "stopped": "reward>=0 holds: " + printed.split(
        "reward>=0 holds: ", 1)[1].split(";")[0].strip()}
    assert "Stopped before its budget by `--stop-when`: reward&gt;=0 holds" in (out / "README.md").read_text()


def test_gain_and_reach_read_the_fit_the_run_logs_its_window_included():
    """A run with ``forecast.fit_from`` logs ``forecast/*`` from that window; ``--stop-when gain<…`` fitted the
    default window instead, so it could stop on a forecast the run never showed."""
    from types import SimpleNamespace

    from scalerl.curves import fit_curve
    from scalerl.experiments.stopping import StopWhen

    x, y = curve(0.7, 2.0, 3.0)
    budget, fit_from = 6.0, 1.2
    own = fit_curve(x, y, fit_from=fit_from)
    want = float(own.forecast([budget])[0] - own.forecast([float(max(x))])[0])
    default = fit_curve(x, y)
    assert abs(want - float(default.forecast([budget])[0] - default.forecast([float(max(x))])[0])) > 1e-6
    assert check([Condition("gain", "<", 0.5)], x, y, budget, fit_from=fit_from).metrics["stop/gain"] == \
        pytest.approx(want)
    cfg = micro_config("steps=20", f"forecast.fit_from={fit_from}", "max_device_hours=6")
    state = SimpleNamespace(forecaster=SimpleNamespace(x=list(x), y=list(y), bounded=True), step=10,
                            meter=SimpleNamespace(device_hours=float(max(x))), wall=lambda: 1.0)
    verdict = StopWhen((Condition("gain", "<", 0.5),))(cfg, state)
    assert verdict.metrics["stop/gain"] == pytest.approx(want)
