"""Audit of recipe comparison and reports (App. A.5, A.8; §4, Fig. 7): each test reproduces one defect found by
hand-working small comparisons, or guards a check that passed.

* an unidentified A (a lower bound) was ranked as if it were an estimate: a run still on the rise came first;
* the ranking depended on the order the runs were given in when keys were equal;
* a difference of exactly 0.02 in A counted as beyond the margin in the claims (float rounding);
* ``Comparison.to_json`` lost runs that share a source and wrote NaN (invalid JSON) for a power-law Cmid;
* a run the report cannot fit (one evaluation) moved every other run's shared fit cutoff;
* the leave-one-out claim refitted pairs at their pairwise mean A instead of the mean A of all runs (Fig. 7), and
  called B "moved" against the spread of a single seed.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

from scalerl.curves import compare_fits, fit_curve
from scalerl.curves.compare import RANKED_BY_A, RANKED_BY_B, RANKED_BY_BOUND
from scalerl.curves.sigmoid import sigmoid

C = np.concatenate([[0.0], np.geomspace(100, 20000, 40)])


def _fit(A, B, Cmid, name, seed=0, until=20000.0, sd=0.003, **kw):
    x = C[C <= until]
    y = sigmoid(x, 0.3, A, B, Cmid) + sd * np.random.default_rng(seed).standard_normal(x.size)
    y[0] = 0.3
    return fit_curve(x, y, source=name, **kw)


def _as(fit, name, **changes):
    """A copy of ``fit`` with a hand-set A (and anything else): the ranking reads only these numbers."""
    return dataclasses.replace(fit, source=name, **changes)


@pytest.fixture(scope="module")
def base():
    return _fit(0.6, 2.0, 2500, "base")


@pytest.fixture(scope="module")
def early():
    f = _fit(0.9, 1.5, 40000, "early", seed=1)
    assert not f.identified and f.A_ci[0] < 0.6 < f.A  # fitted A above the identified run's, lower end below
    return f


# --- compare_fits: an unidentified A is a bound, not an estimate ---------------------------------------------


def test_an_unidentified_run_is_not_ranked_above_measured_ceilings_by_its_fitted_A(base, early):
    res = compare_fits([early, base])
    assert [r.fit.source for r in res.ranked] == ["base", "early"]  # before: early first, on its fitted A
    first, second = res.ranked
    assert first.identified and first.basis == RANKED_BY_A
    assert not second.identified and second.basis == RANKED_BY_BOUND and second.refit is None
    assert first.group != second.group  # never tied: its A is not within any margin of anything
    rows = res.to_json()["ranking"]
    assert [(r["source"], r["identified"], r["ranked_by"]) for r in rows] == [
        ("base", True, RANKED_BY_A), ("early", False, RANKED_BY_BOUND)]
    assert any("early" in w and "not identified" in w for w in res.warnings)
    # the common A of the linearised figure is the measured one, not dragged up by the unidentified run
    assert res.common_A == pytest.approx(base.A)


def test_an_unidentified_run_goes_above_identified_runs_its_lower_end_beats_beyond_the_margin(base):
    """Hand-worked: identified A = 0.60 and 0.45; unidentified runs with A ≥ 0.65 and A ≥ 0.61. 0.65 beats 0.60 by
    0.05 (> 0.02): first. 0.61 beats 0.60 by only 0.01 (not shown higher) but 0.45 by 0.16: between them."""
    hi = _as(base, "hi", A=0.60, identified=True)
    lo = _as(base, "lo", A=0.45, identified=True)
    u1 = _as(base, "u1", A=0.99, A_ci=(0.65, 1.0), A_ci_open=(False, True), identified=False)
    u2 = _as(base, "u2", A=0.95, A_ci=(0.61, 1.0), A_ci_open=(False, True), identified=False)
    res = compare_fits([lo, u2, hi, u1])
    assert [r.fit.source for r in res.ranked] == ["u1", "hi", "u2", "lo"]
    assert [r.rank for r in res.ranked] == [1, 2, 3, 4]
    assert len({r.group for r in res.ranked}) == 4


def test_compare_cli_marks_an_unidentified_run_in_the_table_and_the_json(tmp_path, capsys, base, early):
    from scalerl.cli import main

    paths = []
    for f in (early, base):
        p = tmp_path / f"{f.source}.csv"
        p.write_text("compute/device_hours,val/pass_rate\n" + "".join(f"{float(x)!r},{float(y)!r}\n" for x, y in zip(f.x, f.y)))
        paths.append(str(p))
    main(["compare", *paths, "--json"])
    rows = json.loads(capsys.readouterr().out)["ranking"]
    assert [(Path(r["source"]).stem, r["identified"], r["ranked_by"]) for r in rows] == [
        ("base", True, RANKED_BY_A), ("early", False, RANKED_BY_BOUND)]
    main(["compare", *paths])
    out = " ".join(capsys.readouterr().out.split())
    assert re.search(r"2\* │ early", out) and "A not identified: placed by the lower end" in out


# --- order independence, ties, margin boundary ------------------------------------------------------------------


def test_the_ranking_does_not_depend_on_the_order_of_the_runs(base):
    same = [_as(base, n) for n in ("r-c", "r-a", "r-b")]  # equal A, B and Cmid: only the name tells them apart
    other = _fit(0.605, 3.0, 2500, "steep", seed=3)  # tied on A with them, ranked first by B
    low = _fit(0.45, 2.0, 2500, "low", seed=4)
    runs = [*same, other, low]  # every run at every position, both ways round (10 of the 120 orders: 1 s, not 9)
    orders = {tuple(r.fit.source for r in compare_fits(p).ranked)
              for p in (runs[i:] + runs[:i] for runs in (runs, runs[::-1]) for i in range(len(runs)))}
    assert orders == {("steep", "r-a", "r-b", "r-c", "low")}  # before: the input order decided among equals
    res = compare_fits([*same, other, low])
    assert [r.basis for r in res.ranked] == [RANKED_BY_B] * 4 + [RANKED_BY_A]


def test_identical_curves_in_other_compute_units_tie_on_A(base):
    """How compute is counted (hours, seconds) changes Cmid, not A or B: the two runs tie on A."""
    secs = fit_curve(base.x * 3600, base.y, source="secs")
    res = compare_fits([base, secs])
    assert res.ranked[0].group == res.ranked[1].group and res.ranked[0].group_A is not None
    assert res.ranked[0].refit.B == pytest.approx(res.ranked[1].refit.B, rel=1e-6)


def test_a_difference_of_exactly_the_margin_is_a_tie_in_compare_and_in_the_claims(base):
    from scalerl.experiments.claims import Pooled, higher_A_claim

    a, b = _as(base, "cispo", A=0.63), _as(base, "dapo", A=0.61)  # 0.63 - 0.61 = 0.020000000000000018
    assert compare_fits([a, b]).ranked[0].group_A is not None  # tied
    claim = higher_A_claim([Pooled("cispo", a, [a])], Pooled("dapo", b, [b]))
    assert claim.verdict == "inconclusive"  # before: "yes" on a float rounding error of 2e-17


def test_a_single_run_is_ranked_first_on_its_own(base, early):
    for f in (base, early):
        res = compare_fits([f])
        assert [r.rank for r in res.ranked] == [1] and res.common_A == pytest.approx(f.A)


# --- JSON ---------------------------------------------------------------------------------------------------------


def test_json_keeps_runs_that_share_a_source_and_is_valid_for_a_power_law_without_R0():
    x = np.geomspace(100, 20000, 30)
    a = fit_curve(x, sigmoid(x, 0.3, 0.6, 2.0, 2500))  # both sources are the default "data"
    b = fit_curve(x, sigmoid(x, 0.3, 0.6, 3.0, 2500))
    rows = compare_fits([a, b]).to_json()["ranking"]
    assert sorted(round(r["B_at_common_A"], 2) for r in rows) == pytest.approx([2.0, 3.0], abs=0.05)
    p = fit_curve(x, sigmoid(x, 0.3, 0.6, 2.0, 2500), model="power", source="p")  # no compute-0 point: R0 unknown
    assert np.isnan(p.Cmid)
    d = compare_fits([p, a]).to_json()
    json.dumps(d, allow_nan=False)  # before: ValueError, NaN is not JSON
    assert next(r for r in d["ranking"] if r["source"] == "p")["Cmid"] is None


# --- the report ---------------------------------------------------------------------------------------------------


def _write_run(path: Path, x, y):
    path.mkdir(parents=True)
    path.joinpath("metrics.jsonl").write_text("".join(
        json.dumps({"step": i, "compute/device_hours": float(c), "val/pass_rate": float(v)}) + "\n"
        for i, (c, v) in enumerate(zip(x, y))))


def test_a_run_the_report_cannot_fit_does_not_move_the_others_cutoff(tmp_path):
    from scalerl.experiments.analysis import analyse

    x = np.linspace(0, 16.0, 60)
    for i, (A, B) in enumerate([(0.6, 2.0), (0.61, 1.4)]):
        y = sigmoid(x, 0.2, A, B, 3.0) + 0.01 * np.random.default_rng(i).standard_normal(x.size)
        y[0] = 0.2
        _write_run(tmp_path / f"r{i}", x, y)
    alone = analyse(tmp_path)
    _write_run(tmp_path / "just-started", [0.0], [0.2])  # one evaluation: skipped
    mixed = analyse(tmp_path)
    assert [s.name for s in mixed.skipped] == ["just-started"]
    assert mixed.fit_from == alone.fit_from > 0  # before: 0.0, every run refitted on a wider window
    assert [(r.name, r.A) for r in mixed.ranking] == [(r.name, r.A) for r in alone.ranking]


def test_report_places_an_unidentified_run_by_its_bound_and_says_so(tmp_path):
    from scalerl.experiments.report import write_report

    x = np.linspace(0, 4.0, 25)
    rng = np.random.default_rng(0)
    for name, (A, B, Cmid) in {"bent": (0.62, 2.0, 0.6), "<rising & 'on'>": (0.9, 1.5, 10.0)}.items():
        y = sigmoid(x, 0.1, A, B, Cmid) + 0.003 * rng.standard_normal(x.size)
        y[0] = 0.1
        _write_run(tmp_path / "s" / name, x, y)
    a = write_report(tmp_path / "s", tmp_path / "r.html")
    bent, rising = (next(r.fit for r in a.runs if r.name == n) for n in ("bent", "<rising & 'on'>"))
    assert bent.identified and not rising.identified and rising.A > bent.A + 0.1  # ranked by fitted A, it led
    assert [(i.name, i.identified) for i in a.ranking] == [("bent", True), ("<rising & 'on'>", False)]
    page = (tmp_path / "r.html").read_text()
    row = next(r for r in re.findall(r"<tr[^>]*>(.*?)</tr>", page, flags=re.DOTALL) if "placed by the lower end" in r)
    assert "&lt;rising &amp; &#x27;on&#x27;&gt;" in row and "<rising" not in page
    assert not re.search(r"(src|href)=\"(?!data:)", page) and "http" not in page


# --- claims -------------------------------------------------------------------------------------------------------


def test_loo_claim_refits_every_run_at_the_mean_A_of_all_runs_and_needs_replicated_seeds(base):
    from scalerl.curves import refit_at
    from scalerl.experiments.claims import Pooled, loo_claim

    b = Pooled("scalerl", base, [base, _fit(0.6, 2.0, 2500, "base-s1", seed=7)])
    v1 = _fit(0.615, 2.0, 2500, "loo-a", seed=5)
    v2 = _fit(0.59, 3.5, 2500, "loo-b", seed=6)
    variants = [Pooled("loo-a", v1, [v1]), Pooled("loo-b", v2, [v2])]
    common = float(np.mean([base.A, v1.A, v2.A]))
    claim = loo_claim(b, variants)
    assert f"common A = {common:.3f}" in claim.numbers  # Fig. 7: one A, averaged across all runs
    ratio = refit_at(v2, common).B / refit_at(base, common).B
    assert f"loo-b ΔA {v2.A - base.A:+.3f}, B x{ratio:.2f}" in claim.numbers
    assert claim.verdict == "yes"
    one_seed = loo_claim(Pooled("scalerl", base, [base]), variants)
    assert one_seed.verdict == "inconclusive" and "one base seed" in one_seed.numbers  # before: "yes" vs x1.00


# --- figures ------------------------------------------------------------------------------------------------------


def test_figure_frames_the_data_not_an_unidentified_A_and_labels_the_x_metric(tmp_path, monkeypatch, base):
    from scalerl.curves import plot as plot_mod

    x = C[C <= 2000]
    y = 0.3 + 0.1 * x / 2000  # a straight rise: nothing bounds A from above
    rising = fit_curve(x, y, source="rising", x_name="compute/gpu_seconds")
    assert not rising.identified and rising.A > 0.9
    seen = {}
    real = plot_mod._save
    monkeypatch.setattr(plot_mod, "_save", lambda fig, path: (seen.update(ax=fig.axes[0]), real(fig, path)))
    plot_mod.plot_fits([rising], tmp_path / "f.png")
    ax = seen["ax"]
    assert ax.get_ylim()[1] < 0.5  # before: framed up to the unidentified A (~1), the data squashed at the bottom
    assert ax.get_xlabel() == "compute/gpu_seconds"
    solid = [ln for ln in ax.get_lines() if ln.get_linestyle() == "-"]
    dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert solid and dashed  # the extrapolation is drawn dashed, apart from the fitted part
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"
    assert [p.name for p in tmp_path.iterdir()] == ["f.png"]  # written atomically: no temporary left
