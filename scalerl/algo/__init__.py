"""The ScaleRL recipe's algorithm pieces and every ablated alternative, as registered pure functions (§3).

Registries (name -> implementation; the config names an entry, and its ``params``, typed at load by
``scalerl/schema.py``, are what the implementation is made with):

* ``LOSSES`` (``losses.py``, §3.2): cispo, dapo, gspo, grpo, ppo, reinforce.
* ``AGGREGATIONS`` (``aggregation.py``, §3.2, Fig. 14a): prompt, sample, token.
* ``ADVANTAGE_NORMS`` (``advantages.py``, §3.2, Fig. 14b): batch, prompt, none.
* ``CURRICULA`` (``curriculum.py``, §3.2, Fig. 6b): npr, uniform.
* ``LENGTH_CONTROLS`` (``length_control.py``, §2, App. A.10): interruption, length_penalty, none.

Per batch, in this order (1 in the generator's ``pipeline.generator.collate``, 2-5 in the trainer, 6 in the
runner):

1. ``length.shape_rewards(rewards, lengths, correct)`` (identity except for the length penalty);
2. ``keep = zero_variance_mask(rewards, group)`` when ``algo.zero_variance_filter`` (§3.2, Fig. 6a), logging
   ``zero_variance_frac``; dropped groups leave the batch (no refill);
3. ``compute_advantages(rewards[keep], group[keep], norm, eps)``: the batch std is therefore taken over
   the kept groups only (argued in ``advantages.py``);
4. ``loss(logp, gen_logp, advantages, mask)`` with ``mask`` built using ``forced_token_weights``;
5. ``AGGREGATIONS.get(name)(out.per_token, mask, group)`` -> the scalar to minimise;
6. ``curriculum.update(prompt_id, n_correct, n_total)`` for each group (before filtering: an all-correct
   group is exactly what No-Positive-Resampling must see).
"""

from __future__ import annotations

from typing import Any, Sequence

from scalerl import schema
from scalerl.algo.advantages import ADVANTAGE_NORMS, compute_advantages
from scalerl.algo.aggregation import AGGREGATIONS
from scalerl.algo.curriculum import CURRICULA, PromptSampler
from scalerl.algo.filters import zero_variance_frac, zero_variance_mask
from scalerl.algo.length_control import LENGTH_CONTROLS, LengthControl, forced_token_weights
from scalerl.algo.losses import LOSSES, Loss, LossOutput

# a config is checked against the typed schemas alone (torch-free, nothing built): scalerl/schema.py
validate = schema.check_algo


def _params(kind: str, cfg: Any, where: str) -> schema.Params:
    """``cfg.params`` (a config section's, typed at load: used as it is; a mapping: validated now)."""
    return schema.typed_params(kind, cfg.name, cfg.params, where)


def build_loss(cfg: Any, where: str = "algo.loss") -> Loss:
    """The loss named by ``cfg.name`` (a ``LossConfig``), made with its typed ``params``."""
    return LOSSES.get(cfg.name, f"{where}.name")(_params("loss", cfg, where))


def build_curriculum(cfg: Any, ids: Sequence[str], seed: int, where: str = "algo.curriculum") -> PromptSampler:
    """The prompt sampler named by ``cfg.name`` (a ``CurriculumConfig``) over the training ``ids``."""
    return CURRICULA.get(cfg.name, f"{where}.name")(list(ids), seed, _params("curriculum", cfg, where))


def build_length_control(cfg: Any, where: str = "algo.length") -> LengthControl:
    """The length control named by ``cfg.name`` (a ``LengthConfig``), made with its typed ``params``."""
    return LENGTH_CONTROLS.get(cfg.name, f"{where}.name")(_params("length control", cfg, where))


__all__ = [
    "ADVANTAGE_NORMS",
    "AGGREGATIONS",
    "CURRICULA",
    "LENGTH_CONTROLS",
    "LOSSES",
    "LengthControl",
    "Loss",
    "LossOutput",
    "PromptSampler",
    "build_curriculum",
    "build_length_control",
    "build_loss",
    "compute_advantages",
    "forced_token_weights",
    "validate",
    "zero_variance_frac",
    "zero_variance_mask",
]
