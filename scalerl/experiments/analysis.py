"""What the report says about a set of runs, computed with ``scalerl.curves`` (fitting, interval, ranking).

For every run directory: the Eq. 1 fit on all its evaluations with the interval on A (Eq. 1, App. A.5), the held-out
extrapolation check (refit on the first half of its compute, scored on the second half: §4, §5), the reward
predicted at 2× and 10× its compute, and its training diagnostics; every run's fit starts at the same absolute
compute (``experiments/cutoff.py``). Across runs: the ranking by the paper's rule
and the refits at a common A for the linearised figure (``curves.compare_fits``, App. A.5, Fig. 7). A run that cannot be
analysed is kept as :class:`Skipped` with the reason, and the others are still analysed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import yaml

from scalerl import curves
from scalerl.curves.extrapolation import HALF, HeldOut, half_budget_check
from scalerl.errors import UserError
from scalerl.experiments.cutoff import shared_fit_from
from scalerl.experiments.figures import DIAGNOSTIC_KEYS
from scalerl.experiments.sweep import INDEX

FORECAST_FACTORS = (2.0, 10.0)
RUN_FILES = ("metrics.jsonl", "config.yaml")

Diagnostics = dict[str, tuple[np.ndarray, np.ndarray]]  # metrics key -> (steps, values)


def A_interval(fit: curves.FitResult) -> tuple[str, str]:
    """The ends of the interval on A as text; an end the data does not bound reads 'open'."""
    if fit.A_ci is None:
        return "–", "–"
    return tuple(  # type: ignore[return-value]
        "open" if is_open or v is None else f"{v:.3f}" for v, is_open in zip(fit.A_ci, fit.A_ci_open)
    )


@dataclass
class Breakdown:
    """A run's curves per domain (§5: one sigmoid per domain) and its downstream sets, against compute.

    A task mixture's domains are its ``val/<domain>/pass_rate`` columns; a single-task run's one domain is its
    task, read from ``val/pass_rate``, so a sweep puts each domain trained alone beside it in a mixture."""

    mixture: bool
    domains: dict[str, tuple[curves.Series, curves.FitResult | None]]
    downstream: dict[str, curves.Series]
    validation: str = ""  # which tasks val/pass_rate averages over (see _validation), to compare runs by


@dataclass(frozen=True)
class Prediction:
    factor: float
    compute: float
    reward: float


@dataclass
class RunAnalysis:
    name: str
    dir: Path
    fit: curves.FitResult
    heldout: HeldOut | None
    heldout_note: str | None
    predictions: list[Prediction]
    series: Diagnostics
    breakdown: Breakdown | None = None

    @property
    def n_points(self) -> int:
        return int(self.fit.x.size)

    @property
    def x_max(self) -> float:
        return float(self.fit.x.max())

    @property
    def y_last(self) -> float:
        return float(self.fit.y[-1])

    @property
    def A_interval(self) -> tuple[str, str]:
        return A_interval(self.fit)

    @property
    def diagnostics(self) -> dict[str, float]:
        """One number per diagnostic: the worst truncation and staleness, the rest at the end of the run."""
        out: dict[str, float] = {}
        for key, (_, values) in self.series.items():
            if values.size:
                if key == "train/truncation_rate" or key == "train/staleness_max":
                    out[key] = float(values.max())
                elif key == "train/staleness_mean":
                    out[key] = float(values.mean())
                else:
                    out[key] = float(values[-1])
        return out


@dataclass(frozen=True)
class Skipped:
    name: str
    dir: Path
    reason: str


@dataclass(frozen=True)
class RankItem:
    rank: int
    name: str
    A: float
    group: tuple[str, ...]  # the runs tied with this one (itself included); one name when not tied
    common_A: float | None  # the mean A the tied group was refitted at
    B_common: float | None  # this run's B at that A
    A_text: str = ""  # A for a table: the estimate, or "≥ lo" when the run has not identified it
    pruned: bool = False  # stopped by --prune: listed after the ranked runs, not ranked (rank 0)
    identified: bool = True  # False: A not identified, placed by the lower end of its interval (curves.compare)
    ranked: bool = True  # False: A not identified and bounded nowhere, listed after the ranking (curves.compare)


@dataclass
class Analysis:
    root: Path
    title: str
    description: str
    margin: float
    runs: list[RunAnalysis] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    ranking: list[RankItem] = field(default_factory=list)
    slope_fits: list[curves.FitResult] = field(default_factory=list)  # every run refitted at the common A
    common_A: float | None = None
    warnings: list[str] = field(default_factory=list)
    x: str = curves.DEFAULT_X
    y: str = curves.DEFAULT_Y
    ci_level: float = 0.95
    fit_from: float = 0.0  # the early-point cutoff shared by every run's fit (scalerl/experiments/cutoff.py)
    pruning: dict[str, Any] | None = None  # what --prune did (sweep.json's "pruning"), None for an unpruned sweep


def _index(root: Path) -> dict:
    try:
        return json.loads((root / INDEX).read_text())
    except (OSError, ValueError):
        return {}


def run_dirs(root: Path) -> list[Path]:
    """``root`` itself when it is one run, else its subdirectories: in ``sweep.json`` order, then by name."""
    if not root.is_dir():
        raise UserError(f"{root}: no such directory; give a sweep directory or a run directory")
    if any((root / f).exists() for f in RUN_FILES):
        return [root]
    listed = [root / r["name"] for r in _index(root).get("runs", []) if isinstance(r, dict) and "name" in r]
    others = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and p not in listed)
    dirs = [p for p in listed if p.is_dir()] + others
    if not dirs:
        raise UserError(f"{root}: no run directories in it (and no metrics.jsonl); give a sweep or run directory")
    return dirs


def load_diagnostics(run_dir: Path) -> Diagnostics:
    """(steps, values) of each diagnostic the run logged; keys it never logged are left out."""
    out: Diagnostics = {}
    for key in DIAGNOSTIC_KEYS:
        try:
            s = curves.load_series(run_dir, x="step", y=key)
        except UserError:
            continue
        out[key] = (s.x, s.y)
    return out


def _try_fit(s: curves.Series) -> curves.FitResult | None:
    try:
        return curves.fit_series(s)
    except (curves.FitError, UserError):
        return None  # too few or too flat points: the curve is drawn without a fit


def load_breakdown(run_dir: Path) -> Breakdown | None:
    """The run's per-domain and downstream curves, named by its ``config.yaml`` (None without one)."""
    cfg = _run_config(run_dir)
    if cfg is None:
        return None
    task, evals = cfg.get("task") or {}, cfg.get("eval") or {}
    mix = task.get("mix") if isinstance(task.get("mix"), list) else None
    columns = ({e["name"]: f"val/{e['name']}/pass_rate" for e in mix if isinstance(e, dict) and "name" in e} if mix
               else {str(task.get("name", "task")): curves.DEFAULT_Y})
    domains = {}
    for d, col in columns.items():
        try:
            s = curves.load_series(run_dir, curves.DEFAULT_X, col)
        except UserError:
            continue
        domains[d] = (s, _try_fit(s))
    downstream = {}
    for d in evals.get("downstream") or []:
        try:
            downstream[d["name"]] = curves.load_series(run_dir, curves.DEFAULT_X, f"downstream/{d['name']}/pass_rate")
        except UserError:
            continue
    return Breakdown(bool(mix), domains, downstream, _validation(task))


def _validation(task: dict[str, Any]) -> str:
    """Which tasks a run's val/pass_rate averages over: each domain's name and validation size, and the seed.
    Mixture weights, training sizes and a task's params (often training-only, as its habits are) are left out,
    so that a sweep over them is not told its runs differ."""
    n_val = task.get("n_val")
    mix = task.get("mix") if isinstance(task.get("mix"), list) else None
    domains = ([(e.get("name"), e.get("n_val") or n_val) for e in mix if isinstance(e, dict)] if mix
               else [(task.get("name"), n_val)])
    return json.dumps([sorted(domains, key=str), task.get("seed")], default=str)


DIFFERENT_TASKS = ("these runs validate on different tasks (val/pass_rate averages over different problems), so "
                   "their A and B do not compare; compare them domain by domain (--y val/<domain>/pass_rate)")


def validate_on_different_tasks(paths: Iterable[Path]) -> bool:
    """True when two of the run directories among ``paths`` (others are ignored) have different validation sets."""
    configs = (_run_config(Path(p)) for p in paths)
    return len({_validation(cfg.get("task") or {}) for cfg in configs if cfg is not None}) > 1


def _run_config(run_dir: Path) -> dict[str, Any] | None:
    """The run's ``config.yaml`` as written (no validation: older runs stay readable); None without one, or when
    the file is not a scalerl run's (another tool's config.yaml beside a CSV: not a mapping, or its ``task`` not one)."""
    try:
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("task") or {}, dict):
        return None
    return cfg


def _series(run_dir: Path) -> curves.Series:
    if run_dir.is_dir() and not any(run_dir.iterdir()):
        raise UserError("empty directory: the run never started")
    return curves.load_series(run_dir, curves.DEFAULT_X, curves.DEFAULT_Y)


def analyse_run(run_dir: Path, name: str, fit_from: float | None = None) -> RunAnalysis:
    """Fit one run (from ``fit_from``, the comparison's shared cutoff; None: the run's own); a UserError
    (caught by :func:`analyse`) says why it cannot be reported."""
    s = _series(run_dir)
    x_max = float(s.x.max()) if s.x.size else 0.0
    fit = curves.fit_series(s, fit_from=fit_from, predict_at=[f * x_max for f in FORECAST_FACTORS])
    heldout, note = half_budget_check(s.x, s.y, s.source, HALF)
    predictions = [Prediction(f, c, r) for f, (c, r) in zip(FORECAST_FACTORS, fit.predictions)]
    return RunAnalysis(name, run_dir, fit, heldout, note, predictions, load_diagnostics(run_dir),
                       load_breakdown(run_dir))


def pruned_runs(a: Analysis) -> set[str]:
    """The runs ``--prune`` stopped (``sweep.json``'s ``pruning``)."""
    runs = (a.pruning or {}).get("runs") or {}
    return {name for name, r in runs.items() if isinstance(r, dict) and r.get("state") == "pruned"}


def _rank(a: Analysis) -> None:
    """The paper's ranking (App. A.5, A.8) of the runs that got their whole budget. A run stopped by ``--prune``
    (§1's third principle) has a fit on the compute it got only, so it is listed after them, marked, unranked:
    its A and B are not the end of a run and do not compare with those of the runs that completed."""
    stopped = pruned_runs(a)
    complete = [r for r in a.runs if r.name not in stopped] or a.runs
    by_id = {id(r.fit): r.name for r in a.runs}
    cmp = curves.compare_fits([r.fit for r in complete], margin=a.margin)
    groups: dict[int, list[str]] = {}
    for item in cmp.ranked:
        groups.setdefault(item.group, []).append(by_id[id(item.fit)])
    a.ranking = [
        RankItem(item.rank, by_id[id(item.fit)], item.fit.A, tuple(groups[item.group]), item.group_A,
                 item.refit.B if item.refit is not None else None, item.fit.format_A(), identified=item.identified,
                 ranked=item.ranked)
        for item in cmp.ranked
    ] + [RankItem(0, r.name, r.fit.A, (r.name,), None, None, r.fit.format_A(), pruned=True,
                  identified=r.fit.identified)
         for r in a.runs if r.name in stopped and r not in complete]
    a.common_A, a.slope_fits, a.warnings = cmp.common_A, cmp.common_fits, list(cmp.warnings)
    if len({r.breakdown.validation for r in a.runs if r.breakdown is not None}) > 1:
        a.warnings.append(DIFFERENT_TASKS)


def _analyse_runs(dirs: list[Path], xs: dict[Path, np.ndarray]) -> tuple[float, list[RunAnalysis], list[Skipped]]:
    """(the shared cutoff, the runs reported, the runs skipped). The cutoff (§2.1, App. A.7: one absolute compute for
    every run compared) is taken over the runs that are reported: a run that cannot be fitted (one evaluation, a
    constant reward) is not in the comparison, so it must not move the window of the runs that are. When a run
    drops out, the others are fitted again with the cutoff of those left."""
    included = [d for d in dirs if d in xs]
    while True:
        fit_from = shared_fit_from([xs[d] for d in included])
        runs, skipped = [], []
        for d in dirs:
            try:
                runs.append(analyse_run(d, d.name, fit_from))
            except (UserError, OSError) as exc:
                skipped.append(Skipped(d.name, d, " ".join(str(exc).split())))
        fitted = [d for d in included if any(r.dir == d for r in runs)]
        if not fitted or fitted == included:
            return fit_from, runs, skipped
        included = fitted


def analyse(root: str | Path, margin: float = 0.02) -> Analysis:
    """Analyse every run under ``root`` (see :func:`run_dirs`); unusable runs become :class:`Skipped`."""
    root = Path(root)
    dirs = run_dirs(root)
    index = _index(root)
    a = Analysis(root=root, title=root.resolve().name, description=str(index.get("description", "")), margin=margin,
                 pruning=index.get("pruning") if isinstance(index.get("pruning"), dict) else None)
    xs: dict[Path, np.ndarray] = {}
    for d in dirs:
        try:
            xs[d] = _series(d).x
        except (UserError, OSError):
            continue  # reported as skipped below
    a.fit_from, a.runs, a.skipped = _analyse_runs(dirs, xs)
    if a.runs:
        a.ci_level = a.runs[0].fit.ci_level
        _rank(a)
    return a
