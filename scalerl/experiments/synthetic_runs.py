"""Synthetic run directories: a ``metrics.jsonl`` shaped like the runner's (docs/architecture.md contract) whose validation
pass rate follows Eq. 1 with the paper's evaluation noise (``scalerl.curves.synthetic``).

Used to exercise sweeps and reports without training (tests, docs): :class:`SyntheticRunFn` is a drop-in
run function for :func:`scalerl.experiments.sweep.run_sequential` that honours ``steps``, ``eval.every``,
``seed``, ``max_device_hours`` (stopping as the runner does: at the first step whose compute reaches it, with an
evaluation there) and resume, and can be told to die part-way through a run to test resumption.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from scalerl.atomic import append_jsonl, write_text
from scalerl.config import RunConfig, to_yaml
from scalerl.curves.synthetic import CurveParams, simulate_eval_curve
from scalerl.errors import UserError


class Killed(KeyboardInterrupt):
    """What a synthetic run raises when told to die part-way (as a Ctrl-C or a killed process would)."""


def eval_steps(steps: int, every: int) -> list[int]:
    """The steps at which the runner evaluates: 0 (R0), every ``every`` steps, and the last step."""
    return sorted({0, *range(every, steps + 1, every), steps})


def capped_steps(steps: int, hours_per_step: float, max_device_hours: float | None) -> int:
    """The step the runner stops at: ``steps``, or the first step whose compute reaches ``max_device_hours``."""
    if max_device_hours is None:
        return steps
    return min(steps, max(1, math.ceil(max_device_hours / hours_per_step - 1e-9)))


def synthetic_record(step: int, params: CurveParams, hours_per_step: float, rng: np.random.Generator) -> dict[str, Any]:
    """One training-step line with every key the runner logs that the report reads."""
    progress = step / (step + 50.0)
    return {
        "step": step,
        "time/wall_s": step * hours_per_step * 3600,
        "compute/device_hours": step * hours_per_step,
        "train/reward_mean": 2 * params.A * progress - 1,
        "train/truncation_rate": float(np.clip(0.04 + 0.01 * rng.standard_normal(), 0, 1)),
        "train/staleness_mean": 3.5 + 0.3 * rng.standard_normal(),
        "train/staleness_max": 8.0,
        "train/zero_var_frac": float(np.clip(0.2 + 0.3 * progress + 0.05 * rng.standard_normal(), 0, 1)),
        "curriculum/retired": float(math.floor(40 * progress)),
        "train/entropy": 1.5 * math.exp(-step / 200) + 0.3,
    }


@dataclass
class SyntheticRunFn:
    """A run function writing synthetic runs; ``params`` by run name (``cfg.name``), ``kill_at`` = {name: step}
    makes that run die (raise :class:`Killed`) once it has logged that step, the first time only."""

    params: dict[str, CurveParams]
    hours_per_step: float = 0.01
    kill_at: dict[str, int] = field(default_factory=dict)
    calls: list[tuple[str, bool]] = field(default_factory=list)

    def __call__(self, cfg: RunConfig, out: Path, resume: bool, show_progress: bool = False) -> dict[str, Any]:
        self.calls.append((cfg.name, resume))
        out = Path(out)
        metrics = out / "metrics.jsonl"
        if not resume and metrics.exists():
            raise UserError(f"{out} already holds a run; pass --resume to continue it or choose another --out")
        out.mkdir(parents=True, exist_ok=True)
        write_text(out / "config.yaml", to_yaml(cfg))
        done = [json.loads(line)["step"] for line in metrics.read_text().splitlines()] if resume and metrics.exists() else []
        params = self.params[cfg.name]
        evals = set(eval_steps(cfg.steps, cfg.eval.every))
        compute = np.array(sorted(evals)) * self.hours_per_step
        val = dict(zip(sorted(evals), simulate_eval_curve(params, compute, n_prompts=200, seed=cfg.seed)))
        last = capped_steps(cfg.steps, self.hours_per_step, cfg.max_device_hours)
        if last not in evals:  # stopped at a compute budget between evaluations: evaluated there, as the runner does
            evals.add(last)
            val[last] = float(simulate_eval_curve(params, np.array([last * self.hours_per_step]), n_prompts=200,
                                                  seed=cfg.seed + last)[0])
        rng = np.random.default_rng(cfg.seed)
        start = max(done, default=-1) + 1
        for step in range(start, last + 1):
            rec = synthetic_record(step, params, self.hours_per_step, rng) if step else {"step": 0, "compute/device_hours": 0.0}
            if step in evals:
                rec["val/pass_rate"] = float(val[step])
            append_jsonl(metrics, rec)
            if self.kill_at.get(cfg.name) == step:
                del self.kill_at[cfg.name]
                raise Killed(f"{cfg.name} killed at step {step}")
        return {"points": len(evals), "fit": None}
