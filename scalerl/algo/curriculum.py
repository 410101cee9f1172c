"""Prompt samplers: uniform epoch-wise resampling and No-Positive-Resampling (§3.7, Fig. 6b).

``CURRICULA.get(name)(ids, seed, **params)`` builds a stateful sampler over the training problem ids:

* ``next_ids(n)`` serves the next ``n`` ids. Ids come in epochs: each epoch is a fresh shuffle of the ids
  still active, drawn from a generator seeded with ``(seed, epoch)``, so ``(seed, epoch, position)`` *is* the
  RNG state and the order is reproducible. A batch may span an epoch boundary.
* ``update(prompt_id, n_correct, n_total)`` records the outcome of a group of generations.
* ``retired``: how many prompts have been removed for good.
* ``state_dict()`` / ``load_state_dict(d)``: JSON-serialisable state that restores the sampler exactly
  (position in the current epoch's order, the order itself, outcome history, retired set).

``npr`` (Polaris, An et al. 2025): a prompt whose *historical pass rate* reaches ``threshold`` (0.9) is
retired. The historical pass rate is cumulative: all correct samples over all samples the prompt has had so
far, across epochs (the paper does not say which; a cumulative rate is the "history" it names and is less
noisy than one group of G). It is checked on every ``update`` once the prompt has at least ``min_samples``
samples. A retired prompt is not served again, neither later in the current epoch nor in later epochs.
If every prompt has been retired, the sampler falls back to serving all prompts uniformly (``exhausted`` is
True) instead of running dry or looping; the retired count stays as it is.

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

    def __init__(self, ids: Sequence[str], seed: int) -> None:
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
        return out

    # ------------------------------------------------------------------ outcomes

    def update(self, prompt_id: str, n_correct: int, n_total: int) -> None:
        """Record ``n_correct`` of ``n_total`` generations of ``prompt_id`` as correct."""
        k = self._index[prompt_id]
        if n_total < 0 or not 0 <= n_correct <= n_total:
            raise ValueError(f"need 0 <= n_correct <= n_total, got {n_correct}, {n_total}")
        self._correct[k] += int(n_correct)
        self._total[k] += int(n_total)
        if k not in self._retired and self._total[k] > 0 and self._should_retire(k):
            self._retired.add(k)

    def pass_rate(self, prompt_id: str) -> float | None:
        """Cumulative pass rate of ``prompt_id`` (None before its first sample)."""
        k = self._index[prompt_id]
        return self._correct[k] / self._total[k] if self._total[k] else None

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
        self._retired = {int(k) for k in state["retired"]}


@CURRICULA.register("uniform")
class UniformSampler(PromptSampler):
    """Uniform resampling: every prompt once per epoch, in a new random order each epoch; never retires."""

    kind = "uniform"


@CURRICULA.register("npr")
class NPRSampler(PromptSampler):
    """No-Positive-Resampling: retire a prompt once its cumulative pass rate is >= ``threshold`` over at
    least ``min_samples`` samples (§3.7; ``pass_rate(x) < 0.9`` in the ScaleRL objective, §3.10)."""

    kind = "npr"

    def __init__(
        self,
        ids: Sequence[str],
        seed: int,
        threshold: float = schema.default(schema.NPRParams, "threshold"),
        min_samples: int = schema.default(schema.NPRParams, "min_samples"),
    ) -> None:
        super().__init__(ids, seed)
        params = schema.check_fields(None, schema.NPRParams, {"threshold": threshold, "min_samples": min_samples})
        self.threshold, self.min_samples = params.threshold, params.min_samples

    def _should_retire(self, k: int) -> bool:
        return self._total[k] >= self.min_samples and self._correct[k] / self._total[k] >= self.threshold
