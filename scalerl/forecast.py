"""The live forecast (§2): after each evaluation, fit the sigmoid of Eq. 1 to validation pass rate versus
training compute so far, and report where the run is heading (``forecast/A`` with its interval, ``B``,
``Cmid``). At the end of a run the same fit is written to ``fit.json`` and drawn in ``curve.png``.

The evaluation at zero compute is the initial reward R0 (design.md). Fitting uses ``scalerl.curves``; with
``forecast.fit_from`` unset the early points are left out as ``scalerl fit`` leaves them out
(``curves.fit.default_fit_from``, App. A.7).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scalerl.config import ForecastConfig


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

        fit = self._fit(ci=True, source=str(Path(run_dir) / source))
        if fit is None:
            return {"fit": None, "points": len(self.x)}
        write_json(Path(run_dir) / "fit.json", {"fits": [fit.to_json()]})
        curves.plot_fits([fit], Path(run_dir) / "curve.png", title=title)
        return {"fit": fit.to_json(), "points": len(self.x)}
