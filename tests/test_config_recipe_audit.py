"""Audit of configuration, presets and the compute meter against the paper (reference spec sections cited per test):
every ScaleRL component and every ablated alternative is selectable and reaches the code that uses it, with the
spec's numbers; No-Positive-Resampling and zero-variance filtering on hand-worked examples; the compute meter on
hand-worked counts, across a resume; config validation (types, ranges, contradictions) as one-line errors, exit 2."""

from __future__ import annotations

import json

import pytest
import torch

from scalerl import algo
from scalerl.algo.curriculum import NPRSampler, UniformSampler
from scalerl.compute import ComputeMeter
from scalerl.config import build_config, load_config, parse_override, read_yaml
from scalerl.errors import UserError

MICRO = ["model.d_model=16", "model.n_layers=1", "model.n_heads=2"]


def user_error(fn, *args, **kwargs) -> str:
    with pytest.raises(UserError) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert message and "\n" not in message
    return message


# ------------------------------------------------------------------------------ components reach the code


def _trainer(cfg):
    from scalerl.build import build_model
    from scalerl.trainer import Trainer

    return Trainer(build_model(cfg.model, 0).model, cfg.algo, cfg.optim)


@pytest.mark.parametrize("overrides, cls, params", [
    # spec §3.2 / A.17: CISPO eps_max in {4, 5, 8}, ScaleRL's preset 4; no lower truncation (no eps_low)
    ([], "CISPOLoss", {"eps_max": 4.0}),
    # spec §3.2, A.17.1: the paper's DAPO clip 0.2 / 0.26 (original DAPO 0.28 is the entry's default)
    (["algo.loss.name=dapo", "algo.loss.params.eps_high=0.26"], "DAPOLoss", {"eps_low": 0.2, "eps_high": 0.26}),
    (["algo.loss.name=dapo"], "DAPOLoss", {"eps_low": 0.2, "eps_high": 0.28}),
    # spec §3.2, A.17.3: GSPO's best setting 5_3_e_3 = upper 5e-3, lower 3e-3 (given in exponent form)
    (["algo.loss.name=gspo", "algo.loss.params.eps_low=3e-3", "algo.loss.params.eps_high=5e-3"], "GSPOLoss",
     {"eps_low": 3e-3, "eps_high": 5e-3}),
    # spec §3.2 (DeepSeek recipe): GRPO eps_min = eps_max = 0.2
    (["algo.loss.name=grpo"], None, {"eps_low": 0.2, "eps_high": 0.2}),
])
def test_loss_choice_and_numbers_reach_the_trainer(overrides, cls, params):
    cfg = load_config(overrides=MICRO + overrides)
    loss = _trainer(cfg).loss_fn
    assert loss is not None and loss.params is cfg.algo.loss.params  # the config's object, as it is
    if cls is not None:
        assert type(loss).__name__ == cls
    assert {k: getattr(loss, k) for k in params} == params
    if cfg.algo.loss.name == "cispo":
        assert not hasattr(loss.params, "eps_low")


@pytest.mark.parametrize("name", ["prompt", "sample", "token"])  # spec §3.4 (Fig. 14a)
def test_aggregation_choice_reaches_the_trainer(name):
    cfg = load_config(overrides=MICRO + [f"algo.aggregation={name}"])
    assert _trainer(cfg).aggregate is algo.AGGREGATIONS.get(name)


@pytest.mark.parametrize("flag", [True, False])  # spec §3.3: FP32 LM head on generator and trainer alike
def test_fp32_head_flag_reaches_trainer_and_generator(flag):
    from scalerl.engines.registry import native_engine
    from scalerl.models.fp32_head import fp32_head_enabled

    cfg = load_config(overrides=MICRO + [f"algo.fp32_head={str(flag).lower()}"])
    assert fp32_head_enabled(_trainer(cfg).model) is flag
    from scalerl.build import build_model

    bundle = build_model(cfg.model, 0)
    engine = native_engine(bundle, fp32_head=cfg.algo.fp32_head)
    assert fp32_head_enabled(engine.model) is flag


def _batch(correct: list[list[bool]], truncated: list[list[bool]] | None = None):
    """A batch of len(correct) groups; ``correct[g]`` the verdicts of group g (``truncated[g]``: which of them ran
    out of tokens; none by default); ±1 rewards (spec §4: A.3)."""
    from scalerl.rollout import RolloutBatch

    flat = [c for g in correct for c in g]
    n, t = len(flat), 4
    ok = torch.tensor(flat)
    return RolloutBatch(
        index=0, problem_ids=[f"p{g}" for g in range(len(correct))],
        group=torch.tensor([g for g, gs in enumerate(correct) for _ in gs]),
        input_ids=torch.ones(n, t, dtype=torch.long), attention_mask=torch.ones(n, t, dtype=torch.bool),
        loss_mask=torch.ones(n, t), gen_logprobs=torch.zeros(n, t), versions=torch.zeros(n, t, dtype=torch.long),
        rewards=torch.where(ok, 1.0, -1.0), correct=ok,
        truncated=torch.tensor([x for g in truncated for x in g]) if truncated else torch.zeros(n, dtype=torch.bool),
        interrupted=torch.zeros(n, dtype=torch.bool), completion_lengths=torch.full((n,), t))


@pytest.mark.parametrize("zv", [True, False])
@pytest.mark.parametrize("norm", ["batch", "prompt", "none"])
def test_zero_variance_filter_and_advantage_norm_reach_the_batch_stage(zv, norm):
    """Spec §3.6 (Fig. 6a): groups whose G rewards are all equal (all +1 or all -1) are dropped, not refilled;
    spec §3.5 (Fig. 14b): the normalisation named is the one applied. Hand-worked: group 0 all correct, group 1
    all wrong, group 2 one of four right (mean -0.5: advantages +1.5, -0.5, -0.5, -0.5; std over G, not G - 1)."""
    from scalerl.pipeline.prepare import StageConfig, prepare
    from scalerl.pipeline.schedules import SCHEDULES

    cfg = load_config(overrides=[f"algo.zero_variance_filter={str(zv).lower()}", f"algo.advantages.norm={norm}"])
    stage = StageConfig.of(cfg.algo, SCHEDULES.get(cfg.schedule.name)(cfg.schedule.k))
    assert (stage.zero_variance_filter, stage.advantage_norm) == (zv, norm)
    p = prepare(_batch([[True] * 4, [False] * 4, [True, False, False, False]]), 0, stage)
    assert p.stats["train/zero_var_frac"] == pytest.approx(2 / 3)
    assert p.keep.tolist() == ([False] * 8 if zv else [True] * 8) + [True] * 4
    centred = torch.tensor([1.5, -0.5, -0.5, -0.5])
    adv = p.advantages[-4:]
    if norm == "none":
        assert torch.allclose(adv, centred)
    elif norm == "prompt":
        assert torch.allclose(adv, centred / (centred.std(unbiased=False) + cfg.algo.advantages.eps), atol=1e-5)
    else:  # over the kept batch: with the filter off the two constant groups add zeros to the batch std
        kept = centred if zv else torch.cat([torch.zeros(8), centred])
        assert torch.allclose(adv, centred / (kept.std(unbiased=False) + cfg.algo.advantages.eps), atol=1e-5)
        assert torch.allclose(p.advantages[:-4], torch.zeros(0 if zv else 8))


@pytest.mark.parametrize("name, k, inflight, staleness", [
    ("pipeline_rl", 8, True, 8),  # spec §3.1: PipelineRL-k, trainers wait k steps ahead; the paper's k = 8
    ("pipeline_rl", 4, True, 4),
    ("ppo_off_policy", 8, False, 7),  # spec §3.1: k = B / B_hat updates per generated batch group
])
def test_schedule_and_k_reach_the_run(name, k, inflight, staleness):
    from scalerl.pipeline.ranks import setup_rank

    cfg = load_config(overrides=[f"schedule.name={name}", f"schedule.k={k}"])
    threads = torch.get_num_threads()
    try:
        schedule = setup_rank(cfg, 1)[2]
    finally:
        torch.set_num_threads(threads)
    assert (schedule.k, schedule.inflight, schedule.max_staleness()) == (k, inflight, staleness)


@pytest.mark.parametrize("name, cls", [("interruption", "Interruption"), ("length_penalty", "LengthPenalty"),
                                       ("none", "LengthControl")])
def test_length_control_choice_reaches_the_run(name, cls):
    from scalerl.build import build_length_control
    from scalerl.schema import PAPER_PHRASE

    cfg = load_config(overrides=[f"algo.length.name={name}"])
    length = build_length_control(cfg)
    assert type(length).__name__ == cls
    if name == "interruption":  # spec §3.8: the arXiv §4 phrase
        assert length.phrase == PAPER_PHRASE == (
            "Okay, time is up. Let me stop thinking and formulate a final answer now. </think>")


def test_curriculum_choice_and_threshold_reach_the_sampler():
    from scalerl.build import build_curriculum, build_task

    cfg = load_config(overrides=["task.n_train=20", "task.n_val=4"])
    npr = build_curriculum(cfg, build_task(cfg.task))
    assert type(npr) is NPRSampler and npr.threshold == 0.9  # spec §3.7: pass rate >= 0.9 removed
    cfg = load_config(overrides=["task.n_train=20", "task.n_val=4", "algo.curriculum.name=uniform"])
    assert type(build_curriculum(cfg, build_task(cfg.task))) is UniformSampler


# ------------------------------------------------------------------------------ No-Positive-Resampling by hand


def test_npr_hand_worked_threshold_is_inclusive_and_retired_prompts_never_return():
    """Spec §3.7: a prompt with pass rate >= 0.9 is permanently removed from subsequent epochs (``pass_rate(x) <
    0.9`` in the objective, §3.10). G = 10 (ScaleRL's config with batch.generations=10): a 9/10 prompt is removed
    (>=, not >), 8/10 stays; they are removed from the next epoch, not the current one, and never come back."""
    cfg = load_config(overrides=["batch.generations=10"])
    ids = ["a", "b", "c", "d"]
    s = algo.build_curriculum(cfg.algo.curriculum, ids, seed=3)
    score = {"a": 9, "b": 8, "c": 10, "d": 0}  # a: 0.9, b: 0.8, c: 1.0, d: 0.0
    epoch0 = s.next_ids(4)
    assert sorted(epoch0) == ids
    for pid in epoch0:
        s.update(pid, score[pid], 10)
    assert s.retired == 0  # nothing leaves mid-epoch
    for _ in range(5):  # five more epochs: only b and d, each once an epoch
        served = s.next_ids(2)
        assert sorted(served) == ["b", "d"]
        for pid in served:
            s.update(pid, score[pid], 10)
    assert s.is_retired("a") and s.is_retired("c") and not s.is_retired("b") and s.retired == 2


def test_npr_min_samples_above_the_generations_of_an_epoch_is_refused():
    """One epoch serves a prompt once, with batch.generations samples, and NPR judges one epoch (spec §3.7):
    min_samples above that would never retire anything (silently uniform sampling)."""
    message = user_error(load_config, overrides=["algo.curriculum.params.min_samples=9"])
    assert "algo.curriculum.params.min_samples: must be <= batch.generations (8)" in message
    assert "(top level)" not in message
    assert load_config(overrides=["algo.curriculum.params.min_samples=8"]).algo.curriculum.params.min_samples == 8
    assert load_config(overrides=["algo.curriculum.params.min_samples=16", "batch.generations=16"])


# ------------------------------------------------------------------------------ the compute meter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_meter_hand_worked_tiny_batch_and_independent_of_evaluation_frequency():
    """compute.py: FLOPs 2·P per generated token (each group's prompt once + completions) and 6·P per trained
    token; device-hours = devices × training wall clock (spec §2: GPU-hours, all GPUs of the run). Two groups of
    a 5-token prompt × 3 completions of 4 tokens; one group filtered: 12 trained tokens of 2 × (5 + 12) = 34
    generated. P = 100, 4 devices, 900 s of training: 1 device-hour. Evaluating every step or never changes nothing."""
    def run(evals: int) -> dict[str, float]:
        clock = Clock()
        m = ComputeMeter(n_params=100, devices=4, clock=clock)
        m.start()
        for step in range(3):
            clock.now += 300.0
            m.add_generation(10.0, prompt_tokens=2 * 5, completion_tokens=2 * 3 * 4)
            m.add_training(5.0, trained_tokens=12 if step == 0 else 0)
            if step < evals:
                with m.paused():
                    clock.now += 1000.0
        m.stop()
        return m.metrics()

    every, never = run(3), run(0)
    assert every == never
    assert every["compute/device_hours"] == pytest.approx(1.0)
    assert every["compute/flops"] == 2 * 100 * 3 * (10 + 24) + 6 * 100 * 12
    assert every["compute/tokens"] == 3 * 24


def test_a_resumed_run_continues_the_count_at_its_own_devices():
    """A run that held 2 devices for 1800 s (1 device-hour), resumed on 4 devices for 900 s more (another device-
    hour): 2 device-hours. The count before the checkpoint is not re-priced at the new device count (it was
    4 × 2700 s = 3 device-hours)."""
    clock = Clock()
    first = ComputeMeter(n_params=10, devices=2, clock=clock)
    first.start()
    clock.now = 1800.0
    first.stop()
    assert first.device_hours == pytest.approx(1.0)
    state = json.loads(json.dumps(first.state_dict()))  # as a checkpoint holds it

    clock2 = Clock()
    resumed = ComputeMeter(n_params=10, devices=4, clock=clock2)
    resumed.load_state_dict(state)
    assert resumed.device_hours == pytest.approx(1.0)  # nothing re-priced at load
    resumed.start()
    clock2.now = 900.0
    assert resumed.metrics()["compute/device_hours"] == pytest.approx(2.0)  # a running clock, too
    resumed.stop()
    assert resumed.device_hours == pytest.approx(2.0)
    assert resumed.wall == pytest.approx(2700.0)
    again = ComputeMeter(n_params=10, devices=1)  # and a second resume keeps both parts
    again.load_state_dict(resumed.state_dict())
    assert again.device_hours == pytest.approx(2.0)


def test_a_checkpoint_from_before_device_seconds_were_saved_keeps_its_devices():
    old = {"n_params": 10, "devices": 2, "wall_seconds": 1800.0, "gen_seconds": 0.0, "train_seconds": 0.0,
           "gen_tokens": 0, "trained_tokens": 0, "tokens": 0}
    m = ComputeMeter(n_params=10, devices=8)
    m.load_state_dict(old)
    assert m.device_hours == pytest.approx(1.0) and m.devices == 8


# ------------------------------------------------------------------------------ validation and --set parsing


@pytest.mark.parametrize("raw, value", [
    ("1e-4", 1e-4), ("3e-3", 3e-3), ("5E+3", 5000.0), ("-2e5", -2e5), ("1.0e-4", 1e-4), (".5", 0.5),
    ("8", 8), ("true", True), ("null", None), ("'1e-4'", "1e-4"), ("dapo", "dapo"),
])
def test_set_values_parse_as_yaml_1_2_numbers(raw, value):
    """``--set a.b=c``: ``1e-4`` is the number (YAML 1.2); PyYAML's YAML 1.1 read it as the string '1e-4'."""
    assert parse_override(f"a.b={raw}") == (["a", "b"], value)
    assert type(parse_override(f"a.b={raw}")[1]) is type(value)


def test_exponent_floats_reach_registry_params_from_set_and_from_files(tmp_path):
    cfg = load_config(overrides=["algo.loss.name=gspo", "algo.loss.params.eps_low=3e-3",
                                 "algo.loss.params.eps_high=5e-3", "optim.eps=1e-15"])
    assert (cfg.algo.loss.params.eps_low, cfg.algo.loss.params.eps_high, cfg.optim.eps) == (3e-3, 5e-3, 1e-15)
    path = tmp_path / "mine.yaml"
    path.write_text("algo:\n  loss:\n    name: gspo\n    params: {eps_low: 3e-3, eps_high: 5e-3}\noptim:\n  lr: 5e-7\n")
    assert read_yaml(path)["optim"]["lr"] == 5e-7
    cfg = load_config(config_file=path)
    assert (cfg.algo.loss.params.eps_low, cfg.optim.lr) == (3e-3, 5e-7)
    assert "must be a finite number" in user_error(load_config, overrides=["algo.loss.params.eps_max=1e400"])


@pytest.mark.parametrize("item, field", [
    ("steps=true", "steps"), ("optim.lr=true", "optim.lr"), ("max_minutes=yes", "max_minutes"),
    ("seed=false", "seed"), ("batch.prompts=true", "batch.prompts"), ("schedule.k=true", "schedule.k"),
    ("task.mix=[{name: arithmetic, weight: true}]", "task.mix.0.weight"),
])
def test_a_boolean_where_a_number_is_meant_is_refused(item, field):
    """``--set optim.lr=true`` was lr 1.0 and ``steps=true`` 1 step; the registries' params already refuse it."""
    message = user_error(load_config, overrides=[item])
    assert f"{field}: must be a number, not true/false" in message


def test_booleans_and_numbers_still_load():
    cfg = load_config(overrides=["algo.fp32_head=false", "optim.lr=0.001", "steps=3", "max_minutes=null"])
    assert (cfg.algo.fp32_head, cfg.optim.lr, cfg.steps, cfg.max_minutes) == (False, 0.001, 3, None)


def test_length_penalty_l_max_beyond_the_hard_cap_is_refused():
    """Spec §3.8, Eq. 9: L_max (14k) is the generation budget; past the hard cap the penalty never reaches -1,
    and with l_max - l_cache >= max_new_tokens it never fires (here: 176 >= 96)."""
    message = user_error(load_config, overrides=["algo.length.name=length_penalty", "algo.length.params.l_max=200"])
    assert "algo.length.params.l_max: must be <= max_new_tokens (96)" in message
    cfg = load_config(overrides=["algo.length.name=length_penalty", "algo.length.params.l_max=80"])
    assert cfg.algo.length.params.l_max == 80


def test_renaming_a_section_drops_only_its_params():
    """``--set task.name=...`` on a preset drops the old task's params (they mean nothing to the new task) but
    keeps the section's own fields: smollm2's split sizes (n_val 160 = its eval.n_prompts) stayed 3000 / 256."""
    cfg = load_config("smollm2", overrides=["task.name=arithmetic"])
    assert (cfg.task.name, cfg.task.params, cfg.task.n_train, cfg.task.n_val) == ("arithmetic", {}, 2000, 160)
    dapo = load_config(overrides=["algo.loss.name=dapo"])  # a registry section: params reset as before
    assert dapo.algo.loss.params.model_dump(exclude_unset=True) == {}


@pytest.mark.parametrize("argv, needle", [
    (["--set", "optim.lr=true"], "optim.lr: must be a number"),
    (["--set", "algo.curriculum.params.min_samples=99"], "algo.curriculum.params.min_samples"),
    (["--set", "algo.length.name=length_penalty", "--set", "algo.length.params.l_max=500"], "l_max"),
    (["--set", "batch.prompts=-1"], "batch.prompts"),
    (["--set", "algo.curriculum.params.threshold=1.5"], "threshold: must be in (0, 1]"),
    (["--set", "schedule.k=0"], "schedule.k"),
    (["--set", "algo.bogus=1"], "algo.bogus: unknown field"),
    (["--preset", "nope"], "unknown preset 'nope'"),
])
def test_cli_bad_config_is_one_line_exit_2(argv, needle, tmp_path, capsys):
    from scalerl.cli import main

    out = tmp_path / "run"
    with pytest.raises(SystemExit) as info:
        main(["train", "--out", str(out), *argv, "--set", "steps=1"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and needle in err and "\n" not in err and "Traceback" not in err
    assert not out.exists()


def test_every_preset_file_is_data_and_round_trips():
    from scalerl.config import preset_names, to_yaml

    for name in preset_names():
        cfg = load_config(name)
        assert build_config(read_yaml_text(to_yaml(cfg))) == cfg


def read_yaml_text(text: str):
    from scalerl.config import load_yaml

    return load_yaml(text)


# ------------------------------------------------------------------------------ one tiny run: batch, metrics, card


def test_tiny_run_batch_metrics_schema_and_run_card(tmp_path, capsys):
    """A 2-step micro run: batch.prompts × batch.generations samples a step (spec §4: 48 × 16 = 768 at the
    paper's size), the metrics contract of docs/architecture.md, device-hours = devices × compute/wall_s / 3600,
    and the run card's recipe and compute."""
    pytest.importorskip("scalerl.pipeline.runner")
    from scalerl.cli import main
    from scalerl.runlog import read_metrics

    out = tmp_path / "run"
    main(["train", "--out", str(out), *[a for s in MICRO for a in ("--set", s)],
          "--set", "warmup.steps=0", "--set", "task.n_train=6", "--set", "task.n_val=2", "--set", "batch.prompts=2",
          "--set", "batch.generations=3", "--set", "steps=2", "--set", "eval.every=1", "--set", "eval.n_samples=1",
          "--set", "backend=inline", "--set", "tensorboard=false", "--set", "algo.zero_variance_filter=false",
          "--set", "algo.truncated=train", "--set", "algo.curriculum.params.min_samples=3"])
    capsys.readouterr()
    rows = read_metrics(out)
    train = [r for r in rows if "train/samples" in r]
    evals = [r for r in rows if "val/pass_rate" in r]
    assert [r["train/samples"] for r in train] == [6.0, 6.0]
    contract = ["step", "time/wall_s", "compute/device_hours", "compute/flops", "compute/tokens", "train/reward_mean",
                "train/pass_rate", "train/truncation_rate", "train/interruption_rate", "train/entropy",
                "train/is_ratio_mean", "train/is_ratio_capped_frac", "train/staleness_mean", "train/staleness_max",
                "train/zero_var_frac", "curriculum/retired", "loss", "grad_norm", "lr", "throughput/samples_per_s"]
    for r in train:
        assert [k for k in contract if k not in r] == []
    assert sorted(r["step"] for r in evals) == [0, 1, 2]
    for r in rows:
        assert r["compute/device_hours"] == pytest.approx(1 * r["compute/wall_s"] / 3600.0)  # inline: 1 device
    card = (out / "README.md").read_text()
    for line in ["| Loss | CISPO (eps_max 4.0) | §3.2, App. A.17 |", "| Loss aggregation | prompt average |",
                 "| Advantage normalisation | batch-level |", "| Zero-variance filtering | off |",
                 "| Off-policy schedule | PipelineRL-2 | §3.1 |", "| Batch | 2 prompts × 3 generations | §2 |",
                 "| FP32 LM head | on |", "| device-hours |"]:
        assert line in card
