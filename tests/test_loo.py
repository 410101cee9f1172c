"""Leave-one-out sweeps (§4, Fig. 7): the plan, the command end to end, and a real short LOO sweep whose report is
opened in headless Chromium."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import numpy as np
import pytest
import yaml

from scalerl.config import CONFIG_DIR
from scalerl.curves.synthetic import CurveParams
from scalerl.errors import UserError
from scalerl.experiments import sweep as sweep_module
from scalerl.experiments.loo import MINUTES_STEP_CAP, budget_overrides, loo_sweep
from scalerl.experiments.synthetic_runs import SyntheticRunFn
from scalerl.presets import LOO_COMPONENTS, config_diff, loo_variants

CHROMIUM = "/usr/bin/chromium"


def test_plan_is_the_base_and_each_variant_with_one_component_reverted():
    sweep = loo_sweep("scalerl", ["model.d_model=32"], budget_steps=7)
    assert [r.name for r in sweep.runs] == ["scalerl", *loo_variants("scalerl")]
    cfgs = sweep.configs()
    base = cfgs["scalerl"]
    assert set(cfgs) - {"scalerl"} == set(LOO_COMPONENTS)  # all eight of Fig. 7 + A.20
    for name, cfg in cfgs.items():
        assert (cfg.steps, cfg.model.d_model, cfg.name) == (7, 32, name)
        component = LOO_COMPONENTS.get(name, ("-",))[0]
        changed = [path for path, _, _ in config_diff(base, cfg)]
        assert all(p.startswith(component) for p in changed), (name, changed)
        assert bool(changed) == (name != "scalerl")


def test_budget_and_only():
    assert budget_overrides(12) == ["steps=12"]
    assert budget_overrides(None, 1.5) == ["max_minutes=1.5", f"steps={MINUTES_STEP_CAP}"]
    assert budget_overrides(9, 1.5) == ["max_minutes=1.5", "steps=9"]  # whichever ends first
    assert budget_overrides() == []
    with pytest.raises(UserError, match="--budget-steps must be at least 1"):
        budget_overrides(0)
    with pytest.raises(UserError, match="--minutes must be positive"):
        budget_overrides(None, 0)
    assert [r.name for r in loo_sweep(only=["loo-fp32"]).runs] == ["scalerl", "loo-fp32"]
    with pytest.raises(UserError, match="unknown LOO variant.*loo-nope"):
        loo_sweep(only=["loo-nope"])


def test_loo_command_runs_the_sweep_and_writes_the_report(tmp_path, monkeypatch, capsys):
    from scalerl.cli import main

    curves = {"scalerl": CurveParams(0.1, 0.61, 2.0, 0.6), "loo-dapo": CurveParams(0.1, 0.52, 1.8, 0.6)}
    fake = SyntheticRunFn(curves, hours_per_step=0.02)
    monkeypatch.setattr(sweep_module, "train_run", fake)
    out = tmp_path / "loo"
    argv = ["loo", "--out", str(out), "--only", "loo-dapo", "--budget-steps", "150", "--set", "eval.every=5", "--quiet"]
    main(argv)
    assert fake.calls == [("scalerl", False), ("loo-dapo", False)]
    html = (out / "report.html").read_text()
    assert "Leave-one-out ablations of scalerl" in html and "Held-out extrapolation check" in html
    assert re.search(r"<td class=l>scalerl</td><td>1</td>", html)  # ranked first: the higher A
    main(argv)  # again: both finished, nothing reruns
    assert len(fake.calls) == 2
    assert "skip" in capsys.readouterr().out


def _screenshot(html_path, png_path, tmp_path) -> None:
    profile = tmp_path / "chromium-profile"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", f"--screenshot={png_path}", "--window-size=1280,2000",
           f"file://{html_path}"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)


# the micro model of configs/sweeps/micro.yaml: a few steps give a non-constant validation curve
MICRO_SPEC = CONFIG_DIR / "sweeps" / "micro.yaml"


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium at /usr/bin/chromium")
def test_real_loo_report_renders_in_headless_chromium(tmp_path, capsys):
    from scalerl.cli import main

    out = tmp_path / "loo"
    args = ["loo", "--out", str(out), "--only", "loo-fp32", "--budget-steps", "8", "--quiet"]
    for item in yaml.safe_load(MICRO_SPEC.read_text())["set"]:
        args += ["--set", item]
    main(args)
    report = out / "report.html"
    html = report.read_text()
    assert html.count('src="data:image/png;base64,') == 3
    png = tmp_path / "shot.png"
    _screenshot(report.resolve(), png, tmp_path)
    from matplotlib.image import imread

    img = imread(png)[..., :3]
    assert img.shape[:2] == (2000, 1280)
    colours = np.unique((img.reshape(-1, 3) * 255).astype(np.uint8), axis=0)
    assert len(colours) > 50 and img.std() > 0.05  # text, tables and figures, not a blank page
    shutil.copy(png, out / "screenshot.png")
