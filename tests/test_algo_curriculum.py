"""Prompt samplers (§3.2, Fig. 6b): epoch-wise shuffles, No-Positive-Resampling retirement, exact save/restore."""

from __future__ import annotations

import json

import pytest

from scalerl.algo.curriculum import CURRICULA, NPRSampler, UniformSampler
from scalerl.errors import UserError

IDS = [f"p{i}" for i in range(10)]


def test_registered_names():
    assert CURRICULA.names() == ["npr", "uniform"]
    assert CURRICULA.get("npr")(IDS, 0).threshold == 0.9


def test_uniform_epochs_visit_every_prompt_once_in_seeded_order_and_never_retire():
    s = UniformSampler(IDS, seed=3)
    first, second = s.next_ids(10), s.next_ids(10)
    assert sorted(first) == sorted(IDS) and sorted(second) == sorted(IDS)
    assert first != second  # reshuffled each epoch
    assert UniformSampler(IDS, seed=3).next_ids(20) == first + second
    assert UniformSampler(IDS, seed=4).next_ids(10) != first
    for pid in IDS:
        s.update(pid, 8, 8)
    assert s.retired == 0
    assert sorted(s.next_ids(10)) == sorted(IDS)
    assert s.pass_rate("p0") == 1.0


def test_batches_span_epoch_boundaries():
    s = UniformSampler(IDS, seed=0)
    ids = s.next_ids(7) + s.next_ids(7) + s.next_ids(6)
    assert sorted(ids[:10]) == sorted(IDS) and sorted(ids[10:]) == sorted(IDS)


def _epoch(s, n: int = 10) -> list[str]:
    """Serve one whole epoch of ``n`` prompts (a fresh epoch starts on the next call)."""
    return s.next_ids(n)


def test_npr_judges_the_latest_epoch_and_retires_from_the_next_one():
    """§3.2, Fig. 6b: pass rate >= 0.9 in the latest epoch removes a prompt from subsequent epochs. p1 fails in
    epoch 0 (0/10), then passes 9/10 in epoch 1 (cumulative 9/20 = 0.45, which the old cumulative rule never
    retires): gone from epoch 2. p2 passes 10/10 in epoch 0 but stays in the rest of epoch 0."""
    s = NPRSampler(IDS, seed=0)
    first = s.next_ids(5)
    p2 = first[0]
    s.update(p2, 10, 10)
    assert not s.is_retired(p2) and s.retired == 0  # nothing is retired mid-epoch
    rest = s.next_ids(5)
    assert sorted(first + rest) == sorted(IDS)
    for pid in IDS:
        if pid != p2:
            s.update(pid, 0, 10)
    second = s.next_ids(9)  # epoch 1, whole: p2 (1.0 in epoch 0) retired from it
    assert s.is_retired(p2) and s.retired == 1 and sorted(second) == sorted(set(IDS) - {p2})
    for pid in second:
        s.update(pid, 9 if pid == "p1" else 8, 10)  # 0.9 and 0.8 in epoch 1
    assert s.pass_rate("p1") == pytest.approx(9 / 20) and s.epoch_pass_rate("p1") == pytest.approx(0.9)
    third = s.next_ids(8)
    assert s.is_retired("p1") and "p1" not in third and p2 not in third


def test_npr_outcomes_count_toward_the_epoch_that_served_them():
    """An answer that arrives after the next epoch began (PipelineRL: requests run ahead) counts for the epoch
    that served it, and a newer epoch's first answer starts the count afresh; min_samples is per epoch."""
    s = NPRSampler(IDS, seed=1, threshold=0.9, min_samples=16)
    _epoch(s)
    s.next_ids(1)  # epoch 1 begins before any answer: nobody retired
    assert s.retired == 0
    for pid in IDS:
        s.update(pid, 8, 8)  # epoch 0's answers (8 < min_samples: not enough in one epoch)
    s.next_ids(9)
    _epoch(s)  # epoch 2: still nothing retired
    assert s.retired == 0
    assert all(s.epoch_pass_rate(p) == 1.0 for p in IDS)


def test_all_retired_falls_back_to_serving_everything():
    s = NPRSampler(IDS[:3], seed=0)
    for pid in s.next_ids(3):
        s.update(pid, 4, 4)
    served = s.next_ids(7)  # the next epoch: all retired, everything served
    assert s.retired == 3 and s.exhausted
    assert len(served) == 7 and set(served) == set(IDS[:3])


def _drive(sampler, steps: int, log: list, seen: dict) -> None:
    """A deterministic training stand-in: prompt 'pK' gets easier each time it is seen."""
    for _ in range(steps):
        for pid in sampler.next_ids(4):
            seen[pid] = seen.get(pid, 0) + 1
            sampler.update(pid, min(10, int(pid[1:]) + 2 * seen[pid]), 10)
            log.append((pid, sampler.retired))


@pytest.mark.parametrize("name", ["npr", "uniform"])
def test_state_restores_exactly_mid_epoch(name):
    full = CURRICULA.get(name)(IDS, 11)
    full_log: list = []
    _drive(full, 15, full_log, {})  # 60 ids

    part = CURRICULA.get(name)(IDS, 11)
    part_log: list = []
    seen: dict = {}
    _drive(part, 3, part_log, seen)  # 12 ids: mid-epoch
    state = json.loads(json.dumps(part.state_dict()))
    fresh = CURRICULA.get(name)(IDS, 11)
    fresh.load_state_dict(state)
    _drive(fresh, 12, part_log, seen)
    assert part_log == full_log
    assert fresh.state_dict() == full.state_dict()
    if name == "npr":
        # retirements happen both before and after the save point, and the same ones
        assert 0 < full_log[11][1] < full_log[-1][1]
    else:
        assert full.retired == 0


def test_restore_into_a_different_split_or_kind_is_a_user_error():
    state = NPRSampler(IDS, 0).state_dict()
    with pytest.raises(UserError, match="task config"):
        NPRSampler(IDS[:5], 0).load_state_dict(state)
    with pytest.raises(UserError, match="algo.curriculum.name"):
        UniformSampler(IDS, 0).load_state_dict(state)


def test_bad_inputs():
    with pytest.raises(ValueError, match="^threshold: "):
        NPRSampler(IDS, 0, threshold=0)
    with pytest.raises(ValueError, match="^min_samples: "):
        NPRSampler(IDS, 0, min_samples=0)
    with pytest.raises(ValueError, match="^ids: "):
        UniformSampler([], 0)
    with pytest.raises(ValueError, match="^ids: "):
        UniformSampler(["a", "a"], 0)
    s = UniformSampler(IDS, 0)
    with pytest.raises(ValueError):
        s.update("p0", 3, 2)
    with pytest.raises(KeyError):
        s.update("nope", 1, 2)
