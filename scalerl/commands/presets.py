"""``scalerl presets``: the recipes of App. A.16 and how they differ from ScaleRL, and the leave-one-out variants
of Fig. 7; ``--show NAME`` prints one fully resolved config as YAML."""

from __future__ import annotations

from typing import Any, Optional

import typer


def _fmt(value: Any) -> str:
    """A diff value for the table; a registry section reads ``dapo {eps_low: 0.2, eps_high: 0.26}``."""
    from scalerl.presets import format_value

    if isinstance(value, dict) and "name" in value:
        params = value.get("params") or {}
        return f"{value['name']} {format_value(params)}" if params else str(value["name"])
    return value if isinstance(value, str) else format_value(value)


def presets(
    show: Optional[str] = typer.Option(
        None, "--show", metavar="NAME", help="Print the fully resolved YAML of one preset or LOO variant."
    ),
    base: str = typer.Option("scalerl", "--base", help="Preset the differences and LOO variants refer to."),
) -> None:
    """List the presets (and how each differs from the base) and the leave-one-out variants."""
    from rich.console import Console
    from rich.table import Table

    from scalerl.commands import add_row, print_table
    from scalerl.config import to_yaml
    from scalerl.presets import LOO_COMPONENTS, config_diff, list_presets, loo_variants, resolve_preset, resolve_variant

    base_cfg = resolve_preset(base)  # an unknown --base is refused with --show too, not ignored
    if show is not None:
        typer.echo(to_yaml(resolve_variant(show, base)), nl=False)
        return

    table = Table(title=f"Presets (configs/*.yaml); differences from {base}", show_lines=True)
    table.add_column("preset", style="bold", no_wrap=True)
    table.add_column("description", overflow="fold")
    table.add_column(f"field: {base} -> preset", overflow="fold")
    for name, description in list_presets():
        diff = config_diff(base_cfg, resolve_preset(name))
        lines = [f"{path}: {_fmt(a)} -> {_fmt(b)}" for path, a, b in diff]
        add_row(table, name, description, "\n".join(lines) or "(same)")

    loo = Table(title=f"Leave-one-out variants of {base} (§4, Fig. 7): scalerl loo --base {base}", show_lines=True)
    loo.add_column("variant", style="bold", no_wrap=True)
    loo.add_column("reverts", overflow="fold")
    loo.add_column("--set overrides", overflow="fold")
    for name, overrides in loo_variants(base).items():
        path, donor = LOO_COMPONENTS[name]
        add_row(loo, name, f"{path} (as in {donor})", "\n".join(overrides))

    console = Console()  # the terminal's width (80 in a pipe): the descriptions wrap, no value is cut
    print_table(table, console)
    print_table(loo, console)


def register(app: typer.Typer) -> None:
    app.command("presets")(presets)
