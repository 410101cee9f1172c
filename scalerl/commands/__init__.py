"""The CLI's subcommands. :func:`add_row` is the one way they put text into a rich table, :func:`print_table`
the one way they print it."""

from __future__ import annotations

from typing import Any


def add_row(table: Any, *cells: str) -> None:
    """A rich table row whose cells are shown as written: rich reads text such as ``[open, 0.62]`` (an interval,
    a run's name, a config value, an error message) as a markup tag and prints nothing, so every cell is escaped,
    and a terminal control character in one (an escape sequence in a file's column name) is shown, not obeyed."""
    from rich.markup import escape

    from scalerl.errors import printable

    table.add_row(*(escape(printable(c)) for c in cells))  # and no terminal control sequence from a file acts


MAX_TABLE_WIDTH = 300  # a table wider than its console is widened to at most this, unless its values need more


def print_table(table: Any, console: Any = None) -> None:
    """Print a rich table with every cell whole. On a console narrower than the table's narrowest layout (a terminal
    of 80 or 150 columns against a dozen columns of numbers) rich cut cells to "…", and the cut ones were the values
    (``A`` printed as ``≥ 0.…``); the console is widened to that layout instead, so a terminal wraps the lines and
    a log keeps them whole. ``console``: :func:`scalerl.progress.make_console`'s by default."""
    from rich.measure import Measurement

    from scalerl.progress import make_console

    console = console or make_console(highlight=False)
    fits = Measurement.get(console, console.options.update_width(1 << 16), table)
    width = console.width
    if fits.minimum > width:  # widened anyway: as far as the whole cells need (names unfolded), within reason
        console.width = max(fits.minimum, min(fits.maximum, MAX_TABLE_WIDTH))
    try:
        console.print(table, soft_wrap=False)  # a pipe console soft-wraps, which left titles uncentred
    finally:
        console.width = width  # what is printed after the table wraps at the terminal's width again
