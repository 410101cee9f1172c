"""The rollout types every layer above the algorithm reads: a generation request, a batch of rollouts, and a
batch seen as shared prompts plus completions (docs/architecture.md, "One sample's path").

A ``RolloutBatch`` holds one prompt group per problem, G rollouts each (the paper's batch of prompts x
generations, §2), padded into tensors: token ids, the loss weights (1 on sampled completion tokens, 0 on prompt,
padding and forced interruption tokens, §4 / App. A.10), the generator's log-probs π_gen and the policy version of
every token (the staleness anchor of PipelineRL-k, §3.1), rewards and verdicts. Token ``t``'s log-prob comes from
the logits at ``t - 1``. The generator builds it (``pipeline/generator.py``), the driver filters it
(``pipeline/prepare.py``) and the trainer learns from it (``trainer.py``); it imports nothing of theirs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch


@dataclass
class Request:
    """What the driver asks the generator for: batch ``index``, these problems, this sampling seed."""

    index: int
    problem_ids: list[str]
    seed: int


@dataclass
class PromptSplit:
    """Sequences of a batch as distinct prompts and their completions, for a forward that runs each prompt once
    (``TinyLM.forward_prefixed``): prompts [G, P] left-padded with their mask, completions [n, C] (right-padded
    with whatever follows; only each row's first ``completion_lengths`` are real), each row's prompt index [n]
    and prompt length [n] (where its completion starts in the batch row)."""

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completions: torch.Tensor
    prompt_index: torch.Tensor
    starts: torch.Tensor


@dataclass
class RolloutBatch:
    index: int  # the batch index b; the trainer takes step b on it
    problem_ids: list[str]  # P ids, group order
    group: torch.Tensor  # [N] long, problem index of each sequence
    input_ids: torch.Tensor  # [N, T] long, prompt + completion, right-padded
    attention_mask: torch.Tensor  # [N, T] bool
    loss_mask: torch.Tensor  # [N, T] float, 1 on sampled completion tokens
    gen_logprobs: torch.Tensor  # [N, T] float32, generator log-prob of the token at each position
    versions: torch.Tensor  # [N, T] long, policy version of each completion token, -1 elsewhere
    rewards: torch.Tensor  # [N] float
    correct: torch.Tensor  # [N] bool
    truncated: torch.Tensor  # [N] bool
    interrupted: torch.Tensor  # [N] bool
    completion_lengths: torch.Tensor  # [N] long (sampled + forced)
    gen_seconds: float = 0.0
    texts: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)  # generator-side phase -> seconds (timing/*_s)
    # row (as generated) -> why its grader reached no verdict ("<kind>: <detail>", ``tasks/grading.py``); the
    # row is graded incorrect
    ungraded: dict[int, str] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.group.numel())

    def oldest_version(self) -> torch.Tensor:
        """[N] the oldest policy version among each sequence's sampled tokens (its staleness anchor)."""
        big = torch.iinfo(torch.long).max
        v = torch.where(self.loss_mask > 0, self.versions, torch.full_like(self.versions, big))
        oldest = v.min(dim=1).values
        return torch.where(oldest == big, torch.full_like(oldest, -1), oldest)

    def prompt_lengths(self) -> torch.Tensor:
        """[N] each sequence's prompt length (where its completion starts)."""
        return self.attention_mask.sum(dim=1) - self.completion_lengths

    def group_max(self, values: torch.Tensor) -> torch.Tensor:
        """[max group index + 1] the largest of ``values`` [N] in each group (0 for an index with no rows)."""
        out = values.new_zeros(int(self.group.max()) + 1 if self.n else 0)
        return out.scatter_reduce_(0, self.group, values, "amax")

    def prompt_tokens(self) -> int:
        """Prompt tokens the generator processed: each group's prompt once (every engine prefills a distinct
        prompt once and shares its cache among the group's samples)."""
        return int(self.group_max(self.prompt_lengths()).sum())

    def to(self, device: torch.device) -> "RolloutBatch":
        """The batch with its tensors on ``device`` (the trainer's)."""
        moved = {
            f.name: getattr(self, f.name).to(device) if isinstance(getattr(self, f.name), torch.Tensor) else getattr(self, f.name)
            for f in fields(self)
        }
        return RolloutBatch(**moved)

    def version_span(self) -> torch.Tensor:
        """[N] newest minus oldest policy version among each sequence's sampled tokens: > 0 when new weights
        arrived while the sequence was being generated (an in-flight update, §3.1)."""
        sampled = self.loss_mask > 0
        small = torch.iinfo(torch.long).min
        newest = torch.where(sampled, self.versions, torch.full_like(self.versions, small)).max(dim=1).values
        oldest = self.oldest_version()
        return torch.where(oldest >= 0, newest - oldest, torch.zeros_like(oldest))

    def select(self, keep: torch.Tensor) -> "RolloutBatch":
        """The sequences where ``keep`` [N] is True (whole groups, when used with group filters)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == keep.shape[0]:
                value = value[keep]
            elif f.name == "texts" and value:
                value = [t for t, k in zip(value, keep.tolist()) if k]
            out[f.name] = value
        return RolloutBatch(**out)

    def length_buckets(self, rows_per_bucket: int = 32) -> list[torch.Tensor]:
        """Row indices [r] in groups of ``rows_per_bucket`` sequences of similar length (sorted by real
        length), so that a forward over each group trimmed to its own longest sequence carries little
        padding: the same logits for every real token as the whole right-padded batch, at about half the
        tokens when completions are much shorter than the cap."""
        order = torch.argsort(self.attention_mask.sum(dim=1), stable=True)
        return list(order.split(max(1, rows_per_bucket)))

    def group_buckets(self, rows_per_bucket: int = 32) -> list[torch.Tensor]:
        """Row indices [r] in buckets of whole groups (about ``rows_per_bucket`` rows each), groups in order of
        their longest sequence, so a shared-prefix forward over a bucket (:meth:`split_prompts`) trims to it."""
        longest = self.group_max(self.attention_mask.sum(dim=1))
        present = torch.unique(self.group)  # after the zero-variance filter, not every index is here
        size = max(1, rows_per_bucket // max(1, self.n // len(present)))
        ordered = present[torch.argsort(longest[present], stable=True)]
        return [torch.isin(self.group, chunk).nonzero().squeeze(1) for chunk in ordered.split(size)]

    def split_prompts(self, rows: torch.Tensor) -> "PromptSplit | None":
        """The sequences ``rows`` as their distinct prompts and their completions (see :class:`PromptSplit`), or
        None when some group's rows do not share one prompt."""
        ids, starts = self.input_ids[rows], self.prompt_lengths()[rows]
        groups, local = torch.unique(self.group[rows], return_inverse=True)
        dev = ids.device
        first = torch.zeros(len(groups), dtype=torch.long, device=dev).scatter_reduce_(
            0, local, torch.arange(len(rows), device=dev), "amin", include_self=False)
        p = int(starts.max())
        col = torch.arange(p, device=dev)
        prompt_of_row = ids[:, :p].masked_fill(col >= starts[:, None], -1)
        if not bool((prompt_of_row == prompt_of_row[first][local]).all()):
            return None
        # left-pad each group's prompt: column j holds prompt token j - (p - length)
        shift = (col - (p - starts[first])[:, None])
        prompt_mask = shift >= 0
        prompt_ids = ids[first].gather(1, shift.clamp(min=0)).masked_fill(~prompt_mask, 0)
        c = max(1, int(self.completion_lengths[rows].max()))  # one column even when every completion is empty
        cont = (starts[:, None] + torch.arange(c, device=dev)).clamp(max=ids.shape[1] - 1)
        return PromptSplit(prompt_ids, prompt_mask, ids.gather(1, cont), local, starts)

    def to_payload(self) -> dict[str, Any]:
        """A plain dict for inter-process queues."""
        return asdict(self)

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> "RolloutBatch":
        return cls(**payload)
