"""Generation engine for any Hugging Face causal LM: the shared decode core over the model's KV cache.

The decode loop is ``scalerl.engines.decode``'s: temperature-1 sampling with per-token generator log-probs from the
FP32 LM head when on (§3.2, Fig. 5b), interruptions (§2, App. A.10), in-flight weight updates that keep the KV
cache computed by the old weights (PipelineRL, §3.1). What this engine gives it is transformers' KV cache (the
``cache`` argument; ``past_key_values`` before transformers 5, and deprecated since, with a warning at every call:
``cache_argument`` picks the name), the stop tokens of the model's ``generation_config``, and ``</think>``
recognised as *text* (``engines/sequence.py``), since a BPE tokenizer splits it into several tokens.

Prompts are left-padded with an attention mask, and position ids count only real tokens, so a padded
sequence sees exactly the positions it has unpadded (the trainer's right-padded forward agrees). Each
distinct prompt is prefilled once and its cache repeated ``n`` times. Sequences that end leave the batch,
so the per-step cost follows the live sequences only.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from scalerl.engines.decode import DecodeEngine
from scalerl.engines.sequence import ThinkEndDetector, stop_token_ids, think_end_detector
from scalerl.models.base import Tokenizer
from scalerl.models.hf import inner_hf_model, position_ids

if TYPE_CHECKING:
    from scalerl.algo.length_control import LengthControl


def cache_argument(lm: nn.Module) -> str:
    """The name under which ``lm``'s forward takes and returns its KV cache: ``cache`` (transformers 5), or
    ``past_key_values`` where the forward has no ``cache`` parameter (older transformers)."""
    return "cache" if "cache" in inspect.signature(lm.forward).parameters else "past_key_values"


class HFEngine(DecodeEngine):
    """``HFEngine(model, tokenizer, fp32_head=True)``: ``model`` is a HF causal LM or the policy wrapping one;
    ``load_weights`` takes state dicts with ``model``'s own keys (what the trainer publishes). The engine
    owns ``model``: it puts it in eval mode and sets its FP32 head on or off."""

    def __init__(self, model: nn.Module, tokenizer: Tokenizer, fp32_head: bool = True) -> None:
        super().__init__(model, tokenizer, fp32_head)
        self.lm = inner_hf_model(model)
        self.stop_ids = stop_token_ids(model, tokenizer)
        self.cache_name = cache_argument(self.lm)

    def _device(self) -> torch.device:
        return next(self.lm.parameters()).device

    def _max_new(self, length: LengthControl | None, prompt_len: int) -> int:
        if length is not None:
            return int(length.max_new_tokens)
        context = getattr(self.lm.config, "max_position_embeddings", None) or 2048
        return max(1, int(context) - prompt_len)

    def _detector(self, length: LengthControl | None) -> ThinkEndDetector:
        return think_end_detector(self.tokenizer, length)

    def _forward(
        self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any
    ) -> tuple[torch.Tensor, Any]:
        """Logits of the last position [B, V] and the grown cache."""
        out = self.lm(
            input_ids=ids,
            attention_mask=mask.long(),
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{self.cache_name: cache},
        )
        return out.logits[:, -1], getattr(out, self.cache_name)

    def _prefill(self, ids: torch.Tensor, mask: torch.Tensor, n: int, max_new: int) -> tuple[torch.Tensor, _HFKV]:
        positions = position_ids(mask)
        logits, cache = self._forward(ids, mask, positions, None)
        cache.batch_repeat_interleave(n)  # one prefill per distinct prompt, then n copies of its cache
        next_pos = positions[:, -1].repeat_interleave(n, 0) + 1
        return logits.repeat_interleave(n, 0), _HFKV(self._forward, cache, mask.repeat_interleave(n, 0), next_pos)


class _HFKV:
    """A ``KVBatch`` over a transformers cache: the attention mask so far and each row's next position id."""

    def __init__(self, forward: Any, cache: Any, mask: torch.Tensor, next_pos: torch.Tensor) -> None:
        self.forward, self.cache, self.mask, self.next_pos = forward, cache, mask, next_pos

    def keep(self, kept: torch.Tensor) -> None:
        self.cache.batch_select_indices(kept)
        self.mask, self.next_pos = self.mask[kept], self.next_pos[kept]

    def step(self, tokens: torch.Tensor, t: int) -> torch.Tensor:
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(tokens), 1)], dim=1)
        logits, self.cache = self.forward(tokens[:, None], self.mask, self.next_pos[:, None], self.cache)
        self.next_pos = self.next_pos + 1
        return logits
