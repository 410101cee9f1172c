"""The timing helper (``scalerl/timing.py``): phases add up under one name, nest, are recorded when the block
raises, and become ``timing/<phase>_s`` metrics; the stopwatch behind the wall clocks."""

from __future__ import annotations

import pytest

from scalerl.timing import Stopwatch, timed, timing_metrics
from test_compute import FakeClock


def test_timed_accumulates_nests_and_leaves_other_phases_alone():
    clock, timings = FakeClock(), {"collate": 0.5}
    with timed(timings, "generate", clock):
        clock.now += 2.0
        with timed(timings, "grade", clock):  # nested: counted in both
            clock.now += 0.25
    with timed(timings, "generate", clock):  # a second block under the same name adds
        clock.now += 1.0
    assert timings == {"collate": 0.5, "generate": 3.25, "grade": 0.25}


def test_timed_records_the_seconds_when_the_block_raises():
    clock, timings = FakeClock(), {}
    with pytest.raises(ValueError, match="boom"):
        with timed(timings, "eval", clock):
            clock.now += 4.0
            raise ValueError("boom")
    assert timings == {"eval": 4.0}


def test_timing_metrics_names_the_phases():
    assert timing_metrics({"generate": 1.5, "grade": 0.5}, {"backward": 2.0, "grade": 0.25}) == {
        "timing/generate_s": 1.5, "timing/grade_s": 0.25, "timing/backward_s": 2.0}
    assert timing_metrics() == {}


def test_stopwatch_reads_while_running_and_closes_one_interval_on_stop():
    clock = FakeClock()
    watch = Stopwatch(clock)
    assert not watch.running and watch.seconds == 0.0 and watch.stop() == 0.0
    clock.now = 10.0
    assert watch.start() is watch and watch.running
    clock.now = 13.0
    watch.start()  # idempotent: the interval still runs from 10
    assert watch.seconds == 3.0
    clock.now = 15.0
    assert watch.stop() == 5.0 and not watch.running and watch.seconds == 0.0
    clock.now = 20.0
    assert watch.stop() == 0.0
