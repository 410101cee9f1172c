"""A live Eq. 1 forecast inside a TRL ``GRPOTrainer`` (or any ``transformers.Trainer``) run (§1–§2).

    from scalerl.integrations.trl import ForecastCallback

    trainer = GRPOTrainer(..., args=GRPOConfig(..., eval_strategy="steps", eval_steps=10, report_to=["tensorboard"]))
    ForecastCallback(metric="eval_reward", axis="flops", bounded=False).attach(trainer)
    trainer.evaluate()   # optional: the reward at zero compute is the paper's R0
    trainer.train()

Each time the trainer logs ``metric`` (an evaluation's ``eval_*`` key, or a training key such as ``reward``), the
callback reads the compute spent so far on the chosen axis, refits Eq. 1 with :class:`scalerl.forecast.Forecaster`
(the live forecast of scalerl's own runs: same fit, same identifiability rule, same minimum number of points) and
logs, through ``Trainer.log`` and so to every reporter the trainer has (TensorBoard, W&B, trainer_state.json):
the compute value (``compute/flops``, ``compute/device_hours`` or ``step``), ``forecast/A``, ``forecast/A_lo``,
``forecast/A_hi`` (an open end of the interval is left out when the fit is unbounded, and is the bound, 0 or 1,
when it is bounded: ``forecast/identified`` is then 0), ``forecast/B``, ``forecast/Cmid``, ``forecast/R0``,
``forecast/identified``, ``forecast/pred_at_budget`` (the reported forecast at the budget) with its 80 % band
``forecast/pred_at_budget_lo``/``_hi``, and the trust signal ``forecast/trust_err``, ``forecast/carry_forward_err``,
``forecast/better_than_ruler`` and ``forecast/reliable`` (see :mod:`scalerl.forecast`). At the end of training it writes ``fit.json`` and
``curve.png`` into ``args.output_dir``.

Compute axes:

* ``flops``: 6·P per token the trainer has processed (``state.num_input_tokens_seen``, which GRPOTrainer counts
  as prompt + completion tokens; a plain Trainer counts it with ``include_num_input_tokens_seen``), P the
  non-embedding parameter count: the convention of HF's ``floating_point_ops``. When no tokens are counted, the
  trainer's own ``state.total_flos``.
* ``device_hours``: seconds spent inside training steps (evaluation excluded) × ``args.world_size`` / 3600, the
  paper's GPU-hours (App. A.3), metered by :class:`scalerl.compute.ComputeMeter`.
* ``steps``: ``state.global_step``.

``pred_at_budget`` is the forecast reward (``FitResult.forecast``) at ``budget`` (a compute on the chosen axis); by default the compute the
run will have spent at ``max_steps``, extrapolated linearly from the compute per step so far.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from transformers import Trainer, TrainerCallback

from scalerl.compute import ComputeMeter
from scalerl.forecast import describe_fit, describe_trust
from scalerl.config import ForecastConfig
from scalerl.errors import UserError
from scalerl.forecast import Forecaster
from scalerl.timing import Stopwatch

AXES = {"flops": "compute/flops", "device_hours": "compute/device_hours", "steps": "step"}
log = logging.getLogger(__name__)


class ForecastCallback(TrainerCallback):
    """Fits Eq. 1 to ``metric`` against training compute as the trainer logs it; see the module docstring.

    ``bounded=False`` for rewards outside [0, 1] (TRL rewards are often ±1); ``min_points`` and ``fit_from`` are
    those of scalerl's own forecast (``ForecastConfig``)."""

    def __init__(
        self,
        metric: str,
        axis: str = "flops",
        *,
        budget: float | None = None,
        bounded: bool = True,
        min_points: int = 6,
        fit_from: float | None = None,
    ) -> None:
        if axis not in AXES:
            raise UserError(f"axis {axis!r} is not one of {', '.join(AXES)}")
        self.metric, self.axis, self.budget = metric, axis, budget
        self.x_name = AXES[axis]
        self.forecaster = Forecaster(
            ForecastConfig(min_points=min_points, fit_from=fit_from), x_name=self.x_name, y_name=metric, bounded=bounded
        )
        self.trainer: Trainer | None = None
        self.meter: ComputeMeter | None = None
        self._step = Stopwatch()  # the running optimizer step, metered as training wall clock
        self._logging = False
        self._before_train: list[dict[str, Any]] = []  # log_history entries of evaluations before train()
        self._warned: set[str] = set()  # one warning each: a skipped value, no fit from enough points
        self.last: dict[str, float] = {}  # the latest forecast logged

    def attach(self, trainer: Trainer) -> "ForecastCallback":
        """Register with ``trainer`` (its ``Trainer.log`` carries the forecast to the trainer's reporters)."""
        self.trainer = trainer
        trainer.add_callback(self)
        return self

    # ------------------------------------------------------------------------------------------- compute
    def _meter(self, args: Any, model: Any) -> ComputeMeter:
        if self.meter is None:
            params = model.num_parameters(exclude_embeddings=True) if hasattr(model, "num_parameters") else 0
            # a Trainer step both generates and trains on every device of the run: devices x step wall clock
            self.meter = ComputeMeter(n_params=int(params), devices=max(1, int(args.world_size)))
        return self.meter

    def compute(self, state: Any) -> float:
        """Compute spent so far on the callback's axis."""
        if self.axis == "steps":
            return float(state.global_step)
        meter = self.meter
        if meter is None:  # nothing trained yet (an evaluation before train(): the paper's R0 point)
            return 0.0
        if self.axis == "device_hours":
            return meter.device_hours
        tokens = int(getattr(state, "num_input_tokens_seen", 0) or 0)
        if tokens:
            return 6.0 * meter.n_params * tokens
        # the Trainer adds a step's flos to state.total_flos only when it logs or saves (store_flos): an evaluation
        # between two logs would read the compute of the last log. Add the flos counted since, on every device.
        pending = float(getattr(self.trainer, "current_flos", 0.0) or 0.0) * meter.devices
        return float(state.total_flos) + pending

    # ----------------------------------------------------------------------------------------- callbacks
    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if self.trainer is None:
            raise UserError("ForecastCallback needs the trainer: use ForecastCallback(...).attach(trainer)")
        self._meter(args, model if model is not None else self.trainer.model)
        # train() starts a fresh TrainerState: keep the R0 evaluation (and its forecast entry) in its log_history
        state.log_history[:0] = [e for e in self._before_train if e not in state.log_history]

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._step.start()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        seconds = self._step.stop()
        if self.meter is not None:
            self.meter.add_wall(seconds)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if self.meter is None and state.log_history and state.log_history[-1] not in self._before_train:
            self._before_train.append(state.log_history[-1])
        value = (logs or {}).get(self.metric)
        if self._logging or value is None or not state.is_world_process_zero:
            return
        try:
            value = float(value)
        except (TypeError, ValueError):
            value = math.nan
        if not math.isfinite(value):  # a NaN/inf evaluation is no point: it would leave every later fit failing
            self._warn_once("value", "scalerl forecast: %s = %r at step %s is not a finite number; not fitted",
                            self.metric, (logs or {}).get(self.metric), state.global_step)
            return
        x = self.compute(state)
        values = self.forecaster.update(x, value)
        if not values and len(self.forecaster.x) >= self.forecaster.cfg.min_points:
            self._warn_once("fit", "scalerl forecast: no fit of %s from %d points: %s", self.metric,
                            len(self.forecaster.x), self._no_fit_reason())
        out = {self.x_name: x} if self.axis != "steps" else {}
        out.update({k: v for k, v in values.items() if v is not None})
        if values:
            fit, budget = self.forecaster.last_fit, self._budget(args, state, x)
            lo, hi = fit.forecast_interval([budget], level=0.8)
            out["forecast/pred_at_budget"] = float(fit.forecast(budget))
            out["forecast/pred_at_budget_lo"], out["forecast/pred_at_budget_hi"] = float(lo[0]), float(hi[0])
            self.last = out
        if out and self.trainer is not None:
            self._logging = True
            try:  # the base class's log: a subclass's (TRL's) would merge and clear its own pending metrics
                Trainer.log(self.trainer, dict(out))
            finally:
                self._logging = False

    def _warn_once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message, *args)

    def _no_fit_reason(self) -> str:
        """Why the forecaster has no fit: too few points, or the fit's own one-line error (e.g. a metric outside
        [0, 1] while ``bounded``, a constant metric), as the forecaster's last fit left it."""
        f = self.forecaster
        if len(f.x) < f.cfg.min_points:
            return f"fewer than {f.cfg.min_points} points"
        return f.last_error or "the fit failed"

    def _budget(self, args: Any, state: Any, x: float) -> float:
        if self.budget is not None:
            return self.budget
        max_steps = state.max_steps or args.max_steps
        return x * max_steps / state.global_step if state.global_step and max_steps > 0 else x

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        out = Path(args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        final = self.forecaster.write_final(out, title=f"{self.metric} vs {self.x_name}", source="trainer_state.json")
        fit = final["fit"]
        if fit is None:
            log.warning("scalerl forecast: no fit from %d points of %s: %s", final["points"], self.metric,
                        self._no_fit_reason())
        else:  # the same reading as scalerl's own runs: an estimate when identified, else a lower bound and why
            log.warning("scalerl forecast: %s, B = %.2f; trust: %s; wrote %s", describe_fit(fit), fit["B"],
                        describe_trust(fit), out / "fit.json")
