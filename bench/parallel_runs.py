"""Two runs at a time (``--jobs 2``, as ``bench/replicate.py`` runs) against one run at a time, in RL steps per second.

Each side starts real ``scalerl train`` processes on the default testbed (cached warm-up, ``model.seed=0``) for
``--steps`` RL steps with a token evaluation, and reads the RL rate from the run's own ``metrics.jsonl``
(steps 1..N over their wall time, so start-up and the step-0 evaluation are left out):

* ``inline-1t``: one inline run on one torch thread, alone (what each of the two runs gets with ``--jobs 2``);
* ``jobs2``: two such runs at once (seeds 0 and 1); the figure is their summed rate, ``per_run`` each one's mean;
* ``inline-2t``: one inline run on both cores (a sequential sweep of inline runs);
* ``local``: one run on the default ``local`` backend (generator and trainer in two processes, one core each).

Ratios: ``jobs2 / inline-2t`` and ``jobs2 / local`` (is running two at a time worth it?), and ``jobs2 per run /
inline-1t`` (does a run slow down beside another? 1.0 means not: equal minutes are then equal device time).

    python3 bench/parallel_runs.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from rounds import add_arguments, interleave, report

COMMON = ["--set", "model.seed=0", "--set", "eval.every=100000", "--set", "eval.n_prompts=16",
          "--set", "eval.n_samples=1", "--set", "tensorboard=false", "--quiet"]


def _start(out: Path, steps: int, seed: int, *sets: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "scalerl", "train", "--out", str(out), "--set", f"steps={steps}",
           "--set", f"seed={seed}", *COMMON, *[x for s in sets for x in ("--set", s)]]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _rate(proc: subprocess.Popen, out: Path) -> float:
    """RL steps per second of a finished run: steps 1..N over the wall time between them."""
    _, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"scalerl train failed ({out}): {err.strip().splitlines()[-1] if err.strip() else '?'}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["step"] >= 1 and "val/pass_rate" not in r]
    return (steps[-1]["step"] - steps[0]["step"]) / (steps[-1]["time/wall_s"] - steps[0]["time/wall_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(ap)
    ap.add_argument("--steps", type=int, default=16, help="RL steps per run")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="parallel_runs_"))
    count = iter(range(10**6))

    def run(*procs: tuple[int, tuple[str, ...]]) -> list[float]:
        outs = [tmp / f"r{next(count)}" for _ in procs]
        started = [_start(o, args.steps, seed, *sets) for o, (seed, sets) in zip(outs, procs)]
        return [_rate(p, o) for p, o in zip(started, outs)]

    one = ("backend=inline", "threads=1")

    def alone() -> dict[str, float]:
        rate = run((0, one))[0]
        return {"value": rate, "per_run": rate}

    def jobs2() -> dict[str, float]:
        rates = run((0, one), (1, one))
        return {"value": sum(rates), "per_run": sum(rates) / len(rates)}

    sides = {
        "inline-1t": alone,
        "jobs2": jobs2,
        "inline-2t": lambda: run((0, ("backend=inline", "threads=2")))[0],
        "local": lambda: run((0, ()))[0],
    }
    results = interleave(sides, rounds=args.rounds, threads=args.threads)
    report(results, f"RL steps/s, {args.steps}-step runs",
           [("jobs2", "inline-2t", "value", None), ("jobs2", "local", "value", None),
            ("jobs2", "inline-1t", "per_run", None)])


if __name__ == "__main__":
    main()
