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
the same number of completion tokens at any step; the per-sequence state machine is a handful of tensors.
Finished sequences are dropped from the model's batch as they accumulate (``COMPACT_AT``), so a batch whose
mean completion is far below the longest one does not pay for the finished rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from scalerl.engines.base import InFlightWeights, Sample, WeightSource
from scalerl.models.base import Tokenizer
from scalerl.models.fp32_head import set_fp32_head, token_logprobs

_NEVER = 1 << 40  # a budget no sequence reaches
# finished sequences leave the model's batch (its KV cache rows copied out) once the live ones are at most this
# fraction of it: each decode step then costs what the live sequences need, for a copy every few steps
COMPACT_AT = 0.75


def left_pad(prompts: list[list[int]], pad_id: int, repeat: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts as left-padded ids [len(prompts) * repeat, P] and their mask (True = real token); row
    ``i * repeat + j`` is copy ``j`` of prompt ``i``."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts) * repeat, width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    for i, p in enumerate(prompts):
        rows = slice(i * repeat, (i + 1) * repeat)
        ids[rows, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[rows, width - len(p) :] = True
    return ids, mask


def sample_tokens(logits: torch.Tensor, generator: torch.Generator, uniforms: torch.Tensor | None = None) -> torch.Tensor:
    """One token per row of ``logits`` [N, V], drawn at temperature 1 by inverting the CDF with one uniform
    per row (several times faster on CPU than ``torch.multinomial``, which draws V exponentials per row).
    ``uniforms`` [N, 1]: those uniforms, drawn by the caller (else from ``generator``)."""
    cdf = torch.softmax(logits.float(), -1).cumsum(-1)
    if uniforms is None:
        uniforms = torch.rand(cdf.shape[0], 1, generator=generator, device=cdf.device)
    u = uniforms * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp_(max=cdf.shape[1] - 1)


class _Interruptions:
    """Per-sequence interruption state (§3.8), as tensors over all sequences of one ``generate`` call.

    Thinking runs until the sequence writes ``think_end`` or reaches its budget; at the budget the phrase's
    tokens replace the sampled ones, one per step; then ``answer_budget`` sampled tokens are allowed."""

    def __init__(self, length: Any, tokenizer: Tokenizer, n_seq: int, rng: np.random.Generator, device) -> None:
        encode = lambda text: list(tokenizer.encode(text)) if text else []  # noqa: E731
        self.phrase = encode(getattr(length, "phrase", "")) if length is not None else []
        self.budgets: list[int | None] = (
            length.think_budgets(n_seq, rng) if self.phrase else [None] * n_seq
        )
        self.active = any(b is not None for b in self.budgets)
        self.think_end = encode(getattr(length, "think_end", "</think>"))
        self.answer_budget = int(getattr(length, "answer_budget", _NEVER))
        self._phrase_t = torch.tensor(self.phrase + [tokenizer.pad_id], dtype=torch.long, device=device)
        self._end_t = torch.tensor(self.think_end, dtype=torch.long, device=device)
        self._budget = torch.tensor([_NEVER if b is None else b for b in self.budgets], device=device)
        self.thinking = torch.ones(n_seq, dtype=torch.bool, device=device)
        self.interrupted = torch.zeros(n_seq, dtype=torch.bool, device=device)
        self.forcing = torch.zeros(n_seq, dtype=torch.bool, device=device)
        self._force_at = torch.full((n_seq,), -1, dtype=torch.long, device=device)  # phrase index; -1: none
        self._answer_left = torch.full((n_seq,), _NEVER, dtype=torch.long, device=device)

    def override(
        self, t: int, tok: torch.Tensor, lp: torch.Tensor, live: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The tokens and log-probs at completion position ``t``: forced phrase tokens (logprob 0) where due.
        ``live``: the sequences still generating (a finished one is never interrupted)."""
        if not self.active:
            return tok, lp
        start = self.thinking & live & (self._budget <= t)
        self.interrupted |= start
        self.thinking &= ~start
        self._force_at = torch.where(start, 0, self._force_at)
        self.forcing = self._force_at >= 0
        tok = torch.where(self.forcing, self._phrase_t[self._force_at.clamp(min=0)], tok)
        return tok, torch.where(self.forcing, 0.0, lp)

    def advance(self, t: int, out_tok: torch.Tensor) -> torch.Tensor | None:
        """Update the state after position ``t`` was written; returns where the answer budget is used up."""
        if not self.active:
            return None
        k = len(self.think_end)
        if 0 < k <= t + 1:  # the sequence closed its thinking itself
            self.thinking &= ~(out_tok[:, t + 1 - k : t + 1] == self._end_t).all(-1)
        self._answer_left -= (self.interrupted & ~self.forcing).long()
        self._force_at = torch.where(self.forcing, self._force_at + 1, self._force_at)
        phrase_done = self.forcing & (self._force_at == len(self.phrase))
        self._answer_left = torch.where(phrase_done, self.answer_budget, self._answer_left)
        self._force_at = torch.where(phrase_done, -1, self._force_at)
        return self._answer_left <= 0


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
        ids, prompt_mask = left_pad(prompts, self.tokenizer.pad_id, repeat=n)
        key_mask = torch.cat([prompt_mask, torch.zeros(n_seq, max_new, dtype=torch.bool)], 1).to(device)
        positions = prompt_mask.sum(-1).to(device)  # rotary position of each sequence's next token
        stops = _Interruptions(length, self.tokenizer, n_seq, np.random.default_rng(seed), device)

        def flags() -> torch.Tensor:
            return torch.zeros(n_seq, dtype=torch.bool, device=device)

        done, finished, truncated, never = flags(), flags(), flags(), flags()
        lengths = torch.zeros(n_seq, dtype=torch.long, device=device)
        out_tok = torch.full((n_seq, max_new), self.tokenizer.pad_id, dtype=torch.long, device=device)
        out_lp = torch.zeros(n_seq, max_new, dtype=torch.float32, device=device)
        out_forced = torch.zeros(n_seq, max_new, dtype=torch.bool, device=device)
        versions: list[int] = []

        gen = torch.Generator(device=device).manual_seed(seed)
        cache = model.new_cache(n_seq, p_max + max_new)
        self._poll(weight_source)
        logits = model.prefill(ids.to(device), key_mask[:, :p_max], cache)
        rows = torch.arange(n_seq, device=device)  # the sequence in each row of the model's batch
        for t in range(max_new):
            # a uniform for every sequence, live or not: the draws do not depend on when rows are dropped
            sampled = sample_tokens(logits, gen, torch.rand(n_seq, 1, generator=gen, device=device)[rows])
            tok = torch.full((n_seq,), self.tokenizer.pad_id, dtype=torch.long, device=device).index_copy_(
                0, rows, sampled)
            lp = torch.zeros(n_seq, dtype=torch.float32, device=device).index_copy_(
                0, rows, token_logprobs(logits, sampled).float())
            live = ~done
            tok, lp = stops.override(t, tok, lp, live)
            out_tok[:, t] = torch.where(live, tok, self.tokenizer.pad_id)
            out_lp[:, t] = torch.where(live, lp, 0.0)
            out_forced[:, t] = stops.forcing & live
            versions.append(self.version)
            lengths += live.long()

            exhausted = stops.advance(t, out_tok)
            ended = never if ignore_eos else live & ~stops.forcing & (tok == self.tokenizer.eos_id)
            cut = live & ~ended
            if t + 1 < max_new:  # before the hard cap only a used-up answer budget cuts a sequence
                cut &= never if exhausted is None else exhausted
            finished |= ended
            truncated |= cut
            done |= ended | cut
            keep = ~done[rows]
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

        self.last_stats = {"steps": float(t + 1), "tokens": float(lengths.sum())}
        return self._samples(prompts, n, out_tok, out_lp, out_forced, versions, lengths, finished, truncated,
                             stops.interrupted, stops.budgets)

    def _samples(
        self,
        prompts: list[list[int]],
        n: int,
        out_tok: torch.Tensor,
        out_lp: torch.Tensor,
        out_forced: torch.Tensor,
        versions: list[int],
        lengths: torch.Tensor,
        finished: torch.Tensor,
        truncated: torch.Tensor,
        interrupted: torch.Tensor,
        budgets: list[int | None],
    ) -> list[list[Sample]]:
        tok, lp, forced = out_tok.tolist(), out_lp.tolist(), out_forced.tolist()
        lens, fin, trunc, intr = lengths.tolist(), finished.tolist(), truncated.tolist(), interrupted.tolist()
        hidden = {self.tokenizer.eos_id, self.tokenizer.pad_id}
        result: list[list[Sample]] = []
        for i, prompt in enumerate(prompts):
            group = []
            for row in range(i * n, (i + 1) * n):
                k = lens[row]
                tokens = tok[row][:k]
                group.append(Sample(
                    prompt_tokens=list(prompt),
                    tokens=tokens,
                    logprobs=lp[row][:k],
                    versions=versions[:k],
                    forced=forced[row][:k],
                    finished=fin[row],
                    truncated=trunc[row],
                    interrupted=intr[row],
                    think_budget=budgets[row],
                    text=self.tokenizer.decode([x for x in tokens if x not in hidden]),
                ))
            result.append(group)
        return result
