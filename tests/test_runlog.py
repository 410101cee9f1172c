import json

import torch

from scalerl.runlog import RunLog, load_latest_checkpoint, read_metrics, save_checkpoint


def test_truncate_drops_later_steps_and_partial_line(tmp_path):
    log = RunLog(tmp_path, tensorboard=False)
    for s in range(1, 6):
        log.log({"step": s, "loss": float(s)})
        log.consumed(s, [f"p{s}"])
    with open(tmp_path / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 6, "lo')  # a crash mid-write
    log.truncate(3)
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3]
    lines = (tmp_path / "consumed.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2, 3]


def test_nan_is_logged_as_null(tmp_path):
    log = RunLog(tmp_path, tensorboard=False)
    log.log({"step": 1, "loss": float("nan")})
    assert read_metrics(tmp_path)[0]["loss"] is None


def test_checkpoints_keep_latest_two(tmp_path):
    for s in (5, 10, 15):
        save_checkpoint(tmp_path, s, {"step": s, "w": torch.ones(2) * s})
    names = sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*.pt"))
    assert names == ["step_0000010.pt", "step_0000015.pt"]
    assert load_latest_checkpoint(tmp_path)["step"] == 15
    assert not list((tmp_path / "checkpoints").glob(".*tmp*"))
