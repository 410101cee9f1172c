"""What a user takes away from a run: its config, its checkpoints by step, and the trained policy at a step,
whether it sits in a run directory (``checkpoints/step_*.pt``) or in a folder ``scalerl export`` wrote.

A *source* is either:

* a run directory: ``config.yaml`` (the resolved config) and ``checkpoints/`` (the last ``runlog.KEEP`` steps);
* an exported folder (``scalerl/export.py``): a Hugging Face model folder with ``scalerl_export.json`` (the run's
  resolved config, the step, the model family), loaded back as the same policy, so that it evaluates exactly as
  the checkpoint it came from;
* any other Hugging Face model folder (``config.json``): loaded as ``model.name: <folder>`` would be for
  training, over the ``scalerl`` preset.

Loading a policy builds the model from the run's ``model`` config and puts the checkpoint's weights in it: the
warm-up and the FP32 head are not needed (the weights are after the warm-up; the head is a way of computing).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalerl.config import RunConfig, build_config, config_from_run_dir, load_config
from scalerl.errors import UserError
from scalerl.runlog import CKPT_DIR, checkpoint_files, read_checkpoint

EXPORT_INFO = "scalerl_export.json"  # what an exported folder came from: {"run", "step", "family", "config"}


@dataclass(frozen=True)
class Source:
    """Where policies come from: a run directory (``steps``: its checkpoints) or a model folder (one policy,
    ``steps`` holding the step it was exported at, 0 for a folder scalerl did not write)."""

    path: Path
    cfg: RunConfig
    kind: str  # "run" | "export" | "folder"
    steps: tuple[int, ...]
    family: str | None = None  # an export's model family, which says how to load it back (``models.registry``)
    run_dir: Path | None = None  # the run whose metrics.jsonl holds what was logged at these steps, if at hand


def open_source(path: str | Path, what: str = "RUN_OR_DIR") -> Source:
    """A run directory or a model folder, or a UserError naming what ``path`` is instead."""
    p = Path(path)
    if not p.is_dir():
        raise UserError(f"{what} {p}: {'not a directory' if p.exists() else 'no such directory'}; give a run "
                        "directory (with config.yaml) or a model folder (with config.json)")
    if (p / "config.yaml").is_file():
        steps = tuple(checkpoint_files(p))
        return Source(p, config_from_run_dir(p), "run", steps, run_dir=p)
    if (p / EXPORT_INFO).is_file():
        info = _export_info(p)
        cfg = build_config(info["config"], str(p / EXPORT_INFO))
        run = Path(str(info.get("run", "")))
        return Source(p, cfg, "export", (int(info["step"]),), family=str(info["family"]),
                      run_dir=run if (run / "metrics.jsonl").is_file() else None)
    if (p / "config.json").is_file():
        return Source(p, load_config("scalerl", None, [f"model.name={json.dumps(str(p.resolve()))}"]), "folder", (0,))
    raise UserError(f"{what} {p} is neither a run directory (no config.yaml) nor a model folder (no config.json)")


def _export_info(folder: Path) -> dict[str, Any]:
    try:
        info = json.loads((folder / EXPORT_INFO).read_text(encoding="utf-8"))
        if not isinstance(info, dict) or not {"step", "family", "config"} <= set(info):
            raise ValueError("not an object with step, family and config")
        return info
    except (OSError, ValueError) as exc:
        raise UserError(f"{folder / EXPORT_INFO} is not an export description ({exc}); export the run again") from None


def run_steps(source: Source, step: str | None = None, every: bool = False) -> list[int]:
    """The steps asked for: ``step`` (``"40"`` or ``"20,40"``), every checkpoint with ``every``, else the latest.
    A UserError for a run without checkpoints or a step that has none."""
    if source.kind == "run" and not source.steps:
        raise UserError(f"{source.path} has no checkpoints (nothing in {source.path / CKPT_DIR}); train it first, "
                        "or wait for its first checkpoint (every checkpoint_every steps)")
    if every:
        return list(source.steps)
    if step is None:
        return [source.steps[-1]]
    try:
        wanted = list(dict.fromkeys(int(s) for s in step.split(",") if s.strip()))  # 2,2 evaluates step 2 once
    except ValueError:
        raise UserError(f"--step {step!r}: give a step number or numbers separated by commas (e.g. 20,40)") from None
    missing = [s for s in wanted if s not in source.steps]
    if missing or not wanted:
        have = ", ".join(map(str, source.steps))
        where = "checkpoints at steps" if source.kind == "run" else "the policy of step"
        raise UserError(f"--step {step}: {source.path} has no step {', '.join(map(str, missing))}; it holds {where} "
                        f"{have} (a run keeps its last checkpoints only)")
    return wanted


def load_policy(source: Source, step: int) -> Any:
    """The policy of ``source`` at ``step`` as a ``ModelBundle`` (scalerl.models.registry), in eval mode."""
    from scalerl.build import build_model, load_exported_model

    if source.kind == "run":
        payload = read_checkpoint(checkpoint_files(source.path)[step])
        bundle = build_model(source.cfg.model, source.cfg.base_seed)
        try:
            bundle.model.load_state_dict(payload["trainer"]["model"])
        except (KeyError, RuntimeError) as exc:
            raise UserError(f"the checkpoint of step {step} in {source.path} does not fit the run's model "
                            f"({str(exc).splitlines()[0]})") from None
    elif source.kind == "export":
        bundle = load_exported_model(source.family or "", source.path, source.cfg.model, source.cfg.base_seed)
    else:
        bundle = build_model(source.cfg.model, source.cfg.base_seed)
    bundle.model.eval()
    return bundle


def eval_config(cfg: RunConfig, task: str | None = None, n_samples: int | None = None) -> RunConfig:
    """``cfg`` with ``--task`` (another task's validation split, its default params, the run's task seed and
    sizes) and ``--n-samples`` (mean@K) applied; the run's own evaluation when neither is given."""
    data = cfg.model_dump(mode="json")
    if task is not None and (task != cfg.task.name or cfg.task.mix):
        data["task"] = {"name": task, "seed": cfg.task.seed, "n_train": cfg.task.n_train, "n_val": cfg.task.n_val}
    if n_samples is not None:
        data["eval"]["n_samples"] = n_samples
    return build_config(data, "the run's config + --task/--n-samples")


def evaluate_steps(source: Source, steps: list[int], cfg: RunConfig | None = None) -> list[dict[str, Any]]:
    """Evaluate ``source``'s policy at each of ``steps`` as the run evaluated during training (the same
    problems, engine, length control, threads and seed, ``scalerl.evaluate``): one result per step, with the
    values the run logged at that step under ``logged/<key>`` where it logged them."""
    import torch

    from scalerl.build import build_downstream, build_task
    from scalerl.device import resolve_device
    from scalerl.evaluate import build_evaluation, eval_seed
    from scalerl.pipeline.ranks import thread_split
    from scalerl.runlog import read_metrics

    cfg = cfg or source.cfg
    torch.set_num_threads(thread_split(cfg, 1)[0])  # the trainer's share of the cores, as in the run
    task = build_task(cfg.task)
    downstream = build_downstream(cfg, task)
    same = source.run_dir is not None and cfg == source.cfg  # the run's own evaluation: compare with its log
    logged = {int(r["step"]): r for r in read_metrics(source.run_dir) if r.get("val/pass_rate") is not None} \
        if same else {}
    results = []
    for step in steps:
        bundle = load_policy(source, step)
        bundle.model.to(resolve_device(cfg.device))
        res = build_evaluation(cfg, bundle, bundle.model, task, downstream)(eval_seed(cfg.seed, step))
        row = logged.get(step, {})
        results.append({"step": step, **res, **{f"logged/{k}": row[k] for k in res if row.get(k) is not None}})
    return results
