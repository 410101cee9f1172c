"""The trainer over several ranks (``scalerl/fsdp.py``, ``scalerl/pipeline/ranks.py``, docs/scale-out.md), on
CPU ranks (gloo):

* one data-parallel step on two ranks, each training on half of the prompts, equals the single-process step
  on the whole batch (weights, loss and every logged statistic) for each aggregation (§3.2, Fig. 14a) with batch and
  prompt advantage normalisation (§3.2, Fig. 14b) and zero-variance filtering (§3.2, Fig. 6a), with clipping active (global
  norm), and also when a rank is left without a prompt;
* the trainer state of two ranks is the single-process checkpoint format, and two fresh ranks that load it
  continue exactly like a single process that loads it;
* ``torchrun -m scalerl train`` runs one run whose metrics match the single-process run's, resumes, writes
  nothing from rank 1, and a user error on rank 0 ends every rank with one line.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from scalerl.build import build_model
from scalerl.rollout import RolloutBatch
from scalerl.pipeline.prepare import StageConfig, train_step
from scalerl.pipeline.runner import train
from scalerl.pipeline.schedules import SCHEDULES
from scalerl.runlog import read_metrics
from scalerl.trainer import Trainer
from test_pipeline import MICRO, micro

pytest.importorskip("torch.distributed.fsdp")

REPO = Path(__file__).resolve().parents[1]
BASE = ["model.n_layers=2", "optim.warmup_steps=2", "optim.lr=0.01", "optim.grad_clip=0.02"]
CASES = {  # name: config overrides; each is one step from the same initial weights
    "prompt": ["algo.aggregation=prompt", "algo.advantages.norm=batch"],
    "token": ["algo.aggregation=token", "algo.advantages.norm=batch", "algo.loss.name=dapo"],
    "sample": ["algo.aggregation=sample", "algo.advantages.norm=prompt", "algo.loss.name=gspo"],
    "stand_in": ["algo.aggregation=prompt", "algo.advantages.norm=batch"],  # one prompt kept: rank 1 has none
}


def _batch(seed: int, rewards: list[float], sizes: list[int]) -> RolloutBatch:
    """Groups of ``sizes`` sequences with ``rewards``; completions of different lengths, so that prompt-, sample-
    and token-level aggregation differ."""
    gen = torch.Generator().manual_seed(seed)
    n, t = len(rewards), 14
    group = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    lengths = torch.randint(2, 10, (n,), generator=gen)
    loss_mask = (torch.arange(t)[None, :] >= 4) & (torch.arange(t)[None, :] < 4 + lengths[:, None])
    reward = torch.tensor(rewards)
    return RolloutBatch(
        index=0,
        problem_ids=[f"p{i}" for i in range(len(sizes))],
        group=group,
        input_ids=torch.randint(3, 20, (n, t), generator=gen),
        attention_mask=torch.ones(n, t, dtype=torch.bool),
        loss_mask=loss_mask.float(),
        gen_logprobs=torch.where(loss_mask, -3 * torch.rand(n, t, generator=gen), torch.zeros(n, t)),
        versions=torch.where(loss_mask, 0, -1),
        rewards=reward,
        correct=reward > 0,
        truncated=torch.zeros(n, dtype=torch.bool),
        interrupted=torch.zeros(n, dtype=torch.bool),
        completion_lengths=lengths,
    )


def _batches(case: str) -> list[RolloutBatch]:
    if case == "stand_in":  # groups 0 and 2 have no reward variance and are filtered out
        return [_batch(1, [1, 1, 1, 1.0, 1, -1, 1, -1, -1, -1, -1], [4, 4, 3])]
    # group 1 is filtered out (§3.2, Fig. 6a); three prompts of different sizes over two ranks
    return [
        _batch(2, [1, -1, -1, -1.0, 1, 1, 1, 1, 1, -1, 1, -1, -1], [4, 4, 5]),
        _batch(3, [-1, -1, 1, 1.0, 1, -1, -1, 1, 1, -1, -1], [4, 4, 3]),
    ]


def _trainer(case: str, split: bool, seed: int = 0) -> Trainer:
    from scalerl.fsdp import DataParallel, shard_model

    cfg = micro(*BASE, *CASES[case])
    model = build_model(cfg.model, seed).model
    if split:
        shard_model(model)
    return Trainer(model, cfg.algo, cfg.optim, split=DataParallel() if split else None)


def _step(trainer: Trainer, batch: RolloutBatch, case: str = "prompt") -> dict[str, float]:
    """The driver's step under ``case``'s config: the preparation stage on the whole batch, then the trainer."""
    stage = StageConfig.of(micro(*BASE, *CASES[case]).algo, SCHEDULES.get("pipeline_rl")(8))
    return train_step(trainer, batch, stage)


def _weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in trainer.state_dict()["model"].items()}


def _run_case(case: str, split: bool) -> dict:
    """Every step of the case from the same initial weights: stats and weights after each."""
    trainer = _trainer(case, split)
    steps = [_step(trainer, b, case) for b in _batches(case)]
    return {"stats": steps, "weights": _weights(trainer)}


def _resume(split: bool) -> dict:
    """Step once, take the trainer state, load it into a trainer with other initial weights, step again."""
    first = _trainer("prompt", split)
    b1, b2 = _batches("prompt")
    _step(first, b1)
    state = copy.deepcopy(first.state_dict())  # as a checkpoint file holds it
    second = _trainer("prompt", split, seed=1)
    rank0 = not split or dist.get_rank() == 0
    second.load_state_dict(copy.deepcopy(state) if rank0 else {})  # AdamW would adopt (and update) its tensors
    return {"state": state, "stats": _step(second, b2), "weights": _weights(second)}


def _rank_main(rank: int, world: int, store: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        result = {case: _run_case(case, split=True) for case in CASES}
        result["resume"] = _resume(split=True)
        trainer = _trainer("prompt", split=True)
        result["sharded"] = [p.to_local().numel() < p.numel() for p in trainer.model.parameters()]
        if rank == 0:
            torch.save(result, out)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("fsdp")
    out = tmp / "rank0.pt"
    torch.multiprocessing.spawn(_rank_main, args=(2, str(tmp / "store"), str(out)), nprocs=2, join=True)
    return torch.load(out, weights_only=False)


def _assert_same_weights(got: dict, ref: dict) -> None:
    """Equal up to float rounding: the ranks sum gradients in another order, and AdamW turns a rounding
    difference on a near-zero gradient entry into up to ~1e-3 of a step (lr 0.01: ~3e-6)."""
    assert got.keys() == ref.keys()
    for k, v in ref.items():
        torch.testing.assert_close(got[k], v, rtol=1e-5, atol=1e-5, msg=k)


def _assert_same_stats(got: dict, ref: dict) -> None:
    assert got.keys() == ref.keys()
    for k, v in ref.items():
        assert got[k] == pytest.approx(v, rel=1e-5, abs=1e-6), k


def test_layer_stack_is_the_blocks():
    from scalerl.fsdp import layer_stack

    model = build_model(micro(*BASE).model, 0).model
    assert layer_stack(model) is model.blocks


def test_only_linear_aggregations_split_over_ranks():
    from scalerl import algo
    from scalerl.errors import UserError
    from scalerl.fsdp import DataParallel

    for name in algo.AGGREGATIONS.names():
        DataParallel.check_linear(algo.AGGREGATIONS.get(name), name)
    with pytest.raises(UserError, match="not linear"):
        DataParallel.check_linear(lambda terms, mask, group: terms.sum().square(), "square")


def test_parameters_are_sharded(two_ranks):
    assert two_ranks["sharded"] and all(two_ranks["sharded"])  # every parameter lived half on each rank


@pytest.mark.parametrize("case", list(CASES))
def test_split_step_matches_whole_batch_step(two_ranks, case):
    got, ref = two_ranks[case], _run_case(case, split=False)
    initial = build_model(micro(*BASE).model, 0).model.state_dict()
    assert any(not torch.equal(ref["weights"][k], initial[k]) for k in initial)  # the steps moved the weights
    assert all("train/skipped" not in s and s["train/nan_skipped"] == 0 for s in ref["stats"])
    assert ref["stats"][0]["grad_norm"] > 0.02  # clipping was active: only the global norm gives these weights
    for g, r in zip(got["stats"], ref["stats"]):
        _assert_same_stats(g, r)
    _assert_same_weights(got["weights"], ref["weights"])


def test_checkpoint_is_the_single_process_format_and_resumes(two_ranks):
    got, ref = two_ranks["resume"], _resume(split=False)
    _assert_same_weights(got["state"]["model"], ref["state"]["model"])
    optim, ref_optim = got["state"]["optimizer"], ref["state"]["optimizer"]
    assert optim["param_groups"] == ref_optim["param_groups"]
    assert optim["state"].keys() == ref_optim["state"].keys()
    for i, entry in ref_optim["state"].items():
        _assert_same_weights(optim["state"][i], entry)
    assert got["state"]["lr_schedule"] == ref["state"]["lr_schedule"]
    _assert_same_stats(got["stats"], ref["stats"])  # lr included: the warm-up schedule resumed
    _assert_same_weights(got["weights"], ref["weights"])


# ------------------------------------------------------------------------------------ torchrun, end to end

# enough supervised warm-up (on rank 0 only, then broadcast) for groups with reward variance: real steps
RUN = [*MICRO, "backend=inline", "task.params.max_operands=2", "warmup.steps=150", "warmup.lr=0.01",
       "warmup.cache=false", "checkpoint_every=2", "eval.every=2"]  # fmt: skip


def _torchrun(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """``torchrun --nproc-per-node 2 -m scalerl ARGS``, each rank in its own working directory ``cwd/rankN``
    (so that a file written by rank 1 shows), with relative paths."""
    for rank in (0, 1):
        (cwd / f"rank{rank}").mkdir(exist_ok=True)
    command = 'cd "rank$RANK" && exec "$0" -m scalerl "$@"'
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--no-python"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [*launch, "sh", "-c", command, sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


def _train_args(*sets: str) -> list[str]:
    return ["train", "--quiet", "--out", "run", *[arg for s in sets for arg in ("--set", s)]]


def _train_lines(run_dir: Path) -> list[dict]:
    return [r for r in read_metrics(run_dir) if "loss" in r]


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory) -> Path:
    """The single-process run of ``RUN`` for 3 steps (checkpoints at steps 2 and 3)."""
    ref = tmp_path_factory.mktemp("reference") / "run"
    train(micro(*RUN, "steps=3"), ref, show_progress=False)
    assert any(r["train/samples_kept"] > 0 for r in _train_lines(ref))  # real steps, not all filtered out
    return ref


def _assert_same_run(got: list[dict], expected: list[dict]) -> None:
    """Every logged value but timings and compute (two trainer devices, not one) matches."""
    assert [r["step"] for r in got] == [r["step"] for r in expected]
    for g, r in zip(got, expected):
        keys = [k for k in r if not k.startswith(("time/", "timing/", "throughput/", "compute/"))]
        assert keys == [k for k in g if not k.startswith(("time/", "timing/", "throughput/", "compute/"))]
        for key in keys:
            assert g[key] == pytest.approx(r[key], rel=1e-4, abs=1e-6), (g["step"], key)


def test_torchrun_run_matches_single_process_run(tmp_path, reference_run):
    done = _torchrun(tmp_path, *_train_args(*RUN, "steps=3"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert list((tmp_path / "rank1").iterdir()) == []  # rank 1 wrote nothing
    assert done.stdout.count("run directory:") == 1  # one summary: rank 0's
    run = tmp_path / "rank0" / "run"
    _assert_same_run(_train_lines(run), _train_lines(reference_run))
    assert (run / "config.yaml").exists() and (run / "checkpoints" / "step_0000003.pt").exists()
    ckpt = torch.load(run / "checkpoints" / "step_0000003.pt", weights_only=False)
    assert ckpt["compute"]["devices"] == 2  # the run holds both ranks: devices x wall clock


def test_torchrun_resumes_a_single_process_checkpoint(tmp_path, reference_run):
    run = tmp_path / "rank0" / "run"
    shutil.copytree(reference_run, run)
    # as if killed after step 2's checkpoint (a newer checkpoint file would be resumed from, pointer or not)
    (run / "checkpoints" / "step_0000003.pt").unlink()
    (run / "checkpoints" / "latest").write_text("step_0000002.pt\n")
    done = _torchrun(tmp_path, "train", "--quiet", "--out", "run", "--resume")
    assert done.returncode == 0, done.stderr[-3000:]
    assert list((tmp_path / "rank1").iterdir()) == []
    assert (run / "checkpoints" / "latest").read_text().strip() == "step_0000003.pt"
    _assert_same_run(_train_lines(run), _train_lines(reference_run))


def test_torchrun_user_error_on_rank0_ends_every_rank(tmp_path):
    (tmp_path / "rank0" / "run").mkdir(parents=True)
    (tmp_path / "rank0" / "run" / "metrics.jsonl").write_text("")
    done = _torchrun(tmp_path, *_train_args(*MICRO, "steps=2"))
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: run already holds a run; pass --resume to continue it or choose another --out"]
    assert re.search(r"rank\s*:\s*0 .*\n\s*exitcode\s*:\s*2\b", done.stderr)  # torchrun's report on rank 0
