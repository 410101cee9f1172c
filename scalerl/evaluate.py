"""Held-out evaluation: mean@n pass rate on the validation split (§2: the paper uses mean@16 on 1,000
held-out prompts every 100 steps). Every validation prompt is sampled ``n`` times at temperature 1 with the
run's length control, and the pass rate is the mean over all samples. When the problems come in difficulty tiers
(``meta["tier"]``, the built-in task's testbed), the pass rate of each tier is reported too
(``val/tier/<name>/pass_rate``), so a ceiling below 1 shows where it comes from."""

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
) -> dict[str, float]:
    correct = total = 0
    truncated = 0
    tier_correct: Counter[str] = Counter()
    tier_total: Counter[str] = Counter()
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
                tier = p.meta.get("tier") if p.meta else None
                if tier is not None:
                    tier_correct[tier] += ok
                    tier_total[tier] += 1
    tiers = {f"val/tier/{t}/pass_rate": tier_correct[t] / n for t, n in tier_total.items()} if len(tier_total) > 1 else {}
    return {
        **tiers,
        "val/pass_rate": correct / max(total, 1),
        "val/truncation_rate": truncated / max(total, 1),
        "val/n": float(total),
    }
