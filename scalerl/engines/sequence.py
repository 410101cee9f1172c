"""What the engines for Hugging Face models (``engines/hf.py``, ``engines/vllm.py``) add to the length-control
runtime (§2, App. A.10, ``engines/runtime.py``): the ``think_end`` marker recognised as text (a BPE tokenizer spells it in
several ways), and the tokens that end a completion.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scalerl.models.base import Tokenizer
from scalerl.models.hf import inner_hf_model

if TYPE_CHECKING:
    from scalerl.algo.length_control import LengthControl


class ThinkEndDetector:
    """Does a completion contain ``think_end`` as text? Only checked when the newest token's own text holds
    the marker's last character (the token that completes the marker must), so the full decode is rare."""

    def __init__(self, tokenizer: Tokenizer, think_end: str) -> None:
        self.tokenizer, self.think_end = tokenizer, think_end
        self._last_char: dict[int, bool] = {}

    def may_close(self, last: int) -> bool:
        """Can a completion ending in token ``last`` contain the marker it did not before? (cached per id)"""
        if not self.think_end:
            return False
        if last not in self._last_char:
            self._last_char[last] = self.think_end[-1] in self.tokenizer.decode([last])
        return self._last_char[last]

    def __call__(self, tokens: list[int]) -> bool:
        return self.may_close(tokens[-1]) and self.think_end in self.tokenizer.decode(tokens)


def think_end_detector(tokenizer: Tokenizer, length: LengthControl | None) -> ThinkEndDetector:
    """The detector for ``length``'s ``think_end`` marker (none without a length control)."""
    return ThinkEndDetector(tokenizer, length.think_end if length is not None else "")


def stop_token_ids(model: Any, tokenizer: Tokenizer) -> frozenset[int]:
    """The tokens that end a completion: the tokenizer's EOS and the model's ``generation_config`` EOS ids
    (a chat model often ends its turn with a token other than the tokenizer's EOS)."""
    eos = getattr(getattr(inner_hf_model(model), "generation_config", None), "eos_token_id", None)
    extra = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    return frozenset([tokenizer.eos_id, *extra])
