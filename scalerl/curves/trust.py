"""The forecast scalerl reports, its interval, and how far to trust it (the extrapolation check of §4 and §5, run by the curve on
its own history).

Eq. 1 (A, B, Cmid) is what ``compare`` ranks; this module only decides what to *predict* for the evaluations after
the fit window, and says how well that prediction did on the run's own past.

* **Level.** Real evaluations are noisy, so the forecast starts from a robust estimate of where the run is now:
  the fitted law at the window's last compute plus the expected residual, the mean of two estimates (a forecast
  combination): the residuals' AR(1)-drift state from a Kalman filter (the noise model of :mod:`.uncertainty`,
  decaying back to the law with the horizon) and the mean residual of the window's last quarter (at least 3
  points, persistent). When Eq. 1 describes the tail both are ~0; when it misfits the tail (a saturating fit
  below the data) the level follows the data. After a collapse (:func:`scalerl.curves.fit.falls`) the last
  evaluation is the level.
* **Gain.** The law's further rise, ``law(C) − law(C_end)``, is followed or not (weight ``w ∈ {0, 1}``), chosen by an
  inner backtest on the window itself (time-series cross-validation): the law refitted on the window's first
  :data:`FIT_FRACTION` of points, scored on the rest, against the same level held flat. The weight with the
  smallest error wins, and the law is followed only if it also beat carrying the last value forward there: a
  law that did not beat a ruler on the run's own past is not followed into the future. When holding the level
  did no better than the ruler there either, the forecast *is* the ruler, the last evaluation held
  (``carries_last_value`` in the trust record): a forecast that lost to a ruler is not shown as something else. With fewer than
  :data:`MIN_CHOICE` points after the inner cut the backtest cannot tell the two apart (two noisy points decide
  nothing), and the forecast takes half the law's further gain (``w = 0.5``): the equal-weight combination of the
  two, the choice that is never the worse of them by more than half their difference; it too is dropped when it
  did not beat the ruler there (the trust line would otherwise call a forecast "no better than a ruler" and still
  follow it; on a flat, noisy 6-point Countdown window whose fit accelerates to A's bound, following half of it
  missed by 0.11 where the ruler missed by 0.03). A window too short for any
  inner backtest (fewer than :data:`MIN_SCORED` points after its cut) has even less to choose on and is combined
  the same way (following the law in full there overshot a 5-point run whose fit put A at its bound).
* **Interval.** A held-out evaluation differs from the forecast by white evaluation noise, the filter's error on
  the current drift and the forecast's distance from the filter's estimate (the level is the mean of two
  estimates; when the noise model reads every residual as drift the filter is certain of its own, and a band of
  the filter's error alone was zero wide at the window's end, excluding the value measured there), the drift's spread as it decorrelates over the evaluations ahead (all from the noise model),
  an error that grows linearly with the horizon beyond that (measured by the same inner backtest, per
  window-span of horizon), and the uncertainty of the law's further gain from its parameters (the gain of Eq. 1
  refitted at the ends of A's profile interval, App. A.5), in the share the forecast follows. The band is
  normal with that variance. Without the last term a run fitted before its midpoint got a band a few hundredths
  wide four window-lengths ahead while A's interval spanned a quarter; with it, pooled over the real-curve
  corpus's three cuts, 80 % bands cover ~80 % of the held-out points with no widening factor
  (``bench/forecast_backtest.py``; docs/RESULTS.md).
* **Trust.** The inner backtest is also the trust signal: "fitted on its first 60 %, the forecast predicted the
  next 40 % within e; carrying the last value forward: e_cf". ``better_than_ruler`` is ``e < e_cf``.

Nothing here changes Eq. 1's parameters. numpy + scipy only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
from scipy.special import ndtri

from scalerl.curves.sigmoid import Array

FIT_FRACTION = 0.6  # the inner backtest fits the window's first 60 % of points and scores the rest
MIN_SCORED = 2  # ... and needs at least this many points after its cut
WEIGHTS = (0.0, 1.0)  # the forecast follows the law's further gain, or holds the level
COMBINED = 0.5  # ... or, when the inner backtest scored too few points to choose, half of each
MIN_CHOICE = 3  # points the inner backtest must score before it chooses between holding and following
FILTER_MEMORY = 500  # the Kalman filter runs over at most the last this many residuals (a 10⁶-row run stays fast)

Law = Callable[[Array], Array]


@dataclass(frozen=True)
class Level:
    """Where the run is now. The residuals around the law are read as the noise model of :mod:`.uncertainty`:
    AR(1) drift (coefficient ``phi``, variance ``drift``) plus white evaluation noise (variance ``noise``). A
    Kalman filter over the residuals gives the drift's current value ``state`` (variance ``var``); a forecast
    ``h`` evaluations ahead adds ``phi^h · state`` to the law: a dip that the noise model calls drift decays
    back to the law, a run that has left the law for good (phi → 1) is followed."""

    law_end: float  # the law at the window's last compute
    state: float
    var: float
    phi: float
    drift: float
    noise: float
    spacing: float  # mean compute between evaluations in the window (the AR(1) time unit)
    tail_bias: float  # mean residual of the window's last quarter (at least 3 points)
    held: bool = False  # after a fall: the last evaluation is the level

    @property
    def level(self) -> float:
        return float(self.ahead(np.asarray(0.0), 0.0)[0]) + self.law_end

    def held_at(self, y_last: float) -> "Level":
        """This level held at the last evaluation ``y_last`` (what :func:`local_level` gives with ``held``: the
        noise model unchanged, the last residual as the level's offset)."""
        return replace(self, held=True, tail_bias=float(y_last) - self.law_end)

    def ahead(self, c: Any, x_end: float) -> tuple[Array, Array]:
        """(the residual expected at compute ``c``, its variance for a single evaluation there): the mean of the
        noise model's forecast and the tail's mean residual (two level estimates, one mean-reverting and one
        persistent; their average is the forecast combination that is right on both kinds of run)."""
        steps = np.maximum(np.asarray(c, dtype=float) - x_end, 0.0) / max(self.spacing, 1e-300)
        decay = self.phi**steps
        var = decay**2 * self.var + self.drift * (1 - decay**2) + self.noise
        if self.held:
            return np.full_like(steps, self.tail_bias), var
        # the forecast is the mean of the filter's estimate and the tail's: beside the filter's own variance, its
        # squared distance from the filter's estimate (a mean squared error, not only a variance)
        gap = 0.5 * (self.tail_bias - self.state * decay)
        return 0.5 * (self.state * decay + self.tail_bias), var + gap * gap


def local_level(law: Law, x: Array, y: Array, Q: Array | None = None, held: bool = False, n_params: int = 0) -> Level:
    """:class:`Level` at ``x[-1]``: (φ, λ) by :func:`.uncertainty.noise_correlation` on the residuals (``Q``: an
    orthonormal basis of the fit's tangent space; a constant column when None), the total variance ``σ²`` from
    the residuals' sum of squares, whose expectation is ``σ²·tr(MΣ)`` (``M = I − QQᵀ``, ``Σ`` the noise model's
    correlation; ``n − p`` for white noise, less when the fitted curve absorbs slow drift; parameters of the law
    that ``Q`` does not span, ``n_params`` in all, count as white), then the Kalman filter of the
    AR(1)-plus-noise model over the residuals in training order."""
    from scalerl.curves.uncertainty import correlated_dof, noise_correlation

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    e = y - law(x)
    if Q is None or Q.shape[1] == 0:
        Q = np.ones((e.size, 1)) / np.sqrt(e.size)
    phi, lam = noise_correlation(e, Q)
    dof = correlated_dof(Q, phi, lam) - max(n_params - Q.shape[1], 0)
    total = float(e @ e) / max(dof, 1.0)
    drift, noise = lam * total, (1 - lam) * total
    s, P = 0.0, drift
    for v in e[-FILTER_MEMORY:]:  # φ ≤ 0.98: the state forgets older residuals long before this many
        prior_s, prior_P = phi * s, phi * phi * P + drift * (1 - phi * phi)
        gain = prior_P / (prior_P + noise) if prior_P + noise > 0 else 1.0
        s, P = prior_s + gain * (float(v) - prior_s), (1 - gain) * prior_P
    spacing = float(x[-1] - x[0]) / max(x.size - 1, 1)
    m = 1 if held else min(e.size, max(3, round(e.size / 4)))
    return Level(float(law(x[-1:])[0]), s, P, phi, drift, noise, spacing, float(np.mean(e[-m:])), held)


@dataclass(frozen=True)
class Forecast:
    """The forecast after the window: ``level + weight·(law(C) − law(x_end))`` for ``C ≥ x_end``."""

    x_start: float
    x_end: float
    now: Level
    weight: float  # share of the law's further gain followed (0: hold the level)
    drift: float  # error sd added per window-span of horizon beyond the noise model (from the inner backtest)
    bounded: bool
    alternatives: tuple[Law, ...] = ()  # the law refitted with A at each end of its interval (App. A.5's profile)
    alternatives_z: float = 1.96  # the normal quantile of that interval's level: a gain difference / z is one sd

    def __call__(self, law: Law, c: Any) -> Array:
        c = np.asarray(c, dtype=float)
        resid, _ = self.now.ahead(c, self.x_end)
        after = self.now.law_end + resid + self.weight * (law(np.maximum(c, self.x_end)) - law(np.asarray(self.x_end)))
        out = np.where(c >= self.x_end, after, law(c))
        return np.clip(out, 0.0, 1.0) if self.bounded else out

    def gain_sd(self, law: Law, c: Any) -> Array:
        """Standard deviation of the law's further gain ``law(C) − law(x_end)`` from its parameters' uncertainty:
        the largest difference from the gain of a law refitted with A at an end of its interval, over that
        interval's normal quantile. Far beyond the window, where A decides the gain, this is what a band made
        only of noise leaves out (a run fitted before its midpoint can end anywhere in A's interval)."""
        c = np.maximum(np.asarray(c, dtype=float), self.x_end)
        end = np.asarray(self.x_end)
        gain = law(c) - law(end)
        diffs = [np.abs(alt(c) - alt(end) - gain) for alt in self.alternatives]
        return np.max(diffs, axis=0) / self.alternatives_z if diffs else np.zeros_like(c)

    def sd(self, law: Law, c: Any) -> Array:
        """Standard deviation of a single evaluation at ``c`` around the forecast: noise, the level's error, the
        random walk over the evaluations ahead, the backtest's drift over the horizon, and the uncertainty of
        the share of the law's further gain that the forecast follows (:meth:`gain_sd`)."""
        _, var = self.now.ahead(c, self.x_end)
        h = np.maximum(np.asarray(c, dtype=float) - self.x_end, 0.0) / max(self.x_end - self.x_start, 1e-300)
        return np.sqrt(var + (self.drift * h) ** 2 + (self.weight * self.gain_sd(law, c)) ** 2)

    def interval(self, law: Law, c: Any, level: float) -> tuple[Array, Array]:
        mid = self(law, c)
        half = float(ndtri(0.5 + level / 2)) * self.sd(law, c)
        lo, hi = mid - half, mid + half
        return (np.clip(lo, 0.0, 1.0), np.clip(hi, 0.0, 1.0)) if self.bounded else (lo, hi)

    def to_json(self) -> dict[str, Any]:
        return {"level": self.now.level, "gain_weight": self.weight, "noise_sd": float(np.sqrt(self.now.noise)),
                "level_sd": float(np.sqrt(self.now.var)), "phi": self.now.phi,
                "drift_sd": float(np.sqrt(self.now.drift)), "horizon_sd": self.drift}


@dataclass(frozen=True)
class Backtest:
    """The inner backtest: the law fitted on the window's first ``fit_fraction`` of points, scored on the rest."""

    fit_fraction: float
    n_fit: int
    n_scored: int
    errors: dict[float, float]  # weight -> mean |error| of the forecast with that weight
    carry_forward_err: float  # the last fitted value carried forward
    drift: float  # error sd per window-span of horizon, beyond noise
    margin: float = 0.0  # the standard error of a mean |error| over the scored points (noise sd / √n_scored)

    @property
    def weight(self) -> float:
        """The weight whose error, plus a handicap of ``(1 − w)·margin`` against not following the law, is smallest
        (the law's gain is dropped only when holding the level beat it by more than the backtest's own noise); and 0
        when even that forecast did no better than carrying the last value forward: a curve that did not beat a
        ruler on the run's own past is not followed into its future (the trust line then says "holding the
        current level"). :data:`COMBINED` when fewer than :data:`MIN_CHOICE` points were scored, under the same
        test: half the gain is taken only if half the gain beat carrying the last value forward there."""
        best = COMBINED if self.n_scored < MIN_CHOICE else min(
            WEIGHTS, key=lambda w: (round(self.errors[w] + (1 - w) * self.margin, 12), -w))
        return best if self.errors[best] < self.carry_forward_err else 0.0

    def ruler_won(self, weight: float) -> bool:
        """Whether carrying the last value forward did at least as well as the forecast with ``weight`` (after
        :attr:`weight` has dropped a gain that lost to it: holding the level lost too). The forecast is then the
        ruler itself, the run's last evaluation held: a forecast that did no better than a ruler on the run's past
        is not printed as something else (on the real-curve sets, pooled, this cut the curves that miss their best
        naive forecast by more than 0.01, docs/RESULTS.md)."""
        return self.errors[weight] >= self.carry_forward_err


def backtest(x: Array, y: Array, refit: Callable[[Array, Array], Law], bounded: bool,
             n_params: int = 0) -> Backtest | None:
    """:class:`Backtest` on the window's points ``(x, y)``; ``refit`` fits the law (``n_params`` parameters) to a
    prefix (it raises :class:`~scalerl.curves.series.FitError` when the prefix is too short). None when there are
    too few points."""
    from scalerl.curves.series import FitError

    n = x.size
    k = int(np.ceil(FIT_FRACTION * n))
    if n - k < MIN_SCORED:
        return None
    try:
        law = refit(x[:k], y[:k])
    except FitError:
        return None
    xf, yf, xh, yh = x[:k], y[:k], x[k:], y[k:]
    now = local_level(law, xf, yf, n_params=n_params)
    gain = law(xh) - law(xf[-1:])
    base, var = now.ahead(xh, float(xf[-1]))
    errors, resid = {}, {}
    for w in (*WEIGHTS, COMBINED):
        pred = now.law_end + base + w * gain
        pred = np.clip(pred, 0.0, 1.0) if bounded else pred
        resid[w] = yh - pred
        errors[w] = float(np.mean(np.abs(resid[w])))
    margin = float(np.sqrt((now.noise + now.drift) / (n - k)))
    bt = Backtest(FIT_FRACTION, k, n - k, errors, float(np.mean(np.abs(yh - yf[-1]))), 0.0, margin)
    h = (xh - xf[-1]) / max(xf[-1] - xf[0], 1e-300)
    excess = float(np.mean(resid[bt.weight] ** 2 - var))
    return replace(bt, drift=float(np.sqrt(max(excess, 0.0) / float(np.mean(h * h)))))


# what a forecast with each gain weight does after the window: (as the subject of the trust line, as its verb)
_DOES = {0.0: ("holding the current level", "holds the current level"),
         COMBINED: ("half the curve's further gain", "follows half the curve's further gain")}
_FOLLOWS = ("the curve", "follows the curve")


def following(weight: float) -> str:
    """What a forecast with gain weight ``weight`` does after the window, in words ("the forecast ...")."""
    return _DOES.get(weight, _FOLLOWS)[1]


def summary(bt: Backtest | None, n: int, weight: float, ruler: bool = False) -> str:
    """The trust line a user reads beside a forecast (``weight``: the one the reported forecast uses; ``ruler``:
    the forecast carries the last value forward, :meth:`Backtest.ruler_won`)."""
    what = _DOES.get(weight, _FOLLOWS)[0]
    if bt is None:
        return (f"too few points ({n}) in the fit window to backtest this run's own history: no track record "
                f"(the forecast takes {what.removeprefix('holding ')})")
    pct = round(100 * bt.n_fit / (bt.n_fit + bt.n_scored))
    err = bt.errors[weight]
    verdict = "better than" if err < bt.carry_forward_err else "no better than"
    return (f"fitted on its first {pct}%, {what} predicted the next {100 - pct}% within {err:.3f}; "
            f"carrying the last value forward: {bt.carry_forward_err:.3f} ({verdict} a ruler)"
            + ("; so the forecast carries the last value forward" if ruler else ""))


def trust_json(bt: Backtest | None, n: int, weight: float, warnings: list[str], ruler: bool = False) -> dict[str, Any]:
    """The ``trust`` object of a fit's JSON (``weight``: the one the reported forecast uses; ``ruler``: it carries
    the last value forward)."""
    err = bt.errors[weight] if bt else None
    return {
        "summary": summary(bt, n, weight, ruler),
        "fit_fraction": bt.n_fit / (bt.n_fit + bt.n_scored) if bt else None,
        "forecast_err": err,
        "carry_forward_err": bt.carry_forward_err if bt else None,
        "better_than_ruler": bool(err < bt.carry_forward_err) if bt else False,
        "gain_weight": weight,
        "carries_last_value": ruler,
        "warnings": list(warnings),
    }
