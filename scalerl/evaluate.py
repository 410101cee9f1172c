"""Held-out evaluation: mean@n pass rate on the validation split (§2.1: the paper uses mean@16 on 1,000
held-out prompts every 100 steps). Every validation prompt is sampled ``n`` times at temperature 1 with the
run's length control, and the pass rate is the mean over all samples. When the problems come in difficulty tiers
(``meta["tier"]``, the built-in task's testbed), the pass rate of each tier is reported too
(``val/tier/<name>/pass_rate``), so a ceiling below 1 shows where it comes from. With a task mixture each
domain's pass rate is reported beside the overall one (``val/<domain>/pass_rate``, §5), its tiers as
``val/<domain>/tier/<name>/pass_rate``; the overall ``val/pass_rate`` stays the mean over all validation prompts
pooled (§2.1's mean@n over the held-out prompts), so each domain weighs by its number of validation prompts.
A downstream set is evaluated the same way under its own prefix (``downstream/<name>/pass_rate``).

:class:`Evaluation` is a run's evaluation (validation split and downstream sets, the native engine, the run's
length control) and :func:`eval_seed` its seed at a step: the training loop and ``scalerl eval`` both use them,
so evaluating a checkpoint after the fact gives the numbers the run logged at that step."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from scalerl.tasks.base import Problem, Task
from scalerl.tasks.grading import grade

if TYPE_CHECKING:
    from scalerl.algo.length_control import LengthControl
    from scalerl.config import RunConfig
    from scalerl.models.registry import ModelBundle


@torch.no_grad()
def evaluate(
    engine: Any,
    encode: Callable[[str], list[int]],
    task: Task,
    problems: Sequence[Problem],
    n_samples: int,
    length: LengthControl | None,
    seed: int,
    chunk: int = 256,
    prefix: str = "val",
) -> dict[str, float]:
    correct = total = 0
    truncated = ungraded = 0
    group_correct: Counter[tuple[str, str]] = Counter()  # (domain or "", tier or "") -> correct samples
    group_total: Counter[tuple[str, str]] = Counter()
    per_chunk = max(1, chunk // n_samples)
    for start in range(0, len(problems), per_chunk):
        part = problems[start : start + per_chunk]
        prompts = [encode(p.prompt) for p in part]
        samples = engine.generate(prompts, n=n_samples, length=length, seed=seed + start)
        # zip would silently grade fewer samples than asked (val/n short, the rate over a subset): refuse instead
        if len(samples) != len(part) or any(len(group) != n_samples for group in samples):
            got = [len(group) for group in samples]
            raise RuntimeError(f"the engine returned {got[:8]} samples for {len(part)} prompts, not {n_samples} each")
        for p, group in zip(part, samples):
            for s in group:
                verdict = grade(task, p, s.text)  # a grader that fails: this sample incorrect, not the run over
                ok = verdict.correct
                ungraded += verdict.failure is not None
                correct += ok
                truncated += bool(s.truncated)
                total += 1
                key = (str(p.meta.get("domain", "")), str(p.meta.get("tier", "")))
                group_correct[key] += ok
                group_total[key] += 1
    failures = {f"{prefix}/grader_failures": float(ungraded)} if ungraded else {}
    return {**_breakdown(group_correct, group_total, prefix), f"{prefix}/pass_rate": correct / max(total, 1),
            f"{prefix}/truncation_rate": truncated / max(total, 1), f"{prefix}/n": float(total), **failures}


def _breakdown(correct: Counter[tuple[str, str]], total: Counter[tuple[str, str]], prefix: str) -> dict[str, float]:
    """Pass rate per domain (every domain of a mixture, one included: its ``val/<domain>/pass_rate`` is the column a
    sweep's report and ``--y`` read for that domain) and per tier within a domain (when it has two or more)."""
    out: dict[str, float] = {}
    domains = sorted({d for d, _ in total})
    for d in domains:
        keys = [k for k in total if k[0] == d]
        head = f"{prefix}/{d}" if d else prefix
        if d:
            out[f"{head}/pass_rate"] = sum(correct[k] for k in keys) / sum(total[k] for k in keys)
        if len(keys) > 1:
            out.update({f"{head}/tier/{t}/pass_rate": correct[(d, t)] / total[(d, t)] for _, t in keys})
    return out


def pass_rate_keys(record: dict[str, Any]) -> list[str]:
    """The evaluation pass rates in ``record`` (a metrics row or an ``evaluate`` result), in reading order: the
    validation rate, its domains and tiers, then the downstream sets."""
    keys = [k for k, v in record.items() if k.endswith("/pass_rate") and k.startswith(("val/", "downstream/"))
            and v is not None]
    return sorted(keys, key=lambda k: (k != "val/pass_rate", not k.startswith("val/"), k))


def eval_seed(run_seed: int, step: int) -> int:
    """The sampling seed of the evaluation at ``step`` (the same on every resume and in ``scalerl eval``)."""
    from scalerl.pipeline.state import batch_seed

    return batch_seed(run_seed, -1 - step)


@dataclass
class Evaluation:
    """mean@n on the validation split and the downstream sets (§2.1, §5), with a seed per step."""

    engine: Any
    encode: Any
    task: Any
    val: list[Problem]
    downstream: dict[str, tuple[Any, list[Problem]]]
    length: LengthControl | None
    n_samples: int

    def __call__(self, seed: int) -> dict[str, float]:
        res = evaluate(self.engine, self.encode, self.task, self.val, self.n_samples, self.length, seed=seed)
        for name, (other, problems) in self.downstream.items():  # §5: downstream sets at the same steps
            res.update(evaluate(self.engine, self.encode, other, problems, self.n_samples, self.length, seed=seed,
                                prefix=f"downstream/{name}"))
        return res


def build_evaluation(
    cfg: "RunConfig", bundle: "ModelBundle", model: Any, task: Task,
    downstream: dict[str, tuple[Any, list[Problem]]],
) -> Evaluation:
    """The run's evaluation of ``model`` (the bundle's policy or a copy of it): the model family's native engine
    with the run's FP32-head setting, the first ``eval.n_prompts`` validation problems, ``eval.n_samples``."""
    from scalerl.build import build_length_control
    from scalerl.engines.registry import native_engine
    from scalerl.models.registry import prompt_encoder

    return Evaluation(
        engine=native_engine(bundle, model, fp32_head=cfg.algo.fp32_head),
        encode=prompt_encoder(bundle),
        task=task,
        val=list(task.val_problems())[: cfg.eval.n_prompts or None],
        downstream=downstream,
        length=build_length_control(cfg, bundle.tokenizer),
        n_samples=cfg.eval.n_samples,
    )
