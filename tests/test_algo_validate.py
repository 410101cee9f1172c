"""``scalerl.algo.validate`` and the builders: a bad name or value in ``algo`` is one UserError naming the
field, also when it comes through ``scalerl.config.build_config``."""

from __future__ import annotations

import pytest

from scalerl import algo
from scalerl.algo.curriculum import NPRSampler
from scalerl.algo.length_control import Interruption, LengthPenalty
from scalerl.algo.losses import DAPOLoss
from scalerl.config import AlgoConfig, build_config
from scalerl.errors import UserError


def test_default_config_is_the_scalerl_recipe():
    cfg = build_config({})
    assert isinstance(algo.build_loss(cfg.algo.loss), algo.LOSSES.get("cispo"))
    assert isinstance(algo.build_length_control(cfg.algo.length), Interruption)
    sampler = algo.build_curriculum(cfg.algo.curriculum, ["a", "b"], seed=0)
    assert isinstance(sampler, NPRSampler) and sorted(sampler.next_ids(2)) == ["a", "b"]


def test_builders_pass_params():
    cfg = build_config(
        {
            "algo": {
                "loss": {"name": "dapo", "params": {"eps_high": 0.26}},
                "curriculum": {"name": "npr", "params": {"threshold": 0.8, "min_samples": 4}},
                "length": {"name": "length_penalty", "params": {"l_max": 80, "l_cache": 16}},
            }
        }
    )
    assert algo.build_loss(cfg.algo.loss) == DAPOLoss(eps_low=0.2, eps_high=0.26)
    assert algo.build_curriculum(cfg.algo.curriculum, ["x"], 0).min_samples == 4
    assert algo.build_length_control(cfg.algo.length) == LengthPenalty(l_max=80, l_cache=16)


@pytest.mark.parametrize(
    ("algo_cfg", "message"),
    [
        ({"loss": {"name": "cispo", "params": {"eps_max": -1}}}, "algo.loss.params.eps_max: must be > 0"),
        ({"loss": {"name": "foo"}}, "algo.loss.name: unknown loss 'foo'; choose one of: cispo, dapo"),
        ({"loss": {"name": "dapo", "params": {"eps": 0.2}}}, "algo.loss.params.eps: unknown parameter"),
        ({"loss": {"name": "grpo", "params": {"eps_low": -0.2}}}, "algo.loss.params.eps_low: must be > 0"),
        ({"aggregation": "mean"}, "algo.aggregation: unknown aggregation 'mean'"),
        ({"advantages": {"norm": "group"}}, "algo.advantages.norm: unknown advantage normalisation 'group'"),
        ({"curriculum": {"name": "polaris"}}, "algo.curriculum.name: unknown curriculum 'polaris'"),
        ({"curriculum": {"name": "npr", "params": {"threshold": 2}}}, "algo.curriculum.params.threshold:"),
        ({"curriculum": {"name": "uniform", "params": {"threshold": 0.9}}}, "algo.curriculum.params.threshold:"),
        ({"curriculum": {"name": "npr", "params": {"ids": ["a"]}}}, "algo.curriculum.params.ids: unknown"),
        ({"length": {"name": "budget"}}, "algo.length.name: unknown length control 'budget'"),
        ({"length": {"name": "interruption", "params": {"think_hi": 10}}}, "algo.length.params.think_hi:"),
        ({"length": {"name": "none", "params": {"phrase": "x"}}}, "algo.length.params.phrase: unknown"),
    ],
)
def test_bad_algo_config_is_one_line_user_error_naming_the_field(algo_cfg, message):
    with pytest.raises(UserError) as info:
        build_config({"algo": algo_cfg})
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    with pytest.raises(UserError, match=message.split(":")[0]):
        algo.validate(AlgoConfig.model_validate(algo_cfg))  # AlgoConfig alone does not look names up
