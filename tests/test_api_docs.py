"""docs/api.md is a whole notebook session: its code blocks run, in order, in one namespace; and the notebook API
returns the same objects as the CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from scalerl import api
from scalerl.curves import FitError

DOC = Path(__file__).resolve().parent.parent / "docs" / "api.md"


def test_the_api_page_runs(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 5
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    assert (tmp_path / "curves.png").stat().st_size > 0
    assert namespace["long_ctx"].source.endswith("run-32k.csv")


def test_api_fit_from_a_file_equals_the_cli(tmp_path, capsys):
    from scalerl.cli import main

    c = np.concatenate([[0.0], np.linspace(100, 5000, 30)])
    r = 0.2 + 0.5 / (1 + (1500 / np.maximum(c, 1e-9)) ** 1.8)
    path = tmp_path / "m.csv"
    path.write_text("c,r\n" + "".join(f"{a},{b}\n" for a, b in zip(c, r)))
    main(["fit", str(path), "--x", "c", "--y", "r", "--json"])
    cli = json.loads(capsys.readouterr().out)["fits"][0]
    f = api.fit(path, x="c", y="r")
    assert f.to_json()["A"] == cli["A"] and f.to_json()["B"] == cli["B"]
    assert api.fit(x=c, y=r).A == pytest.approx(f.A)
    assert api.forecast(f, [1500.0, 1e9]) == pytest.approx([0.2 + 0.25, 0.7], abs=2e-3)
    with pytest.raises(FitError):
        api.fit(x=[0, 1, 2], y=[0.1, 0.1, 0.1])
    with pytest.raises(TypeError, match="needs a source"):
        api.fit(x=c)


def test_compare_raises_a_warning_for_an_unidentified_A():
    """issue 26: the API must make an unidentified A as hard to miss as the CLI's warning line."""
    from scalerl.curves.synthetic import TABLE1, simulate_eval_curve

    compute = np.concatenate([[0.0], np.linspace(160, 16000, 100)])
    reward = simulate_eval_curve(TABLE1["scalerl-8b"], compute, seed=0)
    from scalerl.curves import fit_curve

    early = fit_curve(compute[:12], reward[:12], source="early")
    assert not early.identified
    with pytest.warns(UserWarning, match="early: A is not identified"):
        ranking = api.compare([early, fit_curve(compute, reward, source="full")])
    assert any("early" in w for w in ranking.warnings)
