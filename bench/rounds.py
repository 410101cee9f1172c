"""Interleaved benchmark rounds, so that a figure holds on a shared machine (issue #10).

Every script in ``bench/`` measures its sides through :func:`interleave`: sides A, B, ... run in turn
(A, B, A, B, ... ``rounds`` times each), each with the same explicit torch thread count, and the 1-minute load
average is read before every run. A ratio is taken within each round (A and B ran back to back, under about
the same load) and reported as the median with its min-max over rounds. A run that started on a busy machine
(load above ``BUSY_LOAD``) gets a loud warning where it happens and again under the summary: its figure measures
the other load as much as the code.

    results = interleave({"ours": run_ours, "theirs": run_theirs}, rounds=3, threads=2)
    report(results, "title", [("ours", "theirs", "tokens/s", 1.5)])
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch
from rich.console import Console
from rich.table import Table

BUSY_LOAD = 0.5  # 1-minute load average above which a round is flagged

console = Console(width=max(110, Console().width))


@dataclass
class Run:
    """One side's run in one round: the load before it and what it measured (name -> value)."""

    side: str
    round: int
    load: float
    values: dict[str, float]


@dataclass
class Results:
    runs: list[Run]
    threads: int

    def side(self, name: str) -> list[Run]:
        return [r for r in self.runs if r.side == name]

    def busy(self) -> list[Run]:
        return [r for r in self.runs if r.load > BUSY_LOAD]


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
            load = os.getloadavg()[0]
            if load > BUSY_LOAD:
                _loud(f"round {i}, {name}: starts at 1-min load {load:.2f} (> {BUSY_LOAD}) on {os.cpu_count()} "
                      "cores; its figure includes other processes' load")
            out = fn()
            values = {"value": float(out)} if isinstance(out, (int, float)) else {k: float(v) for k, v in out.items()}
            runs.append(Run(name, i, load, values))
            console.print(f"  round {i} {name}: " + ", ".join(f"{k} {v:,.3g}" for k, v in values.items())
                          + f"  (load {load:.2f})")
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
    table.add_column("load before each round", justify="right")
    for s in sides:
        runs = results.side(s)
        table.add_row(s, *[spread([r.values[k] for r in runs]) if all(k in r.values for r in runs) else "-"
                           for k in keys], " ".join(f"{r.load:.2f}" for r in runs))
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
        _loud(f"{len(busy)} of {len(results.runs)} runs started with 1-min load > {BUSY_LOAD} "
              f"(max {max(r.load for r in busy):.2f}): the figures above include other processes' load and do "
              "not hold; rerun on an idle machine")


def _loud(message: str) -> None:
    console.print(f"[bold white on red] WARNING: {message} [/]")
