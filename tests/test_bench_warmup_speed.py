"""bench/warmup_speed.py: the per-operation pass rates it reports for the strings domain."""

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import warmup_speed  # noqa: E402

from scalerl.tasks.arithmetic import arithmetic  # noqa: E402
from scalerl.tasks.strings import strings  # noqa: E402


class Engine:
    """Answers ``count`` problems right and every other one wrong, by the prompt's text."""

    def __init__(self, task):
        self.by_prompt = {p.prompt: p for p in task.val_problems()}

    def generate(self, prompts, n, length, seed):
        def text(p):
            return f"<think></think>{p.answer}" if p.meta["op"] == "count" else "<think></think>?"
        return [[SimpleNamespace(text=text(self.by_prompt[q]))] * n for q in prompts]


def test_op_rates_are_each_operations_pass_rate():
    task = strings(seed=0, n_train=20, n_val=60)
    rates = warmup_speed.op_rates(Engine(task), lambda text: text, task, n_samples=2, length=None, seed=0)
    assert rates == {"op/count": 1.0, "op/rev": 0.0, "op/sort": 0.0}


def test_a_task_without_operations_has_none():
    task = arithmetic(seed=0, n_train=20, n_val=20)
    assert warmup_speed.op_rates(None, lambda text: text, task, n_samples=2, length=None, seed=0) == {}
