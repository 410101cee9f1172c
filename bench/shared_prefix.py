"""The update with each group's prompt run once (``TinyLM.forward_prefixed``) against the plain bucketed forward
over every whole sequence, on the same batches and weights, in one process.

The scalerl preset's model after its (cached) warm-up generates three batches of ``batch.prompts`` x
``batch.generations`` completions (zero-variance filter off, so every completion is trained on); each side then
times ``Trainer.step`` on them, ``--reps`` steps per round from the same policy version, the two sides
interleaved in rounds (``bench/rounds.py``). Both paths give the same loss and gradients
(``tests/test_trainer_update.py``); this measures only the time.

    python bench/shared_prefix.py [--rounds 3] [--threads N] [--reps 4] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/rounds.py, bench/rl_vs_trl.py
import rl_vs_trl  # noqa: E402
import rounds  # noqa: E402

from scalerl.build import build_task  # noqa: E402
from scalerl.config import load_config  # noqa: E402
from scalerl.errors import UserError  # noqa: E402
from scalerl.models.tiny import TinyLM  # noqa: E402
from scalerl.rollout import Request  # noqa: E402
from scalerl.pipeline.generator import GeneratorWorker  # noqa: E402
from scalerl.pipeline.schedules import SCHEDULES  # noqa: E402
from scalerl.pipeline.prepare import StageConfig, train_step  # noqa: E402
from scalerl.trainer import Trainer  # noqa: E402


class PlainForward(TinyLM):
    """The same model without ``forward_prefixed``: the trainer then takes the plain bucketed forward."""

    forward_prefixed = None  # type: ignore[assignment]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=4, help="timed steps per side and round (median taken)")
    rounds.add_arguments(ap)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    try:
        cfg = load_config("scalerl", None, ["backend=inline", "algo.zero_variance_filter=false", *args.overrides])
        task = build_task(cfg.task)
        model = rl_vs_trl.warmed_policy(cfg, task)
    except UserError as exc:
        ap.exit(UserError.exit_code, f"error: {exc}\n")
    if not isinstance(model, TinyLM):
        ap.exit(2, "error: the shared-prefix forward is the built-in model's (model.name: tiny)\n")
    gen = GeneratorWorker(cfg, task)
    gen.load(0, model.state_dict())
    ids = [p.id for p in task.train_problems()][: cfg.batch.prompts]
    batches = [gen.generate([Request(0, ids, seed)])[0] for seed in range(3)]
    trainer = Trainer(model, cfg.algo, cfg.optim)
    stage = StageConfig.of(cfg.algo, SCHEDULES.get(cfg.schedule.name, "schedule.name")(cfg.schedule.k))

    def side(cls: type) -> float:
        model.__class__ = cls
        times = []
        for i in range(args.reps):
            trainer.version = 0  # every batch stays fresh for the staleness guard
            t0 = time.perf_counter()
            train_step(trainer, batches[i % len(batches)], stage)
            times.append(time.perf_counter() - t0)
        model.__class__ = TinyLM
        return statistics.median(times)

    res = rounds.interleave({"shared prefix": lambda: side(TinyLM), "plain": lambda: side(PlainForward)},
                            args.rounds, args.threads, warmup=True)
    rounds.report(res, f"seconds per Trainer.step, {cfg.batch.prompts} x {cfg.batch.generations}, d_model "
                       f"{cfg.model.d_model}, {cfg.model.n_layers} layers", [("shared prefix", "plain", "value", None)],
                  lower_is_better=["value"])


if __name__ == "__main__":
    main()
