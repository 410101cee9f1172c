"""A task mixture (``task.mix``): several tasks trained together, each a *domain* (§5: math and code at once).

The mixture is itself a :class:`~scalerl.tasks.base.Task`, so the generator, the trainer and the evaluator see
one task. Every problem carries its domain in ``meta["domain"]`` and its id is ``"<domain>:<id>"`` (ids stay
unique across domains); grading and demonstrations go to the domain's own task. The validation split
interleaves the domains (one of each in turn), so ``eval.n_prompts`` keeps every domain in the evaluation.
How many prompts each domain gets per batch is the prompt sampler's business (``scalerl/algo/mixture.py``).
"""

from __future__ import annotations

from itertools import chain, zip_longest
from typing import Any, Mapping

from scalerl.tasks.base import Problem, Task


def _in_domain(domain: str, p: Problem) -> Problem:
    return Problem(id=f"{domain}:{p.id}", prompt=p.prompt, answer=p.answer, meta={**p.meta, "domain": domain})


class MixtureTask:
    """The domains' tasks under one Task interface; ``demonstration`` exists when every domain has one."""

    name = "mixture"

    def __init__(self, tasks: Mapping[str, Task]) -> None:
        self.tasks = dict(tasks)
        self.train_by_domain = {d: [_in_domain(d, p) for p in t.train_problems()] for d, t in self.tasks.items()}
        val = [[_in_domain(d, p) for p in t.val_problems()] for d, t in self.tasks.items()]
        self._val = [p for p in chain.from_iterable(zip_longest(*val)) if p is not None]
        self._train = list(chain.from_iterable(self.train_by_domain.values()))
        # keyed by (id, prompt): a task may give a training and a validation problem the same id (two files,
        # each numbered from 0, ``val_path``), and each must be graded against its own answer
        self._source: dict[tuple[str, str], tuple[str, Problem]] = {}
        for d, t in self.tasks.items():
            for orig in chain(t.train_problems(), t.val_problems()):
                self._source.setdefault((f"{d}:{orig.id}", orig.prompt), (d, orig))
        if all(hasattr(t, "demonstration") for t in self.tasks.values()):
            self.demonstration = self._demonstration  # the warm-up trains on every domain's demonstrations

    @property
    def domains(self) -> list[str]:
        return list(self.tasks)

    def train_problems(self) -> list[Problem]:
        return self._train

    def val_problems(self) -> list[Problem]:
        return self._val

    def _origin(self, problem: Problem) -> tuple[Task, Problem]:
        domain, orig = self._source[(problem.id, problem.prompt)]
        return self.tasks[domain], orig

    def grade(self, problem: Problem, completion: str) -> bool:
        task, orig = self._origin(problem)
        return task.grade(orig, completion)

    def _demonstration(self, problem: Problem) -> Any:
        task, orig = self._origin(problem)
        return task.demonstration(orig)  # type: ignore[attr-defined]
