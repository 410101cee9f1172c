"""Build the run's parts from its config: task, model bundle, length control (engines build themselves:
``scalerl/engines/registry.py``). The only place that turns
names into objects for a run, so the trainer, the generator process and the evaluator agree."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from scalerl.config import ModelConfig, RunConfig, TaskConfig
from scalerl.errors import UserError
from scalerl.models.registry import MODELS, ModelBundle
from scalerl.tasks.base import Task
from scalerl.tasks.registry import TASKS

# modules whose import registers entries; optional ones may be absent in a checkout
_TASK_MODULES = ("scalerl.tasks.arithmetic", "scalerl.tasks.math", "scalerl.tasks.code")
_MODEL_MODULES = ("scalerl.models.tiny", "scalerl.models.hf")


def _import_all(modules: tuple[str, ...]) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise


def build_task(cfg: TaskConfig) -> Task:
    _import_all(_TASK_MODULES)
    factory = TASKS.get(cfg.name, "task.name")
    try:
        return factory(seed=cfg.seed, n_train=cfg.n_train, n_val=cfg.n_val, **cfg.params)
    except TypeError as exc:
        raise UserError(f"task.params: {exc}") from None


def build_model(cfg: ModelConfig, seed: int) -> ModelBundle:
    _import_all(_MODEL_MODULES)
    if cfg.name in MODELS:
        return MODELS.get(cfg.name)(cfg, seed)
    if Path(cfg.name).is_dir():
        from scalerl.models.hf import load_hf_bundle

        return load_hf_bundle(cfg.name, cfg, seed)
    raise UserError(
        f"model.name: unknown model {cfg.name!r}; choose one of: {', '.join(MODELS.names())}, "
        "or give a local Hugging Face model folder"
    )


def build_length_control(cfg: RunConfig, tokenizer: Any = None):
    """The run's length control (§3.8). With the run's ``tokenizer``, also check that thinking budget + phrase +
    answer budget fit in ``max_new_tokens`` (a ``UserError`` naming the fix otherwise)."""
    from scalerl import algo

    length = algo.build_length_control(cfg.algo.length)
    if tokenizer is not None:
        try:
            length.check_fits(len(tokenizer.encode(length.phrase)) if length.phrase else 0)
        except ValueError as exc:
            raise UserError(f"algo.length.params.{exc}") from None
    return length
