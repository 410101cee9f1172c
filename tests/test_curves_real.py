"""Failure classes found on real published RL validation curves (issue 26): no traceback from any method on
any curve, degenerate fits flagged, escaped table cells, the power law's missing interval said out loud.

The curves here imitate the shapes real runs have (quantized pass rates on a fixed question set, a format-learning
jump, a validation set that falls, a plateau, runs with a dozen evaluations) with fixed seeds."""

from __future__ import annotations

import numpy as np
import pytest

from scalerl.curves import FitError, fit_curve

N_QUESTIONS = 1319  # GSM8K test: pass rates are multiples of 1/1319


def _quantize(y):
    return np.clip(np.round(np.asarray(y) * N_QUESTIONS) / N_QUESTIONS, 0, 1)


def jump_then_slow(n=60, seed=0):
    """Format learning: 0.00 → ~0.46 in the first few evaluations, then a slow gain (0.46 → ~0.55)."""
    rng = np.random.default_rng(seed)
    x = np.arange(n + 1) * 10.0
    y = 0.46 * (1 - np.exp(-x / 12)) + 0.10 * (1 - np.exp(-x / 300)) + rng.normal(0, 0.008, n + 1)
    y[0] = 0.0
    return x, _quantize(y)


def falling(n=40, seed=1):
    """A validation set that rises then falls while another domain trains."""
    rng = np.random.default_rng(seed)
    x = np.arange(1, n + 1) * 20.0
    y = 0.62 - 0.10 * (x / x.max()) + 0.04 * np.exp(-x / 100) + rng.normal(0, 0.006, n)
    return x, _quantize(y)


def plateau(n=50, seed=2):
    """A run that stays at ~0.49 with evaluation noise."""
    rng = np.random.default_rng(seed)
    x = np.arange(1, n + 1) * 25.0
    return x, _quantize(0.49 + rng.normal(0, 0.01, n))


def short_rise(n=11, seed=3):
    """A dozen evaluations of a saturating rise."""
    rng = np.random.default_rng(seed)
    x = np.arange(1, n + 1) * 5.0
    return x, _quantize(0.3 + 0.4 * (1 - np.exp(-x / x.max() * 3)) + rng.normal(0, 0.01, n))


def steps(n=30):
    """A pass rate on a 50-question set: it moves in steps of 0.02 and often repeats."""
    x = np.arange(1, n + 1) * 50.0
    return x, np.round((0.30 + 0.25 * (1 - np.exp(-x / x.max() * 2.5))) * 50) / 50


SHAPES = {f.__name__: f for f in (jump_then_slow, falling, plateau, short_rise, steps)}


def test_paper_data_does_not_assert_on_a_short_step_curve():
    # found on real curves: the parabolic estimate of a grid point's best SSE went below 0 and the cutoff
    # (estimate.min() · (1 + slack)) then admitted no grid point: AssertionError
    x = np.arange(1, 12) * 5.0
    y = [0.3904, 0.4864, 0.5264, 0.5646, 0.6122, 0.6284, 0.6444, 0.6516, 0.6838, 0.682, 0.6781]
    f = fit_curve(x, y, method="paper-data", fit_until_fraction=0.5)
    assert 0.0 <= f.A <= 1.0 and np.isfinite(f.B)


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("method", ["vp", "paper", "paper-data"])
def test_no_method_raises_anything_but_a_fit_error(shape, method):
    x, y = SHAPES[shape]()
    for model in ("sigmoid", "power"):
        for cut in (0.25, 0.5, 0.75, 1.0):
            try:
                f = fit_curve(x, y, method=method, model=model, fit_until_fraction=cut, predict_at=[x[-1]])
            except FitError:
                continue
            assert all(np.isfinite(v) for _, v in f.predictions)


def test_the_power_law_never_says_identified_without_an_interval():
    x, y = short_rise(n=40)
    f = fit_curve(x, y, model="power")
    assert f.A_ci is None and not f.identified
    assert any("power law" in w and "not identified" in w for w in f.warnings)
    assert "no interval" in f.format_A()


def test_table_cells_are_escaped(tmp_path, capsys):
    """rich reads ``[open, 0.700]`` as a markup tag: the interval cell of fit and compare printed blank."""
    import dataclasses

    from scalerl.commands.curves import _print_comparison, _print_fits
    from scalerl.curves import compare_fits

    x, y = short_rise(n=30)
    f = fit_curve(x, y, source="run[bold]")
    f = dataclasses.replace(f, A_ci=(None, 0.7), A_ci_open=(True, False), identified=True)
    g = dataclasses.replace(f, source="other", A=f.A - 0.1)
    _print_fits([f])
    out = capsys.readouterr().out
    assert "[open, 0.700]" in out and "run[bold]" in out
    _print_comparison(compare_fits([f, g]))
    assert "[open, 0.700]" in capsys.readouterr().out
