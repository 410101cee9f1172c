"""How recipes are compared (App. A.5, A.8): A first; within the margin, refit at the mean A and rank by B; and the figures."""

import json

import numpy as np
import pytest

from scalerl.curves import compare_fits, fit_curve, plot_fits, plot_linearised, refit_at
from scalerl.curves.sigmoid import sigmoid
from scalerl.errors import UserError

C = np.concatenate([[0.0], np.geomspace(100, 20000, 60)])


def _fit(A, B, Cmid, name):
    return fit_curve(C, sigmoid(C, 0.3, A, B, Cmid), source=f"runs/{name}/metrics.jsonl", ci=False)


def test_ties_within_the_margin_are_ranked_by_b_at_their_mean_a():
    a, b, c = _fit(0.61, 1.5, 2500, "a"), _fit(0.60, 2.5, 2500, "b"), _fit(0.55, 3.0, 1000, "c")
    res = compare_fits([c, a, b], margin=0.02)
    assert [r.fit.source.split("/")[1] for r in res.ranked] == ["b", "a", "c"]
    assert [r.group for r in res.ranked] == [1, 1, 2]
    top = res.ranked[0]
    assert top.group_A == pytest.approx(0.605) and top.refit.A == pytest.approx(0.605)
    assert top.refit.B > res.ranked[1].refit.B
    assert res.ranked[2].refit is None and res.ranked[2].group_A is None
    # a tighter margin: A alone decides
    strict = compare_fits([c, a, b], margin=0.005)
    assert [r.fit.source.split("/")[1] for r in strict.ranked] == ["a", "b", "c"]


def test_groups_are_anchored_at_their_highest_a():
    fits = [_fit(0.61, 2, 2500, "x"), _fit(0.595, 2, 2500, "y"), _fit(0.58, 2, 2500, "z")]
    res = compare_fits(fits, margin=0.02)
    assert [r.group for r in res.ranked] == [1, 1, 2]  # 0.58 is within 0.02 of 0.595 but not of 0.61


def test_common_a_refits_and_json():
    a, b = _fit(0.61, 1.5, 2500, "a"), _fit(0.60, 2.5, 2500, "b")
    res = compare_fits([a, b])
    assert res.common_A == pytest.approx(0.605)
    assert all(f.A == pytest.approx(0.605) for f in res.common_fits)
    d = res.to_json()
    json.dumps(d, allow_nan=False)
    assert {"margin", "ranking", "common_A", "B_at_common_A", "fits"} <= set(d)
    assert d["ranking"][0]["B_at_group_A"] == pytest.approx(res.ranked[0].refit.B)
    assert refit_at(a, 0.61).B == pytest.approx(1.5, rel=1e-4)  # refit at its own A changes nothing


def test_figures_are_written_atomically_and_reject_unknown_formats(tmp_path):
    a, b = _fit(0.61, 1.5, 2500, "a"), _fit(0.60, 2.5, 2500, "b")
    out = tmp_path / "fig" / "curves.png"
    plot_fits([a, b], out, title="t", extrapolate_to=10.0)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plot_linearised(compare_fits([a, b]).common_fits, tmp_path / "slopes.svg")
    assert (tmp_path / "slopes.svg").read_text().lstrip().startswith("<?xml")
    with pytest.raises(UserError, match=".png, .svg or .pdf"):
        plot_fits([a], tmp_path / "curves.jpg")
    assert not (tmp_path / "curves.jpg").exists()
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["curves.png", "fig", "slopes.svg"]  # no temp files left


def noisy_sigmoid(x, seed, R0, A, B, Cmid, sd):
    """(x, Eq. 1 at x plus white noise of sd ``sd``), the reward at the first x (compute 0) exactly R0."""
    y = sigmoid(x, R0, A, B, Cmid) + np.random.default_rng(seed).normal(0, sd, x.size)
    y[0] = R0
    return x, y


def _steps(seed, R0, A, B, Cmid, sd=0.01):
    return noisy_sigmoid(np.arange(0, 1001, 20, dtype=float), seed, R0, A, B, Cmid, sd)


def test_runs_whose_data_bound_A_nowhere_are_not_ranked_by_name_or_by_a_fitted_A():
    """``compare --model power`` ranked two runs whose power-law A both ran to the bound 1 by their names (the weaker
    first: "a_weak" before "z_strong"), under a caption saying they were placed by a lower end they do not have; and a
    run that fell from 0.70 to 0.30 was ranked above an identified 0.60 by "A ≥ 0.711", the search's bound at an
    interval open below. Runs with no lower end are not ranked: listed last, by name, rank null in JSON."""
    from scalerl.curves.compare import NOT_RANKED

    weak = fit_curve(*_steps(13, 0.10, 0.55, 1.5, 300), model="power", source="a_weak")
    strong = fit_curve(*_steps(14, 0.10, 0.75, 1.5, 300), model="power", source="z_strong")
    c = compare_fits([strong, weak])
    assert [r.fit.source for r in c.ranked] == ["a_weak", "z_strong"]  # by name: no order is claimed
    assert all(not r.ranked and r.basis == NOT_RANKED for r in c.ranked)
    assert [row["rank"] for row in c.to_json()["ranking"]] == [None, None]
    assert all("not ranked" in w and "no interval on A" in w for w in c.warnings)

    s = np.arange(0, 1001, 20, dtype=float)
    fall = fit_curve(s, 0.70 - 0.40 * s / 1000 + np.random.default_rng(6).normal(0, 0.01, s.size), source="fall")
    rising = fit_curve(*_steps(11, 0.30, 0.60, 2.0, 200), source="rising")
    assert fall.A_ci_open[0] and rising.identified
    c = compare_fits([fall, rising])
    assert [(r.fit.source, r.rank, r.ranked) for r in c.ranked] == [("rising", 1, True), ("fall", 2, False)]
    assert fall.format_A() == "not bounded" and json.loads(json.dumps(c.to_json()))["ranking"][1]["rank"] is None
    assert any("fall" in w and "open below" in w for w in c.warnings)


def test_a_closed_lower_end_still_places_an_unidentified_run():
    # before its midpoint a run's interval is closed below: it is placed by that bound (not "not ranked")
    x = np.linspace(0, 4.0, 25)
    rng = np.random.default_rng(0)
    y = sigmoid(x, 0.1, 0.9, 1.5, 10.0) + 0.003 * rng.standard_normal(x.size)
    y[0] = 0.1
    rising = fit_curve(x, y, source="rising")
    assert not rising.identified and not rising.A_ci_open[0]
    (r,) = compare_fits([rising]).ranked
    assert r.ranked and r.rank == 1 and rising.format_A().startswith("≥ ")


def test_the_cli_marks_a_run_it_does_not_rank(tmp_path, capsys):
    from scalerl.cli import main

    for name, seed, A in (("z_strong", 14, 0.75), ("a_weak", 13, 0.55)):
        s, y = _steps(seed, 0.10, A, 1.5, 300)
        (tmp_path / f"{name}.csv").write_text("step,acc\n" + "".join(f"{a},{b:.4f}\n" for a, b in zip(s, y)))
    main(["compare", str(tmp_path / "z_strong.csv"), str(tmp_path / "a_weak.csv"), "--x", "step", "--y", "acc",
          "--model", "power"])
    out = " ".join(capsys.readouterr().out.split())
    assert "│ – │ a_weak │" in out and "│ – │ z_strong │" in out and "– not ranked" in out
    assert "placed by the lower end" not in out
