"""``scalerl sweep``, ``scalerl loo`` and ``scalerl report``: many runs, their comparison, one offline HTML file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer

from scalerl.errors import UserError, check_number, check_writable_dir, check_writable_file

if TYPE_CHECKING:
    from scalerl.experiments.spec import Sweep

SET_HELP = "Override a field in every run: --set steps=20 (repeatable; applied last)."
JOBS_HELP = "Runs at a time on this machine, each in its own process with cores/jobs torch threads (default 1)."
PRUNE_HELP = ("Run in rungs of compute (1/8, 1/4, 1/2, 1 of each run's max_device_hours) and stop a run once its "
              "forecast cannot come within --margin of the best (docs/experiments.md).")
MARGIN_HELP = "With --prune: how far below the leader's lower end a run's outlook must lie to stop it (the paper: 0.02)."


def _print_records(records: list, out: Path) -> None:
    from rich.table import Table

    from scalerl.commands import add_row, print_table

    table = Table(title=f"sweep in {out} (index: {out / 'sweep.json'})")
    for col in ("run", "status", "this time", "A", "B", "Cmid"):
        table.add_column(col, overflow="fold")
    for rec in records:
        fit = (rec.summary or {}).get("fit") or {}
        num = lambda k, f: format(fit[k], f) if isinstance(fit.get(k), (int, float)) else "-"  # noqa: E731
        status = rec.status if rec.error is None else f"{rec.status}: {rec.error}"
        add_row(table, rec.name, status, rec.action, num("A", ".3f"), num("B", ".2f"), num("Cmid", ".3g"))
    print_table(table)


def _run(plan, out: Path, jobs: int, quiet: bool, prune: bool, margin: float) -> list:
    """The sweep's runs, pruned (``--prune``: in rungs of compute, what pruning did printed) or not."""
    from scalerl.experiments.sweep import run_parallel

    if not prune:
        return run_parallel(plan, out, jobs, show_progress=not quiet)
    from scalerl.experiments.prune_sweep import describe, run_pruned

    records, state = run_pruned(plan, out, jobs, margin=margin, show_progress=not quiet)
    for line in describe(state):
        typer.echo(line)
    return records


def check_report_path(report: Path, flag: str) -> None:
    """Before any run starts: ``report`` can be written as the HTML report (a file named .html or .htm, in a
    writable place), so that a long sweep never ends on a report it cannot write."""
    if report.suffix.lower() not in (".html", ".htm"):
        raise UserError(f"{flag} {report}: the report is an HTML file; give a name ending in .html")
    check_writable_file(report, flag)


def check_plan_paths(plan: "Sweep", out: Path, report: Optional[Path], flag: str) -> None:
    """Before any run starts: each run's directory ``out/<name>`` is a usable path (names within the file
    system's limits), and the report is not the sweep directory or one of its run directories."""
    for run in plan.runs:
        check_writable_dir(out / run.name, f"run {run.name[:40]!r}: directory")
    if report is None:
        return
    taken = {os.path.abspath(out), *(os.path.abspath(out / run.name) for run in plan.runs)}
    if os.path.abspath(report) in taken:
        raise UserError(f"{flag} {report} is the sweep directory or one of its run directories; give another file")


def _finish(records: list, out: Path, report: Optional[Path], quiet: bool) -> None:
    """Summary table, the report if asked for, and exit code 1 when a run failed."""
    from scalerl.experiments.report import write_report

    _print_records(records, out)
    failed = [r.name for r in records if r.status == "failed"]
    if report is not None:
        try:
            write_report(out, report, quiet=quiet)
        except UserError as exc:
            if not failed:
                raise
            # the failed runs are still what this sweep must say (exit code 1), not only why no report came of it
            typer.echo(f"error: no report: {exc}", err=True)
        else:
            typer.echo(f"wrote {report}")
    if failed:
        typer.echo(f"error: {len(failed)} run(s) failed: {', '.join(failed)} (tracebacks in <run>/sweep_error.log); "
                   "run the same command again to retry them", err=True)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    @app.command()
    def sweep(
        spec: Path = typer.Argument(..., help="Sweep spec (YAML): base, set, and runs or grid; see docs/experiments.md."),
        out: Path = typer.Option(..., "--out", help="Sweep directory: one run directory per run, plus sweep.json."),
        set_: List[str] = typer.Option([], "--set", help=SET_HELP),
        report: Optional[Path] = typer.Option(None, "--report", help="Also write the HTML report here at the end."),
        quiet: bool = typer.Option(False, "--quiet", help="No progress display."),
        jobs: int = typer.Option(1, "--jobs", help=JOBS_HELP),
        prune: bool = typer.Option(False, "--prune", help=PRUNE_HELP),
        margin: float = typer.Option(0.02, "--margin", help=MARGIN_HELP),
    ) -> None:
        """Run every run of a spec (one after another, or --jobs at a time); finished runs are skipped,
        interrupted ones resumed."""
        from scalerl.experiments.spec import load_sweep

        check_number("--jobs", jobs, low=1)
        check_number("--margin", margin, low=0)
        check_writable_dir(out, "--out")
        if report is not None:
            check_report_path(report, "--report")
        plan = load_sweep(spec, set_)
        check_plan_paths(plan, out, report, "--report")
        _finish(_run(plan, out, jobs, quiet, prune, margin), out, report, quiet)

    @app.command()
    def loo(
        out: Path = typer.Option(..., "--out", help="Sweep directory for the base and its LOO variants."),
        base: str = typer.Option("scalerl", "--base", help="Preset whose components are left out one at a time."),
        budget_steps: Optional[int] = typer.Option(None, "--budget-steps", help="Training steps per run."),
        minutes: Optional[float] = typer.Option(None, "--minutes", help="Wall-clock minutes per run."),
        budget_hours: Optional[float] = typer.Option(
            None, "--budget-hours", help="Compute per run in device-hours (the curves' x-axis); needed by --prune."),
        only: List[str] = typer.Option([], "--only", help="Run only these variants (repeatable), e.g. --only loo-dapo."),
        set_: List[str] = typer.Option([], "--set", help=SET_HELP),
        report: Optional[Path] = typer.Option(None, "--report", help="Report file (default OUT/report.html)."),
        quiet: bool = typer.Option(False, "--quiet", help="No progress display."),
        jobs: int = typer.Option(1, "--jobs", help=JOBS_HELP),
        prune: bool = typer.Option(False, "--prune", help=PRUNE_HELP),
        margin: float = typer.Option(0.02, "--margin", help=MARGIN_HELP),
    ) -> None:
        """Leave-one-out ablations (§4, Fig. 7): the base and each variant on one budget, fit on the first half of
        each run's compute, checked on the second half, ranked by the paper's rules in an HTML report."""
        from scalerl.experiments.loo import loo_sweep

        check_number("--jobs", jobs, low=1)
        check_number("--margin", margin, low=0)
        check_writable_dir(out, "--out")
        check_report_path(report or out / "report.html", "--report")
        plan = loo_sweep(base, set_, budget_steps, minutes, only, budget_hours)
        check_plan_paths(plan, out, report or out / "report.html", "--report")
        _finish(_run(plan, out, jobs, quiet, prune, margin), out, report or out / "report.html", quiet)

    @app.command("report")
    def report_cmd(
        run_dir: Path = typer.Argument(..., metavar="DIR", help="A sweep directory (one run per subdirectory) or one run."),
        out: Path = typer.Option(..., "--out", help="HTML file to write (self-contained, works offline)."),
        margin: float = typer.Option(0.02, "--margin", help="Asymptotes closer than this tie (the paper: 0.02)."),
        quiet: bool = typer.Option(False, "--quiet", help="No summary on the terminal."),
        unpruned: Optional[Path] = typer.Option(
            None, "--unpruned", help="For a pruned sweep: the unpruned sweep of the same spec, to show what each "
            "stopped run would have reached and the compute it got there."),
    ) -> None:
        """One offline HTML file: fits and extrapolations, held-out check, ranking, slopes, diagnostics."""
        from scalerl.experiments.report import write_report

        check_number("--margin", margin, low=0)
        check_writable_file(out, "--out")
        write_report(run_dir, out, margin=margin, quiet=quiet, unpruned=unpruned)
        typer.echo(f"wrote {out}")
