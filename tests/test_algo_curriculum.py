"""Prompt samplers (§3.7): epoch-wise shuffles, No-Positive-Resampling retirement, exact save/restore."""

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


def test_npr_retires_at_the_threshold_on_cumulative_pass_rate():
    s = NPRSampler(IDS, seed=0)
    s.update("p1", 8, 10)  # 0.8
    assert not s.is_retired("p1")
    s.update("p1", 10, 10)  # cumulative 18/20 = 0.9 >= 0.9
    assert s.is_retired("p1") and s.retired == 1
    s.update("p2", 7, 8)  # 0.875 < 0.9
    assert not s.is_retired("p2")
    s.update("p3", 9, 10)  # exactly 0.9
    assert s.is_retired("p3")
    for _ in range(3):  # never served again
        served = s.next_ids(8)
        assert "p1" not in served and "p3" not in served
    assert sorted(s.next_ids(8)) == sorted(set(IDS) - {"p1", "p3"})


def test_npr_min_samples_and_mid_epoch_retirement():
    s = NPRSampler(IDS, seed=1, threshold=0.9, min_samples=16)
    order = s.next_ids(2)
    rest_pid = [p for p in IDS if p not in order][0]
    s.update(rest_pid, 8, 8)
    assert not s.is_retired(rest_pid)  # 8 < min_samples
    s.update(rest_pid, 8, 8)
    assert s.is_retired(rest_pid)
    assert rest_pid not in s.next_ids(8)  # skipped in the current epoch too


def test_all_retired_falls_back_to_serving_everything():
    s = NPRSampler(IDS[:3], seed=0)
    for pid in IDS[:3]:
        s.update(pid, 4, 4)
    assert s.retired == 3 and s.exhausted
    served = s.next_ids(7)
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
