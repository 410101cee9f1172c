"""The truncation monitor (§3.8, App. A.6, A.15): the share of generations that hit the hard length cap, checked
against the paper's two lines.

* **5%**: ScaleRL keeps truncations under 5% for more than 90% of its training (App. A.15); above it, the run is
  leaving its healthy range.
* **10%**: where the paper's baseline destabilised (truncations above 10-15% of generations shrink the effective
  batch and training does not recover, App. A.6).

Truncated samples are left out of the loss by default (``algo.truncated``, ``pipeline/prepare.py``), so the rate
is also the share of the batch lost to truncation.
"""

from __future__ import annotations

from dataclasses import dataclass

# (threshold, what crossing it means), highest first
LEVELS: tuple[tuple[float, str], ...] = (
    (0.10, "above 10% the paper saw training destabilise and not recover (§3.8, App. A.6)"),
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
