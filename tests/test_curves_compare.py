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
