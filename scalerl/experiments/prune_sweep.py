"""``scalerl sweep --prune`` and ``scalerl loo --prune``: a sweep run in rungs of compute, each run stopped once its
forecast says it cannot win (paper §1, the third principle; the rule is :mod:`scalerl.experiments.pruning`).

Every run has a compute budget on the curves' x-axis, ``max_device_hours`` (device-hours, App. A.3, counted by
:mod:`scalerl.compute`). The sweep advances in rungs (``pruning.RUNGS``: 1/8, 1/4, 1/2 and all of each run's
budget): at rung ``f`` every live run is brought to ``f`` × its budget (the runner stops at the first step whose
compute reaches ``max_device_hours``, evaluates and checkpoints there; the next rung resumes it from that checkpoint
with a larger ``max_device_hours``, as a raised budget is resumed in any sweep). Then every live run is fitted on its
evaluations so far and :func:`pruning.decide` stops the runs that cannot win; a stopped run trains no further. A
run that ends below a rung's compute (its ``steps`` or ``max_minutes`` ended it) is *finished*: it is not run
again, and it still competes as the leader.

The state (each run's compute, the rung it reached, whether, why and where it was stopped, with the numbers that
decided) is ``OUT/prune.json``, written atomically after every rung's decisions, and copied into ``sweep.json``
(key ``pruning``). A pruned sweep killed at any point and run again continues where it stopped: the rungs already
decided are not decided again, and within a rung the runs already at its compute are skipped (their
``sweep_done.json`` records the rung's budget) and the interrupted ones resumed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from scalerl import curves
from scalerl.atomic import write_json
from scalerl.config import RunConfig
from scalerl.errors import UserError
from scalerl.experiments.pruning import DEFAULT_MARGIN, RUNGS, Decision, decide, fit_outlook
from scalerl.experiments.spec import PlannedRun, Sweep
from scalerl.experiments.sweep import RunFn, RunRecord, read_done, run_parallel, write_index
from scalerl.presets import format_value

STATE = "prune.json"
EPS = 1e-9  # a run whose compute is below a rung's by more than this share ended on another budget: finished


def rung_name(share: float) -> str:
    """A rung as a fraction of the budget: ``1/8``, ``1/2``, ``1``."""
    return str(Fraction(share).limit_denominator(1024))


@dataclass
class RunPruning:
    """One run's course through the rungs, with the numbers each decision was made on."""

    budget: float  # device-hours it would get unpruned (its max_device_hours)
    state: str = "live"  # live | pruned | finished
    compute: float = 0.0  # device-hours it got so far
    rung: float | None = None  # the last rung it was brought to
    stopped_at: float | None = None  # the rung at which it was stopped (pruned only)
    reason: str = ""  # the last decision's reason
    outlook: dict[str, Any] | None = None  # the last outlook (value, lo, hi, basis, compute)
    leader: str | None = None
    leader_lo: float | None = None
    history: list[dict[str, Any]] = field(default_factory=list)  # every rung: compute, the decision's numbers

    def record(self, share: float, decision: Decision, margin: float) -> None:
        d = decision.to_json()
        self.reason, self.outlook, self.leader, self.leader_lo = d["reason"], d["outlook"], d["leader"], d["leader_lo"]
        self.history.append({"rung": share, "compute": self.compute, "margin": margin, **d})


@dataclass
class PruneState:
    """``prune.json``: the margin, the rungs, how many have been decided, and every run's :class:`RunPruning`."""

    margin: float
    rungs: list[float]
    runs: dict[str, RunPruning]
    decided: int = 0  # rungs done (brought to their compute and decided)

    def totals(self) -> dict[str, float]:
        spent = sum(r.compute for r in self.runs.values())
        budget = sum(r.budget for r in self.runs.values())
        return {"spent_device_hours": spent, "unpruned_device_hours": budget,
                "spent_share": spent / budget if budget > 0 else 0.0}

    def to_json(self) -> dict[str, Any]:
        return {"margin": self.margin, "rungs": self.rungs, "decided": self.decided, **self.totals(),
                "runs": {name: asdict(r) for name, r in self.runs.items()}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "PruneState":
        return cls(float(data["margin"]), [float(r) for r in data["rungs"]],
                   {name: RunPruning(**r) for name, r in data["runs"].items()}, int(data["decided"]))


def budgets(configs: dict[str, RunConfig]) -> dict[str, float]:
    """Each run's compute budget in device-hours; a run without one is a UserError (pruning acts on compute)."""
    missing = [name for name, cfg in configs.items() if cfg.max_device_hours is None]
    if missing:
        raise UserError(
            f"--prune advances runs in rungs of compute, but {', '.join(missing)} has no compute budget; set "
            "max_device_hours (device-hours per run, the curves' x-axis), e.g. --set max_device_hours=0.05 "
            "(scalerl loo: --budget-hours)")
    return {name: float(cfg.max_device_hours) for name, cfg in configs.items()}  # type: ignore[arg-type]


def load_state(out: Path, budget: dict[str, float], margin: float) -> PruneState:
    """The saved state of this sweep (a rerun continues it), or a new one. A state made with another margin,
    other runs or other budgets is a UserError: its decisions would not be this sweep's."""
    try:
        data = json.loads((out / STATE).read_text())
    except FileNotFoundError:
        return PruneState(margin, list(RUNGS), {name: RunPruning(b) for name, b in budget.items()})
    except (OSError, ValueError) as exc:
        raise UserError(f"{out / STATE} is unreadable ({exc}); delete it to prune this sweep from the start") from None
    state = PruneState.from_json(data)
    saved = {name: r.budget for name, r in state.runs.items()}
    if state.margin != margin:
        raise UserError(f"{out} was pruned with --margin {state.margin:g}; rerun with that margin, or choose "
                        "another --out")
    if saved != budget:
        raise UserError(f"{out} was pruned with other runs or budgets ({_diff(saved, budget)}); rerun the same "
                        "spec and budget, or choose another --out")
    return state


def _diff(saved: dict[str, float], now: dict[str, float]) -> str:
    for name in sorted(set(saved) | set(now)):
        if saved.get(name) != now.get(name):
            return f"{name}: {saved.get(name)} device-hours there, {now.get(name)} now"
    return ""


def points(run_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """The run's (device-hours, validation pass rate) evaluations so far; empty when it has none."""
    try:
        s = curves.load_series(run_dir, curves.DEFAULT_X, curves.DEFAULT_Y)
    except (UserError, OSError):
        return np.zeros(0), np.zeros(0)
    return s.x, s.y


def rung_sweep(sweep: Sweep, names: list[str], share: float, budget: dict[str, float]) -> Sweep:
    """The sweep's ``names`` runs, each with ``max_device_hours`` at ``share`` of its budget."""
    runs = tuple(PlannedRun(r.name, r.base, (*r.overrides, f"max_device_hours={format_value(share * budget[r.name])}"))
                 for r in sweep.runs if r.name in names)
    return Sweep(sweep.source, sweep.description, sweep.base, runs)


def decide_rung(state: PruneState, out: Path, ran: dict[str, RunRecord], share: float, last: bool) -> list[str]:
    """After rung ``share``: read every unpruned run's compute and points, mark the runs that ended below the rung
    (finished), fit, and (before the last rung) stop the live runs that cannot win. Returns the names stopped."""
    outlooks = {}
    for name, rp in state.runs.items():
        if rp.state == "pruned":
            continue
        x, y = points(out / name)
        if x.size:
            rp.compute = float(x.max())
        rec = ran.get(name)
        if rec is not None:
            rp.rung = share
            if rec.status == "done" and (last or rp.compute < share * rp.budget * (1 - EPS)):
                rp.state = "finished"
        outlooks[name] = fit_outlook(x, y, rp.budget)
    stopped = []
    for name, decision in decide(outlooks, state.margin).items():
        rp = state.runs[name]
        rp.record(share, decision, state.margin)
        if decision.stop and not last and rp.state == "live":
            rp.state, rp.stopped_at = "pruned", share
            stopped.append(name)
    return stopped


def run_pruned(
    sweep: Sweep, out: str | Path, jobs: int = 1, run_fn: RunFn | None = None, margin: float = DEFAULT_MARGIN,
    show_progress: bool = True, console: Console | None = None,
) -> tuple[list[RunRecord], PruneState]:
    """Run ``sweep`` into ``out`` in rungs of compute, stopping the runs that cannot win (module docstring); ``jobs``
    runs at a time within a rung. Returns every run's record (a stopped run's status is ``pruned``) and the state."""
    if margin < 0:
        raise UserError(f"--margin must be at least 0, got {margin:g}")
    out = Path(out)
    console = console or Console(stderr=True, quiet=not show_progress)
    budget = budgets(sweep.configs())
    state = load_state(out, budget, margin)
    records = {r.name: RunRecord(r.name, str(out / r.name), list(r.overrides)) for r in sweep.runs}
    overrides = {name: rec.overrides for name, rec in records.items()}  # sweep.json shows the spec's, not a rung's
    for name, rp in state.runs.items():  # runs a previous invocation stopped or finished: not run again
        if rp.state != "live":
            rec = records[name]
            rec.status, rec.action = ("pruned" if rp.state == "pruned" else "done"), "skip"
            rec.summary = (read_done(out / name) or {}).get("summary", {})

    def write(recs: list[RunRecord]) -> None:
        for rec in recs:
            rec.overrides = overrides[rec.name]
            records[rec.name] = rec
        write_index(out, sweep, list(records.values()), {"pruning": state.to_json()})

    out.mkdir(parents=True, exist_ok=True)
    for k in range(state.decided, len(state.rungs)):
        share, last = state.rungs[k], k == len(state.rungs) - 1
        live = [name for name, rp in state.runs.items() if rp.state == "live"]
        if not live:
            break
        console.rule(f"rung {k + 1}/{len(state.rungs)}: {len(live)} run(s) to {rung_name(share)} of their compute budget")
        ran = {r.name: r for r in run_parallel(rung_sweep(sweep, live, share, budget), out, jobs, run_fn,
                                               show_progress, console, write)}
        if any(r.status == "failed" for r in ran.values()):
            break  # decided only once every run reached the rung: a rerun retries the failed ones, then decides
        stopped = decide_rung(state, out, ran, share, last)
        state.decided = k + 1
        write_json(out / STATE, state.to_json())
        for name in stopped:
            records[name].status = "pruned"
            console.print(f"[yellow]stopped {name} at {rung_name(share)} of its budget: {state.runs[name].reason}[/yellow]")
        write([])
    return list(records.values()), state


def against_unpruned(pruning: dict[str, Any], unpruned: Path) -> dict[str, dict[str, float]]:
    """For each run of a pruned sweep (its ``sweep.json`` ``pruning``), what the same run got in an unpruned sweep
    of the same spec in ``unpruned``: its compute and its last evaluation (what a stopped run would have reached).
    Runs that sweep does not hold, or that have no evaluation there, are left out."""
    if not Path(unpruned).is_dir():
        raise UserError(f"--unpruned {unpruned}: no such directory; give the unpruned sweep's directory")
    out = {}
    for name in pruning.get("runs", {}):
        x, y = points(Path(unpruned) / name)
        if x.size:
            out[name] = {"compute": float(x.max()), "reward": float(y[-1])}
    return out


def describe(state: PruneState) -> list[str]:
    """What pruning did, for the terminal: compute spent against the unpruned budget, and each stopped run."""
    t = state.totals()
    lines = [f"pruning (margin {state.margin:g}): {t['spent_device_hours']:.4g} of {t['unpruned_device_hours']:.4g} "
             f"device-hours spent ({t['spent_share']:.0%} of the unpruned budget)"]
    for name, rp in state.runs.items():
        if rp.state == "pruned":
            lines.append(f"  {name}: stopped at {rung_name(rp.stopped_at or 0)} of its budget "
                         f"({rp.compute:.4g} device-hours): {rp.reason}")
    return lines
