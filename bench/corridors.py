"""How many of the package's files one RL step crosses (issue #30, docs/architecture.md "One sample's path").

Runs a micro ScaleRL run on the inline backend (generation, grading, batch preparation, the trainer's step and the
driver's bookkeeping all in this process) and traces one step, the third (past any first-call set-up), with
``sys.setprofile``: every ``scalerl/`` source file in which a Python function runs during that step is counted.
Evaluation and checkpoints are not part of the step (they run on their own schedule). Run it from any checkout to
compare two versions of the code:

    PYTHONPATH=. python bench/corridors.py            # prints the count and the files, grouped by package
"""

from __future__ import annotations

import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from scalerl.config import load_config
from scalerl.pipeline import runner

MICRO = ["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.max_seq_len=96", "batch.prompts=4",
         "batch.generations=4", "task.n_train=64", "task.n_val=8", "task.params.max_operands=5", "eval.n_samples=1",
         "eval.every=100", "warmup.steps=0", "algo.length.params.think_lo=6", "algo.length.params.think_hi=10",
         "algo.length.params.answer_budget=4", "algo.length.params.max_new_tokens=36", "tensorboard=false",
         "threads=1", "steps=4", "checkpoint_every=100", "backend=inline",
         # every sequence reaches the loss (an untrained micro model gets no reward variance and truncates)
         "algo.zero_variance_filter=false", "algo.truncated=train"]
TRACED_STEP = 3


def main() -> None:
    package = Path(runner.__file__).resolve().parents[1]
    seen: set[str] = set()
    calls = {"n": 0}
    step = runner.RunLoop.step

    def tracer(frame, event, arg):  # noqa: ANN001 - sys.setprofile's signature
        if event == "call":
            name = frame.f_code.co_filename
            if name.startswith(str(package)):
                seen.add(str(Path(name).resolve().relative_to(package.parent)))

    def traced(self) -> None:  # noqa: ANN001
        calls["n"] += 1
        if calls["n"] != TRACED_STEP:
            return step(self)
        sys.setprofile(tracer)
        try:
            return step(self)
        finally:
            sys.setprofile(None)

    runner.RunLoop.step = traced
    with tempfile.TemporaryDirectory() as out:
        runner.train(load_config("scalerl", None, MICRO), Path(out) / "run", show_progress=False)
    groups: dict[str, list[str]] = defaultdict(list)
    for f in sorted(seen):
        parts = Path(f).parts
        groups["/".join(parts[:2]) if len(parts) > 2 else parts[0]].append(parts[-1])
    print(f"files crossed by one step (step {TRACED_STEP}, inline backend): {len(seen)}")
    for group, names in sorted(groups.items()):
        print(f"  {group}: {', '.join(names)}")


if __name__ == "__main__":
    main()
