"""Length control (§2, App. A.10): forced interruptions (ScaleRL), the DAPO length penalty (Eq. 9), or none.

``LENGTH_CONTROLS.get(name)(params)`` (its typed params, ``scalerl/schema.py``) gives an object the engine and
the trainer read:

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

import numpy as np
import torch
from torch import Tensor

from scalerl import schema
from scalerl.registry import Registry
from scalerl.schema import PAPER_PHRASE, THINK_END

__all__ = ["LENGTH_CONTROLS", "PAPER_PHRASE", "Interruption", "LengthControl", "LengthPenalty", "forced_token_weights"]

LENGTH_CONTROLS: Registry[type["LengthControl"]] = Registry("length control")


def forced_token_weights(forced: Tensor, valid: Tensor | None = None) -> Tensor:
    """Loss weights for completion tokens: 0.0 for forced interruption tokens (the policy did not sample
    them, so they carry no policy gradient and their generator log-prob is meaningless), 1.0 for sampled
    ones; with ``valid`` (bool, same shape) also 0.0 where ``valid`` is False (padding)."""
    keep = ~forced.bool()
    if valid is not None:
        keep = keep & valid.bool()
    return keep.float()


class LengthControl(schema.Configured):
    """No length control beyond the hard cap: never interrupt, rewards unchanged (``none``). Its
    hyper-parameters are its ``params_model`` object (``scalerl/schema.py``), read as attributes."""

    params_model = schema.NoLengthParams
    think_end = THINK_END

    @property
    def max_new_tokens(self) -> int:
        """Hard cap on completion tokens (sampled + forced)."""
        return self.params.max_new_tokens

    @property
    def phrase(self) -> str:
        """Text forced when thinking reaches its budget ("" when nothing is ever forced)."""
        return getattr(self.params, "phrase", "")

    @property
    def answer_budget(self) -> int:
        """Tokens allowed after the phrase (0 when nothing is ever forced)."""
        return getattr(self.params, "answer_budget", 0)

    def think_budgets(self, n: int, rng: np.random.Generator) -> list[int | None]:
        return [None] * n

    def check_fits(self, phrase_tokens: int) -> None:
        """Raise ``ValueError`` if the longest interrupted completion cannot fit in ``max_new_tokens``
        (nothing to check without interruptions)."""

    def shape_rewards(self, rewards: Tensor, lengths: Tensor, correct: Tensor) -> Tensor:
        return rewards


LENGTH_CONTROLS.implement(LengthControl)


@LENGTH_CONTROLS.implement
class Interruption(LengthControl):
    """Forced interruptions (GLM-4.1V / Qwen3 style, §2, App. A.10): each sequence draws a thinking budget
    uniformly from the integers in [think_lo, think_hi] (the paper: 10k–12k); when its thinking reaches the
    budget without ``</think>``, the engine forces ``phrase`` and allows ``answer_budget`` more tokens.
    Rewards are not shaped."""

    params_model = schema.InterruptionParams

    def check_fits(self, phrase_tokens: int) -> None:
        """``schema.fits``: the longest interrupted completion must fit in ``max_new_tokens`` (§2, App. A.10);
        ``phrase_tokens`` is the phrase's length under the run's tokenizer."""
        schema.fits(self.params, phrase_tokens)

    def think_budgets(self, n: int, rng: np.random.Generator) -> list[int | None]:
        p = self.params
        return [int(b) for b in rng.integers(p.think_lo, p.think_hi + 1, size=n)]


@LENGTH_CONTROLS.implement
class LengthPenalty(LengthControl):
    """DAPO's soft over-long penalty (Eq. 9), added to *correct* traces only:
    ``R_length(y) = clip((l_max − |y|) / l_cache − 1, −1, 0)``, 0 up to ``l_max − l_cache`` tokens, falling
    linearly to −1 at ``l_max``. ``|y|`` is the completion length in tokens. No interruptions."""

    params_model = schema.LengthPenaltyParams

    def penalty(self, lengths: Tensor) -> Tensor:
        """``R_length`` of Eq. 9 for completion lengths [N]."""
        p = self.params
        return torch.clamp((p.l_max - lengths.double()) / p.l_cache - 1.0, -1.0, 0.0)

    def shape_rewards(self, rewards: Tensor, lengths: Tensor, correct: Tensor) -> Tensor:
        values = rewards if rewards.is_floating_point() else rewards.float()
        bonus = torch.where(correct.bool(), self.penalty(lengths), torch.zeros((), dtype=torch.float64))
        return values + bonus.to(values.dtype)
