"""Length control (§3.8): forced interruptions (ScaleRL), the DAPO length penalty (Eq. 9), or none.

``LENGTH_CONTROLS.get(name)(**params)`` gives an object the engine and the trainer read:

* ``max_new_tokens``: hard cap on completion tokens (sampled + forced); a sequence that reaches it without
  EOS is truncated.
* ``think_budgets(n, rng)``: per-sequence thinking budget, or None (never interrupt).
* ``phrase``: text forced when thinking reaches its budget without the ``think_end`` marker ("" if none).
* ``answer_budget``: tokens allowed after the phrase.
* ``think_end``: the marker that ends thinking, ``</think>``.
* ``shape_rewards(rewards, lengths, correct)``: reward shaping from completion lengths.

Defaults are sized for the built-in arithmetic task (thinking of ~6–35 tokens, the phrase ~15–20 tokens with
the built-in tokenizer): budgets 24–48 thinking tokens, 8 answer tokens, 96 tokens in all. The paper's sizes
are 10k–12k thinking, 2k answer, 14k generation (A.3) and L_max 14k, L_cache 2k for the penalty.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from scalerl import schema
from scalerl.registry import Registry
from scalerl.schema import PAPER_PHRASE, THINK_END, default

LENGTH_CONTROLS: Registry[type["LengthControl"]] = Registry("length control")


def forced_token_weights(forced: Tensor, valid: Tensor | None = None) -> Tensor:
    """Loss weights for completion tokens: 0.0 for forced interruption tokens (the policy did not sample
    them, so they carry no policy gradient and their generator log-prob is meaningless), 1.0 for sampled
    ones; with ``valid`` (bool, same shape) also 0.0 where ``valid`` is False (padding)."""
    keep = ~forced.bool()
    if valid is not None:
        keep = keep & valid.bool()
    return keep.float()


@dataclass(frozen=True, kw_only=True)
class LengthControl:
    """No length control beyond the hard cap: never interrupt, rewards unchanged (``none``)."""

    max_new_tokens: int = default(schema.NoLengthParams, "max_new_tokens")

    phrase: ClassVar[str] = ""
    answer_budget: ClassVar[int] = 0
    think_end: ClassVar[str] = THINK_END
    # the hyper-parameters' types, bounds and defaults (scalerl/schema.py)
    params_model: ClassVar[type[schema.Params]] = schema.NoLengthParams

    def __post_init__(self) -> None:
        schema.check_fields(self, self.params_model)

    def think_budgets(self, n: int, rng: np.random.Generator) -> list[int | None]:
        return [None] * n

    def check_fits(self, phrase_tokens: int) -> None:
        """Raise ``ValueError`` if the longest interrupted completion cannot fit in ``max_new_tokens``
        (nothing to check without interruptions)."""

    def shape_rewards(self, rewards: Tensor, lengths: Tensor, correct: Tensor) -> Tensor:
        return rewards


LENGTH_CONTROLS.register("none")(LengthControl)


@LENGTH_CONTROLS.register("interruption")
@dataclass(frozen=True, kw_only=True)
class Interruption(LengthControl):
    """Forced interruptions (GLM-4.1V / Qwen3 style, ScaleRL §3.8): each sequence draws a thinking budget
    uniformly from the integers in [think_lo, think_hi] (the paper: 10k–12k); when its thinking reaches the
    budget without ``</think>``, the engine forces ``phrase`` and allows ``answer_budget`` more tokens.
    Rewards are not shaped."""

    params_model = schema.InterruptionParams
    think_lo: int = default(schema.InterruptionParams, "think_lo")
    think_hi: int = default(schema.InterruptionParams, "think_hi")
    answer_budget: int = default(schema.InterruptionParams, "answer_budget")  # type: ignore[misc]  # a field here
    phrase: str = PAPER_PHRASE  # type: ignore[misc]

    def check_fits(self, phrase_tokens: int) -> None:
        """``schema.fits``: the longest interrupted completion must fit in ``max_new_tokens`` (§3.8);
        ``phrase_tokens`` is the phrase's length under the run's tokenizer."""
        schema.fits(self, phrase_tokens)

    def think_budgets(self, n: int, rng: np.random.Generator) -> list[int | None]:
        return [int(b) for b in rng.integers(self.think_lo, self.think_hi + 1, size=n)]


@LENGTH_CONTROLS.register("length_penalty")
@dataclass(frozen=True, kw_only=True)
class LengthPenalty(LengthControl):
    """DAPO's soft over-long penalty (Eq. 9), added to *correct* traces only:
    ``R_length(y) = clip((l_max − |y|) / l_cache − 1, −1, 0)``, 0 up to ``l_max − l_cache`` tokens, falling
    linearly to −1 at ``l_max``. ``|y|`` is the completion length in tokens. No interruptions."""

    params_model = schema.LengthPenaltyParams
    l_max: int = default(schema.LengthPenaltyParams, "l_max")
    l_cache: int = default(schema.LengthPenaltyParams, "l_cache")

    def penalty(self, lengths: Tensor) -> Tensor:
        """``R_length`` of Eq. 9 for completion lengths [N]."""
        return torch.clamp((self.l_max - lengths.double()) / self.l_cache - 1.0, -1.0, 0.0)

    def shape_rewards(self, rewards: Tensor, lengths: Tensor, correct: Tensor) -> Tensor:
        values = rewards if rewards.is_floating_point() else rewards.float()
        bonus = torch.where(correct.bool(), self.penalty(lengths), torch.zeros((), dtype=torch.float64))
        return values + bonus.to(values.dtype)
