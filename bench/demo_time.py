"""``scalerl demo`` from an empty warm-up cache: its wall time and its checks, one scalerl tree against another
(issue #31: the time until a user sees a forecast they can check).

Each side runs ``python -m scalerl demo`` in a fresh interpreter that imports ``scalerl`` from its tree (a
``git archive`` of an older commit holding ``scalerl/`` and ``configs/``, or this checkout), from ``/`` (see
``rounds.run_in_tree``), with ``SCALERL_CACHE`` set to a new empty folder, so every run trains its warm-up. Round
``i`` runs every side with ``--set seed=<--seed + i - 1>`` (the run's seed is also the base model's), so each
side's checks are seen on as many seeds as there are rounds. The sides run in interleaved rounds
(``bench/rounds.py``) and the time ratio is taken within a round.

Per run: the wall seconds of the whole command, the warm-up's own seconds (its ``warm-up:`` line), the exit status
(non-zero when a check failed), how many of the demo's checks passed, the fitted A, and the training compute the
run metered (``compute/device_hours`` at its end: the curve's x-axis, which a speed-up should leave about alone),
and the warm-up's skill as the run measured it at step 0 (``start``, ``start:<domain>``, ``start:tier/<tier>``).

    git archive c6a5b76 scalerl configs | tar -x -C /tmp/before
    python bench/demo_time.py /tmp/before --rounds 3
    python bench/demo_time.py /tmp/before --rounds 3 --demo-args "--preset multitask"
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rounds  # noqa: E402

HERE = Path(__file__).resolve().parent


def parse_demo(output: str) -> dict[str, float]:
    """The warm-up's seconds, the checks passed and failed, and A, from the demo's printed output."""
    out: dict[str, float] = {}
    warm = re.search(r"warm-up: .*?seconds=([0-9.]+)", output)
    if warm:
        out["warmup_s"] = float(warm.group(1))
    out["checks_passed"] = float(len(re.findall(r"^check: pass", output, re.M)))
    out["checks_failed"] = float(len(re.findall(r"^check: FAIL", output, re.M)))
    a = re.search(r"^forecast: A = ([0-9.]+)", output, re.M)
    if a:
        out["A"] = float(a.group(1))
    return out


def metered_hours(run_dir: Path) -> dict[str, float]:
    """``{"device_hours": the largest compute/device_hours the run logged}``; empty when it logged none."""
    from scalerl.runlog import read_metrics

    hours = [r["compute/device_hours"] for r in read_metrics(run_dir) if "compute/device_hours" in r]
    return {"device_hours": max(hours)} if hours else {}


def start_skill(run_dir: Path) -> dict[str, float]:
    """The warm-up's skill as the run itself measured it: the pass rates of its first evaluation (step 0, before
    any RL), overall and per domain and tier, as ``start`` and ``start:<domain or tier>``."""
    from scalerl.runlog import read_metrics

    first = next((r for r in read_metrics(run_dir) if "val/pass_rate" in r), None)
    if first is None:
        return {}
    names = {k: k.removeprefix("val/").removesuffix("/pass_rate") for k in first
             if k.startswith("val/") and k.endswith("/pass_rate")}
    return {"start" if k == "val/pass_rate" else f"start:{name}": first[k] for k, name in names.items()}


def run_demo(tree: Path, seed: int, demo_args: list[str], threads: int) -> dict[str, float]:
    """One ``scalerl demo`` from ``tree`` with an empty warm-up cache; its figures (``parse_demo``) and seconds."""
    with tempfile.TemporaryDirectory(prefix="scalerl-demo-time-") as tmp:
        env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve()), "SCALERL_CACHE": str(Path(tmp) / "cache"),
               "OMP_NUM_THREADS": str(threads), "COLUMNS": "200"}
        cmd = [sys.executable, "-m", "scalerl", "demo", "--out", str(Path(tmp) / "run"), "--set", f"seed={seed}",
               *demo_args]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd="/")
        seconds = time.perf_counter() - t0
        hours = metered_hours(Path(tmp) / "run")
        skill = start_skill(Path(tmp) / "run")
    text = done.stdout + done.stderr
    if "check:" not in text:
        sys.exit(f"error: {tree}: the demo printed no checks (exit status {done.returncode}): "
                 f"{(text.strip().splitlines() or [''])[-1]}")
    return {"seconds": seconds, "exit_status": float(done.returncode), **parse_demo(text), **hours, **skill}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("baseline", type=Path, help="a tree holding the baseline's scalerl/ and configs/")
    ap.add_argument("--ours", type=Path, default=HERE.parent, help="a tree holding ours (default: this checkout)")
    ap.add_argument("--seed", type=int, default=0, help="the runs' seed in round 1 (round i: seed + i - 1)")
    ap.add_argument("--demo-args", default="", help="more arguments for `scalerl demo`, e.g. \"--preset multitask\"")
    rounds.add_arguments(ap)
    args = ap.parse_args(argv)
    if not rounds.trees_hold_scalerl(args.baseline, args.ours):
        return 2
    demo_args = shlex.split(args.demo_args)

    def side(tree: Path):  # noqa: ANN202
        calls = iter(range(args.seed, args.seed + args.rounds))  # a side's i-th call is round i
        return lambda: run_demo(tree, next(calls), demo_args, args.threads)

    res = rounds.interleave({"baseline": side(args.baseline), "ours": side(args.ours)},
                            rounds=args.rounds, threads=args.threads)
    keys = ["seconds", "warmup_s", "exit_status", "checks_passed", "checks_failed", "A", "device_hours"]
    keys += sorted({k for r in res.runs for k in r.values if k.startswith("start")})
    print(f"\n`scalerl demo {args.demo_args}` from an empty cache, seeds {args.seed}..{args.seed + args.rounds - 1}")
    for name in ("baseline", "ours"):
        for r in res.side(name):
            print(f"  {name:>8} round {r.round}: " + ", ".join(f"{k} {r.values[k]:.4g}" for k in keys
                                                               if k in r.values))
        secs = [r.values["seconds"] for r in res.side(name)]
        print(f"  {name:>8}: {statistics.median(secs):.1f} s [{min(secs):.1f}-{max(secs):.1f}]")
    ratio = rounds.ratios(res, "ours", "baseline", "seconds", lower_is_better=False)
    print(f"  ours / baseline wall time: {rounds.spread(ratio)} (within-round, median [min-max] over "
          f"{len(ratio)} rounds; the issue asks for <= 0.45)")
    busy = res.busy()
    if busy:
        print(f"  WARNING: {len(busy)} run(s) started on a busy machine: their seconds include other work")
    return 0


if __name__ == "__main__":
    sys.exit(main())
