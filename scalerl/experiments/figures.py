"""The report's own figure (per-run training diagnostics over time) and PNG embedding for offline HTML.

The fit overlay and the linearised-slope figure come from ``scalerl.curves``; this module only draws what the
curves package does not know about: the signals the paper says to watch during a run (App. A.15 truncation rate,
§3.1 staleness, Fig. 6a zero-variance fraction, Fig. 6b retired prompts, App. A.12 entropy).
"""

from __future__ import annotations

import base64
import io
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

TRUNCATION_ALARM = 0.10  # App. A.6, A.15: above 10-15% truncations, training destabilises

# (title, [(metrics key, line style)], reference line or None)
PANELS: tuple[tuple[str, tuple[tuple[str, str], ...], float | None], ...] = (
    ("validation pass rate", (("val/pass_rate", "-o"),), None),
    ("truncation rate (App. A.15)", (("train/truncation_rate", "-"),), TRUNCATION_ALARM),
    ("staleness: mean ─, max ┄ (§3.1)", (("train/staleness_mean", "-"), ("train/staleness_max", ":")), None),
    ("zero-variance fraction (§3.2, Fig. 6a)", (("train/zero_var_frac", "-"),), None),
    ("retired prompts (§3.2, Fig. 6b)", (("curriculum/retired", "-"),), None),
    ("policy entropy (App. A.12)", (("train/entropy", "-"),), None),
)
DIAGNOSTIC_KEYS = tuple(key for _, lines, _ in PANELS for key, _ in lines)


def png_data_uri(draw: Callable[[Path], Any]) -> str:
    """Run ``draw(path)`` (anything that writes a PNG to ``path``) and return the image as a data URI."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "figure.png"
        draw(path)
        data = path.read_bytes()
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def figure_data_uri(fig: Any) -> str:
    """A matplotlib figure as a PNG data URI (the figure is closed)."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def diagnostics_figure(runs: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]) -> Any:
    """One panel per diagnostic, one line per run (colours match across panels), against training step.

    ``runs`` maps a run's name to ``{metrics key: (steps, values)}``; a key a run did not log is absent."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (title, lines, ref) in zip(axes.flat, PANELS):
        drawn = False
        for i, (name, series) in enumerate(runs.items()):
            for key, style in lines:
                steps, values = series.get(key, (np.empty(0), np.empty(0)))
                if steps.size:
                    ax.plot(steps, values, style, color=colours[i % len(colours)], ms=3, lw=1.2)
                    drawn = True
        if ref is not None:
            ax.axhline(ref, color="red", ls="--", lw=0.8)
        if not drawn:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="grey")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step", fontsize=9)
        ax.grid(alpha=0.3)
    handles = [Line2D([], [], color=colours[i % len(colours)], label=name) for i, name in enumerate(runs)]
    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def breakdown_figure(runs: dict[str, Any]) -> Any:
    """Per-domain curves side by side (§5: one panel per domain, each run's points and fitted Eq. 1 curve), and
    a last panel with each run's downstream sets (dashed) beside its overall validation pass rate (solid).

    ``runs`` maps a run's name to ``(its overall validation curve, analysis.Breakdown)``; the curve is anything
    with ``x`` and ``y`` arrays (a Series or a FitResult)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    domains = list(dict.fromkeys(d for _, b in runs.values() for d in b.domains))
    n = len(domains) + 1
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.8), squeeze=False, sharey=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, domain in zip(axes.flat, domains):
        for i, (name, (_, b)) in enumerate(runs.items()):
            if domain not in b.domains:
                continue
            s, fit = b.domains[domain]
            c, pos = colours[i % len(colours)], s.x > 0
            ax.plot(s.x[pos], s.y[pos], "o", color=c, ms=3, label=name)
            if fit is not None:
                xs = np.geomspace(float(s.x[pos].min()), float(s.x.max()) * 2, 100)
                ax.plot(xs, fit.predict(xs), "-", color=c, lw=1.2)
                if fit.identified:  # an unidentified A is the search's bound, not a level to draw
                    ax.axhline(fit.A, color=c, ls=":", lw=0.8)
        ax.set_title(f"domain: {domain}", fontsize=10)
    ax = axes.flat[-1]
    for i, (name, (overall, b)) in enumerate(runs.items()):
        c, pos = colours[i % len(colours)], overall.x > 0
        ax.plot(overall.x[pos], overall.y[pos], "-o", color=c, ms=3, lw=1, label=f"{name}: validation")
        for j, (set_name, s) in enumerate(b.downstream.items()):
            p = s.x > 0
            ax.plot(s.x[p], s.y[p], "--" + "sv^D"[j % 4], color=c, ms=3, lw=1, label=f"{name}: {set_name}")
    ax.set_title("downstream (dashed) beside validation", fontsize=10)
    for ax in axes.flat:
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # a short span gets crowded minor labels otherwise
        ax.set_xlabel("compute (device-hours)", fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    axes.flat[0].set_ylabel("pass rate", fontsize=9)
    fig.tight_layout()
    return fig
