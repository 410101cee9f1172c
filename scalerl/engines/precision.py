"""The generator's numeric precision (§3.2, Fig. 5b): inference engines generate in bf16, the trainer recomputes the
log-probs in its own precision, and the two disagree; that mismatch is what the FP32 LM head exists to reduce.

``engine.bf16_autocast: true`` runs a native engine's ``generate`` under bf16 autocast (the counterpart of the
trainer's ``optim.bf16_autocast``). Matmuls then run in bf16; with the FP32 head on, the output logits are still
computed in float32 (autocast is off inside the head), as in MiniMax-M1 and ScaleRL.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from scalerl.engines.base import Sample
from scalerl.models.fp32_head import token_logprobs


class Bf16Generation:
    """Wraps an engine so that ``generate`` runs under bf16 autocast; everything else is the engine's own."""

    def __init__(self, engine: Any) -> None:
        self.__dict__["inner"] = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.inner, name, value)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        device = next(self.inner.model.parameters()).device
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            return self.inner.generate(*args, **kwargs)


@torch.no_grad()
def logprob_mismatch(
    trainer_model: torch.nn.Module, groups: Sequence[Sequence[Sample]], rows_per_forward: int = 16
) -> torch.Tensor:
    """``|log ρ| = |log π_train − log π_gen|`` for every sampled (not forced) token of ``groups``, with the
    trainer's log-probs recomputed by ``trainer_model`` on the same weights: the numeric mismatch alone.

    The trainer's forward runs as in a training step (right-padded rows with an attention mask,
    ``rows_per_forward`` sequences at a time) on the model's own device; the result is on the CPU, in the
    order of the samples."""
    device = next(trainer_model.parameters()).device
    samples = [s for group in groups for s in group]
    out = []
    for start in range(0, len(samples), rows_per_forward):
        chunk = samples[start : start + rows_per_forward]
        seqs = [s.prompt_tokens + s.tokens for s in chunk]
        width = max(map(len, seqs))
        ids = torch.zeros(len(seqs), width, dtype=torch.long)
        mask = torch.zeros(len(seqs), width, dtype=torch.bool)
        for i, seq in enumerate(seqs):
            ids[i, : len(seq)], mask[i, : len(seq)] = torch.tensor(seq), True
        ids, mask = ids.to(device), mask.to(device)
        logp = token_logprobs(trainer_model(ids[:, :-1], mask[:, :-1]), ids[:, 1:]).float().cpu()
        for row, s in zip(logp, chunk):
            p = len(s.prompt_tokens)
            sampled = ~torch.tensor(s.forced, dtype=torch.bool)
            out.append((row[p - 1 : p - 1 + len(s.tokens)] - torch.tensor(s.logprobs))[sampled].abs())
    return torch.cat(out)
