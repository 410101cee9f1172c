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


def test_a_configured_entry_is_validated_once_and_reaches_its_implementation_as_is():
    """One typed path (issue #30): the config holds the typed params from load; the loss, the curriculum and the
    length control are made with those very objects, not copies re-checked on the way."""
    cfg = build_config({"algo": {"loss": {"name": "cispo", "params": {"eps_max": 5}}}})
    assert type(cfg.algo.loss.params).__name__ == "CISPOParams" and cfg.algo.loss.params.eps_max == 5.0
    assert algo.build_loss(cfg.algo.loss).params is cfg.algo.loss.params
    assert algo.build_length_control(cfg.algo.length).params is cfg.algo.length.params
    assert algo.build_curriculum(cfg.algo.curriculum, ["a"], 0).params is cfg.algo.curriculum.params
    # written back as what was set, so a resolved config shows the user's choices, not every default
    assert cfg.model_dump()["algo"]["loss"] == {"name": "cispo", "params": {"eps_max": 5.0}}
    assert cfg.model_dump()["algo"]["length"] == {"name": "interruption", "params": {}}


@pytest.fixture
def my_loss():
    """A loss defined outside scalerl/schema.py, as a user would: one params class, one implementation."""
    import torch

    from scalerl import schema
    from scalerl.algo.losses import LOSSES, Loss

    class MyParams(schema.LossParams):
        names = ("my_test_loss",)
        clip: schema.Positive = 2.0

    @LOSSES.implement
    class MyLoss(Loss):
        params_model = MyParams

        def _terms(self, logp, ratio, adv, valid):
            weight = torch.clamp(ratio.detach(), max=self.params.clip)
            return -weight * adv * logp, ratio > self.params.clip, {}

    yield MyLoss
    schema.PARAMS["loss"].pop("my_test_loss")
    LOSSES._items.pop("my_test_loss")


def test_a_new_loss_is_one_params_class_and_one_implementation(my_loss):
    import torch

    cfg = build_config({"algo": {"loss": {"name": "my_test_loss", "params": {"clip": 3}}}})
    loss = algo.build_loss(cfg.algo.loss)
    assert isinstance(loss, my_loss) and loss.params.clip == 3.0
    assert "my_test_loss" in algo.LOSSES.names()
    logp = torch.log(torch.tensor([[0.5, 0.25]], requires_grad=True))
    out = loss(logp, torch.log(torch.tensor([[0.1, 0.25]])), torch.tensor([1.0]), torch.ones(1, 2))
    # ratio 5 capped at 3 on the first token, 1 on the second: -(3·log 0.5), -(1·log 0.25)
    torch.testing.assert_close(out.per_token, -torch.tensor([[3.0, 1.0]]) * logp.detach())
    with pytest.raises(UserError, match=r"algo\.loss\.params\.clip: must be > 0"):
        build_config({"algo": {"loss": {"name": "my_test_loss", "params": {"clip": 0}}}})


def test_the_architecture_docs_example_loss_runs():
    """docs/architecture.md, "Adding a loss": its code block, run as written, gives a loss a config can name."""
    import re
    import sys
    import types
    from pathlib import Path

    from scalerl import schema
    from scalerl.algo.losses import LOSSES

    text = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("### Adding a loss", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    module = types.ModuleType("architecture_example")  # a module, as a user's would be
    sys.modules[module.__name__] = module
    exec(compile(code, "docs/architecture.md", "exec"), module.__dict__)
    scope = module.__dict__
    try:
        cfg = build_config({"algo": {"loss": {"name": "my_loss", "params": {"clip": 3}}}})
        loss = algo.build_loss(cfg.algo.loss)
        assert isinstance(loss, scope["MyLoss"]) and loss.params.clip == 3.0
    finally:
        schema.PARAMS["loss"].pop("my_loss", None)
        LOSSES._items.pop("my_loss", None)
        sys.modules.pop(module.__name__, None)
