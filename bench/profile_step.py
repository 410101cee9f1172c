"""Where an RL step's time goes: scalerl's ``timing/<phase>_s`` next to TRL's ``GRPOTrainer`` in the same phases.

Same set-up as ``bench/rl_vs_trl.py`` (same model, batch, cap, loss, threads; see its docstring). scalerl's
phases are the ones it logs in metrics.jsonl every step (docs/architecture.md); TRL's are timed here by wrapping its
own methods on the trainer instance (nothing in TRL is changed or slowed):

  generate         TRL ``_generate_single_turn``             scalerl ``timing/generate_s``
  grade            TRL ``_calculate_rewards``                scalerl ``timing/grade_s``
  collate          TRL rest of ``_generate_and_score_completions`` (padding, advantages)
                                                             scalerl ``timing/collate_s``
  logprob_forward  TRL ``compute_loss`` (forward + loss)     scalerl ``timing/logprob_forward_s``
  backward         TRL ``training_step`` minus the above     scalerl ``timing/backward_s``
  optimizer        TRL pre- to post-optimizer-step callbacks (clipping, AdamW)
                                                             scalerl ``timing/optimizer_s``
  publish          -                                         scalerl ``timing/publish_s`` (weights to the generator)
  other            step wall-clock minus the phases above (logging, the driver loop, TRL's Trainer loop)

Seconds per step, mean over the steps after ``--warmup-steps``, median over interleaved rounds
(``bench/rounds.py``; busy-machine rounds flagged loudly).

**The matmul floor.** Below the table, the step's matrix-multiply work (``compute/flops`` of the run's metrics:
2·P per token generated, each group's prompt once, 6·P per token trained) divided by this machine's GEMM rate on
the model's own weight shapes at the same thread count (measured here, after the rounds): the seconds a step
cannot go below without doing fewer FLOPs, and so the largest ratio to TRL that engineering alone could reach.

    python bench/profile_step.py [--steps 6] [--rounds 3] [--threads N] [--backend inline] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/rounds.py, bench/rl_vs_trl.py
import rl_vs_trl  # noqa: E402
import rounds  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from rich.table import Table  # noqa: E402

from scalerl.build import build_task  # noqa: E402
from scalerl.errors import UserError  # noqa: E402
from scalerl.pipeline.runner import train  # noqa: E402
from scalerl.runlog import read_metrics  # noqa: E402

PHASES = ("generate", "grade", "collate", "logprob_forward", "backward", "optimizer", "publish")


def scalerl_profile(cfg: Any, warmup_steps: int) -> dict[str, float]:
    """Mean seconds per step of each ``timing/<phase>_s`` and of the step, after ``warmup_steps``."""
    with tempfile.TemporaryDirectory(prefix="scalerl-profile-") as out:
        train(cfg, out, show_progress=False)
        lines = [r for r in read_metrics(Path(out)) if "loss" in r]
    walls = [r["time/wall_s"] for r in lines]
    timed = lines[warmup_steps:]
    n = len(timed)
    phases = {p: sum(r.get(f"timing/{p}_s", 0.0) for r in timed) / n for p in PHASES}
    flops = (lines[-1]["compute/flops"] - lines[warmup_steps - 1]["compute/flops"]) / n
    return {**phases, "step": (walls[-1] - walls[warmup_steps - 1]) / n, "flops": flops}


def gemm_rate(model: torch.nn.Module, threads: int, rows: int = 4096, seconds: float = 0.5) -> float:
    """FLOP/s of ``F.linear`` on ``rows`` tokens through each 2-D weight of ``model`` (its own shapes: the
    projections, the MLP and the tied head), at ``threads`` threads, weighted by each shape's FLOPs."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        flops = spent = 0.0
        with torch.no_grad():
            for w in {tuple(p.shape): p for p in model.parameters() if p.dim() == 2}.values():
                x = torch.randn(rows, w.shape[1])
                F.linear(x, w)  # first call: allocation, kernel choice
                reps, t0 = 0, time.perf_counter()
                while time.perf_counter() - t0 < seconds:
                    F.linear(x, w)
                    reps += 1
                spent += time.perf_counter() - t0
                flops += 2.0 * rows * w.shape[0] * w.shape[1] * reps
        return flops / spent
    finally:
        torch.set_num_threads(previous)


class TRLClock:
    """Wraps a ``GRPOTrainer``'s methods to add up seconds per phase; ``snapshot`` marks the warm-up's end."""

    def __init__(self, warmup_steps: int) -> None:
        self.total: dict[str, float] = defaultdict(float)
        self.warm: dict[str, float] = {}
        self.ends: list[float] = []
        self.warmup_steps = warmup_steps

    def wrap(self, obj: Any, method: str, phase: str) -> None:
        fn = getattr(obj, method)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.total[phase] += time.perf_counter() - t0

        setattr(obj, method, timed)

    def instrument(self, trainer: Any) -> None:
        from transformers import TrainerCallback

        for method, phase in (("_generate_single_turn", "generate"), ("_calculate_rewards", "grade"),
                              ("_generate_and_score_completions", "prepare"), ("compute_loss", "logprob_forward"),
                              ("training_step", "training_step")):
            self.wrap(trainer, method, phase)
        clock = self

        class Optimizer(TrainerCallback):
            def on_pre_optimizer_step(self, args, state, control, **kwargs):  # noqa: ANN001
                clock._opt = time.perf_counter()

            def on_optimizer_step(self, args, state, control, **kwargs):  # noqa: ANN001
                clock.total["optimizer"] += time.perf_counter() - clock._opt

            def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
                clock.ends.append(time.perf_counter())
                if len(clock.ends) == clock.warmup_steps:
                    clock.warm = dict(clock.total)

        trainer.add_callback(Optimizer())

    def profile(self) -> dict[str, float]:
        t = {k: v - self.warm.get(k, 0.0) for k, v in self.total.items()}
        n = len(self.ends) - self.warmup_steps
        step = (self.ends[-1] - self.ends[self.warmup_steps - 1]) / n
        # training_step = _prepare_inputs (generation, grading, collation) + compute_loss + backward
        backward = t["training_step"] - t["prepare"] - t["logprob_forward"]
        collate = t["prepare"] - t["generate"] - t["grade"]
        return {"generate": t["generate"] / n, "grade": t["grade"] / n, "collate": collate / n,
                "logprob_forward": t["logprob_forward"] / n, "backward": backward / n,
                "optimizer": t["optimizer"] / n, "publish": 0.0, "step": step}


def trl_profile(cfg: Any, warmup_steps: int, threads: int) -> dict[str, float]:
    clock = TRLClock(warmup_steps)
    rl_vs_trl.run_trl(cfg, warmup_steps, threads, instrument=clock.instrument)
    return clock.profile()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=6, help="RL steps per run, warm-up included")
    ap.add_argument("--warmup-steps", type=int, default=1)
    ap.add_argument("--backend", default="inline", choices=["inline", "local"],
                    help="scalerl backend (local: generator phases overlap the trainer's)")
    rounds.add_arguments(ap)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    if args.steps <= args.warmup_steps or args.warmup_steps < 1:
        ap.error("need 1 <= --warmup-steps < --steps")
    try:
        threads = args.threads if args.backend == "inline" else max(1, args.threads // 2)
        cfg = rl_vs_trl.bench_config(args.overrides, args.steps, args.backend, threads)
        trl_cfg = rl_vs_trl.bench_config(args.overrides, args.steps, "inline", args.threads)
        policy = rl_vs_trl.warmed_policy(cfg, build_task(cfg.task))  # the warm-up cache, outside every timing
        names = (f"scalerl {args.backend}", "TRL GRPOTrainer")
        res = rounds.interleave({names[0]: lambda: scalerl_profile(cfg, args.warmup_steps),
                                 names[1]: lambda: trl_profile(trl_cfg, args.warmup_steps, args.threads)},
                                args.rounds, args.threads)
    except UserError as exc:
        ap.exit(UserError.exit_code, f"error: {exc}\n")
    table = Table(title=f"seconds per RL step by phase: {cfg.batch.prompts} x {cfg.batch.generations}, d_model "
                        f"{cfg.model.d_model}, {cfg.model.n_layers} layers, {args.threads} threads "
                        f"(median over {args.rounds} rounds)")
    table.add_column("phase")
    for name in names:
        table.add_column(name, justify="right")
        table.add_column("share", justify="right")
    med = {name: {k: statistics.median(r.values[k] for r in res.side(name)) for k in (*PHASES, "step")}
           for name in names}
    for phase in (*PHASES, "other", "step"):
        cells = []
        for name in names:
            m = med[name]
            v = m["step"] - sum(m[p] for p in PHASES) if phase == "other" else m[phase]
            cells += [f"{v:.3f}", f"{v / m['step']:.0%}"]
        table.add_row(phase, *cells)
    rounds.console.print(table)
    if args.backend == "local":
        rounds.console.print("local: generate/grade/collate run in the generator process, beside the trainer's "
                             "phases; 'other' is then negative by the overlap")
    rate = gemm_rate(policy, args.threads)
    flops = statistics.median(r.values["flops"] for r in res.side(names[0]))
    floor, scalerl_step, trl_step = flops / rate, med[names[0]]["step"], med[names[1]]["step"]
    rounds.console.print(
        f"matmul floor: {flops / 1e9:.1f} GFLOP per scalerl step (compute/flops) at this machine's GEMM rate on "
        f"the model's weight shapes, {rate / 1e9:.1f} GFLOP/s at {args.threads} threads, = {floor:.3f} s "
        f"({floor / scalerl_step:.0%} of the step). TRL step / scalerl step = {trl_step / scalerl_step:.2f}x; "
        f"TRL step / this floor = {trl_step / floor:.2f}x, the most any change short of fewer FLOPs could reach"
    )
    rounds.warn_if_busy(res)


if __name__ == "__main__":
    main()
