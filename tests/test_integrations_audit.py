"""Audit of the integrations and the notebook API as a user meets them: the TRL/transformers forecast callback on
odd logs (a NaN or non-numeric evaluation, a metric outside [0, 1] while ``bounded``), the Optuna pruner on an
infinite intermediate value, and ``api.fit`` on an A its data has not identified. CPU, seconds, no network."""

from __future__ import annotations

import logging
import math
import types

import numpy as np
import pytest

RISING = [0.1, 0.2, 0.35, 0.5, 0.6, 0.65, 0.68, 0.7, 0.71]


def _callback(monkeypatch, tmp_path, metric="eval_reward", **kw):
    """A ForecastCallback on the steps axis whose ``Trainer.log`` records what it logs (no model, no training)."""
    transformers = pytest.importorskip("transformers")
    from scalerl.integrations.trl import ForecastCallback

    logged: list[dict] = []
    monkeypatch.setattr(transformers.Trainer, "log", lambda self, d: logged.append(d))
    cb = ForecastCallback(metric, axis="steps", **kw)
    cb.trainer = object()  # attach()'s effect, without a trainer to register with
    args = types.SimpleNamespace(max_steps=100, world_size=1, output_dir=str(tmp_path))

    def log(step: int, value) -> None:
        state = types.SimpleNamespace(global_step=step, max_steps=100, log_history=[{}], is_world_process_zero=True)
        cb.on_log(args, state, None, logs={metric: value})

    def end(step: int) -> None:
        cb.on_train_end(args, types.SimpleNamespace(global_step=step, is_world_process_zero=True), None)

    return cb, log, end, logged


def test_trl_callback_skips_a_nan_evaluation_instead_of_losing_every_later_fit(monkeypatch, tmp_path, caplog):
    # TRL logs eval_reward = NaN when every reward function returns None for a batch; one such evaluation used to
    # enter the fit's data, so no later update had a forecast and the end said "fewer than 6, or the reward never moved"
    cb, log, end, logged = _callback(monkeypatch, tmp_path)
    values = RISING[:4] + [float("nan"), float("inf")] + RISING[4:]
    with caplog.at_level(logging.WARNING, logger="scalerl.integrations.trl"):
        for i, v in enumerate(values):
            log(10 * (i + 1), v)
        end(10 * len(values))
    assert all(math.isfinite(y) for y in cb.forecaster.y) and len(cb.forecaster.y) == len(RISING)
    assert "forecast/A" in cb.last and "forecast/A" in logged[-1]
    assert (tmp_path / "fit.json").exists()
    assert "not a finite number" in caplog.text


def test_trl_callback_never_raises_on_a_non_numeric_metric(monkeypatch, tmp_path):
    cb, log, end, _ = _callback(monkeypatch, tmp_path)
    for i, v in enumerate(RISING[:3] + ["n/a", [0.4]] + RISING[3:]):
        log(10 * (i + 1), v)  # used to raise ValueError/TypeError into the user's training
    end(100)
    assert len(cb.forecaster.y) == len(RISING) and "forecast/A" in cb.last


def test_trl_callback_says_why_a_bounded_fit_of_a_loss_failed(monkeypatch, tmp_path, caplog):
    # the default bounded=True on eval_loss (> 1): no forecast at all, and the reason given was the wrong one
    cb, log, end, _ = _callback(monkeypatch, tmp_path, metric="eval_loss")
    with caplog.at_level(logging.WARNING, logger="scalerl.integrations.trl"):
        for i, v in enumerate([3.0, 2.5, 2.0, 1.8, 1.6, 1.5, 1.45, 1.4]):
            log(10 * (i + 1), v)
        live = caplog.text  # said during training, not only at its end
        end(80)
    assert not cb.last
    assert "bounded=False" in live and "outside [0, 1]" in live
    assert "never moved" not in caplog.text and caplog.text.count("bounded=False") == 2


def test_trl_callback_with_a_single_evaluation_says_too_few_points(monkeypatch, tmp_path, caplog):
    cb, log, end, logged = _callback(monkeypatch, tmp_path)
    with caplog.at_level(logging.WARNING, logger="scalerl.integrations.trl"):
        log(0, 0.3)
        end(10)
    assert not cb.last and not (tmp_path / "fit.json").exists()
    assert "no fit from 1 points of eval_reward: fewer than 6 points" in caplog.text


def test_optuna_pruner_treats_an_infinite_report_as_no_report():
    optuna = pytest.importorskip("optuna")
    from scalerl.curves.synthetic import CurveParams, simulate_eval_curve
    from scalerl.integrations.optuna import ForecastPruner

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    steps = np.arange(1, 41) * 400
    curves = [simulate_eval_curve(CurveParams(R0=0.3, A=a, B=1.9, Cmid=3000.0), steps.astype(float), seed=i)
              for i, a in enumerate([0.70, 0.45])]
    pruned: dict[int, int] = {}

    def objective(trial):
        for i, (step, reward) in enumerate(zip(steps, curves[trial.number])):
            trial.report(float("inf") if trial.number == 1 and i == 3 else float(reward), int(step))
            if trial.should_prune():
                pruned[trial.number] = int(step)
                raise optuna.TrialPruned()
        return float(reward)

    pruner = ForecastPruner(budget=16000)
    study = optuna.create_study(direction="maximize", pruner=pruner, sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(objective, n_trials=2)
    # one infinite report used to make the 0.45 trial's outlook reach inf: it could never be pruned
    assert 0 not in pruned and 1 in pruned
    assert math.isfinite(pruner.decisions[1].outlook.hi)


def test_api_fit_warns_when_A_is_not_identified():
    from scalerl import api
    from scalerl.curves.synthetic import TABLE1, simulate_eval_curve

    compute = np.concatenate([[0.0], np.linspace(160, 16000, 100)])
    reward = simulate_eval_curve(TABLE1["scalerl-8b"], compute, seed=0)
    with pytest.warns(UserWarning, match="A is not identified"):
        early = api.fit(x=compute[:12], y=reward[:12])  # docs/api.md's early run: f.A alone reads as an estimate
    assert not early.identified
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        full = api.fit(x=compute, y=reward)  # an identified fit stays quiet
    assert full.identified


def test_flops_axis_counts_the_steps_since_the_trainer_last_logged(tmp_path):
    """A plain Trainer stores its flos in ``state.total_flos`` only when it logs: evaluating every 2 steps and
    logging every 4 used to give pairs of evaluations the same compute (the first one after train() even 0)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    from scalerl.integrations.trl import ForecastCallback

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                             num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=16))
        seq = torch.arange(12) % 4 + 1
        data = [{"input_ids": seq, "labels": seq} for _ in range(32)]
        args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[], max_steps=8, learning_rate=3e-2,
                                 per_device_train_batch_size=8, eval_strategy="steps", eval_steps=2, logging_steps=4,
                                 save_strategy="no", disable_tqdm=True)
        trainer = Trainer(model=model, args=args, train_dataset=data, eval_dataset=data[:8])
        cb = ForecastCallback("eval_loss", axis="flops", bounded=False).attach(trainer)
        trainer.train()
    finally:
        torch.set_num_threads(threads)
    x = np.array(cb.forecaster.x)
    assert x.size == 4 and x[0] > 1.0  # evaluations at steps 2, 4, 6, 8; every step the same batch shape
    assert x / x[0] == pytest.approx([1, 2, 3, 4])
    assert x[-1] == pytest.approx(trainer.state.total_flos)
