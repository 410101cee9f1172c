"""The live forecast (§2): after each evaluation, fit the sigmoid of Eq. 1 to validation pass rate versus
training compute so far, and report where the run is heading (``forecast/A`` with its interval, ``B``,
``Cmid``). At the end of a run the same fit is written to ``fit.json`` and drawn in ``curve.png``.

The evaluation at zero compute is the initial reward R0 (design.md). Fitting uses ``scalerl.curves``; with
``forecast.fit_from`` unset the early points are left out as ``scalerl fit`` leaves them out
(``curves.fit.default_fit_from``, App. A.7).

A fit that has not identified A (the run has not passed Cmid, or the interval on A is open at the top) is shown
as a lower bound, ``A ≥ lo``: the fitted A then sits at the search's bound and is no estimate (§2: fit past Cmid
before trusting A). ``fit.json`` also holds the paper's extrapolation check (§2, §5.5): the fit on the first half
of the compute scored on the second half, and whether its interval on A covers the whole run's A.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scalerl.config import ForecastConfig


def describe_A(A: float, lo: float | None, hi: float | None, identified: bool, past_cmid: bool) -> str:
    """The asymptote as a user should read it: ``A = 0.62 [0.58, 0.66]`` when identified, else the lower end of
    its interval as a bound with the reason (never the search's bound as if it were an estimate)."""
    if identified:
        band = f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else ""
        return f"A = {A:.3f}{band}"
    why = "the interval on A is open at the top" if past_cmid else "the run has not passed Cmid"
    return f"A ≥ {lo if lo is not None else 0.0:.2f}, not identified yet: {why}"


def describe_record(record: dict[str, Any]) -> str | None:
    """:func:`describe_A` for a metrics line (``forecast/*`` keys), or None when it holds no forecast."""
    if record.get("forecast/A") is None:
        return None
    past = record.get("compute/device_hours", 0.0) >= record.get("forecast/Cmid", float("inf"))
    return describe_A(record["forecast/A"], record.get("forecast/A_lo"), record.get("forecast/A_hi"),
                      bool(record.get("forecast/identified")), past)


def describe_fit(fit: dict[str, Any]) -> str:
    """:func:`describe_A` for a fit in ``fit.json`` form."""
    lo, hi = fit["A_ci"] or (None, None)
    return describe_A(fit["A"], lo, hi, bool(fit["identified"]), fit["fit_window"][1] >= fit["Cmid"])


class Forecaster:
    def __init__(
        self, cfg: ForecastConfig, x_name: str = "compute/device_hours", y_name: str = "val/pass_rate", bounded: bool = True
    ) -> None:
        self.cfg = cfg
        self.x_name, self.y_name, self.bounded = x_name, y_name, bounded  # other trainers' axes (integrations/)
        self.x: list[float] = []
        self.y: list[float] = []

    def state_dict(self) -> dict[str, Any]:
        return {"x": list(self.x), "y": list(self.y)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.x, self.y = list(state["x"]), list(state["y"])

    def _fit(self, ci: bool, source: str = "run") -> Any | None:
        from scalerl import curves

        if len(self.x) < self.cfg.min_points:
            return None
        try:
            return curves.fit_curve(
                self.x,
                self.y,
                fit_from=self.cfg.fit_from,
                ci=ci,
                source=source,
                x_name=self.x_name,
                y_name=self.y_name,
                bounded=self.bounded,
            )
        except curves.FitError:
            return None

    def update(self, compute: float, value: float) -> dict[str, float]:
        if self.x and compute <= self.x[-1]:
            compute = self.x[-1] + 1e-12  # two evals with no training between them
        self.x.append(compute)
        self.y.append(value)
        fit = self._fit(ci=True)
        if fit is None:
            return {}
        lo, hi = fit.A_ci
        return {
            "forecast/A": fit.A,
            "forecast/A_lo": lo,
            "forecast/A_hi": hi,
            "forecast/B": fit.B,
            "forecast/Cmid": fit.Cmid,
            "forecast/R0": fit.R0,
            "forecast/identified": float(fit.identified),
        }

    def write_final(self, run_dir: Path, title: str, source: str = "metrics.jsonl") -> dict[str, Any]:
        from scalerl import curves
        from scalerl.atomic import write_json
        from scalerl.curves.extrapolation import half_budget_check

        source = str(Path(run_dir) / source)
        fit = self._fit(ci=True, source=source)
        if fit is None:
            return {"fit": None, "points": len(self.x)}
        check, note = half_budget_check(self.x, self.y, source, fit_from=self.cfg.fit_from)
        extrapolation = {**check.to_json(), "covers_full_A": check.covers(fit.A)} if check else {"note": note}
        write_json(Path(run_dir) / "fit.json", {"fits": [fit.to_json()], "extrapolation": extrapolation})
        curves.plot_fits([fit], Path(run_dir) / "curve.png", title=title)
        return {"fit": fit.to_json(), "extrapolation": extrapolation, "points": len(self.x)}
