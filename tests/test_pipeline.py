"""End-to-end RL on a micro model: each schedule and loss runs, the staleness bound holds on every trained
sample, in-flight updates happen, and a run killed with SIGKILL resumes exactly (§3.1, docs/architecture.md)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from scalerl import algo
from scalerl.config import load_config
from scalerl.pipeline.runner import train
from scalerl.runlog import read_metrics

MICRO = [
    "model.d_model=32",
    "model.n_layers=1",
    "model.n_heads=2",
    "model.max_seq_len=96",
    "batch.prompts=4",
    "batch.generations=4",
    "task.n_train=64",
    "task.n_val=8",
    "task.params.max_operands=5",  # the 2-5 operand task, not the testbed's tiers (9-10 operands exceed 96 tokens)
    "eval.n_samples=1",
    "eval.every=3",
    "warmup.steps=0",
    "algo.length.params.think_lo=6",
    "algo.length.params.think_hi=10",
    "algo.length.params.answer_budget=4",
    "algo.length.params.max_new_tokens=36",
    "tensorboard=false",
    "threads=1",
]


def micro(*sets: str):
    return load_config("scalerl", None, [*MICRO, *sets])


def train_lines(run_dir: Path) -> list[dict]:
    return [r for r in read_metrics(run_dir) if "loss" in r]


@pytest.mark.parametrize("schedule", ["pipeline_rl", "ppo_off_policy"])
def test_each_schedule_runs_and_bounds_staleness(tmp_path, schedule):
    cfg = micro("backend=inline", "steps=6", f"schedule.name={schedule}", "schedule.k=2", "checkpoint_every=100")
    train(cfg, tmp_path, show_progress=False)
    lines = train_lines(tmp_path)
    assert [r["step"] for r in lines] == list(range(1, 7))
    assert all(r["train/stale_dropped"] == 0 for r in lines)
    staleness = [r["train/staleness_max"] for r in lines]
    if schedule == "ppo_off_policy":  # k batches with frozen weights, then k steps: staleness b mod k
        assert staleness == [0, 1, 0, 1, 0, 1]
    else:  # run sequentially, PipelineRL is on-policy
        assert staleness == [0] * 6
    evals = [r for r in read_metrics(tmp_path) if "val/pass_rate" in r]
    assert [r["step"] for r in evals] == [0, 3, 6]
    assert evals[0]["compute/device_hours"] == 0.0  # R0 is the reward at zero compute
    assert (tmp_path / "config.yaml").exists() and (tmp_path / "checkpoints" / "latest").exists()


@pytest.mark.parametrize("loss", algo.LOSSES.names())
def test_each_loss_takes_steps(tmp_path, loss):
    cfg = micro("backend=inline", "steps=2", f"algo.loss.name={loss}", "algo.zero_variance_filter=false", "eval.every=100")
    train(cfg, tmp_path, show_progress=False)
    lines = train_lines(tmp_path)
    assert len(lines) == 2
    for r in lines:
        assert r["loss"] is not None and r["grad_norm"] is not None
        assert r["train/nan_skipped"] == 0.0
        assert 0.0 <= r["train/is_ratio_capped_frac"] <= 1.0


def test_local_pipeline_inflight_updates_and_staleness(tmp_path):
    """Generator in its own process, PipelineRL-2: every trained sample is at most 2 versions old, and
    weights arrive mid-sequence (a sequence's sampled tokens span several policy versions)."""
    cfg = micro("backend=local", "steps=10", "schedule.k=2", "checkpoint_every=100", "eval.every=100")
    train(cfg, tmp_path, show_progress=False)
    lines = train_lines(tmp_path)
    assert len(lines) == 10
    assert max(r["train/staleness_max"] for r in lines) <= 2
    assert all(r["train/stale_dropped"] == 0 for r in lines)
    assert any(r["train/staleness_max"] > 0 for r in lines)  # generation really ran ahead of training


def _consumed(run_dir: Path) -> list[tuple[int, list[str]]]:
    lines = (run_dir / "consumed.jsonl").read_text().splitlines()
    return [(d["step"], d["problem_ids"]) for d in map(json.loads, lines)]


def _kill9_sets(backend: str) -> list[str]:
    return [*MICRO, f"backend={backend}", "steps=12", "checkpoint_every=3", "eval.every=4"]


def _cli(run_dir: Path, *extra: str, backend: str = "inline") -> list[str]:
    args = [sys.executable, "-m", "scalerl", "train", "--quiet", "--out", str(run_dir)]
    for s in _kill9_sets(backend):
        args += ["--set", s]
    return args + list(extra)


def _children(pid: int) -> set[int]:
    """Processes ``pid`` started (the generator and multiprocessing's resource tracker), from /proc."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found |= {int(c) for c in (task / "children").read_text().split()}
        except OSError:
            pass
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("backend", ["inline", "local"])
def test_kill9_then_resume_matches_uninterrupted_run(tmp_path, backend):
    """SIGKILL midway, then --resume: the same prompts, steps, evaluations and rewards as an uninterrupted run.
    The local backend's generator process exits by itself once its trainer is gone (no orphan holding shared
    memory), and the killed run's half-written temporaries are removed when it resumes. The uninterrupted
    reference runs in this process (the config ``scalerl train --set ...`` builds, without an interpreter start-up):
    a run's outcome does not depend on the process it runs in."""
    ref, victim = tmp_path / "ref", tmp_path / "victim"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    train(load_config("scalerl", None, _kill9_sets(backend)), ref, show_progress=False)

    proc = subprocess.Popen(_cli(victim, backend=backend), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    latest = victim / "checkpoints" / "latest"
    deadline = time.time() + 240
    children: set[int] = set()
    while time.time() < deadline:
        children |= _children(proc.pid)
        if latest.exists() and latest.read_text().strip() >= "step_0000006.pt":
            break
        time.sleep(0.05)
    children |= _children(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert len(_consumed(victim)) < 12  # it really died midway
    if backend == "local":
        assert children  # the generator process (and the resource tracker) ran
    deadline = time.time() + 30
    while any(map(_alive, children)) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(map(_alive, children)), "a child of the killed run outlived it"

    stale = victim / "checkpoints" / ".step_0000009.pt.abcd1234.tmp.pt"
    stale.write_bytes(b"half a checkpoint")  # what a kill during torch.save leaves
    done = subprocess.run(_cli(victim, "--resume", backend=backend), env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not stale.exists()
    assert _consumed(victim) == _consumed(ref)  # same prompts, none lost or repeated
    steps = [r["step"] for r in read_metrics(victim) if "loss" in r]
    assert steps == list(range(1, 13))  # no gap, no duplicate
    evals = [r["step"] for r in read_metrics(victim) if "val/pass_rate" in r]
    assert evals == [0, 4, 8, 12]
    # sampling is seeded per batch; a checkpoint holds every batch already under way: identical outcomes
    ref_rewards = [r["train/reward_mean"] for r in read_metrics(ref) if "loss" in r]
    assert [r["train/reward_mean"] for r in read_metrics(victim) if "loss" in r] == ref_rewards


def test_nan_loss_skips_the_step(tmp_path):
    from scalerl.build import build_model
    from scalerl.trainer import Trainer

    cfg = micro("algo.zero_variance_filter=false")
    bundle = build_model(cfg.model, 0)
    trainer = Trainer(bundle.model, cfg.algo, cfg.optim)
    batch = _learnable_batch(gen_logprob=float("nan"))
    before = {k: v.clone() for k, v in bundle.model.state_dict().items()}
    stats = _step(trainer, batch)
    assert stats["train/nan_skipped"] == 1.0
    for k, v in bundle.model.state_dict().items():
        assert torch.equal(v, before[k]), k


def _step(trainer, batch: "RolloutBatch") -> dict[str, float]:
    """The driver's step on ``batch``: its preparation stage (no zero-variance filter here), then the trainer."""
    from scalerl.pipeline.prepare import StageConfig, train_step
    from scalerl.pipeline.schedules import SCHEDULES

    stage = StageConfig.of(micro("algo.zero_variance_filter=false").algo, SCHEDULES.get("pipeline_rl")(8))
    return train_step(trainer, batch, stage)


def _learnable_batch(gen_logprob: float = -3.0) -> "RolloutBatch":
    """Two groups of two with mixed rewards: every sample has a non-zero advantage."""
    from scalerl.rollout import RolloutBatch

    n, t = 4, 6
    mask = torch.zeros(n, t)
    mask[:, 3:] = 1
    return RolloutBatch(
        index=0,
        problem_ids=["a", "b"],
        group=torch.tensor([0, 0, 1, 1]),
        input_ids=torch.randint(3, 20, (n, t), generator=torch.Generator().manual_seed(0)),
        attention_mask=torch.ones(n, t, dtype=torch.bool),
        loss_mask=mask,
        gen_logprobs=torch.full((n, t), gen_logprob),
        versions=torch.zeros(n, t, dtype=torch.long),
        rewards=torch.tensor([1.0, -1.0, 1.0, -1.0]),
        correct=torch.tensor([True, False, True, False]),
        truncated=torch.zeros(n, dtype=torch.bool),
        interrupted=torch.zeros(n, dtype=torch.bool),
        completion_lengths=torch.full((n,), 3),
    )


def test_update_to_nonfinite_weights_is_undone_and_repeats_stop_the_run():
    """A learning rate so large that AdamW overflows the weights: the update is undone (weights and optimizer
    state as before), logged as skipped, and the fifth such step in a row is a UserError."""
    from scalerl.build import build_model
    from scalerl.errors import UserError
    from scalerl.trainer import MAX_NONFINITE, Trainer

    cfg = micro("algo.zero_variance_filter=false", "optim.lr=1e300", "optim.warmup_steps=0")
    bundle = build_model(cfg.model, 0)
    trainer = Trainer(bundle.model, cfg.algo, cfg.optim)
    before = {k: v.clone() for k, v in bundle.model.state_dict().items()}
    for _ in range(MAX_NONFINITE - 1):
        stats = _step(trainer, _learnable_batch())
        assert stats["train/nan_skipped"] == 1.0 and math.isfinite(stats["loss"])
    for k, v in bundle.model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert all(not s for s in trainer.update.optimizer.state.values())  # no moment estimates kept from the undone steps
    with pytest.raises(UserError, match="training diverged"):
        _step(trainer, _learnable_batch())


def test_update_leaving_an_inf_weight_is_undone(monkeypatch):
    """The weights are checked after the update itself, whatever made them non-finite."""
    from scalerl.build import build_model
    from scalerl.trainer import Trainer

    cfg = micro("algo.zero_variance_filter=false", "optim.warmup_steps=0")
    bundle = build_model(cfg.model, 0)
    trainer = Trainer(bundle.model, cfg.algo, cfg.optim)
    _step(trainer, _learnable_batch())  # one good step: the optimizer has state to restore
    before = {k: v.clone() for k, v in bundle.model.state_dict().items()}
    moments = {id(p): {k: v.clone() for k, v in st.items()} for p, st in trainer.update.optimizer.state.items()}
    step = trainer.update.optimizer.step

    def overflowing_step(*args, **kwargs):
        step(*args, **kwargs)
        with torch.no_grad():
            next(bundle.model.parameters()).view(-1)[0] = float("inf")

    monkeypatch.setattr(trainer.update.optimizer, "step", overflowing_step)
    stats = _step(trainer, _learnable_batch())
    assert stats["train/nan_skipped"] == 1.0 and trainer.update.nonfinite_streak == 1
    for k, v in bundle.model.state_dict().items():
        assert torch.equal(v, before[k]), k
    for p, st in trainer.update.optimizer.state.items():
        for k, v in st.items():
            assert torch.equal(v, moments[id(p)][k]), k


def test_a_sane_step_after_a_skipped_one_resets_the_count():
    from scalerl.build import build_model
    from scalerl.trainer import Trainer

    cfg = micro("algo.zero_variance_filter=false", "optim.warmup_steps=0")
    bundle = build_model(cfg.model, 0)
    trainer = Trainer(bundle.model, cfg.algo, cfg.optim)
    trainer.update.nonfinite_streak = 3
    stats = _step(trainer, _learnable_batch())
    assert stats["train/nan_skipped"] == 0.0 and trainer.update.nonfinite_streak == 0
    assert all(torch.isfinite(p).all() for p in bundle.model.parameters())


def test_diverging_run_stops_with_one_error_and_checkpoints_stay_finite(tmp_path):
    args = [sys.executable, "-m", "scalerl", "train", "--quiet", "--out", str(tmp_path / "run")]
    for s in [*MICRO, "backend=inline", "steps=12", "checkpoint_every=1", "eval.every=100",
              "algo.zero_variance_filter=false", "optim.lr=1e300", "optim.warmup_steps=0"]:
        args += ["--set", s]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: training diverged")
    ckpts = sorted((tmp_path / "run" / "checkpoints").glob("step_*.pt"))
    assert ckpts
    for path in ckpts:
        state = torch.load(path, weights_only=False)["trainer"]["model"]
        assert all(torch.isfinite(v).all() for v in state.values()), path.name


@pytest.mark.parametrize("backend", ["inline", "local"])
def test_first_batch_is_generated_with_the_warmed_up_weights(tmp_path, backend):
    """At step 0 generator and trainer hold the same (warmed-up) weights, so with the FP32 head on both sides
    every importance ratio π_train/π_gen is 1 up to float error (§3.2, Fig. 5b)."""
    cfg = micro(f"backend={backend}", "steps=1", "warmup.steps=10", "algo.zero_variance_filter=false", "eval.every=100")
    train(cfg, tmp_path, show_progress=False)
    (first,) = train_lines(tmp_path)
    assert abs(first["train/is_ratio_max"] - 1) < 1e-3
    assert abs(first["train/is_ratio_min"] - 1) < 1e-3
