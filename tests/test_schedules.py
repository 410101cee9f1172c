"""Off-policy schedules (§3.1): when each batch may start, and the staleness bound they imply."""

from scalerl.pipeline.schedules import SCHEDULES


def _simulate(schedule, steps):
    """Sequential simulation: the generator starts batch b at the newest version allowed; every token of b
    carries a version in [start, trained_at]; returns the worst staleness seen."""
    worst = 0
    for b in range(steps):
        start_version = schedule.min_version(b)
        assert start_version <= b  # the trainer can always reach it: no deadlock
        worst = max(worst, b - start_version)  # batch b is trained at version b
    return worst


def test_pipeline_rl_bound_is_k():
    for k in (1, 2, 8):
        s = SCHEDULES.get("pipeline_rl")(k)
        assert s.inflight and s.group == 1
        assert [s.min_version(b) for b in range(k + 3)] == [0] * (k + 1) + [1, 2]
        assert _simulate(s, 50) == k == s.max_staleness()


def test_ppo_off_policy_groups_of_k():
    s = SCHEDULES.get("ppo_off_policy")(4)
    assert not s.inflight and s.group == 4
    assert [s.min_version(b) for b in range(9)] == [0, 0, 0, 0, 4, 4, 4, 4, 8]
    # batch b of a group is trained at version b, generated with the group's start version: staleness b mod k
    assert _simulate(s, 40) == 3 == s.max_staleness()
