"""The built-in generation engine: batched temperature-1 sampling with a preallocated KV cache.

For models with the :class:`scalerl.models.tiny.TinyLM` decode interface (``new_cache``, ``prefill``,
``decode_step``). It implements what design.md asks of an engine:

* per-token generator log-probs from the FP32 LM head when on (§3.3);
* interruptions (§3.8): a sequence whose thinking reaches its drawn budget gets the length control's phrase
  forced, one token per decode step (logprob 0, ``forced=True``), then may write ``answer_budget`` more tokens;
* in-flight weight updates (PipelineRL, §3.1): a weight source is polled between decode steps; new weights
  are copied into the model in place and generation continues on the same KV cache, every later token
  recording the new policy version.

All ``len(prompts) * n`` sequences advance together, one token each per step, so every live sequence has
the same number of completion tokens at any step; the interruption state machine is the shared
``scalerl.engines.runtime.LengthRuntime``, a handful of tensors.
Finished sequences are dropped from the model's batch as they accumulate (``COMPACT_AT``), so a batch whose
mean completion is far below the longest one does not pay for the finished rows.
"""

from __future__ import annotations

from typing import Any

import torch

from scalerl.engines.base import InFlightWeights, Sample, WeightSource
from scalerl.engines.runtime import LengthRuntime, draw, left_pad
from scalerl.models.base import Tokenizer
from scalerl.models.fp32_head import set_fp32_head, token_logprobs

# finished sequences leave the model's batch (its KV cache rows copied out) once the live ones are at most this
# fraction of it: each decode step then costs what the live sequences need, for a copy every few steps
COMPACT_AT = 0.75


class BuiltinEngine(InFlightWeights):
    """``BuiltinEngine(model, tokenizer, fp32_head=True)``; see the module docstring."""

    def __init__(self, model: torch.nn.Module, tokenizer: Tokenizer, fp32_head: bool = True) -> None:
        self.model = set_fp32_head(model.eval(), fp32_head)
        self.tokenizer = tokenizer
        self.version = 0
        self.last_stats: dict[str, float] = {}

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
        """``n`` samples per prompt (outer list: prompts). ``length``: a length-control object (or None: no
        interruptions, up to the model's context). ``ignore_eos`` (benchmarks only) keeps sampling past EOS."""
        if not prompts:
            return []
        model = self.model
        device = model.get_output_embeddings().weight.device
        n_seq, p_max = len(prompts) * n, max(len(p) for p in prompts)
        max_new = length.max_new_tokens if length is not None else model.cfg.max_seq_len - p_max
        model.check_length(p_max + max_new)
        ids, prompt_mask = left_pad(prompts, self.tokenizer.pad_id)
        ids, prompt_mask = ids.to(device), prompt_mask.to(device)
        key_mask = torch.cat([prompt_mask, prompt_mask.new_zeros(len(prompts), max_new)], 1).repeat_interleave(n, 0)
        positions = prompt_mask.sum(-1).repeat_interleave(n, 0)  # rotary position of each sequence's next token
        stops = () if ignore_eos else (self.tokenizer.eos_id,)
        run = LengthRuntime(length, self.tokenizer, n_seq, seed, max_new, stops, device)

        gen = torch.Generator(device=device).manual_seed(seed)
        self._poll(weight_source)
        # one prefill per distinct prompt, then n copies of its cache rows (the prompt's n samples share it)
        cache = model.new_cache(len(prompts), p_max + max_new)
        logits = model.prefill(ids, prompt_mask, cache).repeat_interleave(n, 0)
        cache = cache.repeat_interleave(n, dim=2)
        rows = torch.arange(n_seq, device=device)  # the sequence in each row of the model's batch
        for t in range(max_new):
            sampled = draw(logits, rows, n_seq, gen)
            tok = torch.full((n_seq,), self.tokenizer.pad_id, dtype=torch.long, device=device).index_copy_(
                0, rows, sampled)
            lp = torch.zeros(n_seq, dtype=torch.float32, device=device).index_copy_(
                0, rows, token_logprobs(logits, sampled).float())
            tok = run.step(tok, lp, self.version)
            keep = ~run.done[rows]
            n_live = int(keep.sum())  # the one host sync per decode step
            if n_live == 0:
                break
            if n_live <= COMPACT_AT * rows.numel():  # drop finished sequences from the model's batch
                kept = keep.nonzero().squeeze(1)
                rows, positions, key_mask = rows[kept], positions[kept], key_mask[kept]
                cache = cache.index_select(2, kept)

            self._poll(weight_source)
            key_mask[:, p_max + t] = True
            logits = model.decode_step(tok[rows], positions, cache, p_max + t, key_mask[:, : p_max + t + 1])
            positions = positions + 1

        self.last_stats = {"steps": float(t + 1), "tokens": float(run.lengths.sum())}
        return run.samples(prompts, n, self.tokenizer, (self.tokenizer.eos_id, self.tokenizer.pad_id))
