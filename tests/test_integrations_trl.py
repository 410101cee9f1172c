"""The TRL forecast callback in a real (micro) GRPOTrainer run: examples/trl_forecast.py's short version.

One run per module writes the files every test here reads: TRL's trainer_state.json and TensorBoard events, and
the callback's fit.json and curve.png. ``scalerl fit`` on those files must agree with the callback's last fit."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

from scalerl.curves import load_series  # noqa: E402
from scalerl.errors import UserError  # noqa: E402
from test_bench_trl import MICRO  # noqa: E402  (the micro TRL configuration of the benchmark's test)
from test_cli_curves import run as _cli  # noqa: E402

_PATH = Path(__file__).resolve().parent.parent / "examples" / "trl_forecast.py"
_spec = importlib.util.spec_from_file_location("trl_forecast", _PATH)
example = importlib.util.module_from_spec(_spec)
sys.modules["trl_forecast"] = example
_spec.loader.exec_module(example)

STEPS, EVERY = 12, 2  # 6 evaluations during training + the one at step 0: the Forecaster's 6 points and more


@pytest.fixture(scope="module")
def trl_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("trl") / "out"
    callback = example.run(out, STEPS, EVERY, "flops", MICRO, threads=1, reward="brevity")
    return out, callback


def test_callback_logs_the_forecast_through_trl_and_writes_fit_and_curve(trl_run):
    out, cb = trl_run
    assert {"forecast/A", "forecast/B", "forecast/Cmid", "forecast/identified", "forecast/pred_at_budget"} <= set(cb.last)
    assert (out / "curve.png").stat().st_size > 0
    fit = json.loads((out / "fit.json").read_text())["fits"][0]
    assert fit["A"] == pytest.approx(cb.last["forecast/A"]) and fit["x"] == "compute/flops" and fit["y"] == "eval_reward"
    # every evaluation is a point: the one before train() fixes R0 (compute 0), the 6 during training are fitted
    assert len(cb.forecaster.x) == STEPS // EVERY + 1 and cb.forecaster.x[0] == 0.0
    assert fit["n_points"] == STEPS // EVERY and fit["R0"] == cb.forecaster.y[0]
    # the forecast reached TensorBoard through TRL's own TensorBoardCallback (HF prefixes training keys "train/")
    a = load_series(out / "runs", x="step", y="forecast/A")
    assert a.y[-1] == pytest.approx(cb.last["forecast/A"], rel=1e-6)
    state = json.loads((out / "trainer_state.json").read_text())
    assert any("forecast/pred_at_budget" in e for e in state["log_history"])


def test_flops_axis_is_six_p_per_token_seen(trl_run):
    out, cb = trl_run
    state = json.loads((out / "trainer_state.json").read_text())
    tokens = {e["step"]: e["num_tokens"] for e in state["log_history"] if "num_tokens" in e and "eval_reward" not in e}
    flops = {e["step"]: e["compute/flops"] for e in state["log_history"] if "compute/flops" in e}
    assert flops[0] == 0.0
    for step in range(EVERY, STEPS + 1, EVERY):
        assert flops[step] == 6.0 * cb.meter.n_params * tokens[step]


def test_scalerl_fit_on_trainer_state_agrees_with_the_callback(trl_run, capsys):
    out, cb = trl_run
    code, stdout, err = _cli(["fit", out / "trainer_state.json", "--x", "compute/flops", "--y", "eval_reward",
                              "--json"], capsys)
    assert code == 0, err
    fit = json.loads(stdout)["fits"][0]
    assert fit["A"] == pytest.approx(cb.last["forecast/A"], rel=1e-9)
    assert fit["B"] == pytest.approx(cb.last["forecast/B"], rel=1e-9)
    assert fit["identified"] == bool(cb.last["forecast/identified"])


def test_scalerl_fit_on_the_tensorboard_events_agrees_to_float32(trl_run, capsys):
    out, cb = trl_run
    # the same --x/--y as for trainer_state.json: eval_reward is the tag eval/reward, compute/flops train/compute/flops
    code, stdout, err = _cli(["fit", out, "--x", "compute/flops", "--y", "eval_reward", "--json"], capsys)
    assert code == 0, err  # the output dir: its trainer_state.json
    code, stdout, err = _cli(["fit", out / "runs", "--x", "compute/flops", "--y", "eval_reward", "--json"], capsys)
    assert code == 0, err
    fit = json.loads(stdout)["fits"][0]
    assert fit["n_points"] == STEPS // EVERY
    assert fit["A"] == pytest.approx(cb.last["forecast/A"], rel=1e-3)


def test_trainer_state_reader_joins_an_evaluation_with_its_step(trl_run):
    out, _ = trl_run
    s = load_series(out / "trainer_state.json", x="compute/flops", y="eval_reward")
    assert s.x[0] == 0.0 and np.all(np.diff(s.x) > 0) and s.x.size == STEPS // EVERY + 1
    steps = load_series(out / "trainer_state.json", x="step", y="eval_reward")
    assert steps.x.tolist() == [0.0, *range(EVERY, STEPS + 1, EVERY)]
    assert steps.y.tolist() == s.y.tolist()
    with pytest.raises(UserError, match="no column 'eval_accuracy'"):
        load_series(out / "trainer_state.json", x="step", y="eval_accuracy")


def test_callback_needs_attach_and_a_known_axis():
    from scalerl.integrations.trl import ForecastCallback

    with pytest.raises(UserError, match="axis 'gpu' is not one of flops, device_hours, steps"):
        ForecastCallback("eval_reward", axis="gpu")
    with pytest.raises(UserError, match=r"attach\(trainer\)"):
        ForecastCallback("eval_reward").on_train_begin(None, None, None)


@pytest.fixture
def one_thread():
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)  # a micro model: more threads only add synchronisation
    yield
    torch.set_num_threads(n)


def test_callback_in_a_plain_trainer_on_steps_and_device_hours(tmp_path, one_thread):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    from scalerl.integrations.trl import ForecastCallback

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=16))
    seq = torch.arange(12) % 4 + 1  # a repeating pattern: the loss falls within a few steps
    data = [{"input_ids": seq, "labels": seq} for _ in range(64)]
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[], max_steps=12, learning_rate=3e-2,
                             per_device_train_batch_size=8, eval_strategy="steps", eval_steps=2, logging_steps=4,
                             save_strategy="no", disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=data, eval_dataset=data[:8])
    hours = ForecastCallback("eval_loss", axis="device_hours", bounded=False, min_points=4).attach(trainer)
    steps = ForecastCallback("eval_loss", axis="steps", bounded=False, min_points=4).attach(trainer)
    trainer.train()
    assert steps.forecaster.x == [2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
    assert all(b > a > 0 for a, b in zip(hours.forecaster.x, hours.forecaster.x[1:]))
    logged = [e for e in trainer.state.log_history if "compute/device_hours" in e]
    assert [e["step"] for e in logged] == list(range(2, 13, 2))
    assert steps.last["forecast/pred_at_budget"] == pytest.approx(steps.forecaster._fit(ci=True).forecast(12.0))
    trainer.save_state()
    fit = json.loads((tmp_path / "fit.json").read_text())["fits"][0]  # the last callback to finish wrote it
    assert fit["x"] == "step" and fit["y"] == "eval_loss"
    series = load_series(tmp_path / "trainer_state.json", x="step", y="eval_loss")
    assert series.x.tolist() == steps.forecaster.x and series.y.tolist() == steps.forecaster.y
