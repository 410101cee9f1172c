"""The compute meter (§1.1, §3.1): busy time of every process, generation FLOPs for every generated token,
training FLOPs for trained tokens only; the same rules for PipelineRL and PPO-off-policy."""

import pytest

from scalerl.compute import ComputeMeter


def test_compute_meter_hand_values():
    m = ComputeMeter(n_params=1000, trainer_devices=2)
    m.add_generation(1800.0, prompt_tokens=10, completion_tokens=20)
    m.add_training(900.0, trained_tokens=12)  # a filtered group's 18 tokens were generated, not trained
    assert m.device_hours == 1.0  # 1800 s of the generator + 900 s on each of 2 trainer devices
    assert m.flops == 2 * 1000 * 30 + 6 * 1000 * 12
    assert m.tokens == 20
    m2 = ComputeMeter(n_params=1)
    m2.load_state_dict(m.state_dict())
    assert m2.metrics() == m.metrics()
    assert ComputeMeter(n_params=1, scale=4.0, gen_seconds=900.0).device_hours == 1.0  # config.devices rescales


@pytest.mark.parametrize("schedule", ["pipeline_rl", "ppo_off_policy"])
def test_both_schedules_are_metered_the_same_way(tmp_path, schedule):
    """Same work (4 batches, zero-variance filter on) under each schedule: device time is exactly the generator's
    busy time of every batch plus the trainer's busy time, and FLOPs charge generation for every generated token
    (dropped groups included) and training only for the kept ones."""
    from test_pipeline import micro

    from scalerl.build import build_model
    from scalerl.pipeline.runner import train
    from scalerl.runlog import read_metrics

    cfg = micro("backend=inline", "steps=4", f"schedule.name={schedule}", "schedule.k=2", "eval.every=2",
                "algo.zero_variance_filter=true", "checkpoint_every=100")
    train(cfg, tmp_path, show_progress=False)
    lines = [r for r in read_metrics(tmp_path) if "loss" in r]
    last = lines[-1]
    P = build_model(cfg.model, 0).spec["n_params"]
    gen_s = sum(r["throughput/gen_seconds"] for r in lines)
    assert last["compute/gen_seconds"] == pytest.approx(gen_s)
    assert last["compute/device_hours"] * 3600 == pytest.approx(last["compute/gen_seconds"] + last["compute/train_seconds"])
    trained = sum(r["train/tokens_kept"] for r in lines)
    gen_tokens = (last["compute/flops"] - 6 * P * trained) / (2 * P)
    assert gen_tokens >= last["compute/tokens"] + 4 * cfg.batch.prompts * len(lines)  # + each group's prompt once
    dropped = sum(r["train/samples"] - r["train/samples_kept"] for r in lines)
    if dropped:  # filtered groups were generated (charged 2P per token) but not trained (no 6P)
        assert trained < gen_tokens


def test_prompt_tokens_count_each_groups_prompt_once():
    """The FLOP meter charges each group's prompt once (the engines prefill a distinct prompt once and share its
    cache among the group's samples): two groups with prompts of 3 and 2 tokens, 2 samples each -> 5."""
    import torch

    from scalerl.pipeline.batch import RolloutBatch

    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]], dtype=torch.bool)
    comp = torch.tensor([2, 1, 4, 1])
    z = torch.zeros(4)
    batch = RolloutBatch(index=0, problem_ids=["a", "b"], group=torch.tensor([0, 0, 1, 1]), input_ids=mask.long(),
                         attention_mask=mask, loss_mask=mask.float(), gen_logprobs=mask.float(), versions=mask.long(),
                         rewards=z, correct=z.bool(), truncated=z.bool(), interrupted=z.bool(), completion_lengths=comp)
    assert batch.prompt_tokens() == 3 + 2
