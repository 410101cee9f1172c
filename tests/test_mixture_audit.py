"""Audit of the task mixture (§5: several domains trained together, one sigmoid per domain): the domains' shares
of a batch (weights and weight schedules), per-domain No-Positive-Resampling (§3.2, Fig. 6b) and problem ids, an
exact resume of the sampler, per-domain evaluation (pooled overall), and the edge cases (weight 0, a domain
whose prompts are all retired, a single-domain mixture, bad input). Numbers are worked by hand in the comments."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from test_pipeline import micro

from scalerl.algo.curriculum import NPRSampler
from scalerl.algo.mixture import MixtureSampler
from scalerl.build import build_curriculum, build_task
from scalerl.config import load_config
from scalerl.errors import UserError
from scalerl.evaluate import evaluate
from scalerl.tasks.base import Problem
from scalerl.tasks.files import StaticTask
from scalerl.tasks.mixture import MixtureTask


def _npr(ids, seed):
    return NPRSampler(list(ids), seed, threshold=0.9, min_samples=1)


def _const(w):
    return lambda step: w


def _mixture(domains, weights, seed=0):
    return MixtureSampler(domains, weights, _npr, seed)


def _ids(prefix, n):
    return [f"{prefix}:{i}" for i in range(n)]


def _exact(problem, completion):
    return completion == problem.answer


def _static(name, train, val):
    return StaticTask(name, [Problem(str(i), q, a) for i, q, a in train], [Problem(str(i), q, a) for i, q, a in val],
                      _exact)


# ------------------------------------------------------------------------------------- (1) shares of a batch


def test_shares_are_the_configured_weights_over_their_sum_with_a_linear_schedule():
    cfg = load_config(overrides=[("task.mix=[{name: arithmetic, weight: [[0, 1.0], [200, 0.2]]}, "
                                  "{name: strings, weight: 0.4}]")])
    a, b = cfg.task.mix
    s = _mixture({"a": _ids("a", 4), "b": _ids("b", 4)}, {"a": a.weight_at, "b": b.weight_at})
    # step 0: 1.0 and 0.4 -> 1/1.4, 0.4/1.4; step 100: halfway, 0.6 and 0.4 -> 0.6, 0.4;
    # step 200 and past the end: 0.2 and 0.4 -> 1/3, 2/3
    np.testing.assert_allclose(s.weights(0), [1 / 1.4, 0.4 / 1.4])
    np.testing.assert_allclose(s.weights(100), [0.6, 0.4])
    np.testing.assert_allclose(s.weights(50), [0.8 / 1.2, 0.4 / 1.2])
    np.testing.assert_allclose(s.weights(200), [1 / 3, 2 / 3])
    np.testing.assert_allclose(s.weights(10_000), [1 / 3, 2 / 3])


def test_domains_are_drawn_at_their_weights_in_expectation_not_exactly():
    s = _mixture({"a": _ids("a", 50), "b": _ids("b", 50)}, {"a": _const(0.6), "b": _const(0.4)}, seed=3)
    per_batch = []
    for _ in range(400):
        ids = s.next_ids(32)
        assert len(ids) == 32
        per_batch.append(sum(pid.startswith("a:") for pid in ids))
    share = sum(per_batch) / (400 * 32)
    sd = np.sqrt(0.6 * 0.4 / (400 * 32))  # ~0.0043
    assert abs(share - 0.6) < 4 * sd
    # documented as independent draws per prompt (in expectation), so a batch's count varies around 19.2
    assert len(set(per_batch)) > 3


def test_a_schedule_moves_the_shares_over_the_batches():
    # a: 1 -> 0 over batches 0..100, b: 0 -> 1. Expected a-prompts over batches 0..99 of 32:
    # sum_b 32 (1 - b/100) = 32 (100 - 49.5) = 1616; sd = sqrt(32 sum p(1-p)) ~ sqrt(32 * 16.5) ~ 23
    s = _mixture({"a": _ids("a", 40), "b": _ids("b", 40)},
                 {"a": lambda t: max(0.0, 1 - t / 100), "b": lambda t: min(1.0, t / 100)}, seed=5)
    count = sum(pid.startswith("a:") for _ in range(100) for pid in s.next_ids(32))
    assert abs(count - 1616) < 4 * 23
    assert all(pid.startswith("b:") for pid in s.next_ids(32))  # batch 100: b only


def test_multitask_preset_wires_its_weights_and_domains():
    cfg = load_config("multitask", None, ["task.n_train=30", "task.n_val=4"])
    task = build_task(cfg.task)
    sampler = build_curriculum(cfg, task)
    assert task.domains == sampler.names == ["arithmetic", "strings"]
    np.testing.assert_allclose(sampler.weights(0), [0.6, 0.4])
    np.testing.assert_allclose(sampler.weights(199), [0.6, 0.4])


# ------------------------------------------------------------------ (2) per-domain NPR history and problem ids


def test_the_same_raw_id_in_two_domains_stays_two_problems_graded_by_their_own_domain():
    a = _static("a", [(0, "q0", "x"), (1, "q1", "y")], [(9, "v", "z")])
    b = _static("b", [(0, "q0", "X"), (1, "q1", "Y")], [(9, "v", "Z")])
    mix = MixtureTask({"a": a, "b": b})
    ids = [p.id for p in mix.train_problems()]
    assert ids == ["a:0", "a:1", "b:0", "b:1"] and len(set(ids)) == 4
    by_id = {p.id: p for p in mix.train_problems()}
    assert mix.grade(by_id["a:0"], "x") and not mix.grade(by_id["a:0"], "X")
    assert mix.grade(by_id["b:0"], "X") and not mix.grade(by_id["b:0"], "x")
    val = mix.val_problems()
    assert [p.id for p in val] == ["a:9", "b:9"] and mix.grade(val[1], "Z") and not mix.grade(val[1], "z")


def test_a_train_and_a_val_problem_sharing_a_raw_id_each_grade_against_their_own_answer():
    """A task with a separate validation file (``val_path``) may number both files' records from 0; the mixture
    must grade a training problem against its own answer, not the validation problem's of the same id."""
    t = _static("t", [(0, "2+2=", "4")], [(0, "3+3=", "6")])
    mix = MixtureTask({"t": t, "u": _static("u", [(0, "q", "a")], [(0, "v", "b")])})
    train = {p.id: p for p in mix.train_problems()}
    val = {p.id: p for p in mix.val_problems()}
    assert mix.grade(train["t:0"], "4") and not mix.grade(train["t:0"], "6")
    assert mix.grade(val["t:0"], "6") and not mix.grade(val["t:0"], "4")
    assert mix.grade(train["u:0"], "a") and mix.grade(val["u:0"], "b")


def test_math_files_numbered_from_zero_in_both_splits_grade_in_a_mixture(tmp_path):
    pytest.importorskip("math_verify")
    train = tmp_path / "train.jsonl"
    val = tmp_path / "val.jsonl"
    train.write_text("".join(json.dumps({"id": i, "question": f"{i}+1?", "answer": str(i + 1)}) + "\n" for i in range(3)))
    val.write_text("".join(json.dumps({"id": i, "question": f"{i}+10?", "answer": str(i + 10)}) + "\n" for i in range(3)))
    cfg = micro(f"task.mix=[{{name: math, weight: 1, params: {{path: '{train}', val_path: '{val}'}}, n_train: 3, "
                f"n_val: 3}}, {{name: strings, weight: 1, n_train: 4, n_val: 2}}]")
    task = build_task(cfg.task)
    for p in task.train_problems():
        if p.meta["domain"] == "math":  # "0+1?" -> 1, its val namesake "0+10?" -> 10
            assert task.grade(p, f"\\boxed{{{p.answer}}}"), p
    for p in task.val_problems():
        if p.meta["domain"] == "math":
            assert task.grade(p, f"\\boxed{{{p.answer}}}"), p


def test_a_prompt_retired_in_one_domain_leaves_the_other_domain_alone():
    raw = [str(i) for i in range(4)]  # the same raw ids in both domains
    domains = {d: [f"{d}:{r}" for r in raw] for d in ("a", "b")}

    def run(solve_a0: bool):
        s = _mixture(domains, {"a": _const(1.0), "b": _const(1.0)}, seed=11)
        served = []
        for _ in range(12):
            ids = s.next_ids(4)
            served.append(ids)
            for pid in ids:  # a:0 solved 4/4 (>= 0.9: retired at its domain's next epoch); everything else 1/4
                s.update(pid, 4 if (solve_a0 and pid == "a:0") else 1, 4)
        return s, served

    s, served = run(True)
    ref, ref_served = run(False)
    assert s.is_retired("a:0") and not s.is_retired("b:0")
    assert s.retired == 1 and s.samplers["b"].retired == 0
    assert s.pass_rate("b:0") == ref.pass_rate("b:0") == 0.25
    # b's prompts are served exactly as without the retirement in a
    assert [[p for p in ids if p.startswith("b:")] for ids in served] == \
           [[p for p in ids if p.startswith("b:")] for ids in ref_served]
    # once retired, a:0 is not served again (a has 3 other prompts left)
    later = [p for ids in served[6:] for p in ids]
    assert "a:0" not in later and "b:0" in later


# ----------------------------------------------------------------------------------------- (3) exact resume


def test_a_resumed_sampler_draws_what_an_uninterrupted_one_draws():
    domains = {"a": _ids("a", 7), "b": _ids("b", 5)}
    weights = {"a": lambda t: 1.0 if t < 10 else 0.3, "b": lambda t: 0.5}

    def run(s, start, stop):
        out = []
        for _ in range(start, stop):
            ids = s.next_ids(6)
            out.append(ids)
            for pid in ids:  # prompts whose raw id is even are solved: NPR retires them per domain
                s.update(pid, 8 if int(pid.split(":")[1]) % 2 == 0 else 3, 8)
        return out

    whole_sampler = _mixture(domains, weights, seed=42)
    whole = run(whole_sampler, 0, 30)
    head_sampler = _mixture(domains, weights, seed=42)
    head = run(head_sampler, 0, 7)  # batch 7 starts mid-epoch in both domains (6 ids a batch, 7 and 5 prompts)
    state = json.loads(json.dumps(head_sampler.state_dict()))
    resumed = _mixture(domains, weights, seed=42)
    resumed.load_state_dict(state)
    assert head + run(resumed, 7, 30) == whole
    assert resumed.retired == whole_sampler.retired > 0
    assert all(resumed.pass_rate(p) == whole_sampler.pass_rate(p) for d in domains.values() for p in d)
    assert resumed.state_dict() == json.loads(json.dumps(whole_sampler.state_dict()))


# ------------------------------------------------------------------------------------ (4) per-domain metrics


class _Engine:
    """Answers the prompts in ``right`` with their answer, the others with nothing."""

    def __init__(self, problems, right):
        self.by_prompt = {tuple(p.prompt.encode()): p for p in problems}
        self.right = set(right)

    def generate(self, prompts, n, length, seed):
        out = []
        for ids in prompts:
            p = self.by_prompt[tuple(ids)]
            out.append([SimpleNamespace(text=p.answer if p.prompt in self.right else "", truncated=False)] * n)
        return out


def test_each_domain_is_rated_on_its_own_prompts_and_the_overall_rate_is_pooled():
    a = _static("a", [(0, "ta", "x")], [(1, "a1", "1"), (2, "a2", "2"), (3, "a3", "3")])
    b = _static("b", [(0, "tb", "y")], [(1, "b1", "4")])
    mix = MixtureTask({"a": a, "b": b})
    val = mix.val_problems()
    assert [p.id for p in val] == ["a:1", "b:1", "a:2", "a:3"]  # interleaved, the longer domain's rest at the end
    res = evaluate(_Engine(val, {"a1", "a2", "b1"}), lambda s: list(s.encode()), mix, val, 2, None, seed=0)
    # a: 2 of its 3 prompts right -> 2/3; b: its 1 prompt right -> 1; pooled over 4 prompts x 2 samples: 6/8
    # (the mean of the domains' rates would be 5/6)
    assert res["val/a/pass_rate"] == pytest.approx(2 / 3)
    assert res["val/b/pass_rate"] == 1.0
    assert res["val/pass_rate"] == pytest.approx(0.75)
    assert res["val/n"] == 8.0


def test_tiers_of_a_domain_are_reported_under_that_domain_only():
    tiered = StaticTask("a", [Problem("t", "t", "t")],
                        [Problem("1", "p1", "1", {"tier": "easy"}), Problem("2", "p2", "2", {"tier": "hard"})], _exact)
    mix = MixtureTask({"a": tiered, "b": _static("b", [(0, "tb", "y")], [(1, "b1", "4")])})
    val = mix.val_problems()
    res = evaluate(_Engine(val, {"p1"}), lambda s: list(s.encode()), mix, val, 1, None, seed=0)
    assert res["val/a/tier/easy/pass_rate"] == 1.0 and res["val/a/tier/hard/pass_rate"] == 0.0
    assert res["val/a/pass_rate"] == 0.5 and res["val/b/pass_rate"] == 0.0
    assert res["val/pass_rate"] == pytest.approx(1 / 3)
    assert not any(k.startswith(("val/tier/", "val/b/tier/")) for k in res)


# ------------------------------------------------------------------------------------------- (5) edge cases


def test_a_domain_of_weight_zero_is_never_drawn():
    cfg = load_config(overrides=["task.mix=[{name: arithmetic, weight: 0}, {name: strings, weight: 2}]"])
    assert [e.weight for e in cfg.task.mix] == [0.0, 2.0]
    s = _mixture({"a": _ids("a", 5), "b": _ids("b", 5)}, {"a": _const(0.0), "b": _const(2.0)})
    np.testing.assert_allclose(s.weights(0), [0.0, 1.0])
    assert all(pid.startswith("b:") for _ in range(50) for pid in s.next_ids(8))
    assert s.samplers["a"]._epoch == -1  # a's curriculum never even started an epoch


def test_a_domain_whose_prompts_are_all_retired_keeps_its_share_and_serves_them_again():
    """Documented per domain (algo/curriculum.py): a curriculum whose every prompt is retired falls back to
    serving them all; the mixture does not move that domain's share to the others."""
    s = _mixture({"a": _ids("a", 3), "b": _ids("b", 6)}, {"a": _const(1.0), "b": _const(1.0)}, seed=1)
    for _ in range(20):
        for pid in s.next_ids(6):
            s.update(pid, 4 if pid.startswith("a:") else 0, 4)  # a always solved, b never
    assert s.samplers["a"].exhausted and s.samplers["a"].retired == 3
    assert s.retired == 3 and not s.exhausted
    picks = [pid for _ in range(100) for pid in s.next_ids(6)]
    share_a = sum(p.startswith("a:") for p in picks) / len(picks)
    assert abs(share_a - 0.5) < 4 * np.sqrt(0.25 / len(picks))
    assert {p for p in picks if p.startswith("a:")} == {"a:0", "a:1", "a:2"}


def test_a_single_domain_mixture_serves_grades_and_evaluates_as_the_plain_task():
    plain_cfg = micro("task.n_train=20", "task.n_val=4")
    mix_cfg = micro("task.n_train=20", "task.n_val=4", "task.mix=[{name: arithmetic, weight: 3, "
                    "params: {max_operands: 5}}]")
    plain, mix = build_task(plain_cfg.task), build_task(mix_cfg.task)
    assert [f"arithmetic:{p.id}" for p in plain.train_problems()] == [p.id for p in mix.train_problems()]
    assert [p.prompt for p in plain.val_problems()] == [p.prompt for p in mix.val_problems()]
    ps, ms = build_curriculum(plain_cfg, plain), build_curriculum(mix_cfg, mix)
    for _ in range(15):
        a, b = ps.next_ids(4), ms.next_ids(4)
        assert [f"arithmetic:{i}" for i in a] == b
        for i, j in zip(a, b):
            solved = 4 if len(i) % 2 else 2
            ps.update(i, solved, 4)
            ms.update(j, solved, 4)
    assert ps.retired == ms.retired
    by_id = {p.id: p for p in plain.train_problems()}
    for p in mix.train_problems()[:5]:
        orig = by_id[p.id.removeprefix("arithmetic:")]
        assert mix.grade(p, "<think></think>" + p.answer) == plain.grade(orig, "<think></think>" + orig.answer)
    right = {p.prompt for p in plain.val_problems()[:3]}
    enc = lambda s: list(s.encode())
    r_plain = evaluate(_Engine(plain.val_problems(), right), enc, plain, plain.val_problems(), 1, None, seed=0)
    r_mix = evaluate(_Engine(mix.val_problems(), right), enc, mix, mix.val_problems(), 1, None, seed=0)
    assert r_plain["val/pass_rate"] == r_mix["val/pass_rate"]
    # a mixture names its domain even when it is the only one: the column a sweep's report reads for that domain
    assert r_mix["val/arithmetic/pass_rate"] == r_mix["val/pass_rate"]
    # the same tier rates; a mixture names them under the domain (val/<domain>/tier/<name>/pass_rate)
    tiers = {k: v for k, v in r_plain.items() if k.startswith("val/tier/")}
    assert tiers and {k.replace("val/", "val/arithmetic/", 1): v for k, v in tiers.items()} == \
           {k: v for k, v in r_mix.items() if "/tier/" in k}


@pytest.mark.parametrize("mix, word", [
    ("[{name: arithmetic, weight: -0.5}, {name: strings, weight: 1}]", "weight"),
    # the error names the bad point of a schedule (it named the union's number arm: "weight.float: Input should be a
    # valid number")
    ("[{name: arithmetic, weight: [[0, -1], [10, 1]]}, {name: strings, weight: 1}]", r"finite number >= 0, got \[0, -1"),
    ("[{name: arithmetic, weight: [[-5, 1]]}, {name: strings, weight: 1}]", r"whole number from 0 .*, got \[-5, 1"),
    # a NaN or inf inside a schedule, or a point that is not [step, weight], is named too (the union's number arm
    # was: "weight.float: Input should be a valid number (and 1 more)")
    ("[{name: arithmetic, weight: [[0, 1], [10, .nan]]}, {name: strings, weight: 1}]", r"finite .*, got \[10, nan\]"),
    ("[{name: arithmetic, weight: [[0, 1], [10, .inf]]}, {name: strings, weight: 1}]", r"finite .*, got \[10, inf\]"),
    ("[{name: arithmetic, weight: [[0, 1, 2]]}, {name: strings, weight: 1}]", r"\[step, weight\].*, got \[0, 1, 2\]"),
    ("[{name: arithmetic, weight: [[0.5, 1]]}, {name: strings, weight: 1}]", r"whole number from 0.*, got \[0\.5, 1\]"),
    ("[{name: arithmetic, weight: abc}, {name: strings, weight: 1}]", r"weight: a weight is a finite number .*'abc'"),
    # an integer too large for a float (math.isfinite raised OverflowError, a traceback), a step beyond int64
    (f"[{{name: arithmetic, weight: {10**400}}}, {{name: strings, weight: 1}}]", r"a weight is a finite number .*\.\.\."),
    (f"[{{name: arithmetic, weight: [[0, {10**400}]]}}, {{name: strings}}]", r"finite number >= 0, got \[0, 1000"),
    ("[{name: arithmetic, weight: [[0, 1], [1.0e+20, 2]]}, {name: strings}]", r"from 0 to 1e\+15 .*got \[1e\+20, 2\]"),
    ("[{name: arithmetic, weight: 0}, {name: strings, weight: 0}]", "all 0"),
    ("[{name: arithmetic, weight: [[0, 0], [10, 1]]}, {name: strings, weight: 0}]", "all 0 at step 0"),
    ("[{name: arithmetic, weight: .nan}]", "finite"),
    ("[{name: arithmetic, weight: 1}, {name: arithmetic, weight: 1}]", "once"),
    ("[]", "once"),
    ("[{name: arithmetic, weight: [[10, 1], [10, 2]]}]", "increasing"),
])
def test_bad_mixture_config_is_a_one_line_user_error(mix, word):
    with pytest.raises(UserError, match=word) as info:
        load_config(overrides=[f"task.mix={mix}"])
    assert "\n" not in str(info.value)


def test_an_unknown_domain_task_is_a_one_line_user_error_naming_the_entry():
    cfg = load_config(overrides=["task.mix=[{name: arithmetic, weight: 1}, {name: nosuch, weight: 1}]"])
    with pytest.raises(UserError, match=r"task\.mix\[1\]\.name: unknown task 'nosuch'") as info:
        build_task(cfg.task)
    assert "\n" not in str(info.value)


def test_huge_finite_weights_still_give_their_shares():
    """Weights are relative; two of 1e308 are 1/2 each (their sum overflows to inf, which must not reach the draw)."""
    cfg = load_config(overrides=["task.mix=[{name: arithmetic, weight: 1e308}, {name: strings, weight: 3e307}]"])
    a, b = cfg.task.mix
    s = _mixture({"a": _ids("a", 4), "b": _ids("b", 4)}, {"a": a.weight_at, "b": a.weight_at})
    np.testing.assert_allclose(s.weights(0), [0.5, 0.5])
    assert len(s.next_ids(8)) == 8
    s2 = _mixture({"a": _ids("a", 4), "b": _ids("b", 4)}, {"a": a.weight_at, "b": b.weight_at})
    np.testing.assert_allclose(s2.weights(0), [1 / 1.3, 0.3 / 1.3])


def test_a_single_domain_mixture_run_has_its_domain_curve_in_a_sweep_report(tmp_path):
    """A mixture of one domain logs val/<domain>/pass_rate (the column the report and the live forecast read for a
    mixture's domain); without it the sweep report's per-domain panel dropped the run silently."""
    from scalerl.experiments.analysis import load_breakdown
    from scalerl.runlog import read_metrics
    from scalerl.pipeline.runner import train

    cfg = micro("backend=inline", "steps=4", "eval.every=2", "checkpoint_every=100",
                "task.mix=[{name: arithmetic, weight: 1, params: {max_operands: 5}}]")
    train(cfg, tmp_path, show_progress=False)
    evals = [r for r in read_metrics(tmp_path) if "val/pass_rate" in r]
    assert len(evals) >= 3 and all(r["val/arithmetic/pass_rate"] == r["val/pass_rate"] for r in evals)
    breakdown = load_breakdown(tmp_path)
    assert breakdown.mixture and list(breakdown.domains) == ["arithmetic"]
    assert list(breakdown.domains["arithmetic"][0].y) == [r["val/pass_rate"] for r in evals]


def test_a_quoted_weight_reads_as_the_number_it_quotes():
    """pydantic reads a quoted number as that number in every numeric field; a weight and a schedule's point too."""
    cfg = load_config(overrides=["task.mix=[{name: arithmetic, weight: '0.5'}, {name: strings, weight: [[0, '1']]}]"])
    assert cfg.task.mix[0].weight == 0.5 and cfg.task.mix[1].weight == [(0, 1.0)]
