"""Presets as data (App. A.16), their computed differences, and the leave-one-out variants (§4, Fig. 7, ICLR A.20)."""

from __future__ import annotations

import pytest
import yaml

from scalerl import algo as algo_lib
from scalerl.cli import main
from scalerl.config import CONFIG_DIR, build_config, load_config, preset_names
from scalerl.errors import UserError
from scalerl.presets import (
    LOO_COMPONENTS,
    MISSING,
    config_diff,
    flatten,
    list_presets,
    loo_variants,
    preset_diff,
    resolve_preset,
    resolve_variant,
)

PRESETS = ["dapo_qwen", "grpo_deepseek", "magistral", "minimax", "multitask", "scalerl", "smollm2"]
LOO = ["loo-dapo", "loo-fp32", "loo-savg", "loo-plan", "loo-batch", "loo-uniform", "loo-lp", "loo-8op"]


def test_every_preset_resolves_with_a_one_line_description():
    assert preset_names() == PRESETS
    listed = dict(list_presets())
    for name in PRESETS:
        assert resolve_preset(name).name == name
        assert listed[name] and "\n" not in listed[name]


def test_scalerl_preset_states_the_whole_recipe_and_matches_the_defaults():
    raw = yaml.safe_load((CONFIG_DIR / "scalerl.yaml").read_text())
    algo = raw["algo"]
    assert algo["loss"] == {"name": "cispo", "params": {"eps_max": 4.0}}
    assert algo["aggregation"] == "prompt" and algo["advantages"]["norm"] == "batch"
    assert algo["zero_variance_filter"] is True and algo["fp32_head"] is True
    assert algo["curriculum"] == {"name": "npr", "params": {"threshold": 0.9}}
    assert algo["length"]["name"] == "interruption"
    assert raw["schedule"] == {"name": "pipeline_rl", "k": 2}
    # the typed defaults are the same recipe: the preset only spells out the implementations' defaults
    defaults, preset = build_config({}), resolve_preset("scalerl")
    rows = config_diff(defaults, preset)
    assert rows and all(a == MISSING and ".params." in path for path, a, _ in rows)
    assert algo_lib.build_loss(defaults.algo.loss) == algo_lib.build_loss(preset.algo.loss)
    assert algo_lib.build_length_control(defaults.algo.length) == algo_lib.build_length_control(preset.algo.length)
    npr = algo_lib.build_curriculum(defaults.algo.curriculum, ["x"], 0)
    assert npr.threshold == algo_lib.build_curriculum(preset.algo.curriculum, ["x"], 0).threshold == 0.9


def test_grpo_deepseek():
    cfg = resolve_preset("grpo_deepseek")
    assert (cfg.algo.loss.name, cfg.algo.loss.params.model_dump()) == ("grpo", {"eps_low": 0.2, "eps_high": 0.2})
    assert cfg.algo.aggregation == "sample" and cfg.algo.advantages.norm == "prompt"
    assert (cfg.schedule.name, cfg.schedule.k) == ("ppo_off_policy", 2)
    assert not cfg.algo.zero_variance_filter and not cfg.algo.fp32_head
    assert cfg.algo.curriculum.name == "uniform" and cfg.algo.length.name == "none"


def test_dapo_qwen_and_its_larger_batch():
    cfg, base = resolve_preset("dapo_qwen"), resolve_preset("scalerl")
    assert (cfg.algo.loss.name, cfg.algo.loss.params.model_dump()) == ("dapo", {"eps_low": 0.2, "eps_high": 0.26})
    assert cfg.algo.aggregation == "prompt" and cfg.algo.advantages.norm == "prompt"
    assert cfg.algo.zero_variance_filter
    assert (cfg.schedule.name, cfg.schedule.k) == ("ppo_off_policy", 2)
    assert cfg.batch.prompts == round(base.batch.prompts * 80 / 48)  # App. A.16: 80 prompts instead of 48
    assert cfg.batch.generations == base.batch.generations
    length = cfg.algo.length
    assert length.name == "length_penalty"
    # original DAPO: the soft zone is 4096 of a 20480-token L_max, and L_max is the generation cap
    assert length.params.l_max == length.params.max_new_tokens
    assert length.params.l_cache == round(length.params.l_max * 4096 / 20480)


def test_magistral_is_dapo_on_pipeline_rl():
    assert preset_diff("magistral", base="dapo_qwen") == [("schedule.name", "ppo_off_policy", "pipeline_rl")]
    assert resolve_preset("magistral").schedule.k == 2


def test_minimax():
    cfg = resolve_preset("minimax")
    assert (cfg.algo.loss.name, cfg.algo.aggregation) == ("cispo", "prompt")
    assert cfg.algo.fp32_head and cfg.algo.zero_variance_filter
    assert cfg.schedule.name == "ppo_off_policy"
    assert cfg.batch.prompts == resolve_preset("dapo_qwen").batch.prompts


def test_flatten_and_config_diff_by_hand():
    assert flatten({"a": {"b": 1, "c": {"d": 2}}, "e": 3, "p": {}}) == {"a.b": 1, "a.c.d": 2, "e": 3}
    a = build_config({"batch": {"prompts": 4}, "algo": {"loss": {"name": "cispo", "params": {"eps_max": 4}}}})
    b = build_config({"batch": {"prompts": 5}, "algo": {"loss": {"name": "cispo", "params": {"eps_max": 8}}}})
    assert config_diff(a, b) == [("algo.loss.params.eps_max", 4, 8), ("batch.prompts", 4, 5)]
    c = build_config({"batch": {"prompts": 4}, "algo": {"loss": {"name": "cispo", "params": {}}}})
    assert config_diff(c, a) == [("algo.loss.params.eps_max", MISSING, 4)]
    # switching the implementation is one row holding both sections
    d = build_config({"algo": {"loss": {"name": "gspo"}}})
    assert config_diff(a, d)[0] == ("algo.loss", {"name": "cispo", "params": {"eps_max": 4}}, {"name": "gspo", "params": {}})
    assert preset_diff("scalerl") == []


def test_preset_diff_is_computed_from_the_resolved_configs():
    rows = dict((path, (a, b)) for path, a, b in preset_diff("grpo_deepseek"))
    assert rows["algo.aggregation"] == ("prompt", "sample")
    assert rows["algo.fp32_head"] == (True, False)
    assert rows["schedule.name"] == ("pipeline_rl", "ppo_off_policy")
    assert "schedule.k" not in rows and "batch.prompts" not in rows  # equal fields are not listed
    assert rows["algo.loss"][1] == {"name": "grpo", "params": {"eps_low": 0.2, "eps_high": 0.2}}


def test_loo_variants_names_and_values():
    variants = loo_variants()
    assert list(variants) == LOO
    assert variants["loo-dapo"] == ["algo.loss.name=dapo", "algo.loss.params.eps_low=0.2", "algo.loss.params.eps_high=0.26"]
    assert variants["loo-fp32"] == ["algo.fp32_head=false"]  # the head only: both arms in the same precision
    assert variants["loo-savg"] == ["algo.aggregation=sample"]
    assert variants["loo-plan"] == ["algo.advantages.norm=prompt"]
    assert variants["loo-batch"] == ["algo.zero_variance_filter=false"]
    assert variants["loo-uniform"] == ["algo.curriculum.name=uniform"]
    assert variants["loo-8op"] == ["schedule.name=ppo_off_policy"]
    lp = resolve_variant("loo-lp").algo.length
    assert lp.name == "length_penalty" and lp.params.l_max == 48 + 8  # the base's budget (test below)
    op = resolve_variant("loo-8op").schedule
    assert (op.name, op.k) == ("ppo_off_policy", resolve_preset("scalerl").schedule.k)  # same k


@pytest.mark.parametrize("variant", LOO)
def test_each_loo_variant_validates_and_changes_exactly_its_component(variant):
    base = resolve_preset("scalerl")
    cfg = resolve_variant(variant)
    assert cfg.name == variant
    component = LOO_COMPONENTS[variant][0]
    rows = config_diff(base, cfg)
    assert rows, f"{variant} changes nothing"
    assert all(path == component or path.startswith(component + ".") for path, _, _ in rows), rows
    # the overrides alone reproduce the variant through the ordinary --set path
    again = load_config("scalerl", overrides=loo_variants()[variant])
    assert config_diff(cfg, again) == []


def test_every_loo_variant_differs_from_scalerl_in_exactly_one_component():
    """Issue #27 item 2: each resolved loo-* config against scalerl's: every differing field lies in the one
    component the variant names (a registry switch is one row), and nothing else differs: no precision or
    testbed setting rides along (loo-fp32 used to switch generation to bf16 as well)."""
    base = resolve_preset("scalerl")
    for variant, (component, _) in LOO_COMPONENTS.items():
        rows = config_diff(base, resolve_variant(variant))
        components = {component for path, _, _ in rows if path == component or path.startswith(component + ".")}
        assert rows and components == {component} and len(components) == 1, (variant, rows)
        assert all(path == component or path.startswith(component + ".") for path, _, _ in rows), (variant, rows)


def test_loo_lp_keeps_the_base_generation_budget():
    """Issue #27 item 5, App. A.10 / Eq. 9: L_max = thinking + answer budget, L_cache = the answer budget, and
    generation capped at L_max: interruptions at 24-48 thinking tokens + 8 answer tokens -> l_max 56, l_cache 8,
    max_new_tokens 56 (dapo_qwen's own cap is 96 with the penalty from token 77)."""
    base = resolve_preset("scalerl").algo.length.params.model_dump()
    lp = resolve_variant("loo-lp").algo.length
    assert lp.name == "length_penalty"
    assert lp.params.model_dump(exclude_unset=True) == {"l_max": base["think_hi"] + base["answer_budget"], "l_cache": base["answer_budget"],
                         "max_new_tokens": base["think_hi"] + base["answer_budget"]} == {
        "l_max": 56, "l_cache": 8, "max_new_tokens": 56}
    # on a base with another budget the penalty follows it
    wide = load_config("scalerl", overrides=["algo.length.params.think_hi=80", "algo.length.params.max_new_tokens=112"])
    from scalerl.presets import matched_budget
    again = matched_budget(wide.model_dump(mode="json")["algo"]["length"],
                           resolve_preset("dapo_qwen").model_dump(mode="json")["algo"]["length"])
    assert again["params"]["l_max"] == 88 and again["params"]["max_new_tokens"] == 88


def test_loo_on_another_base_skips_what_it_already_lacks():
    variants = loo_variants("minimax")  # PPO-off-policy, prompt norm, uniform, length penalty already
    assert set(variants) == {"loo-dapo", "loo-fp32", "loo-savg", "loo-batch"}
    for name in variants:
        cfg = resolve_variant(name, base="minimax")
        component = LOO_COMPONENTS[name][0]
        assert all(p.startswith(component) for p, _, _ in config_diff(resolve_preset("minimax"), cfg))
    with pytest.raises(UserError, match="changes nothing"):
        resolve_variant("loo-8op", base="minimax")


def test_resolve_variant_accepts_presets_and_rejects_unknown_names():
    assert resolve_variant("magistral") == resolve_preset("magistral")
    with pytest.raises(UserError, match="unknown preset or variant 'loo-kl'.*loo-dapo"):
        resolve_variant("loo-kl")


def run_cli(argv, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_presets_table(capsys, monkeypatch):
    code, out, _ = run_cli(["presets"], capsys, monkeypatch)
    assert code == 0
    for name in PRESETS + LOO:
        assert name in out
    assert "algo.aggregation: prompt -> sample" in out
    assert "schedule.name: pipeline_rl -> ppo_off_policy" in out
    assert "algo.loss.params.eps_high=0.26" in out


def test_cli_presets_show(capsys, monkeypatch):
    code, out, _ = run_cli(["presets", "--show", "loo-fp32"], capsys, monkeypatch)
    assert code == 0
    shown = build_config(yaml.safe_load(out))
    assert shown == resolve_variant("loo-fp32") and not shown.algo.fp32_head
    code, out, _ = run_cli(["presets", "--show", "minimax"], capsys, monkeypatch)
    assert code == 0 and build_config(yaml.safe_load(out)) == resolve_preset("minimax")
    code, out, err = run_cli(["presets", "--show", "nope"], capsys, monkeypatch)
    assert code == 2 and out == "" and err.startswith("error: unknown preset or variant 'nope'")


@pytest.mark.parametrize("command", [["sweep", str(CONFIG_DIR / "sweeps" / "micro.yaml")], ["loo"]])
def test_cli_jobs_below_one_is_refused_before_anything_runs(command, tmp_path, capsys, monkeypatch):
    out = tmp_path / "sweep"
    code, _, err = run_cli([*command, "--out", str(out), "--jobs", "0"], capsys, monkeypatch)
    assert code == 2 and err.strip() == "error: --jobs must be ≥ 1, got 0" and not out.exists()


def test_a_recipe_without_the_fp32_head_says_it_has_no_effect_in_float32():
    """Issue #27 item 3: grpo_deepseek, dapo_qwen and magistral turn the FP32 head off, which changes nothing
    while generator and trainer compute in float32 (tests/test_fp32_head.py: |log ρ| < 1e-5 either way); their
    one-line descriptions say so and name the setting that gives the paper's bf16 regime."""
    quiet = [n for n in preset_names() if not resolve_preset(n).algo.fp32_head]
    assert sorted(quiet) == ["dapo_qwen", "grpo_deepseek", "magistral"]
    for name in quiet:
        cfg = resolve_preset(name)
        assert not cfg.engine.bf16_autocast and not cfg.optim.bf16_autocast  # float32 on both sides
        text = dict(list_presets())[name]
        assert "no FP32 head (no effect here" in text and "engine.bf16_autocast=true" in text, name
