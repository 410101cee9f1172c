"""A checkpoint that cannot be written (a full disk: ``torch.save``'s zip writer raises ``RuntimeError: [enforce fail
at inline_container.cc] unexpected pos ...``) stops the run with one line and exit code 1, not a traceback; the
checkpoint written before it stays intact and ``latest`` points at it, so ``--resume`` continues once there is room.
Found when clean checkouts filled this machine's disk and the SmolLM2 demo died in ``torch.save``."""

from __future__ import annotations

import pytest
import torch

from scalerl import cli, runlog
from scalerl.runlog import checkpoint_files, read_metrics
from tests.test_pipeline import MICRO

FULL = "[enforce fail at inline_container.cc:672] . unexpected pos 141639488 vs 141639376"


def _train(out, *extra: str) -> None:
    cli.main(["train", "--out", str(out), *(a for s in [*MICRO, "backend=inline", "steps=4", "checkpoint_every=2"]
                                           for a in ("--set", s)), *extra])


def test_a_checkpoint_the_disk_cannot_hold_is_one_line_and_the_last_one_survives(tmp_path, monkeypatch, capsys):
    save, calls = torch.save, []

    def full_after_the_first(obj, f, *args, **kwargs):  # the disk fills up after step 2's checkpoint
        calls.append(f)
        if len(calls) > 1:
            with open(f, "wb") as fh:
                fh.write(b"PK\x03\x04 half a zip")  # what a writer leaves before it fails
            raise RuntimeError(FULL)
        return save(obj, f, *args, **kwargs)

    monkeypatch.setattr(runlog.torch, "save", full_after_the_first)
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exc:
        _train(out)
    assert exc.value.code == 1
    stderr = capsys.readouterr().err
    err = [line for line in stderr.splitlines() if line.startswith("error:")]  # the rest: the run's progress lines
    assert "Traceback" not in stderr and stderr.rstrip().splitlines()[-1] == err[0]
    assert len(err) == 1 and err[0].startswith("error: could not write the checkpoint of step 4 in ")
    assert FULL in err[0] and "MiB free there" in err[0] and "step_0000002.pt, is intact" in err[0]
    assert list(checkpoint_files(out)) == [2]  # nothing half-written beside it
    assert not [p for p in (out / "checkpoints").iterdir() if p.name.startswith(".")]
    assert (out / "checkpoints" / "latest").read_text().strip() == "step_0000002.pt"
    assert torch.load(out / "checkpoints" / "step_0000002.pt", weights_only=False)["step"] == 2

    monkeypatch.setattr(runlog.torch, "save", save)  # room again: the run resumes from step 2 and finishes
    _train(out, "--resume")
    assert list(checkpoint_files(out))[-1] == 4
    assert [r["step"] for r in read_metrics(out) if "loss" in r][-1] == 4
