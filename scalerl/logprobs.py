"""The trainer's forward: log-probs of the taken tokens under π_train (the numerator of Eq. 2's importance
ratio, computed with the FP32 LM head when it is on, §3.2 / App. A.19) and the policy entropy (App. A.12), over a
``RolloutBatch``.

The forward runs over buckets of the batch, each trimmed to its longest sequence (right padding never changes a
causal model's real tokens), and the pieces go back to the batch's row order and width: the same values and
gradients as one forward over the padded batch, on far fewer tokens. A model with a shared-prefix forward
(``forward_prefixed``, the built-in one) gets buckets of whole groups and runs each group's prompt once for its G
samples (they share it); other models get buckets of rows of similar length and the plain forward.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import nn

from scalerl.models.fp32_head import token_logprobs
from scalerl.rollout import RolloutBatch

# sequences per forward: buckets of similar length, each trimmed to its own longest sequence
ROWS_PER_BUCKET = 32


def policy_logprobs(
    model: nn.Module, b: RolloutBatch, *, bf16: bool, one_forward: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log-probs of the taken tokens with gradient, entropy without)``, both [N, T-1]: column ``t`` is token
    ``t + 1`` predicted at ``t``. ``bf16``: under bf16 autocast (the head stays FP32 when switched). With
    ``one_forward`` the whole batch is one plain forward (over several ranks every rank must run the same number
    of forwards, since FSDP gathers weights in each)."""
    autocast = torch.autocast(device_type=b.input_ids.device.type, dtype=torch.bfloat16) if bf16 else nullcontext()
    width = b.input_ids.shape[1]
    lengths = b.attention_mask.sum(dim=1)
    prefixed = None if one_forward else getattr(model, "forward_prefixed", None)
    buckets = b.group_buckets(ROWS_PER_BUCKET) if prefixed else []
    splits = [b.split_prompts(rows) for rows in buckets]
    if not splits or any(sp is None for sp in splits):
        buckets = b.length_buckets(b.n if one_forward else ROWS_PER_BUCKET)
        splits = [None] * len(buckets)
    logp_parts, entropy_parts, order = [], [], []
    for rows, sp in zip(buckets, splits):
        with autocast:
            if sp is None:
                w = min(width, max(2, int(lengths[rows].max())))
                targets = b.input_ids[rows, 1:w]
                logits = model(b.input_ids[rows, : w - 1], b.attention_mask[rows, : w - 1])
            else:
                last, cont = prefixed(sp.prompt_ids, sp.prompt_mask, sp.completions, sp.prompt_index)
                # completion token j is predicted at the prompt's last token (j = 0) or at completion j - 1
                targets, logits = sp.completions, torch.cat((last[sp.prompt_index, None], cont[:, :-1]), dim=1)
        logp, ent = token_logprobs(logits, targets).float(), token_entropy(logits.detach())
        if sp is None:
            logp_parts.append(F.pad(logp, (0, width - 1 - logp.shape[1])))
            entropy_parts.append(F.pad(ent, (0, width - 1 - ent.shape[1])))
        else:  # back to the batch's layout: completion token j of a row sits at column start + j - 1
            logp_parts.append(_to_rows(logp, sp.starts, b.completion_lengths[rows], width - 1))
            entropy_parts.append(_to_rows(ent, sp.starts, b.completion_lengths[rows], width - 1))
        order.append(rows)
    inverse = torch.argsort(torch.cat(order))
    return torch.cat(logp_parts)[inverse], torch.cat(entropy_parts)[inverse]


def _to_rows(values: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor, width: int) -> torch.Tensor:
    """values [n, C] of completion tokens (token j of row i at [i, j], real for j < lengths[i]) placed at the
    batch layout's columns [n, width]: token j of a completion starting at ``starts[i]`` is predicted at column
    starts[i] + j - 1; every other column is 0."""
    j = torch.arange(values.shape[1], device=values.device)
    real = j < lengths[:, None]
    cols = (starts[:, None] - 1 + j).clamp(0, width - 1)
    return values.new_zeros(values.shape[0], width).scatter_add(1, cols, torch.where(real, values, 0.0))


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Policy entropy [N, T] at every position (the paper tracks it, App. A.12; not a predictor)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean of ``values`` [N, T] weighted by ``mask`` over the trained token positions."""
    return float((values * mask).sum() / mask.sum().clamp_min(1.0))
