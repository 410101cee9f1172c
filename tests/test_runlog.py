import json

import pytest
import torch

from scalerl.atomic import remove_stale_temporaries
from scalerl.errors import UserError

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


def _two_checkpoints(tmp_path):
    for s in (5, 10):
        save_checkpoint(tmp_path, s, {"step": s, "w": torch.ones(2) * s})
    return tmp_path / "checkpoints"


@pytest.mark.parametrize("damage", ["truncated", "empty", "deleted"])
def test_resume_falls_back_to_the_newest_readable_checkpoint(tmp_path, capsys, damage):
    ck = _two_checkpoints(tmp_path)
    newest = ck / "step_0000010.pt"
    if damage == "deleted":  # `latest` now dangles
        newest.unlink()
    else:
        newest.write_bytes(newest.read_bytes()[:100] if damage == "truncated" else b"")
    assert load_latest_checkpoint(tmp_path)["step"] == 5
    assert "resuming from step_0000005.pt" in capsys.readouterr().err


def test_resume_with_no_readable_checkpoint_is_one_user_error(tmp_path):
    ck = _two_checkpoints(tmp_path)
    for p in ck.glob("step_*.pt"):
        p.write_bytes(b"\x00" * 10)
    with pytest.raises(UserError, match="no readable checkpoint"):
        load_latest_checkpoint(tmp_path)
    assert load_latest_checkpoint(tmp_path / "never-checkpointed") is None


def test_stale_temporaries_are_removed_and_finished_files_kept(tmp_path):
    ck = _two_checkpoints(tmp_path)
    stale = [ck / ".step_0000015.pt.k2j4_x9a.tmp.pt", ck / ".latest.abcdefgh.tmp"]
    for p in stale:
        p.write_bytes(b"half")
    assert sorted(remove_stale_temporaries(ck)) == sorted(stale)
    assert sorted(p.name for p in ck.iterdir()) == ["latest", "step_0000005.pt", "step_0000010.pt"]
