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

import math
from typing import TYPE_CHECKING, Any

import torch

from scalerl.engines.decode import DecodeEngine
from scalerl.models.base import Tokenizer

if TYPE_CHECKING:
    from scalerl.algo.length_control import LengthControl

# finished sequences leave the model's batch (its KV cache rows copied out) once the live ones are at most this
# fraction of it: each decode step then costs what the live sequences need, for a copy every few steps
COMPACT_AT = 0.75


class CacheArena:
    """Two flat buffers that every KV cache of one engine lives in, reused from one ``generate`` call to the next.

    A cache of a few hundred sequences is ~100 MB: allocated fresh, it is above glibc's mmap threshold (32 MB at
    most), so every call and every compaction mapped new pages and faulted each one in, a large share of
    generation on a CPU. The cache of the sequences still decoding is in one buffer; a compaction copies the rows
    it keeps into the other, and the two swap. Only written slots are copied (the prompts' at the prefill, those
    decoded so far at a compaction): a decode step reads the slots up to its own, every one written in the same
    ``generate`` call, so what the rest of a buffer holds from an earlier call is never read. One ``generate`` at
    a time per engine, as the engine's weights already assume."""

    def __init__(self) -> None:
        self._buffers: list[torch.Tensor | None] = [None, None]

    def take(self, which: int, shape: list[int], like: torch.Tensor) -> torch.Tensor:
        """A contiguous tensor of ``shape`` in buffer ``which`` (0 or 1), with ``like``'s dtype and device; its
        values are whatever the buffer holds: a decode step reads only the slots written in its own call."""
        numel = math.prod(shape)
        buf = self._buffers[which]
        if buf is None or buf.numel() < numel or buf.dtype != like.dtype or buf.device != like.device:
            buf = self._buffers[which] = torch.zeros(numel, dtype=like.dtype, device=like.device)
        return buf[:numel].view(shape)


class _TinyKV:
    """A ``KVBatch`` over a TinyLM's preallocated cache (rows on dim 2) in buffer ``which`` of ``arena``: a key mask
    sized for the whole completion, each row's rotary position of its next token, and ``p_max``, the width of the
    left-padded prompts."""

    def __init__(
        self, model: Any, cache: torch.Tensor, key_mask: torch.Tensor, positions: torch.Tensor, p_max: int,
        arena: CacheArena, which: int,
    ) -> None:
        self.model, self.cache, self.key_mask, self.positions, self.p_max = model, cache, key_mask, positions, p_max
        self.arena, self.which = arena, which
        self.filled = p_max  # cache slots written so far; a decode step reads no slot beyond them

    def keep(self, kept: torch.Tensor) -> None:
        self.positions, self.key_mask = self.positions[kept], self.key_mask[kept]
        self.which = 1 - self.which
        shape = list(self.cache.shape)
        shape[2] = kept.numel()
        rows = self.arena.take(self.which, shape, self.cache)
        # only the written slots are copied: the rest of the buffer is never read before a decode step writes it
        torch.index_select(self.cache[..., : self.filled, :], 2, kept, out=rows[..., : self.filled, :])
        self.cache = rows

    def step(self, tokens: torch.Tensor, t: int) -> torch.Tensor:
        at = self.p_max + t
        self.key_mask[:, at] = True
        logits = self.model.decode_step(tokens, self.positions, self.cache, at, self.key_mask[:, : at + 1])
        self.positions = self.positions + 1
        self.filled = at + 1
        return logits


class BuiltinEngine(DecodeEngine):
    """``BuiltinEngine(model, tokenizer, fp32_head=True)``; see the module docstring."""

    compact_at = COMPACT_AT

    def __init__(self, model: torch.nn.Module, tokenizer: Tokenizer, fp32_head: bool = True) -> None:
        super().__init__(model, tokenizer, fp32_head)
        self.stop_ids = frozenset({tokenizer.eos_id})
        self.arena = CacheArena()

    def _device(self) -> torch.device:
        return self.model.get_output_embeddings().weight.device

    def _max_new(self, length: LengthControl | None, prompt_len: int) -> int:
        """``length``'s cap, or what the context leaves after the longest prompt (0 when it fills the context);
        a UserError when the prompts and the cap do not fit the context."""
        self.model.check_length(prompt_len)
        max_new = length.max_new_tokens if length is not None else self.model.cfg.max_seq_len - prompt_len
        self.model.check_length(prompt_len + max_new)
        return max_new

    def _prefill(self, ids: torch.Tensor, mask: torch.Tensor, n: int, max_new: int) -> tuple[torch.Tensor, _TinyKV]:
        p_max = ids.shape[1]
        key_mask = torch.cat([mask, mask.new_zeros(len(ids), max_new)], 1).repeat_interleave(n, 0)
        positions = mask.sum(-1).repeat_interleave(n, 0)  # rotary position of each sequence's next token
        cache = self.model.new_cache(len(ids), p_max)  # the prompts' slots only: decoding runs on the copies
        logits = self.model.prefill(ids, mask, cache).repeat_interleave(n, 0)
        shape = list(cache.shape)
        shape[2] *= n
        shape[4] = p_max + max_new
        copies = torch.arange(len(ids), device=cache.device).repeat_interleave(n)  # row i*n + j: prompt i
        rows = self.arena.take(0, shape, cache)
        torch.index_select(cache, 2, copies, out=rows[..., :p_max, :])
        return logits, _TinyKV(self.model, rows, key_mask, positions, p_max, self.arena, 0)
