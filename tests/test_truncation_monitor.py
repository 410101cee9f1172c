"""The truncation monitor warns at the paper's lines, 5% (App. A.15) and 10% (App. A.6), once per climb."""

import io

from rich.console import Console

from scalerl.config import load_config
from scalerl.progress import TruncationMonitor
from scalerl.progress import RunDisplay


def test_monitor_warns_once_per_line_crossed():
    m = TruncationMonitor()
    rates = [0.02, 0.06, 0.07, 0.12, 0.11, 0.06, 0.03, 0.06, 0.30]
    warned = [(s, m.check(s, r)) for s, r in enumerate(rates)]
    hits = [(s, w) for s, w in warned if w is not None]
    assert [s for s, _ in hits] == [1, 3, 7, 8]
    assert "5%" in hits[0][1] and "A.15" in hits[0][1]
    assert "10%" in hits[1][1] and "A.6" in hits[1][1]
    assert hits[2][1].startswith("step 7: 6%")


def test_run_display_warns_at_five_percent():
    out = io.StringIO()
    display = RunDisplay(load_config("scalerl"), enabled=False, console=Console(file=out, width=200))
    display.start(0, {})
    for step, rate in enumerate([0.0, 0.06, 0.06, 0.11], start=1):
        display.step({"step": step, "train/truncation_rate": rate})
    text = out.getvalue()
    assert text.count("warning") == 2
    assert "step 2: 6% of generations were truncated" in text and "step 4: 11%" in text
