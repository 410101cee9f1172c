"""The prompt sampler of a task mixture (``task.mix``): batches drawn across domains by weight (§5).

Each domain keeps its own curriculum (``algo.curriculum``: No-Positive-Resampling retires a prompt on its own
history, per prompt, as in a single-task run, §3.2, Fig. 6b). For batch ``b`` the sampler draws the domain of each of
its ``n`` prompts independently with probabilities ``weight_d(b) / sum weight(b)`` from a generator seeded with
``(seed, b)``, then takes that many ids from each domain's curriculum, in the order drawn. So the batch index
and the domains' curricula *are* the state: a resumed run draws exactly the prompts of an uninterrupted one.
The runner asks for one batch per training step, in order, so ``b`` is the step a weight schedule refers to.
A domain whose prompts are all retired keeps its share: its curriculum serves them all again (``exhausted``),
the other domains are not drawn in its place.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from scalerl.algo.curriculum import PromptSampler
from scalerl.errors import UserError


class MixtureSampler:
    """``next_ids``/``update``/``retired``/``state_dict`` as a :class:`PromptSampler`, over several domains."""

    kind = "mixture"

    def __init__(
        self,
        domains: Mapping[str, Sequence[str]],
        weight_at: Mapping[str, Callable[[int], float]],
        make: Callable[[Sequence[str], int], PromptSampler],
        seed: int,
    ) -> None:
        self.names = list(domains)
        self._weight_at = [weight_at[d] for d in self.names]
        # each domain's curriculum gets its own seed, so two domains' epochs are shuffled independently
        self.samplers = {d: make(list(domains[d]), seed + 7919 * i) for i, d in enumerate(self.names)}
        self._domain_of = {pid: d for d in self.names for pid in domains[d]}
        self._seed = int(seed)
        self._batch = 0

    def weights(self, batch: int) -> np.ndarray:
        """The domains' shares of batch ``batch`` (they sum to 1)."""
        w = np.array([f(batch) for f in self._weight_at], dtype=float)
        w = w / w.max()  # relative weights: scaled first, so huge finite ones cannot sum to inf
        return w / w.sum()

    def next_ids(self, n: int) -> list[str]:
        """The next batch's ``n`` prompt ids."""
        rng = np.random.default_rng([self._seed, 0x313C, self._batch])
        picks = rng.choice(len(self.names), size=n, p=self.weights(self._batch))
        self._batch += 1
        served = {d: iter(self.samplers[d].next_ids(int((picks == i).sum()))) for i, d in enumerate(self.names)}
        return [next(served[self.names[i]]) for i in picks]

    def domain(self, prompt_id: str) -> str:
        return self._domain_of[prompt_id]

    def update(self, prompt_id: str, n_correct: int, n_total: int) -> None:
        self.samplers[self.domain(prompt_id)].update(prompt_id, n_correct, n_total)

    def pass_rate(self, prompt_id: str) -> float | None:
        return self.samplers[self.domain(prompt_id)].pass_rate(prompt_id)

    def is_retired(self, prompt_id: str) -> bool:
        return self.samplers[self.domain(prompt_id)].is_retired(prompt_id)

    @property
    def retired(self) -> int:
        return sum(s.retired for s in self.samplers.values())

    @property
    def exhausted(self) -> bool:
        return all(s.exhausted for s in self.samplers.values())

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "seed": self._seed, "batch": self._batch,
                "domains": {d: s.state_dict() for d, s in self.samplers.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("kind") != self.kind or list(state.get("domains", {})) != self.names:
            raise UserError("curriculum state is not this task mixture's: resume with the same task.mix")
        self._seed, self._batch = int(state["seed"]), int(state["batch"])
        for d, s in self.samplers.items():
            s.load_state_dict(state["domains"][d])
