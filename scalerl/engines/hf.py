"""Generation engine for any Hugging Face causal LM: a manual decode loop over the model's KV cache.

What design.md asks of an engine, on top of transformers' KV cache (the ``cache`` argument; ``past_key_values``
before transformers 5, and deprecated since, with a warning at every call: ``cache_argument`` picks the name):

* temperature-1 sampling with per-token generator log-probs, from the FP32 LM head when on (§3.3);
* interruptions (§3.8), by the shared ``scalerl.engines.runtime.LengthRuntime``: when a sequence's thinking
  reaches its drawn budget without ``</think>`` (recognised as *text*, since a BPE tokenizer splits it into
  several tokens), the length control's phrase is forced one token per decode step (``forced=True``, log-prob
  0.0), then at most ``answer_budget`` more tokens follow;
* in-flight weight updates (PipelineRL, §3.1): the weight source is polled between decode steps; new weights
  are copied into the model's tensors in place, the KV cache computed by the old weights is kept, and every
  token records the policy version of the forward pass that produced its distribution.

Prompts are left-padded with an attention mask, and position ids count only real tokens, so a padded
sequence sees exactly the positions it has unpadded (the trainer's right-padded forward agrees). Each
distinct prompt is prefilled once and its cache repeated ``n`` times. Sequences that end leave the batch,
so the per-step cost follows the live sequences only.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from scalerl.engines.base import InFlightWeights, Sample, WeightSource
from scalerl.engines.runtime import LengthRuntime, draw, left_pad
from scalerl.engines.sequence import stop_token_ids, think_end_detector
from scalerl.models.base import Tokenizer
from scalerl.models.fp32_head import set_fp32_head, token_logprobs
from scalerl.models.hf import inner_hf_model, position_ids


def cache_argument(lm: nn.Module) -> str:
    """The name under which ``lm``'s forward takes and returns its KV cache: ``cache`` (transformers 5), or
    ``past_key_values`` where the forward has no ``cache`` parameter (older transformers)."""
    return "cache" if "cache" in inspect.signature(lm.forward).parameters else "past_key_values"


class HFEngine(InFlightWeights):
    """``HFEngine(model, tokenizer, fp32_head=True)``: ``model`` is a HF causal LM or the policy wrapping one;
    ``load_weights`` takes state dicts with ``model``'s own keys (what the trainer publishes). The engine
    owns ``model``: it puts it in eval mode and sets its FP32 head on or off."""

    def __init__(self, model: nn.Module, tokenizer: Tokenizer, fp32_head: bool = True) -> None:
        self.model = set_fp32_head(model.eval(), fp32_head)
        self.lm = inner_hf_model(model)
        self.tokenizer = tokenizer
        self.version = 0
        self.last_stats: dict[str, float] = {}
        self.stop_ids = stop_token_ids(model, tokenizer)
        self.cache_name = cache_argument(self.lm)

    def _max_new(self, length: Any, prompt_len: int) -> int:
        if length is not None:
            return int(length.max_new_tokens)
        context = getattr(self.lm.config, "max_position_embeddings", None) or 2048
        return max(1, int(context) - prompt_len)

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

    @torch.no_grad()
    def generate(
        self,
        prompts: list[list[int]],
        n: int,
        length: Any,
        seed: int,
        weight_source: WeightSource | None = None,
        ignore_eos: bool = False,
    ) -> list[list[Sample]]:
        """``n`` samples per prompt (outer list: prompts; row ``i*n + j`` is sample ``j`` of prompt ``i``).
        ``length``: a length-control object, or None (no interruptions, up to the model's context).
        ``ignore_eos`` (benchmarks only) keeps sampling past EOS."""
        device = next(self.lm.parameters()).device
        p_max = max(len(p) for p in prompts)
        max_new = self._max_new(length, p_max)
        n_seq = len(prompts) * n
        stops = () if ignore_eos else self.stop_ids
        detect = think_end_detector(self.tokenizer, length)
        run = LengthRuntime(length, self.tokenizer, n_seq, seed, max_new, stops, device, detect)

        ids, mask = left_pad(prompts, self.tokenizer.pad_id)
        ids, mask = ids.to(device), mask.to(device)
        positions = position_ids(mask)

        gen = torch.Generator(device=device).manual_seed(seed)
        self._poll(weight_source)
        logits, cache = self._forward(ids, mask, positions, None)
        # one prefill per distinct prompt, then n copies of its cache
        cache.batch_repeat_interleave(n)
        logits, mask = logits.repeat_interleave(n, 0), mask.repeat_interleave(n, 0)
        next_pos = positions[:, -1].repeat_interleave(n, 0) + 1
        rows = torch.arange(n_seq, device=device)  # the sequence in each row of the model's batch
        steps = 0
        while True:
            steps += 1
            sampled = draw(logits, rows, n_seq, gen)
            tok = torch.full((n_seq,), self.tokenizer.pad_id, dtype=torch.long, device=device).index_copy_(0, rows, sampled)
            lp = torch.zeros(n_seq, dtype=torch.float32, device=device).index_copy_(
                0, rows, token_logprobs(logits, sampled).float())
            tok = run.step(tok, lp, self.version)
            keep = ~run.done[rows]
            if not bool(keep.any()):
                break
            if not bool(keep.all()):
                kept = keep.nonzero().squeeze(1)
                cache.batch_select_indices(kept)
                rows, mask, next_pos = rows[kept], mask[kept], next_pos[kept]
            self._poll(weight_source)
            mask = torch.cat([mask, mask.new_ones(len(rows), 1)], dim=1)
            logits, cache = self._forward(tok[rows][:, None], mask, next_pos[:, None], cache)
            next_pos = next_pos + 1

        self.last_stats = {"steps": float(steps), "tokens": float(run.lengths.sum())}
        return run.samples(prompts, n, self.tokenizer, self.stop_ids | {self.tokenizer.pad_id})
