"""The config tree: defaults are the ScaleRL recipe, ``--set`` parsing, and one-line errors naming the field."""

from __future__ import annotations

import pytest
import yaml

from scalerl import config
from scalerl.config import (
    apply_overrides,
    build_config,
    config_from_run_dir,
    load_config,
    parse_override,
    preset_dict,
    to_yaml,
)
from scalerl.errors import UserError


def user_error(fn, *args, **kwargs) -> str:
    """The message of the UserError ``fn`` raises; it must be a single line."""
    with pytest.raises(UserError) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message and message
    return message


# ------------------------------------------------------------------------------------------------ defaults


def test_defaults_are_the_scalerl_recipe():
    cfg = build_config({})
    assert (cfg.algo.loss.name, cfg.algo.aggregation, cfg.algo.advantages.norm) == ("cispo", "prompt", "batch")
    assert cfg.algo.zero_variance_filter and cfg.algo.fp32_head
    assert (cfg.algo.curriculum.name, cfg.algo.length.name) == ("npr", "interruption")
    assert (cfg.schedule.name, cfg.schedule.k) == ("pipeline_rl", 2)  # k=8 in the paper; CPU scale, see configs/scalerl.yaml


def test_yaml_round_trip_and_run_dir(tmp_path):
    cfg = load_config("dapo_qwen", overrides=["steps=7"])
    assert build_config(yaml.safe_load(to_yaml(cfg))) == cfg
    (tmp_path / "config.yaml").write_text(to_yaml(cfg))
    assert config_from_run_dir(tmp_path) == cfg
    assert "config file not found" in user_error(config_from_run_dir, tmp_path / "missing")


# ------------------------------------------------------------------------------------------------ --set


def test_parse_override_values():
    assert parse_override("algo.loss.name=dapo") == (["algo", "loss", "name"], "dapo")
    assert parse_override("batch.prompts=8") == (["batch", "prompts"], 8)
    assert parse_override("algo.fp32_head=false") == (["algo", "fp32_head"], False)
    assert parse_override("task.params.expr=a=b") == (["task", "params", "expr"], "a=b")  # first = splits
    assert parse_override("algo.loss.params={eps_low: 0.1}") == (["algo", "loss", "params"], {"eps_low": 0.1})
    assert parse_override("max_minutes=") == (["max_minutes"], "")


@pytest.mark.parametrize("item", ["algo.loss.name", "=3", "algo..name=x", "batch.=3"])
def test_parse_override_rejects_malformed_items(item):
    message = user_error(parse_override, item)
    assert "--set" in message and repr(item) in message


def test_set_through_load_config():
    cfg = load_config(overrides=["algo.loss.name=dapo", "batch.prompts=8", "task.params.expr=a=b"])
    assert cfg.algo.loss.name == "dapo"
    assert cfg.algo.loss.params.model_dump(exclude_unset=True) == {}  # CISPO's eps_max does not follow the switch
    assert cfg.batch.prompts == 8 and isinstance(cfg.batch.prompts, int)
    assert cfg.task.params == {"expr": "a=b"}


def test_switching_implementation_resets_params_in_any_order():
    a = load_config(overrides=["algo.loss.name=dapo", "algo.loss.params.eps_high=0.3"])
    b = load_config(overrides=["algo.loss.params.eps_high=0.3", "algo.loss.name=dapo"])
    assert a == b
    assert a.algo.loss.params.model_dump(exclude_unset=True) == {"eps_high": 0.3}
    assert (a.algo.loss.params.eps_low, a.algo.loss.params.eps_high) == (0.2, 0.3)  # typed, DAPO's defaults filled
    # same implementation: params merge key by key
    c = load_config(overrides=["algo.length.params.think_hi=40"])
    assert c.algo.length.params.think_hi == 40 and c.algo.length.params.think_lo == 24


def test_apply_overrides_leaves_input_alone_and_last_wins():
    data = {"batch": {"prompts": 4}}
    out = apply_overrides(data, ["batch.prompts=5", "batch.prompts=6", "schedule.k=2"])
    assert data == {"batch": {"prompts": 4}}
    assert out == {"batch": {"prompts": 6}, "schedule": {"k": 2}}


@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize("section, name, field, value", [
    ("engine", "vllm", "enforce_eager", True),
    ("model", "smollm2-135m", "dtype", "bfloat16"),
])
def test_shorthand_and_its_fields_combine_in_any_order(order, section, name, field, value):
    """``--set engine=vllm --set engine.enforce_eager=true`` must keep the name (it once silently fell back to
    the default engine when the shorthand came first)."""
    items = [f"{section}={name}", f"{section}.{field}={str(value).lower()}"]
    cfg = load_config(overrides=items if order == 0 else items[::-1])
    assert getattr(cfg, section).name == name and getattr(getattr(cfg, section), field) == value


def test_shorthand_in_a_config_file_keeps_its_name_under_set(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("engine: vllm\n")
    cfg = load_config(config_file=path, overrides=["engine.max_num_seqs=8"])
    assert cfg.engine.name == "vllm" and cfg.engine.max_num_seqs == 8


def test_set_below_a_value_is_a_user_error():
    message = user_error(load_config, overrides=["algo.aggregation.kind=x"])
    assert "algo.aggregation is a value" in message


# ------------------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    "overrides",
    [
        ["algo.loss.name=nope"],
        ["algo.aggregation=median"],
        ["algo.advantages.norm=zscore"],
        ["algo.curriculum.name=hardest_first"],
        ["algo.length.name=guillotine"],
        ["schedule.name=sync"],
        ["algo.loss.params.eps_max=-1"],
        ["algo.loss.name=dapo", "algo.loss.params.eps_low=-0.1"],
        ["algo.loss.params.bogus=1"],
        ["schedule.k=0"],
        ["batch.generations=1"],
        ["batch.prompts=many"],
        ["algo.foo=1"],
        ["optim.lr=-3"],
    ],
)
def test_invalid_values_name_the_field(overrides):
    field = overrides[-1].split("=")[0]  # the last item is the bad one
    message = user_error(load_config, overrides=overrides)
    assert f"{field}:" in message
    assert message.startswith("invalid config (preset scalerl + --set)")


def test_error_wording():
    assert "unknown loss 'nope'; choose one of:" in user_error(load_config, overrides=["algo.loss.name=nope"])
    assert "unknown field" in user_error(load_config, overrides=["algo.foo=1"])
    assert "got 0" in user_error(load_config, overrides=["schedule.k=0"])
    assert "greater than or equal to 2" in user_error(load_config, overrides=["batch.generations=1"])


def test_build_config_reports_the_field():
    message = user_error(build_config, {"algo": {"loss": {"name": "cispo", "params": {"eps_max": -1}}}})
    assert "algo.loss.params.eps_max" in message
    assert "must be a mapping" in user_error(build_config, ["not", "a", "mapping"])


def test_unknown_preset():
    message = user_error(load_config, "grpo_qwen")
    assert "unknown preset 'grpo_qwen'" in message and "scalerl" in message


def test_config_file_errors(tmp_path):
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    assert "must hold a mapping of fields, not list" in user_error(load_config, config_file=listed)
    broken = tmp_path / "broken.yaml"
    broken.write_text("batch:\n  prompts: [1,\n")
    assert "not valid YAML" in user_error(load_config, config_file=broken)
    assert "config file not found" in user_error(load_config, config_file=tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("schedule:\n  k: 0\n")
    message = user_error(load_config, config_file=bad)
    assert "schedule.k" in message and str(bad) in message


def test_config_file_with_base_and_set(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("base: dapo_qwen\ndescription: mine\nbatch:\n  prompts: 5\n")
    cfg = load_config(config_file=path, overrides=["schedule.k=2"])
    assert cfg.algo.loss.name == "dapo" and cfg.batch.prompts == 5 and cfg.schedule.k == 2


def test_preset_base_chain(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "CONFIG_DIR", tmp_path)
    (tmp_path / "a.yaml").write_text("base: b\nsteps: 3\n")
    (tmp_path / "b.yaml").write_text("base: a\n")
    assert "cycle" in user_error(preset_dict, "a")
    (tmp_path / "b.yaml").write_text("description: b\nsteps: 9\nseed: 4\n")
    assert preset_dict("a") == {"steps": 3, "seed": 4}
    (tmp_path / "c.yaml").write_text("base: gone\n")
    assert "unknown preset 'gone'" in user_error(preset_dict, "c")
    (tmp_path / "d.yaml").write_text("7\n")
    assert "must hold a mapping" in user_error(preset_dict, "d")


def test_cli_train_config_error_is_one_line_exit_2(tmp_path, capsys):
    pytest.importorskip("scalerl.pipeline.runner")
    from scalerl.cli import main

    out = tmp_path / "run"
    with pytest.raises(SystemExit) as info:
        main(["train", "--out", str(out), "--set", "batch.generations=1"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "batch.generations" in err and "\n" not in err
    assert not out.exists()
    with pytest.raises(SystemExit) as info:
        main(["train", "--out", str(out), "--set", "algo.loss.name"])
    assert info.value.code == 2
    assert "expected key=value" in capsys.readouterr().err
