"""``scalerl report``: one self-contained, offline HTML file for a sweep (or one run).

What it shows, each piece from the paper:

* the compute–reward points of every run with its fitted Eq. 1 curve and the extrapolation past its compute (§2.1);
* a table of A with its interval, B, Cmid, R0, and the held-out extrapolation error: each run refitted on the first
  half of its compute and checked against the measured second half (§4: fit on 8k GPU-h, check at 16k);
* the ranking by the paper's rules: A first; runs within the margin (±0.02) are tied, refitted at their mean A
  and ranked by B (App. A.5, A.8);
* the linearised form ``log F(R)`` against ``log C`` at a common A, whose slopes are B (Fig. 7);
* the reward each fit predicts at 2× and 10× the run's compute;
* with a task mixture (§5): one curve and fit per domain, side by side (a single-domain run of the same report
  beside its domain), and the downstream sets beside the overall validation curve;
* training diagnostics over time: truncation rate (App. A.15), staleness (§3.1), zero-variance fraction (§3.2, Fig. 6a),
  retired prompts (§3.2, Fig. 6b), entropy (App. A.12);
* for a pruned sweep (``--prune``, §1's third principle): the compute each run got against its budget, where and why
  a run was stopped with the numbers that decided (its outlook, the leader's lower end, the margin), and the
  sweep's compute against the unpruned budget.

Figures are PNGs embedded as base64, the CSS is inline, nothing is fetched: the file opens offline. A run
directory that cannot be reported (no metrics, unreadable metrics, too few evaluations) is named in the report
and in a one-line warning on stderr; the others are still reported. The file is written atomically.
"""

from __future__ import annotations

import html
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from scalerl.atomic import write_text
from scalerl.curves.fit import format_A, format_level, lower_end_given
from scalerl.errors import UserError, printable
from scalerl.experiments.analysis import FORECAST_FACTORS, A_interval, Analysis, RunAnalysis, analyse
from scalerl.experiments.figures import (
    TRUNCATION_ALARM, breakdown_figure, diagnostics_figure, figure_data_uri, png_data_uri,
)
from scalerl.experiments.pruning import DEFAULT_LEVEL

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;max-width:1200px;
     padding:0 1em;color:#1d1d1f;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em} h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px solid #ddd}
.meta{color:#555;font-size:.9em} .note{color:#555;font-size:.88em;max-width:70em}
table{border-collapse:collapse;font-size:.88em;margin:.6em 0}
th,td{border:1px solid #d0d0d0;padding:.3em .6em;text-align:right}
th{background:#f2f2f5} .l{text-align:left}
tr.tie td{background:#fff6dc} .bad{color:#b00020;font-weight:600} .ok{color:#11772d}
.warn{background:#fdecea;border-left:4px solid #b00020;padding:.5em 1em;margin:1em 0}
img{max-width:100%;height:auto;border:1px solid #eee}
"""


def _esc(value: Any) -> str:
    return html.escape(str(value))


def _num(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def _table(headers: Iterable[str], rows: Iterable[tuple[list[str], str]], text: tuple[int, ...] = (0,)) -> str:
    """An HTML table; cells are already-escaped HTML, each row comes with its CSS class ('' for none). Columns
    whose index is in ``text`` are left-aligned, the others (numbers) right-aligned."""
    def cells(tag: str, values: Iterable[str]) -> str:
        return "".join(f'<{tag}{" class=l" if i in text else ""}>{v}</{tag}>' for i, v in enumerate(values))

    head = cells("th", headers)
    body = "".join(f'<tr{f" class={cls}" if cls else ""}>{cells("td", values)}</tr>' for values, cls in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _fits_table(runs: list[RunAnalysis]) -> str:
    rows = []
    for r in runs:
        f = r.fit
        ident = '<span class="ok">yes</span>' if f.identified else '<span class="bad">no</span>'
        lo, hi = r.A_interval
        rows.append(([_esc(r.name), str(r.n_points), f"{r.x_max:.3g}", f"{f.R0:.3f}", f"<b>{f.format_A()}</b>",
                      f"[{lo}, {hi}]", f"{f.B:.2f}", f"{f.Cmid:.3g}", ident, f"{r.y_last:.3f}"], ""))
    return _table(["run", "evaluations", "compute", "R0", "A", "A interval", "B", "Cmid", "identified",
                   "last reward"], rows)


def _heldout_table(runs: list[RunAnalysis]) -> str:
    rows, notes = [], []
    for r in runs:
        h = r.heldout
        if h is None:
            rows.append(([_esc(r.name), *["–"] * 8], ""))
            notes.append(f'<p class="note bad">{_esc(r.name)}: no held-out check, {_esc(r.heldout_note or "")}</p>')
            continue
        half_A = format_A(h.A, lower_end_given(h.A_ci, h.A_ci_open), h.identified)
        rows.append(([_esc(r.name), f"{h.fit_until:.3g}", str(h.n), half_A, r.fit.format_A(),
                      f"{h.mean_abs_err:.3f}", f"{h.max_abs_err:.3f}", f"{h.end_pred:.3f}", f"{h.end_true:.3f}"], ""))
    return _table(["run", "fitted on compute ≤", "held-out evaluations", "A (first half)", "A (all)",
                   "mean |error|", "max |error|", "predicted last reward", "measured last reward"], rows) + "".join(notes)


def _ranking_table(a: Analysis) -> str:
    from scalerl.experiments.prune_sweep import rung_name

    rows = []
    for item in a.ranking:
        if item.pruned:
            rung = ((a.pruning or {}).get("runs", {}).get(item.name) or {}).get("stopped_at")
            where = f" at {rung_name(rung)} of its budget" if rung is not None else ""
            rows.append(([_esc(item.name), "–", _esc(item.A_text), "–",
                          f'<span class="bad">pruned</span>: stopped by --prune{where}; not ranked (its fit covers '
                          "only the compute it got)"], ""))
            continue
        tie = len(item.group) > 1
        if not item.ranked:  # curves.compare: nothing bounds its A, so nothing ranks it
            note = ('<span class="bad">not ranked</span>: A not identified and the data bound it nowhere (no interval, '
                    "or one open below); listed after the ranked runs, by name")
        elif not item.identified:  # curves.compare: an unidentified A is a lower bound, never a rank by A
            note = ('<span class="bad">A not identified</span>: placed by the lower end of its interval '
                    f"({_esc(item.A_text)}), not ranked by its fitted A; never tied")
        elif tie:
            note = (f"tied with {', '.join(_esc(n) for n in item.group if n != item.name)} "
                    f"(ΔA ≤ {a.margin:g}): ranked by B at common A = {item.common_A:.3f}")
        else:
            note = "ranked by A"
        rows.append(([_esc(item.name), str(item.rank) if item.ranked else "–", _esc(item.A_text),
                      _num(item.B_common, ".2f") if tie else "–", note], "tie" if tie else ""))
    return _table(["run", "rank", "A", "B at common A", "rule"], rows, text=(0, 4))


def _forecast_table(runs: list[RunAnalysis]) -> str:
    """Each run's forecast at 2× and 10× its compute with the 80% band, and the trust signal: how the forecast did
    on the run's own history against carrying the last value forward; an unreliable forecast says why."""
    rows = []
    for r in runs:
        lo, hi = r.fit.forecast_interval([p.compute for p in r.predictions], level=0.8)
        cells = [f"{p.reward:.3f} [{a:.3f}, {b:.3f}] <span class=meta>@ {p.compute:.3g}</span>"
                 + ("" if r.fit.supports(p.reward) else ' <span class="bad">beyond what the data support</span>')
                 for p, a, b in zip(r.predictions, lo, hi)]
        trust = r.fit.trust or {}
        note = _esc(trust.get("summary", ""))
        if not r.fit.reliable:
            note = (f'<span class="bad">unreliable: {r.fit.law} does not describe this run (' +
                    _esc("; ".join(trust.get("warnings") or [])) + ")</span> " + note)
        rows.append(([_esc(r.name), f"{r.x_max:.3g}", f"{r.y_last:.3f}", *cells, note], ""))
    return _table(["run", "compute so far", "last reward", "forecast at 2× (80% band)", "forecast at 10× (80% band)",
                   "trust: the run's own history"], rows, text=(0, 5))


def _pruning_section(p: dict[str, Any] | None) -> str:
    """What ``--prune`` did (``sweep.json``'s ``pruning``); '' for an unpruned sweep."""
    if not p:
        return ""
    from scalerl.experiments.prune_sweep import rung_name

    rows = []
    for name, r in p.get("runs", {}).items():
        o = r.get("outlook") or {}
        outlook = (f"{o['value']:.3f} [{o['lo']:.3f}, {o['hi']:.3f}] <span class=meta>{_esc(o['basis'])} @ "
                   f"{o['compute']:.3g}</span>" if o else "–")
        where = rung_name(r["stopped_at"]) if r.get("stopped_at") is not None else "–"
        state = f'<span class="bad">{_esc(r["state"])}</span>' if r["state"] == "pruned" else _esc(r["state"])
        share = r["compute"] / r["budget"] if r.get("budget") else 0.0
        ref = (p.get("unpruned") or {}).get(name)
        against = ([f"{ref['compute']:.3g}", f"{r['compute'] / ref['compute']:.0%}" if ref["compute"] > 0 else "–",
                    f"{ref['reward']:.3f}"] if ref else ["–"] * 3) if "unpruned" in p else []
        rows.append(([_esc(name), state, where, f"{r['compute']:.3g}", f"{r['budget']:.3g}", f"{share:.0%}",
                      outlook, *against, _esc(r.get("leader") or "–"), _num(r.get("leader_lo"), ".3f"),
                      f"{p['margin']:g}", _esc(r.get("reason", ""))], "tie" if r["state"] == "pruned" else ""))
    ref_cols = ["unpruned: compute", "share of it", "unpruned: last reward"] if "unpruned" in p else []
    headers = ["run", "state", "stopped at", "compute got", "budget", "share", "outlook [lo, hi] at decision",
               *ref_cols, "leader", "leader's lower end", "margin", "why"]
    table = _table(headers, rows, text=(0, 1, len(headers) - 4, len(headers) - 1))
    total = (f"The sweep spent <b>{p['spent_device_hours']:.4g}</b> of the <b>{p['unpruned_device_hours']:.4g}</b> "
             f"device-hours its runs would get unpruned (<b>{p['spent_share']:.0%}</b>); rungs at "
             f"{', '.join(rung_name(x) for x in p['rungs'])} of each run's budget, {p['decided']} decided.")
    return f"""<h2>Pruning</h2>
<p>{total}</p>
{table}
<p class="note">At each rung every live run is fitted on its evaluations so far (Eq. 1). Its outlook is the 95%
interval on A when A is identified, else the forecast at its full budget with its {DEFAULT_LEVEL:.0%} band. A run stops when the
upper end of its outlook lies more than the margin (App. A.5: 0.02) below the leader's lower end; a run without a
trustworthy forecast (fewer than 6 evaluations, a failed fit, a curve Eq. 1 does not describe) is never stopped.
A stopped run's fit and ranking below use only the evaluations it got.</p>"""


def _domains_table(runs: list[RunAnalysis]) -> str:
    rows = []
    for r in runs:
        for domain, (s, f) in (r.breakdown.domains.items() if r.breakdown else ()):
            if f is None:
                rows.append(([_esc(r.name), _esc(domain), str(s.x.size), *["–"] * 4, f"{s.y[-1]:.3f}"], ""))
                continue
            ident = '<span class="ok">yes</span>' if f.identified else '<span class="bad">no</span>'
            lo, hi = A_interval(f)
            rows.append(([_esc(r.name), _esc(domain), str(s.x.size), f"<b>{f.format_A()}</b>", f"[{lo}, {hi}]",
                          f"{f.B:.2f}", ident, f"{s.y[-1]:.3f}"], ""))
        for name, s in (r.breakdown.downstream.items() if r.breakdown else ()):
            rows.append(([_esc(r.name), f"downstream: {_esc(name)}", str(s.x.size), *["–"] * 4, f"{s.y[-1]:.3f}"], ""))
    return _table(["run", "domain", "evaluations", "A", "A interval", "B", "identified", "last reward"], rows,
                  text=(0, 1))


def _domains_section(a: Analysis, figure: str) -> str:
    """Only for a report with a task mixture in it."""
    if not any(r.breakdown and r.breakdown.mixture for r in a.runs):
        return ""
    img = f'<img src="{figure}" alt="per-domain curves and downstream sets">' if figure else ""
    return f"""<h2>Per-domain curves and downstream sets</h2>
{img}
{_domains_table(a.runs)}
<p class="note">§5: trained on a mixture, each domain follows its own sigmoid (one fit per domain, dotted line at
its A once identified); a single-domain run is shown under its task. Downstream sets are held out by construction and harder than
the training distribution; they are logged at the same evaluation steps as validation.</p>"""


def _diagnostics_table(runs: list[RunAnalysis]) -> str:
    rows = []
    for r in runs:
        d = r.diagnostics
        trunc = d.get("train/truncation_rate")
        alarm = trunc is not None and trunc > TRUNCATION_ALARM
        rows.append(([_esc(r.name),
                      f'<span class="{"bad" if alarm else ""}">{_num(trunc, ".1%")}</span>',
                      _num(d.get("train/staleness_mean"), ".2f"), _num(d.get("train/staleness_max"), ".0f"),
                      _num(d.get("train/zero_var_frac"), ".2f"), _num(d.get("curriculum/retired"), ".0f"),
                      _num(d.get("train/entropy"), ".3f")], ""))
    return _table(["run", "max truncation", "mean staleness", "max staleness", "last zero-var frac",
                   "retired prompts", "last entropy"], rows)


def render(a: Analysis, figures: dict[str, str], extra: str = "") -> str:
    """The report's HTML; ``figures`` maps 'curves', 'slopes', 'diagnostics' to data URIs ('' to leave one out);
    ``extra`` is HTML put before the curves (e.g. the claims table of bench/replicate.py)."""
    skipped = ""
    if a.skipped:
        items = "".join(f"<li><b>{_esc(s.name)}</b> ({_esc(s.dir)}): {_esc(s.reason)}</li>" for s in a.skipped)
        skipped = f'<div class="warn"><b>Not reported</b> ({len(a.skipped)}):<ul>{items}</ul></div>'

    def fig(key: str, alt: str) -> str:
        return f'<img src="{figures[key]}" alt="{_esc(alt)}">' if figures.get(key) else '<p class="note">(not enough data)</p>'

    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>scalerl report: {_esc(a.title)}</title>
<style>{CSS}</style></head><body>
<h1>ScaleRL report: {_esc(a.title)}</h1>
<p class="meta">{_esc(a.root)} · {len(a.runs)} run(s) reported, {len(a.skipped)} not · x = {_esc(a.x)}, y = {_esc(a.y)}
 · generated {time.strftime("%Y-%m-%d %H:%M")}</p>
{f'<p class="note">{_esc(a.description)}</p>' if a.description else ''}
{skipped}
{extra}
{_pruning_section(a.pruning)}
<h2>Compute–reward curves</h2>
{fig("curves", "measured points, fitted sigmoids and extrapolations of every run")}
<p class="note">Eq. 1, R(C) = R0 + (A − R0) / (1 + (Cmid/C)^B), fitted to every run; the dashed part extrapolates
to 10× the run's compute. A higher A raises the ceiling; a higher B and a smaller Cmid reach it sooner (§2.1, App. A.8).</p>
<h2>Fitted parameters</h2>
{_fits_table(a.runs)}
{_domains_section(a, figures.get("domains", ""))}
<p class="note">A interval: {format_level(a.ci_level)} profile-likelihood interval, widened for autocorrelated
evaluation noise (scalerl.curves); “open” means the data do not bound that end. “identified: no” means the
data do not pin A down yet: the run has not passed Cmid, or too few evaluations lie past it, or the interval is open
at the top (a plateau whose noise leaves room above), or Eq. 1 does not describe the run (a fall, a step); each
run's reason is in <code>scalerl fit</code> on its directory.</p>
<h2>Held-out extrapolation check</h2>
{_heldout_table(a.runs)}
<p class="note">As in §4 (fit up to 8k GPU-h, check at 16k): each run is refitted on the first half of
its compute, and that curve is scored on the evaluations of the second half it did not see.</p>
<h2>Ranking</h2>
{_ranking_table(a)}
{"".join(f'<p class="note">⚠ {_esc(w)}</p>' for w in a.warnings)}
<p class="note">The paper's rule (App. A.5, A.8): compare A first; A values within ±{a.margin:g} are treated as equal,
those runs are refitted with their mean A, and the higher B ranks first. Shaded rows are ties. A run whose A is not
identified has only a lower bound on A: it is placed by that bound, after the identified runs it does not beat by more
than the margin. A run whose data bound A nowhere (no interval, or one open below) is not ranked: it is listed
last, by name.</p>
<h2>Linearised slopes at a common A</h2>
{fig("slopes", "log F(R) against log C at a common A")}
<p class="note">Fig. 7: with A fixed, F(R) = Cmid^B / ((A − R0)/(R − R0) − 1) equals C^B on the curve,
so log F(R) against log C is a line whose slope is B. Steeper is more compute-efficient.</p>
<h2>Predicted reward at 2× and 10× compute</h2>
{_forecast_table(a.runs)}
<h2>Diagnostics over training</h2>
{fig("diagnostics", "truncation rate, staleness, zero-variance fraction, retired prompts and entropy per step")}
{_diagnostics_table(a.runs)}
<p class="note">Truncation rate above {TRUNCATION_ALARM:.0%} (red) destabilised the paper's runs (App. A.6, A.15);
entropy falls in every run and does not predict performance (App. A.12).</p>
</body></html>
"""


def build_figures(a: Analysis) -> dict[str, str]:
    """The report's PNGs as data URIs. Run names (directory names, shown in legends and labels) are drawn as plain
    text: a name with ``$`` in it would otherwise be parsed as matplotlib mathtext and could stop the report."""
    import matplotlib

    with matplotlib.rc_context({"text.parse_math": False}):
        return _figures(a)


def _figures(a: Analysis) -> dict[str, str]:
    from scalerl import curves

    return {
        "curves": png_data_uri(lambda p: curves.plot_fits(
            [r.fit for r in a.runs], p, extrapolate_to=max(FORECAST_FACTORS), labels=[r.name for r in a.runs])),
        "slopes": png_data_uri(lambda p: curves.plot_linearised(
            a.slope_fits, p, title=f"Linearised Eq. 1 at common A = {a.common_A:.3f}: slope = B")) if a.slope_fits else "",
        "diagnostics": figure_data_uri(diagnostics_figure({r.name: r.series for r in a.runs})),
        "domains": figure_data_uri(breakdown_figure({r.name: (r.fit, r.breakdown) for r in a.runs if r.breakdown}))
        if any(r.breakdown and r.breakdown.mixture for r in a.runs) else "",
    }


def warn_skipped(a: Analysis) -> None:
    for s in a.skipped:
        print(printable(f"warning: {s.dir} not reported: {s.reason}"), file=sys.stderr)


def write_report(
    root: str | Path, out: str | Path, margin: float = 0.02, quiet: bool = False,
    extra: Callable[[Analysis], str] | None = None, unpruned: str | Path | None = None,
) -> Analysis:
    """Analyse the runs under ``root`` and write the report to ``out`` (atomically). UserError when no run is usable.
    ``extra`` makes HTML from the analysis to put before the curves. ``unpruned``: for a pruned sweep, the unpruned
    sweep of the same spec, whose runs show what each pruned run would have reached and the compute it got there."""
    out = Path(out)
    if out.suffix.lower() not in (".html", ".htm"):
        raise UserError(f"--out {out}: the report is an HTML file; give a name ending in .html")
    a = analyse(Path(root), margin=margin)
    if unpruned is not None:
        from scalerl.experiments.prune_sweep import against_unpruned

        if a.pruning is None:
            raise UserError(f"--unpruned: {root} is not a pruned sweep (its sweep.json has no 'pruning')")
        a.pruning = {**a.pruning, "unpruned": against_unpruned(a.pruning, Path(unpruned))}
    warn_skipped(a)
    if not a.runs:
        reasons = "; ".join(f"{s.name}: {s.reason}" for s in a.skipped)
        raise UserError(f"no usable run in {root} ({reasons})")
    write_text(out, render(a, build_figures(a), extra(a) if extra else ""))
    return a
