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
    def __init__(self, run_dir: Path, tensorboard: bool = True, purge_step: int | None = None) -> None:
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(self.dir / "tb"), purge_step=purge_step)

    def log(self, record: dict[str, Any]) -> None:
        clean = {k: _clean(v) for k, v in record.items()}
        self._append(METRICS, clean)
        if self.writer is not None:
            step = int(record["step"])
            for key, value in clean.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self.writer.add_scalar(key, value, step)

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

    def truncate(self, last_step: int, evals: int | None = None) -> list[int]:
        """Drop metric and consumed lines of steps after ``last_step`` (and a trailing partial line). With
        ``evals`` (the evaluations the checkpoint's live forecast holds), keep only the first ``evals`` evaluation
        lines: one logged after the checkpoint was written (an evaluation of the checkpoint's own step, running
        beside the steps, is logged after it) is not in the checkpoint's forecast, so the resumed run evaluates
        there again instead of skipping a step it has a line for. Returns the steps of the evaluation lines
        dropped for that (at most ``last_step``)."""
        dropped: list[int] = []
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
        # checkpoint before (the new file is complete; --resume takes ``latest``'s)
        write_text(pointer, path.name + "\n")
    except (OSError, RuntimeError) as exc:
        raise CheckpointNotWritten(
            f"could not write the checkpoint of step {step} in {ckpt_dir} ({_reason(exc)}; "
            f"{_free_mib(ckpt_dir)} MiB free there); {_resume_hint(ckpt_dir)}") from exc
    for old in sorted(ckpt_dir.glob("step_*.pt"))[:-KEEP]:
        old.unlink(missing_ok=True)
    return path


def checkpoint_files(run_dir: Path) -> dict[int, Path]:
    """The run's checkpoints by step (the last ``KEEP`` steps a run wrote; ``step_0000040.pt`` is step 40)."""
    files = {}
    for path in (Path(run_dir) / CKPT_DIR).glob("step_*.pt"):
        digits = path.stem.removeprefix("step_")
        if digits.isdigit():
            files[int(digits)] = path
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
    """The checkpoint ``latest`` names; when it is missing or unreadable (a crash, a disk filling up), the newest
    readable ``step_*.pt``, with a warning. None when the run never wrote a checkpoint; a UserError when it wrote
    some and none can be read."""
    ckpt_dir = Path(run_dir) / CKPT_DIR
    pointer = ckpt_dir / LATEST
    named = pointer.read_text(encoding="utf-8", errors="replace").strip() if pointer.is_file() else ""
    files = sorted(ckpt_dir.glob("step_*.pt"), reverse=True)
    if not named and not files:
        return None
    candidates = ([ckpt_dir / named] if named else []) + [f for f in files if f.name != named]
    for path in candidates:
        payload = _try_load(path)
        if payload is not None:
            if path.name != named:
                print(f"warning: checkpoint {named or '(latest pointer)'} missing or unreadable; resuming from "
                      f"{path.name}", file=sys.stderr)
            return payload
    raise UserError(
        f"--resume: no readable checkpoint in {ckpt_dir} (tried {', '.join(p.name for p in candidates)}); "
        "the files are truncated or empty: delete the run directory and start again"
    )
