import io

from rich.console import Console

from scalerl.config import load_config
from scalerl.progress import RunDisplay


def test_truncation_above_ten_percent_warns_once_per_excursion():
    out = io.StringIO()
    display = RunDisplay(load_config(), enabled=True, console=Console(file=out, width=200))
    with display:
        display.start(0, {})
        for step, trunc in enumerate([0.05, 0.2, 0.3, 0.02, 0.15], start=1):
            display.step({"step": step, "train/truncation_rate": trunc, "train/reward_mean": 0.0, "train/pass_rate": 0.0})
    warnings = [line for line in out.getvalue().splitlines() if "warning:" in line]
    assert [w.split(":")[1].strip() for w in warnings] == ["step 2", "step 5"]
