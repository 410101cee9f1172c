"""Backtest: does ``scalerl fit``'s forecast of the rest of a run beat what a user could do by eye? (issue #26)

For every curve of the real-curve corpus (``bench/curves/``, x = step) and of a synthetic set (Table 1's curves,
``scalerl.curves.synthetic``, x = compute), at each cut ``c`` (a fraction of the largest x, the meaning of
``scalerl fit --fit-until c``) the fit sees the points with x ≤ c·max(x) and is scored on the rest by mean absolute
error. The forecasts compared, all from the same points:

  scalerl    ``FitResult.heldout["mean_abs_err"]`` of the fit the CLI makes (``load_series`` + ``fit_series`` with
             the CLI's defaults: ``--method vp``, Eq. 1, bounds on, level 0.95, the default early cut);
  last       the last value at or before the cut, carried forward;
  mean3      the mean of the last 3 values at or before the cut;
  loglin     a + b·ln(x), least squares on the points 0 < x ≤ cut;
  power      A − D·x^(−b) on the same points (``scipy.optimize.curve_fit``; none when it fails).

Per curve: each error, the best naive one and scalerl's ratio to it; per set and cut: mean and median of each
method, scalerl's mean over the best naive method's mean (and over the mean of per-curve bests), and how many
curves have scalerl ≤ that curve's best naive + 0.01. Also, where ``FitResult.forecast_interval(x, level=0.8)``
exists, how often the held-out points fall in it; and, for fits marked identified, whether the interval on A
holds the run's last values (its upper end ≥ the mean of the curve's last 5 points − 0.01; the interval contains
that mean). A fit the library declines (a ``FitError``/``UserError``, one clean line for a user) is counted as
declined; any other exception is a crash and is listed with its traceback.

    python bench/forecast_backtest.py                       # corpus + synthetic set, cuts 0.25, 0.5, 0.75
    python bench/forecast_backtest.py --methods vp,paper,paper-data --json backtest.json
    python bench/forecast_backtest.py --cuts 0.5 --quiet --no-synthetic
    python bench/forecast_backtest.py --corpus bench/curves/holdout --no-synthetic   # the held-out set
    python bench/forecast_backtest.py --corpus bench/curves/holdout2 --no-synthetic  # the second held-out set
    python bench/forecast_backtest.py --corpus bench/curves/holdout3 --no-synthetic  # the third held-out set
    python bench/forecast_backtest.py --corpus bench/curves/holdout6 --no-synthetic  # ... and so on to the sixth
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np
from scipy.optimize import curve_fit

from scalerl import atomic
from scalerl.curves import FitResult, fit_series, load_series
from scalerl.curves.series import Series
from scalerl.curves.synthetic import TABLE1, simulate_eval_curve
from scalerl.errors import UserError

CORPUS = Path(__file__).resolve().parent / "curves"
CUTS = (0.25, 0.5, 0.75)
NAIVE = ("last", "mean3", "loglin", "power")
TOLERANCE = 0.01  # "at most that curve's best naive error + 0.01" (issue #26)
LAST_N = 5  # "the run's last values": the mean of the curve's last 5 points
INTERVAL_LEVEL = 0.8
SYNTHETIC_SEEDS = 6  # 10 Table 1 rows × 6 seeds = 60 curves
SYNTHETIC_POINTS = 40


# ---- curves -----------------------------------------------------------------------------------------------------


def load_manifest(corpus: Path = CORPUS) -> list[dict[str, Any]]:
    """The corpus manifest's entries (``bench/curves/manifest.json``)."""
    return json.loads((corpus / "manifest.json").read_text(encoding="utf-8"))["curves"]


def corpus_series(corpus: Path = CORPUS) -> list[Series]:
    """Every corpus curve as the CLI reads it (``scalerl fit FILE --x step --y value``), named by its manifest id;
    an entry's ``scale`` (0.01 for a source that wrote percentages) converts its values to a fraction."""
    out = []
    for e in load_manifest(corpus):
        s = load_series(corpus / e["file"], x="step", y="value")
        out.append(replace(s, source=e["id"], y=s.y * float(e.get("scale", 1.0))))
    return out


def synthetic_series(seeds: int = SYNTHETIC_SEEDS, points: int = SYNTHETIC_POINTS) -> list[Series]:
    """Table 1's ten runs × ``seeds`` noise draws: compute 0 then ``points`` evaluations up to 6.3 × Cmid."""
    out = []
    for name, p in TABLE1.items():
        C = np.concatenate([[0.0], np.linspace(0.063 * p.Cmid, 6.3 * p.Cmid, points)])
        for seed in range(seeds):
            y = simulate_eval_curve(p, C, seed=seed)
            out.append(Series(x=C, y=y, rows=np.arange(1, C.size + 1), source=f"{name}/s{seed}",
                              x_name="compute", y_name="reward"))
    return out


# ---- naive forecasts: (window x, window y, held-out x) -> predictions ------------------------------------------


def last_value(xw: np.ndarray, yw: np.ndarray, xh: np.ndarray) -> np.ndarray:
    return np.full(xh.shape, float(yw[-1]))


def mean_last3(xw: np.ndarray, yw: np.ndarray, xh: np.ndarray) -> np.ndarray:
    return np.full(xh.shape, float(np.mean(yw[-3:])))


def log_linear(xw: np.ndarray, yw: np.ndarray, xh: np.ndarray) -> np.ndarray | None:
    m = xw > 0
    if np.unique(xw[m]).size < 2:
        return None
    b, a = np.polyfit(np.log(xw[m]), yw[m], 1)
    return a + b * np.log(xh)


def power_law(xw: np.ndarray, yw: np.ndarray, xh: np.ndarray) -> np.ndarray | None:
    """A − D·(x/s)^(−b) with s the window's last x (for conditioning); None when the fit fails."""
    m = xw > 0
    x, y = xw[m], yw[m]
    if np.unique(x).size < 3:
        return None
    s = float(x.max())

    def f(u: np.ndarray, A: float, D: float, b: float) -> np.ndarray:
        return A - D * u ** (-b)

    p0 = (float(y[-1]), float(y[-1] - y[0]) * float((x[0] / s) ** 0.5), 0.5)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            q, _ = curve_fit(f, x / s, y, p0=p0, bounds=([-np.inf, -np.inf, 1e-3], [np.inf, np.inf, 10.0]),
                             maxfev=20000)
    except (RuntimeError, ValueError):
        return None
    pred = f(xh / s, *q)
    return pred if np.all(np.isfinite(pred)) else None


BASELINES: dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray | None]] = {
    "last": last_value, "mean3": mean_last3, "loglin": log_linear, "power": power_law,
}


def mae(pred: np.ndarray | None, y: np.ndarray) -> float | None:
    return None if pred is None else float(np.mean(np.abs(np.asarray(pred) - y)))


# ---- one curve at one cut --------------------------------------------------------------------------------------


@dataclass
class Crash:
    set: str
    curve: str
    cut: float
    method: str
    error: str
    traceback: str


@dataclass
class Row:
    """One curve at one cut: each method's held-out error and the fit's checks."""

    curve: str
    cut: float
    n_window: int
    n_heldout: int
    errors: dict[str, float | None] = field(default_factory=dict)  # method -> mean abs error (None: no forecast)
    declined: str | None = None  # the FitError / UserError message, when the fit declined
    crashed: bool = False
    identified: bool | None = None
    A_ci: list[float | None] | None = None
    last_mean: float | None = None
    ci_upper_holds: bool | None = None  # upper end ≥ mean of the last LAST_N points − TOLERANCE
    ci_contains: bool | None = None
    covered: int | None = None  # held-out points inside the 80% forecast interval
    interval: str = "n/a"  # "n/a" when the FitResult offers no forecast_interval

    @property
    def best_naive(self) -> tuple[str, float] | None:
        e = {k: v for k, v in self.errors.items() if k in NAIVE and v is not None}
        return min(e.items(), key=lambda kv: kv[1]) if e else None


def _crash(crashes: list[Crash], set_name: str, curve: str, cut: float, method: str, e: BaseException) -> None:
    crashes.append(Crash(set_name, curve, cut, method, f"{type(e).__name__}: {e}", traceback.format_exc()))


def fit_like_cli(series: Series, cut: float, method: str = "vp") -> FitResult:
    """``scalerl fit FILE --fit-until CUT [--method M]`` with every other option at its default."""
    return fit_series(series, method=method, model="sigmoid", fit_from=None, fit_until=None, fit_until_fraction=cut,
                      bounded=True, level=0.95, predict_at=[float(series.x.max()), 2 * float(series.x.max())])


def _a_ci_checks(row: Row, fit: FitResult, y: np.ndarray) -> None:
    row.identified = bool(fit.identified)
    row.A_ci = None if fit.A_ci is None else [None if v is None else float(v) for v in fit.A_ci]
    row.last_mean = float(np.mean(y[-LAST_N:]))
    if fit.identified and fit.A_ci is not None:
        lo, hi = fit.A_ci
        lo_v = -np.inf if lo is None else lo
        hi_v = np.inf if hi is None else hi
        row.ci_upper_holds = bool(hi_v >= row.last_mean - TOLERANCE)
        row.ci_contains = bool(lo_v <= row.last_mean <= hi_v)


def _interval_coverage(row: Row, fit: FitResult, xh: np.ndarray, yh: np.ndarray) -> None:
    fn = getattr(fit, "forecast_interval", None)
    if not callable(fn):
        return
    lo, hi = (np.asarray(v, dtype=float) for v in fn(xh, level=INTERVAL_LEVEL))
    row.covered = int(np.sum((yh >= lo) & (yh <= hi)))
    row.interval = "yes"


def backtest_curve(series: Series, cut: float, set_name: str, crashes: list[Crash]) -> Row:
    """Every method on one curve at one cut; exceptions other than a clean refusal go to ``crashes``."""
    x, y = np.asarray(series.x, float), np.asarray(series.y, float)
    until = cut * float(x.max())
    w, h = x <= until, x > until
    row = Row(series.source, cut, int(w.sum()), int(h.sum()))
    for name, fn in BASELINES.items():
        try:
            row.errors[name] = mae(fn(x[w], y[w], x[h]), y[h]) if w.any() and h.any() else None
        except Exception as e:  # noqa: BLE001 - a crash is a finding, recorded with its traceback
            _crash(crashes, set_name, series.source, cut, name, e)
            row.errors[name] = None
    try:
        fit = fit_like_cli(series, cut)
    except UserError as e:
        row.declined, row.errors["scalerl"] = str(e), None
        return row
    except Exception as e:  # noqa: BLE001
        _crash(crashes, set_name, series.source, cut, "scalerl (vp)", e)
        row.crashed, row.errors["scalerl"] = True, None
        return row
    row.errors["scalerl"] = None if fit.heldout is None else float(fit.heldout["mean_abs_err"])
    for what, check in (("A_ci", lambda: _a_ci_checks(row, fit, y)),
                        ("forecast_interval", lambda: _interval_coverage(row, fit, x[h], y[h]))):
        try:
            check()
        except Exception as e:  # noqa: BLE001
            _crash(crashes, set_name, series.source, cut, f"scalerl {what}", e)
    return row


# ---- aggregates ------------------------------------------------------------------------------------------------


def _stats(values: list[float]) -> dict[str, float | None]:
    return {"mean": statistics.fmean(values) if values else None,
            "median": statistics.median(values) if values else None, "n": len(values)}


def aggregate(rows: list[Row]) -> dict[str, Any]:
    """Per set and cut: the curves scalerl scored, each method's mean/median over those, the ratios and counts."""
    scored = [r for r in rows if r.errors.get("scalerl") is not None]
    out: dict[str, Any] = {
        "curves": len(rows), "scored": len(scored), "declined": sum(r.declined is not None for r in rows),
        "crashed": sum(r.crashed for r in rows),
        "no_heldout": sum(r.n_heldout == 0 and r.declined is None and not r.crashed for r in rows),
        "methods": {m: _stats([r.errors[m] for r in scored if r.errors.get(m) is not None])
                    for m in ("scalerl", *NAIVE)},
    }
    naive_means = {m: s["mean"] for m, s in out["methods"].items() if m in NAIVE and s["mean"] is not None}
    s_mean = out["methods"]["scalerl"]["mean"]
    if naive_means and s_mean is not None:
        best = min(naive_means, key=naive_means.__getitem__)
        per_curve_best = [r.best_naive[1] for r in scored if r.best_naive]
        out["best_naive_method"] = best
        out["ratio_to_best_naive_method"] = s_mean / naive_means[best] if naive_means[best] > 0 else None
        out["per_curve_best_naive"] = _stats(per_curve_best)
        pcb = out["per_curve_best_naive"]["mean"]
        out["ratio_to_per_curve_best"] = s_mean / pcb if pcb else None
        out["within_tolerance"] = sum(
            r.errors["scalerl"] <= r.best_naive[1] + TOLERANCE for r in scored if r.best_naive
        )
        out["scalerl_best"] = sum(r.errors["scalerl"] <= r.best_naive[1] for r in scored if r.best_naive)
    ident = [r for r in scored if r.identified]
    out["identified"] = len(ident)
    out["ci_upper_holds"] = sum(bool(r.ci_upper_holds) for r in ident)
    out["ci_contains"] = sum(bool(r.ci_contains) for r in ident)
    cov = [r for r in scored if r.covered is not None]
    out["interval_coverage"] = (sum(r.covered for r in cov) / sum(r.n_heldout for r in cov)) if cov else None
    return out


# ---- fuzz: every fit method over the corpus -------------------------------------------------------------------


def fuzz(series: list[Series], methods: list[str], cuts: tuple[float, ...], crashes: list[Crash]) -> dict[str, Any]:
    """Each fit method on each curve and cut: ok / declined / crashed and the mean held-out error of the fits."""
    out = {}
    for method in methods:
        ok, declined, crashed, errs = 0, 0, 0, []
        for s in series:
            for cut in cuts:
                try:
                    fit = fit_like_cli(s, cut, method)
                except UserError:
                    declined += 1
                    continue
                except Exception as e:  # noqa: BLE001
                    crashed += 1
                    _crash(crashes, "corpus", s.source, cut, f"fit --method {method}", e)
                    continue
                ok += 1
                if fit.heldout is not None:
                    errs.append(float(fit.heldout["mean_abs_err"]))
        out[method] = {"ok": ok, "declined": declined, "crashed": crashed, "mean_abs_err": _stats(errs)}
    return out


# ---- output ----------------------------------------------------------------------------------------------------


def _f(v: float | None, digits: int = 4) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def per_curve_table(rows: list[Row], cut: float) -> Any:
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=f"Held-out mean abs error at cut {cut:g} (fit on x ≤ {cut:g}·max x; lower is better)")
    for col in ("curve", "held", "scalerl", *NAIVE, "best naive", "ratio", f"≤ best+{TOLERANCE:g}", "A_ci holds",
                "80% cov"):
        t.add_column(col, justify="left" if col == "curve" else "right")
    for r in rows:
        best = r.best_naive
        s = r.errors.get("scalerl")
        if r.declined is not None:
            verdict, ratio = "declined", "–"
        elif r.crashed:
            verdict, ratio = "CRASH", "–"
        else:
            verdict = "–" if s is None or best is None else ("yes" if s <= best[1] + TOLERANCE else "NO")
            ratio = "–" if s is None or best is None or best[1] == 0 else f"{s / best[1]:.2f}"
        holds = "–" if not r.identified else ("yes" if r.ci_upper_holds else "NO") + (
            "" if r.ci_contains else " (not in)")
        cov = r.interval if r.covered is None else f"{r.covered}/{r.n_heldout}"
        t.add_row(escape(r.curve), str(r.n_heldout), _f(s), *(_f(r.errors.get(m)) for m in NAIVE),
                  "–" if best is None else f"{best[0]} {best[1]:.4f}", ratio, verdict, holds, escape(cov))
    return t


def aggregate_lines(name: str, cut: float, a: dict[str, Any]) -> list[str]:
    m = a["methods"]
    lines = [f"[{name}, cut {cut:g}] {a['scored']}/{a['curves']} curves scored "
             f"({a['declined']} declined, {a['crashed']} crashed, {a['no_heldout']} without held-out points)",
             "  mean / median abs error: " + "; ".join(
                 f"{k} {_f(v['mean'])} / {_f(v['median'])}" + ("" if v["n"] == a["scored"] else f" (n={v['n']})")
                 for k, v in m.items())]
    if "best_naive_method" in a:
        lines.append(f"  scalerl / best naive method ({a['best_naive_method']}): "
                     f"{_f(a['ratio_to_best_naive_method'], 2)}; scalerl / mean of per-curve best naive "
                     f"({_f(a['per_curve_best_naive']['mean'])}): {_f(a['ratio_to_per_curve_best'], 2)}; "
                     f"scalerl ≤ per-curve best + {TOLERANCE:g} on {a['within_tolerance']}/{a['scored']}, "
                     f"best outright on {a['scalerl_best']}/{a['scored']}")
    cov = "n/a (FitResult has no forecast_interval)" if a["interval_coverage"] is None else \
        f"{a['interval_coverage']:.0%} of held-out points"
    lines.append(f"  identified fits: {a['identified']}; A_ci upper end ≥ last-{LAST_N} mean − {TOLERANCE:g}: "
                 f"{a['ci_upper_holds']}/{a['identified']}; A_ci contains it: {a['ci_contains']}/{a['identified']}; "
                 f"80% forecast interval coverage: {cov}")
    return lines


def _row_json(r: Row) -> dict[str, Any]:
    d = {k: v for k, v in r.__dict__.items()}
    best = r.best_naive
    d["best_naive"] = None if best is None else {"method": best[0], "mean_abs_err": best[1]}
    return d


def run(cuts: tuple[float, ...], synthetic: bool, methods: list[str], quiet: bool, out_json: Path | None,
        only: list[str] | None = None, console: Any = None, corpus_dir: Path = CORPUS) -> dict[str, Any]:
    from rich.console import Console
    from rich.markup import escape

    console = console or Console()
    t0 = time.perf_counter()
    crashes: list[Crash] = []
    if not (corpus_dir / "manifest.json").is_file():
        raise UserError(f"--corpus: {corpus_dir} has no manifest.json (see bench/curves/README.md)")
    corpus = corpus_series(corpus_dir)
    if only:
        unknown = sorted(set(only) - {s.source for s in corpus})
        if unknown:
            raise UserError(f"--only: no corpus curve named {', '.join(unknown)}")
        corpus = [s for s in corpus if s.source in only]
    sets = {"corpus": corpus}
    if synthetic:
        sets["synthetic"] = synthetic_series()
    result: dict[str, Any] = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                              "command": " ".join(sys.argv), "corpus": str(corpus_dir), "cuts": list(cuts),
                              "sets": {}}
    main_cut = 0.5 if 0.5 in cuts else cuts[0]
    for name, series in sets.items():
        per_cut = {}
        for cut in cuts:
            rows = [backtest_curve(s, cut, name, crashes) for s in series]
            per_cut[str(cut)] = {"rows": rows, "aggregate": aggregate(rows)}
        if name == "corpus" and not quiet:
            console.print(per_curve_table(per_cut[str(main_cut)]["rows"], main_cut))
        for cut in cuts:
            for line in aggregate_lines(name, cut, per_cut[str(cut)]["aggregate"]):
                console.print(escape(line))
        result["sets"][name] = {c: {"aggregate": v["aggregate"], "curves": [_row_json(r) for r in v["rows"]]}
                                for c, v in per_cut.items()}
    if methods:
        result["fuzz"] = fuzz(sets["corpus"], methods, cuts, crashes)
        for m, v in result["fuzz"].items():
            console.print(escape(f"[fuzz --method {m}] {v['ok']} fitted, {v['declined']} declined, {v['crashed']} "
                                 f"crashed; mean held-out error of the fits {_f(v['mean_abs_err']['mean'])}"))
    result["crashes"] = [c.__dict__ for c in crashes]
    console.print(escape(f"crashes: {len(crashes)}" + ("" if crashes else " (none)")))
    shown: set[tuple[str, str]] = set()
    for c in crashes:  # every crash on one line; each distinct (method, error) once with its traceback
        console.print(escape(f"  {c.set} {c.curve} cut {c.cut:g} [{c.method}] {c.error}"))
        if not quiet and (c.method, c.error) not in shown:
            shown.add((c.method, c.error))
            console.print(escape(c.traceback.rstrip()), style="dim")
    result["seconds"] = time.perf_counter() - t0
    console.print(escape(f"done in {result['seconds']:.1f} s"))
    if out_json is not None:
        atomic.write_json(out_json, result)
    return result


def _cuts(text: str) -> tuple[float, ...]:
    try:
        cuts = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--cuts {text!r}: give fractions such as 0.25,0.5,0.75") from None
    if not cuts or any(not 0 < c < 1 for c in cuts):
        raise argparse.ArgumentTypeError(f"--cuts {text!r}: every cut must lie strictly between 0 and 1")
    return cuts


def main(argv: list[str] | None = None) -> int:
    from scalerl.curves import FIT_METHODS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cuts", type=_cuts, default=CUTS, help="fractions of the largest x to fit up to (0.25,0.5,0.75)")
    ap.add_argument("--methods", default="", help="also fit every curve with these fit methods (e.g. vp,paper,"
                    "paper-data) and report declines and crashes")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT", help="write every number to OUT")
    ap.add_argument("--quiet", action="store_true", help="aggregate lines only (no per-curve table, no tracebacks)")
    ap.add_argument("--no-synthetic", action="store_true", help="skip the synthetic set (Table 1 × 6 seeds)")
    ap.add_argument("--only", default="", metavar="ID[,ID]", help="only these corpus curves (manifest ids)")
    ap.add_argument("--corpus", type=Path, default=CORPUS, metavar="DIR", help="the real-curve set: a folder with "
                    "manifest.json and data/ (default bench/curves; bench/curves/holdout, holdout2, holdout3: "
                    "the held-out sets)")
    args = ap.parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        if m not in FIT_METHODS:
            ap.error(f"--methods: {m!r} is not a fit method; use some of: {', '.join(FIT_METHODS)}")
    only = [c.strip() for c in args.only.split(",") if c.strip()]
    try:
        result = run(args.cuts, not args.no_synthetic, methods, args.quiet, args.json, only, corpus_dir=args.corpus)
    except UserError as e:
        ap.error(str(e))
    return 1 if result["crashes"] else 0


if __name__ == "__main__":
    sys.exit(main())
