"""Statistical tests of missing predictors (bartz.encoding): the model
learns from the incomplete rows, and from the missingness itself.

Tolerances come from the spread of the results over several seeds.
"""

import numpy as np
import pytest

from bartz import gbart

N, P, N_TEST = 200, 6, 200
SETTINGS = {'ntree': 50, 'ndpost': 200, 'nskip': 100, 'printevery': None}
SEEDS = range(6)


def friedman(x):
    """Friedman #1 on the first 5 columns; the 6th is irrelevant."""
    return 10 * np.sin(np.pi * x[:, 0] * x[:, 1]) + 20 * (x[:, 2] - 0.5) ** 2 + 10 * x[:, 3] + 5 * x[:, 4]


def rmse(a, b):
    return float(np.sqrt(np.mean((a - b) ** 2)))


def _significantly_negative(d):
    """Mean below zero by more than two standard errors over seeds."""
    d = np.asarray(d)
    se = d.std(ddof=1) / np.sqrt(d.size)
    return d.mean() + 2 * se < 0, (d.mean(), se, d)


@pytest.mark.slow
def test_missing_at_random_beats_dropping_rows():
    """x4 is missing at random (given the observed x0) in about half the
    rows. The fit on all rows predicts f on complete test rows better than
    the fit on the complete rows only."""
    diffs = []
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        x = rng.uniform(size=(N, P))
        y = friedman(x) + rng.normal(size=N)
        missing = rng.uniform(size=N) < x[:, 0]
        x_missing = x.copy()
        x_missing[missing, 4] = np.nan
        x_test = rng.uniform(size=(N_TEST, P))
        full = gbart(x_missing, y, x_test=x_test, seed=seed, **SETTINGS)
        complete = gbart(x[~missing], y[~missing], x_test=x_test, seed=seed, **SETTINGS)
        truth = friedman(x_test)
        diffs.append(rmse(full.yhat_test_mean, truth) - rmse(complete.yhat_test_mean, truth))
    ok, info = _significantly_negative(diffs)
    assert ok, info


def test_informative_missingness_is_used():
    """y jumps by 3 where x4 is missing (x4 itself does not enter f): the
    fit recovers the jump at new points, and splits on x4 more than on the
    irrelevant x5."""
    shift = 3.0
    jumps, extra_splits = [], []
    for seed in SEEDS:
        rng = np.random.default_rng(100 + seed)
        x = rng.uniform(size=(N, P))
        missing = rng.uniform(size=N) < 0.3
        f = friedman(x) - 5 * x[:, 4] + shift * missing
        y = f + rng.normal(size=N)
        x[missing, 4] = np.nan
        x_test = rng.uniform(size=(N_TEST, P))
        f_test = friedman(x_test) - 5 * x_test[:, 4]  # without the jump
        test_missing = np.arange(N_TEST) % 2 == 0
        x_test[test_missing, 4] = np.nan
        fit = gbart(x, y, x_test=x_test, seed=seed, **SETTINGS)
        resid = fit.yhat_test_mean - f_test
        jumps.append(resid[test_missing].mean() - resid[~test_missing].mean())
        vc = fit.varcount_mean
        extra_splits.append(vc[4] - vc[5])
    jumps = np.array(jumps)
    # BART shrinks towards 0: allow 15% of the jump, plus the spread over seeds
    tol = 0.15 * shift + 2 * jumps.std(ddof=1) / np.sqrt(jumps.size)
    assert abs(jumps.mean() - shift) < tol, jumps
    ok, info = _significantly_negative(-np.array(extra_splits))
    assert ok, info
