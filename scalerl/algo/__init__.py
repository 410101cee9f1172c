"""The ScaleRL recipe's algorithm pieces and every ablated alternative, as registered pure functions (§3).

Registries (name -> implementation; the config names an entry, ``params`` are its keyword arguments):

* ``LOSSES`` (``losses.py``, §3.2): cispo, dapo, gspo, grpo, ppo, reinforce.
* ``AGGREGATIONS`` (``aggregation.py``, §3.4): prompt, sample, token.
* ``ADVANTAGE_NORMS`` (``advantages.py``, §3.5): batch, prompt, none.
* ``CURRICULA`` (``curriculum.py``, §3.7): npr, uniform.
* ``LENGTH_CONTROLS`` (``length_control.py``, §3.8): interruption, length_penalty, none.

Per batch the trainer runs, in this order:

1. ``length.shape_rewards(rewards, lengths, correct)`` (identity except for the length penalty);
2. ``keep = zero_variance_mask(rewards, group)`` when ``algo.zero_variance_filter`` (§3.6), logging
   ``zero_variance_frac``; dropped groups leave the batch (no refill);
3. ``compute_advantages(rewards[keep], group[keep], norm, eps)``: the batch std is therefore taken over
   the kept groups only (argued in ``advantages.py``);
4. ``loss(logp, gen_logp, advantages, mask)`` with ``mask`` built using ``forced_token_weights``;
5. ``AGGREGATIONS.get(name)(out.per_token, mask, group)`` -> the scalar to minimise;
6. ``curriculum.update(prompt_id, n_correct, n_total)`` for each group (before filtering: an all-correct
   group is exactly what No-Positive-Resampling must see).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence, TypeVar

from scalerl.algo.advantages import ADVANTAGE_NORMS, compute_advantages
from scalerl.algo.aggregation import AGGREGATIONS
from scalerl.algo.curriculum import CURRICULA, PromptSampler
from scalerl.algo.filters import zero_variance_frac, zero_variance_mask
from scalerl.algo.length_control import LENGTH_CONTROLS, LengthControl, forced_token_weights
from scalerl.algo.losses import LOSSES, Loss, LossOutput
from scalerl.errors import UserError

T = TypeVar("T")

# Arguments the code supplies, not the user's params.
_SUPPLIED = {"ids", "seed", "self"}


def _construct(factory: Callable[..., T], params: dict[str, Any], where: str, label: str, *args: Any) -> T:
    """``factory(*args, **params)``; a wrong param becomes a one-line UserError naming ``where.params.<field>``."""
    accepted = [p for p in inspect.signature(factory).parameters if p not in _SUPPLIED]
    for key in params:
        if key not in accepted:
            choices = ", ".join(accepted) if accepted else "none"
            raise UserError(f"{where}.params.{key}: unknown parameter for {label}; accepted: {choices}")
    try:
        return factory(*args, **params)
    except ValueError as exc:  # entries word these "<field>: <problem>"
        raise UserError(f"{where}.params.{exc}") from None
    except TypeError as exc:
        raise UserError(f"{where}.params: {exc}") from None


def build_loss(cfg: Any, where: str = "algo.loss") -> Loss:
    """The loss named by ``cfg.name`` (a ``LossConfig``), built with ``cfg.params``."""
    return _construct(LOSSES.get(cfg.name, f"{where}.name"), cfg.params, where, f"loss {cfg.name!r}")


def build_curriculum(cfg: Any, ids: Sequence[str], seed: int, where: str = "algo.curriculum") -> PromptSampler:
    """The prompt sampler named by ``cfg.name`` (a ``CurriculumConfig``) over the training ``ids``."""
    factory = CURRICULA.get(cfg.name, f"{where}.name")
    return _construct(factory, cfg.params, where, f"curriculum {cfg.name!r}", list(ids), seed)


def build_length_control(cfg: Any, where: str = "algo.length") -> LengthControl:
    """The length control named by ``cfg.name`` (a ``LengthConfig``), built with ``cfg.params``."""
    factory = LENGTH_CONTROLS.get(cfg.name, f"{where}.name")
    return _construct(factory, cfg.params, where, f"length control {cfg.name!r}")


def validate(algo_cfg: Any) -> None:
    """Check an ``AlgoConfig``: every name registered, every params mapping accepted by its entry.

    Builds each object once (cheap, no I/O; the curriculum over a one-id stand-in split) and raises a
    one-line UserError naming the field, e.g. ``algo.loss.params.eps_max: must be > 0, got -1``."""
    build_loss(algo_cfg.loss)
    AGGREGATIONS.get(algo_cfg.aggregation, "algo.aggregation")
    ADVANTAGE_NORMS.get(algo_cfg.advantages.norm, "algo.advantages.norm")
    build_curriculum(algo_cfg.curriculum, ["validate"], 0)
    build_length_control(algo_cfg.length)


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
