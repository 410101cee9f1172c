"""Held-out evaluation: mean@n pass rate on the validation split (§2: the paper uses mean@16 on 1,000
held-out prompts every 100 steps). Every validation prompt is sampled ``n`` times at temperature 1 with the
run's length control, and the pass rate is the mean over all samples. When the problems come in difficulty tiers
(``meta["tier"]``, the built-in task's testbed), the pass rate of each tier is reported too
(``val/tier/<name>/pass_rate``), so a ceiling below 1 shows where it comes from. With a task mixture each
domain's pass rate is reported beside the overall one (``val/<domain>/pass_rate``, §5), its tiers as
``val/<domain>/tier/<name>/pass_rate``. A downstream set is evaluated the same way under its own prefix
(``downstream/<name>/pass_rate``)."""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Sequence

import torch

from scalerl.tasks.base import Problem, Task


@torch.no_grad()
def evaluate(
    engine: Any,
    encode: Callable[[str], list[int]],
    task: Task,
    problems: Sequence[Problem],
    n_samples: int,
    length: Any,
    seed: int,
    chunk: int = 256,
    prefix: str = "val",
) -> dict[str, float]:
    correct = total = 0
    truncated = 0
    group_correct: Counter[tuple[str, str]] = Counter()  # (domain or "", tier or "") -> correct samples
    group_total: Counter[tuple[str, str]] = Counter()
    per_chunk = max(1, chunk // n_samples)
    for start in range(0, len(problems), per_chunk):
        part = problems[start : start + per_chunk]
        prompts = [encode(p.prompt) for p in part]
        samples = engine.generate(prompts, n=n_samples, length=length, seed=seed + start)
        for p, group in zip(part, samples):
            for s in group:
                ok = bool(task.grade(p, s.text))
                correct += ok
                truncated += bool(s.truncated)
                total += 1
                key = (str(p.meta.get("domain", "")), str(p.meta.get("tier", "")))
                group_correct[key] += ok
                group_total[key] += 1
    return {**_breakdown(group_correct, group_total, prefix), f"{prefix}/pass_rate": correct / max(total, 1),
            f"{prefix}/truncation_rate": truncated / max(total, 1), f"{prefix}/n": float(total)}


def _breakdown(correct: Counter[tuple[str, str]], total: Counter[tuple[str, str]], prefix: str) -> dict[str, float]:
    """Pass rate per domain (when there are two or more) and per tier within a domain (when it has two or more)."""
    out: dict[str, float] = {}
    domains = sorted({d for d, _ in total})
    for d in domains:
        keys = [k for k in total if k[0] == d]
        head = f"{prefix}/{d}" if d else prefix
        if len(domains) > 1:
            out[f"{head}/pass_rate"] = sum(correct[k] for k in keys) / sum(total[k] for k in keys)
        if len(keys) > 1:
            out.update({f"{head}/tier/{t}/pass_rate": correct[(d, t)] / total[(d, t)] for _, t in keys})
    return out
