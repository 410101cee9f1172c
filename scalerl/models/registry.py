"""Model kinds by name (``model.name`` in the config): the built-in tiny transformer, Hugging Face models.

A factory takes the model config and a seed and returns a ``ModelBundle``: the policy module the trainer
optimises, its tokenizer, and its ``family``, by which the engines (``scalerl/engines/registry.py``) pick the
native engine; models never build engines. The trainer and the
pipeline only see the bundle, never the kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from scalerl.models.base import Tokenizer
from scalerl.registry import Registry


@dataclass(frozen=True)
class HFExport:
    """How this model becomes a Hugging Face checkpoint: for an external engine (vLLM, ``scalerl/engines/vllm.py``)
    and for ``scalerl export`` (``scalerl/export.py``)."""

    # save(model, folder): write config.json and the weights of ``model`` (the policy module) to ``folder``
    save: Callable[[torch.nn.Module, Path], None]
    # weights(state_dict with the policy's keys) -> the same tensors under Hugging Face checkpoint names
    weights: Callable[[Mapping[str, torch.Tensor]], dict[str, torch.Tensor]]
    # tokenizer(the bundle's tokenizer) -> a transformers tokenizer with the same ids (``save_pretrained``-able)
    tokenizer: Callable[[Tokenizer], Any]


@dataclass
class ModelBundle:
    # forward(input_ids [N, T] long, attention_mask [N, T] bool | None) -> logits [N, T, V]
    # (the FP32-head utility decides the logits' dtype; see scalerl/models/fp32_head.py)
    model: torch.nn.Module
    tokenizer: Tokenizer
    # which native engine generates with this model (``NATIVE_ENGINES`` in scalerl/engines/registry.py):
    # "builtin" (the KV-cache engine for the tiny transformer) | "hf" (transformers models)
    family: str
    # shape facts for compute accounting: n_params, n_layers, d_model, vocab_size
    spec: dict[str, int] = field(default_factory=dict)
    # task prompt text -> model prompt text (a chat template, a <think> opener); None: the text as it is
    format_prompt: Callable[[str], str] | None = None
    # the model as a Hugging Face checkpoint, for engines that load one (vLLM); None: not exportable
    hf_export: HFExport | None = None
    # True: trained weights loaded from a checkpoint (SmolLM2, a saved folder), which start RL as the paper's runs
    # do; False: weights built here (the tiny model, a folder without weights), which get the supervised warm-up
    # (``WarmupConfig.steps_for``)
    pretrained: bool = False


MODELS: Registry[Callable[..., ModelBundle]] = Registry("model")
# ModelBundle.family -> load(folder, model config, seed) -> ModelBundle: a folder ``scalerl export`` wrote, back as
# the policy it was exported from (same weights, same prompt format), so it evaluates as its checkpoint did
EXPORTS: Registry[Callable[..., ModelBundle]] = Registry("exported model family")


def encode_prompt(tokenizer: Tokenizer, text: str) -> list[int]:
    """Prompt tokens with the tokenizer's BOS in front (once)."""
    ids = list(tokenizer.encode(text))
    bos = tokenizer.bos_id
    if bos is not None and (not ids or ids[0] != bos):
        ids = [bos] + ids
    return ids


def prompt_encoder(bundle: ModelBundle) -> Callable[[str], list[int]]:
    """Task prompt text -> model prompt tokens, through the model's prompt format (chat template) if any."""
    fmt = bundle.format_prompt or (lambda text: text)
    return lambda text: encode_prompt(bundle.tokenizer, fmt(text))
