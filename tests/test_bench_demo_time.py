"""bench/demo_time.py: what it reads from a demo's output, and its refusal of a tree without scalerl."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import demo_time  # noqa: E402

OUTPUT = """\
forecast: A = 0.743 [0.728, 0.772] (95% interval), B = 2.55, Cmid = 0.004611 compute/device_hours, R0 = 0.545
check: pass  A identified (the run passed Cmid and the interval on A is closed)
check: FAIL  95% interval on A 0.244 wide (at most 0.15)
check: pass  half-budget forecast of the last evaluation off by 0.016 (at most 0.03)
warm-up: steps=448, loss_first=4.8, loss_last=0.00536, seconds=41.5, path=/tmp/x.pt, cached=False
"""


def test_parse_demo_reads_the_warmup_checks_and_a():
    assert demo_time.parse_demo(OUTPUT) == {"warmup_s": 41.5, "checks_passed": 2.0, "checks_failed": 1.0,
                                            "A": 0.743}
    assert demo_time.parse_demo("nothing") == {"checks_passed": 0.0, "checks_failed": 0.0}


def test_a_tree_without_scalerl_is_refused(tmp_path, capsys):
    assert demo_time.main([str(tmp_path), "--rounds", "1"]) == 2
    assert "holds no scalerl/ package" in capsys.readouterr().err


def test_metered_hours_is_the_largest_compute_the_run_logged(tmp_path):
    rows = ['{"step": 0, "compute/device_hours": 0.0, "val/pass_rate": 0.5}', '{"step": 1, "compute/device_hours": 0.25}',
            '{"step": 2, "compute/device_hours": 0.5}', '{"step": 1, "compute/device_hours": 0.25, "val/pass_rate": 0.6}']
    (tmp_path / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    assert demo_time.metered_hours(tmp_path) == {"device_hours": 0.5}  # an evaluation logged late does not hide it
    assert demo_time.metered_hours(tmp_path / "none") == {}


def test_start_skill_is_the_first_evaluation_before_any_rl(tmp_path):
    rows = ['{"step": 1, "loss": 0.3}',
            '{"step": 0, "val/pass_rate": 0.4, "val/arithmetic/pass_rate": 0.5, "val/strings/pass_rate": 0.3, '
            '"val/arithmetic/tier/three_operands/pass_rate": 0.7, "val/n": 1024}',
            '{"step": 5, "val/pass_rate": 0.6, "val/arithmetic/pass_rate": 0.7}']
    (tmp_path / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    assert demo_time.start_skill(tmp_path) == {"start": 0.4, "start:arithmetic": 0.5, "start:strings": 0.3,
                                               "start:arithmetic/tier/three_operands": 0.7}
    assert demo_time.start_skill(tmp_path / "none") == {}
