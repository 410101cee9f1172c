"""Read a compute–reward series from what training runs leave behind (docs/architecture.md "PATH may be ...").

Supported: scalerl's own ``metrics.jsonl`` (flat keys, one object per line; lines without the requested keys,
such as non-evaluation steps, are skipped; a truncated last line is skipped), a run directory (its
``metrics.jsonl``, else a ``trainer_state.json``, else the TensorBoard events in it or below it, such as ``tb/``
or an HF ``runs/<date>/``, else the ``trainer_state.json`` of an HF/TRL output directory's latest
``checkpoint-<step>/``), a CSV file with a header (including W&B history exports and W&B chart exports, whose
columns are named ``"<run> - <metric>"``), TensorBoard event files or directories (read with TensorBoard's own
``EventAccumulator``; ``--x`` may then be another scalar tag, joined on the step, or ``step`` / ``wall_time``),
and the files other trainers write:

* an HF ``Trainer`` / TRL ``trainer_state.json``: its ``log_history`` entries, joined on their ``step`` (an
  evaluation's ``eval_*`` entry and a training log of the same step become one row);
* verl's file logger (``trainer.logger=['file']``, ``verl/utils/tracking.py`` ``FileLogger``): JSON lines
  ``{"step": N, "data": {metric: value}}``, read as rows ``{"step": N, **data}``;
* verl's console logger (``trainer.logger=['console']``, ``verl/utils/tracking.py``; also its SFT trainer): text
  lines ``step:N - key:value - key:value ...``, after any prefix on the line (Ray's ``(TaskRunner pid=...)``, a
  tqdm bar), read as rows ``{"step": N, key: value, ...}``; lines of the same step are merged (the validation
  metrics, ``val-core/...``, are printed with that step's training metrics or alone at step 0). Every other line of
  the log is ignored;
* a JSON array of flat records (a W&B ``run.history()`` saved with ``to_json(orient="records")``), one row each;
  in any JSON record a nested object is read as its leaves, named by their path (``eval/gsm8k/acc``);
* OpenRLHF writes its metrics only to W&B and TensorBoard (``openrlhf/trainer/ppo_utils/loggers.py``): its event
  files (tags ``train/<k>``, ``eval/<k>``) are read like any TensorBoard events.

Rows whose values are missing are skipped silently (the metric was not logged there); rows whose values are
present but not finite numbers are dropped and named in a note. Every problem with the path or the columns is a
one-line :class:`~scalerl.errors.UserError`.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from scalerl.curves.series import Series, describe_rows
from scalerl.errors import UserError

DEFAULT_X = "compute/device_hours"
DEFAULT_Y = "val/pass_rate"
TB_PSEUDO_COLUMNS = ("step", "wall_time")


def load_series(path: str | Path, x: str = DEFAULT_X, y: str = DEFAULT_Y) -> Series:
    """The (x, y) points of ``path`` in file order, with row numbers and notes about dropped rows. A path that holds
    several runs is an error naming them (:func:`load_runs` reads each)."""
    p = _existing(path)
    if p.is_dir():
        if not p.name or p.name == "..":  # "." or "..": named by the folder it stands for (short_name, run_location)
            p = p.resolve()
        for name in RUN_FILES:
            if (p / name).is_file():
                return load_series(p / name, x, y)
        state = _latest_checkpoint_state(p)
        events = _event_dirs(p)
        shallowest = [d for d in events if len(d.parts) == len(events[0].parts)] if events else []
        if state is not None and len(shallowest) != 1:
            # an HF/TRL output directory whose TensorBoard events, if any, are not one run's folder (a relaunch
            # writes a second runs/<date>/): its latest checkpoint's log is the run's whole history up to it
            series = load_series(state, x, y)
            return replace(series, notes=(*series.notes, f"{p}: read {state}, the latest checkpoint's trainer state"))
        if not events:
            several = _runs_in(p)
            if len(several) > 1:
                raise UserError(f"{p} holds {len(several)} runs ({', '.join(r.name for r in several[:4])}"
                                f"{', …' if len(several) > 4 else ''}); give one, or read each with load_runs (api.load_all)")
        return _from_tensorboard(_event_dir(p, events), x, y)
    if "tfevents" in p.name:
        return _from_tensorboard(p, x, y)
    return _from_records(p, _file_records(p), x, y)


def load_runs(path: str | Path, x: str = DEFAULT_X, y: str = DEFAULT_Y) -> list[Series]:
    """:func:`read_runs`' series, its notes (runs left out) on the first one."""
    runs, notes = read_runs(path, x, y)
    return [replace(runs[0], notes=(*runs[0].notes, *notes)), *runs[1:]] if notes else runs


def read_runs(path: str | Path, x: str = DEFAULT_X, y: str = DEFAULT_Y) -> tuple[list[Series], list[str]]:
    """(every run's points in ``path``, notes naming the runs left out, empty when none was): :func:`load_series`'s
    one series, except for

    * a file that holds several runs' ``"<run> - <y>"`` columns and no column ``y`` itself (a W&B chart export of a
      sweep): one series per run in column order, named :func:`run_source`, each read against its own
      ``"<run> - <x>"`` column, or the file's own ``x`` column (the export's ``Step``) when it has none;
    * a directory that is no run itself but holds runs (:func:`_runs_in`: a ``scalerl sweep`` output, a folder of
      HF/TRL output directories, a TensorBoard logdir): one series per run, in path order.

    A run of several that cannot be read (a failed or queued run's missing log, a column it never logged) is left
    out and named in a note; when none can be read, the first one's error is raised."""
    p = _existing(path)
    if p.is_dir():
        return _each([lambda run=run: load_series(run, x, y) for run in _runs_in(p)], p)
    if "tfevents" in p.name:
        return [load_series(p, x, y)], []
    records = _file_records(p)
    columns = records[0]
    runs = [c.removesuffix(f" - {y}") for c in columns if c.endswith(f" - {y}")]
    if y in columns or len(runs) < 2:
        series = _from_records(p, records, x, y)
        if y in columns and runs:
            note = (f"{p}: read its column {y!r}; it also has {len(runs)} runs' '<run> - {y}' columns (--y "
                    f"{f'{runs[0]} - {y}'!r} reads one)")
            series = replace(series, notes=(*series.notes, note))
        return [series], []

    def one(run: str) -> Series:
        name = run_source(p, run)
        xc = f"{run} - {x}" if f"{run} - {x}" in columns else x
        if xc not in columns:
            raise UserError(f"{name}: no column {f'{run} - {x}'!r}, and the file has no column {x!r} of its own")
        return _from_records(p, records, x, y, name, (xc, f"{run} - {y}"))
    return _each([lambda run=run: one(run) for run in runs], p)


def _each(runs: list[Callable[[], Series]], p: Path) -> tuple[list[Series], list[str]]:
    """The series of ``runs`` (a reader each) that can be read, and a note naming the others (see
    :func:`read_runs`)."""
    read, skipped = [], []
    for reader in runs:
        try:
            read.append(reader())
        except UserError as exc:
            skipped.append(exc)
    if not read:
        raise skipped[0]
    notes = [f"{p}: left out {len(skipped)} of its {len(runs)} runs that cannot be read: "
             + "; ".join(str(e) for e in skipped[:3]) + (" …" if len(skipped) > 3 else "")] if skipped else []
    return read, notes


RUN_FILES = ("metrics.jsonl", "trainer_state.json")  # the files that make a directory a run


def _is_run(d: Path) -> bool:
    """Whether ``d`` is one run's directory: a scalerl run (its log, or a sweep run that failed before writing one:
    its ``sweep_error.log``), an HF/TRL output directory (finished, or mid-training: its checkpoints)."""
    return (any((d / name).is_file() for name in RUN_FILES) or (d / "sweep_error.log").is_file()
            or _latest_checkpoint_state(d) is not None)


def _runs_in(p: Path) -> list[Path]:
    """The runs a directory ``p`` holds: ``[p]`` when it is a run itself (:func:`_is_run`) or holds TensorBoard
    events itself; else every run directory and every folder of TensorBoard events below it, at any depth, not
    looking inside either (a run's ``tb/`` or ``runs/<date>/`` are its own; the subfolders ``add_scalars`` writes
    beside a run's events are that run's), in path order. ``[p]`` when that finds nothing, for :func:`load_series`
    to name the problem."""
    runs: list[Path] = []
    for d, subdirs, files in _tree(p):
        if _is_run(d) or any("tfevents" in f for f in files):
            if d == p:
                return [p]
            runs.append(d)
            subdirs[:] = []
    return sorted(runs) or [p]


def _tree(p: Path) -> Iterable[tuple[Path, list[str], list[str]]]:
    """``os.walk`` of ``p`` that follows symbolic links (a logdir of linked runs) and enters each real folder once."""
    seen: set[str] = set()
    for root, subdirs, files in os.walk(p, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            subdirs[:] = []
            continue
        seen.add(real)
        subdirs.sort()
        yield Path(root), subdirs, files


def run_source(path: str | Path, run: str) -> str:
    """The name of run ``run`` of a file that holds several (:func:`read_runs`): ``"<path> [<run>]"``."""
    return f"{path} [{run}]"


def run_of(source: str) -> tuple[str, str] | None:
    """(the file, the run) of a :func:`run_source` name; None for any other source. The file is the longest prefix
    before a ``" ["`` that is a file (a run's name may hold brackets and " - ", as W&B display names do)."""
    if not source.endswith("]") or Path(source).exists():
        return None
    cut = source.find(" [")
    while cut != -1:
        if Path(source[:cut]).is_file():
            return source[:cut], source[cut + 2:-1]
        cut = source.find(" [", cut + 1)
    return None


def run_location(source: str) -> tuple[str, str | None]:
    """(the path that stands for the run a series was read from, its run's name in a file of several): the run
    directory for a file every run names alike (a metrics.jsonl, a trainer_state.json, also inside the run's
    ``checkpoint-<step>/``; a bare ``metrics.jsonl``, as the trainer's own figure names its source, stays itself)
    and for a run's own TensorBoard events (a file's folder; scalerl's ``<run>/tb``, HF's ``<output_dir>/runs/<date>``);
    else the source itself."""
    of_file = run_of(source)
    if of_file is not None:
        return of_file
    p = Path(source)
    if p.name in RUN_FILES:
        if str(p.parent) in ("", "."):
            return source, None
        return str(p.parent.parent if re.fullmatch(r"checkpoint-\d+", p.parent.name) else p.parent), None
    if "tfevents" in p.name and p.is_file():
        p = p.parent
    if p.name == "tb" or (p.parent.name == "runs" and _is_run(p.parent.parent)):
        return str(p.parent if p.name == "tb" else p.parent.parent), None
    return str(p), None


def check_distinct(sources: Iterable[str]) -> None:
    """A UserError when two of ``sources`` are one run (:func:`run_location`, links resolved): a folder and a run in
    it, a run's log and its events, a link to a run, the same file twice. Two event files of one folder are two runs
    (as given), but not beside that folder read as a run."""
    runs: dict[tuple[str, str | None], str] = {}  # the run each source is
    folders: dict[tuple[str, str | None], str] = {}  # the folder an event file given on its own belongs to
    for source in sources:
        path, run = run_location(source)
        own, folder = (os.path.realpath(path), run), None
        if "tfevents" in Path(source).name and Path(source).is_file():
            own, folder = (os.path.realpath(source), None), own
        first = runs.get(own) or folders.get(own) or (runs.get(folder) if folder else None)
        if first is not None:
            twice = f"{source} is given twice" if first == source else f"{first} and {source} are the same run"
            raise UserError(f"{twice}; compare different runs")
        runs[own] = source
        if folder:
            folders.setdefault(folder, source)


def _existing(path: str | Path) -> Path:
    """``path``, which must exist (and, a file, not be empty)."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"{p}: no such file or directory")
    if p.is_file() and p.stat().st_size == 0:
        raise UserError(f"{p}: the file is empty")
    return p


def _file_records(p: Path) -> Records:
    """The rows of a file that is not TensorBoard events: JSON (lines), verl's console log, or a CSV/TSV; a file too
    large to hold in memory is a one-line error naming it (its rows take several times its size as records)."""
    try:
        if p.suffix.lower() in (".jsonl", ".json", ".ndjson") or _first_char(p) in ("{", "["):
            return _json_records(p)
        if p.suffix.lower() not in (".csv", ".tsv") and (console := _console_records(p)) is not None:
            return console
        return _csv_records(p)
    except MemoryError:
        raise UserError(f"{p}: too large to read into memory ({p.stat().st_size / 2**20:.0f} MiB); keep the columns "
                        "to fit (e.g. the step and the reward) in a smaller file") from None


def _latest_checkpoint_state(p: Path) -> Path | None:
    """The ``trainer_state.json`` of the latest checkpoint (``checkpoint-<step>/``, the highest step) of an HF/TRL
    output directory, or None. Its ``log_history`` holds every entry logged up to that checkpoint; the root
    ``trainer_state.json`` appears only once a script calls ``save_state()``, at the end."""
    found = [(int(m.group(1)), f) for f in p.glob("checkpoint-*/trainer_state.json")
             if (m := re.fullmatch(r"checkpoint-(\d+)", f.parent.name)) and f.is_file()]
    return max(found)[1] if found else None


def _event_dirs(p: Path) -> list[Path]:
    """The folders in or below the directory ``p`` that hold TensorBoard event files, shallowest first (symbolic
    links followed)."""
    dirs = [d for d, _, files in _tree(p) if any("tfevents" in f for f in files)]
    return sorted(dirs, key=lambda d: (len(d.parts), str(d)))


def _event_dir(p: Path, dirs: list[Path]) -> Path:
    """The one folder in or below the directory ``p`` that holds TensorBoard event files (``dirs``: its
    :func:`_event_dirs`, walked once)."""
    if not dirs:
        raise UserError(
            f"{p}: a directory without metrics.jsonl, trainer_state.json, checkpoint-*/trainer_state.json or TensorBoard "
            "event files; give a run directory"
        )
    if len(dirs) > 1 and len(dirs[1].parts) == len(dirs[0].parts):
        shown = ", ".join(str(d) for d in dirs[:4])
        raise UserError(f"{p}: TensorBoard events in several folders ({shown}); give the one you mean")
    return dirs[0]


def _first_char(p: Path) -> str:
    with open(p, encoding="utf-8-sig", errors="replace") as fh:
        return fh.read(256).lstrip()[:1]


Records = tuple[list[str], list[tuple[int, dict[str, Any]]], list[str]]  # columns, (row, record), notes


def _records(rows: list[tuple[int, dict[str, Any]]], notes: list[str] | None = None) -> Records:
    """``rows`` with their columns: every key of every record, in the order first seen. A nested object is read as
    its leaves, named by their path (``{"eval": {"gsm8k": {"acc": 0.5}}}`` gives the column ``eval/gsm8k/acc``, the
    name a logger that flattens would have written)."""
    rows = [(row, _flat(rec)) for row, rec in rows]
    return list(dict.fromkeys(k for _, rec in rows for k in rec)), rows, notes or []


def _flat(rec: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``rec`` with its nested objects' leaves lifted to ``"<key>/<key>"`` names (a record without any: itself)."""
    if not any(isinstance(v, dict) for v in rec.values()):
        return {f"{prefix}{k}": v for k, v in rec.items()} if prefix else rec
    out: dict[str, Any] = {}
    for k, v in rec.items():
        out.update(_flat(v, f"{prefix}{k}/") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def _loads(text: str, where: str) -> Any:
    """``json.loads`` of user data; nesting too deep for the parser (a RecursionError) is a UserError naming
    ``where``, so that no JSON input can end in a traceback."""
    try:
        return json.loads(text)
    except RecursionError:
        raise UserError(f"{where} is nested too deeply to be read as JSON; is this a metrics file?") from None


def _json_records(p: Path) -> Records:
    """A JSON document (an HF/TRL ``trainer_state.json``) or JSON lines (metrics.jsonl, verl's file logger)."""
    text = p.read_text(encoding="utf-8-sig", errors="replace")
    try:  # one document (a trainer_state.json, pretty-printed or on one line), else JSON lines
        doc = _loads(text, str(p))
    except json.JSONDecodeError:
        return _jsonl_records(p, text)
    if isinstance(doc, dict) and isinstance(doc.get("log_history"), list):
        return _trainer_state_records(p, doc["log_history"])
    if isinstance(doc, list) and doc and all(isinstance(r, dict) for r in doc):
        # an array of flat records (a W&B ``run.history()`` saved with ``to_json(orient="records")``, or any
        # list of metric rows), read as JSON lines are
        return _records([(i + 1, r) for i, r in enumerate(doc)])
    if "\n" in text.strip():  # one pretty-printed document that is not a trainer_state.json
        raise UserError(
            f"{p}: a JSON document without a log_history list; give an HF/TRL trainer_state.json, a metrics.jsonl, "
            "verl's file-logger .jsonl, a CSV or TensorBoard events"
        )
    return _jsonl_records(p, text)


def _trainer_state_records(p: Path, history: list[Any]) -> Records:
    """HF ``TrainerState.log_history``: one dict per ``Trainer.log`` call, each with the ``step`` it was logged at.
    Entries of the same step are merged (later keys win), so an evaluation joins the training log of its step."""
    by_step: dict[Any, tuple[int, dict[str, Any]]] = {}
    for i, entry in enumerate(history):
        if not isinstance(entry, dict) or "step" not in entry:
            raise UserError(f"{p}: log_history entry {i + 1} is not an object with a step; is this a trainer_state.json?")
        step = entry["step"]
        if isinstance(step, bool) or not isinstance(step, (int, float)) or step != step:
            raise UserError(f"{p}: log_history entry {i + 1} has step {str(step)[:40]!r}, not a number; "
                            "is this a trainer_state.json?")
        _, merged = by_step.setdefault(entry["step"], (i + 1, {}))
        merged.update(entry)
    if not by_step:
        raise UserError(f"{p}: log_history is empty; the trainer logged nothing yet")
    return _records(list(by_step.values()))


def _jsonl_records(p: Path, text: str) -> Records:
    lines = text.splitlines()
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    out, notes = [], []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = _loads(line, f"{p}: line {i + 1}")
        except json.JSONDecodeError:
            if i == last:
                notes.append(f"{p}: skipped a truncated last line (line {i + 1})")
                continue
            raise UserError(f"{p}: line {i + 1} is not valid JSON; a metrics.jsonl has one JSON object per line")
        if not isinstance(rec, dict):
            raise UserError(f"{p}: line {i + 1} is not a JSON object; a metrics.jsonl has one object per line")
        if set(rec) == {"step", "data"} and isinstance(rec["data"], dict):  # verl FileLogger
            rec = {"step": rec["step"], **rec["data"]}
        out.append((i + 1, rec))
    if not out:
        raise UserError(f"{p}: no JSON records in the file")
    return _records(out, notes)


# verl's console line: "step:N - k:v - k:v"; "step" must start the line or follow a space, ")" or "]" (a Ray prefix,
# a tqdm bar), so that a pair such as "training/global_step:1" inside the line is not read as its start
_CONSOLE_STEP = re.compile(r"(?:^|(?<=[\s)\]]))step:(\d+) - (.*)$")


def _console_records(p: Path) -> Records | None:
    """verl's console log as records (module docstring), or None when no line of the file is a step line (the file
    is then read as a CSV). Values that are not numbers are kept as text (the series drops them, naming the rows)."""
    by_step: dict[int, tuple[int, dict[str, Any]]] = {}
    with open(p, encoding="utf-8-sig", errors="replace") as fh:
        for i, line in enumerate(fh):
            m = _CONSOLE_STEP.search(line.rstrip("\r\n"))
            if m is None:
                continue
            pairs = {}
            for item in m.group(2).split(" - "):
                key, sep, value = item.rpartition(":")
                if sep and key.strip():
                    pairs[key.strip()] = value.strip()
            if not pairs:
                continue
            step = int(m.group(1))
            _, merged = by_step.setdefault(step, (i + 1, {"step": step}))
            merged.update(pairs)
    return _records(list(by_step.values())) if by_step else None


def _csv_records(p: Path) -> Records:
    with open(p, newline="", encoding="utf-8-sig", errors="replace") as fh:
        reader = csv.reader(fh, delimiter="\t" if p.suffix.lower() == ".tsv" else ",")
        try:
            header = next(reader, [])
            columns, renamed = _unique_columns(header)
            rows = [(i + 2, dict(zip(columns, values))) for i, values in enumerate(reader) if values]
        except csv.Error as exc:  # an unclosed quote swallows the rest of the file into one field, past the limit
            raise UserError(f"{p}: not a readable CSV (stopped at line {reader.line_num}: {exc}); a quote opened and "
                            "never closed before there, or a field longer than the CSV reader takes") from None
    if not columns:
        raise UserError(f"{p}: no header row; a CSV needs column names on its first line")
    if not rows:
        raise UserError(f"{p}: the CSV has a header but no rows")
    notes = [f"{p}: {len(renamed)} column names repeat (two runs of the same name?); read as "
             + ", ".join(repr(c) for c in renamed[:4]) + (" …" if len(renamed) > 4 else "")] if renamed else []
    return columns, rows, notes


def _unique_columns(header: list[str]) -> tuple[list[str], list[str]]:
    """``header`` with each repeat of a run's column made unique, and the new names. A W&B chart export names a run's
    column ``"<run> - <metric>"`` by the run's display name, which two runs may share: the second becomes
    ``"<run> (2) - <metric>"`` (or the next number no column has), a run of its own, where reading by name kept only
    the last column. Other repeated names (blank cells of a spreadsheet's header) stay as they are: the last wins."""
    taken, out, renamed = set(header), [], []
    seen: set[str] = set()
    for name in header:
        run, sep, metric = name.partition(" - ")
        if name in seen and sep:
            k = 2
            while (new := f"{run} ({k}) - {metric}") in taken:
                k += 1
            taken.add(new)
            renamed.append(new)
            name = new
        seen.add(name)
        out.append(name)
    return out, renamed


def resolve_column(name: str, columns: Iterable[str], source: Path | str) -> str:
    """``name`` itself, the tag HF's TensorBoard callback gives a logged key (``train/<key>``, ``eval_x`` →
    ``eval/x``, so one ``--x``/``--y`` serves a trainer_state.json and its events), or the unique W&B chart-export
    column ``"<run> - name"``; else a UserError listing the columns."""
    columns = list(columns)
    hf_tags = [f"train/{name}", "eval/" + name[5:] if name.startswith("eval_") else None]
    for candidate in (name, *hf_tags):
        if candidate in columns:
            return candidate
    wandb = [c for c in columns if c.endswith(f" - {name}")]
    if len(wandb) == 1:
        return wandb[0]
    if len(wandb) > 1:  # a W&B chart export of several runs: each run's column ends with the metric's name
        shown = ", ".join(repr(c) for c in wandb[:6]) + (f", … ({len(wandb)} in all)" if len(wandb) > 6 else "")
        raise UserError(f"{source}: several runs log {name!r} ({shown}); give the whole column name of the one you mean")
    shown = ", ".join(columns[:40]) + (f", … ({len(columns)} in all)" if len(columns) > 40 else "")
    raise UserError(f"{source}: no column {name!r}; the columns there are: {shown}")


def _number(v: Any) -> float | None:
    """A float, None when missing, NaN when present but not a finite number."""
    if v is None or (isinstance(v, str) and not v.strip()):
        return None
    if isinstance(v, bool):
        return math.nan
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):  # OverflowError: a JSON integer beyond float's range
        return math.nan
    return f if math.isfinite(f) else math.nan


def _series(source: Path | str, x: str, y: str, points: list[tuple[int, Any, Any]], notes: list[str]) -> Series:
    xs, ys, rows, bad = [], [], [], []
    for row, xv, yv in points:
        fx, fy = _number(xv), _number(yv)
        if fx is None or fy is None:
            continue
        if math.isnan(fx) or math.isnan(fy):
            bad.append(row)
            continue
        xs.append(fx)
        ys.append(fy)
        rows.append(row)
    if bad and not xs:
        raise UserError(f"{source}: no numeric ({x}, {y}) pairs; rows {describe_rows(bad)} hold non-numbers or NaN")
    if not xs:
        raise UserError(f"{source}: no row has both {x!r} and {y!r}")
    if bad:
        notes = [*notes, f"{source}: dropped {len(bad)} row(s) with non-numeric or NaN {x}/{y}: {describe_rows(bad)}"]
    return Series(str(source), x, y, np.array(xs), np.array(ys), np.array(rows), tuple(notes))


def _from_records(source: Path, records: Records, x: str, y: str, name: str | None = None,
                  run_columns: tuple[str, str] | None = None) -> Series:
    """The (x, y) series of ``records`` read from ``source``; for one run of several in the file, ``name`` is the
    series' source name (:func:`run_source`) and ``run_columns`` the run's own (x, y) columns."""
    columns, rows, notes = records
    xc, yc = run_columns or (resolve_column(x, columns, source), resolve_column(y, columns, source))
    return _series(name or source, x, y, [(row, rec.get(xc), rec.get(yc)) for row, rec in rows], notes)


def _from_tensorboard(path: Path, x: str, y: str) -> Series:
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(str(path), size_guidance={event_accumulator.SCALARS: 0})
    try:
        acc.Reload()
    except Exception as exc:  # a corrupt or foreign file: TensorBoard raises many kinds
        raise UserError(f"{path}: not a readable TensorBoard event file ({type(exc).__name__}: {exc})") from None
    tags = list(acc.Tags().get(event_accumulator.SCALARS, []))
    if not tags:
        below = sorted({d.relative_to(path).parts[0] for d in _event_dirs(path) if d != path}) if path.is_dir() else []
        hint = (f"; its subfolders {', '.join(below[:4])}{', …' if len(below) > 4 else ''} hold events (add_scalars "
                "writes one folder per curve): give the one you mean") if below else ""
        raise UserError(f"{path}: no scalar summaries in the TensorBoard events{hint}")
    columns = tags + list(TB_PSEUDO_COLUMNS)
    yt = resolve_column(y, tags, path)
    y_events, notes = _latest_per_step(acc.Scalars(yt), path)
    if x in TB_PSEUDO_COLUMNS:
        t0 = y_events[0].wall_time if y_events else 0.0
        xv = {e.step: (e.step if x == "step" else e.wall_time - t0) for e in y_events}
    else:
        xv = {e.step: e.value for e in acc.Scalars(resolve_column(x, columns, path))}  # later events win, as for y
    points = [(i + 1, xv.get(e.step), e.value) for i, e in enumerate(y_events)]
    return _series(path, x, y, points, notes)


def _latest_per_step(events: list[Any], path: Path) -> tuple[list[Any], list[str]]:
    """A scalar's events in step order, the last written kept where a step was logged more than once: a run resumed
    from a checkpoint logs its steps after the checkpoint again, in a new event file (TensorBoard draws both; the
    values the run went on from are the later ones). A note says how many steps were logged again."""
    latest = {e.step: e for e in events}  # in the order TensorBoard read them: event files by name, i.e. by time
    if len(latest) == len(events):
        return list(events), []
    again = len(events) - len(latest)
    return sorted(latest.values(), key=lambda e: e.step), [
        f"{path}: {again} step(s) logged more than once (a resumed run?); the last value written for each is read"]
