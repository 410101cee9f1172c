"""``bench/gpu_suite.py`` (issue #32): its ``--dry-run`` runs every part at toy sizes on the CPU and writes both
files with every part done; the figures it derives from metrics.jsonl are the hand-worked ones; a part that
outruns its limit is killed with its processes, and what it recorded before stays."""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SUITE = REPO / "bench" / "gpu_suite.py"

pytest.importorskip("transformers")  # the engines part runs the Hugging Face engine


def _suite():
    spec = importlib.util.spec_from_file_location("gpu_suite", SUITE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_suite"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # about a minute on 2 cores
def test_dry_run_writes_both_files_with_every_part_done(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "SCALERL_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, str(SUITE), "--out", str(tmp_path / "out"), "--dry-run"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "gpu_suite.json").read_text())
    assert report["dry_run"] and report["device"]["type"] == "cpu"
    parts = report["parts"]
    assert list(parts) == ["tests", "engines", "step", "scalerl"]
    assert {name: p["status"] for name, p in parts.items()} == dict.fromkeys(parts, "ok"), done.stdout[-3000:]

    table = (tmp_path / "out" / "gpu_suite.md").read_text()
    for name in parts:
        assert f"| {name} | status | ok" in table
    assert "[tests] " in (tmp_path / "out" / "gpu_suite.log").read_text()

    counts = parts["tests"]["data"]["counts"]  # no CUDA here: every gpu-marked test ran into its skip
    assert counts["failed"] == 0 and counts["skipped"] >= 3
    assert "tests/test_cuda.py" in parts["tests"]["data"]["files"]

    engines = parts["engines"]["data"]["results"]
    assert {(r["engine"], r["dtype"], r["fp32_head"]) for r in engines} == {
        (e, d, h) for e in ("builtin", "hf") for d in ("bfloat16", "float32") for h in (True, False)}
    for r in engines:
        assert r["tokens_per_s"] > 0 and r["tokens"] == 2 * 2 * 6
        if r["dtype"] == "float32":  # the same computation on both sides, but for the kernels
            assert r["dlogp_max"] < 1e-5
    for engine in ("builtin", "hf"):  # §3.2, Fig. 5b: generating in bf16, the FP32 head shrinks the mismatch
        bf16 = {r["fp32_head"]: r["dlogp_mean"] for r in engines if r["engine"] == engine and r["dtype"] == "bfloat16"}
        assert bf16[False] > 3 * bf16[True] > 0

    runs = parts["step"]["data"]["runs"]
    assert set(runs) == {"inline bf16", "local bf16", "inline fp32"}
    for fig in runs.values():
        assert fig["steps"] == 2 and fig["step_s"] > 0 and fig["timing/backward_s"] > 0
    assert parts["step"]["data"]["update"]["load_ms"] > 0

    scalerl = parts["scalerl"]["data"]
    assert scalerl["steps"] == 7 and scalerl["warmup"]["steps"] == 5
    assert scalerl["warmup_cache_files"] == 1  # the run loaded the suite's warm-up instead of repeating it
    # a toy run learns nothing to fit: one failing check says so (on a GPU, the demo's three)
    assert scalerl["checks"] and not all(c["passed"] for c in scalerl["checks"])
    assert (tmp_path / "out" / "scalerl_metrics.jsonl").exists()
    assert (tmp_path / "out" / "scalerl_curve.png").exists() == (scalerl["fit"] is not None)  # a curve needs a fit


def test_step_figures_are_the_hand_worked_ones():
    suite = _suite()
    lines = [  # step 1 is start-up and left out; steps 2 and 3 take 2 s each
        {"step": 1, "loss": 0.1, "time/wall_s": 10.0, "compute/flops": 1e15, "train/tokens_kept": 100.0,
         "timing/backward_s": 9.0, "timing/logprob_forward_s": 9.0, "timing/optimizer_s": 9.0},
        {"step": 1, "val/pass_rate": 0.5, "time/wall_s": 11.0, "compute/flops": 1e15},
        {"step": 2, "loss": 0.1, "time/wall_s": 12.0, "compute/flops": 3e15, "train/tokens_kept": 1000.0,
         "timing/backward_s": 0.6, "timing/logprob_forward_s": 0.3, "timing/optimizer_s": 0.1},
        {"step": 3, "loss": 0.1, "time/wall_s": 14.0, "compute/flops": 5e15, "train/tokens_kept": 3000.0,
         "timing/backward_s": 0.6, "timing/logprob_forward_s": 0.3, "timing/optimizer_s": 0.1},
    ]
    fig = suite._step_figures(lines, n_params=10**9, peak=1e15)
    assert fig["steps"] == 3 and fig["step_s"] == pytest.approx(2.0)
    assert fig["flops_per_step"] == pytest.approx(2e15) and fig["mfu_step"] == pytest.approx(1.0)
    assert fig["timing/backward_s"] == pytest.approx(0.6)
    # trainer: 6 P tokens over forward + backward + optimizer = 6e9 * 2000 / 1.0 s
    assert fig["trainer_flops_per_s"] == pytest.approx(1.2e13) and fig["mfu_trainer"] == pytest.approx(0.012)
    assert "mfu_step" not in suite._step_figures(lines, n_params=10**9, peak=None)


def test_a_fit_reads_as_one_line():
    import numpy as np

    from scalerl.curves import fit_curve

    suite = _suite()
    x = np.geomspace(1, 1000, 25)
    y = 0.2 + (0.7 - 0.2) / (1 + (30 / x) ** 1.5)
    fit = fit_curve(x, y, x_name="compute/device_hours").to_json()
    text = suite.fit_text(fit)
    assert text.startswith("A = 0.70") and "Cmid = " in text and "identified: True" in text
    assert "Cmid = n/a" in suite.fit_text({**fit, "Cmid": None, "R0": None})


def test_a_part_past_its_limit_is_killed_and_keeps_what_it_recorded(tmp_path):
    suite = _suite()
    args = argparse.Namespace(out=tmp_path, dry_run=True)
    log = io.StringIO()
    result = suite.run_part("scalerl", 4.0, args, log)  # far too short for the run: killed at 4 s
    assert result["status"] == "timeout" and result["returncode"] is None
    assert result["seconds"] < 20 and "error" in result
    table = suite.markdown({"dry_run": True, "device": None, "started": "now", "budget_s": 4,
                            "parts": {"scalerl": result}})
    assert "| scalerl | status | timeout" in table
