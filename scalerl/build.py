"""Build the run's parts from its config: task, model bundle, length control (engines build themselves:
``scalerl/engines/registry.py``). The only place that turns
names into objects for a run, so the trainer, the generator process and the evaluator agree."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scalerl.config import ModelConfig, RunConfig, TaskConfig
from scalerl.errors import UserError
from scalerl.models.registry import EXPORTS, MODELS, ModelBundle
from scalerl.tasks.base import Problem, Task
from scalerl.tasks.registry import TASKS

if TYPE_CHECKING:
    from scalerl.algo.length_control import LengthControl

# modules whose import registers entries; optional ones may be absent in a checkout
_TASK_MODULES = ("scalerl.tasks.arithmetic", "scalerl.tasks.strings", "scalerl.tasks.math", "scalerl.tasks.code")
_MODEL_MODULES = ("scalerl.models.tiny", "scalerl.models.hf")


def _import_all(modules: tuple[str, ...]) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise


def _make_task(name: str, params: dict[str, Any], where: str, **sizes: int) -> Task:
    _import_all(_TASK_MODULES)
    factory = TASKS.get(name, f"{where}.name")
    try:
        return factory(**sizes, **params)
    except TypeError as exc:
        raise UserError(f"{where}.params: {exc}") from None


def build_task(cfg: TaskConfig) -> Task:
    """The task named by ``cfg.name``, or with ``cfg.mix`` the mixture of the tasks it lists (each a domain)."""
    if cfg.mix is None:
        return _make_task(cfg.name, cfg.params, "task", seed=cfg.seed, n_train=cfg.n_train, n_val=cfg.n_val)
    from scalerl.tasks.mixture import MixtureTask

    return MixtureTask({
        e.name: _make_task(e.name, e.params, f"task.mix[{i}]", seed=cfg.seed,
                           n_train=e.n_train or cfg.n_train, n_val=e.n_val or cfg.n_val)
        for i, e in enumerate(cfg.mix)
    })


def build_curriculum(cfg: RunConfig, task: Task) -> Any:
    """The prompt sampler over ``task``'s training split (§3.2, Fig. 6b); for a mixture, one per domain, drawn by weight."""
    from scalerl import algo

    if cfg.task.mix is None:
        return algo.build_curriculum(cfg.algo.curriculum, [p.id for p in task.train_problems()], cfg.seed)
    from scalerl.algo.mixture import MixtureSampler

    by_domain = {d: [p.id for p in ps] for d, ps in task.train_by_domain.items()}  # type: ignore[attr-defined]
    return MixtureSampler(by_domain, {e.name: e.weight_at for e in cfg.task.mix},
                          lambda ids, seed: algo.build_curriculum(cfg.algo.curriculum, ids, seed), cfg.seed)


def build_downstream(cfg: RunConfig, task: Task) -> dict[str, tuple[Task, list[Problem]]]:
    """The downstream sets of ``eval.downstream``: name -> (its task, its problems), none of whose prompts is in
    ``task``'s training split (held out by construction, not by luck)."""
    trained = {p.prompt for p in task.train_problems()}
    sets = {}
    for i, d in enumerate(cfg.eval.downstream):
        where = f"eval.downstream[{i}]"
        other = _make_task(d.task, d.params, where, seed=d.seed, n_train=1, n_val=d.n)
        problems = [p for p in other.val_problems() if p.prompt not in trained][: d.n]
        if not problems:
            raise UserError(f"{where}: every problem of {d.name!r} is in the training split; give it other params")
        sets[d.name] = (other, problems)
    return sets


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


def load_exported_model(family: str, folder: Path, cfg: ModelConfig, seed: int) -> ModelBundle:
    """A folder ``scalerl export`` wrote, back as the policy of model family ``family`` (``EXPORTS``)."""
    _import_all(_MODEL_MODULES)
    return EXPORTS.get(family, "exported model family")(folder, cfg, seed)


def build_length_control(cfg: RunConfig, tokenizer: Any = None) -> "LengthControl":
    """The run's length control (§2, App. A.10). With the run's ``tokenizer``, also check that thinking budget + phrase +
    answer budget fit in ``max_new_tokens`` (a ``UserError`` naming the fix otherwise)."""
    from scalerl import algo

    length = algo.build_length_control(cfg.algo.length)
    if tokenizer is not None:
        try:
            length.check_fits(len(tokenizer.encode(length.phrase)) if length.phrase else 0)
        except ValueError as exc:
            raise UserError(f"algo.length.params.{exc}") from None
    return length
