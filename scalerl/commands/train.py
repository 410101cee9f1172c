"""``scalerl train`` and ``scalerl demo``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer
from pydantic import BaseModel, ConfigDict, Field

from scalerl.errors import UserError, check_number, check_writable_dir

DEMO_OUT = "runs/demo"
# The demo's RL budget is a step count, so the machine's load changes its wall time, not its length (the local
# backend's in-flight weight updates depend on timing, so two runs can differ by a few thousandths per evaluation);
# the time cap is only a safety net (docs/experiments.md).
DEMO_STEPS = 130
DEMO_SAFETY_MINUTES = 20.0
# what the demo checks of itself at the end (issue #11): A identified with a 95% interval at most this wide, and
# the fit on the first half of the compute predicting the last evaluation within this much
DEMO_MAX_CI_WIDTH = 0.15
DEMO_MAX_HALF_ERROR = 0.03


def _identification_checks(fit: dict | None, whose: str) -> list[tuple[bool, str]]:
    """A identified, and its 95% interval at most DEMO_MAX_CI_WIDTH wide (``whose``: "" or "<domain>: ")."""
    if fit is None:
        return [(False, f"{whose}A identified: too few evaluations to fit")]
    lo, hi = fit["A_ci"] or (None, None)
    width = hi - lo if lo is not None and hi is not None else float("inf")
    return [
        (bool(fit["identified"]), f"{whose}A identified (the run passed Cmid and the interval on A is closed)"),
        (bool(fit["identified"]) and width <= DEMO_MAX_CI_WIDTH,
         f"{whose}95% interval on A {width:.3f} wide (at most {DEMO_MAX_CI_WIDTH})"),
    ]


def demo_checks(summary: dict) -> list[tuple[bool, str]]:
    """(passed, what) for each of the demo's self-checks; empty when there is no fit at all. With a task mixture
    every domain's own fit (§5: one sigmoid per domain) is checked as the overall one is."""
    fit, check = summary.get("fit"), summary.get("extrapolation") or {}
    if fit is None:
        return []
    out = _identification_checks(fit, "")
    if "end_pred" in check:
        err = abs(check["end_pred"] - check["end_true"])
        out.append((err <= DEMO_MAX_HALF_ERROR, f"half-budget forecast of the last evaluation off by {err:.3f} "
                    f"(at most {DEMO_MAX_HALF_ERROR})"))
    else:
        out.append((False, "half-budget forecast: not possible"))
    for domain, domain_fit in (summary.get("domains") or {}).items():
        out += _identification_checks(domain_fit, f"{domain}: ")
    return out


class DemoSpec(BaseModel):
    """A preset's ``demo:`` section (configs/*.yaml): what ``scalerl demo --preset NAME`` checks of itself beyond
    the default checks. Presets without one get the default demo's checks."""

    model_config = ConfigDict(extra="forbid")

    # the validation pass rate must rise by at least this from step 0 to the end (issue 34); None: not checked
    min_rise: float | None = Field(None, gt=0, le=2)
    # False: A's identification and the half-budget forecast are printed as notes, not required (a short run on a
    # real model may not pass Cmid in its budget, and then A is a bound: forecast.describe_A says why)
    fit_required: bool = True


def demo_spec(preset: str) -> DemoSpec:
    """The demo's checks for ``preset`` (its ``demo:`` section; a leave-one-out variant has none)."""
    from pydantic import ValidationError

    from scalerl.config import preset_demo

    if preset.startswith("loo-"):
        return DemoSpec()
    try:
        return DemoSpec.model_validate(preset_demo(preset))
    except ValidationError as exc:
        err = exc.errors()[0]
        raise UserError(f"preset {preset!r}: demo.{'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def rise_check(out: Path, min_rise: float) -> tuple[bool, str]:
    """(passed, what): the validation pass rate rose by at least ``min_rise`` from the first evaluation (step 0) to
    the last, with one evaluation's standard error (at most sqrt(p(1 - p) / samples): the prompts are fixed, only
    the sampling varies) beside it."""
    from scalerl.runlog import read_metrics

    evals = [r for r in read_metrics(out) if "val/pass_rate" in r]
    if len(evals) < 2:
        return False, f"validation pass rate up by at least {min_rise}: fewer than two evaluations"
    first, last = evals[0], evals[-1]
    rise = last["val/pass_rate"] - first["val/pass_rate"]
    se = max((r["val/pass_rate"] * (1 - r["val/pass_rate"]) / max(r.get("val/n", 1.0), 1.0)) ** 0.5
             for r in (first, last))
    return rise >= min_rise, (
        f"validation pass rate up {rise:+.3f}, from {first['val/pass_rate']:.3f} (step {first['step']}) to "
        f"{last['val/pass_rate']:.3f} (step {last['step']}); at least {min_rise} (one evaluation's standard "
        f"error <= {se:.3f})"
    )


def config_from_cli(preset: str | None, config: Path | None, sets: list[str]):
    """A preset or leave-one-out variant name (``loo-dapo`` ...), then ``--config``, then ``--set``."""
    from scalerl.config import load_config

    if preset and preset.startswith("loo-"):
        from scalerl.presets import loo_variants

        variants = loo_variants("scalerl")
        if preset not in variants:
            raise UserError(f"unknown leave-one-out variant {preset!r}; choose one of: {', '.join(variants)}")
        return load_config("scalerl", config, [*variants[preset], *sets])
    return load_config(preset, config, sets)


def resumed_config(out: Path, sets: list[str]):
    """``--resume``: the run's own config.yaml, with ``--set`` on top (the runner allows budget and backend
    changes only)."""
    from scalerl.config import read_yaml, apply_overrides, build_config

    path = out / "config.yaml"
    if not path.exists():
        raise UserError(f"--resume: {out} holds no run (no config.yaml); start it without --resume")
    return build_config(apply_overrides(read_yaml(path), sets), f"{path} + --set")


def backend_overrides(backend: str | None, address: str | None) -> list[str]:
    """``--backend B`` is ``--set backend=B``; ``--address A`` is ``--set ray.address=A`` (docs/scale-out.md)."""
    sets = [f"backend={backend}"] if backend else []
    if address:
        sets.append(f"ray.address={json.dumps(address)}")  # quoted: "10.0.0.1:6379" must stay a string
    return sets


def _fit_line(fit: dict, unit: str = "") -> str:
    """A fit of ``fit.json`` in one line (rich markup): A (yellow while not identified), B, Cmid, R0."""
    from scalerl.forecast import describe_fit, describe_shape

    asymptote = describe_fit(fit) + (" (95% interval)" if fit["identified"] else "")
    if not fit["identified"]:
        asymptote = f"[yellow]{asymptote}[/yellow]"
    return f"{asymptote}, {describe_shape(fit, unit)}"


def print_summary(out: Path, summary: dict) -> None:
    """The run's outcome on stdout: where the files are and the fitted forecast."""
    from rich.markup import escape

    from scalerl.forecast import describe_trust
    from scalerl.progress import make_console

    console = make_console()
    fit = summary.get("fit")
    console.print(f"run directory: {out}")
    if summary.get("stopped"):
        console.print(f"stopped before the budget (--stop-when): {summary['stopped']}; --resume continues it")
    if fit is None:
        console.print(f"no forecast: {summary.get('points', 0)} evaluation points are too few to fit the curve")
        console.print(f"wrote the run card {out / 'README.md'}")
        return
    console.print(f"forecast: {_fit_line(fit, ' ' + fit['x'])}")
    console.print(f"trust: {escape(describe_trust(fit))}")  # how the forecast did on the run's own past (#26)
    for domain, domain_fit in (summary.get("domains") or {}).items():
        console.print(f"  domain {domain}: {_fit_line(domain_fit) if domain_fit else 'too few evaluations to fit'}")
    check = summary.get("extrapolation") or {}
    if "mean_abs_err" in check:
        covers = {True: "the half fit's interval on A covers the full run's A",
                  False: "the half fit's interval on A misses the full run's A",
                  None: "no interval check: the half fit or the full run has not identified A"}[check["covers_full_A"]]
        console.print(
            f"extrapolation check (§4, §5): fitted on the first half of the compute, the curve predicts the second half "
            f"within mean |error| {check['mean_abs_err']:.3f}, max {check['max_abs_err']:.3f} ({check['n']} "
            f"evaluations; last: predicted {check['end_pred']:.3f}, observed {check['end_true']:.3f}); {covers}"
        )
    elif check:
        console.print(f"extrapolation check (§4, §5): not possible: {check['note']}")
    console.print(f"wrote {out / 'fit.json'}, {out / 'curve.png'} and the run card {out / 'README.md'}")


def followed() -> bool:
    """On a torchrun rank other than 0, take part in rank 0's run and return True: rank 0 alone reads the
    options, owns the run directory and reports (docs/scale-out.md)."""
    from scalerl.pipeline.ranks import follow, is_follower

    if not is_follower():
        return False
    follow()
    return True


def register(app: typer.Typer) -> None:
    @app.command()
    def train(
        out: Path = typer.Option(..., "--out", help="Run directory (config.yaml, metrics.jsonl, checkpoints/, ...)."),
        preset: Optional[str] = typer.Option(None, "--preset", help="Preset name (see `scalerl presets`); default scalerl."),
        config: Optional[Path] = typer.Option(None, "--config", help="YAML file with fields over the preset."),
        set_: List[str] = typer.Option([], "--set", help="Override a field: --set algo.loss.name=dapo (repeatable)."),
        backend: Optional[str] = typer.Option(None, "--backend", help="inline | local | ray (same as --set backend=...)."),
        address: Optional[str] = typer.Option(
            None, "--address", help="Ray cluster to join with --backend ray: 'auto' or host:port (default: a local Ray)."
        ),
        resume: bool = typer.Option(False, "--resume", help="Continue the run in --out from its latest checkpoint."),
        stop_when: List[str] = typer.Option(
            [], "--stop-when", help="Stop before the budget when a condition holds after an evaluation: 'gain<0.005' "
            "(the forecast says the rest buys less), 'reward>=0.8' (target reached), 'reach<0.8' (target out of "
            "the forecast interval's reach); several: 'gain<0.005,reward>=0.8' (docs/experiments.md)."),
        quiet: bool = typer.Option(False, "--quiet", help="No progress display."),
    ) -> None:
        """Train with the ScaleRL recipe (or any preset / ablation) and forecast where the run will end."""
        if followed():
            return
        sets = [*set_, *backend_overrides(backend, address)]
        rule = None
        if stop_when:
            from scalerl.experiments.stopping import StopWhen, parse

            rule = StopWhen(tuple(parse(stop_when)))
        check_writable_dir(out, "--out")
        if resume:
            refused = [flag for flag, given in (("--preset", preset), ("--config", config)) if given is not None]
            if refused:
                raise UserError(
                    f"--resume continues the run with its own config.yaml and will not apply {' or '.join(refused)}; "
                    "drop it (only --set of budget/backend fields may change), or start a new run without --resume"
                )
        cfg = resumed_config(out, sets) if resume else config_from_cli(preset, config, sets)
        if address and cfg.backend != "ray":
            raise UserError(f"--address joins a Ray cluster, but the backend is {cfg.backend!r}; add --backend ray")
        from scalerl.pipeline.runner import train as run_train

        summary = run_train(cfg, out, resume=resume, show_progress=not quiet, stop_rule=rule)
        print_summary(out, summary)

    @app.command()
    def demo(
        out: Path = typer.Option(Path(DEMO_OUT), "--out", help="Run directory."),
        preset: str = typer.Option(
            "scalerl", "--preset",
            help="Preset to run (see `scalerl presets`), e.g. multitask (one fit per domain), smollm2 (a real model).",
        ),
        steps: Optional[int] = typer.Option(
            None, "--steps", min=1, help=f"RL budget in optimizer steps (default {DEMO_STEPS}, or the preset's own)."
        ),
        minutes: Optional[float] = typer.Option(
            None, "--minutes",
            help=f"Cap on the RL phase's wall clock (default {DEMO_SAFETY_MINUTES}, or the preset's own max_minutes).",
        ),
        set_: List[str] = typer.Option([], "--set", help="Override a field of the default config."),
        quiet: bool = typer.Option(False, "--quiet", help="No progress display."),
    ) -> None:
        """The default ScaleRL run on the built-in task: warm-up, RL with live forecast, then fit.json + curve.png,
        and the run's checks of itself (A identified, its interval narrow, the half-budget forecast close; a preset's
        ``demo:`` section may add the rise of the pass rate and make the fit's checks notes, as smollm2 does)."""
        if followed():
            return
        import shutil

        from scalerl.pipeline.runner import train as run_train

        check_number("--minutes", minutes, low=0, low_open=True)  # 0 is no cap to give, not "the default"
        check_writable_dir(out, "--out")
        spec = demo_spec(preset)
        cfg = config_from_cli(preset, None, list(set_))
        budget = []  # a preset that states its budget keeps it unless the option is given
        if minutes is not None or "max_minutes" not in cfg.model_fields_set:
            budget.append(f"max_minutes={DEMO_SAFETY_MINUTES if minutes is None else minutes}")
        if steps is not None or "steps" not in cfg.model_fields_set:
            budget.append(f"steps={DEMO_STEPS if steps is None else steps}")
        cfg = config_from_cli(preset, None, [*budget, *set_])
        if out == Path(DEMO_OUT) and out.exists():
            shutil.rmtree(out)  # the default demo directory is scratch; a user-given --out is never deleted
        summary = run_train(cfg, out, resume=False, show_progress=not quiet)
        print_summary(out, summary)
        from scalerl.progress import make_console

        console = make_console()
        fit_checks = demo_checks(summary) or [(False, "the run produced no fit to check (too few evaluations)")]
        checks = [*fit_checks, rise_check(out, spec.min_rise)] if spec.min_rise else fit_checks
        if not spec.fit_required:  # shown as notes: this preset's budget need not pin the fit
            for ok, what in fit_checks:
                console.print(f"note: {'pass' if ok else 'not yet'}  {what} (not required by preset {preset})")
            checks = checks[len(fit_checks):]
        for ok, what in checks:
            console.print(f"check: {'[green]pass[/green]' if ok else '[red]FAIL[/red]'}  {what}")
        failed = sum(not ok for ok, _ in checks)
        if failed:  # a script or CI must notice a demo that did not show what it promises (issue 31)
            print(f"demo: {failed} of {len(checks)} checks failed", file=sys.stderr)
            raise typer.Exit(1)
