"""Figures in the paper's style (Fig. 1, 2, 7): reward against log compute with the fitted Eq. 1 curves, and the
linearised form ``log F(R)`` against ``log C`` whose slope is B (Fig. 7).

Measured points inside the fit window are filled; points excluded from the fit (the early regime) and held-out
points after the window are hollow. The fitted curve is solid over the window and dashed where it extrapolates;
an identified asymptote A is a dotted line, the interval on A a band, and A, B, Cmid are in the legend. Figures are drawn
on a bare ``matplotlib.figure.Figure`` (Agg canvas, no pyplot state) and written atomically.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from scalerl.atomic import atomic_path
from scalerl.curves.fit import FitResult, format_compute
from scalerl.curves.readers import run_location
from scalerl.curves.sigmoid import linearised
from scalerl.errors import UserError

FORMATS = ("png", "svg", "pdf")


def _A_text(f: FitResult) -> str:
    """``=0.705`` when A is identified, else ``≥ 0.611`` (:meth:`FitResult.format_A`: an unidentified A is where
    the search stopped, never a value to print)."""
    text = f.format_A()
    return ("=" if f.identified else "" if text.startswith("≥") else " ") + text  # "A not bounded", not "Anot …"


def check_figure_path(path: str | Path) -> str:
    """The figure format from the file name; a UserError if it is not one matplotlib writes here."""
    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise UserError(f"{path}: a figure must be named .png, .svg or .pdf")
    return fmt


def short_name(source: str) -> str:
    """A label for a run's source (:func:`scalerl.curves.readers.run_location`): the run's name in a file of
    several, the run's folder's name (which may hold dots: "Qwen2.5-0.5B-grpo"), else the file's stem."""
    path, run = run_location(source)
    if run is not None:
        return run
    p = Path(path)
    folder = path != source or p.is_dir()  # a run's folder, whose name may hold dots
    return (p.name if folder or not p.suffix else p.stem) or source


def display_names(sources: Sequence[str]) -> list[str]:
    """:func:`short_name` of each source, made longer where two would read alike (the same run name in two W&B
    exports, runs of one name in two sweeps, two TensorBoard folders of one output directory): the run's path from
    the folder the alike ones share, with its run; the source's own path where even those are alike."""
    names = [short_name(s) for s in sources]
    for longer in (run_location, lambda s: (os.path.abspath(s), None)):
        alike = [i for i, n in enumerate(names) if names.count(n) > 1]
        if not alike:
            break
        where = {i: longer(sources[i]) for i in alike}
        root = os.path.commonpath([os.path.dirname(path) for path, _ in where.values()])
        for i, (path, run) in where.items():
            rel = os.path.relpath(path, root)
            names[i] = f"{rel} [{run}]" if run is not None else rel
    return names


def _as_written(draw: Callable[..., None]) -> Callable[..., None]:
    """``draw`` with matplotlib's math parsing off: a run's name is drawn as written (a W&B run named "cost $x^"
    stopped the figure with a parse error, "budget $10$" was drawn in italics), as the sweep report draws its own."""

    @functools.wraps(draw)
    def literal(*args: Any, **kwargs: Any) -> None:
        import matplotlib

        with matplotlib.rc_context({"text.parse_math": False}):
            draw(*args, **kwargs)
    return literal


def _colors(n: int) -> list[Any]:
    """A colour per curve: matplotlib's ten cycle colours, or, for more curves, as many taken along a colour map (the
    cycle repeated every ten: a sweep of 60 runs had six curves per colour)."""
    if n <= 10:
        return [f"C{i}" for i in range(n)]
    from matplotlib import colormaps

    return [colormaps["turbo"](v) for v in np.linspace(0.05, 0.95, n)]


def _legend(ax: Any, n: int, fontsize: float) -> None:
    """The legend: inside the axes for a few curves, beside them in small type for a sweep, none past
    :data:`MAX_LEGEND` curves (the table names them)."""
    if n <= 10:
        ax.legend(fontsize=fontsize, loc="upper left")
    elif n <= MAX_LEGEND:
        ax.legend(fontsize=5, loc="upper left", bbox_to_anchor=(1.01, 1.0), ncol=1 + (n - 1) // 25)
    else:
        ax.set_title(f"{ax.get_title()}\n{n} runs: too many for a legend, the table names them", fontsize=8)


MAX_LEGEND = 50


def _save(fig, path: str | Path) -> None:  # noqa: ANN001 - matplotlib Figure
    fmt = check_figure_path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=fmt, dpi=130, bbox_inches="tight")


@_as_written
def plot_fits(
    fits: Sequence[FitResult],
    path: str | Path,
    *,
    title: str | None = None,
    extrapolate_to: float | None = None,
    labels: Sequence[str] | None = None,
) -> None:
    """Overlay measured points and fitted curves of ``fits`` on a log-compute axis and write the figure.

    The dashed extrapolation runs to ``extrapolate_to`` × the largest measured compute (default: 1.5×, or
    further to include every requested prediction)."""
    from matplotlib.figure import Figure

    check_figure_path(path)
    fig = Figure(figsize=(7.5, 4.8))
    ax = fig.add_subplot()
    colors = _colors(len(fits))
    names = list(labels) if labels is not None else display_names([f.source for f in fits])
    for k, (f, color) in enumerate(zip(fits, colors)):
        name = names[k]
        pos = f.x > 0
        filled = f.in_window & pos
        ax.scatter(f.x[filled], f.y[filled], s=14, color=color, zorder=3)
        hollow = ~f.in_window & pos
        ax.scatter(f.x[hollow], f.y[hollow], s=16, facecolors="none", edgecolors=color, zorder=3)
        x_max = float(f.x.max())
        x_end = x_max * (extrapolate_to or 1.5)
        x_end = max([x_end] + [c for c, _ in f.predictions])
        lo, hi = f.fit_window
        x_min = float(f.x[pos].min())
        inside = np.geomspace(lo, hi, 200)
        legend = f"{name}: A{_A_text(f)} {f.format_interval()}, B={f.B:.2f}, Cmid={format_compute(f.Cmid)}"
        if not f.identified:
            legend += " (A not identified)"
        ax.plot(inside, f.predict(inside), color=color, lw=1.8, label=legend)
        for a, b in ((x_min, lo), (hi, x_end)):
            if b > a:
                seg = np.geomspace(a, b, 120)
                ax.plot(seg, f.predict(seg), color=color, lw=1.4, ls="--")
        if f.identified:  # an unidentified A is where the search stopped, not a level to draw
            ax.axhline(f.A, color=color, lw=0.8, ls=":")
        if f.A_ci is not None and not f.A_fixed and None not in f.A_ci:
            ax.axhspan(f.A_ci[0], f.A_ci[1], color=color, alpha=0.10, lw=0)
        for c, r in f.predictions:
            ax.plot([c], [r], marker="*", ms=10, color=color, zorder=4)
    ax.set_xscale("log")
    ax.set_xlabel(fits[0].x_name if fits else "compute")
    ax.set_ylabel(fits[0].y_name if fits else "reward")
    ax.grid(True, which="both", alpha=0.25)
    if fits:  # frame the data and the identified asymptotes (an unidentified A, often the bound 1, is not drawn and
        # must not squash the curves); an open band simply runs off the top
        shown = np.concatenate([f.y[f.x > 0] for f in fits] + [[f.A for f in fits if f.identified]])
        pad = 0.08 * (float(np.ptp(shown)) or 1.0)
        ax.set_ylim(float(shown.min()) - pad, float(shown.max()) + 2 * pad)
    if title:
        ax.set_title(title)
    _legend(ax, len(fits), 7.5)
    _save(fig, path)


@_as_written
def plot_linearised(fits: Sequence[FitResult], path: str | Path, *, title: str | None = None) -> None:
    """Fig. 7: ``log F(R)`` against ``log C`` for each fit (pass fits refitted at a common A, as the paper
    does for its leave-one-out runs); each fitted curve is the line ``F = C^B``, so steeper is more efficient."""
    from matplotlib.figure import Figure

    check_figure_path(path)
    fig = Figure(figsize=(6.5, 4.8))
    ax = fig.add_subplot()
    names = display_names([f.source for f in fits])
    colors = _colors(len(fits))
    for i, f in enumerate(fits):
        color = colors[i]
        m = f.in_window & (f.x > 0)
        F = linearised(f.y[m], f.R0, f.A, f.B, f.Cmid)
        ok = np.isfinite(F) & (F > 0)
        ax.scatter(f.x[m][ok], F[ok], s=12, color=color, zorder=3)
        c = np.geomspace(*f.fit_window, 50)
        ax.plot(c, c**f.B, color=color, lw=1.6, label=f"{names[i]}: B={f.B:.2f} (A{_A_text(f)})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"{fits[0].x_name if fits else 'compute'} (log)")
    ax.set_ylabel("F(R) = Cmid^B / ((A−R0)/(R−R0) − 1)")
    ax.grid(True, which="both", alpha=0.25)
    ax.set_title(title or "Linearised Eq. 1 at a common A: slope = B")
    _legend(ax, len(fits), 8)
    _save(fig, path)
