"""A run with its generator killed N times against the same run uninterrupted (issue #29; docs/scale-out.md,
"what survives what"): wall time, final held-out pass rate, replacements, and whether the two trained the same
prompts in the same order.

Both are ``scalerl train`` on the local backend with ``bench/soak.py``'s small model (``--set`` adds overrides);
the chaos run's generator process is SIGKILLed once the run has trained each of N evenly spaced steps. Under
PPO-off-policy (the default here) the two must agree exactly: same prompts, same final pass rate.

    python3 bench/chaos_run.py --steps 100 --kills 5
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from soak import SMALL, children, trained_steps


def generator_pid(trainer: int) -> int | None:
    """The trainer's generator process (a spawned multiprocessing child that is not the resource tracker)."""
    for pid in children(trainer):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"multiprocessing" in cmd and b"resource_tracker" not in cmd:
            return pid
    return None


def run(out: Path, sets: list[str], kill_at: list[int]) -> tuple[float, list[int]]:
    """Train into ``out``, SIGKILLing the generator after each step in ``kill_at``; (wall seconds, kill steps)."""
    cmd = [sys.executable, "-m", "scalerl", "train", "--out", str(out), "--backend", "local", "--quiet",
           *[x for s in sets for x in ("--set", s)]]
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    killed, pending, last = [], list(kill_at), None
    while proc.poll() is None:
        gen = generator_pid(proc.pid)
        if pending and gen is not None and gen != last and trained_steps(out) >= pending[0]:
            os.kill(gen, signal.SIGKILL)
            killed.append(pending.pop(0))
            last = gen
        time.sleep(0.05)
    _, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"scalerl train failed (exit {proc.returncode}): {err.strip()[-500:]}")
    return time.time() - t0, killed


def summary(out: Path) -> dict[str, object]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "val/pass_rate" in r]
    steps = [r for r in rows if "loss" in r]
    consumed = [json.loads(line)["problem_ids"] for line in (out / "consumed.jsonl").read_text().splitlines()]
    return {"final_pass_rate": evals[-1]["val/pass_rate"], "restarts": steps[-1].get("faults/generator_restarts"),
            "consumed": consumed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--schedule", default="ppo_off_policy")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="extra --set for scalerl train")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="chaos_run_"))
    sets = [*SMALL, f"steps={args.steps}", f"schedule.name={args.schedule}", *args.sets]
    kill_at = [round((i + 1) * args.steps / (args.kills + 1)) for i in range(args.kills)]
    ref_s, _ = run(tmp / "ref", sets, [])
    chaos_s, killed = run(tmp / "chaos", sets, kill_at)
    ref, chaos = summary(tmp / "ref"), summary(tmp / "chaos")
    print(f"{args.steps} steps, {args.schedule}; generator killed after steps {killed}")
    print(f"uninterrupted: {ref_s:.0f} s, final pass rate {ref['final_pass_rate']:.4f}")
    print(f"killed {len(killed)}x:      {chaos_s:.0f} s, final pass rate {chaos['final_pass_rate']:.4f}, "
          f"replacements {chaos['restarts']:.0f}")
    print(f"same prompts, same order: {chaos['consumed'] == ref['consumed']}")


if __name__ == "__main__":
    main()
