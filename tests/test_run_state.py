"""The run-state object (issue 14, item 4): one checkpoint save and one load, after which a resumed run
is in the same state and requests the same problems with the same seeds as an uninterrupted one (§3.1, §3.2, Fig. 6b)."""

from __future__ import annotations

import copy
import random

import numpy as np
import torch

from scalerl import algo
from scalerl.compute import ComputeMeter
from scalerl.config import CurriculumConfig, ForecastConfig
from scalerl.forecast import Forecaster
from scalerl.rollout import RolloutBatch
from scalerl.pipeline.schedules import SCHEDULES
from scalerl.pipeline.state import RunState, batch_seed
from scalerl.runlog import load_latest_checkpoint

IDS = [f"p{i}" for i in range(12)]
SEED = 7
SCHEDULE = SCHEDULES.get("pipeline_rl", "schedule.name")(2)  # batches up to 2 ahead of the trainer
STEPS, PROMPTS = 20, 5


def _state() -> RunState:
    return RunState(
        curriculum=algo.build_curriculum(CurriculumConfig(name="npr"), IDS, SEED),
        meter=ComputeMeter(n_params=1000),
        forecaster=Forecaster(ForecastConfig()),
    )


def _batch(index: int) -> RolloutBatch:
    n, t = 2, 4
    return RolloutBatch(
        index=index, problem_ids=["p0"], group=torch.zeros(n, dtype=torch.long),
        input_ids=torch.full((n, t), 3), attention_mask=torch.ones(n, t, dtype=torch.bool),
        loss_mask=torch.ones(n, t), gen_logprobs=torch.zeros(n, t), versions=torch.zeros(n, t, dtype=torch.long),
        rewards=torch.tensor([1.0, -1.0]), correct=torch.tensor([True, False]),
        truncated=torch.zeros(n, dtype=torch.bool), interrupted=torch.zeros(n, dtype=torch.bool),
        completion_lengths=torch.full((n,), 2),
    )  # fmt: skip


def _train(state: RunState, version: int) -> list:
    """One step of the driver without a model: issue what the schedule allows, record the batch's outcomes
    (every prompt of batch ``step`` solved by all 4 samples: npr retires it), meter it, finish the step."""
    issued = state.issue(SCHEDULE, version, STEPS, PROMPTS, SEED)
    for pid in state.pending[state.step].problem_ids:
        state.curriculum.update(pid, 4, 4)
    state.meter.add_generation(0.5, 10, 20)
    state.meter.add_training(0.25, 20)
    state.forecaster.update(state.meter.device_hours, 0.1 * state.step)
    state.trained()
    return issued


def _snapshot(state: RunState) -> dict:
    return {
        "step": state.step, "next_request": state.next_request, "pending": copy.deepcopy(state.pending),
        "curriculum": state.curriculum.state_dict(), "compute": state.meter.state_dict(),
        "forecast": state.forecaster.state_dict(),
    }  # fmt: skip


def test_save_then_load_is_the_same_state_and_continues_like_an_uninterrupted_run(tmp_path):
    run = _state()
    for version in range(3):
        _train(run, version)
    assert run.curriculum.retired > 0 and len(run.pending) == 2  # non-trivial: retirements and batches ahead
    run.wall_offset = 12.5
    ready = [_batch(1), _batch(3), _batch(4)]  # batch 1 is already trained on: not kept
    run.save(tmp_path, trainer={"version": 3}, ready=ready, config={"seed": SEED})
    before = _snapshot(run)
    expected_draws = (torch.rand(3), np.random.rand(2), random.random())  # the process RNGs after the save

    ckpt = load_latest_checkpoint(tmp_path)
    assert ckpt is not None and ckpt["trainer"] == {"version": 3} and ckpt["config"] == {"seed": SEED}
    resumed = _state()
    resumed.load(ckpt)
    assert _snapshot(resumed) == before
    assert resumed.wall_offset == 12.5
    assert [b.index for b in resumed.ready] == [3, 4]
    assert torch.equal(resumed.ready[0].input_ids, ready[1].input_ids)
    assert [r.index for r in resumed.unready()] == []  # batches 3 and 4 pending, both generated already
    draws = (torch.rand(3), np.random.rand(2), random.random())
    assert torch.equal(draws[0], expected_draws[0]) and np.array_equal(draws[1], expected_draws[1])
    assert draws[2] == expected_draws[2]

    for version in range(3, 8):  # the next batches: the same requests (problems and seeds) from both
        assert _train(resumed, version) == _train(run, version)
        assert _snapshot(resumed) == _snapshot(run)
    assert run.pending[run.step].seed == batch_seed(SEED, run.step)


def test_unready_names_the_pending_requests_a_checkpoint_holds_no_batch_for(tmp_path):
    run = _state()
    run.issue(SCHEDULE, 0, STEPS, PROMPTS, SEED)  # batches 0..2
    run.save(tmp_path, trainer={}, ready=[_batch(1)], config={})
    resumed = _state()
    resumed.load(load_latest_checkpoint(tmp_path))
    assert [r.index for r in resumed.unready()] == [0, 2]
    assert [r.problem_ids for r in resumed.unready()] == [run.pending[0].problem_ids, run.pending[2].problem_ids]
