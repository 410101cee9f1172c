"""The built-in arithmetic task: deterministic disjoint splits, exact grading after the last </think>."""

import re

import pytest

from scalerl.errors import UserError
from scalerl.models.tokenizer import INTERRUPTION_PHRASE, CharTokenizer
from scalerl.tasks.arithmetic import ArithmeticTask
from scalerl.tasks.base import Problem, Task
from scalerl.tasks.registry import TASKS


@pytest.fixture(scope="module")
def task() -> ArithmeticTask:
    # the 2-5 operand task with correct demonstrations
    return TASKS.get("arithmetic")(seed=3, n_train=500, n_val=100, min_operands=2, max_operands=5, answer_slip=0.0)


def test_split_is_deterministic_and_disjoint(task):
    again = ArithmeticTask(seed=3, n_train=500, n_val=100)
    other = ArithmeticTask(seed=4, n_train=500, n_val=100)
    assert isinstance(task, Task) and task.name == "arithmetic"
    train, val = task.train_problems(), task.val_problems()
    assert len(train) == 500 and len(val) == 100
    assert [p.id for p in train] == [p.id for p in again.train_problems()]
    assert [p.id for p in val] == [p.id for p in again.val_problems()]
    assert not {p.id for p in train} & {p.id for p in val}
    assert {p.prompt for p in train}.isdisjoint(p.prompt for p in val)
    assert [p.id for p in val] != [p.id for p in other.val_problems()]
    # growing the training split keeps the validation split (and the training prefix) fixed
    bigger = ArithmeticTask(seed=3, n_train=600, n_val=100)
    assert [p.id for p in bigger.val_problems()] == [p.id for p in val]
    assert [p.id for p in bigger.train_problems()[:500]] == [p.id for p in train]


def test_answers_and_demonstrations_are_correct(task):
    tok = CharTokenizer()
    think_lengths = []
    for p in task.train_problems() + task.val_problems():
        assert p.prompt == p.id + "=" and int(p.answer) == eval(p.id)  # noqa: S307 (digits and +/- only)
        demo = task.demonstration(p)
        assert demo.startswith("<think>") and demo.endswith("</think>" + p.answer)
        assert task.grade(p, demo)
        think_lengths.append(len(tok.encode(demo.rpartition("</think>")[0] + "</think>")))
    assert {p.meta["operands"] for p in task.train_problems()} == {2, 3, 4, 5}
    assert min(think_lengths) >= 6 and max(think_lengths) <= 45


def test_worked_example():
    p = Problem(id="12+7-30", prompt="12+7-30=", answer="-11", meta={"steps": ["12+7=19", "19-30=-11"]})
    t = ArithmeticTask(seed=0, n_train=5, n_val=5, sign_slip=0.0)
    assert t.demonstration(p) == "<think>12+7=19 19-30=-11</think>-11"
    assert t.grade(p, "<think>12+7=19 19-30=-11</think> -11 ")
    assert not t.grade(p, "<think>12+7=19 19-30=-11</think>-12")
    assert not t.grade(p, "<think>12+7=19 19-30=-11</think>-11.0")
    assert not t.grade(p, "-11")  # no </think>
    assert not t.grade(p, "<think>-11")
    interrupted = "<think>12+7=19 19-3 " + INTERRUPTION_PHRASE + "-11"
    assert t.grade(p, interrupted)  # the answer after the forced phrase counts
    assert not t.grade(p, "<think></think>-11 </think>5")  # only the text after the last </think>


def test_params_and_bad_params():
    easy = ArithmeticTask(seed=0, n_train=50, n_val=10, min_operands=2, max_operands=2, max_digits=1,
                          subtraction=False)
    assert all(p.meta["operands"] == 2 and "-" not in p.id for p in easy.train_problems())
    with pytest.raises(UserError, match="distinct problems"):
        ArithmeticTask(seed=0, n_train=95, n_val=10, min_operands=2, max_operands=2, max_digits=1,
                       subtraction=False)
    with pytest.raises(UserError, match="operands"):
        ArithmeticTask(min_operands=1)
    with pytest.raises(UserError, match="max_digits"):
        ArithmeticTask(max_digits=0)


TESTBED_TIERS = {"easy": {"operands": [2, 3], "share": 0.4}, "medium": {"operands": [4, 5], "share": 0.4},
                 "out_of_reach": {"operands": [9, 10], "share": 0.2}}


def test_tiers_draw_their_shares_and_operands_and_name_each_problem():
    # up to three-digit operands: every tier has far more distinct problems than are drawn, so none runs out
    t = ArithmeticTask(seed=0, n_train=2000, n_val=400, max_digits=3, tiers=TESTBED_TIERS, sign_slip=0.0)
    probs = t.train_problems() + t.val_problems()
    shares = {name: sum(p.meta["tier"] == name for p in probs) / len(probs) for name in TESTBED_TIERS}
    for name, spec in TESTBED_TIERS.items():
        assert abs(shares[name] - spec["share"]) < 0.045  # 2,400 draws: a standard error of 0.01
        lo, hi = spec["operands"]
        assert {p.meta["operands"] for p in probs if p.meta["tier"] == name} == set(range(lo, hi + 1))
    assert all(t.grade(p, t.demonstration(p)) for p in probs)


def test_the_untaught_tier_needs_more_thinking_than_the_testbed_budget():
    """The reason the default testbed's ceiling is below 1 (issue #11): every nine-operand problem's working is
    longer than the largest thinking budget of the scalerl preset's interruption length control (§2, App. A.10), so it is
    always cut, and the warm-up never demonstrates it; every three-operand working fits the smallest budget."""
    from scalerl.config import load_config

    cfg = load_config("scalerl")
    think = cfg.algo.length.params
    task = TASKS.get("arithmetic")(seed=0, n_train=cfg.task.n_train, n_val=cfg.task.n_val, **cfg.task.params)
    tok = CharTokenizer()
    clean = ArithmeticTask(seed=0, n_train=cfg.task.n_train, n_val=cfg.task.n_val, answer_slip=0.0)
    hard = [p for p in task.val_problems() if p.meta["tier"] == "nine_operands"]
    easy = [p for p in task.val_problems() if p.meta["tier"] == "three_operands"]
    assert len(hard) > 40 and len(easy) > 150 and len(hard) + len(easy) == cfg.task.n_val
    assert all(task.demonstration(p) is None for p in hard)
    working = lambda p: f"<think>{' '.join(p.meta['steps'])}"  # noqa: E731  (what the model must think)
    assert min(len(tok.encode(working(p))) for p in hard) > think.think_hi
    assert max(len(tok.encode(clean.demonstration(p).partition("</think>")[0])) for p in easy) < think.think_lo


def test_an_operand_range_replaces_the_tiers_and_bad_tiers_are_one_line():
    t = TASKS.get("arithmetic")(seed=0, n_train=50, n_val=10, max_operands=2, tiers=TESTBED_TIERS)
    assert {p.meta["operands"] for p in t.train_problems()} == {2}
    with pytest.raises(UserError, match="tiers.hard"):
        ArithmeticTask(tiers={"hard": {"operands": [1, 3]}})
    with pytest.raises(UserError, match="tiers.x"):
        ArithmeticTask(tiers={"x": {"operand": [2, 3]}})
    with pytest.raises(UserError, match="tiers must map"):
        ArithmeticTask(tiers={})


def test_sign_slip_drops_minus_signs_of_negative_partial_sums_at_its_rate():
    """The warm-up habit RL can unlearn: with ``sign_slip`` q, each negative partial sum of a demonstration loses
    its minus sign with probability q and the working goes on from the wrong value; nothing else changes, and
    the problems (prompts, answers, grading) are those of q = 0."""
    clean, slipped = ArithmeticTask(seed=3, sign_slip=0.0), ArithmeticTask(seed=3, sign_slip=0.5)
    assert [p.id for p in clean.train_problems()] == [p.id for p in slipped.train_problems()]
    negatives = slips = 0
    for p in slipped.train_problems():
        demo = slipped.demonstration(p)
        assert demo == slipped.demonstration(p)  # deterministic per problem
        working, answer = demo[len("<think>"):].split("</think>")
        steps = working.split(" ")
        acc = int(steps[0].split("+")[0].split("-")[0])
        for step, op, x in zip(steps, re.findall(r"[+-]", p.prompt[1:]), re.findall(r"\d+", p.prompt)[1:]):
            true = acc + int(x) if op == "+" else acc - int(x)
            shown = int(step.split("=")[1])
            assert step.startswith(f"{acc}{op}{x}=")
            if true < 0:
                negatives += 1
                slips += shown == -true
                assert shown in (true, -true)
            else:
                assert shown == true
            acc = shown
        assert answer == str(acc)  # the answer follows the (possibly slipped) working
        if "=-" not in clean.demonstration(p):
            assert demo == clean.demonstration(p)
    assert negatives > 1000 and abs(slips / negatives - 0.5) < 0.05
    with pytest.raises(UserError, match="sign_slip"):
        ArithmeticTask(sign_slip=1.0)
    testbed = TASKS.get("arithmetic")(n_train=50, n_val=10)
    assert testbed.sign_slip == 0.0 and testbed.answer_slip == 0.9  # the testbed's habit


def test_without_named_tiers_each_operand_count_is_a_tier():
    t = ArithmeticTask(seed=0, n_train=200, n_val=100)
    assert {p.meta["tier"] for p in t.val_problems()} == {f"operands_{k}" for k in range(2, 6)}
    assert all(p.meta["tier"] == f"operands_{p.meta['operands']}" for p in t.train_problems())


def test_answer_slip_drops_the_minus_sign_of_negative_answers_only_and_keeps_the_working():
    """The single-decision habit: with ``answer_slip`` q the working stays right and only the copy of a negative
    result into the answer loses its minus sign, with probability q; positive answers are never touched."""
    clean = ArithmeticTask(seed=5, sign_slip=0.0, answer_slip=0.0)
    slipped = ArithmeticTask(seed=5, sign_slip=0.0, answer_slip=0.7)
    negative = dropped = 0
    for p in slipped.train_problems():
        demo, right = slipped.demonstration(p), clean.demonstration(p)
        assert demo == slipped.demonstration(p)  # deterministic per problem
        working, answer = demo.split("</think>")
        assert working == right.split("</think>")[0]  # the working is the correct one
        if int(p.answer) < 0:
            negative += 1
            dropped += answer == p.answer[1:]
            assert answer in (p.answer, p.answer[1:])
        else:
            assert demo == right
    assert negative > 800 and abs(dropped / negative - 0.7) < 0.05
    # the hand-worked case: 1-5 = -4, the answer copied without its sign when it slips
    one = Problem(id="1-5=", prompt="1-5=", answer="-4", meta={"steps": ["1-5=-4"]})
    assert ArithmeticTask(seed=5, sign_slip=0.0, answer_slip=0.99).demonstration(one) == "<think>1-5=-4</think>4"
    assert clean.demonstration(one) == "<think>1-5=-4</think>-4"
    with pytest.raises(UserError, match="answer_slip"):
        ArithmeticTask(answer_slip=1.0)


def test_an_untaught_tier_is_left_out_of_the_warm_up_only():
    """``taught: false``: the warm-up never sees the tier (its demonstration is None), while training and
    validation draw it at its share and grading is unchanged."""
    from scalerl.models.warmup import _examples

    tiers = {"short": {"operands": [3, 3], "share": 0.7}, "long": {"operands": [9, 9], "share": 0.3, "taught": False}}
    t = ArithmeticTask(seed=0, n_train=600, n_val=100, tiers=tiers, sign_slip=0.0)
    long = [p for p in t.train_problems() if p.meta["tier"] == "long"]
    assert 0.2 < len(long) / len(t.train_problems()) < 0.4
    assert all(t.demonstration(p) is None for p in long)
    assert all(t.grade(p, f"<think></think>{p.answer}") for p in long)
    tok = CharTokenizer()
    examples = _examples(t, tok)
    assert len(examples) == len(t.train_problems()) - len(long)
    assert max(len(c) for _, c in examples) < 30  # only three-operand demonstrations (at most ~25 tokens)
    with pytest.raises(UserError, match="taught"):
        ArithmeticTask(tiers={"x": {"operands": [3, 3], "taught": "no"}})
