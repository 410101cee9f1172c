"""Durability audit: a crash, a kill or a full disk never loses a finished step, and a resumed run continues
exactly (docs/architecture.md: run directory; README "Each run directory holds ...").

Each test here reproduces a defect the audit found, and failed before its fix."""

from __future__ import annotations

import errno
import os

import pytest

from scalerl import atomic
from scalerl.errors import RunFileNotWritten
from scalerl.runlog import RunLog, read_metrics


def _short_then(fail_with: BaseException | None):
    """``os.write`` that writes half of the first line it is given (a disk with room for half of it) and then,
    with ``fail_with``, raises that on the next call (the kernel's ENOSPC once nothing fits)."""
    real, calls = os.write, []

    def write(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real(fd, bytes(data[: len(data) // 2]))
        if fail_with is not None and len(calls) == 2:
            raise fail_with
        return real(fd, data)

    return write


def test_a_short_metrics_write_is_completed_not_left_half_for_the_next_step_to_run_into(tmp_path, monkeypatch):
    """``append_jsonl`` made one ``os.write`` call and ignored how much it wrote: a short write (a disk filling up)
    left half of step 2's line, and step 3's line was appended to it, so both rows were lost, step 3's even though
    a checkpoint of step 3 may exist (``--resume`` cut the glued line and never wrote it again)."""
    log = RunLog(tmp_path, tensorboard=False)
    log.log({"step": 1, "loss": 0.5})
    monkeypatch.setattr(atomic.os, "write", _short_then(None))
    log.log({"step": 2, "loss": 0.4})
    monkeypatch.undo()
    log.log({"step": 3, "loss": 0.3})
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3]
    assert (tmp_path / "metrics.jsonl").read_text().endswith("}\n")


def test_a_metrics_write_the_full_disk_refuses_leaves_the_file_ending_on_a_whole_line(tmp_path, monkeypatch):
    """Half a line fits, then ENOSPC: the append raises, and what it wrote of the line is taken back, so the rows
    before it are intact and the next append (after space is freed) is a line of its own."""
    log = RunLog(tmp_path, tensorboard=False)
    log.log({"step": 1, "loss": 0.5})
    before = (tmp_path / "metrics.jsonl").read_bytes()
    monkeypatch.setattr(atomic.os, "write", _short_then(OSError(errno.ENOSPC, "No space left on device")))
    with pytest.raises(RunFileNotWritten, match=r"step 2's line of .*metrics\.jsonl \(.*No space left.*MiB free there\); "
                                                r"no checkpoint was written yet"):
        log.log({"step": 2, "loss": 0.4})
    monkeypatch.undo()
    assert (tmp_path / "metrics.jsonl").read_bytes() == before
    log.log({"step": 2, "loss": 0.4})
    log.consumed(2, ["p1"])
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]


def test_a_latest_pointer_the_full_disk_refuses_is_the_one_line_checkpoint_error(tmp_path, monkeypatch):
    """The checkpoint file fitted but its ``latest`` pointer did not: ``save_checkpoint`` raised a bare OSError (a
    traceback from ``scalerl train``) instead of ``CheckpointNotWritten``, the one line that names the checkpoint
    still intact; ``latest`` goes on naming it and ``--resume`` starts there."""
    from scalerl import runlog
    from scalerl.errors import CheckpointNotWritten

    runlog.save_checkpoint(tmp_path, 2, {"step": 2})
    real = runlog.write_text

    def full(path, text):
        if os.path.basename(path) == runlog.LATEST:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, text)

    monkeypatch.setattr(runlog, "write_text", full)
    with pytest.raises(CheckpointNotWritten, match=r"step 4 .*No space left.*step_0000002\.pt, is intact"):
        runlog.save_checkpoint(tmp_path, 4, {"step": 4})
    monkeypatch.undo()
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "step_0000002.pt"
    assert runlog.load_latest_checkpoint(tmp_path)["step"] == 2
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".")]


def test_an_exit_while_an_evaluation_runs_beside_the_steps_keeps_the_exit_code(tmp_path):
    """Ctrl-C (or an error) during an evaluation overlapped with the steps: the run's files were complete, but its
    daemon evaluation thread woke inside a torch operator while the interpreter finalized and the process died of
    SIGABRT ("terminate called without an active exception", exit status -6, maybe a core file) instead of
    exiting with the CLI's 130."""
    import subprocess
    import sys

    script = tmp_path / "exit_during_call.py"
    script.write_text(
        "import sys, time, torch\n"
        "from scalerl.pipeline.background import BackgroundCall\n"
        "def evaluation():\n"
        "    x = torch.randn(64, 64)\n"
        "    while True:\n"
        "        x = torch.tanh(x @ x)\n"
        "call = BackgroundCall(evaluation, name='scalerl-eval')\n"
        "time.sleep(0.3)\n"
        "sys.exit(130)\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stderr[-2000:]
    assert "terminate called" not in done.stderr


def _micro(*sets: str):
    from scalerl.config import load_config
    from tests.test_pipeline import MICRO

    return load_config("scalerl", None, [*MICRO, "backend=inline", "steps=4", "eval.every=2", "checkpoint_every=2", *sets])


def stop_at_checkpoint(monkeypatch, step: int, run) -> None:
    """Call ``run`` (a training run) with the disk full at the checkpoint of ``step``: the run stops there with
    :class:`~scalerl.errors.CheckpointNotWritten` after logging that step (and the evaluation of the checkpoint
    before it, which runs beside the steps)."""
    from scalerl import runlog
    from scalerl.errors import CheckpointNotWritten

    save = runlog.torch.save

    def full(obj, f, *args, **kwargs):
        if obj["step"] == step:
            raise OSError(errno.ENOSPC, "No space left on device")
        return save(obj, f, *args, **kwargs)

    monkeypatch.setattr(runlog.torch, "save", full)
    with pytest.raises(CheckpointNotWritten):
        run()
    monkeypatch.undo()


def _forecast_points(monkeypatch) -> list[int]:
    """Record how many evaluations the live forecast holds when the run writes fit.json (``write_final``)."""
    from scalerl.forecast import Forecaster

    points, real = [], Forecaster.write_final

    def write_final(self, *args, **kwargs):
        points.append(len(self.x))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Forecaster, "write_final", write_final)
    return points


def test_an_evaluation_logged_after_the_checkpoint_is_evaluated_again_on_resume(tmp_path, monkeypatch):
    """The evaluation of a checkpoint's own step runs beside the next steps and is logged after that checkpoint
    (``RunLoop.checkpoint`` collects only earlier ones). A run that stopped after logging it and before its next
    checkpoint (here: the disk fills up at step 4's) resumed with the line kept (its step is the checkpoint's) but
    the point missing from the checkpoint's live forecast, and did not evaluate there again: every later forecast
    and fit.json lacked the step-2 evaluation."""
    from scalerl.pipeline.runner import train

    ref = _forecast_points(monkeypatch)
    train(_micro(), tmp_path / "ref", show_progress=False)
    monkeypatch.undo()
    assert ref == [3]  # steps 0, 2 and 4

    out = tmp_path / "run"
    stop_at_checkpoint(monkeypatch, 4, lambda: train(_micro(), out, show_progress=False))
    assert [r["step"] for r in read_metrics(out) if "val/pass_rate" in r] == [0, 2]  # step 2's, after checkpoint 2

    points = _forecast_points(monkeypatch)
    train(_micro(), out, resume=True, show_progress=False)
    assert points == ref
    evals = [r for r in read_metrics(out) if "val/pass_rate" in r]
    assert [r["step"] for r in evals] == [0, 2, 4]
    ref_evals = [r for r in read_metrics(tmp_path / "ref") if "val/pass_rate" in r]
    assert [r["val/pass_rate"] for r in evals] == [r["val/pass_rate"] for r in ref_evals]  # seeded per step
    assert [r["step"] for r in read_metrics(out) if "loss" in r] == [1, 2, 3, 4]


def test_a_finished_run_extended_with_resume_keeps_its_last_evaluation_in_the_forecast(tmp_path, monkeypatch):
    """A run's last checkpoint is written before its last evaluation is logged, so every finished run's final
    checkpoint lacks that point; ``--resume --set steps=...`` (and a sweep's ``extend``) kept the line but not the
    point: the extended run's forecasts and fit.json left out the evaluation at the old budget (step 3 here, not a
    multiple of eval.every, where the resumed run had no other reason to evaluate). Also what a run killed while
    writing fit.json, curve.png or its run card resumed to."""
    from scalerl.pipeline.runner import train

    out = tmp_path / "run"
    train(_micro("steps=3"), out, show_progress=False)
    assert [r["step"] for r in read_metrics(out) if "val/pass_rate" in r] == [0, 2, 3]
    points = _forecast_points(monkeypatch)
    train(_micro("steps=5"), out, resume=True, show_progress=False)
    assert [r["step"] for r in read_metrics(out) if "val/pass_rate" in r] == [0, 2, 3, 4, 5]
    assert points == [5]
    assert [r["step"] for r in read_metrics(out) if "loss" in r] == [1, 2, 3, 4, 5]


def test_a_run_whose_metrics_line_the_full_disk_refuses_stops_in_one_line_and_resumes(tmp_path, monkeypatch):
    """A full disk at a metrics line was a traceback out of ``scalerl train``; it is the one-line stop of a file
    the run could not write (exit code 1), naming the file and the checkpoint to resume from, and the run resumes
    to the same rows as an uninterrupted one."""
    import scalerl.runlog as runlog
    from scalerl.pipeline.runner import train

    train(_micro(), tmp_path / "ref", show_progress=False)
    real = runlog.append_jsonl

    def refusing(path, record):
        if path.name == "metrics.jsonl" and record.get("step") == 3 and "loss" in record:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, record)

    monkeypatch.setattr(runlog, "append_jsonl", refusing)
    out = tmp_path / "run"
    with pytest.raises(RunFileNotWritten, match=r"step 3's line of .*metrics\.jsonl.*step_0000002\.pt, is intact") as stop:
        train(_micro(), out, show_progress=False)
    assert stop.value.exit_code == 1 and "\n" not in str(stop.value)
    monkeypatch.undo()
    train(_micro(), out, resume=True, show_progress=False)
    rows = [(r["step"], r.get("loss")) for r in read_metrics(out) if "loss" in r]
    assert rows == [(r["step"], r.get("loss")) for r in read_metrics(tmp_path / "ref") if "loss" in r]
