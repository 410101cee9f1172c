"""The built-in generation engine: batched temperature-1 sampling with a preallocated KV cache.

For models with the :class:`scalerl.models.tiny.TinyLM` decode interface (``new_cache``, ``prefill``,
``decode_step``). The decode loop is the shared core (``scalerl.engines.decode``): per-token generator log-probs
from the FP32 LM head when on (§3.2, Fig. 5b), interruptions (§2, App. A.10), in-flight weight updates on the
kept KV cache (PipelineRL, §3.1). What this engine gives it is the model's preallocated cache: the prompts' cache
rows and a key mask sized for the whole completion, and rotary positions that count only real tokens.

All ``len(prompts) * n`` sequences advance together, one token each per step, so every live sequence has the same
number of completion tokens at any step. Finished sequences are dropped from the model's batch as they accumulate
(``COMPACT_AT``), so a batch whose mean completion is far below the longest one does not pay for the finished rows.
Thinking ends when the completion's tokens end with the tokenized ``think_end`` (the built-in tokenizer has it as
one token).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from scalerl.engines.decode import DecodeEngine
from scalerl.models.base import Tokenizer

if TYPE_CHECKING:
    from scalerl.algo.length_control import LengthControl

# finished sequences leave the model's batch (its KV cache rows copied out) once the live ones are at most this
# fraction of it: each decode step then costs what the live sequences need, for a copy every few steps
COMPACT_AT = 0.75


class _TinyKV:
    """A ``KVBatch`` over a TinyLM's preallocated cache (rows on dim 2): a key mask sized for the whole completion,
    each row's rotary position of its next token, and ``p_max``, the width of the left-padded prompts."""

    def __init__(
        self, model: Any, cache: torch.Tensor, key_mask: torch.Tensor, positions: torch.Tensor, p_max: int
    ) -> None:
        self.model, self.cache, self.key_mask, self.positions, self.p_max = model, cache, key_mask, positions, p_max

    def keep(self, kept: torch.Tensor) -> None:
        self.positions, self.key_mask = self.positions[kept], self.key_mask[kept]
        self.cache = self.cache.index_select(2, kept)

    def step(self, tokens: torch.Tensor, t: int) -> torch.Tensor:
        at = self.p_max + t
        self.key_mask[:, at] = True
        logits = self.model.decode_step(tokens, self.positions, self.cache, at, self.key_mask[:, : at + 1])
        self.positions = self.positions + 1
        return logits


class BuiltinEngine(DecodeEngine):
    """``BuiltinEngine(model, tokenizer, fp32_head=True)``; see the module docstring."""

    compact_at = COMPACT_AT

    def __init__(self, model: torch.nn.Module, tokenizer: Tokenizer, fp32_head: bool = True) -> None:
        super().__init__(model, tokenizer, fp32_head)
        self.stop_ids = frozenset({tokenizer.eos_id})

    def _device(self) -> torch.device:
        return self.model.get_output_embeddings().weight.device

    def _max_new(self, length: LengthControl | None, prompt_len: int) -> int:
        max_new = length.max_new_tokens if length is not None else self.model.cfg.max_seq_len - prompt_len
        self.model.check_length(prompt_len + max_new)
        return max_new

    def _prefill(self, ids: torch.Tensor, mask: torch.Tensor, n: int, max_new: int) -> tuple[torch.Tensor, _TinyKV]:
        p_max = ids.shape[1]
        key_mask = torch.cat([mask, mask.new_zeros(len(ids), max_new)], 1).repeat_interleave(n, 0)
        positions = mask.sum(-1).repeat_interleave(n, 0)  # rotary position of each sequence's next token
        cache = self.model.new_cache(len(ids), p_max + max_new)
        logits = self.model.prefill(ids, mask, cache).repeat_interleave(n, 0)
        return logits, _TinyKV(self.model, cache.repeat_interleave(n, dim=2), key_mask, positions, p_max)
