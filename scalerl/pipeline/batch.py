"""Collation: the generator's samples and the grader's verdicts into the training batch (``scalerl.rollout``).

``collate`` turns the engine's ``Sample`` lists into a ``RolloutBatch``: rewards from the task's verdicts
(the run's ±1 or 0/1 values, shaped by the length control, §3.8), loss weights that are 1 on sampled
completion tokens and 0 on prompt, padding and forced interruption tokens, the generator's log-probs and the
policy version of every token. Token ``t``'s log-prob comes from the logits at ``t - 1``.
"""

from __future__ import annotations

from typing import Sequence

import torch

from scalerl.algo.length_control import LengthControl, forced_token_weights
from scalerl.engines.base import Sample
from scalerl.rollout import Request, RolloutBatch
from scalerl.tasks.base import Problem


def collate(
    request: Request,
    problems: Sequence[Problem],
    samples: Sequence[Sequence[Sample]],
    verdicts: Sequence[Sequence[bool]],
    *,
    pad_id: int,
    reward_correct: float,
    reward_incorrect: float,
    length_control: LengthControl,
    gen_seconds: float = 0.0,
) -> RolloutBatch:
    flat = [s for group in samples for s in group]
    flat_correct = [bool(c) for group in verdicts for c in group]
    group_index = [gi for gi, group in enumerate(samples) for _ in group]
    seq_len = max(len(s.prompt_tokens) + len(s.tokens) for s in flat)
    n = len(flat)
    ids_rows, lp_rows, version_rows, forced_rows, starts, ends = [], [], [], [], [], []
    for s in flat:  # one padded Python row per field, then one tensor each (no per-row tensor calls)
        p, c = len(s.prompt_tokens), len(s.tokens)
        pad = seq_len - p - c
        ids_rows.append([*s.prompt_tokens, *s.tokens, *[pad_id] * pad])
        lp_rows.append([*[0.0] * p, *s.logprobs, *[0.0] * pad])
        version_rows.append([*[-1] * p, *s.versions, *[-1] * pad])
        forced_rows.append([*[False] * p, *s.forced, *[False] * pad])
        starts.append(p)
        ends.append(p + c)
    position = torch.arange(seq_len)
    attention = position < torch.tensor(ends)[:, None]
    completion = attention & (position >= torch.tensor(starts)[:, None])
    input_ids = torch.tensor(ids_rows, dtype=torch.long).view(n, seq_len)
    loss_mask = forced_token_weights(torch.tensor(forced_rows, dtype=torch.bool).view(n, seq_len), completion)
    gen_logprobs = torch.tensor(lp_rows, dtype=torch.float32).view(n, seq_len)
    versions = torch.tensor(version_rows, dtype=torch.long).view(n, seq_len)
    correct = torch.tensor(flat_correct, dtype=torch.bool)
    lengths = torch.tensor([len(s.tokens) for s in flat], dtype=torch.long)
    rewards = torch.where(correct, torch.tensor(reward_correct), torch.tensor(reward_incorrect)).float()
    rewards = length_control.shape_rewards(rewards, lengths, correct)
    return RolloutBatch(
        index=request.index,
        problem_ids=[p.id for p in problems],
        group=torch.tensor(group_index, dtype=torch.long),
        input_ids=input_ids,
        attention_mask=attention,
        loss_mask=loss_mask,
        gen_logprobs=gen_logprobs,
        versions=versions,
        rewards=rewards,
        correct=correct,
        truncated=torch.tensor([s.truncated for s in flat], dtype=torch.bool),
        interrupted=torch.tensor([s.interrupted for s in flat], dtype=torch.bool),
        completion_lengths=lengths,
        gen_seconds=gen_seconds,
        texts=[s.text for s in flat],
    )
