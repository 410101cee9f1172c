"""The run directory (docs/architecture.md contract): ``config.yaml``, ``metrics.jsonl``, ``consumed.jsonl``,
``checkpoints/``, TensorBoard events, ``fit.json`` and ``curve.png``.

Every metrics line is appended in one write and fsynced; checkpoints are written atomically and a
``latest`` pointer is replaced only after the checkpoint file is complete, so a crash never loses a
finished step. On resume, lines past the checkpoint's step are cut so the metrics continue without a gap
or a duplicate.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any

import torch

from scalerl.atomic import append_jsonl, atomic_path, write_text
from scalerl.errors import CheckpointNotWritten, RunFileNotWritten, UserError

METRICS = "metrics.jsonl"
CONSUMED = "consumed.jsonl"  # the problem ids of every trained batch, one line per step
LATEST = "latest"  # in the checkpoint directory: the file name of the newest complete checkpoint


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN; a skipped step logs null
    return value


class RunLog:
    def __init__(self, run_dir: Path, tensorboard: bool = True,
                 resume: tuple[int, int | None] | None = None) -> None:
        """``resume``: ``(last_step, evals)`` of the checkpoint a resumed run starts from (``-1, 0`` without one):
        the lines it does not know are cut first (:meth:`truncate`; the evaluations cut that the run makes again
        are in :attr:`unlogged`), then TensorBoard purges from the first step cut and replays what is kept after
        it (:meth:`replay_tensorboard`)."""
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.writer = None
        self.unlogged: list[int] = []
        # the metrics lines a resumed run keeps, read once here (a new run's directory holds none: check_run_dir)
        self.kept: list[dict[str, Any]] = []
        purge_step = None
        if resume is not None:
            last_step, evals = resume
            self.unlogged = self.truncate(last_step, evals)
            purge_step = min([last_step + 1, *self.unlogged])
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(self.dir / "tb"), purge_step=purge_step)
            if resume is not None:
                self.replay_tensorboard(purge_step, resume[0])

    def log(self, record: dict[str, Any]) -> None:
        clean = {k: _clean(v) for k, v in record.items()}
        self._append(METRICS, clean)
        if self.writer is not None:
            self._scalars(clean)

    def consumed(self, step: int, problem_ids: list[str]) -> None:
        self._append(CONSUMED, {"step": step, "problem_ids": problem_ids})

    def _append(self, name: str, record: dict[str, Any]) -> None:
        """One line of ``name``, whole or not at all (:func:`~scalerl.atomic.append_jsonl`); a write that fails
        (a full disk) is :class:`~scalerl.errors.RunFileNotWritten`, one line, not a traceback."""
        try:
            append_jsonl(self.dir / name, record)
        except OSError as exc:
            raise RunFileNotWritten(
                f"could not write step {record.get('step')}'s line of {self.dir / name} ({_reason(exc)}; "
                f"{_free_mib(self.dir)} MiB free there); {_resume_hint(self.dir / CKPT_DIR)}") from exc

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()

    def replay_tensorboard(self, first: int, last: int) -> None:
        """Write the kept metrics lines of steps ``first..last`` to TensorBoard again. A resumed run's writer purges
        every event from ``first`` on (``purge_step``): from the step after its checkpoint, or from an evaluation
        logged after the checkpoint, which the run makes again; the lines ``metrics.jsonl`` keeps for those steps
        come back here, so TensorBoard holds what the metrics hold, each once (from :attr:`kept`, not read again)."""
        if self.writer is None:
            return
        for record in self.kept:
            step = record.get("step")
            if isinstance(step, int) and first <= step <= last:
                self._scalars(record)

    def _scalars(self, record: dict[str, Any]) -> None:
        step = int(record["step"])
        for key, value in record.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                self.writer.add_scalar(key, value, step)

    def truncate(self, last_step: int, evals: int | None = None) -> list[int]:
        """Drop metric and consumed lines of steps after ``last_step`` (and a trailing partial line). With
        ``evals`` (the evaluations the checkpoint's live forecast holds), keep only the first ``evals`` evaluation
        lines: one logged after the checkpoint was written (an evaluation of the checkpoint's own step, running
        beside the steps, is logged after it) is not in the checkpoint's forecast, so the resumed run evaluates
        there again instead of skipping a step it has a line for. Returns the steps of the evaluation lines
        dropped for that (at most ``last_step``). The metrics lines kept are :attr:`kept`."""
        dropped: list[int] = []
        self.kept = []
        for name in (METRICS, CONSUMED):
            path = self.dir / name
            if not path.exists():
                continue
            kept, seen = [], 0
            for line in path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if not isinstance(rec, dict) or int(rec.get("step", 0)) > last_step:
                    continue
                if "val/pass_rate" in rec:  # an evaluation line (runner: the loop's evaluations)
                    seen += 1
                    if evals is not None and seen > evals:
                        dropped.append(int(rec.get("step", 0)))
                        continue
                kept.append(line)
                if name == METRICS:
                    self.kept.append(rec)
            write_text(path, "".join(line + "\n" for line in kept))
        return dropped


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


# ---------------------------------------------------------------------------------------- checkpoints

CKPT_DIR = "checkpoints"
KEEP = 2


def _reason(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _free_mib(directory: Path) -> str:
    return f"{shutil.disk_usage(directory).free / 2**20:.0f}"


def _resume_hint(ckpt_dir: Path) -> str:
    """What a run stopped by a file it could not write tells its user about resuming."""
    pointer = ckpt_dir / LATEST
    last = pointer.read_text().strip() if pointer.is_file() else None
    return (f"the last checkpoint, {last}, is intact: free some space and --resume" if last
            else "no checkpoint was written yet")


def save_checkpoint(run_dir: Path, step: int, payload: dict[str, Any]) -> Path:
    """Write the checkpoint of ``step`` atomically, point ``latest`` at it and keep the last :data:`KEEP`. A write
    that fails (a full disk makes ``torch.save`` raise a ``RuntimeError`` from its zip writer, or an ``OSError``)
    is :class:`~scalerl.errors.CheckpointNotWritten`: one line naming the directory, the reason and the space free
    there, with the earlier checkpoints untouched."""
    ckpt_dir = Path(run_dir) / CKPT_DIR
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    path, pointer = ckpt_dir / f"step_{step:07d}.pt", ckpt_dir / LATEST
    try:
        with atomic_path(path) as tmp:
            torch.save(payload, tmp)
        # the pointer too: a disk too full for these few bytes is the same one line, ``latest`` still naming the
        # checkpoint before
        write_text(pointer, path.name + "\n")
    except (OSError, RuntimeError) as exc:
        # a complete file whose pointer could not be written goes too: the error says the step's checkpoint was
        # not written, and a resume (which takes a checkpoint newer than ``latest``) starts where it says
        path.unlink(missing_ok=True)
        raise CheckpointNotWritten(
            f"could not write the checkpoint of step {step} in {ckpt_dir} ({_reason(exc)}; "
            f"{_free_mib(ckpt_dir)} MiB free there); {_resume_hint(ckpt_dir)}") from exc
    for old in sorted(ckpt_dir.glob("step_*.pt"))[:-KEEP]:
        old.unlink(missing_ok=True)
    return path


def _step_of(name: str) -> int | None:
    """The step a checkpoint's file name holds (``step_0000040.pt``: 40), or None for another name."""
    digits = name.removeprefix("step_").removesuffix(".pt")
    return int(digits) if name.startswith("step_") and name.endswith(".pt") and digits.isdigit() else None


def checkpoint_files(run_dir: Path) -> dict[int, Path]:
    """The run's checkpoints by step (the last ``KEEP`` steps a run wrote; ``step_0000040.pt`` is step 40)."""
    files = {}
    for path in (Path(run_dir) / CKPT_DIR).glob("step_*.pt"):
        step = _step_of(path.name)
        if step is not None:
            files[step] = path
    return dict(sorted(files.items()))


def read_checkpoint(path: Path) -> dict[str, Any]:
    """One checkpoint's payload, or a UserError when the file is not a readable checkpoint."""
    payload = _try_load(path)
    if payload is None:
        raise UserError(f"checkpoint {path} is truncated, empty or not a scalerl checkpoint; choose another --step")
    return payload


def _try_load(path: Path) -> dict[str, Any] | None:
    """A checkpoint's payload, or None when the file is missing, empty, truncated or not a checkpoint."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False)
    except Exception:  # noqa: BLE001 - torch raises many kinds (EOFError, RuntimeError, UnpicklingError) on a bad file
        return None
    return payload if isinstance(payload, dict) and "step" in payload else None


def load_latest_checkpoint(run_dir: Path) -> dict[str, Any] | None:
    """The newest readable checkpoint: the one ``latest`` names, or a newer ``step_*.pt`` (a checkpoint file
    appears only complete, under its final name, so one newer than the pointer is a run stopped between writing
    it and its pointer: resuming from it retrains nothing); when the named one is missing or unreadable (a crash,
    a disk filling up), the newest readable older one, with a warning. None when the run never wrote a
    checkpoint; a UserError when it wrote some and none can be read."""
    ckpt_dir = Path(run_dir) / CKPT_DIR
    pointer = ckpt_dir / LATEST
    named = pointer.read_text(encoding="utf-8", errors="replace").strip() if pointer.is_file() else ""
    files = sorted(checkpoint_files(run_dir).items(), reverse=True)  # newest first
    if not named and not files:
        return None
    at = _step_of(named)
    newer = [f for step, f in files if at is not None and step > at]
    candidates = newer + ([ckpt_dir / named] if named else []) + [f for _, f in files if f not in newer and f.name != named]
    for path in candidates:
        payload = _try_load(path)
        if payload is not None:
            if path in newer:
                print(f"note: resuming from {path.name}, newer than the {named} the latest pointer names (the run "
                      "stopped between writing the checkpoint and its pointer)", file=sys.stderr)
            elif path.name != named:
                print(f"warning: checkpoint {named or '(latest pointer)'} missing or unreadable; resuming from "
                      f"{path.name}", file=sys.stderr)
            return payload
    raise UserError(
        f"--resume: no readable checkpoint in {ckpt_dir} (tried {', '.join(p.name for p in candidates)}); "
        "the files are truncated or empty: delete the run directory and start again"
    )
