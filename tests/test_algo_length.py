"""Length control (§2, App. A.10): interruption budgets, forced-token weights, the DAPO length penalty (Eq. 9)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from scalerl.algo.length_control import (
    LENGTH_CONTROLS,
    PAPER_PHRASE,
    Interruption,
    LengthPenalty,
    forced_token_weights,
)


def test_registered_names_and_engine_attributes():
    assert LENGTH_CONTROLS.names() == ["interruption", "length_penalty", "none"]
    for name in LENGTH_CONTROLS:
        lc = LENGTH_CONTROLS.get(name)()
        assert isinstance(lc.max_new_tokens, int) and lc.think_end == "</think>"
        assert isinstance(lc.phrase, str) and isinstance(lc.answer_budget, int)
    inter = Interruption()
    assert inter.phrase == PAPER_PHRASE and inter.phrase.endswith("</think>")
    assert (inter.think_lo, inter.think_hi, inter.answer_budget, inter.max_new_tokens) == (24, 48, 8, 96)
    for name in ("none", "length_penalty"):
        lc = LENGTH_CONTROLS.get(name)()
        assert lc.phrase == "" and lc.answer_budget == 0
        assert lc.think_budgets(3, np.random.default_rng(0)) == [None, None, None]


def test_interruption_budgets_are_uniform_integers_in_range():
    lc = Interruption(think_lo=5, think_hi=8, max_new_tokens=40)
    budgets = lc.think_budgets(400, np.random.default_rng(0))
    assert all(isinstance(b, int) for b in budgets)
    assert set(budgets) == {5, 6, 7, 8}  # both ends reachable, nothing outside
    assert lc.think_budgets(10, np.random.default_rng(1)) == lc.think_budgets(10, np.random.default_rng(1))
    assert Interruption(think_lo=7, think_hi=7, max_new_tokens=40).think_budgets(3, np.random.default_rng(0)) == [7] * 3


def test_forced_tokens_carry_zero_weight():
    forced = torch.tensor([[False, False, True, True, False], [False, False, False, False, False]])
    valid = torch.tensor([[True, True, True, True, True], [True, True, True, False, False]])
    torch.testing.assert_close(forced_token_weights(forced), torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0], [1.0] * 5]))
    torch.testing.assert_close(
        forced_token_weights(forced, valid), torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0, 0.0]])
    )


def test_length_penalty_matches_eq9_on_correct_traces_only():
    lp = LengthPenalty(l_max=96, l_cache=24)
    lengths = torch.tensor([50, 72, 84, 90, 96, 120, 84])
    correct = torch.tensor([True, True, True, True, True, True, False])
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, -1.0])
    # clip((96 - |y|)/24 - 1, -1, 0): 0 up to 72 tokens, then linear to -1 at 96
    expected_penalty = [0.0, 0.0, -0.5, -0.75, -1.0, -1.0]
    shaped = lp.shape_rewards(rewards, lengths, correct)
    torch.testing.assert_close(shaped, torch.tensor([1.0 + p for p in expected_penalty] + [-1.0]))
    assert shaped.dtype == torch.float32
    # 0/1 integer rewards work too
    shaped01 = lp.shape_rewards(torch.tensor([1, 0]), torch.tensor([90, 96]), torch.tensor([1, 0]))
    torch.testing.assert_close(shaped01, torch.tensor([0.25, 0.0]))


@pytest.mark.parametrize("name", ["interruption", "none"])
def test_other_controls_leave_rewards_alone(name):
    rewards = torch.tensor([1.0, -1.0])
    out = LENGTH_CONTROLS.get(name)().shape_rewards(rewards, torch.tensor([500, 500]), torch.tensor([True, False]))
    torch.testing.assert_close(out, rewards)


@pytest.mark.parametrize(
    ("cls", "params", "field"),
    [
        (Interruption, {"think_lo": 0}, "think_lo"),
        (Interruption, {"think_lo": 30, "think_hi": 20}, "think_hi"),
        (Interruption, {"answer_budget": 2.5}, "answer_budget"),
        (Interruption, {"phrase": "time is up"}, "phrase"),
        (Interruption, {"max_new_tokens": 50}, "max_new_tokens"),
        (LengthPenalty, {"l_cache": 0}, "l_cache"),
        (LengthPenalty, {"l_cache": 100, "l_max": 50}, "l_cache"),
        (LENGTH_CONTROLS.get("none"), {"max_new_tokens": -1}, "max_new_tokens"),
    ],
)
def test_invalid_params_name_the_field(cls, params, field):
    with pytest.raises(ValueError, match=rf"^{field}: "):
        cls(**params)


def test_interruption_budget_must_hold_the_phrase():
    from scalerl.algo.length_control import Interruption

    ok = Interruption(think_lo=10240, think_hi=12288, answer_budget=2048, max_new_tokens=14340)  # phrase unknown yet
    with pytest.raises(ValueError, match="phrase"):
        ok.check_fits(20)  # 12288 + 20 + 2048 > 14340
    Interruption(think_lo=10240, think_hi=12288, answer_budget=2048, max_new_tokens=14356).check_fits(20)


def test_cli_train_rejects_budgets_without_room_for_the_phrase(tmp_path, capsys, monkeypatch):
    """Refused before anything is spent: the phrase's length under the run's tokenizer is checked with the other
    set-up checks, not after the supervised warm-up (which would take minutes on the default preset)."""
    from scalerl.cli import main
    from scalerl.models import warmup

    def no_warmup(*args, **kwargs):
        raise AssertionError("the warm-up ran before the length budget was checked")

    monkeypatch.setattr(warmup, "warmup", no_warmup)
    out = tmp_path / "run"
    sets = ["algo.length.params.think_lo=80", "algo.length.params.think_hi=80"]  # 80 + 8 ≤ 96, but + 16-token phrase
    with pytest.raises(SystemExit) as info:
        main(["train", "--out", str(out), *[a for s in sets for a in ("--set", s)]])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: algo.length.params.max_new_tokens") and "phrase" in err and "\n" not in err
    assert not out.exists()
