"""Interleaved benchmark rounds, so that a figure holds on a shared machine (issue #10).

Every script in ``bench/`` measures its sides through :func:`interleave`: sides A, B, ... run in turn
(A, B, A, B, ... ``rounds`` times each), each with the same explicit torch thread count. Before every run the
machine is checked twice: the 1-minute load average (reported), and the share of all cores that other
processes kept busy over the last :data:`PROBE_S` seconds, read from ``/proc/stat`` while this process sleeps.
The load average alone cannot tell the bench's own previous run (which leaves ~1 in it for a minute) from
somebody else's work, so the busy test is the ``/proc/stat`` one: first the bench waits up to
:data:`SETTLE_S` seconds for other work to end, then a run that still starts with more than :data:`BUSY_CPU` of
the cores busy gets a loud warning where it happens and again under the summary: its figure measures the other
load as much as the code. A ratio is taken within each round (A and B ran back to back, under about the same
load) and reported as the median with its min-max over rounds.

    results = interleave({"ours": run_ours, "theirs": run_theirs}, rounds=3, threads=2)
    report(results, "title", [("ours", "theirs", "tokens/s", 1.5)])
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import torch
from rich.console import Console
from rich.table import Table

BUSY_LOAD = 0.5  # 1-minute load average worth reporting (it includes the bench's own previous run)
BUSY_CPU = 0.25  # share of all cores busy with other work before a run above which the run is flagged
PROBE_S = 2.0  # seconds over which other processes' CPU use is sampled before each run
SETTLE_S = 30.0  # seconds a run waits at most for the machine to go quiet

console = Console(width=max(110, Console().width))


@dataclass
class Run:
    """One side's run in one round: the load before it and what it measured (name -> value)."""

    side: str
    round: int
    load: float
    values: dict[str, float]
    cpu_busy: float = 0.0  # share of all cores other processes used just before the run


@dataclass
class Results:
    runs: list[Run]
    threads: int

    def side(self, name: str) -> list[Run]:
        return [r for r in self.runs if r.side == name]

    def busy(self) -> list[Run]:
        return [r for r in self.runs if r.cpu_busy > BUSY_CPU]


def _cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies over all cores from ``/proc/stat`` (idle and iowait count as idle)."""
    with open("/proc/stat") as f:
        fields = [float(v) for v in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return sum(fields) - idle, sum(fields)


def cpu_busy(seconds: float = PROBE_S) -> float:
    """Share of all cores busy over the next ``seconds`` while this process sleeps: other processes' load.
    0.0 where ``/proc/stat`` is not available (not Linux)."""
    try:
        b0, t0 = _cpu_times()
        time.sleep(seconds)
        b1, t1 = _cpu_times()
    except (OSError, ValueError, IndexError):
        return 0.0
    return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0


def settle(limit: float | None = None) -> float:
    """Wait (up to ``limit`` seconds, default :data:`SETTLE_S`) until other processes use at most
    :data:`BUSY_CPU` of the cores; return the last reading."""
    deadline = time.monotonic() + (SETTLE_S if limit is None else limit)
    busy = cpu_busy()
    while busy > BUSY_CPU and time.monotonic() < deadline:
        busy = cpu_busy()
    return busy


def run_in_tree(tree: Path, code: str, threads: int | None = None) -> str:
    """Run ``code`` in a fresh interpreter that imports ``scalerl`` from ``tree`` (a checkout or a ``git archive``
    of one) and return the last line it printed; a failure exits with one line. It runs from ``/``: ``python -c``
    puts the working directory first on ``sys.path``, so run from a checkout it would import that checkout's
    ``scalerl`` whatever ``PYTHONPATH`` says, and an A/B would time one tree against itself."""
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd="/")
    if done.returncode:
        sys.exit(f"error: {tree}: {(done.stderr.strip().splitlines() or ['exit status %d' % done.returncode])[-1]}")
    return done.stdout.strip().splitlines()[-1]


def trees_hold_scalerl(*trees: Path) -> bool:
    """Whether every tree holds a ``scalerl/`` package and a ``configs/`` folder (a checkout or a ``git archive`` of
    one, as ``run_in_tree`` needs); the first that does not is named in one line on stderr."""
    for tree in trees:
        if not (tree / "scalerl" / "__init__.py").is_file() or not (tree / "configs").is_dir():
            print(f"error: {tree} holds no scalerl/ package and configs/ folder", file=sys.stderr)
            return False
    return True


def add_arguments(ap) -> None:  # noqa: ANN001  (argparse.ArgumentParser)
    """The options every bench script shares: ``--rounds`` and ``--threads``."""
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per side (>= 3 for a spread)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="torch threads, the same for every side (default: all cores)")


def interleave(sides: Mapping[str, Callable[[], float | Mapping[str, float]]], rounds: int, threads: int,
               warmup: bool = False) -> Results:
    """Run every side once per round, in the same order each round, at ``threads`` torch threads. A side
    returns one figure (stored as ``"value"``) or several by name. ``warmup``: one untimed call of each side
    first (lazy initialisation, caches)."""
    torch.set_num_threads(threads)
    if warmup:
        for fn in sides.values():
            fn()
    runs: list[Run] = []
    for i in range(1, rounds + 1):
        for name, fn in sides.items():
            torch.set_num_threads(threads)  # a side may have changed it (a run sets its own)
            busy = settle()
            load = os.getloadavg()[0]
            if busy > BUSY_CPU:
                _loud(f"round {i}, {name}: starts with {busy:.0%} of the {os.cpu_count()} cores busy with other "
                      f"work (> {BUSY_CPU:.0%}; 1-min load {load:.2f}); its figure includes other processes' load")
            out = fn()
            values = {"value": float(out)} if isinstance(out, (int, float)) else {k: float(v) for k, v in out.items()}
            runs.append(Run(name, i, load, values, busy))
            console.print(f"  round {i} {name}: " + ", ".join(f"{k} {v:,.3g}" for k, v in values.items())
                          + f"  (load {load:.2f}, other work {busy:.0%} of the cores)")
    return Results(runs, threads)


def spread(values: Sequence[float]) -> str:
    """``median [min-max]``."""
    return f"{statistics.median(values):,.3g} [{min(values):,.3g}-{max(values):,.3g}]"


def ratios(results: Results, num: str, den: str, key: str = "value", lower_is_better: bool = False) -> list[float]:
    """``num / den`` of ``key`` within each round (``den / num`` when lower is better, e.g. seconds), so a
    ratio above 1 always means ``num`` did better."""
    a = {r.round: r.values[key] for r in results.side(num)}
    b = {r.round: r.values[key] for r in results.side(den)}
    return [(b[i] / a[i]) if lower_is_better else (a[i] / b[i]) for i in sorted(a) if i in b]


def report(results: Results, title: str, ratio_specs: Sequence[tuple[str, str, str, float | None]] = (),
           lower_is_better: Sequence[str] = ()) -> None:
    """A table of every side's figures (median [min-max] over rounds) and the load before each round, then
    each ratio ``(num, den, key, target or None)`` as median [min-max] over rounds, then the busy-machine
    warning if any. Keys in ``lower_is_better`` (seconds) are inverted so that a ratio > 1 favours ``num``."""
    sides = list(dict.fromkeys(r.side for r in results.runs))
    keys = list(dict.fromkeys(k for r in results.runs for k in r.values))
    table = Table(title=f"{title} ({results.threads} threads, {len(results.side(sides[0]))} rounds, "
                        "median [min-max])")
    table.add_column("side", justify="left")
    for k in keys:
        table.add_column(k, justify="right")
    table.add_column("load / other work before each round", justify="right")
    for s in sides:
        runs = results.side(s)
        table.add_row(s, *[spread([r.values[k] for r in runs]) if all(k in r.values for r in runs) else "-"
                           for k in keys], " ".join(f"{r.load:.2f}/{r.cpu_busy:.0%}" for r in runs))
    console.print(table)
    for num, den, key, target in ratio_specs:
        rs = ratios(results, num, den, key, lower_is_better=key in lower_is_better)
        line = f"{num} / {den} ({key}): {spread(rs)}x" + (f"  (target >= {target}x)" if target else "")
        if target:
            line += "  [green]met[/]" if statistics.median(rs) >= target else "  [red]NOT met[/]"
        console.print(line)
    warn_if_busy(results)


def warn_if_busy(results: Results) -> None:
    """The loud summary warning when any run started on a busy machine."""
    busy = results.busy()
    if busy:
        _loud(f"{len(busy)} of {len(results.runs)} runs started with more than {BUSY_CPU:.0%} of the cores busy "
              f"with other work (max {max(r.cpu_busy for r in busy):.0%}): the figures above include other "
              "processes' load and do not hold; rerun on an idle machine")


def _loud(message: str) -> None:
    console.print(f"[bold white on red] WARNING: {message} [/]")
