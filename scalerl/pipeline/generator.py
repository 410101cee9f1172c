"""The generator side of the data flow: problems -> engine samples -> verifier -> a ``RolloutBatch``.

One class serves every backend: the inline backend calls it in the trainer's process, the local backend in
a child process, the Ray backend in an actor. It owns its own copy of the model, so in-flight weight loads
never touch the trainer's parameters.
"""

from __future__ import annotations

from typing import Any

from scalerl.build import build_length_control, build_model, build_task
from scalerl.config import RunConfig
from scalerl.engines.base import WeightSource
from scalerl.engines.registry import build_engine
from scalerl.models.registry import prompt_encoder
from scalerl.rollout import Request, RolloutBatch
from scalerl.pipeline.batch import collate
from scalerl.tasks.grading import grade
from scalerl.timing import Stopwatch, timed


class GeneratorWorker:
    def __init__(self, cfg: RunConfig, task: Any | None = None) -> None:
        self.cfg = cfg
        self.task = task if task is not None else build_task(cfg.task)
        self.problems = {p.id: p for p in self.task.train_problems()}
        bundle = build_model(cfg.model, cfg.base_seed)
        self.tokenizer = bundle.tokenizer
        self.encode = prompt_encoder(bundle)
        self.engine = build_engine(cfg, bundle)
        self.length = build_length_control(cfg)
        self._synced = False

    @property
    def version(self) -> int:
        """Policy version of the weights in use; -1 until the trainer's weights were first loaded (the model
        is built from its config with random weights, not the trainer's warmed-up ones)."""
        return self.engine.version if self._synced else -1

    def load(self, version: int, state_dict: Any) -> None:
        self.engine.load_weights(state_dict, version)
        self._synced = True

    def generate(self, requests: list[Request], weight_source: WeightSource | None = None) -> list[RolloutBatch]:
        """One engine call for all ``requests`` (a PPO-off-policy group of k batches is generated as one big
        batch with frozen weights, §3.1), split back into one ``RolloutBatch`` per request."""
        problems = [[self.problems[i] for i in r.problem_ids] for r in requests]
        flat = [p for ps in problems for p in ps]
        busy = Stopwatch().start()  # engine, grading, collation; shared by the k batches
        call: dict[str, float] = {}
        with timed(call, "generate"):
            samples = self.engine.generate(
                [self.encode(p.prompt) for p in flat],
                n=self.cfg.batch.generations,
                length=self.length,
                seed=requests[0].seed,
                weight_source=weight_source,
            )
        batches, start = [], 0
        for request, ps in zip(requests, problems):
            part = samples[start : start + len(ps)]
            start += len(ps)
            timings = {"generate": call["generate"] / len(requests)}
            with timed(timings, "grade"):
                # a grader that fails fails its sample (incorrect, with the reason), never the run
                grades = [[grade(self.task, p, s.text) for s in group] for p, group in zip(ps, part)]
                verdicts = [[g.correct for g in gs] for gs in grades]
            with timed(timings, "collate"):
                batch = collate(
                    request,
                    ps,
                    part,
                    verdicts,
                    pad_id=self.tokenizer.pad_id,
                    reward_correct=self.cfg.reward.correct,
                    reward_incorrect=self.cfg.reward.incorrect,
                    length_control=self.length,
                )
            batch.timings = timings
            flat = [g for gs in grades for g in gs]
            batch.ungraded = {row: g.failure for row, g in enumerate(flat) if g.failure is not None}
            batches.append(batch)
        seconds = busy.stop() / len(requests)
        for b in batches:
            b.gen_seconds = seconds
        return batches
