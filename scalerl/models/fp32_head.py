"""FP32 LM head (§3.2, Fig. 5b): compute the output logits, and hence the log-probs, in float32.

The generator and the trainer run different kernels, so their token probabilities differ slightly and the
importance-sampling ratio ``π_train / π_gen`` is perturbed. Following MiniMax-M1, ScaleRL computes the LM head
in FP32 on *both* sides (the paper: A rises from 0.52 to 0.61; ICLR A.19: FP32 on both sides gives the most
accurate IS ratios). The rest of the model may run in bf16 or under bf16 autocast.

``enable_fp32_head(model)`` works on any module whose ``get_output_embeddings()`` is an ``nn.Linear`` (Hugging
Face causal LMs, the built-in tiny model). It switches that one head's class to ``FP32Linear``, whose forward is
``F.linear(h.float(), W.float(), b.float())`` with autocast disabled. The head's parameters are untouched: a head
tied to the input embedding stays tied (same ``Parameter``, no copy, no untying), the state dict keeps its keys,
gradients flow back to the low-precision weight through the casts, and the model still pickles and deep-copies
(a class swap, unlike a patched bound method, survives both).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from scalerl.errors import UserError


class FP32Linear(nn.Linear):
    """An ``nn.Linear`` that always computes in float32 with autocast off (used only via ``enable_fp32_head``)."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=hidden.device.type, enabled=False):
            bias = None if self.bias is None else self.bias.float()
            return F.linear(hidden.float(), self.weight.float(), bias)


def _output_head(model: nn.Module) -> nn.Module | None:
    getter = getattr(model, "get_output_embeddings", None)
    return getter() if callable(getter) else None


def _head(model: nn.Module) -> nn.Linear:
    head = _output_head(model)
    if type(head) not in (nn.Linear, FP32Linear):
        raise UserError(
            f"algo.fp32_head: {type(model).__name__} has no plain linear output head (get_output_embeddings() "
            f"gave {type(head).__name__}); set algo.fp32_head=false"
        )
    return head


def enable_fp32_head(model: nn.Module) -> nn.Module:
    """Make ``model`` compute its output logits in float32 (autocast off for the head only). Idempotent.

    Returns the same model (modified in place) so that it can be used inline."""
    _head(model).__class__ = FP32Linear
    return model


def disable_fp32_head(model: nn.Module) -> nn.Module:
    """Undo ``enable_fp32_head``: the head computes in its parameters' (or autocast's) dtype again.

    A model whose head was never switched (whatever its kind) is left as it is."""
    head = _output_head(model)
    if isinstance(head, FP32Linear):
        head.__class__ = nn.Linear
    return model


def fp32_head_enabled(model: nn.Module) -> bool:
    return isinstance(_output_head(model), FP32Linear)


def set_fp32_head(model: nn.Module, enabled: bool) -> nn.Module:
    """``enable_fp32_head`` or ``disable_fp32_head`` from the config flag ``algo.fp32_head``."""
    return enable_fp32_head(model) if enabled else disable_fp32_head(model)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Log-probabilities of ``tokens`` [...] under ``logits`` [..., V], in the logits' own dtype.

    ``logits[..., i, :]`` must be the distribution ``tokens[..., i]`` was drawn from (shift before calling).
    No upcast happens here on purpose: with the FP32 head off and a bf16 model the log-probs really are
    bf16-rounded, which is the generator/trainer mismatch §3.2 (Fig. 5b) is about; with the head on they are float32.
    """
    if logits.shape[:-1] != tokens.shape:
        raise ValueError(f"logits {tuple(logits.shape)} do not match tokens {tuple(tokens.shape)}")
    picked = logits.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)
