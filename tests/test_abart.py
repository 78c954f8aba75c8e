"""Accelerated failure time BART (`bartz.abart`): the censored draw's law,
recovery of a known log-normal model under censoring, agreement with
`bartz.wbart` without censoring, R's survival layout and the checks."""

import inspect
import warnings

import jax
import numpy as np
import pytest
from scipy import special, stats

import bartz
from familyfiles import assert_round_trip
from bartz.sampler.conditionals import draw_censored

QUIET = {'printevery': None}
SIGMA = 0.3


def _aft_data(seed, n=200, censor_scale=9.0):
    """Log-normal times with f = 1 + x0 - x1^2 / 2, censored by independent
    exponential times (about 30% censored)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(n, 3))
    f = 1 + x[:, 0] - x[:, 1] ** 2 / 2
    t = np.exp(f + SIGMA * rng.normal(size=n))
    c = rng.exponential(censor_scale, size=n)
    return x, f, np.minimum(t, c), (t <= c).astype(int)


def _censored_state(n, bound, censored, sigma, w=None):
    """A state with every tree a leaf of 0 (so f = 0) and the censored
    points at their bounds."""
    X = np.zeros((1, n), np.uint8)
    y = np.where(censored, bound, 0.5).astype(np.float32)
    return bartz.mcmcstep.init(
        X=X, max_split=np.array([1]), y=y, num_trees=2, leaf_prior_var=1.0, sigma2_alpha=1.0, sigma2_beta=1.0,
        sigma2_init=sigma**2, prec_weights=None if w is None else 1 / w**2,
        censor_bound=np.where(censored, bound, -np.inf),
    )


@pytest.mark.parametrize('seed', [0, 1, 2])
@pytest.mark.parametrize('weighted', [False, True])
def test_draw_censored_law(seed, weighted):
    """Censored responses: above their bounds, and their probability
    integral transforms under N(0, (sigma w)^2) truncated at the bound are
    uniform (KS); observed ones are unchanged; residuals are y - f."""
    n = 3000
    rng = np.random.default_rng(seed)
    bound = rng.uniform(-2.0, 1.5, n)
    censored = rng.uniform(size=n) < 0.7
    w = rng.uniform(0.5, 2.0, n) if weighted else None
    sigma = 0.7
    state = _censored_state(n, bound, censored, sigma, w)
    new = draw_censored(jax.random.key(seed), state)
    y = np.asarray(new.y, np.float64)
    np.testing.assert_array_equal(y[~censored], 0.5)
    np.testing.assert_array_equal(np.asarray(new.resid), np.asarray(new.y))  # f = 0
    assert np.all(y[censored] >= bound[censored].astype(np.float32))
    sd = sigma * (np.ones(n) if w is None else w)
    lo = special.ndtr(bound / sd)
    pit = (special.ndtr(y / sd) - lo) / (1 - lo)
    assert stats.kstest(pit[censored], 'uniform').pvalue > 1e-3
    # the truncation matters: against the untruncated normal they are far from uniform
    assert stats.kstest(special.ndtr(y[censored] / sd[censored]), 'uniform').pvalue < 1e-6


@pytest.fixture(scope='module')
def recovery():
    x, f, t, d = _aft_data(0)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', bartz.ConvergenceWarning)
        fit = bartz.abart(x, t, d, ndpost=300, nskip=200, ntree=20, K=20, **QUIET)
        naive = bartz.wbart(x, np.log(t), ndpost=100, nskip=100, ntree=20, **QUIET)
    return x, f, t, d, fit, naive


def _check_recovery(f, d, fit):
    assert 0.2 < 1 - d.mean() < 0.4
    draws = np.asarray(fit.yhat_train, np.float64)
    mean, sd = draws.mean(0), draws.std(0)
    # the posterior mean within a few posterior sds of the truth, on average and at most points
    assert abs(np.mean((mean - f) / sd)) < 1.0
    lo, hi = np.quantile(draws, [0.025, 0.975], axis=0)
    assert np.mean((lo <= f) & (f <= hi)) > 0.8
    s_lo, s_hi = np.quantile(fit.sigma_, [0.005, 0.995])
    assert s_lo < SIGMA < s_hi


def test_recovery(recovery):
    """Log-normal times with ~30% censoring: f and sigma recovered; the
    same data with the censoring ignored (wbart on the log times) is biased
    down, which the censored draws correct."""
    _, f, _, d, fit, naive = recovery
    _check_recovery(f, d, fit)
    cens = d == 0
    bias_naive = np.mean(naive.yhat_train_mean[cens] - f[cens])
    bias = np.mean(fit.yhat_train_mean[cens] - f[cens])
    assert bias_naive < -0.1
    assert abs(bias) < abs(bias_naive) / 2


@pytest.mark.slow
@pytest.mark.parametrize('seed', [1, 2])
def test_recovery_seeds(seed):
    x, f, t, d = _aft_data(seed)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', bartz.ConvergenceWarning)
        fit = bartz.abart(x, t, d, ndpost=300, nskip=200, ntree=20, K=20, seed=seed, **QUIET)
    _check_recovery(f, d, fit)


def test_no_censoring_is_wbart():
    """All delta = 1: the draws of wbart on log(times) with the same settings."""
    x, _, t, _ = _aft_data(3, n=60)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', bartz.ConvergenceWarning)
        a = bartz.abart(x, t, np.ones(60), x[:4], ndpost=10, nskip=10, ntree=10, K=5, **QUIET)
        w = bartz.wbart(x, np.log(t), x[:4], ndpost=10, nskip=10, ntree=10, **QUIET)
    np.testing.assert_array_equal(a.yhat_train, w.yhat_train)
    np.testing.assert_array_equal(a.yhat_test, w.yhat_test)
    np.testing.assert_array_equal(a.sigma, w.sigma)
    assert a.offset == pytest.approx(np.mean(np.log(t)))  # R's offset


def test_survival_layout(recovery):
    """R's surv_train: for each point its K grid times, S = 1 - Phi((log t - f) / sigma);
    the grid is K quantiles of the times when there are more distinct ones."""
    _, _, t, _, fit, _ = recovery
    assert fit.K == fit.times.size <= 20
    np.testing.assert_allclose(fit.times, np.unique(np.quantile(t, np.arange(1, 21) / 20)))
    i, j = 7, 3
    expect = special.ndtr(-(np.log(fit.times[j]) - fit.yhat_train[:, i]) / fit.sigma_)
    np.testing.assert_allclose(fit.surv_train[:, i * fit.K + j], expect, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fit.surv_train_mean, fit.surv_train.mean(0), rtol=1e-5)
    assert fit.surv_test is None and fit.yhat_test is None
    assert np.all(np.diff(fit.surv_train.reshape(fit.ndpost, -1, fit.K), axis=2) <= 0)  # decreasing in t
    assert fit.predict(np.zeros((2, 3))).shape == (fit.ndpost, 2)  # R's predict of the log time (the BARTFit's)


def test_mc_abart():
    x, _, t, d = _aft_data(4, n=60)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', bartz.ConvergenceWarning)
        fit = bartz.mc_abart(x, t, d, x[:3], ndpost=10, nskip=5, ntree=10, K=4, **QUIET)
    assert fit.chains == 2
    assert fit.yhat_train.shape == (10, 60)
    assert fit.surv_test.shape == (10, 3 * fit.K)
    assert fit.K == 4
    assert np.unique(t).size == 60  # so the grid is 4 quantiles


def test_r_defaults():
    parameters = inspect.signature(bartz.abart).parameters
    for name, default in {'K': 100, 'ntree': 200, 'ndpost': 1000, 'nskip': 100, 'keepevery': 1, 'seed': 99}.items():
        assert parameters[name].default == default
    assert list(parameters)[:4] == ['x_train', 'times', 'delta', 'x_test']
    assert inspect.signature(bartz.mc_abart).parameters['mc_cores'].default == 2


@pytest.mark.parametrize(
    ('kwargs', 'match'),
    [
        ({'times': -1.0}, 'times must be positive'),
        ({'delta': 2}, 'delta must be 0'),
        ({'delta': np.ones(5)}, 'delta'),
        ({'type': 'wbart'}, "type must be 'abart'"),
        ({'ntype': 2}, 'ntype must be 1'),
        ({'K': 0}, 'K'),
        ({'times': np.full(10, 3.0)}, r'times are all equal \(3\)'),
    ],
)
def test_checks(kwargs, match):
    x = np.arange(20.0).reshape(10, 2)
    args = {'times': np.arange(1.0, 11.0), 'delta': np.ones(10)}
    for name in ('times', 'delta'):
        if name in kwargs and np.ndim(kwargs[name]) == 0:
            args[name] = np.where(np.arange(10) == 0, kwargs.pop(name), args[name])
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        bartz.abart(x, **args, **QUIET)


def test_save_load_aft(recovery, tmp_path):
    fit = recovery[4]
    assert_round_trip(fit, tmp_path, np.zeros((2, 3)))
