"""FSDP2 trainer (``scalerl/fsdp.py``): two CPU ranks (gloo) take one ``Trainer`` step on a sharded micro model,
and the result equals the single-process step, weights and loss alike."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from scalerl.build import build_model
from scalerl.pipeline.batch import RolloutBatch
from scalerl.pipeline.schedules import SCHEDULES
from scalerl.trainer import Trainer
from test_pipeline import micro

SETS = ["model.n_layers=2", "optim.warmup_steps=0", "optim.lr=0.01", "algo.zero_variance_filter=false"]


def _batch() -> RolloutBatch:
    gen = torch.Generator().manual_seed(0)
    n, t = 8, 12
    loss_mask = torch.zeros(n, t)
    loss_mask[:, 4:] = 1
    return RolloutBatch(
        index=0,
        problem_ids=["a", "b"],
        group=torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]),
        input_ids=torch.randint(3, 20, (n, t), generator=gen),
        attention_mask=torch.ones(n, t, dtype=torch.bool),
        loss_mask=loss_mask,
        gen_logprobs=-2 * torch.rand(n, t, generator=gen),
        versions=torch.zeros(n, t, dtype=torch.long),
        rewards=torch.tensor([1.0, -1, 1, -1, 1, 1, -1, -1]),
        correct=torch.tensor([1, 0, 1, 0, 1, 1, 0, 0], dtype=torch.bool),
        truncated=torch.zeros(n, dtype=torch.bool),
        interrupted=torch.zeros(n, dtype=torch.bool),
        completion_lengths=torch.full((n,), 8),
    )


def _one_step(shard: bool) -> dict:
    from scalerl.fsdp import full_state_dict, shard_model

    cfg = micro(*SETS)
    model = build_model(cfg.model, cfg.seed).model
    if shard:
        shard_model(model)
    stats = Trainer(model, cfg, SCHEDULES.get("pipeline_rl")(8)).step(_batch())
    sharded = [p.to_local().numel() < p.numel() for p in model.parameters() if hasattr(p, "to_local")]
    return {"loss": stats["loss"], "weights": full_state_dict(model), "sharded": sharded}


def _rank_main(rank: int, world: int, store: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        result = _one_step(shard=True)
        if rank == 0:
            torch.save(result, out)
    finally:
        dist.destroy_process_group()


def test_layer_stack_is_the_blocks():
    from scalerl.fsdp import layer_stack

    model = build_model(micro(*SETS).model, 0).model
    assert layer_stack(model) is model.blocks


def test_fsdp_step_matches_single_process(tmp_path: Path):
    pytest.importorskip("torch.distributed.fsdp")
    out = tmp_path / "rank0.pt"
    torch.multiprocessing.spawn(_rank_main, args=(2, str(tmp_path / "store"), str(out)), nprocs=2, join=True)
    got = torch.load(out)
    assert got["sharded"] and all(got["sharded"])  # every parameter really lived half on each rank

    ref = _one_step(shard=False)
    initial = build_model(micro(*SETS).model, 0).model.state_dict()
    assert any(not torch.equal(ref["weights"][k], initial[k]) for k in initial)  # the step moved the weights
    assert got["weights"].keys() == ref["weights"].keys()
    for k, v in ref["weights"].items():
        torch.testing.assert_close(got["weights"][k], v, rtol=1e-5, atol=1e-6, msg=k)
    assert got["loss"] == pytest.approx(ref["loss"], rel=1e-6)
