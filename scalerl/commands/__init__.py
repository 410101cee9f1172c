"""The CLI's subcommands. :func:`add_row` is the one way they put text into a rich table."""

from __future__ import annotations

from typing import Any


def add_row(table: Any, *cells: str) -> None:
    """A rich table row whose cells are shown as written: rich reads text such as ``[open, 0.62]`` (an interval,
    a run's name, a config value, an error message) as a markup tag and prints nothing, so every cell is escaped."""
    from rich.markup import escape

    table.add_row(*(escape(c) for c in cells))
