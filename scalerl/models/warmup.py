"""Supervised warm-up: a short teacher-forced phase on the task's demonstrations so that RL starts as from a
base model, with a low but non-zero pass rate (the paper's runs start from pretrained models; §2, §5).

Cached on disk: the key hashes everything that determines the result (the architecture and initial weights, the
tokenizer's vocabulary and special ids, the training demonstrations, the warm-up config and the seed;
``_cache_key``), so a second run with the same inputs loads the weights in well under a second. The cache directory is ``cache_dir``, else
``$SCALERL_CACHE``, else ``~/.cache/scalerl``; files are written atomically.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from scalerl.atomic import atomic_path
from scalerl.config import WarmupConfig
from scalerl.errors import UserError
from scalerl.models.base import Tokenizer
from scalerl.models.hf import inner_hf_model
from scalerl.models.registry import encode_prompt  # the one place prompts are encoded
from scalerl.timing import Stopwatch

_FORMAT = 2  # bump when the warm-up procedure changes, so old cache entries are not reused


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir)
    return Path(os.environ.get("SCALERL_CACHE") or Path.home() / ".cache" / "scalerl")


def _examples(
    task: Any, tokenizer: Tokenizer, encode: Callable[[str], list[int]] | None = None
) -> list[tuple[list[int], list[int]]]:
    """(prompt tokens as the generator sees them, completion tokens + EOS) for each training problem the task
    demonstrates (``task.demonstration(p)`` is None for a problem the base model is never shown). ``encode``: the
    run's prompt encoder (``models.registry.prompt_encoder``: a chat template, if the model has one); default the
    task's text with the tokenizer's BOS."""
    encode = encode or (lambda text: encode_prompt(tokenizer, text))
    shown = ((p, task.demonstration(p)) for p in task.train_problems())
    return [
        (encode(p.prompt), list(tokenizer.encode(demo)) + [tokenizer.eos_id])
        for p, demo in shown if demo is not None
    ]


# an HF config's entries that do not change what the network computes: where it was loaded from, the version that
# wrote it, and its dtype (the weights' dtype is keyed from the weights themselves)
_CONFIG_NOISE = ("_name_or_path", "transformers_version", "dtype", "torch_dtype")


def _architecture(model: torch.nn.Module) -> dict[str, Any]:
    """What the network computes beyond its weights: the heads a matrix is split into, the rotary base, the norm's
    epsilon, the activation (two networks with the same weights and another head count train differently). The
    built-in model's ``TinyConfig`` less its context length (the rotary tables of the positions a warm-up uses do not
    depend on it); a Hugging Face model's config."""
    cfg = getattr(model, "cfg", None)
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        arch = dataclasses.asdict(cfg)
        arch.pop("max_seq_len", None)
        return {"class": type(model).__name__, **arch}
    inner = inner_hf_model(model)
    config = getattr(inner, "config", None)
    if config is not None and hasattr(config, "to_json_string"):
        arch = json.loads(config.to_json_string(use_diff=False))
        return {"class": type(inner).__name__, **{k: v for k, v in arch.items() if k not in _CONFIG_NOISE}}
    return {"class": type(model).__name__}


def _cache_key(model: torch.nn.Module, tokenizer: Tokenizer, examples: list, cfg: WarmupConfig, seed: int) -> str:
    """Everything the warm-up's result depends on: the format (code) version, the seed, the resolved warm-up config,
    the network's architecture and initial weights, the tokenizer's special ids (padding marks the attention mask) and
    the demonstrations as token ids (the task, its params and splits, the tokenizer and the prompt format)."""
    h = hashlib.sha256()
    tok = {"vocab": tokenizer.vocab_size, "pad": tokenizer.pad_id, "eos": tokenizer.eos_id, "bos": tokenizer.bos_id}
    h.update(json.dumps({"format": _FORMAT, "seed": seed, "cfg": cfg.model_dump(exclude={"cache"}),
                         "arch": _architecture(model), "tokenizer": tok, "examples": examples},
                        sort_keys=True, default=str).encode())
    for name, tensor in model.state_dict().items():
        h.update(name.encode())
        h.update(str(tensor.dtype).encode())
        h.update(tensor.detach().cpu().float().numpy().tobytes())
    return h.hexdigest()[:32]


def _load_cached(path: Path, model: torch.nn.Module) -> dict[str, Any] | None:
    """The stats of the cache entry at ``path``, its weights loaded into ``model``; None (``model`` untouched, a
    warning on stderr) when the entry cannot be read or does not hold this model's weights (a truncated or damaged
    file): the warm-up then runs again and replaces it."""
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        state, stats = saved["state_dict"], dict(saved["stats"])
        own = model.state_dict()
        whole = set(state) == set(own) and all(
            isinstance(state[k], torch.Tensor) and state[k].shape == v.shape and state[k].dtype == v.dtype
            for k, v in own.items())
    except Exception as exc:  # noqa: BLE001  (a damaged file fails in many ways: zip, pickle, EOF, layout)
        whole, reason = False, f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    else:
        reason = "it does not hold this model's weights"
    if not whole:
        print(f"warning: the warm-up cache entry {path} cannot be used ({reason}); warming up again",
              file=sys.stderr, flush=True)
        return None
    with torch.no_grad():
        model.load_state_dict(state)
    return stats


def _batch(examples: list[tuple[list[int], list[int]]], pad_id: int) -> tuple[torch.Tensor, ...]:
    """Right-padded input ids [N, T], attention mask [N, T] and targets [N, T] (-100 except completions)."""
    width = max(len(p) + len(c) for p, c in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    targets = torch.full((len(examples), width), -100, dtype=torch.long)
    for i, (p, c) in enumerate(examples):
        seq = p + c
        ids[i, : len(seq)] = torch.tensor(seq)
        # the logits at position t predict token t + 1: completion tokens are predicted from len(p) - 1 on
        targets[i, len(p) - 1 : len(seq) - 1] = torch.tensor(c)
    return ids, ids != pad_id, targets


def warmup(
    model: torch.nn.Module,
    tokenizer: Tokenizer,
    task: Any,
    cfg: WarmupConfig,
    seed: int,
    cache_dir: str | os.PathLike[str] | None = None,
    encode: Callable[[str], list[int]] | None = None,
) -> dict[str, Any]:
    """Train ``model`` in place on ``task.demonstration(p)`` for the task's training problems.

    Teacher-forced next-token loss on the completion tokens (prompt tokens carry no loss), ``cfg.optimizer``
    (:func:`_optimizers`; short warm-up, flat, linear decay over the last ``cfg.decay`` of the steps) for
    ``cfg.steps`` steps of ``cfg.batch_size`` examples. Returns stats:
    ``cached`` (loaded from disk), ``steps``, ``loss_first``, ``loss_last``, ``seconds``, ``path``."""
    cfg = cfg.resolved(pretrained=False)  # steps left unset: a model built here (the runner resolves per bundle)
    if cfg.steps == 0:
        return {"cached": False, "steps": 0, "seconds": 0.0}
    watch = Stopwatch().start()
    examples = _examples(task, tokenizer, encode)
    path = cache_root(cache_dir) / "warmup" / f"{_cache_key(model, tokenizer, examples, cfg, seed)}.pt"
    if cfg.cache and path.is_file():
        stats = _load_cached(path, model)
        if stats is not None:
            return {**stats, "cached": True, "seconds": watch.stop(), "path": str(path)}

    stats = _train(model, tokenizer, examples, cfg, seed)
    stats["seconds"] = watch.stop()
    if cfg.cache:
        try:
            with atomic_path(path) as tmp:
                torch.save({"state_dict": model.state_dict(), "stats": stats}, tmp)
            stats["path"] = str(path)
        except OSError as exc:  # a read-only or full cache: the model keeps its warm-up, the next run trains again
            print(f"warning: the warm-up cache entry {path} could not be written ({exc}); the model keeps its "
                  "warm-up, and the next run with these inputs warms up again", file=sys.stderr, flush=True)
    return {**stats, "cached": False}


def _lr_factor(step: int, steps: int, decay: float) -> float:
    """Warm-up, stable, decay: linear rise over the first 5% of steps, flat, linear fall over the last ``decay``
    share of them."""
    rise, fall = max(1, steps // 20), max(1, round(steps * decay))
    return min(1.0, (step + 1) / rise, (steps - step) / fall)


# Newton-Schulz iterations per Muon step (torch's default 5): 3 left the testbed's warm-up skill where 5 left it
# (issue #31, docs/RESULTS.md) for 40% less orthogonalisation, which is ~15% of a warm-up step at 5
MUON_NS_STEPS = 3


def _optimizers(model: torch.nn.Module, cfg: WarmupConfig) -> list[torch.optim.Optimizer]:
    """AdamW on every parameter (``cfg.optimizer == "adamw"``), or Muon on the weight matrices inside the network
    and AdamW on the rest: the input embedding, the output head (tied or not), and every vector (norms, biases).
    Muon orthogonalises each matrix's momentum, which is meant for hidden layers only (Jordan et al., 2024)."""
    adamw = dict(lr=cfg.lr, weight_decay=0.0, betas=(0.9, 0.95))
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.optimizer == "adamw":
        return [torch.optim.AdamW(params, **adamw)]
    if not hasattr(torch.optim, "Muon"):
        raise UserError(f"warmup.optimizer muon needs torch.optim.Muon (torch 2.9 or later; this is torch "
                        f"{torch.__version__}): upgrade torch, or set warmup.optimizer=adamw")
    edges = {id(p) for m in (_input_embeddings(model), model.get_output_embeddings()) for p in m.parameters()}
    hidden = [p for p in params if p.ndim == 2 and id(p) not in edges]
    rest = [p for p in params if p.ndim != 2 or id(p) in edges]
    return [torch.optim.Muon(hidden, lr=cfg.muon_lr, weight_decay=0.0, ns_steps=MUON_NS_STEPS),
            torch.optim.AdamW(rest, **adamw)]


def _input_embeddings(model: torch.nn.Module) -> torch.nn.Module:
    """The token embedding: a Hugging Face model's ``get_input_embeddings()`` (inside scalerl's policy wrapper
    too), else the built-in model's ``embed``."""
    inner = inner_hf_model(model)
    return inner.get_input_embeddings() if hasattr(inner, "get_input_embeddings") else model.embed


def _train(
    model: torch.nn.Module, tokenizer: Tokenizer, examples: list, cfg: WarmupConfig, seed: int
) -> dict[str, Any]:
    device = next(model.parameters()).device
    rng = np.random.default_rng([seed, 0xA11])
    opts = _optimizers(model, cfg)
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: _lr_factor(s, cfg.steps, cfg.decay)) for o in opts]
    model.train()
    losses = []
    for _ in range(cfg.steps):
        pick = rng.choice(len(examples), size=min(cfg.batch_size, len(examples)), replace=False)
        ids, mask, targets = (x.to(device) for x in _batch([examples[i] for i in pick], tokenizer.pad_id))
        logits = model(ids, mask)
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-100)
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for opt, sched in zip(opts, scheds):
            opt.step()
            sched.step()
        losses.append(loss.item())
    model.eval()
    return {"steps": cfg.steps, "loss_first": losses[0], "loss_last": float(np.mean(losses[-10:]))}
