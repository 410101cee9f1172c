"""The live forecast (§2.1): after each evaluation, fit the sigmoid of Eq. 1 to validation pass rate versus
training compute so far, and report where the run is heading (``forecast/A`` with its interval, ``B``,
``Cmid``). At the end of a run the same fit is written to ``fit.json`` and drawn in ``curve.png``.

The evaluation at zero compute is the initial reward R0 (docs/architecture.md). Fitting uses ``scalerl.curves``; with
``forecast.fit_from`` unset the early points are left out as ``scalerl fit`` leaves them out
(``curves.fit.default_fit_from``, App. A.7).

Beside A, each update logs the trust signal (:mod:`scalerl.curves.trust`): ``forecast/trust_err`` (how well the
forecast predicted the last 40 % of the evaluations so far from the first 60 %), ``forecast/carry_forward_err``
(the same for carrying the last value forward), ``forecast/better_than_ruler`` (these three only once the window
has enough evaluations for a track record) and ``forecast/reliable`` (0 when Eq. 1 does not describe the run: a
step, a fall, A below the current level, a forecast that leaves what the data support). ``fit.json`` holds each fit's
``trust`` object, and each prediction its 80 % band (``lo_80``, ``hi_80``).

A fit that has not identified A (the run has not passed Cmid, or the interval on A is open at the top) is shown
as a lower bound, ``A ≥ lo``: the fitted A then sits at the search's bound and is no estimate (§2.1: fit past Cmid
before trusting A). ``fit.json`` also holds the paper's extrapolation check (§4, §5): the fit on the first half
of the compute scored on the second half, and whether its interval on A covers the whole run's A.

With a task mixture the evaluation holds one pass rate per domain (``val/<domain>/pass_rate``), and each gets
its own fit beside the overall one (§5: one sigmoid per domain): logged as ``forecast/<domain>/A`` etc., and
listed after the overall fit in ``fit.json`` (each fit names its column in ``"y"``) and drawn in ``curve.png``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from scalerl.config import ForecastConfig


def describe_A(A: float, lo: float | None, hi: float | None, identified: bool, past_cmid: bool,
               top_open: bool | None = None, reliable: bool = True) -> str:
    """The asymptote as a user should read it: ``A = 0.62 [0.58, 0.66]`` when identified, else the lower end of
    its interval as a bound (none when the interval has no lower end) with the reason (never the search's bound as
    if it were an estimate). ``top_open``: whether the interval is open at the top (None: not known, as in a
    metrics line); ``reliable``: False when Eq. 1 does not describe the run (``FitResult.reliable``)."""
    if identified:
        band = f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else ""
        return f"A = {A:.3f}{band}"
    if not reliable:
        why = "Eq. 1 does not describe this run"
    elif not past_cmid:
        why = "the run has not passed Cmid"
    elif top_open is False:
        why = "too few evaluations past Cmid (or residuals) to pin it down"
    else:
        why = "the interval on A is open at the top"
    bound = f"A ≥ {lo:.2f}, not" if lo is not None else "A not bounded, not"
    return f"{bound} identified yet: {why}"


def describe_record(record: dict[str, Any]) -> str | None:
    """:func:`describe_A` for a metrics line (``forecast/*`` keys), or None when it holds no forecast; with the
    trust signal when the line has one (whether the curve beat carrying the last value forward on its own past)."""
    if record.get("forecast/A") is None:
        return None
    past = record.get("compute/device_hours", 0.0) >= record.get("forecast/Cmid", float("inf"))
    reliable = record.get("forecast/reliable") != 0.0
    lo = None if record.get("forecast/A_lo_open") else record.get("forecast/A_lo")  # an open end bounds nothing
    text = describe_A(record["forecast/A"], lo, record.get("forecast/A_hi"),
                      bool(record.get("forecast/identified")), past, reliable=reliable)
    err, ruler = record.get("forecast/trust_err"), record.get("forecast/carry_forward_err")
    if err is not None and ruler is not None:
        verdict = "beats" if err < ruler else "does not beat"
        text += f"; forecast {verdict} a ruler on this run's past ({err:.3f} vs {ruler:.3f})"
    else:
        text += "; no track record yet (too few evaluations to backtest the forecast on this run's past)"
    if not reliable:
        text += "; the forecast is unreliable (`scalerl fit` on the run directory says why)"
    return text


def describe_trust(fit: dict[str, Any]) -> str:
    """The trust line of a fit in ``fit.json`` form (``trust.summary``), with the one-line reason when Eq. 1 does
    not describe the run."""
    trust = fit.get("trust") or {}
    text = trust.get("summary", "no trust record")
    from scalerl.curves.fit import law_name

    law = law_name(fit.get("model", "sigmoid"))
    return text if fit.get("reliable", True) else text + f"; {law} does not describe this run: " + "; ".join(
        trust.get("warnings") or ["see the warnings"])


def describe_fit(fit: dict[str, Any]) -> str:
    """:func:`describe_A` for a fit in ``fit.json`` form."""
    from scalerl.curves.fit import lower_end_given

    _, hi = fit["A_ci"] or (None, None)
    _, hi_open = fit.get("A_ci_open") or (None, None)
    return describe_A(fit["A"], lower_end_given(fit["A_ci"], fit.get("A_ci_open")), hi, bool(fit["identified"]),
                      fit["fit_window"][1] >= fit["Cmid"], top_open=hi_open, reliable=fit.get("reliable", True))


def describe_shape(fit: dict[str, Any], unit: str = "") -> str:
    """The rest of Eq. 1 for a fit in ``fit.json`` form: ``B = …, Cmid = …<unit>, R0 = …``."""
    return f"B = {fit['B']:.2f}, Cmid = {fit['Cmid']:.4g}{unit}, R0 = {fit['R0']:.3f}"


class Forecaster:
    def __init__(
        self, cfg: ForecastConfig, x_name: str = "compute/device_hours", y_name: str = "val/pass_rate", bounded: bool = True
    ) -> None:
        self.cfg = cfg
        self.x_name, self.y_name, self.bounded = x_name, y_name, bounded  # other trainers' axes (integrations/)
        self.x: list[float] = []
        self.y: list[float] = []
        self.domains: dict[str, Forecaster] = {}  # domain -> its own fit of val/<domain>/pass_rate
        self.last_fit: Any | None = None  # the latest FitResult (its forecast and interval), None before one
        self.last_error: str | None = None  # why the latest fit failed (FitError's line), None when it did not

    def state_dict(self) -> dict[str, Any]:
        return {"x": list(self.x), "y": list(self.y), "domains": {d: f.state_dict() for d, f in self.domains.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.x, self.y = list(state["x"]), list(state["y"])
        self.domains = {}
        for d, sub in state.get("domains", {}).items():
            self._domain(d).load_state_dict(sub)

    def _domain(self, domain: str) -> "Forecaster":
        if domain not in self.domains:
            self.domains[domain] = Forecaster(self.cfg, self.x_name, f"val/{domain}/pass_rate", self.bounded)
        return self.domains[domain]

    def _fit(self, ci: bool, source: str = "run", predict_at: Sequence[float] = ()) -> Any | None:
        from scalerl import curves

        self.last_error = None
        if len(self.x) < self.cfg.min_points:
            return None
        try:
            return curves.fit_curve(
                self.x,
                self.y,
                fit_from=self.cfg.fit_from,
                ci=ci,
                predict_at=predict_at,
                source=source,
                x_name=self.x_name,
                y_name=self.y_name,
                bounded=self.bounded,
            )
        except curves.FitError as exc:
            self.last_error = str(exc)
            return None

    def update(self, compute: float, value: float, domains: dict[str, float] | None = None) -> dict[str, float]:
        """Add one evaluation (``domains``: each domain's pass rate) and return the refitted forecast keys."""
        out: dict[str, float] = {}
        for d, v in (domains or {}).items():
            out.update({k.replace("forecast/", f"forecast/{d}/", 1): x for k, x in self._domain(d).update(compute, v).items()})
        if self.x and compute < self.x[-1]:
            compute = self.x[-1]  # compute never goes back (two evals with no training between them share it)
        self.x.append(compute)
        self.y.append(value)
        fit = self._fit(ci=True)
        if fit is None:
            return out
        self.last_fit = fit
        lo, hi = fit.A_ci
        trust = fit.trust or {}
        return {
            "forecast/A": fit.A,
            "forecast/A_lo": lo,
            "forecast/A_lo_open": float(bool(fit.A_ci_open[0])),  # 1: A_lo is the search's bound, no lower bound
            "forecast/A_hi": hi,
            "forecast/B": fit.B,
            "forecast/Cmid": fit.Cmid,
            "forecast/R0": fit.R0,
            "forecast/identified": float(fit.identified),
            "forecast/reliable": float(fit.reliable),
            # with no track record (too few evaluations for the inner backtest) there is no verdict, and 0 would
            # read as "lost to the ruler": the key is left out, as trust_err is (forecast values are never null)
            **({"forecast/better_than_ruler": float(bool(trust.get("better_than_ruler")))}
               if trust.get("forecast_err") is not None else {}),
            **{f"forecast/{k}": trust[j] for k, j in (("trust_err", "forecast_err"), ("carry_forward_err",) * 2)
               if trust.get(j) is not None},
            **out,
        }

    def _predict_at(self) -> list[float]:
        """Where ``scalerl fit`` predicts by default: the last compute and twice it (so fit.json's predictions are
        the offline fit's)."""
        return [float(max(self.x)), 2 * float(max(self.x))] if self.x else []

    def write_final(self, run_dir: Path, title: str, source: str = "metrics.jsonl",
                    stopped: str | None = None) -> dict[str, Any]:
        """fit.json and curve.png of the whole run (``stopped``: why ``--stop-when`` ended it before its budget,
        kept in fit.json as ``"stopped"``); the summary the runner returns."""
        from scalerl import curves
        from scalerl.atomic import write_json
        from scalerl.curves.extrapolation import half_budget_check

        source = str(Path(run_dir) / source)
        fit = self._fit(ci=True, source=source, predict_at=self._predict_at())
        if fit is None:  # no fit of the whole run: no fit.json or curve.png of an earlier part of it either
            for name in ("fit.json", "curve.png"):
                (Path(run_dir) / name).unlink(missing_ok=True)
            if stopped:  # but why the run stopped is kept (the run card reads it), with no fit beside it
                write_json(Path(run_dir) / "fit.json", {"fits": [], "stopped": stopped})
            return {"fit": None, "points": len(self.x)}
        check, note = half_budget_check(self.x, self.y, source, fit_from=self.cfg.fit_from)
        extrapolation = {**check.to_json(), "covers_full_A": check.covers_fit(fit)} if check else {"note": note}
        per_domain = {d: f._fit(ci=True, source=source, predict_at=f._predict_at()) for d, f in self.domains.items()}
        fits = [(self.y_name, fit)] + [(d, f) for d, f in per_domain.items() if f is not None]
        doc = {"fits": [f.to_json() for _, f in fits], "extrapolation": extrapolation}
        write_json(Path(run_dir) / "fit.json", {**doc, "stopped": stopped} if stopped else doc)
        labels = [name for name, _ in fits] if len(fits) > 1 else None
        curves.plot_fits([f for _, f in fits], Path(run_dir) / "curve.png", title=title, labels=labels)
        summary = {"fit": fit.to_json(), "extrapolation": extrapolation, "points": len(self.x)}
        if self.domains:
            summary["domains"] = {d: (f.to_json() if f is not None else None) for d, f in per_domain.items()}
        return summary
