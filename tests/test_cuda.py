"""The trainer, the built-in engine and FSDP2 on a CUDA device (marked ``gpu``; skipped without one).
``bench/gpu_suite.py`` runs these on a GPU machine (``pytest -m gpu``):

* a trainer step on CUDA gives the CPU step's loss, gradient norm and statistics on the same batch, then the same
  second step (§3.2's head, aggregation, normalisation and filter on the device);
* the built-in engine on CUDA: the generator's float32 log-probs are the trainer's recomputation (FP32 head, §3.2, Fig. 5b),
  and weights loaded from CPU tensors (what the local backend's shared-memory channel hands over, §3.1) are used;
* FSDP2 on NCCL with one rank (``scalerl/fsdp.py``): the sharded step is the unsharded step on the same device.
"""

from __future__ import annotations

import pytest
import torch

from scalerl.build import build_model
from scalerl.trainer import Trainer
from test_fsdp import BASE, CASES, _batches, _step
from test_pipeline import micro

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

CUDA = torch.device("cuda", 0)


def _trainer(device: torch.device, split: bool = False) -> Trainer:
    from scalerl.fsdp import DataParallel, shard_model

    cfg = micro(*BASE, *CASES["prompt"])
    model = build_model(cfg.model, 0).model.to(device)
    if split:
        shard_model(model)
    return Trainer(model, cfg.algo, cfg.optim, split=DataParallel() if split else None)


def _assert_same_stats(got: dict, ref: dict, rel: float) -> None:
    assert got.keys() == ref.keys()
    for k, v in ref.items():
        assert got[k] == pytest.approx(v, rel=rel, abs=1e-6), k


def test_trainer_step_on_cuda_is_the_cpu_step():
    cpu, gpu = _trainer(torch.device("cpu")), _trainer(CUDA)
    assert next(gpu.model.parameters()).is_cuda
    for i, batch in enumerate(_batches("prompt")):
        ref, got = _step(cpu, batch), _step(gpu, batch)
        assert "train/skipped" not in ref and ref["grad_norm"] > 0
        # the first step is one forward and backward from the same weights; the second starts from weights that
        # AdamW moved by lr·sign(g) where g is tiny, so a rounding difference may move a few entries the other way
        _assert_same_stats(got, ref, rel=1e-4 if i == 0 else 1e-2)


def test_builtin_engine_on_cuda_matches_the_trainer_and_takes_cpu_weights():
    from scalerl.build import build_length_control, build_task
    from scalerl.engines.builtin import BuiltinEngine
    from scalerl.engines.precision import logprob_mismatch
    from scalerl.models.registry import prompt_encoder

    cfg = micro()
    bundle = build_model(cfg.model, 0)
    other = build_model(cfg.model, 1).model.state_dict()  # CPU tensors, as the weight channel holds them
    encode = prompt_encoder(bundle)
    prompts = [encode(p.prompt) for p in list(build_task(cfg.task).train_problems())[:8]]
    engine = BuiltinEngine(bundle.model.to(CUDA), bundle.tokenizer, fp32_head=True)
    engine.load_weights(other, version=3)
    groups = engine.generate(prompts, n=4, length=build_length_control(cfg), seed=0)
    assert all(v == 3 for g in groups for s in g for v in s.versions)
    trainer_model = build_model(cfg.model, 1).model.to(CUDA).eval()
    assert float(logprob_mismatch(trainer_model, groups).max()) < 1e-3


def test_fsdp2_on_nccl_with_one_rank_is_the_unsharded_step(tmp_path):
    """One step from the same weights. CUDA's backward is not bitwise repeatable (atomic adds), and AdamW's first
    step moves an entry by about lr·g/(|g| + eps): where g is at rounding level the two runs may step it apart
    by up to ~lr·1e-2, while a wrong gradient would move entries by lr (1e-2) the wrong way."""
    import torch.distributed as dist

    if not dist.is_nccl_available():
        pytest.skip("this torch has no NCCL")
    batch = _batches("prompt")[0]
    ref = _trainer(CUDA)
    ref_stats = _step(ref, batch)
    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1, device_id=CUDA)
    try:
        sharded = _trainer(CUDA, split=True)
        assert all(type(p).__name__ == "DTensor" for p in sharded.model.parameters())
        stats = _step(sharded, batch)
        weights = sharded.state_dict()["model"]  # gathered to rank 0, on the CPU
    finally:
        dist.destroy_process_group()
    _assert_same_stats(stats, ref_stats, rel=1e-4)
    moved = 0
    for k, v in ref.model.state_dict().items():
        torch.testing.assert_close(weights[k], v.cpu(), rtol=0, atol=1e-3, msg=k)
        moved += int((v.cpu() - build_model(micro(*BASE).model, 0).model.state_dict()[k]).abs().gt(1e-3).sum())
    assert moved > 0  # the step moved the weights by more than the tolerance


def test_a_run_warms_up_and_trains_on_the_gpu(tmp_path, monkeypatch):
    """The supervised warm-up trains on the run's device, not on the CPU before the model moves."""
    from scalerl.models import warmup
    from scalerl.pipeline.runner import train

    seen = []
    inner = warmup._train

    def spy(model, *args, **kwargs):
        seen.append(next(model.parameters()).device.type)
        return inner(model, *args, **kwargs)

    monkeypatch.setattr(warmup, "_train", spy)
    train(micro("backend=inline", "steps=2", "warmup.steps=3", "warmup.cache=false", "device=cuda"), tmp_path,
          show_progress=False)
    assert seen == ["cuda"]
