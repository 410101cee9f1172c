"""``model.seed``: RL seeds on one base model (the paper's seeds share a base model; bench/replicate.py)."""

from __future__ import annotations

import yaml

from scalerl.config import CONFIG_DIR, RunConfig, load_config


def test_base_seed_is_the_model_seed_else_the_run_seed():
    assert RunConfig(seed=3).base_seed == 3
    assert RunConfig(seed=3, model={"seed": 0}).base_seed == 0


def test_runs_with_one_model_seed_share_the_warm_up_and_others_do_not(tmp_path, monkeypatch):
    """Three micro runs: seeds 1 and 2 on model.seed 0 warm up once (one cached model), seed 3 on its own seed
    builds another; the two on one base start RL from the same weights."""
    from scalerl.pipeline.runner import train
    from scalerl.runlog import load_latest_checkpoint

    monkeypatch.setenv("SCALERL_CACHE", str(tmp_path / "cache"))
    micro = yaml.safe_load((CONFIG_DIR / "sweeps" / "micro.yaml").read_text())["set"]
    common = [*micro, "warmup.steps=20", "steps=1", "eval.n_samples=1", "checkpoint_every=1", "algo.fp32_head=false"]
    for name, sets in {"a": ["seed=1", "model.seed=0"], "b": ["seed=2", "model.seed=0"], "c": ["seed=3"]}.items():
        train(load_config(preset="scalerl", overrides=[*common, *sets]), tmp_path / name, show_progress=False)
    assert len(list((tmp_path / "cache" / "warmup").glob("*.pt"))) == 2
    # one step of RL from the same base on different batches keeps a and b within a step of each other;
    # another base (another initialisation and warm-up) is far away
    a, b, c = (load_latest_checkpoint(tmp_path / n)["trainer"]["model"] for n in "abc")
    gap = lambda x, y: max(float((x[k] - y[k]).abs().max()) for k in x)  # noqa: E731
    assert gap(a, b) < 0.01 < gap(a, c)
