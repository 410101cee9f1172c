"""A soak: one long ``scalerl train`` on the local backend, evaluating every 5 steps, watched from outside for
leaks (issue #29; docs/scale-out.md, "what survives what").

Every ``--every`` steps (read from the run's own ``metrics.jsonl``) it samples, for the trainer process and its
generator process: resident memory (psutil when installed, else ``/proc/<pid>/status``), open file
descriptors (``/proc/<pid>/fd``) and shared-memory mappings (``/dev/shm`` and torch's shared segments in
``/proc/<pid>/maps``), plus the entries in ``/dev/shm``. After the warm-up (the first ``--warmup`` share of the
steps: allocator pools, caches and the forecaster's first fits settle there) it prints each measure's growth
against its bound and exits 1 when one is exceeded:

* resident memory (trainer + generator): at most ``--rss-bound-mb`` (default 64 MB) over the run;
* open descriptors and shared-memory mappings: no growth (a few of slack, ``--fd-slack``, for a queue
  mid-message when sampled);
* ``/dev/shm`` entries: no growth, the fewest of the last three samples against the first (the count is
  machine-wide: other processes add and remove entries; run it alone).

The model is a small one (``--set`` adds overrides), so that 1,000 steps take minutes, not hours.

    python3 bench/soak.py --steps 1000          # the issue's soak
    python3 bench/soak.py --steps 150 --every 10 # a short one
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SMALL = ["model.d_model=64", "model.n_layers=2", "model.n_heads=2", "batch.prompts=8", "batch.generations=4",
         "warmup.steps=0", "eval.every=5", "eval.n_prompts=16", "eval.n_samples=1", "checkpoint_every=50",
         "tensorboard=false", "threads=1"]


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` in MB (psutil when installed, else /proc)."""
    try:
        import psutil

        return psutil.Process(pid).memory_info().rss / 2**20
    except ImportError:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def shm_maps(pid: int) -> int:
    """Distinct shared-memory files mapped by ``pid`` (``/dev/shm`` and torch's ``torch_*`` segments)."""
    paths = set()
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and ("/dev/shm" in parts[5] or "torch_" in parts[5]):
            paths.add(parts[5])
    return len(paths)


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (the generator; multiprocessing's resource tracker): psutil, else /proc."""
    try:
        import psutil

        return [c.pid for c in psutil.Process(pid).children()]
    except ImportError:
        pass
    out = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:  # the parent pid is the second field after the command name in /proc/<pid>/stat
            if int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    return out


def sample(pid: int, step: int) -> dict[str, float]:
    pids = [pid, *children(pid)]
    row = {"step": step, "rss_mb": 0.0, "fds": 0, "shm_maps": 0}
    for p in pids:
        try:
            row["rss_mb"] += rss_mb(p)
            row["fds"] += open_fds(p)
            row["shm_maps"] += shm_maps(p)
        except (OSError, ProcessLookupError):
            continue  # a child that ended between listing and reading
    row["dev_shm"] = len(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else 0
    row["procs"] = len(pids)
    return row


def trained_steps(out: Path) -> int:
    path = out / "consumed.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def settled(rows: list[dict], key: str) -> float:
    """The fewest of ``key`` over the last 3 samples: what stays open, not what is open at one moment."""
    return min(r[key] for r in rows[-3:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--every", type=int, default=10, help="sample every N trained steps")
    ap.add_argument("--warmup", type=float, default=0.2, help="share of the steps left out as warm-up")
    ap.add_argument("--rss-bound-mb", type=float, default=64.0)
    ap.add_argument("--fd-slack", type=int, default=4)
    ap.add_argument("--out", type=Path, default=None, help="run directory (default: a new temporary one)")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="extra --set for scalerl train")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="soak_")) / "run"
    cmd = [sys.executable, "-m", "scalerl", "train", "--out", str(out), "--backend", "local", "--quiet",
           *[x for s in [*SMALL, f"steps={args.steps}", *args.sets] for x in ("--set", s)]]
    print(" ".join(cmd), flush=True)
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    rows, next_at = [], 0
    while proc.poll() is None:
        step = trained_steps(out)
        if step >= next_at:
            rows.append(sample(proc.pid, step))
            print(json.dumps(rows[-1]), flush=True)
            next_at = (step // args.every + 1) * args.every
        time.sleep(0.2)
    err = proc.stderr.read() if proc.stderr else ""
    if proc.returncode:
        raise SystemExit(f"scalerl train failed (exit {proc.returncode}): {err.strip()[-500:]}")
    warm = [r for r in rows if r["step"] >= args.warmup * args.steps]
    if len(warm) < 2:
        raise SystemExit("too few samples after the warm-up; lower --every or raise --steps")
    first = warm[0]
    peak = max(r["rss_mb"] for r in warm)
    checks = [
        ("resident memory (MB)", first["rss_mb"], peak, peak - first["rss_mb"] <= args.rss_bound_mb,
         f"growth <= {args.rss_bound_mb:g} MB"),
        # a leak raises every later sample; a file held open for the moment a checkpoint or an evaluation is
        # written raises one: the settled count is the fewest of the last 3 samples (the peak is printed below)
        *[(name, first[key], settled(warm, key), settled(warm, key) - first[key] <= args.fd_slack,
           f"growth <= {args.fd_slack} (fewest of the last 3 samples)")
          for name, key in (("open file descriptors", "fds"), ("shared-memory mappings", "shm_maps"))],
        ("/dev/shm entries", first["dev_shm"], settled(warm, "dev_shm"),
         settled(warm, "dev_shm") <= first["dev_shm"], "no growth (fewest of the last 3 samples)"),
    ]
    print(f"\n{args.steps} steps in {time.time() - t0:.0f} s; {len(rows)} samples, {len(warm)} after the warm-up "
          f"(from step {first['step']})")
    for name, start, end, ok, bound in checks:
        print(f"{name:26s} {start:10.1f} -> {end:10.1f} (growth {end - start:+.1f}; bound {bound}): "
              f"{'ok' if ok else 'EXCEEDED'}")
    print(f"peaks after the warm-up: {max(r['fds'] for r in warm)} descriptors, "
          f"{max(r['shm_maps'] for r in warm)} shared-memory mappings")
    sys.exit(0 if all(c[3] for c in checks) else 1)


if __name__ == "__main__":
    main()
