"""Task mixtures (§5): the strings domain, domains drawn at their weights, per-domain and downstream evaluation,
per-domain fits, and a mixture that resumes exactly."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from scalerl.algo import build_curriculum as algo_curriculum
from scalerl.algo.mixture import MixtureSampler
from scalerl.build import build_curriculum, build_downstream, build_task
from scalerl.config import CurriculumConfig, ForecastConfig, load_config
from scalerl.errors import UserError
from scalerl.evaluate import evaluate
from scalerl.forecast import Forecaster
from scalerl.pipeline.runner import train
from scalerl.runlog import read_metrics
from scalerl.tasks.strings import StringsTask, _solve

from test_pipeline import micro

MIX = "task.mix=[{name: arithmetic, weight: 0.5, params: {max_operands: 4, sign_slip: 0.0, answer_slip: 0.0}}, {name: strings, weight: 0.5, params: {max_len: 5, double_slip: 0.0}}]"
DOWNSTREAM = "eval.downstream=[{name: long_arith, task: arithmetic, n: 8, params: {min_operands: 5, max_operands: 5}}]"


# ---------------------------------------------------------------------------------------------- strings domain


def test_strings_task_hand_worked_problems_and_grading():
    t = StringsTask(n_train=50, n_val=10, double_slip=0.0)  # correct demonstrations
    by_op = {}
    for p in t.train_problems():
        by_op.setdefault(p.meta["op"], p)
    assert set(by_op) == {"rev", "sort", "count"}
    rev, srt, cnt = by_op["rev"], by_op["sort"], by_op["count"]
    word = rev.prompt.removeprefix("rev ").removesuffix("=")
    assert rev.answer == word[::-1]
    assert srt.answer == "".join(sorted(srt.prompt.removeprefix("sort ").removesuffix("=")))
    letter, word = cnt.prompt.removeprefix("count ").removesuffix("=").split(" in ")
    assert cnt.answer == str(word.count(letter))
    for p in t.train_problems() + t.val_problems():
        assert t.grade(p, t.demonstration(p))
        assert not t.grade(p, p.answer)  # no </think>: wrong
        assert not t.grade(p, "<think></think>" + p.answer + "x")
    assert t.demonstration(StringsTask(n_train=1, n_val=0).train_problems()[0]).startswith("<think>")


def test_strings_working_by_hand():
    assert _solve("count", "abcb", "b") == (["a0", "b1", "c1", "b2"], "2")
    assert _solve("rev", "abc", "") == (["c", "b", "a"], "cba")
    assert _solve("sort", "cab", "") == (["a", "b", "c"], "abc")
    # the habit: copying the working into the answer drops a letter that repeats the one just copied; the
    # working stays right, and count is never touched
    always = lambda: True  # noqa: E731
    assert _solve("rev", "abbc", "", always) == (["c", "b", "b", "a"], "cba")
    assert _solve("sort", "bcab", "", always) == (["a", "b", "b", "c"], "abc")
    assert _solve("rev", "aaab", "", always) == (["b", "a", "a", "a"], "ba")
    assert _solve("rev", "abab", "", always) == (["b", "a", "b", "a"], "baba")  # not adjacent: no slip
    assert _solve("count", "cbbd", "b", always) == (["c0", "b1", "b2", "d2"], "2")


def test_double_slip_drops_doubled_letters_from_answers_at_its_rate_and_leaves_the_problems_alone():
    """The strings domain's warm-up habit (the counterpart of ``sign_slip``): with ``double_slip`` q, each letter
    of a rev/sort answer that repeats the one before it is dropped with probability q, the working untouched;
    problems, answers and grading are those of q = 0, and each problem always gets the same demonstration."""
    clean, slipped = StringsTask(seed=3, double_slip=0.0), StringsTask(seed=3, double_slip=0.5)
    assert [(p.id, p.answer) for p in clean.train_problems()] == [(p.id, p.answer) for p in slipped.train_problems()]
    repeats = dropped = wrong = 0
    for p in slipped.train_problems():
        demo = slipped.demonstration(p)
        assert demo == slipped.demonstration(p)
        working, answer = demo[len("<think>"):].split("</think>")
        assert working == " ".join(p.meta["steps"])  # the working is always right
        if p.meta["op"] == "count":
            assert answer == p.answer
            continue
        repeats += sum(a == b for a, b in zip(p.answer, p.answer[1:]))
        dropped += len(p.answer) - len(answer)
        it = iter(p.answer)
        assert all(ch in it for ch in answer)  # the right answer with some letters left out
        # only doubled letters go: collapsing runs of the shown answer gives the collapsed right answer
        collapse = lambda w: "".join(c for i, c in enumerate(w) if not i or c != w[i - 1])  # noqa: E731
        assert collapse(answer) == collapse(p.answer)
        wrong += answer != p.answer
    assert repeats > 1000 and abs(dropped / repeats - 0.5) < 0.05
    assert 0.1 < wrong / len(slipped.train_problems()) < 0.4
    with pytest.raises(UserError, match="double_slip"):
        StringsTask(double_slip=1.0)
    assert StringsTask().double_slip == 0.6  # the domain's default habit


def test_case_slip_capitalises_the_first_letter_of_rev_and_sort_answers_only():
    """The single-decision habit: with ``case_slip`` q a rev/sort demonstration's answer starts with a capital
    letter with probability q (exact grading counts it wrong); the working, count answers and problems are
    untouched."""
    clean = StringsTask(seed=4, double_slip=0.0, case_slip=0.0)
    slipped = StringsTask(seed=4, double_slip=0.0, case_slip=0.6)
    copies = capital = 0
    for p in slipped.train_problems():
        demo, right = slipped.demonstration(p), clean.demonstration(p)
        assert demo == slipped.demonstration(p) and demo.split("</think>")[0] == right.split("</think>")[0]
        answer = demo.split("</think>")[1]
        if p.meta["op"] == "count":
            assert answer == p.answer
            continue
        copies += 1
        capital += answer != p.answer
        assert answer in (p.answer, p.answer[0].upper() + p.answer[1:])
        assert slipped.grade(p, demo) == (answer == p.answer)
    assert copies > 1000 and abs(capital / copies - 0.6) < 0.05
    with pytest.raises(UserError, match="case_slip"):
        StringsTask(case_slip=-0.1)


def test_strings_splits_disjoint_deterministic_and_tokenizable():
    from scalerl.models.tokenizer import CharTokenizer

    a, b = StringsTask(seed=3, n_train=300, n_val=40), StringsTask(seed=3, n_train=300, n_val=40)
    assert [p.id for p in a.train_problems()] == [p.id for p in b.train_problems()]
    assert not {p.prompt for p in a.train_problems()} & {p.prompt for p in a.val_problems()}
    tok = CharTokenizer()
    longest = max(len(tok.encode(a.demonstration(p))) for p in a.train_problems())
    assert longest <= 40  # short completions: fast on 2 cores
    with pytest.raises(UserError, match="ops"):
        StringsTask(ops=("shuffle",))


# ---------------------------------------------------------------------------------------------- config and sampler


def test_mix_reaches_config_through_set_and_refuses_mistakes():
    cfg = load_config(overrides=["task.mix=[{name: arithmetic, weight: 0.5}, {name: strings, weight: 0.5}]"])
    assert [(e.name, e.weight) for e in cfg.task.mix] == [("arithmetic", 0.5), ("strings", 0.5)]
    assert load_config("multitask").task.mix is not None
    for bad, word in [("[{name: arithmetic, weight: 0}]", "all 0"), ("[{name: a}, {name: a}]", "once"),
                      ("[{name: arithmetic, weight: -1}]", ">= 0"), ("[{name: arithmetic, weight: [[5, 1], [2, 1]]}]", "increasing")]:
        with pytest.raises(UserError, match=word):
            load_config(overrides=[f"task.mix={bad}"])
    with pytest.raises(UserError, match="unique"):
        load_config(overrides=["eval.downstream=[{name: x, task: arithmetic}, {name: x, task: strings}]"])


def _sampler(weights, seed=0, n=200):
    domains = {d: [f"{d}:{i}" for i in range(n)] for d in weights}
    funcs = {d: (w if callable(w) else (lambda s, w=w: w)) for d, w in weights.items()}
    return MixtureSampler(domains, funcs, lambda ids, s: algo_curriculum(CurriculumConfig(), ids, s), seed)


def test_multitask_preset_builds_each_domain_with_a_one_token_habit_and_harder_downstream_sets():
    """The preset's design (configs/multitask.yaml, docs/tasks.md): every domain's demonstrations are right in
    the working and slip only in the answer; arithmetic keeps its untaught tier; the warm-up's batches are ~42%
    arithmetic; the downstream sets hold problems longer than any the domain trains on."""
    cfg = load_config("multitask")
    task = build_task(cfg.task)
    shown = {d: [(p, task.demonstration(p)) for p in ps] for d, ps in task.train_by_domain.items()}
    demos = {d: [(p, demo) for p, demo in pairs if demo is not None] for d, pairs in shown.items()}
    assert {p.meta["tier"] for p, demo in shown["arithmetic"] if demo is None} == {"nine_operands"}
    assert len(demos["strings"]) == len(shown["strings"])  # strings has no untaught problems
    share = len(demos["arithmetic"]) / sum(len(v) for v in demos.values())
    assert abs(share - 0.42) < 0.01
    wrong = {d: np.mean([not task.grade(p, demo) for p, demo in pairs]) for d, pairs in demos.items()}
    assert abs(wrong["strings"] - 0.9 * 2 / 3) < 0.04  # case_slip 0.9 on rev and sort, two ops of three
    assert 0.15 < wrong["arithmetic"] < 0.45  # answer_slip 0.9 on the negative results
    for pairs in demos.values():
        for p, demo in pairs[:200]:
            clean = demo.split("</think>")[1]
            assert clean.lower() == p.answer.lower() or clean == p.answer.lstrip("-")
    longest = {"arithmetic": max(p.meta["operands"] for p, _ in demos["arithmetic"]),
               "strings": max(p.meta["length"] for p, _ in demos["strings"])}
    for name, (other, problems) in build_downstream(cfg, task).items():
        key = "operands" if name == "long_arithmetic" else "length"
        domain = "arithmetic" if key == "operands" else "strings"
        assert min(p.meta[key] for p in problems) > longest[domain]


def test_mixture_draws_domains_at_configured_rates():
    s = _sampler({"a": 1.0, "b": 3.0}, seed=7)
    picks = [pid.split(":")[0] for _ in range(400) for pid in s.next_ids(32)]
    share = picks.count("a") / len(picks)
    sd = np.sqrt(0.25 * 0.75 / len(picks))
    assert abs(share - 0.25) < 4 * sd  # 12,800 draws: 4 standard deviations is ~0.015


def test_mixture_weight_schedule_over_steps():
    cfg = load_config(overrides=["task.mix=[{name: arithmetic, weight: [[0, 1], [100, 0]]}, "
                                 "{name: strings, weight: [[0, 0], [100, 1]]}]"])
    a, b = cfg.task.mix
    assert (a.weight_at(0), a.weight_at(50), a.weight_at(100), a.weight_at(500)) == (1.0, 0.5, 0.0, 0.0)
    s = _sampler({"a": a.weight_at, "b": b.weight_at})
    first = [pid.split(":")[0] for pid in s.next_ids(32)]
    assert first == ["a"] * 32  # batch 0: all weight on a
    for _ in range(99):
        s.next_ids(32)
    assert {pid.split(":")[0] for pid in s.next_ids(32)} == {"b"}  # batch 100 on: all on b


def test_mixture_state_restores_exactly_with_npr_history():
    def run(s, start, stop):
        out = []
        for b in range(start, stop):
            ids = s.next_ids(16)
            out.append(ids)
            for pid in ids:  # every third prompt solved: NPR retires those, per domain
                s.update(pid, 4 if int(pid.split(":")[1]) % 3 == 0 else 1, 4)
        return out

    ref = _sampler({"a": 1.0, "b": 1.0}, n=40)
    whole = run(ref, 0, 20)
    first = _sampler({"a": 1.0, "b": 1.0}, n=40)
    head = run(first, 0, 8)
    state = json.loads(json.dumps(first.state_dict()))  # what a checkpoint holds
    resumed = _sampler({"a": 1.0, "b": 1.0}, n=40)
    resumed.load_state_dict(state)
    assert head + run(resumed, 8, 20) == whole
    assert resumed.retired == ref.retired > 0
    with pytest.raises(UserError, match="task.mix"):
        _sampler({"a": 1.0, "c": 1.0}).load_state_dict(state)


def test_mixture_task_problems_carry_their_domain():
    cfg = micro(MIX, DOWNSTREAM)
    task = build_task(cfg.task)
    assert task.domains == ["arithmetic", "strings"]
    assert {p.meta["domain"] for p in task.train_problems()} == {"arithmetic", "strings"}
    assert [p.meta["domain"] for p in task.val_problems()[:4]] == ["arithmetic", "strings"] * 2  # interleaved
    for p in task.train_problems()[::7]:
        assert p.id.startswith(p.meta["domain"] + ":") and task.grade(p, task.demonstration(p))
    ids = build_curriculum(cfg, task).next_ids(4)
    assert all(i in {p.id for p in task.train_problems()} for i in ids)
    (other, problems), = build_downstream(cfg, task).values()
    assert len(problems) == 8 and all(p.meta["operands"] == 5 for p in problems)
    assert not {p.prompt for p in problems} & {p.prompt for p in task.train_problems()}


def test_a_domain_may_bring_its_own_split_sizes():
    """task.n_train / n_val apply per domain; a mix entry's own sizes replace them for that domain only."""
    cfg = micro("task.n_train=40", "task.n_val=6", MIX.replace("{name: strings, weight: 0.5,",
                                                             "{name: strings, weight: 0.5, n_train: 15, n_val: 3,"))
    task = build_task(cfg.task)
    assert {d: len(ps) for d, ps in task.train_by_domain.items()} == {"arithmetic": 40, "strings": 15}
    assert [p.meta["domain"] for p in task.val_problems()] == ["arithmetic", "strings"] * 3 + ["arithmetic"] * 3
    with pytest.raises(UserError, match="n_train"):
        load_config(overrides=["task.mix=[{name: strings, n_train: 0}]"])


# ---------------------------------------------------------------------------------------------- evaluation and fits


class _Oracle:
    """An engine that answers strings problems correctly and arithmetic ones wrongly."""

    def __init__(self, task, problems):
        self.by_prompt = {tuple(p.prompt.encode()): p for p in problems}
        self.task = task

    def generate(self, prompts, n, length, seed):
        out = []
        for ids in prompts:
            p = self.by_prompt[tuple(ids)]
            text = self.task.demonstration(p) if p.meta["domain"] == "strings" else "<think></think>x"
            out.append([SimpleNamespace(text=text, truncated=False)] * n)
        return out


def test_evaluate_reports_each_domain_beside_the_overall_rate():
    task = build_task(micro(MIX).task)
    val = task.val_problems()
    res = evaluate(_Oracle(task, val), lambda s: list(s.encode()), task, val, 2, None, seed=0)
    assert res["val/strings/pass_rate"] == 1.0 and res["val/arithmetic/pass_rate"] == 0.0
    assert res["val/pass_rate"] == pytest.approx(0.5)
    down = evaluate(_Oracle(task, val), lambda s: list(s.encode()), task, val[:3], 1, None, seed=0, prefix="downstream/x")
    assert down["downstream/x/pass_rate"] == pytest.approx(1 / 3) and "val/pass_rate" not in down


def test_forecaster_fits_each_domain(tmp_path):
    f = Forecaster(ForecastConfig())
    xs = np.geomspace(1.0, 100.0, 14)
    sig = lambda x, A, C: 0.05 + (A - 0.05) / (1 + (C / x) ** 1.5)  # noqa: E731
    last = {}
    f.update(0.0, 0.05, {"math": 0.05, "code": 0.05})
    for x in xs:
        last = f.update(float(x), sig(x, 0.6, 10.0), {"math": sig(x, 0.7, 8.0), "code": sig(x, 0.5, 12.0)})
    assert last["forecast/math/A"] == pytest.approx(0.7, abs=0.02)
    assert last["forecast/code/A"] == pytest.approx(0.5, abs=0.02)
    assert last["forecast/A"] == pytest.approx(0.6, abs=0.02)
    again = Forecaster(ForecastConfig())
    again.load_state_dict(json.loads(json.dumps(f.state_dict())))
    assert again.domains["code"].y == f.domains["code"].y
    summary = f.write_final(tmp_path, title="t")
    fits = json.loads((tmp_path / "fit.json").read_text())["fits"]
    assert [fit["y"] for fit in fits] == ["val/pass_rate", "val/math/pass_rate", "val/code/pass_rate"]
    assert summary["domains"]["math"]["A"] == pytest.approx(0.7, abs=0.02)


# ---------------------------------------------------------------------------------------------- runs


def test_mixture_run_logs_domains_and_downstream_and_resumes_exactly(tmp_path):
    sets = ("backend=inline", "checkpoint_every=3", "eval.every=3", MIX, DOWNSTREAM)
    train(micro("steps=6", *sets), tmp_path / "ref", show_progress=False)
    evals = [r for r in read_metrics(tmp_path / "ref") if "val/pass_rate" in r]
    assert [r["step"] for r in evals] == [0, 3, 6]
    for r in evals:
        for key in ("val/arithmetic/pass_rate", "val/strings/pass_rate", "downstream/long_arith/pass_rate"):
            assert 0.0 <= r[key] <= 1.0
    train(micro("steps=3", *sets), tmp_path / "cut", show_progress=False)
    train(micro("steps=6", *sets), tmp_path / "cut", resume=True, show_progress=False)
    consumed = [(tmp_path / d / "consumed.jsonl").read_text() for d in ("ref", "cut")]
    assert consumed[0] == consumed[1]
    domains = {pid.split(":")[0] for line in consumed[0].splitlines() for pid in json.loads(line)["problem_ids"]}
    assert domains == {"arithmetic", "strings"}


# ---------------------------------------------------------------------------------------------- report


def _fake_run(run_dir, mix: dict[str, tuple[float, float]] | None, name="arithmetic"):
    """A run directory whose per-domain pass rates follow Eq. 1 with (A, Cmid) per domain."""
    import yaml

    from scalerl.curves.sigmoid import sigmoid

    run_dir.mkdir(parents=True)
    task = {"name": name, "mix": [{"name": d, "weight": 1.0, "params": {}} for d in mix] if mix else None}
    downstream = [{"name": "long", "task": name, "n": 8, "seed": 1, "params": {}}] if mix else []
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"name": run_dir.name, "task": task,
                                                         "eval": {"downstream": downstream}}))
    lines = []
    for step in range(0, 155, 5):
        c = step * 0.02
        per = {d: float(sigmoid(np.array([c]), 0.1, A, 2.0, cm)[0]) if c else 0.1 for d, (A, cm) in (mix or {"x": (0.5, 0.8)}).items()}
        rec = {"step": step, "compute/device_hours": c, "val/pass_rate": float(np.mean(list(per.values())))}
        if mix:
            rec.update({f"val/{d}/pass_rate": v for d, v in per.items()})
            rec["downstream/long/pass_rate"] = rec["val/pass_rate"] / 2
        lines.append(json.dumps(rec))
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_report_shows_each_domain_fit_and_downstream_beside_validation(tmp_path):
    import os

    from scalerl.experiments.report import write_report
    from test_loo import CHROMIUM, _screenshot

    _fake_run(tmp_path / "sweep" / "mixture", {"arithmetic": (0.7, 0.6), "strings": (0.45, 1.2)})
    _fake_run(tmp_path / "sweep" / "arithmetic-only", None)
    out = tmp_path / "report.html"
    a = write_report(tmp_path / "sweep", out, quiet=True)
    mixture = next(r for r in a.runs if r.name == "mixture").breakdown
    assert mixture.domains["arithmetic"][1].A == pytest.approx(0.7, abs=0.01)
    assert mixture.domains["strings"][1].A == pytest.approx(0.45, abs=0.01)
    assert list(mixture.downstream) == ["long"]
    html = out.read_text()
    assert "Per-domain curves and downstream sets" in html
    # the mixture's val/pass_rate averages two domains, arithmetic-only's one: the ranking says they do not compare
    assert len([w for w in a.warnings if "validate on different tasks" in w]) == 1
    assert "validate on different tasks" in html
    _fake_run(tmp_path / "same" / "a", None)
    _fake_run(tmp_path / "same" / "b", None)  # one task: no such warning
    assert not any("different tasks" in w for w in write_report(tmp_path / "same", tmp_path / "s.html", quiet=True).warnings)
    assert html.count('src="data:image/png;base64,') == 4  # curves, slopes, per-domain, diagnostics
    for cell in ("<td class=l>strings</td>", "<td class=l>downstream: long</td>", "<b>0.450</b>"):
        assert cell in html
    single = tmp_path / "single.html"
    write_report(tmp_path / "sweep" / "arithmetic-only", single, quiet=True)
    assert "Per-domain curves" not in single.read_text()  # a single-task report is as before
    if os.path.exists(CHROMIUM):  # the page renders: text, tables and figures, not a blank page
        png = tmp_path / "shot.png"
        _screenshot(out.resolve(), png, tmp_path)
        from matplotlib.image import imread

        img = imread(png)[..., :3]
        assert img.shape[:2] == (2000, 1280) and img.std() > 0.05


def test_fit_and_compare_read_a_domain_column(tmp_path, capsys):
    from scalerl.cli import main

    _fake_run(tmp_path / "a", {"arithmetic": (0.7, 0.6), "strings": (0.45, 1.2)})
    _fake_run(tmp_path / "b", {"arithmetic": (0.6, 0.6), "strings": (0.55, 1.2)})
    main(["fit", str(tmp_path / "a"), "--y", "val/strings/pass_rate", "--json"])
    fit, = json.loads(capsys.readouterr().out)["fits"]
    assert fit["y"] == "val/strings/pass_rate" and fit["A"] == pytest.approx(0.45, abs=0.01)
    main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--y", "val/strings/pass_rate", "--json"])
    captured = capsys.readouterr()
    first = json.loads(captured.out)["ranking"][0]
    assert first["source"] == str(tmp_path / "b" / "metrics.jsonl")  # b has the higher strings A
    assert first["A"] == pytest.approx(0.55, abs=0.01)
    assert "different tasks" not in captured.err  # one column of the same task in both runs
    main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json"])
    assert "different tasks" not in capsys.readouterr().err  # the same mixture: the overall rates compare
    _fake_run(tmp_path / "alone", None)  # one domain alone against the mixture's average: they do not
    main(["compare", str(tmp_path / "a"), str(tmp_path / "alone"), "--json"])
    assert "validate on different tasks" in capsys.readouterr().err


def test_runs_differ_in_validation_only_when_their_tasks_do(tmp_path):
    """Weights, training sizes and training-only params leave the validation set alone; another task, another
    domain set, another validation size or seed do not."""
    import yaml

    from scalerl.experiments.analysis import validate_on_different_tasks

    mix = [{"name": "arithmetic", "weight": 0.5}, {"name": "strings", "weight": 0.5}]
    variants = {
        "base": {"mix": mix, "n_val": 256, "seed": 0},
        "weights": {"mix": [{**mix[0], "weight": 0.8}, {**mix[1], "weight": 0.2, "n_train": 9}], "n_val": 256,
                    "seed": 0, "n_train": 100},
        "single": {"name": "arithmetic", "n_val": 256, "seed": 0},
        "habit": {"name": "arithmetic", "params": {"answer_slip": 0.0}, "n_val": 256, "seed": 0},
        "fewer_val": {"mix": [mix[0], {**mix[1], "n_val": 64}], "n_val": 256, "seed": 0},
        "seed": {"mix": mix, "n_val": 256, "seed": 3},
    }
    for name, task in variants.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.yaml").write_text(yaml.safe_dump({"task": task}))
    differs = lambda *names: validate_on_different_tasks([tmp_path / n for n in names])  # noqa: E731
    assert not differs("base", "weights") and not differs("single", "habit")
    assert not differs("base", "missing")  # a path without config.yaml is not counted
    for other in ("single", "fewer_val", "seed"):
        assert differs("base", other), other
