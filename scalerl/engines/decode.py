"""The decode core of the engines that decode token by token (``engines/builtin.py``, ``engines/hf.py``).

:class:`DecodeEngine` runs a whole ``generate`` call: it left-pads the prompts, prefills each distinct prompt once
(its ``n`` samples share the cache rows), then at every decode step

* samples one token for every live sequence at temperature 1 (``runtime.draw``: one uniform per sequence, live or
  not, so a sequence's draws depend neither on the engine nor on when finished rows leave the batch) and records
  its generator log-prob, from the FP32 LM head when on (§3.2, Fig. 5b);
* hands the tokens to the length-control runtime (``runtime.LengthRuntime``), which forces the interruption phrase
  where thinking reached its drawn budget, counts the answer budget, and ends sequences on a stop token or the
  hard cap (§2, App. A.10);
* drops finished sequences from the model's batch once the live ones are at most ``compact_at`` of it;
* polls the weight source and copies newer weights into the model in place, keeping the KV cache computed by the
  old ones (in-flight updates, PipelineRL, §3.1, App. A.11): every later token records the new policy version;
* runs the model one step on its KV cache.

An engine gives only what differs: its device, its token budget, its stop tokens, how ``think_end`` is recognised,
and :meth:`DecodeEngine._prefill`, which returns the first logits and a :class:`KVBatch`: the model's KV cache
over the rows still decoding, which it can shrink (``keep``) and advance by one token (``step``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Protocol

import torch

from scalerl.engines.base import InFlightWeights, Sample, WeightSource
from scalerl.engines.runtime import LengthRuntime, draw, left_pad
from scalerl.models.base import Tokenizer
from scalerl.models.fp32_head import set_fp32_head, token_logprobs

if TYPE_CHECKING:
    from scalerl.algo.length_control import LengthControl
    from scalerl.engines.sequence import ThinkEndDetector


class KVBatch(Protocol):
    """A model's KV cache over the sequences still decoding (its rows), and the per-row state that goes with it
    (attention mask, positions)."""

    def keep(self, kept: torch.Tensor) -> None:
        """Keep only the rows ``kept`` (indices into the current rows, ascending), in that order."""

    def step(self, tokens: torch.Tensor, t: int) -> torch.Tensor:
        """Feed one token per row (``tokens`` [rows], the completion token at index ``t``), growing the cache;
        returns the next-token logits [rows, V]."""


class DecodeEngine(InFlightWeights, ABC):
    """The shared ``generate`` of the token-by-token engines (see the module docstring). Subclasses implement
    ``_device``, ``_max_new`` and ``_prefill``, may override ``_detector`` and ``compact_at``, and set
    ``stop_ids`` (the tokens that end a completion)."""

    # finished sequences leave the model's batch once the live ones are at most this fraction of it
    compact_at: float = 1.0
    stop_ids: frozenset[int]

    def __init__(self, model: torch.nn.Module, tokenizer: Tokenizer, fp32_head: bool = True) -> None:
        self.model = set_fp32_head(model.eval(), fp32_head)
        self.tokenizer = tokenizer
        self.version = 0
        self.last_stats: dict[str, float] = {}

    @abstractmethod
    def _device(self) -> torch.device:
        """Where the model's weights (and so the decode's tensors) live."""

    @abstractmethod
    def _max_new(self, length: LengthControl | None, prompt_len: int) -> int:
        """The hard cap on completion tokens for prompts of up to ``prompt_len`` tokens."""

    def _detector(self, length: LengthControl | None) -> ThinkEndDetector | None:
        """How ``think_end`` is recognised: None, as its tokens; a detector, as text."""
        return None

    @abstractmethod
    def _prefill(self, ids: torch.Tensor, mask: torch.Tensor, n: int, max_new: int) -> tuple[torch.Tensor, KVBatch]:
        """Prefill the left-padded prompts ``ids`` [P, L] (``mask``: True = real token) once each; returns the
        next-token logits [P * n, V] and the KV batch of their ``n`` copies (row ``i*n + j``: copy ``j`` of
        prompt ``i``), with room for ``max_new`` more tokens."""

    @torch.no_grad()
    def generate(
        self,
        prompts: list[list[int]],
        n: int,
        length: LengthControl | None,
        seed: int,
        weight_source: WeightSource | None = None,
        ignore_eos: bool = False,
    ) -> list[list[Sample]]:
        """``Engine.generate``, plus ``ignore_eos`` (benchmarks only: sample past EOS)."""
        if not prompts:
            return []
        device = self._device()
        max_new = self._max_new(length, max(len(p) for p in prompts))
        n_seq = len(prompts) * n
        stops = frozenset() if ignore_eos else self.stop_ids
        run = LengthRuntime(length, self.tokenizer, n_seq, seed, max_new, stops, device, self._detector(length))
        ids, mask = left_pad(prompts, self.tokenizer.pad_id)
        gen = torch.Generator(device=device).manual_seed(seed)
        self._poll(weight_source)
        logits, batch = self._prefill(ids.to(device), mask.to(device), n, max_new)
        steps = self._decode(run, logits, batch, gen, weight_source)
        self.last_stats = {"steps": float(steps), "tokens": float(run.lengths.sum())}
        return run.samples(prompts, n, self.tokenizer, self.stop_ids | {self.tokenizer.pad_id})

    def _decode(
        self,
        run: LengthRuntime,
        logits: torch.Tensor,
        batch: KVBatch,
        gen: torch.Generator,
        weight_source: WeightSource | None,
    ) -> int:
        """Decode until every sequence is done; returns the number of decode steps (0 when ``run.max_new`` is 0:
        the prompts fill the context, and the runtime has already cut every sequence)."""
        n_seq, pad_id = run.lengths.numel(), self.tokenizer.pad_id
        rows = torch.arange(n_seq, device=logits.device)  # the sequence in each row of the model's batch
        steps = 0
        for t in range(run.max_new):
            steps = t + 1
            sampled = draw(logits, rows, n_seq, gen)
            tok = torch.full((n_seq,), pad_id, dtype=torch.long, device=logits.device).index_copy_(0, rows, sampled)
            lp = torch.zeros(n_seq, dtype=torch.float32, device=logits.device).index_copy_(
                0, rows, token_logprobs(logits, sampled).float())
            tok = run.step(tok, lp, self.version)
            keep = ~run.done[rows]
            n_live = int(keep.sum())  # the one host sync per decode step
            if n_live == 0:
                break
            if n_live < rows.numel() and n_live <= self.compact_at * rows.numel():
                kept = keep.nonzero().squeeze(1)
                rows = rows[kept]
                batch.keep(kept)
            self._poll(weight_source)
            logits = batch.step(tok[rows], t)
        return steps
