"""Sweep specs: a YAML file naming a set of runs over one base preset (scaling axes §5, ablations §3, LOO Fig. 7).

Format::

    description: "batch size axis (§5)"        # optional, shown in the report
    base: scalerl                                 # preset every run starts from (default scalerl)
    set: [steps=40, eval.every=5]                 # overrides common to every run
    runs:                                         # either named runs, each with its own overrides ...
      bs32: [batch.prompts=4, batch.generations=8]
      bs64: [batch.prompts=8, batch.generations=8]
    grid:                                         # ... or a cartesian product, named from its values
      batch.prompts: [4, 8]                       #   -> prompts-4_generations-4, prompts-4_generations-8, ...
      batch.generations: [4, 8]

Overrides stack as ``base`` <- ``set`` <- the run's own <- ``--set`` on the command line (later wins).
Every run's config is resolved and validated when the spec is loaded, and every run still to run is built as its
run would build it (``sweep.check_runs``: the task's parameters and data files, the engine, the prompts against
the model's context) before the first one starts, so a mistake in any run stops the sweep before anything runs.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from scalerl.config import RunConfig, read_yaml, load_config
from scalerl.errors import UserError
from scalerl.presets import format_value

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


@dataclass(frozen=True)
class PlannedRun:
    """One run of a sweep: its directory name and the ``--set`` overrides on ``base`` that make its config."""

    name: str
    base: str
    overrides: tuple[str, ...]

    def config(self) -> RunConfig:
        """The run's resolved config; its ``name`` is the run's name unless an override sets one."""
        named = () if any(o.split("=", 1)[0].strip() == "name" for o in self.overrides) else (f"name={self.name}",)
        return load_config(self.base, None, [*named, *self.overrides])


class _SpecFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    description: str = ""
    base: str = "scalerl"
    set: list[str] = Field(default_factory=list)
    runs: dict[str, list[str]] | None = None
    grid: dict[str, list[Any]] | None = None


@dataclass(frozen=True)
class Sweep:
    """A loaded, validated sweep: where it came from and its runs in order."""

    source: str
    description: str
    base: str
    runs: tuple[PlannedRun, ...]

    def configs(self) -> dict[str, RunConfig]:
        return {run.name: run.config() for run in self.runs}


def _slug(value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", format_value(value)).strip("_") or "empty"


def grid_runs(grid: dict[str, list[Any]]) -> dict[str, list[str]]:
    """The cartesian product of ``grid`` as named runs: each name joins ``<field>-<value>`` with ``_``, where
    ``<field>`` is the last part of the dotted path (the whole path, dots as ``-``, when two fields share it)."""
    fields = list(grid)
    short = [f.rsplit(".", 1)[-1] for f in fields]
    labels = [s if short.count(s) == 1 else f.replace(".", "-") for f, s in zip(fields, short)]
    runs: dict[str, list[str]] = {}
    for values in itertools.product(*(grid[f] for f in fields)):
        name = "_".join(f"{label}-{_slug(v)}" for label, v in zip(labels, values))
        if name in runs:
            raise UserError(f"grid values give two runs the same name {name!r}; use 'runs:' to name them")
        runs[name] = [f"{f}={format_value(v)}" for f, v in zip(fields, values)]
    return runs


def _check_shape(spec: _SpecFile, where: str) -> dict[str, list[str]]:
    if (spec.runs is None) == (spec.grid is None):
        raise UserError(f"{where}: give exactly one of 'runs:' (named runs) or 'grid:' (field: [values])")
    if spec.grid is not None:
        if not spec.grid:
            raise UserError(f"{where}: 'grid:' is empty; give at least one field: [values]")
        for field, values in spec.grid.items():
            if not values:
                raise UserError(f"{where}: grid field {field!r} has no values")
        runs = grid_runs(spec.grid)
    else:
        runs = dict(spec.runs or {})
    if not runs:
        raise UserError(f"{where}: 'runs:' is empty; name at least one run")
    for name in runs:
        if not NAME_RE.match(name):
            raise UserError(
                f"{where}: run name {name!r} is not usable as a directory name (letters, digits, '.', '_', '+', '-')"
            )
    return runs


def make_sweep(
    runs: dict[str, list[str]], base: str = "scalerl", common: list[str] | tuple[str, ...] = (),
    extra: list[str] | tuple[str, ...] = (), source: str = "sweep", description: str = "",
) -> Sweep:
    """A sweep from named runs: each run is ``base`` <- ``common`` <- its overrides <- ``extra``. Every config is
    resolved here, so a bad override is a UserError naming the run before anything runs."""
    planned = tuple(PlannedRun(name, base, (*common, *overrides, *extra)) for name, overrides in runs.items())
    for run in planned:
        try:
            run.config()
        except UserError as exc:
            raise UserError(f"{source}: run {run.name!r}: {exc}") from None
    return Sweep(source=source, description=description, base=base, runs=planned)


def load_sweep(path: str | Path, extra: list[str] | tuple[str, ...] = ()) -> Sweep:
    """Read and validate a sweep spec file; ``extra`` overrides (``--set``) apply to every run, last."""
    where = f"sweep spec {path}"
    data = read_yaml(Path(path), "sweep spec")
    runs = data.get("runs") if isinstance(data, dict) else None
    for name in runs if isinstance(runs, dict) else ():
        if not isinstance(name, str):  # YAML read the name as a number, a date, true/false or null
            raise UserError(f"{where}: runs: the run name {name!r} is not text (YAML read it as a "
                            f"{type(name).__name__}); quote it in the spec")
    try:
        spec = _SpecFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = "unknown key (allowed: description, base, set, runs, grid)" if err["type"] == "extra_forbidden" else err["msg"]
        raise UserError(f"{where}: {loc}: {msg}") from None
    runs = _check_shape(spec, where)
    return make_sweep(runs, spec.base, spec.set, extra, source=where, description=spec.description)
