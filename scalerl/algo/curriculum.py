"""Prompt samplers: uniform epoch-wise resampling and No-Positive-Resampling (§3.2, Fig. 6b).

``CURRICULA.get(name)(ids, seed, **params)`` builds a stateful sampler over the training problem ids:

* ``next_ids(n)`` serves the next ``n`` ids. Ids come in epochs: each epoch is a fresh shuffle of the ids
  still active, drawn from a generator seeded with ``(seed, epoch)``, so ``(seed, epoch, position)`` *is* the
  RNG state and the order is reproducible. A batch may span an epoch boundary.
* ``update(prompt_id, n_correct, n_total)`` records the outcome of a group of generations.
* ``retired``: how many prompts have been removed for good.
* ``state_dict()`` / ``load_state_dict(d)``: JSON-serialisable state that restores the sampler exactly
  (position in the current epoch's order, the order itself, outcome history, retired set).

``npr`` (Polaris, An et al. 2025), the paper's rule (§3.2, Fig. 6b): a prompt whose pass rate in the *latest
epoch* that served it reaches ``threshold`` (0.9) is removed *from subsequent epochs*. The sampler remembers the
epoch of every serving not yet answered (a prompt's outcomes arrive in the order it was served), so each
outcome counts toward the epoch that served it; a prompt's latest-epoch count starts afresh with its first
outcome from a newer epoch. Retirement is decided when the next epoch's order is drawn, from the counts then
known (a serving answered only after that is judged one epoch later), with at least ``min_samples`` samples
in that epoch; nothing is retired mid-epoch. A retired prompt is not served again. If every prompt has been
retired, the sampler falls back to serving all prompts uniformly (``exhausted`` is True) instead of running dry
or looping; the retired count stays as it is. ``pass_rate`` is the cumulative rate over every epoch (reports).

``uniform``: the same epoch-wise shuffles over every prompt, history recorded, nothing ever retired.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

import numpy as np

from scalerl import schema
from scalerl.errors import UserError
from scalerl.registry import Registry

CURRICULA: Registry[type["PromptSampler"]] = Registry("curriculum")


def _fingerprint(ids: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()


class PromptSampler:
    """Epoch-wise shuffled prompt ids with per-prompt outcome history; ``_should_retire`` decides retirement."""

    kind = "sampler"
    params_model: type[schema.Params] = schema.UniformParams

    def __init__(self, ids: Sequence[str], seed: int, params: schema.Params | None = None, **values: Any) -> None:
        """``params``: the typed params (``scalerl/schema.py``) as validated at load, or their fields as keywords."""
        self.params = schema.own_params(self, params, values)
        self._ids = [str(i) for i in ids]
        if not self._ids:
            raise ValueError("ids: the training split is empty")
        if len(set(self._ids)) != len(self._ids):
            raise ValueError("ids: problem ids must be unique")
        self._index = {pid: k for k, pid in enumerate(self._ids)}
        self._seed = int(seed)
        self._epoch = -1  # no epoch started yet
        self._order: list[int] = []
        self._pos = 0
        self._correct = [0] * len(self._ids)
        self._total = [0] * len(self._ids)
        self._served: list[list[int]] = [[] for _ in self._ids]  # epochs of servings not yet answered, oldest first
        self._latest = [[-1, 0, 0] for _ in self._ids]  # [epoch, correct, total] of the latest epoch answered
        self._retired: set[int] = set()

    # ------------------------------------------------------------------ serving

    @property
    def retired(self) -> int:
        return len(self._retired)

    @property
    def exhausted(self) -> bool:
        """True when every prompt is retired and the sampler serves all of them again."""
        return len(self._retired) == len(self._ids)

    def _new_epoch(self) -> None:
        for k in range(len(self._ids)):  # removed from subsequent epochs (§3.2): decided as one begins
            if k not in self._retired and self._latest[k][2] > 0 and self._should_retire(k):
                self._retired.add(k)
        self._epoch += 1
        pool = [k for k in range(len(self._ids)) if k not in self._retired] or list(range(len(self._ids)))
        rng = np.random.default_rng([self._seed, self._epoch])
        self._order = [pool[j] for j in rng.permutation(len(pool))]
        self._pos = 0

    def next_ids(self, n: int) -> list[str]:
        """The next ``n`` prompt ids (skipping prompts retired since their epoch's shuffle)."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        out: list[str] = []
        while len(out) < n:
            if self._pos >= len(self._order):
                self._new_epoch()  # never empty: falls back to all ids
            k = self._order[self._pos]
            self._pos += 1
            if k in self._retired and not self.exhausted:
                continue
            out.append(self._ids[k])
            self._served[k].append(self._epoch)
        return out

    # ------------------------------------------------------------------ outcomes

    def update(self, prompt_id: str, n_correct: int, n_total: int) -> None:
        """Record ``n_correct`` of ``n_total`` generations of ``prompt_id`` as correct."""
        k = self._index[prompt_id]
        if n_total < 0 or not 0 <= n_correct <= n_total:
            raise ValueError(f"need 0 <= n_correct <= n_total, got {n_correct}, {n_total}")
        self._correct[k] += int(n_correct)
        self._total[k] += int(n_total)
        epoch = self._served[k].pop(0) if self._served[k] else max(self._epoch, 0)
        latest = self._latest[k]
        if epoch != latest[0]:
            latest[:] = [epoch, 0, 0]
        latest[1] += int(n_correct)
        latest[2] += int(n_total)

    def pass_rate(self, prompt_id: str) -> float | None:
        """Cumulative pass rate of ``prompt_id`` over every epoch (None before its first sample)."""
        k = self._index[prompt_id]
        return self._correct[k] / self._total[k] if self._total[k] else None

    def epoch_pass_rate(self, prompt_id: str) -> float | None:
        """Pass rate of ``prompt_id`` in the latest epoch that has answered it (None before its first sample):
        what No-Positive-Resampling judges."""
        _, correct, total = self._latest[self._index[prompt_id]]
        return correct / total if total else None

    def is_retired(self, prompt_id: str) -> bool:
        return self._index[prompt_id] in self._retired

    def _should_retire(self, k: int) -> bool:
        return False

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "ids_sha256": _fingerprint(self._ids),
            "seed": self._seed,
            "epoch": self._epoch,
            "pos": self._pos,
            "order": list(self._order),
            "correct": list(self._correct),
            "total": list(self._total),
            "served": [list(e) for e in self._served],
            "latest": [list(e) for e in self._latest],
            "retired": sorted(self._retired),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("kind") != self.kind:
            raise UserError(
                f"curriculum state is for {state.get('kind')!r}, not {self.kind!r}: resume with the same "
                "algo.curriculum.name"
            )
        if state.get("ids_sha256") != _fingerprint(self._ids):
            raise UserError("curriculum state does not match the training problems: resume with the same task config")
        self._seed = int(state["seed"])
        self._epoch = int(state["epoch"])
        self._pos = int(state["pos"])
        self._order = [int(k) for k in state["order"]]
        self._correct = [int(c) for c in state["correct"]]
        self._total = [int(t) for t in state["total"]]
        self._served = [[int(e) for e in es] for es in state.get("served", [[] for _ in self._ids])]
        self._latest = [[int(v) for v in e] for e in state.get("latest", [[-1, 0, 0] for _ in self._ids])]
        self._retired = {int(k) for k in state["retired"]}


@CURRICULA.implement
class UniformSampler(PromptSampler):
    """Uniform resampling: every prompt once per epoch, in a new random order each epoch; never retires."""

    kind = "uniform"


@CURRICULA.implement
class NPRSampler(PromptSampler):
    """No-Positive-Resampling: a prompt whose pass rate in its latest epoch is >= ``threshold`` over at least
    ``min_samples`` samples leaves the pool from the next epoch on (§3.2, Fig. 6b; ``pass_rate(x) < 0.9`` in the
    ScaleRL objective, §4)."""

    kind = "npr"

    params_model = schema.NPRParams

    @property
    def threshold(self) -> float:
        return self.params.threshold

    @property
    def min_samples(self) -> int:
        return self.params.min_samples

    def _should_retire(self, k: int) -> bool:
        _, correct, total = self._latest[k]
        return total >= self.min_samples and correct / total >= self.threshold
