"""Generation engine for any Hugging Face causal LM: a manual decode loop over the model's KV cache.

What design.md asks of an engine, on top of transformers' ``past_key_values``:

* temperature-1 sampling with per-token generator log-probs, from the FP32 LM head when on (§3.3);
* interruptions (§3.8): when a sequence's thinking reaches its drawn budget without ``</think>`` (recognised
  as *text*, since a BPE tokenizer splits it into several tokens), the length control's phrase is forced one
  token per decode step (``forced=True``, log-prob 0.0), then at most ``answer_budget`` more tokens follow;
* in-flight weight updates (PipelineRL, §3.1): the weight source is polled between decode steps; new weights
  are copied into the model's tensors in place, the KV cache computed by the old weights is kept, and every
  token records the policy version of the forward pass that produced its distribution.

Prompts are left-padded with an attention mask, and position ids count only real tokens, so a padded
sequence sees exactly the positions it has unpadded (the trainer's right-padded forward agrees). Each
distinct prompt is prefilled once and its cache repeated ``n`` times. Sequences that end leave the batch,
so the per-step cost follows the live sequences only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from scalerl.engines.base import InFlightWeights, Sample, WeightSource
from scalerl.models.base import Tokenizer
from scalerl.models.fp32_head import set_fp32_head, token_logprobs
from scalerl.models.hf import position_ids


@dataclass
class SequenceState:
    """One sequence's length-control state machine (§3.8): thinking → [forced phrase → answer] → done.

    ``step`` takes the token the sampler drew and returns what actually goes into the sequence. The phrase
    starts at completion index ``budget`` (so exactly ``budget`` thinking tokens precede it); thinking also
    ends when the completion's text contains ``think_end``, after which no interruption happens."""

    sample: Sample
    phrase: list[int]
    answer_budget: int | None
    max_new: int
    stop_ids: frozenset[int]
    thinking: bool = True
    pending: list[int] = field(default_factory=list)  # phrase tokens still to force
    answer_left: int | None = None  # tokens allowed after the phrase
    done: bool = False

    def step(self, sampled: int, logprob: float, version: int, closes_thinking: Callable[[list[int]], bool]) -> int:
        s = self.sample
        if self.thinking and s.think_budget is not None and len(s.tokens) >= s.think_budget:
            self.thinking = False
            s.interrupted = True
            self.pending = list(self.phrase)
        forced = bool(self.pending)
        token = self.pending.pop(0) if forced else sampled
        s.tokens.append(token)
        s.logprobs.append(0.0 if forced else logprob)
        s.versions.append(version)
        s.forced.append(forced)
        if forced:
            if not self.pending:
                self.answer_left = self.answer_budget
        else:
            if self.answer_left is not None:
                self.answer_left -= 1
            if self.thinking and s.think_budget is not None and closes_thinking(s.tokens):
                self.thinking = False
            if token in self.stop_ids:
                s.finished = self.done = True
                return token
        if len(s.tokens) >= self.max_new or (self.answer_left is not None and self.answer_left <= 0):
            s.truncated = self.done = True
        return token


class ThinkEndDetector:
    """Does a completion contain ``think_end`` as text? Only checked when the newest token's own text holds
    the marker's last character (the token that completes the marker must), so the full decode is rare."""

    def __init__(self, tokenizer: Tokenizer, think_end: str) -> None:
        self.tokenizer, self.think_end = tokenizer, think_end
        self._last_char: dict[int, bool] = {}

    def __call__(self, tokens: list[int]) -> bool:
        if not self.think_end:
            return False
        last = tokens[-1]
        if last not in self._last_char:
            self._last_char[last] = self.think_end[-1] in self.tokenizer.decode([last])
        return self._last_char[last] and self.think_end in self.tokenizer.decode(tokens)


def _hf_model(model: nn.Module) -> nn.Module:
    """The HF causal LM inside a policy wrapper (``scalerl.models.hf.HFPolicy.hf``), or the model itself."""
    return getattr(model, "hf", model)


class HFEngine(InFlightWeights):
    """``HFEngine(model, tokenizer, fp32_head=True)``: ``model`` is a HF causal LM or the policy wrapping one;
    ``load_weights`` takes state dicts with ``model``'s own keys (what the trainer publishes). The engine
    owns ``model``: it puts it in eval mode and sets its FP32 head on or off."""

    def __init__(self, model: nn.Module, tokenizer: Tokenizer, fp32_head: bool = True) -> None:
        self.model = set_fp32_head(model.eval(), fp32_head)
        self.lm = _hf_model(model)
        self.tokenizer = tokenizer
        self.version = 0
        self.last_stats: dict[str, float] = {}
        eos = getattr(getattr(self.lm, "generation_config", None), "eos_token_id", None)
        extra = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
        self.stop_ids = frozenset([tokenizer.eos_id, *extra])

    def _max_new(self, length: Any, prompt_len: int) -> int:
        if length is not None:
            return int(length.max_new_tokens)
        context = getattr(self.lm.config, "max_position_embeddings", None) or 2048
        return max(1, int(context) - prompt_len)

    def _states(self, prompts: list[list[int]], n: int, length: Any, seed: int, max_new: int) -> list[SequenceState]:
        phrase_text = getattr(length, "phrase", "") if length is not None else ""
        phrase = list(self.tokenizer.encode(phrase_text)) if phrase_text else []
        n_seq = len(prompts) * n
        rng = np.random.default_rng(seed)
        budgets = length.think_budgets(n_seq, rng) if phrase else [None] * n_seq
        answer_budget = getattr(length, "answer_budget", None) if phrase else None
        return [
            SequenceState(
                sample=Sample(prompt_tokens=list(prompts[row // n]), think_budget=budgets[row]),
                phrase=phrase,
                answer_budget=answer_budget,
                max_new=max_new,
                stop_ids=self.stop_ids,
            )
            for row in range(n_seq)
        ]

    def _forward(
        self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any
    ) -> tuple[torch.Tensor, Any]:
        """Logits of the last position [B, V] and the grown cache."""
        out = self.lm(
            input_ids=ids,
            attention_mask=mask.long(),
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return out.logits[:, -1], out.past_key_values

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
        states = self._states(prompts, n, length, seed, max_new)
        if ignore_eos:
            for st in states:
                st.stop_ids = frozenset()
        detect = ThinkEndDetector(self.tokenizer, getattr(length, "think_end", "") if length is not None else "")

        ids = torch.full((len(prompts), p_max), self.tokenizer.pad_id, dtype=torch.long)
        mask = torch.zeros(len(prompts), p_max, dtype=torch.bool)
        for i, p in enumerate(prompts):
            ids[i, p_max - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, p_max - len(p) :] = True
        ids, mask = ids.to(device), mask.to(device)
        positions = position_ids(mask)

        gen = torch.Generator(device=device).manual_seed(seed)
        self._poll(weight_source)
        logits, cache = self._forward(ids, mask, positions, None)
        # one prefill per distinct prompt, then n copies of its cache
        cache.batch_repeat_interleave(n)
        logits, mask = logits.repeat_interleave(n, 0), mask.repeat_interleave(n, 0)
        next_pos = positions[:, -1].repeat_interleave(n, 0) + 1
        live = list(range(len(states)))  # batch row -> sequence index
        steps = 0
        while live:
            steps += 1
            sampled = torch.multinomial(torch.softmax(logits.float(), -1), 1, generator=gen).squeeze(1)
            logprobs = token_logprobs(logits, sampled).float()
            fed = [
                states[s].step(tok, lp, self.version, detect)
                for s, tok, lp in zip(live, sampled.tolist(), logprobs.tolist())
            ]
            keep = [row for row, s in enumerate(live) if not states[s].done]
            if not keep:
                break
            if len(keep) < len(live):
                index = torch.tensor(keep, dtype=torch.long, device=device)
                cache.batch_select_indices(index)
                mask, next_pos = mask[index], next_pos[index]
                live = [live[row] for row in keep]
                fed = [fed[row] for row in keep]
            self._poll(weight_source)
            mask = torch.cat([mask, mask.new_ones(len(live), 1)], dim=1)
            tokens = torch.tensor(fed, dtype=torch.long, device=device)[:, None]
            logits, cache = self._forward(tokens, mask, next_pos[:, None], cache)
            next_pos = next_pos + 1

        self.last_stats = {"steps": float(steps), "tokens": float(sum(len(st.sample.tokens) for st in states))}
        hidden = self.stop_ids | {self.tokenizer.pad_id}
        for st in states:
            st.sample.text = self.tokenizer.decode([t for t in st.sample.tokens if t not in hidden])
        return [[states[i * n + j].sample for j in range(n)] for i in range(len(prompts))]
