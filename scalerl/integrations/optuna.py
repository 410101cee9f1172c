"""An Optuna pruner that stops a trial when its fitted scaling curve says it cannot win (paper §1, the third
principle; the rule itself is :mod:`scalerl.experiments.pruning`, the same one ``scalerl sweep --prune`` uses).

A trial reports its held-out reward with ``trial.report(reward, step)``, where ``step`` is on the compute axis
(Optuna's steps are integers: report compute in a unit that makes them so, e.g. GPU-seconds or thousands of
tokens, or report the training step and give ``compute_per_step``). At each report the pruner fits Eq. 1 to this
trial and to every other running or finished trial, and prunes this one when the upper end of its outlook lies
more than ``margin`` below the leader's lower end::

    import optuna
    from scalerl.integrations.optuna import ForecastPruner

    study = optuna.create_study(direction="maximize", pruner=ForecastPruner(budget=2000))
    def objective(trial):
        lr = trial.suggest_float("lr", 1e-5, 1e-3, log=True)
        for step, reward in train_and_evaluate(lr):          # your trainer, evaluating every so often
            trial.report(reward, step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return reward
    study.optimize(objective, n_trials=20)
    ForecastPruner.decisions  # {trial number: the last Decision, with the numbers that decided}

``optuna`` is an optional extra (``pip install -e ".[optuna]"``).
"""

from __future__ import annotations

import math
from typing import Any

import optuna

from scalerl.experiments.pruning import DEFAULT_LEVEL, DEFAULT_MARGIN, MIN_POINTS, Decision, Outlook, decide
from scalerl.experiments.pruning import fit_outlook

_CONSIDERED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.RUNNING)


class ForecastPruner(optuna.pruners.BasePruner):
    """Prunes a trial whose forecast cannot reach the best trial's within ``margin`` (see the module docstring).

    ``budget``: the compute each trial would get unpruned, in the units of its reported steps (times
    ``compute_per_step``). ``level``: the forecast interval used while a trial's A is not identified.
    ``bounded``: rewards in [0, 1] (False for rewards such as ±1); a report outside [0, 1] while ``bounded`` is a
    ValueError naming it (a bounded fit cannot take it: the pruner would otherwise never forecast)."""

    def __init__(self, budget: float, *, margin: float = DEFAULT_MARGIN, level: float = DEFAULT_LEVEL,
                 min_points: int = MIN_POINTS, bounded: bool = True, compute_per_step: float = 1.0) -> None:
        if not budget > 0 or not compute_per_step > 0 or margin < 0 or not 0 < level < 1:
            raise ValueError("ForecastPruner needs budget > 0, compute_per_step > 0, margin >= 0 and 0 < level < 1")
        self.budget, self.margin, self.level = float(budget), float(margin), float(level)
        self.min_points, self.bounded, self.compute_per_step = int(min_points), bounded, float(compute_per_step)
        self.decisions: dict[int, Decision] = {}
        # the reports -> their outlook: keyed by what was reported, not by trial number (a pruner reused for another
        # study meets trial 0 again with other reports)
        self._outlooks: dict[tuple[tuple[int, float], ...], Outlook | None] = {}

    def _outlook(self, trial: optuna.trial.FrozenTrial) -> Outlook | None:
        # NaN or ±inf: not a report (an infinite one would leave the trial's outlook unbounded: never pruned)
        values = sorted((step, v) for step, v in trial.intermediate_values.items() if math.isfinite(v))
        if self.bounded:
            outside = next(((step, v) for step, v in values if not 0 <= v <= 1), None)
            if outside is not None:  # Eq. 1 bounded to [0, 1] cannot fit it: refused, not silently never pruned
                raise ValueError(
                    f"ForecastPruner(bounded=True) forecasts a reward in [0, 1], but trial {trial.number} reported "
                    f"{outside[1]:g} at step {outside[0]}; pass bounded=False for a metric outside [0, 1] (a reward "
                    "of ±1, a score in percent)")
        key = tuple(values)
        if key not in self._outlooks:
            x = [step * self.compute_per_step for step, _ in values]
            y = [v for _, v in values]
            self._outlooks[key] = fit_outlook(x, y, self.budget, level=self.level, bounded=self.bounded,
                                              min_points=self.min_points)
        return self._outlooks[key]

    def prune(self, study: optuna.study.Study, trial: optuna.trial.FrozenTrial) -> bool:
        if study.direction != optuna.study.StudyDirection.MAXIMIZE:
            raise ValueError("ForecastPruner forecasts a reward to maximise; create the study with direction='maximize'")
        outlooks: dict[Any, Outlook | None] = {
            t.number: self._outlook(t) for t in study.get_trials(deepcopy=False, states=_CONSIDERED)
            if t.number != trial.number
        }
        outlooks[trial.number] = self._outlook(trial)
        decision = decide(outlooks, self.margin)[trial.number]
        self.decisions[trial.number] = decision
        return decision.stop
