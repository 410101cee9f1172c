"""Running a sweep: each planned run in its own directory ``OUT/<name>``, resumable, with an index ``sweep.json``.

A run is *finished* when ``OUT/<name>/sweep_done.json`` exists and records the same budget (``steps``,
``max_minutes``, ``max_device_hours``) as the run's config now. The marker is written atomically after the run function returns, so a
run killed at any point has no marker and is resumed (``--resume``) on the next invocation; a finished run is
skipped; a finished run whose budget was raised in the spec is resumed to extend it. A run directory holding a
run whose config differs in more than the runner lets a resumed run change (``RESUMABLE_FIELDS``: budget, backend,
threads, ...) is a UserError before anything runs.

The loop is :func:`run_sequential`, or :func:`run_parallel` for several runs at a time on one machine (``--jobs``);
:func:`run_one` carries everything one run needs, so any executor can map it over the plan. A pruned sweep
(``--prune``, :mod:`scalerl.experiments.prune_sweep`) runs these loops once per rung of compute.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Protocol

from rich.console import Console

from scalerl.atomic import write_json
from scalerl.config import RunConfig, config_from_run_dir
from scalerl.errors import UserError
from scalerl.experiments.spec import PlannedRun, Sweep
from scalerl.timing import Stopwatch

DONE = "sweep_done.json"
INDEX = "sweep.json"
ERROR_LOG = "sweep_error.log"
BUDGET_FIELDS = ("steps", "max_minutes", "max_device_hours")  # a run is finished for one budget

Status = Literal["pending", "running", "done", "failed", "interrupted", "pruned"]  # pruned: stopped by --prune


class RunFn(Protocol):
    """Trains one run into ``out`` (resuming it when ``resume``) and returns a JSON-able summary."""

    def __call__(self, cfg: RunConfig, out: Path, resume: bool, show_progress: bool) -> dict[str, Any]: ...


def train_run(cfg: RunConfig, out: Path, resume: bool, show_progress: bool) -> dict[str, Any]:
    """The real run function: :func:`scalerl.pipeline.runner.train`."""
    from scalerl.pipeline.runner import train

    return train(cfg, out, resume=resume, show_progress=show_progress)


@dataclass
class RunRecord:
    """One run's line in ``sweep.json``."""

    name: str
    dir: str
    overrides: list[str]
    status: Status = "pending"
    action: str = ""  # what this invocation did: new, resume, extend, skip
    seconds: float = 0.0
    error: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)


def _budget(cfg: RunConfig) -> dict[str, Any]:
    """The budget a finished-run marker records; ``max_device_hours`` only when set (markers written before it
    existed stay valid)."""
    return {k: getattr(cfg, k) for k in BUDGET_FIELDS if k != "max_device_hours" or cfg.max_device_hours is not None}


def read_done(run_dir: Path) -> dict[str, Any] | None:
    """The finished-run marker, or None when the run has not finished (or the marker is unreadable)."""
    try:
        return json.loads((run_dir / DONE).read_text())
    except (OSError, ValueError):
        return None


def plan_action(cfg: RunConfig, run_dir: Path) -> str:
    """``skip`` (finished at this budget), ``extend`` (finished at another budget), ``resume`` (started, not
    finished) or ``new``. A run directory made with a different config is a UserError."""
    done = read_done(run_dir)
    if not (run_dir / "config.yaml").exists():
        return "new"
    from scalerl.pipeline.runner import RESUMABLE_FIELDS
    from scalerl.presets import config_diff

    saved = config_from_run_dir(run_dir)
    diff = [d for d in config_diff(saved, cfg) if d[0].split(".")[0] not in RESUMABLE_FIELDS]
    if diff:
        path, old, new = diff[0]
        raise UserError(
            f"{run_dir} holds a run with another config ({path}: {old} there, {new} in the spec); "
            "delete that directory or choose another --out"
        )
    if done is not None:
        return "skip" if done.get("budget") == _budget(cfg) else "extend"
    return "resume"


def run_one(run: PlannedRun, cfg: RunConfig, out: Path, run_fn: RunFn, show_progress: bool) -> RunRecord:
    """Bring one run to its budget: skip, start, resume or extend it; write its marker when it returns.

    Any exception from the run is recorded (``failed``, traceback in ``sweep_error.log``) so the other runs
    of the sweep still run; Ctrl-C is not caught."""
    run_dir = out / run.name
    rec = RunRecord(run.name, str(run_dir), list(run.overrides))
    rec.action = plan_action(cfg, run_dir)
    if rec.action == "skip":
        rec.status = "done"
        rec.summary = (read_done(run_dir) or {}).get("summary", {})
        return rec
    watch = Stopwatch().start()
    try:
        summary = run_fn(cfg, run_dir, rec.action != "new", show_progress)
    except Exception as exc:  # noqa: BLE001 - one broken run must not stop the sweep
        rec.status, rec.error = "failed", " ".join(f"{type(exc).__name__}: {exc}".split())
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / ERROR_LOG).write_text(traceback.format_exc())
    else:
        rec.status, rec.summary = "done", _jsonable(summary)
        write_json(run_dir / DONE, {"name": run.name, "budget": _budget(cfg), "summary": rec.summary,
                                    "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S")})
        (run_dir / ERROR_LOG).unlink(missing_ok=True)
    rec.seconds = watch.stop()
    return rec


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=str))


def sweep_status(records: list[RunRecord]) -> str:
    """The sweep's state for ``sweep.json``: ``failed`` if any run failed, ``done`` only when every run is (a
    pruned run is done: it was stopped on purpose)."""
    states = {r.status for r in records}
    if "failed" in states:
        return "failed"
    if "interrupted" in states:
        return "interrupted"
    return "done" if states <= {"done", "pruned"} else "running"


IndexWriter = Callable[[list[RunRecord]], None]  # writes sweep.json from the records of the runs being run


def write_index(out: Path, sweep: Sweep, records: list[RunRecord], extra: dict[str, Any] | None = None) -> None:
    """``sweep.json``, atomically; ``extra`` adds top-level keys (a pruned sweep's ``pruning``)."""
    write_json(out / INDEX, {
        "status": sweep_status(records),
        "source": sweep.source,
        "description": sweep.description,
        "base": sweep.base,
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "runs": [asdict(r) for r in records],
        **(extra or {}),
    })


def check_runs(sweep: Sweep, configs: dict[str, RunConfig], names: list[str]) -> None:
    """Each run in ``names`` as its run would start it (``runner.build_parts``: the task's parameters and data
    files, the engine, the prompts against the model's context), before any run starts: a mistake is one
    UserError naming the run. A model is built once for consecutive runs that share its config, a task once for
    all the runs that share its config (a leave-one-out's variants all train on the base's task)."""
    from scalerl.pipeline.runner import build_parts

    key, bundle = None, None
    tasks: dict[str, Any] = {}
    for name in names:
        cfg = configs[name]
        if (cfg.model, cfg.base_seed) != key:
            key, bundle = None, None  # let the previous model go before building the next
        task_key = cfg.task.model_dump_json()
        try:
            task, _, bundle = build_parts(cfg, bundle, tasks.get(task_key))
        except UserError as exc:
            raise UserError(f"{sweep.source}: run {name!r}: {exc}") from None
        key, tasks[task_key] = (cfg.model, cfg.base_seed), task


def _plan_records(sweep: Sweep, out: Path, write: IndexWriter) -> tuple[dict[str, RunConfig], list[RunRecord]]:
    """Every run's config and record, each run directory and each run still to run checked before anything
    runs (``check_runs``); ``sweep.json`` written."""
    configs = sweep.configs()
    records = [RunRecord(r.name, str(out / r.name), list(r.overrides)) for r in sweep.runs]
    for rec in records:
        rec.action = plan_action(configs[rec.name], Path(rec.dir))
        if rec.action == "skip":  # its final fit from its marker, as run_one gives a skipped run
            rec.status, rec.summary = "done", (read_done(Path(rec.dir)) or {}).get("summary", {})
    check_runs(sweep, configs, [rec.name for rec in records if rec.action != "skip"])
    out.mkdir(parents=True, exist_ok=True)
    write(records)
    return configs, records


def _report(console: Console, i: int, n: int, rec: RunRecord) -> None:
    if rec.status == "failed":
        console.print(f"[red][{i}/{n}] {rec.name} failed: {rec.error}[/red]")
    else:
        console.print(f"[green][{i}/{n}] {rec.name}: done ({rec.action}, {rec.seconds:.0f} s)[/green]")


def _writer(out: Path, sweep: Sweep, write: IndexWriter | None) -> IndexWriter:
    return write or (lambda records: write_index(out, sweep, records))


def run_sequential(
    sweep: Sweep, out: str | Path, run_fn: RunFn | None = None, show_progress: bool = True,
    console: Console | None = None, write: IndexWriter | None = None,
) -> list[RunRecord]:
    """Run the sweep's runs one after another into ``out``, keeping ``sweep.json`` current after every change
    (``write``: how, default :func:`write_index`). ``run_fn`` defaults to :func:`train_run` (looked up at call
    time, so tests can replace it)."""
    out = Path(out)
    run_fn = run_fn or train_run
    console = console or Console(stderr=True, quiet=not show_progress)
    write = _writer(out, sweep, write)
    configs, records = _plan_records(sweep, out, write)
    n = len(records)
    for i, (run, rec) in enumerate(zip(sweep.runs, records), 1):
        if rec.action == "skip":
            console.print(f"[dim][{i}/{n}] {run.name}: finished, skipped[/dim]")
            continue
        rec.status = "running"
        write(records)
        console.rule(f"[{i}/{n}] {run.name}")
        try:
            records[i - 1] = rec = run_one(run, configs[run.name], out, run_fn, show_progress)
        except BaseException:
            rec.status = "interrupted"
            write(records)
            raise
        write(records)
        _report(console, i, n, rec)
    return records


def threads_per_job(jobs: int) -> int:
    """Torch threads for each of ``jobs`` runs sharing this machine's cores."""
    return max(1, (os.cpu_count() or 1) // jobs)


PARENT_POLL_S = 0.5  # how often a pool worker checks that the sweep that started it is still alive


_started: Any = None  # in a pool worker: the queue on which it names each run as it starts it


def _exit_with_parent(parent: int, started: Any = None) -> None:
    """Pool worker initializer: end this worker once the sweep process that started it is gone (killed with
    SIGKILL, say). A run left going on its own would race the rerun that resumes it in the same directory
    (both appending to its ``metrics.jsonl``). The run is interrupted as if killed, and resumed next time.
    ``started``: the queue :func:`_run_in_worker` names its runs on."""
    import threading

    global _started
    _started = started

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="sweep-parent-watch", daemon=True).start()


def _run_in_worker(i: int, run: PlannedRun, cfg: RunConfig, out: Path, run_fn: RunFn) -> RunRecord:
    """:func:`run_one` in a pool worker, first telling the sweep that run ``i`` has started (the pool hands a
    worker's next call over before it starts it, so a call the pool cannot cancel may never have started)."""
    if _started is not None:
        _started.put(i)
    return run_one(run, cfg, out, run_fn, False)


def _drain(queue: Any) -> set[int]:
    out = set()
    while not queue.empty():
        out.add(queue.get())
    return out


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """End the pool's workers now: on an interruption of the sweep the runs in them are interrupted (resumed next
    time) instead of the interrupted sweep waiting for them, or for runs already handed to a worker, to finish."""
    terminate = getattr(pool, "terminate_workers", None)  # Python 3.14+
    if callable(terminate):
        terminate()
        return
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        proc.join(timeout=5)


def run_parallel(
    sweep: Sweep, out: str | Path, jobs: int, run_fn: RunFn | None = None, show_progress: bool = True,
    console: Console | None = None, write: IndexWriter | None = None,
) -> list[RunRecord]:
    """Like :func:`run_sequential`, ``jobs`` runs at a time, each in its own process (spawned, so a run may start
    its own generator processes). A run whose config leaves ``threads`` unset gets the machine's cores divided
    by ``jobs``, so that the runs do not oversubscribe the cores. ``run_fn`` must be picklable (a module-level
    function or an instance of a module-level class). Ctrl-C stops the pool: the running runs are interrupted
    (their workers ended; resumed next time), pending ones stay pending. A worker whose sweep process is killed
    ends too (:func:`_exit_with_parent`)."""
    if jobs <= 1:
        return run_sequential(sweep, out, run_fn, show_progress, console, write)
    out = Path(out)
    run_fn = run_fn or train_run
    console = console or Console(stderr=True, quiet=not show_progress)
    write = _writer(out, sweep, write)
    configs, records = _plan_records(sweep, out, write)
    n, threads = len(records), threads_per_job(jobs)
    ctx = multiprocessing.get_context("spawn")
    started = ctx.SimpleQueue()
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_exit_with_parent,
                             initargs=(os.getpid(), started)) as pool:
        futures = {}  # future -> position of its run in the plan
        for i, (run, rec) in enumerate(zip(sweep.runs, records)):
            if rec.action == "skip":
                console.print(f"[dim][{i + 1}/{n}] {run.name}: finished, skipped[/dim]")
                continue
            cfg = configs[run.name]
            if cfg.threads is None:
                cfg = cfg.model_copy(update={"threads": threads})
            # no progress display in a worker (several would interleave); pending until it finishes
            futures[pool.submit(_run_in_worker, i, run, cfg, out, run_fn)] = i
        write(records)
        console.print(f"{len(futures)} run(s), {jobs} at a time, {threads} thread(s) each")
        try:
            for future in as_completed(futures):
                i = futures[future]
                try:
                    records[i] = future.result()
                except Exception as exc:  # noqa: BLE001 - e.g. a worker killed from outside
                    rec = records[i]
                    rec.status, rec.error = "failed", " ".join(f"{type(exc).__name__}: {exc}".split())
                write(records)
                _report(console, i + 1, n, records[i])
        except BaseException:
            handed = [i for future, i in futures.items() if not future.done() and not future.cancel()]
            _stop_workers(pool)  # before reading which of them started: none starts after
            begun = _drain(started)
            for i in handed:
                if i in begun:
                    records[i].status = "interrupted"  # it had started; one that never did stays pending
            write(records)
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return records
