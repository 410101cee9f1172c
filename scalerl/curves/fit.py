"""Fit Eq. 1 to a measured curve and extrapolate it: the paper's predictive framework (§1, §2).

:func:`fit_curve` is the one entry point (the CLI, ``compare``, the trainer's live forecast and the report all
call it). It selects the fit window, fixes R0 to the reward measured at compute 0 when there is one (docs/architecture.md;
the paper's "initial reward at 0 training compute", ICLR §2), runs the chosen method, puts a confidence interval
on A (:mod:`.uncertainty`), flags an unidentified asymptote, and scores the held-out tail after the window —
the paper's extrapolation check (§4, §5: fit on the first part, predict the rest).

Raises :class:`~scalerl.curves.series.FitError` (a ``UserError``) when the data cannot be fitted; a
caller fitting while data is still arriving should catch exactly that.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np
from scipy.special import ndtri

from scalerl.curves import paper, power, trust, uncertainty, vp
from scalerl.curves.series import FitError, Series, TooFewPoints, check, looks_like_percent
from scalerl.curves.sigmoid import Array, power_law, sigmoid, sigmoid_inverse
from scalerl.errors import UserError
from scalerl.registry import Registry

Grids = tuple["Array | None", "Array | None"]  # (A grid, Cmid grid) of the grid-search methods; None: the default

# How Eq. 1 is fitted: (problem, vp grid, grids) -> parameters. Only the grid searches read ``grids``.
FIT_METHODS: Registry[Callable[[vp.Problem, vp.Grid, Grids], vp.Params]] = Registry("fit method")
FIT_METHODS.register("vp")(lambda p, grid, grids: vp.fit(p, grid))
FIT_METHODS.register("paper")(lambda p, grid, grids: paper.fit(p, *grids))
FIT_METHODS.register("paper-data")(lambda p, grid, grids: paper.fit(p, *paper.data_grids(p)))
GRID_METHODS = ("paper",)  # the methods that take --a-grid / --cmid-grid
MODELS = ("sigmoid", "power")  # Eq. 1, or the power law of App. A.4
REACHED_NOISE = 2.0  # a bounded curve has reached its bound (1) when its last quarter is this many RMSEs from it

EARLY_FRACTION = 1500 / 16000  # App. A.7: the paper's fits start after ~1.5k of a 16k GPU-h run
MIN_KEPT = 6  # the early-point exclusion never leaves fewer points than this in the window
JUMP_RATIO = 20.0  # an early jump rises at least this many times faster than the rest of the window ...
JUMP_SHARE = 0.25  # ... ends within this share of the window's compute ...
JUMP_NOISE = 5.0  # ... and rises by at least this many noise σ (and half the window's total rise) ...
JUMP_SECOND = 0.1  # ... and a second phase follows: a further rise of 5 σ and this share of the jump ...
JUMP_SUSTAINED = 0.15  # ... still rising: at least this share of it after its midpoint (a sigmoid's tail is not)
FALL_NOISE = 10.0  # a collapse: the last evaluation this many noise σ below the window's best mean of 3 (no excursion of noise, even heavy-tailed, gets there)
FALL_GIVEN_BACK = 0.5  # ... or a sustained fall that gives back more than this share of the rise before it
FALL_GIVEN_BACK_NOISE = 5.0  # ... with the last two evaluations each this many σ below the peak
DECLINE_POINTS = 8  # a steady decline (:func:`declines`) is read from at least this many evaluations after the peak
DECLINE_T = 5.0  # ... whose least-squares slope is this many standard errors below 0
DECLINE_NOISE = 3.0  # ... the last quarter this many noise σ below the peak
DECLINE_GIVEN_BACK = 0.2  # ... giving back at least this share of the rise to the peak
START_NOISE = 3.0  # a window whose last quarter is this many noise σ below the reward at compute 0 has fallen (Eq. 1 cannot)
MIN_PAST_CMID = 3  # A is called identified only with at least this many evaluations past Cmid (one pins nothing)
BOUND_TOL = 1e-3  # relative distance to a search bound at which B or Cmid counts as "at the bound"


@dataclass
class FitResult:
    """A fitted Eq. 1 curve with its data, interval, checks and predictions. ``to_json()`` is the CLI's format."""

    source: str
    x_name: str
    y_name: str
    method: str
    R0: float
    A: float
    B: float
    Cmid: float
    R0_fixed: bool
    A_fixed: bool
    bounded: bool
    A_ci: tuple[float | None, float | None] | None  # None: not computed; a None end: open (unbounded)
    A_ci_open: tuple[bool, bool]
    ci_level: float
    identified: bool
    n_points: int
    fit_window: tuple[float, float]
    rmse: float
    sse: float
    x: Array  # every point of the source, in training order
    y: Array
    in_window: Array  # bool mask over x: the points fitted
    predictions: list[tuple[float, float]] = field(default_factory=list)
    heldout: dict[str, float] | None = None
    target: dict[str, Any] | None = None
    noise: dict[str, float] | None = None
    warnings: list[str] = field(default_factory=list)
    model: str = "sigmoid"  # "power": R = A − D·C^(−B) (App. A.4); R0 and Cmid then describe the same tail
    D: float | None = None  # the power law's constant
    grids: Grids = (None, None)  # the grid-search method's grids, so that a refit uses the same ones
    fit_start: dict[str, Any] | None = None  # where the window starts and by which rule
    forecaster: trust.Forecast | None = None  # the forecast after the window (None: not computed)
    trust: dict[str, Any] | None = None  # how the run's own history backtests (:func:`trust.trust_json`)
    reliable: bool = True  # False: Eq. 1 does not describe the data (the forecast then holds the current level), or
    # the forecast leaves anything the window supports (flagged, not changed: on the real-curve corpus a short window's
    # law that rises past its data was more often right than holding the level; docs/RESULTS.md, fourteenth session)

    def predict(self, c: Any) -> Array:
        """The fitted law (Eq. 1, or the power law) at compute ``c``."""
        if self.model == "power":
            return power_law(c, self.A, float(self.D), self.B)
        return sigmoid(c, self.R0, self.A, self.B, self.Cmid)

    def forecast(self, c: Any) -> Array:
        """The reward scalerl forecasts at compute ``c``: inside the window the fitted law; after it, the current
        level plus the share of the law's further gain that the run's own history supports (:mod:`.trust`).
        These are the numbers printed and written as predictions, and the ones ``heldout`` scores."""
        return self.forecaster(self.predict, c) if self.forecaster is not None else self.predict(c)

    def forecast_interval(self, c: Any, level: float = 0.8) -> tuple[Array, Array]:
        """(lo, hi) arrays: where a single evaluation at compute ``c`` should fall with probability ``level``
        (evaluation noise, the level's error and drift growing with the horizon; calibrated on real curves)."""
        if not 0 < level < 1:
            raise UserError(f"interval level must be between 0 and 1, got {level}")
        if self.forecaster is None:
            mid = np.asarray(self.predict(c), dtype=float)
            return mid, mid
        return self.forecaster.interval(self.predict, c, level)

    def compute_to_reach(self, r: float) -> float:
        """The compute at which the fitted curve reaches reward ``r`` (``inf`` if it never does)."""
        if self.model == "power":
            return float((float(self.D) / (self.A - r)) ** (1 / self.B)) if r < self.A else float("inf")
        return float(sigmoid_inverse(r, self.R0, self.A, self.B, self.Cmid))

    def format_interval(self) -> str:
        """``[lo, hi]`` of the interval on A, ``open`` for an end the profile never reached; '' if there is none."""
        if self.A_ci is None or self.A_fixed:
            return ""
        return format_interval(self.A_ci, self.A_ci_open)

    @property
    def law(self) -> str:
        """The law fitted, in words (:func:`law_name`)."""
        return law_name(self.model)

    def format_A(self) -> str:
        """:func:`format_A` of this fit; the power law's A with the note that it has no interval."""
        if self.model == "power" and not self.A_fixed:
            return f"{self.A:.3f} (no interval)"
        return format_A(self.A, self.A_lower, self.identified)

    @property
    def support(self) -> tuple[float, float]:
        """The rewards the window supports: its range, widened by the range on each side (a forecast outside it is
        an extrapolation the data do not back, :func:`_check_support`)."""
        yw = self.y[self.in_window]
        return float(yw.min()) - float(np.ptp(yw)), float(yw.max()) + float(np.ptp(yw))

    def supports(self, value: float) -> bool:
        """Whether a forecast ``value`` lies within :attr:`support`."""
        lo, hi = self.support
        return lo <= value <= hi

    @property
    def A_lower(self) -> float | None:
        """The lower end of A's interval the data give: None when there is no interval or it is open below (its
        reported end is then the search's bound, e.g. R0, not a measurement)."""
        return lower_end_given(self.A_ci, self.A_ci_open)

    @property
    def heldout_mask(self) -> Array:
        return self.x > self.fit_window[1]

    def to_json(self) -> dict[str, Any]:
        def finite(v: float) -> float | None:
            return float(v) if np.isfinite(v) else None

        return {
            "source": self.source,
            "x": self.x_name,
            "y": self.y_name,
            "method": self.method,
            "model": self.model,
            "R0": finite(self.R0),
            "A": self.A,
            "B": self.B,
            "Cmid": finite(self.Cmid),
            "D": self.D,
            "A_ci": list(self.A_ci) if self.A_ci is not None else None,
            "identified": self.identified,
            "n_points": self.n_points,
            "fit_window": list(self.fit_window),
            "rmse": self.rmse,
            "predictions": [{"x": c, "y": r, "lo_80": float(lo), "hi_80": float(hi), "supported": self.supports(r)}
                            for (c, r), lo, hi in zip(self.predictions, *self.forecast_interval([c for c, _ in self.predictions]))],
            "heldout": self.heldout,
            "target": self.target,
            "R0_fixed": self.R0_fixed,
            "A_fixed": self.A_fixed,
            "bounded": self.bounded,
            "A_ci_open": list(self.A_ci_open),
            "ci_level": self.ci_level,
            "noise": self.noise,
            "warnings": list(self.warnings),
            "fit_start": self.fit_start,
            "reliable": self.reliable,
            "forecast": self.forecaster.to_json() if self.forecaster is not None else None,
            "trust": self.trust,
        }


def format_compute(v: float) -> str:
    """A compute value for people: 16,000 rather than 1.6e+04; tiny or huge values in scientific notation."""
    return f"{v:,.0f}" if 100 <= abs(v) < 1e7 else f"{v:.3g}"


def default_fit_from(
    x: Sequence[float] | Array, fit_until: float | None = None, y: Sequence[float] | Array | None = None
) -> float:
    """Where a fit starts when the user does not say: the early-point exclusion of §2.1 / App. A.7.

    The paper leaves out the first ~1.5k of 16k GPU-h (about the first epoch), where the reward rises almost
    linearly and is noisiest relative to its change; larger cutoffs left too few points. The same share,
    :data:`EARLY_FRACTION` (≈ 9.4 %) of the window's last compute (the largest ≤ ``fit_until``), is cut here, but
    never so much that fewer than :data:`MIN_KEPT` points remain. The point at compute 0 still fixes R0.

    With the rewards ``y``, the start moves past an early jump if there is one (:func:`jump_end`)."""
    xa = np.asarray(x, dtype=float)
    if xa.size == 0:
        return 0.0
    inside = np.sort(xa[(xa > 0) & (xa <= (fit_until if fit_until is not None else np.inf))])
    if inside.size < MIN_KEPT:
        return 0.0
    start = min(EARLY_FRACTION * float(inside[-1]), float(inside[-MIN_KEPT]))
    jump = jump_end(xa, np.asarray(y, dtype=float), fit_until) if y is not None else None
    return max(start, jump) if jump is not None else start


def last_quarter(y: Array) -> Array:
    """The window's last quarter of evaluations, at least 3 (where a run is now, robust to one noisy point)."""
    return y[-max(3, y.size // 4):]


def step_noise(y: Array) -> float:
    """σ of one evaluation from the median successive difference (robust: one jump or collapse does not inflate
    it; a trend that moves every step does)."""
    return 1.4826 * float(np.median(np.abs(np.diff(y)))) / np.sqrt(2)


def best_of_3(y: Array) -> tuple[int, float]:
    """(start index, value) of the best mean of 3 consecutive evaluations: a run's peak, robust to one lucky one."""
    smooth = np.convolve(y, np.ones(3) / 3, mode="valid")
    top = int(np.argmax(smooth))
    return top, float(smooth[top])


def jump_end(x: Array, y: Array, fit_until: float | None = None) -> float | None:
    """Where an early transient (format learning, 0.00 → 0.46 in a few evaluations) ends, or None.

    The rule, on the points up to ``fit_until`` (compute 0 included) with the reward smoothed by a running
    median of 3: the window starts at the evaluation, within the first :data:`JUMP_SHARE` of the window's compute
    and keeping :data:`MIN_KEPT` points, that maximises (average rate of rise before it) / (average rate after it),
    when that ratio exceeds :data:`JUMP_RATIO`, the rise before it is at least half the window's total rise and
    :data:`JUMP_NOISE` noise σ, and the rise after it (the second phase) is at least :data:`JUMP_NOISE` σ and
    :data:`JUMP_SECOND` of the jump, with :data:`JUMP_SUSTAINED` of that after its midpoint. One sigmoid does not
    rise, slow twentyfold, and keep rising steadily; a steep sigmoid that has saturated has no sustained second
    phase (its remaining rise comes right after the knee) and keeps its early points. The paper drops early points for the same
    reason (App. A.7): they are not the scaling regime."""
    from scipy.ndimage import median_filter

    keep = x <= (fit_until if fit_until is not None else np.inf)
    xs, ys = x[keep], y[keep]
    if xs.size < MIN_KEPT + 2:
        return None
    s = median_filter(ys, size=3, mode="nearest")
    sigma = step_noise(ys)
    x0, s0, x_end, s_end = xs[0], s[0], xs[-1], float(np.mean(s[-3:]))
    total = float(s.max()) - s0
    best, best_ratio = None, JUMP_RATIO
    for k in range(1, xs.size - MIN_KEPT + 1):
        if xs[k] - x0 > JUMP_SHARE * (x_end - x0):
            break
        rise = s[k] - s0
        if rise < 0.5 * total or rise < JUMP_NOISE * sigma or rise <= 0:
            continue
        later = s_end - s[k]
        late_half = s_end - float(np.interp((xs[k] + x_end) / 2, xs, s))
        if later < max(JUMP_NOISE * sigma, JUMP_SECOND * rise) or late_half < JUMP_SUSTAINED * later:
            continue  # no sustained second phase: a steep sigmoid that has saturated, as Eq. 1 describes it
        before = rise / (xs[k] - x0)
        after = later / (x_end - xs[k])
        if before / after > best_ratio:
            best, best_ratio = float(xs[k]), before / after
    return best


def window_mask(x: Array, fit_from: float | None, fit_until: float | None) -> Array:
    """Points fitted: compute > 0 (compute 0 gives R0), ≥ ``fit_from`` and ≤ ``fit_until``."""
    m = x > 0
    if fit_from is not None:
        m &= x >= fit_from
    if fit_until is not None:
        m &= x <= fit_until
    return m


def fit_curve(
    x: Sequence[float] | Array,
    y: Sequence[float] | Array,
    *,
    method: str = "vp",
    model: str = "sigmoid",
    a_grid: Array | None = None,
    cmid_grid: Array | None = None,
    fit_from: float | None = None,
    fit_until: float | None = None,
    fit_until_fraction: float | None = None,
    bounded: bool = True,
    ci: bool = True,
    level: float = 0.95,
    R0: float | None = None,
    A: float | None = None,
    predict_at: Sequence[float] = (),
    target: float | None = None,
    source: str = "data",
    x_name: str = "compute",
    y_name: str = "reward",
    rows: Sequence[int] | Array | None = None,
) -> FitResult:
    """Fit Eq. 1 ``R(C) = R0 + (A − R0)/(1 + (Cmid/C)^B)`` to points ``(x, y)`` given in training order.

    ``fit_from``/``fit_until`` bound the window in compute units (``fit_from`` None: :func:`default_fit_from`,
    the paper's early-point exclusion; 0: from the first evaluation); ``fit_until_fraction`` (0 < f ≤ 1) sets it to a
    fraction of the largest compute instead (the paper fits the first half and predicts the end, §5). R0 is fixed
    to the mean reward at compute 0 when there is such a point (or to ``R0`` if given), otherwise fitted. ``A``
    fixes the asymptote (the comparison rule of App. A.5 refits runs at a shared A). With ``bounded``,
    ``0 ≤ R0 ≤ A ≤ 1``. ``model`` "power" fits App. A.4's power law instead of Eq. 1; ``a_grid``/``cmid_grid``
    replace the grid-search method's grids. Raises :class:`FitError` when the data cannot be fitted."""
    xa, ya = np.asarray(x, dtype=float).ravel(), np.asarray(y, dtype=float).ravel()
    if xa.shape != ya.shape:
        raise FitError(f"{source}: {xa.size} compute values but {ya.size} rewards")
    row_ids = np.arange(1, xa.size + 1) if rows is None else np.asarray(rows)
    check(xa, ya, row_ids, bounded=bounded, source=source)
    if not 0 < level < 1:
        raise UserError(f"confidence level must be between 0 and 1, got {level}")
    if fit_until_fraction is not None:
        if not 0 < fit_until_fraction <= 1:
            raise UserError(f"fit-until fraction must be in (0, 1], got {fit_until_fraction}")
        fit_until = fit_until_fraction * float(xa.max())
    fit_method = FIT_METHODS.get(method, "method")
    if model not in MODELS:
        raise UserError(f"model {model!r} is not known; use one of: {', '.join(MODELS)}")
    if (a_grid is not None or cmid_grid is not None) and method not in GRID_METHODS:
        raise UserError(f"--a-grid/--cmid-grid set the grids of --method paper, not of --method {method}")
    start_rule = "given"
    if fit_from is None:
        paper_start = default_fit_from(xa, fit_until)
        fit_from = default_fit_from(xa, fit_until, ya)
        start_rule = "early jump" if fit_from > paper_start else "paper (App. A.7)"

    at_zero = xa == 0
    if start_rule == "early jump" and R0 is None:
        at_zero = np.zeros_like(at_zero)  # the reward before the jump is not the scaling regime's R0: fit it
    R0_fixed = R0 is not None or bool(at_zero.any())
    R0_val = float(R0) if R0 is not None else (float(ya[at_zero].mean()) if at_zero.any() else None)
    if bounded and R0_val is not None and not 0 <= R0_val <= 1:
        raise FitError(f"R0 = {R0_val:g} is outside [0, 1] while bounds are on; pass --no-bounds")
    if bounded and A is not None and not (R0_val or 0.0) <= A <= 1:
        raise UserError(f"fixed A = {A:g} must lie in [R0, 1] while bounds are on")

    mask = window_mask(xa, fit_from, fit_until)
    p = vp.Problem(xa[mask], ya[mask], R0=R0_val, A=A, bounded=bounded)
    _check_window(p if model == "sigmoid" else vp.Problem(p.x, p.y, 0.0, A), source, fit_from, fit_until,
                  law_name(model))
    lo_x, hi_x = float(p.x.min()), float(p.x.max())
    grids: Grids = (a_grid, cmid_grid)
    D = None
    if model == "power":
        q, D, A_ci, A_open, noise, identified, warnings = _fit_power(p, source)
    else:
        grid = vp.make_grid(p)
        q = fit_method(p, grid, grids)
        A_ci, A_open, noise = _interval_on_A(p, q, grid, ci and A is None, method, level)
        identified, warnings = not A_open[1], []
        if A is not None:
            A_ci = (A, A)
        elif q.Cmid > hi_x:
            identified = False
            warnings.append(
                f"{source}: the fit window ends at {format_compute(hi_x)}, before the curve's midpoint "
                f"(Cmid ≈ {format_compute(q.Cmid)}): A is not identified yet; train past Cmid or fix A"
            )
        elif int(np.sum(p.x > q.Cmid)) < MIN_PAST_CMID:
            identified = False
            warnings.append(
                f"{source}: only {int(np.sum(p.x > q.Cmid))} evaluation(s) after the curve's midpoint "
                f"(Cmid ≈ {format_compute(q.Cmid)}): too few to pin A down; train further past Cmid or fix A"
            )
        elif uncertainty.too_few_residuals(p.x.size, p.n_params):
            identified = False
            warnings.append(
                f"{source}: {p.x.size} evaluations for {p.n_params} free parameters leave "
                f"{p.x.size - p.n_params} residual degree(s) of freedom, too few to estimate the noise's correlation "
                "(the interval assumes the strongest drift); A is not identified: fit more evaluations"
            )
        elif A_open[1]:
            warnings.append(
                f"{source}: the {format_level(level)} interval on A is open at the top: the noise is too large for this "
                "window to pin A down"
            )
        off_grid = _off_grid(p, q, method, grids, A_ci, A_open) if A is None else None
        if off_grid:
            identified = False
            widen = " (or widen --a-grid/--cmid-grid)" if method in GRID_METHODS else ""
            warnings.append(f"{source}: {off_grid}: A is not identified; use --method vp{widen}")

    if not bounded and looks_like_percent(ya):  # the bounds error's hint, for a user who passed --no-bounds instead
        warnings.append(f"{source}: rewards from {ya.min():g} to {ya.max():g} fitted as they are (bounds off); if they "
                        "are percentages, --y-scale 0.01 (or dividing them by 100) reads them as pass rates with bounds on")
    fitted = power_law(p.x, q.A, D, q.B) if D is not None else sigmoid(p.x, q.R0, q.A, q.B, q.Cmid)
    resid = p.y - fitted
    sse = float(resid @ resid)
    result = FitResult(
        source=source,
        x_name=x_name,
        y_name=y_name,
        method=method,
        R0=q.R0,
        A=q.A,
        B=q.B,
        Cmid=q.Cmid,
        R0_fixed=R0_fixed,
        A_fixed=A is not None,
        bounded=bounded,
        A_ci=A_ci,
        A_ci_open=A_open,
        ci_level=level,
        identified=identified,
        n_points=int(p.x.size),
        fit_window=(lo_x, hi_x),
        rmse=float(np.sqrt(sse / p.x.size)),
        sse=sse,
        x=xa,
        y=ya,
        in_window=mask,
        noise=noise,
        warnings=warnings,
        model=model,
        D=D,
        grids=grids,
    )
    result.fit_start = {"x": lo_x, "rule": start_rule, "fit_from": float(fit_from)}
    ends = _interval_ends(p, q, grid, A_ci) if model == "sigmoid" and A is None else ()
    refit = lambda xf, yf: _law(vp.Problem(xf, yf, p.R0, p.A, bounded), method, model, grids, source)  # noqa: E731
    _attach_forecast(result, p, refit, ends)
    result.predictions = [(float(c), float(result.forecast(c))) for c in predict_at]
    _check_support(result)
    result.heldout = _score_heldout(result)
    if target is not None:
        result.target = _target(result, float(target))
    return result


def _off_grid(p: vp.Problem, q: vp.Params, method: str, grids: Grids,
              A_ci: tuple[float | None, float | None] | None, A_open: tuple[bool, bool]) -> str | None:
    """Why a grid method's optimum is not the data's (None when it is): A or Cmid on the edge of the grid it was
    searched over (the paper's literal A grid stops at 0.45, so a run whose ceiling is 0.30 came back as A = 0.450,
    marked identified), or A outside its own interval by more than the grid's step (the interval is the data's
    likelihood, whatever the method)."""
    if method not in ("paper", "paper-data"):
        return None
    a_grid, cmid_grid = paper.data_grids(p) if method == "paper-data" else (
        paper.PAPER_A if grids[0] is None else np.asarray(grids[0], dtype=float),
        paper.PAPER_CMID if grids[1] is None else np.asarray(grids[1], dtype=float))
    # an edge where the law itself stops is no edge: A = 1 (or A = R0) with bounds on is the data's optimum there
    a_ends = (q.R0, 1.0) if p.bounded else ()
    for name, value, grid, ends in (("A", q.A, a_grid, a_ends), ("Cmid", q.Cmid, cmid_grid, ())):
        lo, hi = float(np.min(grid)), float(np.max(grid))
        edge = [e for e in (lo, hi) if np.isclose(value, e, rtol=1e-9, atol=0)
                and not any(np.isclose(e, b, rtol=1e-9, atol=1e-12) for b in ends)]
        if grid.size > 1 and edge:
            return (f"{name} = {value:.4g} is on the edge of the {method} method's {name} grid "
                    f"[{format_compute(lo) if name == 'Cmid' else f'{lo:.3g}'}, "
                    f"{format_compute(hi) if name == 'Cmid' else f'{hi:.3g}'}]: the data's optimum lies beyond it")
    if A_ci is not None:  # beyond the grid's own resolution: a grid's point nearest the optimum may sit a step off
        step = float(np.max(np.diff(np.sort(a_grid)))) if a_grid.size > 1 else 0.0
        below = A_ci[0] is not None and not A_open[0] and q.A < A_ci[0] - step
        above = A_ci[1] is not None and not A_open[1] and q.A > A_ci[1] + step
        if below or above:
            return f"A = {q.A:.3f} lies outside its own interval {format_interval(A_ci, A_open)}"
    return None


def _law(p: vp.Problem, method: str, model: str, grids: Grids, source: str) -> Callable[[Array], Array]:
    """The law fitted to ``p`` without interval or forecast (the inner backtest's refit on a prefix)."""
    _check_window(p if model == "sigmoid" else vp.Problem(p.x, p.y, 0.0, p.A), source, None, None,
                  law_name(model))
    if model == "power":
        w = power.fit(p.x, p.y, A=p.A, bounded=p.bounded)
        return lambda c: power_law(c, w.A, w.D, w.B)
    # vp from its single best grid start (the main fit refines three): a backtest needs the basin, not 1e-12
    q = vp.fit(p, n_starts=1) if method == "vp" else FIT_METHODS.get(method, "method")(p, vp.make_grid(p), grids)
    return lambda c: sigmoid(c, q.R0, q.A, q.B, q.Cmid)


def _interval_ends(p: vp.Problem, q: vp.Params, grid: vp.Grid,
                   A_ci: tuple[float | None, float | None] | None) -> tuple[Callable[[Array], Array], ...]:
    """Eq. 1 refitted with A fixed at each end of its interval (other than Â itself): the laws the data still
    allows at the interval's level, whose further gains bound the forecast's parameter uncertainty."""
    out = []
    for a in A_ci or ():
        if a is not None and abs(a - q.A) > 1e-9:
            e = vp.fit(p.fixing(float(a)), grid, n_starts=1, tol=1e-4)  # a variance term: B, Cmid to 1e-4 will do
            out.append(lambda c, e=e: sigmoid(c, e.R0, e.A, e.B, e.Cmid))
    return tuple(out)


def _degenerate(r: FitResult, p: vp.Problem, now: trust.Level) -> list[str]:
    """Why Eq. 1 (or the power law, with ``--model power``) does not describe the window (empty when it does): B or
    Cmid at its search bound, A fitted below values already seen, or a reward that falls."""
    why = []
    if r.model == "sigmoid":
        (blo, bhi), (clo, chi) = p.log_B_bounds, p.log_Cmid_bounds
        if min(abs(np.log(r.B) - blo), abs(np.log(r.B) - bhi)) < BOUND_TOL * (bhi - blo):
            why.append(f"B = {r.B:.3g} is at its search bound (a step, not a sigmoid)")
        if min(abs(np.log(r.Cmid) - clo), abs(np.log(r.Cmid) - chi)) < BOUND_TOL * (chi - clo):
            why.append(f"Cmid = {format_compute(r.Cmid)} is at its search bound")
    elif r.model == "power":  # the exponent is searched over the same range as Eq. 1's B (scalerl/curves/power.py)
        blo, bhi = np.log(vp.B_RANGE[0]), np.log(vp.B_RANGE[1])
        if min(abs(np.log(r.B) - blo), abs(np.log(r.B) - bhi)) < BOUND_TOL * (bhi - blo):
            why.append(f"the power law's exponent B = {r.B:.3g} is at its search bound")
    sigma = float(np.sqrt(now.noise + now.var + now.drift))
    top = r.A_ci[1] if r.A_ci is not None and r.A_ci[1] is not None and not r.A_fixed else r.A
    if r.model == "sigmoid" and top < now.level - 2 * sigma:
        why.append(f"A = {r.A:.3f} (interval top {top:.3f}) is below the run's current level ({now.level:.3f})")
    if not now.held and (decline := declines(p.x, p.y)):
        why.append(f"{decline}; {r.law} cannot fall")
    if now.held:  # the level is held because the reward falls (:func:`falls`, in :func:`_attach_forecast`)
        peak = best_of_3(p.y)[1]
        why.append(f"the reward falls (from {peak:.3f} to {p.y[-1]:.3f}); {r.law} cannot fall")
    elif r.model == "sigmoid" and r.R0_fixed and r.A >= r.R0:
        # a run that falls from its first evaluation on (a validation set that declines while another domain
        # trains): falls() reads a steady fall's successive differences as noise, and the fit pins A at R0; but
        # with A ≥ R0 the law never goes below the reward at compute 0, and the window's last quarter is well below
        tail = float(np.mean(last_quarter(p.y)))
        if tail < r.R0 - START_NOISE * step_noise(p.y):
            why.append(f"the reward (last quarter {tail:.3f}) has fallen below its value at compute 0 ({r.R0:.3f}); "
                       "Eq. 1 cannot fall")
    return why


def declines(x: Array, y: Array) -> str | None:
    """Why the reward declines steadily after its peak (None when it does not): a fall too slow for :func:`falls`,
    whose σ a steady trend inflates, such as a run that loses a quarter of its gain over most of its training. On the
    evaluations after the window's best mean of 3 (at least :data:`DECLINE_POINTS` of them and a quarter of the
    window), a least-squares line falls with a t statistic below −:data:`DECLINE_T` (strict: drift between
    evaluations inflates t), the window's last quarter lies more than :data:`DECLINE_NOISE` σ below the peak, and
    the line's fall gives back at least :data:`DECLINE_GIVEN_BACK` of the rise to the peak (a plateau that settles a
    hundredth or two below its best is not a fall)."""
    top, peak = best_of_3(y)
    after = np.arange(top + 1, y.size)
    if after.size < max(DECLINE_POINTS, y.size // 4):
        return None
    xa, ya = x[after], y[after]
    sxx = float(np.sum((xa - xa.mean()) ** 2))
    if sxx <= 0:
        return None
    slope, icept = np.polyfit(xa, ya, 1)
    resid = ya - (icept + slope * xa)
    se = float(np.sqrt(resid @ resid / (xa.size - 2) / sxx))
    now = float(np.mean(last_quarter(y)))
    rise = peak - float(np.min(y[: top + 3]))
    sigma = step_noise(y)
    drop = -slope * float(xa[-1] - xa[0])  # the line's, not the peak's: a noisy plateau's best mean of 3 sits high
    if (se > 0 and slope / se < -DECLINE_T and peak - now > DECLINE_NOISE * sigma
            and drop >= DECLINE_GIVEN_BACK * rise):
        return f"the reward declines after its peak (from {peak:.3f} to {now:.3f} over the last quarter)"
    return None


def falls(y: Array) -> bool:
    """Whether the reward has fallen from the window's best mean of 3 consecutive evaluations (its peak), with σ the
    noise from the median successive difference (which one collapse does not inflate):

    * the last evaluation lies more than :data:`FALL_NOISE` σ below the peak (no excursion of noise gets there); or
    * the last two both lie more than :data:`FALL_GIVEN_BACK_NOISE` σ below it and the fall gives back more than
      :data:`FALL_GIVEN_BACK` of the rise that led to the peak. On a short window that rose and fell fast (a
      collapse after a few evaluations) the successive differences are trend as much as noise, so σ is inflated
      and the first test alone misses a run that has lost most of what it learnt."""
    if y.size < 4:
        return False
    sigma = max(step_noise(y), 1e-12)
    top, peak = best_of_3(y)
    if peak - y[-1] > FALL_NOISE * sigma:
        return True
    rise = peak - float(np.min(y[: top + 3]))
    sustained = bool(np.all(peak - y[-2:] > FALL_GIVEN_BACK_NOISE * sigma))
    return sustained and peak - float(y[-1]) > FALL_GIVEN_BACK * rise


def _attach_forecast(r: FitResult, p: vp.Problem, refit: Callable[[Array, Array], Callable[[Array], Array]],
                     ends: tuple[Callable[[Array], Array], ...] = ()) -> None:
    """The forecast after the window, its trust record, and the degenerate-fit flags (:mod:`.trust`); ``ends``:
    the law at the ends of A's interval (:func:`_interval_ends`), for the forecast band's parameter uncertainty."""
    n_params = p.n_params if r.model == "sigmoid" else 3 - (p.A is not None)  # the power law: A, D, B
    exact = p.x.size <= n_params  # the law passes through every point: its residuals say nothing about the noise
    Q = None  # the noise model's tangent space: Eq. 1's Jacobian basis, or a constant column (power law, exact fit)
    if r.model == "sigmoid" and not exact:
        Q = uncertainty.tangent_basis(p, vp.Params(r.R0, r.A, r.B, r.Cmid, r.sse))[0]
    now = trust.local_level(r.predict, p.x, p.y, Q, held=falls(p.y), n_params=n_params)
    if uncertainty.too_few_residuals(p.x.size, n_params):  # noise not told from drift: the evaluation noise
        now = replace(now, noise=max(now.noise, step_noise(p.y) ** 2))  # from successive differences instead
    bt = trust.backtest(p.x, p.y, refit, r.bounded, n_params)
    why = _degenerate(r, p, now)
    weight = 0.0 if why else (bt.weight if bt is not None else trust.COMBINED)
    ruler = bt is not None and not why and bt.ruler_won(weight)
    if ruler:  # on the run's own past the ruler beat the curve and its level alike: the forecast is the ruler
        now = now.held_at(p.y[-1])
    drift = bt.drift if bt is not None else float(np.sqrt(now.noise + now.drift))
    r.forecaster = trust.Forecast(float(p.x[0]), float(p.x[-1]), now, weight, drift, r.bounded, ends,
                                  float(ndtri(0.5 + r.ci_level / 2)))
    if why:
        r.reliable = False
        if r.identified and not r.A_fixed:
            r.identified = False
        r.warnings.append(f"{r.source}: {r.law} does not describe this window: {'; '.join(why)}; "
                          "the forecast holds the current level and A is not identified")
    r.trust = trust.trust_json(bt, p.x.size, weight, why, ruler)


def _check_support(r: FitResult) -> None:
    """A warning naming the first prediction after the window that lies outside what the window supports (its
    range, widened by the range on each side): an extrapolation the data do not back. It marks that prediction
    (``supported`` false in JSON, "beyond what the data support" where it is printed), not the fit: ``reliable``
    says whether Eq. 1 describes the window, the same whichever computes a caller asks to predict (a run still
    rising before its midpoint legitimately forecasts past its range within a doubling of its compute)."""
    lo, hi = r.support
    x1 = float(r.fit_window[1])
    beyond = [(c, v) for c, v in r.predictions if c > x1 and not lo <= v <= hi]
    if beyond:
        c, v = beyond[0]
        r.warnings.append(f"{r.source}: the forecast {v:.3f} at {format_compute(c)} is outside anything the window "
                          f"supports ([{lo:.3f}, {hi:.3f}]): an extrapolation the data do not back")


def _fit_power(p: vp.Problem, source: str) -> tuple[vp.Params, float, Any, tuple[bool, bool], None, bool, list[str]]:
    """App. A.4's power law on the window: (params with the equivalent Cmid, D, A_ci, open ends, noise,
    identified, warnings). No interval on A: the paper uses the power law only to show its A is unstable, so a free
    A is never called identified (a fixed A is given, not estimated)."""
    w = power.fit(p.x, p.y, A=p.A, bounded=p.bounded)
    R0 = p.R0 if p.R0 is not None else float("nan")
    # the Cmid of the sigmoid with this tail (D = (A − R0)·Cmid^B, App. A.4), when R0 is known
    Cmid = (w.D / (w.A - R0)) ** (1 / w.B) if w.A > R0 and w.D > 0 else float("nan")
    q = vp.Params(R0, w.A, w.B, float(Cmid), w.sse)
    at_bound = p.bounded and p.A is None and w.A >= 1.0 - 1e-9
    if p.A is not None:
        return q, w.D, (p.A, p.A), (False, False), None, True, []
    why = "its asymptote ran to the bound A = 1" if at_bound else "scalerl puts no interval on its A"
    warnings = [f"{source}: power law: A is not identified ({why}; App. A.4: the power law's A is unstable)"]
    return q, w.D, None, (False, False), None, False, warnings


def _interval_on_A(
    p: vp.Problem, q: vp.Params, grid: vp.Grid, wanted: bool, method: str, level: float
) -> tuple[tuple[float | None, float | None] | None, tuple[bool, bool], dict[str, float] | None]:
    """(A_ci, which ends are open, the noise estimate). An open end means the profile never rose above the
    threshold before the search limit; it is reported as the bound when bounded, else as None."""
    if not wanted:
        return None, (False, False), None
    best = q if method == "vp" else vp.fit(p, grid)  # the interval is a property of the data's likelihood
    limits = uncertainty.a_limits(p, best)
    if p.x.size <= p.n_params:  # no degrees of freedom left for a noise estimate
        return (limits if p.bounded else (None, None)), (True, True), None
    iv = uncertainty.profile_interval(p, best, grid, level)
    lo, hi = (v if v is not None else (lim if p.bounded else None) for v, lim in zip((iv.lo, iv.hi), limits))
    hi_open = iv.hi is None and not (p.bounded and _reached_bound(p, best, limits[1]))
    return (lo, hi), (iv.lo is None, hi_open), {"kappa": iv.kappa, "phi": iv.phi, "dof": iv.dof}


def _reached_bound(p: vp.Problem, q: vp.Params, bound: float) -> bool:
    """Whether a bounded fit's curve has run into its bound (a pass rate of 1): the window's last quarter (at least
    3 evaluations) is within :data:`REACHED_NOISE` residual RMSEs of it. Then the data cannot exclude A at the
    bound, and the bound closes the interval on A at the top (a perfect score cannot be passed); a curve whose fit
    reaches the bound only by extrapolating from well below keeps its top open."""
    resid = p.y - sigmoid(p.x, q.R0, q.A, q.B, q.Cmid)
    rmse = float(np.sqrt(np.mean(resid**2)))
    return float(np.mean(last_quarter(p.y))) + REACHED_NOISE * rmse >= bound


def format_interval(ci: tuple[float | None, float | None], is_open: tuple[bool, bool] = (False, False)) -> str:
    """``[lo, hi]``, with ``open`` for an end the profile never reached (never the search's bound as a value)."""
    (lo, hi), (lo_open, hi_open) = ci, is_open
    return f"[{'open' if lo_open or lo is None else f'{lo:.3f}'}, {'open' if hi_open or hi is None else f'{hi:.3f}'}]"


def law_name(model: str) -> str:
    """The law a ``model`` fits, in words: "Eq. 1", or "the power law" (App. A.4) for ``"power"``."""
    return "the power law" if model == "power" else "Eq. 1"


def lower_end_given(A_ci: Sequence[float | None] | None, A_ci_open: Sequence[bool] | None) -> float | None:
    """The lower end of an interval on A that the data give, or None (no interval, or one open below): what every
    surface prints as "A ≥ lo" for an unidentified fit (``scalerl fit``, the live line, the report, the run card)."""
    if not A_ci or A_ci[0] is None or (A_ci_open and A_ci_open[0]):
        return None
    return float(A_ci[0])


def format_level(level: float) -> str:
    """A confidence level as a percentage, as precise as it was given (0.95 → "95%", 0.999999 → "99.9999%", not
    "100%")."""
    return f"{100 * level:.6g}%"


def format_A(A: float, lo: float | None, identified: bool) -> str:
    """A for a table: the estimate when identified, else the lower end of its interval as a bound (an unidentified
    fit's A is where the search stopped, not an estimate), or "not bounded" when the data give no lower end (an
    interval open below reports the search's bound there, e.g. R0 for a run that fell far below it)."""
    if identified:
        return f"{A:.3f}"
    return f"≥ {lo:.3f}" if lo is not None and np.isfinite(lo) else "not bounded"


def fit_series(series: Series, **kwargs: Any) -> FitResult:
    """:func:`fit_curve` on a :class:`Series` (source, column names and row numbers come with it)."""
    res = fit_curve(
        series.x, series.y, source=series.source, x_name=series.x_name, y_name=series.y_name, rows=series.rows, **kwargs
    )
    res.warnings[:0] = list(series.notes)
    return res


def _check_window(p: vp.Problem, source: str, fit_from: float | None, fit_until: float | None,
                  law: str = "Eq. 1") -> None:
    n, k = p.x.size, p.n_params
    what = f"the fit window [{fit_from if fit_from is not None else 0:g}, {fit_until if fit_until is not None else 'end'}]"
    why = "R0 fixed from the point at compute 0" if p.R0 is not None else "R0 fitted: no point at compute 0"
    if law != "Eq. 1":  # the power law: A (unless fixed), D and B
        why = "D and B; A fixed" if p.A is not None else "A, D and B"
    if n < k or np.unique(p.x).size < k:
        raise TooFewPoints(
            f"{source}: only {np.unique(p.x).size} distinct compute values in {what}; {law} has {k} free parameters "
            f"here ({why}); widen the window or evaluate more often"
        )
    if np.ptp(p.y) == 0:
        raise FitError(f"{source}: the reward is constant ({p.y[0]:g}) in {what}; there is no curve to fit")


def _score_heldout(r: FitResult) -> dict[str, float] | None:
    """Mean and max absolute error of the reported forecast on the points after the window (the extrapolation
    check)."""
    m = r.heldout_mask
    if not m.any():
        return None
    err = np.abs(r.y[m] - r.forecast(r.x[m]))
    return {"n": int(m.sum()), "mean_abs_err": float(err.mean()), "max_abs_err": float(err.max())}


def _target(r: FitResult, goal: float) -> dict[str, Any]:
    c = r.compute_to_reach(goal)
    if np.isfinite(c):
        return {"y": goal, "x": c, "reachable": True, "note": f"reaches {goal:g} at {r.x_name} ≈ {format_compute(c)}"}
    rising = r.A >= r.R0
    return {
        "y": goal,
        "x": None,
        "reachable": False,
        "note": f"never reaches {goal:g}: the asymptote A = {r.A:.4g} is {'below' if rising else 'above'} it",
    }
