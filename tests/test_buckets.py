"""Tests for bartz.buckets: the size ladder, and that padding the data and
predictor axes to it neither changes the draws nor makes a new n or p
recompile."""

import collections
import contextlib
import warnings

import jax
import numpy as np
import pytest
from numpy.testing import assert_allclose

from bartz import gbart
from bartz.prep import sizes as buckets
from tests.coupling import assert_same_fit

N, P = 100, 3
SETTINGS = {'ntree': 20, 'ndpost': 30, 'nskip': 20, 'printevery': None, 'seed': 3}
_TRACE_EVENT = '/jax/core/compile/jaxpr_trace_duration'


# ---------------------------------------------------------------- the ladder


def test_bucket_length_bounds_padding():
    """Every n gets a length >= n, at most 12.5% more above the minimum,
    the same for n and any n' between n and its length, and monotone."""
    n = np.arange(1, 200_000)
    lengths = np.array([buckets.bucket_length(int(k)) for k in n])
    assert np.all(lengths >= n)
    assert np.all(lengths >= buckets.MIN_LENGTH)
    big = n > buckets.MIN_LENGTH
    assert np.max((lengths[big] - n[big]) / n[big]) <= 1 / 8
    assert np.all(np.diff(lengths) >= 0)
    # a length maps to itself: lengths are fixed points
    on_ladder = np.unique(lengths)
    assert all(buckets.bucket_length(int(k)) == k for k in on_ladder)
    # 8 lengths per doubling
    assert len([k for k in on_ladder if 1024 <= k < 2048]) == 8


def test_bucket_length_multiple():
    for n in (1, 99, 1000, 1013, 12_345):
        for multiple in (1, 2, 3, 4, 6):
            length = buckets.bucket_length(n, multiple)
            assert length % multiple == 0
            assert length - buckets.bucket_length(n) < multiple


def test_ladder_lists_the_lengths():
    lengths = buckets.ladder(10_000)
    assert lengths[0] == buckets.MIN_LENGTH
    assert lengths == sorted({buckets.bucket_length(n) for n in range(1, 10_001)} - {10_240})


def test_predictor_length_bounds_padding():
    """Every p gets a multiple of 8 that is >= p, at most 12.5% more above
    64, the same for p and any p' between p and its length, and monotone."""
    p = np.arange(1, 20_000)
    lengths = np.array([buckets.predictor_length(int(k)) for k in p])
    assert np.all(lengths >= p)
    assert np.all(lengths % 8 == 0)
    assert np.max((lengths - p)[p > 64] / p[p > 64]) <= 1 / 8
    assert np.all(lengths[p <= 64] - p[p <= 64] < 8)
    assert np.all(np.diff(lengths) >= 0)
    assert all(buckets.predictor_length(int(k)) == k for k in np.unique(lengths))
    X = np.ones((10, 7), np.uint8)
    padded = buckets.pad_predictors(X)
    assert padded.shape == (16, 7) and padded.dtype == np.uint8
    assert np.all(padded[:10] == 1) and np.all(padded[10:] == 0)


# ---------------------------------------------------------------- draws do not depend on the padding


def make_data(seed, n=N, p=P):
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(n, p))
    y = np.sin(6 * x[:, 0]) + 2 * x[:, 1] + 0.1 * rng.normal(size=n)
    return x, y


@pytest.fixture
def bigger_buckets(monkeypatch):
    """Make gbart pad to the ladder length after the usual one (and a few points more)."""
    original = buckets.bucket_length

    def bigger(n, multiple=1):
        return original(original(n) + 37, multiple)

    monkeypatch.setattr(buckets, 'bucket_length', bigger)


CASES = {
    'continuous': {},
    'probit': {'type': 'pbart', 'keepevery': 2},
    'weights': {'w': 'w'},
    'dart': {'sparse': True},
    'two chains': {'mc_cores': 2},
    'data sharding': {'mc_cores': 2, 'num_chain_devices': 1, 'num_data_devices': 2},
}


def _fit(case, x, y):
    kwargs = dict(CASES[case])
    if kwargs.get('type') == 'pbart':
        y = (y > np.median(y)).astype(float)
    if kwargs.get('w') == 'w':
        kwargs['w'] = np.linspace(0.5, 2, len(y))
    return gbart(x, y, x_test=x[:7], **SETTINGS, **kwargs)


# continuous and data sharding in the default run; the other cases (15-25 s
# of compilation each) with the slow tests
_SLOW_CASES = {'probit', 'weights', 'dart', 'two chains'}


@pytest.mark.parametrize('case', [pytest.param(c, marks=pytest.mark.slow) if c in _SLOW_CASES else c for c in CASES])
@pytest.mark.no_key_reuse_check
def test_draws_do_not_depend_on_padding(case, request):
    """The same seed gives the same draws, up to float rounding, whether the
    n = 100 points are padded to 128 or to a larger length."""
    x, y = make_data(0)
    usual = _fit(case, x, y)
    request.getfixturevalue('bigger_buckets')
    padded = _fit(case, x, y)
    assert buckets.bucket_length(N) > 128  # the fixture took effect
    # up to a decision that float rounding flips (see `coupling`)
    assert_same_fit(padded, usual, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- no recompilation for a new n


@contextlib.contextmanager
def traced_functions():
    """Names of the functions JAX traces in the block (a persistent
    compilation cache skips compiling, never tracing)."""
    events = collections.Counter()

    def listener(event, duration_secs, **kwargs):
        if event == _TRACE_EVENT:
            events[kwargs.get('fun_name')] += 1

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield events
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


@pytest.mark.parametrize('kwargs', [{}, {'type': 'pbart'}], ids=['continuous', 'probit'])
def test_new_n_in_the_same_bucket_does_not_retrace(kwargs):
    """A fit with n = 100, then fits with n = 97 and 113 (same length on the
    ladder, other test sizes on it too): the second and third trace nothing
    but eager primitives, and so compile nothing."""
    def fit(n, n_test):
        x, y = make_data(n, n=n)
        if kwargs:
            y = (y > np.median(y)).astype(float)
        return gbart(x, y, x_test=x[:n_test], **SETTINGS, **kwargs)

    first = fit(100, 20)
    first.predict(make_data(1, n=50)[0])
    with traced_functions() as traced:
        fold = fit(97, 31)
        other = fit(113, 9)
        fold.predict(make_data(1, n=55)[0])
        fold.predict(make_data(1, n=60)[0])
    assert set(traced) <= {'bind'}, traced
    assert first.yhat_train.shape == (30, 100)
    assert fold.yhat_train.shape == (30, 97)
    assert fold.yhat_test.shape == (30, 31)
    assert other.yhat_train.shape == (30, 113)


@pytest.mark.parametrize('kwargs', [{}, {'sparse': True, 'mc_cores': 2}], ids=['continuous', 'dart chains'])
def test_padded_predictors_are_constant_columns(kwargs):
    """The P = 3 predictors are padded to 8 with predictors that have no
    cut-point: the same fit, bit for bit, as with 5 constant columns
    appended and kept (``rm_const=False``), whose variable use is 0."""
    x, y = make_data(5)
    plain = gbart(x, y, x_test=x[:9], **SETTINGS, **kwargs)
    wide = np.hstack([x, np.full((N, 5), 0.5)])
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', UserWarning)  # (the trees cannot split on the constant columns)
        padded = gbart(wide, y, x_test=wide[:9], **SETTINGS, **kwargs, rm_const=False)
    assert buckets.predictor_length(P) == buckets.predictor_length(P + 5)
    assert plain.varcount.shape == (30, P)
    assert padded.varcount.shape == (30, P + 5)
    for name in ('yhat_train', 'yhat_test', 'sigma'):
        np.testing.assert_array_equal(getattr(plain, name), getattr(padded, name), err_msg=name)
    np.testing.assert_array_equal(plain.varcount, padded.varcount[:, :P])
    assert np.all(padded.varcount[:, P:] == 0)
    assert plain.varcount.sum() > 0
    if kwargs:  # DART: the constant columns get no split probability
        np.testing.assert_allclose(plain.varprob, padded.varprob[:, :P], rtol=1e-6)
        assert np.all(padded.varprob[:, P:] == 0)
    np.testing.assert_array_equal(plain.predict(wide[:20, :P]), padded.predict(wide[:20]))


def test_new_p_in_the_same_bucket_does_not_retrace():
    """Fits with p = 3 and 5, then 6 and 8 (all padded to 8 predictors): the
    later fit on each side of the trees' 6 levels and the predictions
    compile nothing; crossing the line compiles the sampler (with fewer
    predictors than levels it counts exhausted ones, `mcmcstep.MoveKinds`;
    user guide, "Compilation")."""
    x, y = make_data(6, p=8)
    first = gbart(x[:, :3], y, x_test=x[:20, :3], **SETTINGS)
    first.predict(x[:50, :3])
    with traced_functions() as traced:
        five = gbart(x[:, :5], y, x_test=x[:20, :5], **SETTINGS)
        five.predict(x[:50, :5])
    assert set(traced) <= {'bind'}, traced
    with traced_functions() as traced:
        gbart(x[:, :6], y, x_test=x[:20, :6], **SETTINGS)
    assert 'run' in traced, traced  # the sampler, once
    with traced_functions() as traced:
        eight = gbart(x, y, x_test=x[:20], **SETTINGS)
        eight.predict(x[:50])
    assert set(traced) <= {'bind'}, traced
    assert five.varcount.shape == (30, 5) and eight.varcount.shape == (30, 8)
    assert eight.varcount[:, 5:].sum() > 0  # the last columns are real predictors


def test_predict_drops_the_padding():
    """Predictions at m points have m columns, equal to the columns of a
    prediction at more points (other padding)."""
    x, y = make_data(2)
    fit = gbart(x, y, **SETTINGS)
    x_new = make_data(4, n=300)[0]
    full = fit.predict(x_new)
    assert full.shape == (30, 300)
    part = fit.predict(x_new[:130])
    assert part.shape == (30, 130)
    assert_allclose(part, full[:, :130], rtol=1e-5, atol=1e-5)
    mean = fit.predict(x_new[:130], kind='mean')
    assert_allclose(mean, full[:, :130].mean(axis=0), rtol=1e-5, atol=1e-6)
