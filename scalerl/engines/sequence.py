"""One completion's length-control state machine (§3.8), shared by the engines that decode sequence by sequence.

The Hugging Face engine feeds it one token per decode step; the vLLM engine feeds it whole segments that vLLM
sampled (stop-and-continue): ``sample_limit`` says how many tokens may be sampled before the state machine must
step in (a thinking budget reached, the answer budget or the hard cap), ``at_budget``/``force_phrase`` append the
interruption phrase between two segments. Either way every token goes through ``SequenceState.step``, so both
engines interrupt at the same token with the same phrase and the same answer budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from scalerl.engines.base import Sample
from scalerl.models.base import Tokenizer
from scalerl.models.hf import inner_hf_model

# what ``step`` is given for a token the state machine forces (the sampled value is ignored then)
NOT_SAMPLED = -1


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

    def at_budget(self) -> bool:
        """Thinking has reached its drawn budget without ``think_end``: the next token is the phrase's."""
        s = self.sample
        return self.thinking and s.think_budget is not None and len(s.tokens) >= s.think_budget

    def step(self, sampled: int, logprob: float, version: int, closes_thinking: Callable[[list[int]], bool]) -> int:
        s = self.sample
        if self.at_budget():
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

    def force_phrase(self, version: int) -> None:
        """At the budget: append the whole phrase as forced tokens (or as much as the hard cap allows)."""
        self.step(NOT_SAMPLED, 0.0, version, _never)
        while self.pending and not self.done:
            self.step(NOT_SAMPLED, 0.0, version, _never)

    def sample_limit(self) -> int:
        """How many tokens may be sampled from here before ``step`` would force a token or end the sequence:
        up to the thinking budget while thinking under one, else up to the answer budget after the phrase,
        and never past the hard cap ``max_new``."""
        s = self.sample
        limit = self.max_new - len(s.tokens)
        if self.thinking and s.think_budget is not None:
            limit = min(limit, s.think_budget - len(s.tokens))
        if self.answer_left is not None:
            limit = min(limit, self.answer_left)
        return limit


def _never(tokens: list[int]) -> bool:
    return False


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


def think_end_detector(tokenizer: Tokenizer, length: Any) -> ThinkEndDetector:
    """The detector for ``length``'s ``think_end`` marker (none without a length control)."""
    return ThinkEndDetector(tokenizer, getattr(length, "think_end", "") if length is not None else "")


def stop_token_ids(model: Any, tokenizer: Tokenizer) -> frozenset[int]:
    """The tokens that end a completion: the tokenizer's EOS and the model's ``generation_config`` EOS ids
    (a chat model often ends its turn with a token other than the tokenizer's EOS)."""
    eos = getattr(getattr(inner_hf_model(model), "generation_config", None), "eos_token_id", None)
    extra = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    return frozenset([tokenizer.eos_id, *extra])


def sequence_states(
    tokenizer: Tokenizer,
    prompts: list[list[int]],
    n: int,
    length: Any,
    seed: int,
    max_new: int,
    stop_ids: frozenset[int],
) -> list[SequenceState]:
    """One state per sample, row ``i*n + j`` for sample ``j`` of prompt ``i``; thinking budgets are drawn from
    ``length`` with ``seed`` (so every engine draws the same budgets for the same call)."""
    phrase_text = getattr(length, "phrase", "") if length is not None else ""
    phrase = list(tokenizer.encode(phrase_text)) if phrase_text else []
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
            stop_ids=stop_ids,
        )
        for row in range(n_seq)
    ]


def finish(states: list[SequenceState], tokenizer: Tokenizer, hidden: frozenset[int], n: int) -> list[list[Sample]]:
    """Decode each sample's text (without the ``hidden`` stop and pad tokens) and group the samples by prompt."""
    for st in states:
        st.sample.text = tokenizer.decode([t for t in st.sample.tokens if t not in hidden])
    return [[states[i * n + j].sample for j in range(n)] for i in range(len(states) // n)]
