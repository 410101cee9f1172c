"""Progress for long work: step, reward, validation pass rate and the forecast A ± CI.

On a terminal a live rich display (a bar with the latest status beside it, evaluations printed above it);
anywhere else (a log file, CI, ``nohup``) plain whole lines, one per step and one per evaluation, with no
live display, no line cut at the terminal's width and no source-location column. :func:`make_console` is the
console every command prints through, so summaries and tables read the same way in a log. The display also
warns when the truncation rate crosses the paper's lines (:class:`TruncationMonitor`, at the end of this file).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from scalerl.config import RunConfig
from scalerl.forecast import describe_record

PLAIN_WIDTH = 1000  # where output is not a terminal: lines are not wrapped, tables get the room they need


def make_console(stderr: bool = False, **kwargs: Any) -> Console:
    """A rich console on stdout (or stderr): as rich makes it on a terminal; elsewhere (a file, a pipe) with
    no wrapping at 80 columns, so each message is one whole line in a log."""
    console = Console(stderr=stderr, **kwargs)
    if not console.is_terminal and "width" not in kwargs:
        console.soft_wrap = True
        console.width = PLAIN_WIDTH
    return console


def _number(value: Any) -> float | None:
    """A metrics value as a float; None where it is missing or not a number (a skipped step logs None)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _finite(value: Any) -> float | None:
    """:func:`_number`, and None for NaN or ±inf too."""
    number = _number(value)
    return number if number is not None and math.isfinite(number) else None


def _fmt(value: Any, spec: str) -> str:
    """A metrics value formatted with ``spec``; ``-`` where it is missing or not a number (NaN shows as nan)."""
    number = _number(value)
    return "-" if number is None else format(number, spec)


class RunDisplay:
    """A run's progress: on a terminal the live display, elsewhere plain lines (module docstring);
    ``enabled=False`` (``--quiet``) prints warnings only."""

    def __init__(self, cfg: RunConfig, enabled: bool = True, console: Console | None = None) -> None:
        self.cfg = cfg
        self.enabled = enabled
        self.console = console or make_console(stderr=True)
        self.live = enabled and self.console.is_terminal
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"),
            console=self.console,
            disable=not self.live,
            transient=False,
        )
        self._task = None
        self._truncation = TruncationMonitor()
        self._train = ""
        self._val = ""

    def __enter__(self) -> "RunDisplay":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def start(self, step: int, warm: dict[str, Any]) -> None:
        if warm and self.enabled:
            self.console.print(f"warm-up: {', '.join(f'{k}={v:.3g}' if isinstance(v, float) else f'{k}={v}' for k, v in warm.items())}")
        self._task = self.progress.add_task(self.cfg.name, total=self.cfg.steps, completed=step, status="")

    def _refresh(self, completed: int | None = None) -> None:
        if self._task is not None:
            kw = {} if completed is None else {"completed": completed}
            self.progress.update(self._task, status=f"{self._train}  {self._val}", **kw)

    def _line(self, record: dict[str, Any]) -> None:
        """Without the live display: the status as one plain line."""
        if self.enabled and not self.live:
            elapsed = int(max(_finite(record.get("time/wall_s")) or 0.0, 0.0))
            self.console.print(f"{self.cfg.name} step {record.get('step', '?')}/{self.cfg.steps} "
                               f"{elapsed // 3600}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d}  {self._train}",
                               highlight=False)

    def step(self, record: dict[str, Any]) -> None:
        """One training step's row; a key it lacks, or holds as None or NaN (a skipped step), shows as ``-``/nan."""
        self._train = (f"reward {_fmt(record.get('train/reward_mean'), '+.3f')}  "
                       f"pass {_fmt(record.get('train/pass_rate'), '.3f')}")
        trunc = _finite(record.get("train/truncation_rate")) or 0.0
        if trunc > LEVELS[-1][0]:
            self._train += f"  [red]truncation {trunc:.0%}[/red]"
        step = _finite(record.get("step"))
        step = int(step) if step is not None else None
        if step is not None:
            warning = self._truncation.check(step, trunc)  # once per climb above a line (5%, 10%)
            if warning is not None:
                self.console.print(f"[yellow]warning:[/yellow] {warning}")
        self._refresh(step)
        self._line(record)

    def eval(self, record: dict[str, Any], stop: str | None = None) -> None:
        """One evaluation: the validation pass rate, the forecast, and (``stop``, with ``--stop-when``) how far
        the run is from each of its stop conditions."""
        self._val = f"val {_fmt(record.get('val/pass_rate'), '.3f')}"
        # describe_record reads numbers: a value logged as None (or not a number) is left out, as if not logged
        forecast = describe_record({k: v for k, v in record.items() if k == "step" or _number(v) is not None})
        if forecast is not None:
            self._val += f"  forecast {forecast}"
        if stop:
            self._val += f"  stop-when: {stop}"
        self._refresh()
        if not self.enabled:
            return
        tiers = [(k.split("/")[2], v) for k, v in record.items() if k.startswith("val/tier/")]
        shown = ", ".join(f"{t} {_fmt(v, '.3f')}" for t, v in tiers)
        by_tier = f"  (by tier: {shown})" if tiers else ""
        self.console.print(f"step {record.get('step', '?')}: {self._val}{by_tier}", highlight=False)


# ------------------------------------------------------------------------------------------ truncation
# The truncation monitor (App. A.6, A.15): the share of generations that hit the hard length cap, checked
# against the paper's two lines.
#
# * **5%**: ScaleRL keeps truncations under 5% for more than 90% of its training (App. A.15); above it, the run is
#   leaving its healthy range.
# * **10%**: where the paper's baseline destabilised (truncations above 10-15% of generations shrink the effective
#   batch and training does not recover, App. A.6).
#
# Truncated samples are left out of the loss by default (``algo.truncated``, ``pipeline/prepare.py``), so the rate
# is also the share of the batch lost to truncation.

# (threshold, what crossing it means), highest first
LEVELS: tuple[tuple[float, str], ...] = (
    (0.10, "above 10% the paper saw training destabilise and not recover (App. A.6, A.15)"),
    (0.05, "above 5%: ScaleRL keeps truncations under 5% for most of training (App. A.15)"),
)


def level(rate: float) -> int | None:
    """Index into ``LEVELS`` of the highest line ``rate`` is above (None: below every line)."""
    return next((i for i, (line, _) in enumerate(LEVELS) if rate > line), None)


@dataclass
class TruncationMonitor:
    """Warns once each time the truncation rate climbs above a higher line than it was above at the last step."""

    _level: int | None = None

    def check(self, step: int, rate: float) -> str | None:
        """The warning for ``rate`` at ``step``, or None when it crosses no new line."""
        now = level(rate)
        warn = now is not None and (self._level is None or now < self._level)
        self._level = now
        if not warn:
            return None
        return f"step {step}: {rate:.0%} of generations were truncated ({LEVELS[now][1]})"
