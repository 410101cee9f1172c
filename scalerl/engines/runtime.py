"""The length-control runtime (§2, App. A.10) that the batched engines drive, with their one padding helper and one sampler.

:class:`LengthRuntime` is the interruption state machine of a whole ``generate`` call as tensors over its
sequences (row ``i*n + j`` is sample ``j`` of prompt ``i``): thinking → [forced phrase → answer] → done. An
engine samples a token for every row it is still decoding and calls :meth:`LengthRuntime.step`, which returns
the tokens that actually go into the sequences (the phrase's where it is forced, with log-prob 0), records them
with their log-probs and policy versions, and marks rows finished (a stop token) or truncated (the answer budget
or the hard cap ``max_new_tokens``). Each row keeps its own length, so a row mask lets an engine advance any
subset of rows. The built-in engine and the Hugging Face engine both run on it, so they interrupt at the same
token for the same draws (tests/test_engine_runtime.py).

Thinking ends without an interruption when the completion's tokens end with the tokenized ``think_end`` marker
(the built-in tokenizer has it as one token), or, given a ``detect``, when the completion's text holds it (a BPE
tokenizer may spell it in several ways); the phrase starts at completion index ``budget``, so exactly ``budget``
thinking tokens precede it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

import numpy as np
import torch

from scalerl.engines.base import Sample
from scalerl.models.base import Tokenizer

if TYPE_CHECKING:
    from scalerl.algo.length_control import LengthControl

NEVER = 1 << 40  # a budget no sequence reaches


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


def draw(logits: torch.Tensor, rows: torch.Tensor, n_seq: int, generator: torch.Generator) -> torch.Tensor:
    """Tokens for the sequences ``rows`` (the model's batch holds these rows of ``logits``) with one uniform
    drawn for every one of the ``n_seq`` sequences, live or not, so that a sequence's draws depend neither on
    when finished rows leave the batch nor on the engine."""
    uniforms = torch.rand(n_seq, 1, generator=generator, device=logits.device)
    return sample_tokens(logits, generator, uniforms[rows])


class LengthRuntime:
    """See the module docstring. ``length``: the run's length control or None
    (no interruptions); budgets are drawn from ``np.random.default_rng(seed)``, one per row."""

    def __init__(
        self,
        length: LengthControl | None,
        tokenizer: Tokenizer,
        n_seq: int,
        seed: int,
        max_new: int,
        stop_ids: Iterable[int],
        device: Any = "cpu",
        detect: Any = None,
    ) -> None:
        encode = lambda text: list(tokenizer.encode(text)) if text else []  # noqa: E731
        self.phrase = encode(length.phrase) if length is not None else []
        self.budgets: list[int | None] = (
            length.think_budgets(n_seq, np.random.default_rng(seed)) if self.phrase else [None] * n_seq
        )
        self.active = any(b is not None for b in self.budgets)
        self.answer_budget = int(length.answer_budget) if length is not None and self.phrase else NEVER
        self.max_new, self.pad_id = max_new, tokenizer.pad_id
        self.think_end = encode(length.think_end) if length is not None and self.active else []
        self.device = device
        # detect(tokens) -> bool, with detect.may_close(last_token) (engines.sequence.ThinkEndDetector): the
        # marker recognised as text, for tokenizers that can spell it in several ways (BPE); None: as tokens
        self.detect = detect if self.active else None

        def tensor(values: Any, dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor(values, dtype=dtype, device=device)

        self._phrase_t = tensor(self.phrase + [tokenizer.pad_id], torch.long)
        self._end_t = tensor(self.think_end, torch.long)
        self.stop_ids = frozenset(stop_ids)
        self._stop_t = tensor(sorted(self.stop_ids), torch.long)
        self._budget = tensor([NEVER if b is None else b for b in self.budgets], torch.long)
        flags = lambda: torch.zeros(n_seq, dtype=torch.bool, device=device)  # noqa: E731
        self.thinking = ~flags()
        self.interrupted, self.finished, self.truncated, self.done, self.forcing = (flags() for _ in range(5))
        self.lengths = torch.zeros(n_seq, dtype=torch.long, device=device)
        self._force_at = torch.full((n_seq,), -1, dtype=torch.long, device=device)  # phrase index; -1: none
        self._answer_left = torch.full((n_seq,), NEVER, dtype=torch.long, device=device)
        self.tokens = torch.full((n_seq, max_new), tokenizer.pad_id, dtype=torch.long, device=device)
        self.logprobs = torch.zeros(n_seq, max_new, dtype=torch.float32, device=device)
        self.forced = torch.zeros(n_seq, max_new, dtype=torch.bool, device=device)
        self.versions = torch.full((n_seq, max_new), -1, dtype=torch.long, device=device)
        if max_new <= 0:  # no room for a token (a prompt that fills the context): each row is cut at the hard cap
            self.truncated |= True
            self.done |= True

    def step(
        self,
        sampled: torch.Tensor,
        logprobs: torch.Tensor,
        version: int | torch.Tensor,
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Advance the rows in ``rows`` (bool [N]; default every row not done) by one token each: ``sampled``
        [N] is what the sampler drew (ignored where the phrase is forced), ``logprobs`` [N] their generator
        log-probs, ``version`` the policy version they were sampled under (one, or one per row). Returns the tokens
        written [N] (pad where a row did not advance)."""
        live = ~self.done if rows is None else rows & ~self.done
        at = self.lengths
        if self.active:
            start = self.thinking & live & (self._budget <= at)
            self.interrupted |= start
            self.thinking &= ~start
            self._force_at = torch.where(start, 0, self._force_at)
        self.forcing = (self._force_at >= 0) & live
        tok = torch.where(self.forcing, self._phrase_t[self._force_at.clamp(min=0)], sampled)
        tok = torch.where(live, tok, self.pad_id)
        lp = torch.where(self.forcing | ~live, 0.0, logprobs.float())
        where = at.clamp(max=self.max_new - 1)[:, None]
        for buf, value in ((self.tokens, tok), (self.logprobs, lp), (self.forced, self.forcing)):
            buf.scatter_(1, where, torch.where(live, value, buf.gather(1, where).squeeze(1))[:, None])
        self.versions.scatter_(1, where, torch.where(live, version, self.versions.gather(1, where).squeeze(1))[:, None])
        self.lengths = at + live.long()
        if self.active:
            self._advance_interruptions(live, tok)
        ended = live & ~self.forcing & torch.isin(tok, self._stop_t)
        cut = live & ~ended & ((self.lengths >= self.max_new) | (self._answer_left <= 0))
        self.finished |= ended
        self.truncated |= cut
        self.done |= ended | cut
        return tok

    def _advance_interruptions(self, live: torch.Tensor, tok: torch.Tensor) -> None:
        k = len(self.think_end)
        if self.detect is not None:  # the sequence closed its thinking itself: its text holds the marker
            rows = (live & ~self.forcing & self.thinking).nonzero().flatten().tolist()
            last = tok.tolist() if rows else []
            for row in rows:
                if self.detect.may_close(last[row]) and self.detect(self.tokens[row, : self.lengths[row]].tolist()):
                    self.thinking[row] = False
        elif k:  # the sequence closed its thinking itself: its tokens end with the marker's
            idx = (self.lengths[:, None] - k + torch.arange(k, device=self.lengths.device)).clamp(min=0)
            closed = (self.lengths >= k) & (self.tokens.gather(1, idx) == self._end_t).all(-1)
            self.thinking &= ~(closed & live & ~self.forcing)
        self._answer_left -= (self.interrupted & ~self.forcing & live).long()
        self._force_at = torch.where(self.forcing, self._force_at + 1, self._force_at)
        phrase_done = self.forcing & (self._force_at == len(self.phrase))
        self._answer_left = torch.where(phrase_done, self.answer_budget, self._answer_left)
        self._force_at = torch.where(phrase_done, -1, self._force_at)

    def at_budget(self) -> torch.Tensor:
        """[N] rows whose next token is the phrase's (thinking has reached its budget), or mid-phrase."""
        return ~self.done & ((self.thinking & (self._budget <= self.lengths)) | (self._force_at >= 0))

    def sample_limit(self) -> torch.Tensor:
        """[N] how many tokens each row may sample before the runtime forces a token or ends it: up to the
        thinking budget while thinking, up to the answer budget after the phrase, never past ``max_new``."""
        limit = self.max_new - self.lengths
        limit = torch.where(self.thinking, torch.minimum(limit, self._budget - self.lengths), limit)
        return torch.minimum(limit, self._answer_left).clamp(min=0)

    def samples(self, prompts: list[list[int]], n: int, tokenizer: Tokenizer, hidden: Iterable[int]) -> list[list[Sample]]:
        """The rows as ``Sample`` lists grouped by prompt; text decoded without the ``hidden`` (stop, pad) tokens."""
        tok, lp, forced, ver = (t.tolist() for t in (self.tokens, self.logprobs, self.forced, self.versions))
        lens, fin, trunc, intr = (t.tolist() for t in (self.lengths, self.finished, self.truncated, self.interrupted))
        hidden = set(hidden)
        out: list[list[Sample]] = []
        for i, prompt in enumerate(prompts):
            group = []
            for row in range(i * n, (i + 1) * n):
                k = lens[row]
                group.append(Sample(
                    prompt_tokens=list(prompt),
                    tokens=tok[row][:k],
                    logprobs=lp[row][:k],
                    versions=ver[row][:k],
                    forced=forced[row][:k],
                    finished=fin[row],
                    truncated=trunc[row],
                    interrupted=intr[row],
                    think_budget=self.budgets[row],
                    text=tokenizer.decode([x for x in tok[row][:k] if x not in hidden]),
                ))
            out.append(group)
        return out
