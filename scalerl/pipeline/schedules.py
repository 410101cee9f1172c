"""Off-policy schedules (§3.1) as data: when may the generator start batch ``b``, and may it take new
weights mid-generation?

Both schedules run on the same machinery (``scalerl.pipeline.runner``); they differ only in these numbers:

* **PipelineRL-k**: the generator streams; after every optimizer step the new weights go to it at once and
  are loaded between decode steps (in-flight, KV cache kept). Batch ``b`` may start once the trainer has
  published version ``b - k``, so no trained token is more than ``k`` versions old and the trainer never
  runs more than ``k`` steps ahead of the generator.
* **PPO-off-policy-k**: the generator produces ``k`` batches with frozen weights, then the trainer takes
  ``k`` optimizer steps on them; weights are loaded only at the start of each group of ``k`` batches. A group
  is requested whole even where the run's ``steps`` ends inside it (``RunState.issue``).
"""

from __future__ import annotations

from dataclasses import dataclass

from scalerl.registry import Registry


@dataclass(frozen=True)
class Schedule:
    k: int
    inflight: bool  # may the generator load new weights between decode steps?
    group: int  # batches generated with the same starting weights before waiting for new ones

    def min_version(self, batch_index: int) -> int:
        """Weights version the generator must have before it starts batch ``batch_index`` (0-based).

        The trainer takes step ``s`` (version ``s`` -> ``s+1``) on batch ``s``."""
        if self.inflight:
            return max(0, batch_index - self.k)
        return (batch_index // self.group) * self.group

    def split(self, requests: list) -> list[list]:
        """Consecutive requests (objects with ``.index``) cut into the groups generated together."""
        groups: dict[int, list] = {}
        for r in requests:
            groups.setdefault(r.index // self.group, []).append(r)
        return list(groups.values())

    def max_staleness(self) -> int:
        """Largest (trainer version - token version) a trained token can have under this schedule."""
        return self.k if self.inflight else self.group - 1


SCHEDULES: Registry[type] = Registry("schedule")


@SCHEDULES.register("pipeline_rl")
def pipeline_rl(k: int) -> Schedule:
    return Schedule(k=k, inflight=True, group=1)


@SCHEDULES.register("ppo_off_policy")
def ppo_off_policy(k: int) -> Schedule:
    return Schedule(k=k, inflight=False, group=k)
