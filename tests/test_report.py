"""``scalerl report``: broken runs are named and the others still reported; numbers the report shows are checked
against hand-worked values and the paper's comparison rule; the HTML is self-contained."""

from __future__ import annotations

import re

import numpy as np
import pytest

from scalerl.curves.sigmoid import sigmoid
from scalerl.curves.synthetic import CurveParams
from scalerl.errors import UserError
from scalerl.experiments.analysis import analyse
from scalerl.experiments.report import write_report
from scalerl.experiments.spec import make_sweep
from scalerl.experiments.sweep import run_sequential
from scalerl.experiments.synthetic_runs import SyntheticRunFn

STEPS, EVERY, HOURS = 150, 5, 0.02  # evaluations at steps 0, 5, ..., 150; compute = step x 0.02


def make_runs(root, params: dict[str, CurveParams]):
    fake = SyntheticRunFn(params, hours_per_step=HOURS)
    sweep = make_sweep({n: [f"seed={i}"] for i, n in enumerate(params)}, extra=[f"steps={STEPS}", f"eval.every={EVERY}"])
    run_sequential(sweep, root, run_fn=fake, show_progress=False)
    return root


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    root = make_runs(tmp_path_factory.mktemp("sweep"), {
        "good": CurveParams(0.1, 0.62, 2.0, 0.6),
        "worse": CurveParams(0.1, 0.45, 2.0, 0.6),
    })
    (root / "empty").mkdir()
    (root / "garbage").mkdir()
    (root / "garbage" / "metrics.jsonl").write_text("not json\n{\"step\": 1}\n")
    (root / "no-metrics").mkdir()
    (root / "no-metrics" / "config.yaml").write_text("name: x\n")
    (root / "few-evals").mkdir()
    (root / "few-evals" / "metrics.jsonl").write_text(
        '{"step": 0, "compute/device_hours": 0.0, "val/pass_rate": 0.1}\n'
        '{"step": 5, "compute/device_hours": 0.05, "val/pass_rate": 0.2}\n')
    return root


def test_broken_runs_are_named_and_the_others_reported(sweep_dir, tmp_path, capsys):
    from scalerl.cli import main

    out = tmp_path / "report.html"
    main(["report", str(sweep_dir), "--out", str(out)])
    err = capsys.readouterr().err
    for name in ("empty", "garbage", "no-metrics", "few-evals"):
        assert re.search(rf"^warning: \S*{name} not reported: .+$", err, re.M), name
    assert "never started" in err and "not valid JSON" in err and "without metrics.jsonl" in err
    assert "distinct compute values" in err  # too few evaluations for Eq. 1
    html = out.read_text()
    assert "2 run(s) reported, 4 not" in html
    for name in ("good", "worse", "empty", "garbage", "no-metrics", "few-evals"):
        assert f"<b>{name}</b>" in html or f"<td class=l>{name}</td>" in html
    # self-contained: three embedded PNGs, nothing fetched
    assert html.count('src="data:image/png;base64,') == 3
    assert not re.search(r"(src|href)=\"(?!data:)", html) and "http" not in html
    # the legend gives every reason a fit is not identified, not only "has not passed Cmid" (a run past Cmid whose
    # interval is open at the top was read as one that had not got there)
    flat = " ".join(html.split())
    assert "the interval is open at the top" in flat and "has not passed Cmid, so A is not pinned down yet" not in flat


def test_no_usable_run_is_a_user_error_and_writes_nothing(tmp_path):
    (tmp_path / "runs" / "a").mkdir(parents=True)
    (tmp_path / "runs" / "b").mkdir()
    (tmp_path / "runs" / "b" / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n')
    out = tmp_path / "r.html"
    with pytest.raises(UserError, match=r"no usable run .*a: empty directory.*b: .*no column 'compute/device_hours'"):
        write_report(tmp_path / "runs", out, quiet=True)
    assert not out.exists()
    with pytest.raises(UserError, match="no such directory"):
        write_report(tmp_path / "missing", out)
    with pytest.raises(UserError, match="ending in .html"):
        write_report(tmp_path / "runs", tmp_path / "r.png")


def test_heldout_check_and_forecasts_are_what_the_fit_says(sweep_dir):
    a = analyse(sweep_dir)
    good = next(r for r in a.runs if r.name == "good")
    # the first half is compute <= 1.5 (steps 0..75); the 15 evaluations at steps 80..150 are held out
    assert good.heldout is not None and good.heldout.n == 15 and good.heldout.fit_until == pytest.approx(1.5)
    assert good.heldout.end_true == pytest.approx(good.fit.y[-1])
    # predictions at 2x and 10x the run's compute (3.0 device-hours): the reported forecast, the current level
    # plus Eq. 1's further gain (all of it, or none when the run's own backtest says holding the level is better)
    f = good.fit
    assert [p.compute for p in good.predictions] == pytest.approx([6.0, 30.0])
    for p in good.predictions:
        assert p.reward == pytest.approx(float(f.forecast(p.compute)))
        gain = f.predict(p.compute) - f.predict(f.fit_window[1])
        assert p.reward == pytest.approx(f.forecaster.now.level + f.forecaster.weight * gain, abs=0.05)
    # the synthetic curve: A = 0.62, and its evaluation noise is small, so the fit recovers it and the
    # first-half fit predicts the held-out half closely
    assert f.A == pytest.approx(0.62, abs=0.03)
    assert good.heldout.mean_abs_err < 0.03
    assert good.diagnostics["train/staleness_max"] == 8.0


def test_ranking_ties_within_margin_are_refit_at_common_A_and_ranked_by_B(tmp_path):
    root = make_runs(tmp_path / "s", {
        "flat": CurveParams(0.1, 0.60, 1.5, 0.3),
        "steep": CurveParams(0.1, 0.60, 3.5, 0.3),
        "low": CurveParams(0.1, 0.40, 2.0, 0.6),
    })
    a = analyse(root, margin=0.02)
    assert [r.name for r in a.ranking] == ["steep", "flat", "low"]
    steep, flat, low = a.ranking
    assert set(steep.group) == {"steep", "flat"} and low.group == ("low",)
    assert steep.common_A == pytest.approx((steep.A + flat.A) / 2)
    assert steep.B_common > flat.B_common
    html = write_report(root, tmp_path / "r.html") and (tmp_path / "r.html").read_text()
    assert html.count('<tr class=tie>') == 2 and "tied with flat" in html
    # with no margin nothing ties and the order is by A alone
    b = analyse(root, margin=0.0)
    assert all(len(r.group) == 1 for r in b.ranking)
    assert [r.A for r in b.ranking] == sorted((r.A for r in b.ranking), reverse=True)


def test_single_run_directory_is_a_report_of_one(sweep_dir, tmp_path):
    a = write_report(sweep_dir / "good", tmp_path / "one.html")
    assert [r.name for r in a.runs] == ["good"] and not a.skipped
    truth = sigmoid(a.runs[0].fit.x, 0.1, 0.62, 2.0, 0.6)
    assert np.abs(a.runs[0].fit.y - truth).max() < 0.08  # the data really is the synthetic curve


def test_an_unidentified_A_is_shown_as_a_bound_everywhere_in_the_report(tmp_path):
    """A run that has not passed Cmid has no estimate of A: its fitted A is where the search stopped. The fits
    table, the held-out check, the ranking and the plot legends show ``≥ lo`` (the interval's lower end) for it,
    never that number; an identified run keeps its estimate."""
    from scalerl.curves.plot import _A_text

    root = make_runs(tmp_path / "s", {
        "bent": CurveParams(0.1, 0.62, 2.0, 0.6),
        "early": CurveParams(0.1, 0.9, 1.5, 40.0),  # 3 device-hours, Cmid at 40: still on the rise
    })
    a = write_report(root, tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text()
    early = next(r for r in a.runs if r.name == "early")
    bent = next(r for r in a.runs if r.name == "bent")
    assert not early.fit.identified and bent.fit.identified
    bound = f"≥ {early.fit.A_ci[0]:.3f}"
    rows = [row for row in re.findall(r"<tr[^>]*>(.*?)</tr>", html, flags=re.S) if ">early<" in row]
    assert len(rows) >= 3  # fits table, held-out check, ranking
    for row in rows:
        row = re.sub(r"\[[0-9.]+, [0-9.]+\] <span class=meta>", "", row)  # a forecast's 80% band is no A
        assert f"{early.fit.A:.3f}" not in row.replace(f"{early.fit.A_ci[0]:.3f}", "")
    assert sum(bound in row for row in rows) >= 2
    assert f"<b>{bent.fit.A:.3f}</b>" in html
    assert _A_text(early.fit) == bound and _A_text(bent.fit) == f"={bent.fit.A:.3f}"


def test_report_shows_each_forecast_with_its_band_and_trust_line(sweep_dir, tmp_path):
    """issue 26: a trust signal in every place a forecast is shown, the report included."""
    a = write_report(sweep_dir / "good", tmp_path / "one.html")
    html = (tmp_path / "one.html").read_text()
    assert "trust: the run&#x27;s own history" in html or "trust: the run's own history" in html
    assert a.runs[0].fit.trust["summary"].split(";")[0].replace("%", "") in html.replace("%", "")
    assert "carrying the last value forward" in html and "80% band" in html
