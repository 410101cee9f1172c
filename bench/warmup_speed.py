"""The supervised warm-up: its wall time and the skill it leaves, for today's settings against others (issue #31).

Each side warms a fresh model (the preset's model at ``--seed``, nothing cached) up with its own
``warmup.steps`` / ``warmup.batch_size`` / ``warmup.lr`` / ``warmup.optimizer`` (``steps,batch,lr[,optimizer]``;
the optimizer's own decay, ``muon_lr`` as configured) and is timed; then the warmed-up model is evaluated on the
task's validation set (the preset's evaluation, ``eval.n_prompts`` × ``eval.n_samples``, fixed sampling seed):

  pass       the overall pass rate, the start of RL;
  tier/...   each tier's pass rate (the testbed: the taught tier near its ceiling, the untaught one near 0);
  <domain>   each domain's pass rate, for a task mixture (``--preset multitask``);
  habit      the habit RL removes (§ App. A.6; ``answer_slip`` of the testbed): among samples for taught problems
             with a negative answer, the share that state the answer without its minus sign;
  op/...     each operation's pass rate, for a task whose problems name one (the strings domain's rev, sort,
             count; ``rev`` and ``sort`` carry that domain's habit, ``case_slip``, ``count`` none).

Sides run in interleaved rounds (``bench/rounds.py``); round ``i`` uses model seed ``--seed + i - 1`` on every
side, so the seed spread of each side's skill is over rounds and the time ratio is taken within a round.

    python bench/warmup_speed.py --rounds 3                     # AdamW's 1280 steps against the preset's warm-up
    python bench/warmup_speed.py --fast 320,64,0.003,muon --rounds 3
    python bench/warmup_speed.py --side base=1280,64,0.003,adamw --side a=400,64,0.006,adamw --rounds 2 --skill-only
"""

from __future__ import annotations

import argparse
import collections
import itertools
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/rounds.py
import rounds  # noqa: E402

from scalerl.build import build_length_control, build_model, build_task
from scalerl.config import WarmupConfig, load_config
from scalerl.engines.registry import native_engine
from scalerl.evaluate import evaluate
from scalerl.models.registry import prompt_encoder
from scalerl.models.warmup import warmup
from scalerl.tasks.answers import THINK_CLOSE
from scalerl.tasks.grading import grade
from scalerl.timing import Stopwatch

Side = tuple[int, int, float, str]  # steps, batch size, lr, optimizer
TODAY: Side = (1280, 64, 3e-3, "adamw")  # the warm-up before issue #31


def parse_side(text: str) -> Side:
    steps, batch, lr, *opt = text.split(",")
    return int(steps), int(batch), float(lr), (opt[0] if opt else "muon")


def habit_rate(engine: Any, encode: Any, task: Any, n_samples: int, length: Any, seed: int) -> float:
    """Share of samples for taught validation problems with a negative answer that state ``|answer|``."""
    problems = [p for p in task.val_problems() if p.answer.startswith("-") and task.demonstration(p) is not None]
    if not problems:
        return float("nan")
    groups = engine.generate([encode(p.prompt) for p in problems], n=n_samples, length=length, seed=seed)
    slips = total = 0
    for p, group in zip(problems, groups):
        for s in group:
            stated = s.text.split(THINK_CLOSE)[-1].strip()
            slips += stated == p.answer[1:]
            total += 1
    return slips / max(total, 1)


def op_rates(engine: Any, encode: Any, task: Any, n_samples: int, length: Any, seed: int) -> dict[str, float]:
    """Pass rate per operation (``meta["op"]``: the strings task's ``rev``, ``sort``, ``count``) over the validation
    problems that name one, as ``op/<name>``; empty for a task without operations."""
    problems = [p for p in task.val_problems() if p.meta.get("op")]
    if not problems:
        return {}
    groups = engine.generate([encode(p.prompt) for p in problems], n=n_samples, length=length, seed=seed)
    right: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    for p, group in zip(problems, groups):
        for s in group:
            right[p.meta["op"]] += grade(task, p, s.text).correct
            total[p.meta["op"]] += 1
    return {f"op/{op}": right[op] / total[op] for op in sorted(total)}


def run_side(cfg: Any, task: Any, side: Side, seed: int, skill_only: bool) -> dict[str, float]:
    """Warm a fresh model up with ``side`` and measure its time and skill on ``task``."""
    steps, batch, lr, optimizer = side
    bundle = build_model(cfg.model, seed)
    wcfg = WarmupConfig(**{**cfg.warmup.model_dump(), "steps": steps, "batch_size": batch, "lr": lr,
                           "optimizer": optimizer, "cache": False})
    watch = Stopwatch().start()
    stats = warmup(bundle.model, bundle.tokenizer, task, wcfg, seed=seed)
    seconds = watch.stop()
    bundle.model.eval()
    engine = native_engine(bundle, fp32_head=cfg.algo.fp32_head)
    encode, length = prompt_encoder(bundle), build_length_control(cfg)
    val = list(task.val_problems())[: cfg.eval.n_prompts or None]
    res = evaluate(engine, encode, task, val, cfg.eval.n_samples, length, seed=1000)
    out = {"seconds": seconds, "loss_last": stats["loss_last"], "pass": res["val/pass_rate"],
           "habit": habit_rate(engine, encode, task, cfg.eval.n_samples, length, seed=2000),
           **op_rates(engine, encode, task, cfg.eval.n_samples, length, seed=3000)}
    out.update({k.removeprefix("val/").removesuffix("/pass_rate"): v for k, v in res.items()
                if k.startswith("val/") and k.endswith("/pass_rate") and k != "val/pass_rate"})  # tiers, domains
    if skill_only:
        out.pop("seconds")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    rounds.add_arguments(ap)
    ap.add_argument("--preset", default="scalerl")
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--fast", default=None, help="steps,batch,lr[,optimizer] of the side compared with today's "
                    "(default: the preset's own warm-up)")
    ap.add_argument("--side", action="append", default=[],
                    help="name=steps,batch,lr[,optimizer] (replaces today/--fast; optimizer default muon)")
    ap.add_argument("--seed", type=int, default=0, help="model seed of round 1 (round i: seed + i - 1)")
    ap.add_argument("--skill-only", action="store_true", help="no timing (skill figures hold under load)")
    args = ap.parse_args()
    cfg = load_config(args.preset, None, args.sets)
    if args.side:
        sides = {name: parse_side(spec) for name, spec in (s.split("=", 1) for s in args.side)}
    else:
        own = cfg.warmup.resolved(pretrained=False)
        fast = parse_side(args.fast) if args.fast else (own.steps, own.batch_size, own.lr, own.optimizer)
        sides = {"today": TODAY, "fast": fast}
    task = build_task(cfg.task)

    def side_fn(spec: tuple[int, int, float]):  # noqa: ANN202
        seeds = itertools.count(args.seed)  # a side's i-th call is round i: model seed args.seed + i - 1
        return lambda: run_side(cfg, task, spec, next(seeds), args.skill_only)

    names = list(sides)
    res = rounds.interleave({n: side_fn(sides[n]) for n in names},
                            rounds=args.rounds, threads=args.threads)
    keys = sorted({k for r in res.runs for k in r.values})
    print(f"\nwarm-up sides (steps, batch, lr, optimizer): {sides}; model seeds {args.seed}..{args.seed + args.rounds - 1}")
    for n in names:
        vals = {k: [r.values[k] for r in res.side(n) if k in r.values] for k in keys}
        print(f"  {n:>8}: " + "; ".join(f"{k} {statistics.median(v):.4g} [{min(v):.4g}-{max(v):.4g}]"
                                       for k, v in vals.items() if v))
    if not args.skill_only and len(names) >= 2:
        for n in names[1:]:
            r = rounds.ratios(res, n, names[0], "seconds", lower_is_better=True)
            print(f"  {n} is {rounds.spread(r)}x as fast as {names[0]} (within-round ratio of seconds, "
                  f"median [min-max] over {len(r)} rounds)")
        busy = res.busy()
        if busy:
            print(f"  WARNING: {len(busy)} run(s) started on a busy machine: their seconds include other work")


if __name__ == "__main__":
    main()
