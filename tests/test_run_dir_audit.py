"""The run directory (docs/architecture.md): a resumed run continues from the newest finished step and leaves
TensorBoard holding what ``metrics.jsonl`` holds, each step once; a run whose generators cannot start leaves
no directory.

Each test failed before its fix."""

from __future__ import annotations

import pytest

from scalerl.runlog import (
    CKPT_DIR,
    LATEST,
    RunLog,
    load_latest_checkpoint,
    read_metrics,
    save_checkpoint,
)


def _micro(*sets: str):
    from scalerl.config import load_config
    from tests.test_pipeline import MICRO

    return load_config("scalerl", None, [*MICRO, "backend=inline", "steps=4", "eval.every=2", "checkpoint_every=2",
                                         *sets])


def _events(run_dir) -> dict[str, list[tuple[int, float]]]:
    """Every scalar TensorBoard shows for the run, as a reader that honours the purge (TensorBoard itself) sees it."""
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(str(run_dir / "tb"), size_guidance={event_accumulator.SCALARS: 0},
                                             purge_orphaned_data=True)
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_a_checkpoint_newer_than_the_latest_pointer_is_the_one_resumed(tmp_path):
    """A kill between a checkpoint's rename and its pointer's write left ``latest`` naming the one before; resume
    took that one and retrained steps it had finished (and logged)."""
    for step in (2, 4):
        save_checkpoint(tmp_path, step, {"step": step})
    (tmp_path / CKPT_DIR / LATEST).write_text("step_0000002.pt\n")  # the pointer of step 4 never written
    assert load_latest_checkpoint(tmp_path)["step"] == 4


def test_an_unreadable_newer_checkpoint_falls_back_to_the_pointer(tmp_path):
    for step in (2, 4):
        save_checkpoint(tmp_path, step, {"step": step})
    (tmp_path / CKPT_DIR / LATEST).write_text("step_0000002.pt\n")
    (tmp_path / CKPT_DIR / "step_0000004.pt").write_bytes(b"PK\x03\x04 truncated")
    assert load_latest_checkpoint(tmp_path)["step"] == 2


def test_a_missing_pointed_checkpoint_falls_back_to_an_older_readable_one(tmp_path, capsys):
    for step in (2, 4):
        save_checkpoint(tmp_path, step, {"step": step})
    (tmp_path / CKPT_DIR / "step_0000004.pt").unlink()
    assert load_latest_checkpoint(tmp_path)["step"] == 2
    assert "missing or unreadable" in capsys.readouterr().err


def test_a_resume_replays_into_tensorboard_what_the_metrics_keep(tmp_path):
    """``RunLog(resume=...)`` purges TensorBoard from the first step it cuts, including an evaluation logged after
    the checkpoint (the run evaluates there again), and writes the kept lines of those steps back."""
    log = RunLog(tmp_path)
    log.log({"step": 0, "val/pass_rate": 0.1})
    for s in (1, 2):
        log.log({"step": s, "loss": float(s)})
    log.log({"step": 2, "val/pass_rate": 0.2})  # logged after the step-2 checkpoint, which holds 1 evaluation
    log.log({"step": 3, "loss": 3.0})
    log.close()
    log = RunLog(tmp_path, resume=(2, 1))
    assert log.unlogged == [2]
    log.log({"step": 2, "val/pass_rate": 0.25})  # the evaluation made again
    log.close()
    ev = _events(tmp_path)
    assert ev["loss"] == [(1, 1.0), (2, 2.0)]
    assert ev["val/pass_rate"] == [(0, pytest.approx(0.1)), (2, 0.25)]


def test_a_run_resumed_after_an_evaluation_past_its_checkpoint_has_one_tensorboard_event_per_step(tmp_path,
                                                                                                  monkeypatch):
    """The evaluation of a checkpoint's own step is logged after that checkpoint; a run stopped before the next
    one is resumed and evaluates that step again. TensorBoard was purged only from the step after the checkpoint,
    so it showed two evaluations at that step (one of them not in ``metrics.jsonl``)."""
    from scalerl.pipeline.runner import train
    from tests.test_durability_audit import stop_at_checkpoint

    out = tmp_path / "run"
    stop_at_checkpoint(monkeypatch, 4, lambda: train(_micro("tensorboard=true"), out, show_progress=False))
    train(_micro("tensorboard=true"), out, resume=True, show_progress=False)

    metrics = read_metrics(out)
    ev = _events(out)
    for tag in ("val/pass_rate", "loss"):
        want = [(r["step"], pytest.approx(r[tag], abs=1e-6)) for r in metrics if r.get(tag) is not None]
        assert ev[tag] == want, tag


def test_a_backend_that_cannot_start_leaves_no_run_directory(tmp_path, monkeypatch):
    """The generators start before anything is written: a backend failing to start with an error that is not a
    UserError (Ray's own exceptions, say) left a run directory holding only TensorBoard's event file."""
    from scalerl.pipeline import runner

    def broken(*args, **kwargs):
        raise RuntimeError("the cluster went away")

    monkeypatch.setattr(runner, "make_backend", broken)
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="went away"):
        runner.train(_micro("tensorboard=true"), out, show_progress=False)
    assert not out.exists()
