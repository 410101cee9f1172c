"""Held-out evaluation (§2.1): mean@n over every sample, and per difficulty tier when the task has tiers."""

from __future__ import annotations

from types import SimpleNamespace

from scalerl.evaluate import evaluate
from scalerl.tasks.arithmetic import ArithmeticTask


class AnswersEasyOnly:
    """An engine that works out the easy tier's problems and answers every other one wrongly."""

    def __init__(self, task: ArithmeticTask, by_prompt: dict) -> None:
        self.task, self.by_prompt = task, by_prompt

    def generate(self, prompts, n, length, seed):
        out = []
        for prompt in prompts:
            p = self.by_prompt[tuple(prompt)]
            text = self.task.demonstration(p) if p.meta["tier"] == "easy" else "<think></think>x"
            out.append([SimpleNamespace(text=text, truncated=False) for _ in range(n)])
        return out


def test_pass_rate_per_tier_and_overall():
    tiers = {"easy": {"operands": 2, "share": 1}, "hard": {"operands": [4, 5], "share": 1}}
    task = ArithmeticTask(seed=0, n_train=10, n_val=60, tiers=tiers, sign_slip=0.0)  # correct demonstrations
    encode = lambda s: [ord(c) for c in s]  # noqa: E731
    val = task.val_problems()
    engine = AnswersEasyOnly(task, {tuple(encode(p.prompt)): p for p in val})
    res = evaluate(engine, encode, task, val, n_samples=3, length=None, seed=0, chunk=12)
    n_easy = sum(p.meta["tier"] == "easy" for p in val)
    assert 0 < n_easy < len(val)
    assert res["val/n"] == 3 * len(val)
    assert res["val/pass_rate"] == n_easy / len(val)
    assert res["val/tier/easy/pass_rate"] == 1.0 and res["val/tier/hard/pass_rate"] == 0.0


def test_one_tier_adds_no_per_tier_keys():
    task = ArithmeticTask(seed=0, n_train=10, n_val=20, min_operands=3, max_operands=3)  # one operand count
    encode = lambda s: [ord(c) for c in s]  # noqa: E731
    engine = AnswersEasyOnly(task, {tuple(encode(p.prompt)): p for p in task.val_problems()})
    res = evaluate(engine, encode, task, task.val_problems(), n_samples=2, length=None, seed=0)
    assert not [k for k in res if k.startswith("val/tier/")] and res["val/pass_rate"] == 0.0
