"""The generator side of the data flow: problems -> engine samples -> verifier -> a ``RolloutBatch``
(``collate``: rewards from the verdicts, shaped by the length control, §2 / App. A.10; loss weights 1 on sampled
completion tokens and 0 on prompt, padding and forced interruption tokens; the generator's log-probs and the
policy version of every token).

One class serves every backend: the inline backend calls it in the trainer's process, the local backend in
a child process, the Ray backend in an actor. It owns its own copy of the model, so in-flight weight loads
never touch the trainer's parameters.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from scalerl.algo.length_control import LengthControl, forced_token_weights
from scalerl.build import build_length_control, build_model, build_task
from scalerl.config import RunConfig
from scalerl.engines.base import Sample, WeightSource
from scalerl.engines.registry import build_engine
from scalerl.models.registry import prompt_encoder
from scalerl.rollout import Request, RolloutBatch
from scalerl.tasks.base import Problem
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


def collate(
    request: Request,
    problems: Sequence[Problem],
    samples: Sequence[Sequence[Sample]],
    verdicts: Sequence[Sequence[bool]],
    *,
    pad_id: int,
    reward_correct: float,
    reward_incorrect: float,
    length_control: LengthControl,
    gen_seconds: float = 0.0,
) -> RolloutBatch:
    flat = [s for group in samples for s in group]
    flat_correct = [bool(c) for group in verdicts for c in group]
    group_index = [gi for gi, group in enumerate(samples) for _ in group]
    seq_len = max(len(s.prompt_tokens) + len(s.tokens) for s in flat)
    n = len(flat)
    ids_rows, lp_rows, version_rows, forced_rows, starts, ends = [], [], [], [], [], []
    for s in flat:  # one padded Python row per field, then one tensor each (no per-row tensor calls)
        p, c = len(s.prompt_tokens), len(s.tokens)
        pad = seq_len - p - c
        ids_rows.append([*s.prompt_tokens, *s.tokens, *[pad_id] * pad])
        lp_rows.append([*[0.0] * p, *s.logprobs, *[0.0] * pad])
        version_rows.append([*[-1] * p, *s.versions, *[-1] * pad])
        forced_rows.append([*[False] * p, *s.forced, *[False] * pad])
        starts.append(p)
        ends.append(p + c)
    position = torch.arange(seq_len)
    attention = position < torch.tensor(ends)[:, None]
    completion = attention & (position >= torch.tensor(starts)[:, None])
    input_ids = torch.tensor(ids_rows, dtype=torch.long).view(n, seq_len)
    loss_mask = forced_token_weights(torch.tensor(forced_rows, dtype=torch.bool).view(n, seq_len), completion)
    gen_logprobs = torch.tensor(lp_rows, dtype=torch.float32).view(n, seq_len)
    versions = torch.tensor(version_rows, dtype=torch.long).view(n, seq_len)
    correct = torch.tensor(flat_correct, dtype=torch.bool)
    lengths = torch.tensor([len(s.tokens) for s in flat], dtype=torch.long)
    truncated = torch.tensor([s.truncated for s in flat], dtype=torch.bool)
    # a truncated sample (the hard cap reached without EOS) is a wrong answer whatever the grader read in it: with
    # ``algo.truncated: train`` it is trained with the incorrect reward (App. A.6; with ``exclude``, the paper's, it
    # is left out of the loss and its reward only enters train/reward_mean)
    rewarded = correct & ~truncated
    rewards = torch.where(rewarded, torch.tensor(reward_correct), torch.tensor(reward_incorrect)).float()
    rewards = length_control.shape_rewards(rewards, lengths, rewarded)
    return RolloutBatch(
        index=request.index,
        problem_ids=[p.id for p in problems],
        group=torch.tensor(group_index, dtype=torch.long),
        input_ids=input_ids,
        attention_mask=attention,
        loss_mask=loss_mask,
        gen_logprobs=gen_logprobs,
        versions=versions,
        rewards=rewards,
        correct=correct,
        truncated=truncated,
        interrupted=torch.tensor([s.interrupted for s in flat], dtype=torch.bool),
        completion_lengths=lengths,
        gen_seconds=gen_seconds,
        texts=[s.text for s in flat],
    )
