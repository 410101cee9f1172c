"""``scalerl fit`` and ``scalerl compare``: the predictive framework of §1–§2 on the command line.

``fit`` fits Eq. 1 to each PATH, prints A (with its interval), B, Cmid and the extrapolation check, and can write
``--json`` (docs/architecture.md's format) and a ``--plot``. ``compare`` ranks runs by the paper's rules (A first; within
``--margin``, B at a shared A). Imports of numpy/scipy/matplotlib happen inside the commands.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional

import typer

from scalerl.commands import add_row, print_table
from scalerl.errors import UserError, check_number, check_writable_file, printable

if TYPE_CHECKING:
    from scalerl.curves import FitResult

# options shared by fit and compare (typer reads these as defaults, so one object serves both commands)
X_OPTION = typer.Option(
    "compute/device_hours", "--x",
    help="Compute column (metrics key, CSV column, TensorBoard tag, or step/wall_time for TensorBoard).",
)
Y_OPTION = typer.Option("val/pass_rate", "--y", help="Reward column: the held-out pass rate by default.")
FROM_OPTION = typer.Option(
    None, "--fit-from", metavar="C",
    help="Fit only points with compute ≥ C. Default: leave out the early regime as the paper does (~1.5k of 16k "
    "GPU-h): the first 9.4% of the window's compute, keeping at least 6 points; 0 fits from the first evaluation. "
    "R0 always comes from the point at compute 0.",
)
UNTIL_OPTION = typer.Option(
    None, "--fit-until", metavar="C",
    help="Fit only points with compute ≤ C: an absolute value, or a fraction of the largest compute (0.5 or 50%); "
    "later points are held out and scored.",
)
METHOD_OPTION = typer.Option(
    "vp", "--method",
    help="vp: variable projection, the exact least-squares optimum (default); paper: the paper's grid search "
    "(App. A.5: A in 0.450..0.800 step 0.005, 100 linear Cmid in [100, 40000] GPU-h; see --a-grid, --cmid-grid); "
    "paper-data: the same search on grids taken from the data (for other compute units).",
)
MODEL_OPTION = typer.Option(
    "sigmoid", "--model", help="sigmoid: Eq. 1 (default); power: the power law R = A − D·C^(−B) of App. A.4."
)
A_GRID_OPTION = typer.Option(
    None, "--a-grid", metavar="LO:HI:STEP", help="--method paper's grid on A (default 0.450:0.800:0.005)."
)
CMID_GRID_OPTION = typer.Option(
    None, "--cmid-grid", metavar="LO:HI:N", help="--method paper's grid on Cmid, N linear values (default 100:40000:100)."
)
BOUNDS_OPTION = typer.Option(
    True, "--bounds/--no-bounds", help="Keep 0 ≤ R0 ≤ A ≤ 1 (pass rates); --no-bounds for rewards such as ±1."
)
LEVEL_OPTION = typer.Option(0.95, "--level", help="Confidence level of the interval on A.")
Y_SCALE_OPTION = typer.Option(
    1.0, "--y-scale", metavar="F",
    help="Multiply the reward by F before fitting: 0.01 reads an accuracy logged in percent as a pass rate.",
)


def _parse_until(text: Optional[str]) -> tuple[Optional[float], Optional[float]]:
    """``--fit-until``: (absolute, fraction). Values ≤ 1 and values ending in % are fractions of the largest compute."""
    if text is None:
        return None, None
    s = text.strip()
    try:
        value = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        raise UserError(f"--fit-until {text!r} is not a number; give a compute value or a fraction such as 0.5 or 50%") from None
    if not value > 0 or not math.isfinite(value):
        raise UserError(f"--fit-until must be a positive finite number, got {text}")
    if s.endswith("%") or value <= 1:
        if value > 1:
            raise UserError(f"--fit-until {text}: a fraction must be at most 100%")
        return None, value
    return value, None


# the most values one --a-grid or --cmid-grid may have: the search evaluates every pair, so a larger grid is a
# mistake (a STEP or N off by orders of magnitude), not a finer search
MAX_GRID_POINTS = 10_000


def _parse_grid(text: Optional[str], flag: str, last_is_count: bool) -> Any:
    """``LO:HI:STEP`` (``--a-grid``) or ``LO:HI:N`` (``--cmid-grid``) as an array; None stays None."""
    import numpy as np

    if text is None:
        return None
    form = "LO:HI:N" if last_is_count else "LO:HI:STEP"
    try:
        lo, hi, last = (float(v) for v in text.split(":"))
    except ValueError:
        raise UserError(f"{flag} {text!r}: give {form}, three numbers separated by colons") from None
    if not all(math.isfinite(v) for v in (lo, hi, last)):
        raise UserError(f"{flag} {text!r}: LO, HI and {form[-1:] if last_is_count else 'STEP'} must be finite numbers")
    if not (hi >= lo and last > 0) or (last_is_count and last != int(last)):
        raise UserError(f"{flag} {text!r}: need HI ≥ LO and a positive {'whole N' if last_is_count else 'STEP'}")
    if last_is_count and lo <= 0:
        raise UserError(f"{flag} {text!r}: Cmid is a compute on a log axis; LO must be > 0")
    size = last if last_is_count else math.floor((hi - lo) / last + 0.5) + 1
    if size > MAX_GRID_POINTS:
        raise UserError(f"{flag} {text!r}: {size:.3g} grid values; at most {MAX_GRID_POINTS} (the paper's grids have "
                        "71 and 100)")
    if last_is_count:
        return np.linspace(lo, hi, int(last))
    return np.round(np.arange(lo, hi + last / 2, last), 12)


def _parse_points(values: List[str], flag: str) -> list[float]:
    """Repeatable and comma-separated numbers: ``--predict-at 8000,16000 --predict-at 32000``."""
    out = []
    for v in values:
        for part in filter(None, (p.strip() for p in v.split(","))):
            try:
                out.append(float(part))
            except ValueError:
                raise UserError(f"{flag} {part!r} is not a number") from None
    if values and not out:
        raise UserError(f"{flag}: no number given; e.g. {flag} 8000,16000")
    for c in out:
        check_number(flag, c, low=0)
    return out


def check_fit_numbers(
    fit_from: Optional[float], level: float, bounds: bool, target: Optional[float] = None, margin: Optional[float] = None
) -> None:
    """The numeric options of fit and compare, before any file is read: finite and in range."""
    check_number("--fit-from", fit_from, low=0)
    check_number("--level", level, low=0, high=1, low_open=True, high_open=True)
    check_number("--margin", margin, low=0)
    if bounds:  # a pass rate; with --no-bounds any finite reward level may be asked for
        check_number("--target", target, low=0, high=1)
    else:
        check_number("--target", target)


def _fit_paths(
    paths: List[Path],
    x: str,
    y: str,
    fit_from: Optional[float],
    fit_until: Optional[str],
    method: str,
    bounds: bool,
    level: float,
    predict_at: Optional[List[str]] = None,
    target: Optional[float] = None,
    model: str = "sigmoid",
    a_grid: Optional[str] = None,
    cmid_grid: Optional[str] = None,
    shared_cutoff: bool = False,
    y_scale: float = 1.0,
    distinct: bool = False,
) -> tuple[list["FitResult"], list[str]]:
    """Load and fit every path: (the fits, notes naming the runs of several that were left out); any user mistake
    is raised before anything is written. ``shared_cutoff`` (with ``fit_from`` None): one absolute early-point
    cutoff for every run (``scalerl.experiments.cutoff``); ``y_scale``: each reward times this (``--y-scale``);
    ``distinct``: refuse a run read twice (a folder and one of its runs, a link to a run)."""
    from dataclasses import replace

    from scalerl.curves import FIT_METHODS, FitError, fit_series
    from scalerl.curves.fit import MODELS
    from scalerl.curves.readers import check_distinct, read_runs
    from scalerl.curves.series import PERCENT_HINT

    FIT_METHODS.get(method, "--method")
    check_number("--y-scale", y_scale, low=1e-6, high=1e6)  # beyond these a scale is a mistake, not a unit
    check_fit_numbers(fit_from, level, bounds, target)
    if model not in MODELS:
        raise UserError(f"--model {model!r} is not known; use one of: {', '.join(MODELS)}")
    grids = {"a_grid": _parse_grid(a_grid, "--a-grid", False), "cmid_grid": _parse_grid(cmid_grid, "--cmid-grid", True)}
    if bounds and grids["a_grid"] is not None and not (0 <= grids["a_grid"].min() and grids["a_grid"].max() <= 1):
        raise UserError(f"--a-grid {a_grid!r}: with bounds on, A is a pass rate in [0, 1]; give a grid inside it "
                        "or pass --no-bounds")
    until_abs, until_frac = _parse_until(fit_until)
    points = _parse_points(predict_at or [], "--predict-at")
    loaded, notes = [], []  # (series, whether its path held several runs: a sweep's export or folder), left out
    for path in paths:
        runs, left_out = read_runs(path, x, y)
        loaded += [(series, len(runs) > 1 or bool(left_out)) for series in runs]
        notes += left_out
    if distinct:
        check_distinct([series.source for series, _ in loaded])
    if y_scale != 1:
        loaded = [(replace(series, y=series.y * y_scale), several) for series, several in loaded]
    unfit: list[FitError] = []
    while True:  # a run left out does not set the early cutoff the others share: fitted again without it
        cutoff = fit_from
        if fit_from is None and shared_cutoff:
            from scalerl.experiments.cutoff import shared_fit_from

            cutoff = shared_fit_from([series.x for series, _ in loaded], until_abs, until_frac)
        fits, failed = [], []
        for series, several in loaded:
            predict = points or [float(series.x.max()), 2 * float(series.x.max())]
            try:
                fits.append(fit_series(series, method=method, model=model, fit_from=cutoff, **grids,
                                       fit_until=until_abs, fit_until_fraction=until_frac, bounded=bounds,
                                       level=level, predict_at=predict, target=target))
            except FitError as exc:
                if y_scale != 1:  # the values it names are the file's times the scale, which is already given
                    exc = FitError(f"{str(exc).replace(PERCENT_HINT, '')} (the rewards after --y-scale {y_scale:g})")
                if not several:
                    raise exc from None
                failed.append((series, exc))  # one run of a sweep that cannot be fitted (a constant one)
        unfit += [exc for _, exc in failed]
        if not failed or not fits or cutoff == fit_from:
            break
        loaded = [(series, several) for series, several in loaded if all(series is not f for f, _ in failed)]
    if not fits:
        raise unfit[0]
    if unfit:
        notes.append(f"left out {len(unfit)} run(s) that cannot be fitted: "
                     + "; ".join(str(e) for e in unfit[:3]) + (" …" if len(unfit) > 3 else ""))
    return fits, notes


def _scaled(y_scale: float) -> dict[str, float]:
    """The JSON's record of ``--y-scale`` (its rewards, A and R0 are the file's times it); nothing at 1."""
    return {"y_scale": y_scale} if y_scale != 1 else {}


def _interval(f: "FitResult") -> str:
    return f.format_interval() or "–"


def _print_warnings(messages: list[str]) -> None:
    for w in dict.fromkeys(messages):
        typer.echo(printable(f"warning: {w}"), err=True)


def _emit_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, allow_nan=False))


def _console() -> Any:
    from scalerl.progress import make_console

    return make_console(highlight=False)


def _column(name: str) -> dict[str, Any]:
    """A table column's layout: a run's name folds onto more lines; every value stays on one (:func:`print_table`
    widens the console rather than cut one)."""
    return {"overflow": "fold"} if name == "run" else {"no_wrap": True}


def _print_fits(fits: list["FitResult"]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from scalerl.curves.fit import format_compute as _c, format_level
    from scalerl.curves.plot import display_names

    names = display_names([f.source for f in fits])
    power = fits[0].model == "power"
    table = Table(title="power-law fits, R = A − D·C^(−B) (App. A.4)" if power else f"Eq. 1 fits (method {fits[0].method})")
    cols = ("run", "n", "window", "R0", "A", f"{format_level(fits[0].ci_level)} interval", "identified", "B", "Cmid", "RMSE")
    for col in cols + ("held-out |err| mean / max", "beats ruler"):
        table.add_column(col, **_column(col))
    for f, name in zip(fits, names):
        h = f.heldout
        add_row(
            table,
            name,
            str(f.n_points),
            f"{_c(f.fit_window[0])}–{_c(f.fit_window[1])}",
            ("–" if f.R0 != f.R0 else f"{f.R0:.3f}" + ("" if f.R0_fixed else " (fit)")),
            f.format_A(),
            _interval(f),
            "yes" if f.identified else "NO",
            f"{f.B:.2f}",
            "–" if f.Cmid != f.Cmid else _c(f.Cmid),
            f"{f.rmse:.4f}",
            f"{h['mean_abs_err']:.4f} / {h['max_abs_err']:.4f} ({h['n']} points)" if h else "–",
            _beats_ruler(f),
        )
    console = _console()
    print_table(table, console)
    for f, name in zip(fits, names):
        console.print(escape(printable(forecast_lines(f, name))))


def _beats_ruler(f: "FitResult") -> str:
    """The trust column: did the forecast beat carrying the last value forward on the run's own history? (The
    numbers are in the trust line under the table.)"""
    t = f.trust or {}
    if t.get("forecast_err") is None:
        return "–"
    return "yes" if t["better_than_ruler"] else "NO"


def forecast_lines(f: "FitResult", name: str | None = None) -> str:
    """What a fit forecasts, as the CLI prints it: each prediction with its 80% band, the trust line, and, when Eq. 1
    does not describe the run, the reason instead of a confident number (``name``: the run's, its short name by
    default)."""
    from scalerl.curves.fit import format_compute as _c
    from scalerl.curves.plot import short_name

    name = name or short_name(f.source)
    lines = []
    if f.predictions:
        lo, hi = f.forecast_interval([c for c, _ in f.predictions], level=0.8)
        preds = "; ".join(f"at {_c(c)}: {r:.3f} [{a:.3f}, {b:.3f}]" + ("" if f.supports(r) else
                                                                         " (beyond what the data support)")
                          for (c, r), a, b in zip(f.predictions, lo, hi))
        if f.reliable:
            lines.append(f"{name} predicts {f.y_name} {preds} (80% band for one evaluation)")
        else:
            from scalerl.curves.trust import following

            why = "; ".join((f.trust or {}).get("warnings") or ["see the warnings"])
            weight = f.forecaster.weight if f.forecaster is not None else 1.0
            lines.append(f"{name}: UNRELIABLE, {f.law} does not describe this run ({why}); the forecast "
                         f"{following(weight)}: {preds} (80% band)")
    if f.target:
        lines.append(f"{name} target {f.target['y']:g}: {f.target['note']}")
    if f.trust:
        lines.append(f"{name} trust: {f.trust['summary']}")
    return "\n".join(lines)


def fit(
    paths: List[Path] = typer.Argument(
        ..., help="Run directories, metrics.jsonl, CSV, or TensorBoard event files; a W&B export of several runs or a "
                  "folder of runs (a sweep's output, a TensorBoard logdir) gives each run."
    ),
    x: str = X_OPTION,
    y: str = Y_OPTION,
    fit_from: Optional[float] = FROM_OPTION,
    fit_until: Optional[str] = UNTIL_OPTION,
    predict_at: Optional[List[str]] = typer.Option(
        None, "--predict-at", metavar="C", help="Predict the reward at these computes (repeatable, or 8000,16000)."
    ),
    target: Optional[float] = typer.Option(None, "--target", metavar="R", help="Report the compute that reaches R."),
    method: str = METHOD_OPTION,
    model: str = MODEL_OPTION,
    a_grid: Optional[str] = A_GRID_OPTION,
    cmid_grid: Optional[str] = CMID_GRID_OPTION,
    bounds: bool = BOUNDS_OPTION,
    level: float = LEVEL_OPTION,
    y_scale: float = Y_SCALE_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print the fits as JSON (docs/architecture.md format) instead of a table."),
    plot: Optional[Path] = typer.Option(None, "--plot", metavar="FILE", help="Write a figure (.png, .svg, .pdf)."),
) -> None:
    """Fit Eq. 1, R = R0 + (A − R0)/(1 + (Cmid/C)^B), to each PATH and extrapolate it (§1–§2)."""
    from scalerl.curves import plot_fits
    from scalerl.curves.plot import check_figure_path

    if plot is not None:
        check_figure_path(plot)
        check_writable_file(plot, "--plot")
    fits, notes = _fit_paths(paths, x, y, fit_from, fit_until, method, bounds, level, predict_at, target, model,
                             a_grid, cmid_grid, y_scale=y_scale)
    _print_warnings(notes + [w for f in fits for w in f.warnings])
    if plot is not None:
        plot_fits(fits, plot)
    if as_json:
        _emit_json({"fits": [f.to_json() for f in fits], **({"warnings": notes} if notes else {}), **_scaled(y_scale)})
    else:
        _print_fits(fits)
        if plot is not None:
            typer.echo(f"wrote {plot}")


def compare(
    paths: List[Path] = typer.Argument(
        ..., help="Two or more runs (run directories, metrics.jsonl, CSV, TensorBoard); a W&B export of several runs or a "
                  "folder of runs (a sweep's output, a TensorBoard logdir) gives each."
    ),
    x: str = X_OPTION,
    y: str = Y_OPTION,
    fit_from: Optional[float] = FROM_OPTION,
    fit_until: Optional[str] = UNTIL_OPTION,
    margin: float = typer.Option(0.02, "--margin", help="A values within this margin are tied and ranked by B (App. A.5)."),
    method: str = METHOD_OPTION,
    model: str = MODEL_OPTION,
    a_grid: Optional[str] = A_GRID_OPTION,
    cmid_grid: Optional[str] = CMID_GRID_OPTION,
    bounds: bool = BOUNDS_OPTION,
    level: float = LEVEL_OPTION,
    y_scale: float = Y_SCALE_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print the ranking as JSON instead of a table."),
    plot: Optional[Path] = typer.Option(None, "--plot", metavar="FILE", help="Overlay figure of all fits."),
    slope_plot: Optional[Path] = typer.Option(
        None, "--slope-plot", metavar="FILE", help="Linearised figure, log F(R) vs log C at the mean A (Fig. 7)."
    ),
) -> None:
    """Rank runs by the paper's rules: A first; runs within --margin are refit at their mean A and ranked by B."""
    from scalerl.curves import compare_fits, plot_fits, plot_linearised
    from scalerl.curves.plot import check_figure_path
    from scalerl.curves.readers import check_distinct

    for flag, fig in (("--plot", plot), ("--slope-plot", slope_plot)):
        if fig is not None:
            check_figure_path(fig)
            check_writable_file(fig, flag)
    # the same run twice ties with itself and hides which row is which: refused before any file is read, and again
    # for the runs the paths hold (_fit_paths)
    check_distinct([str(path) for path in paths])
    check_fit_numbers(fit_from, level, bounds, margin=margin)
    # one absolute early-point cutoff for every run compared (scalerl/experiments/cutoff.py), each file read once
    fits, notes = _fit_paths(paths, x, y, fit_from, fit_until, method, bounds, level, model=model, a_grid=a_grid,
                             cmid_grid=cmid_grid, shared_cutoff=True, y_scale=y_scale, distinct=True)
    if len(fits) < 2:  # one path may hold several runs (a W&B chart export of a sweep), some left out
        raise UserError("compare needs at least two runs; use 'scalerl fit' for one" + "".join(f"; {n}" for n in notes))
    result = compare_fits(fits, margin=margin)
    result.warnings[:0] = notes
    from scalerl.curves import DEFAULT_Y
    from scalerl.curves.readers import run_location
    from scalerl.experiments.analysis import DIFFERENT_TASKS, validate_on_different_tasks

    runs = [Path(run_location(f.source)[0]) for f in fits]  # each run's directory (a sweep's folder gives several)
    mixed = [DIFFERENT_TASKS] if y == DEFAULT_Y and validate_on_different_tasks(runs) else []
    _print_warnings([w for f in fits for w in f.warnings] + result.warnings + mixed)
    if plot is not None:
        plot_fits(fits, plot)
    if slope_plot is not None:
        plot_linearised(result.common_fits, slope_plot)
    if as_json:
        _emit_json({**result.to_json(), **_scaled(y_scale)})
        return
    _print_comparison(result)
    for fig in (plot, slope_plot):
        if fig is not None:
            typer.echo(f"wrote {fig}")


def _print_comparison(result: Any) -> None:
    from rich.table import Table

    from scalerl.curves.fit import format_compute as _c
    from scalerl.curves.plot import display_names

    names = display_names([r.fit.source for r in result.ranked])
    table = Table(title=f"Ranking (App. A.5, A.8): A first; A within ±{result.margin:g} is a tie, broken by B at the tie's mean A")
    notes = []
    if any(not r.identified and r.ranked for r in result.ranked):  # compare.py: placed by the lower end of A
        notes.append("* A not identified: placed by the lower end of its interval (A ≥ that), never tied, not ranked by "
                     "its fitted A")
    if any(not r.ranked for r in result.ranked):
        notes.append("– not ranked: A not identified and the data bound it nowhere (no interval, or "
                     "one open below); listed after the ranked runs, by name")
    if notes:
        table.caption = "\n".join(notes)
    cols = ("rank", "run", "A", "interval", "identified", "B", "Cmid", "tie", "mean A", "B at mean A", "Cmid at mean A",
            "beats ruler")
    for col in cols:
        table.add_column(col, **_column(col))
    for r, name in zip(result.ranked, names):
        tied = r.group_A is not None
        add_row(
            table,
            (str(r.rank) + ("" if r.identified else "*")) if r.ranked else "–",
            name,
            r.fit.format_A(),
            _interval(r.fit),
            "yes" if r.fit.identified else "NO",
            f"{r.fit.B:.2f}",
            "–" if r.fit.Cmid != r.fit.Cmid else _c(r.fit.Cmid),
            str(r.group) if tied else "–",
            f"{r.group_A:.3f}" if tied else "–",
            f"{r.refit.B:.2f}" if r.refit else "–",
            _c(r.refit.Cmid) if r.refit and r.refit.Cmid == r.refit.Cmid else "–",
            _beats_ruler(r.fit),
        )
    print_table(table, _console())


def register(app: typer.Typer) -> None:
    app.command("fit")(fit)
    app.command("compare")(compare)
