"""Tests for bartz.api.gbart: the R-style front end `gbart` and its result object.

Compilation dominates the cost of these tests, so almost every fit uses the
same shapes and settings (`SMALL`, n=100, p=3) and shares one compiled MCMC
chunk; fits are shared through module-scoped fixtures.
"""

import collections
import contextlib
import warnings

import jax
import numpy as np
import pandas as pd
import pytest
import scipy.sparse
from jax import numpy as jnp
from numpy.testing import assert_allclose, assert_array_equal
from scipy import stats

import bartz
from bartz import gbart
from bartz.run import loop as mcmcloop
from bartz.sampler import step as mcmcstep
from bartz.diagnostics import ConvergenceWarning

# ---------------------------------------------------------------- helpers

N, P, N_TEST = 100, 3, 30
SMALL = {'ntree': 20, 'ndpost': 50, 'nskip': 20, 'printevery': None}

_TRACE_EVENT = '/jax/core/compile/jaxpr_trace_duration'
_COMPILE_EVENT = '/jax/core/compile/backend_compile_duration'


@contextlib.contextmanager
def count_jax_events():
    """Count JAX tracing and compilation events in the block; the names of
    the traced functions are in ``events['traced']``."""
    events = collections.Counter()
    events['traced'] = []

    def listener(event, duration_secs, **kwargs):
        events[event] += 1
        if event == _TRACE_EVENT:
            events['traced'].append(kwargs.get('fun_name'))

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield events
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


def f_true(x):
    return np.sin(6 * x[:, 0]) + 2 * x[:, 1]


def make_data(seed, n=N, p=P, n_test=N_TEST):
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(n, p))
    y = f_true(x) + 0.1 * rng.normal(size=n)
    x_test = rng.uniform(size=(n_test, p))
    return x, y, x_test


def ols_sigest(x, y):
    design = np.column_stack([np.ones(len(y)), x])
    coef = np.linalg.lstsq(design, y, rcond=None)[0]
    resid = y - design @ coef
    return np.sqrt(resid @ resid / (len(y) - design.shape[1]))


def rmse(a, b):
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


@pytest.fixture(scope='module')
def data():
    return make_data(0)


@pytest.fixture(scope='module')
def fit(data):
    x, y, x_test = data
    return gbart(x, y, x_test=x_test, seed=0, **SMALL)


@pytest.fixture(scope='module')
def binary_data(data):
    x, _, x_test = data
    rng = np.random.default_rng(1)
    prob = stats.norm.cdf(2 * (x[:, 0] - 0.5))
    y = (rng.uniform(size=N) < prob).astype(float)
    return x, y, x_test


@pytest.fixture(scope='module')
def pfit(binary_data):
    x, y, x_test = binary_data
    return gbart(x, y, x_test=x_test, type='pbart', seed=0, **SMALL)


# ---------------------------------------------------------------- validation

_rng = np.random.default_rng(123)
VX = _rng.uniform(size=(20, 3))
VY = _rng.normal(size=20)
VB = np.tile([0.0, 1.0], 10)
VDF = pd.DataFrame(VX, columns=['a', 'b', 'c'])


def _with(arr, index, value):
    arr = np.array(arr, dtype=np.result_type(arr, type(value)))
    arr[index] = value
    return arr


class _Reached(Exception):  # noqa: N818
    """Raised in place of the sampler: the input passed validation."""


@pytest.fixture
def no_sampler(monkeypatch):
    """Replace the numerical core so that nothing is traced or run."""

    def reached(*args, **kwargs):
        raise _Reached

    monkeypatch.setattr(mcmcstep, 'init', reached)
    monkeypatch.setattr(mcmcloop, 'run_mcmc', reached)


def _call(**overrides):
    kw = {'x_train': VX, 'y_train': VY, **SMALL}
    kw.update(overrides)
    return gbart(**kw)


_BAD_INPUTS = [
    # shapes
    ('x_3d', {'x_train': np.zeros((20, 3, 2))}, ValueError, 'x_train'),
    ('x_no_rows', {'x_train': np.zeros((0, 3)), 'y_train': np.zeros(0)}, ValueError, 'x_train'),
    ('y_short', {'y_train': VY[:-1]}, ValueError, 'y_train'),
    ('y_2d', {'y_train': np.ones((20, 2))}, ValueError, 'y_train'),
    ('x_test_columns', {'x_test': np.zeros((5, 4))}, ValueError, 'x_test'),
    ('x_test_df_missing', {'x_train': VDF, 'x_test': VDF[['a', 'c']]}, ValueError, 'x_test'),
    ('x_test_df_renamed', {'x_train': VDF, 'x_test': VDF.rename(columns={'b': 'B'})}, ValueError, 'x_test'),
    ('x_no_columns', {'x_train': np.zeros((20, 0))}, ValueError, 'x_train has no columns'),
    # nothing to split on
    ('x_all_constant', {'x_train': np.ones((20, 3))}, ValueError, 'no column of x_train has a usable cut-point'),
    (
        'x_all_constant_kept',
        {'x_train': np.ones((20, 3)), 'rm_const': False},
        ValueError,
        'no column of x_train has a usable cut-point',
    ),
    ('numcut_0', {'numcut': 0}, ValueError, 'no column of x_train has a usable cut-point'),
    ('x_below_float32', {'x_train': VX * 1e-6 + 1e6}, ValueError, r'column\(s\) \[0, 1, 2\] vary only below float32'),
    ('xinfo_empty', {'xinfo': np.zeros((3, 0))}, ValueError, 'no column of x_train has a usable cut-point'),
    # non-finite values
    ('x_inf', {'x_train': _with(VX, (0, 0), -np.inf)}, ValueError, 'x_train'),
    ('x_df_all_nan', {'x_train': VDF.assign(b=[np.nan] * 20)}, ValueError, 'x_train'),
    ('x_df_category_all_nan', {'x_train': VDF.assign(b=pd.Categorical([None] * 20, categories=['u']))}, ValueError, 'x_train'),
    ('x_test_inf', {'x_test': _with(VX, (2, 2), np.inf)}, ValueError, 'x_test'),
    ('y_nan', {'y_train': _with(VY, 5, np.nan)}, ValueError, 'y_train'),
    ('y_inf', {'y_train': _with(VY, 5, np.inf)}, ValueError, 'y_train'),
    ('w_nan', {'w': _with(np.ones(20), 4, np.nan)}, ValueError, r'\bw\b'),
    ('w_inf', {'w': _with(np.ones(20), 4, np.inf)}, ValueError, r'\bw\b'),
    # types
    ('x_df_object', {'x_train': VDF.assign(b=pd.Series([1.0, 'z'] * 10, dtype=object))}, TypeError, 'x_train'),
    ('x_df_datetime', {'x_train': VDF.assign(b=pd.date_range('2020-01-01', periods=20))}, TypeError, 'x_train'),
    ('x_df_complex', {'x_train': VDF.assign(b=VX[:, 1] + 1j)}, TypeError, 'x_train'),
    ('x_df_duplicate_names', {'x_train': VDF.set_axis(['a', 'a', 'c'], axis=1)}, ValueError, 'x_train'),
    (
        'x_test_unseen_level',
        {'x_train': VDF.assign(b=list('xyz') * 6 + ['x', 'y']), 'x_test': VDF.assign(b=list('xw') * 10)},
        ValueError,
        "x_test column 'b'.*'w'",
    ),
    ('x_strings', {'x_train': VX.astype(str)}, TypeError, 'x_train'),
    ('x_complex', {'x_train': VX + 1j}, TypeError, 'x_train'),
    ('x_none', {'x_train': None}, TypeError, 'x_train'),
    ('x_test_df_strings', {'x_train': VDF, 'x_test': VDF.assign(a=list('xy') * 10)}, TypeError, 'x_test'),
    ('y_complex', {'y_train': VY + 1j}, TypeError, 'y_train'),
    ('y_strings', {'y_train': VY.astype(str)}, TypeError, 'y_train'),
    ('y_series_strings', {'y_train': pd.Series(list('ab') * 10)}, TypeError, 'y_train'),
    # outcome values
    ('y_constant', {'y_train': np.full(20, 3.0)}, ValueError, 'y_train'),
    ('pbart_y_not_01', {'type': 'pbart', 'y_train': VY}, ValueError, 'y_train'),
    ('pbart_y_012', {'type': 'pbart', 'y_train': np.arange(20) % 3}, ValueError, 'y_train'),
    ('pbart_y_all_1', {'type': 'pbart', 'y_train': np.ones(20)}, ValueError, 'y_train'),
    # integer settings
    ('ndpost_0', {'ndpost': 0}, ValueError, 'ndpost'),
    ('ndpost_float', {'ndpost': 10.5}, ValueError, 'ndpost'),
    ('ndpost_str', {'ndpost': '10'}, TypeError, 'ndpost'),
    ('ndpost_beyond_memory', {'ndpost': 10**9}, ValueError, r'ndpost=1,000,000,000 kept draws need at least [\d,]+ GiB'),
    ('nskip_neg', {'nskip': -1}, ValueError, 'nskip'),
    ('keepevery_0', {'keepevery': 0}, ValueError, 'keepevery'),
    ('ntree_0', {'ntree': 0}, ValueError, 'ntree'),
    ('ntree_bool', {'ntree': True}, TypeError, 'ntree'),
    ('printevery_0', {'printevery': 0}, ValueError, 'printevery'),
    ('numcut_neg', {'numcut': -1}, ValueError, 'numcut'),
    ('numcut_float', {'numcut': 10.5}, ValueError, 'numcut'),
    # real settings
    ('k_0', {'k': 0}, ValueError, r'\bk\b'),
    ('k_neg', {'k': -2.0}, ValueError, r'\bk\b'),
    ('k_nan', {'k': np.nan}, ValueError, r'\bk\b'),
    ('k_str', {'k': '2'}, TypeError, r'\bk\b'),
    ('base_0', {'base': 0.0}, ValueError, 'base'),
    ('base_above_1', {'base': 1.01}, ValueError, 'base'),
    ('power_neg', {'power': -1.0}, ValueError, 'power'),
    ('sigquant_0', {'sigquant': 0.0}, ValueError, 'sigquant'),
    ('sigquant_1', {'sigquant': 1.0}, ValueError, 'sigquant'),
    ('sigdf_0', {'sigdf': 0}, ValueError, 'sigdf'),
    ('lambda_neg', {'lambda_': -1.0}, ValueError, 'lambda_'),
    ('sigest_0', {'sigest': 0.0}, ValueError, 'sigest'),
    ('tau_num_0', {'tau_num': 0.0}, ValueError, 'tau_num'),
    ('offset_inf', {'offset': np.inf}, ValueError, 'offset'),
    # options
    ('type_bad', {'type': 'xbart'}, ValueError, 'type'),
    ('rm_const_str', {'rm_const': 'yes'}, TypeError, 'rm_const'),
    ('seed_str', {'seed': 'abc'}, TypeError, 'seed'),
    ('seed_float', {'seed': 1.5}, TypeError, 'seed'),
    ('seed_neg', {'seed': -1}, ValueError, 'seed'),
    ('moves_string', {'moves': 'r'}, ValueError, r"moves must be 'R'.*got the string 'r'"),
    ('moves_no_prune', {'moves': ('grow',)}, ValueError, 'moves must include'),
    # weights
    ('w_zero', {'w': _with(np.ones(20), 3, 0.0)}, ValueError, r'\bw\b'),
    ('w_neg', {'w': -np.ones(20)}, ValueError, r'\bw\b'),
    ('w_short', {'w': np.ones(19)}, ValueError, r'\bw\b'),
    ('w_pbart', {'type': 'pbart', 'y_train': VB, 'w': np.ones(20)}, ValueError, r'\bw\b'),
    # DART
    ('sparse_str', {'sparse': 'yes'}, TypeError, 'sparse'),
    ('augment_str', {'augment': 'yes'}, TypeError, 'augment'),
    ('theta_neg', {'theta': -1.0}, ValueError, 'theta'),
    ('a_0', {'sparse': True, 'a': 0.0}, ValueError, r'\ba\b'),
    ('b_neg', {'sparse': True, 'b': -1.0}, ValueError, r'\bb\b'),
    ('rho_0', {'sparse': True, 'rho': 0.0}, ValueError, 'rho'),
    ('mc_cores_0', {'mc_cores': 0}, ValueError, 'mc_cores'),
    ('mc_cores_str', {'mc_cores': '2'}, TypeError, 'mc_cores'),
]


@pytest.mark.parametrize(
    ('overrides', 'exc', 'match'),
    [pytest.param(o, e, m, id=i) for i, o, e, m in _BAD_INPUTS],
)
def test_bad_input_raises_before_tracing(no_sampler, overrides, exc, match):
    """Every bad input gets a Python error that names the argument, raised
    before the sampler is built and before anything is traced."""
    with count_jax_events() as events, pytest.raises(exc, match=match) as info:
        _call(**overrides)
    # a builtin exception, not a JAX error (some of which subclass TypeError)
    assert type(info.value).__module__ == 'builtins'
    assert events[_TRACE_EVENT] == 0
    assert events[_COMPILE_EVENT] == 0


def test_moves_r_is_recorded_and_saved(tmp_path):
    """``moves='R'`` runs R's birth/death sampler (no CHANGE or SWAP proposed),
    and the fit says so (`moves`, `summary`), also after `save`/`load`; any
    other setting records its probabilities."""
    fit = gbart(VX, VY, moves='R', ndpost=20, nskip=10, printevery=None)
    assert fit.moves == 'R'
    assert fit.run_info.change_proposed == 0 and fit.run_info.swap_proposed == 0
    assert "moves='R'" in fit.summary()
    fit.save(tmp_path / 'r.npz')
    assert bartz.load(tmp_path / 'r.npz').moves == 'R'
    plain = gbart(VX, VY, moves=('grow', 'prune'), ndpost=20, nskip=10, printevery=None)
    assert plain.moves == {'grow': 0.5, 'prune': 0.5, 'change': 0.0, 'swap': 0.0}


@pytest.mark.parametrize(
    'overrides',
    [
        pytest.param({}, id='defaults'),
        pytest.param({'base': 1.0}, id='base_1'),
        pytest.param({'power': 0.0}, id='power_0'),
        pytest.param({'nskip': 0}, id='nskip_0'),
        pytest.param({'ndpost': 10.0}, id='ndpost_integral_float'),
        pytest.param({'x_train': VX[:, 0]}, id='x_1d'),
        pytest.param({'x_train': VX > 0.5}, id='x_bool'),
        pytest.param({'x_train': VDF, 'x_test': VDF[['c', 'a', 'b']]}, id='x_test_df_reordered'),
        pytest.param({'x_train': VDF, 'x_test': VDF.assign(extra=1.0)}, id='x_test_df_extra_column'),
        pytest.param({'x_train': _with(VX, (3, 1), np.nan)}, id='x_nan'),
        pytest.param({'x_test': _with(VX[:5], (2, 2), np.nan)}, id='x_test_nan_imputed'),
        pytest.param({'x_train': VDF.assign(b=[np.nan] + [1.0] * 19)}, id='x_df_nan'),
        pytest.param({'x_train': VDF.assign(b=list('xy') * 10)}, id='x_df_strings'),
        pytest.param({'x_train': VDF.assign(b=pd.Categorical(list('xy') * 10))}, id='x_df_category'),
        pytest.param({'x_train': VDF.assign(b=pd.Series([1.0, None] * 10, dtype=object))}, id='x_df_object_numbers'),
        pytest.param({'y_train': VY[:, None]}, id='y_column'),
        pytest.param({'y_train': pd.DataFrame({'y': VY})}, id='y_df_column'),
        pytest.param({'type': 'pbart', 'y_train': VB.astype(bool)}, id='pbart_bool'),
        pytest.param({'type': 'pbart', 'y_train': pd.Series(VB.astype(int))}, id='pbart_int_series'),
        pytest.param({'w': np.full(20, 2.0)}, id='w'),
        pytest.param({'seed': jax.random.key(3)}, id='seed_key'),
        pytest.param({'seed': np.int64(3)}, id='seed_numpy_int'),
        pytest.param({'mc_cores': 2}, id='mc_cores_2'),
        pytest.param({'sparse': True}, id='sparse'),
        pytest.param({'x_train': scipy.sparse.csr_matrix(VX), 'x_test': scipy.sparse.csc_matrix(VX[:5])}, id='x_scipy_sparse'),
        pytest.param({'numcut': [0, 5, 0]}, id='numcut_one_column'),
    ],
)
def test_good_input_passes_validation(no_sampler, overrides):
    """Valid inputs at the boundaries reach the sampler; missing values in
    an x_test column that had none in x_train are imputed with a warning
    that says so."""
    x_test = overrides.get('x_test')
    imputed = x_test is not None and bool(pd.isna(pd.DataFrame(x_test)).to_numpy().any())
    warns = pytest.warns(UserWarning, match='imputed with its training median') if imputed else contextlib.nullcontext()
    with warns, pytest.raises(_Reached):
        _call(**overrides)


def test_column_varying_below_float32_warns(no_sampler):
    """A column whose values differ only below float32 precision (it cannot
    be split on) gets a warning that names it and says what to do."""
    with pytest.warns(UserWarning, match=r'column\(s\) \[2\] vary only below float32.*subtract'), pytest.raises(_Reached):
        _call(x_train=np.c_[VX[:, :2], VX[:, 2] + 1e9])


@pytest.mark.parametrize(
    ('overrides', 'warns'),
    [
        pytest.param({'y_train': VY + 1e9}, True, id='large_mean'),
        # beyond 2**24 sd from the offset y_train is refused (tests/test_priors.py)
        pytest.param({'y_train': VY + 1e6 * np.std(VY), 'offset': 0.0}, True, id='large_mean_offset_0'),
        pytest.param({'y_train': VY + 1e3}, False, id='moderate_mean'),
        pytest.param({'y_train': VB, 'type': 'pbart'}, False, id='binary'),
    ],
)
def test_y_far_from_zero_warns(no_sampler, overrides, warns):
    """A y_train whose offset, or whose distance from it, is over 1e5
    standard deviations (float32 rounds there to more than 1% of one) gets
    a warning that says to subtract a constant; ordinary data do not."""
    with warnings.catch_warnings(record=True) as caught, pytest.raises(_Reached):
        warnings.simplefilter('always')
        _call(**overrides)
    far = [w for w in caught if 'far from zero' in str(w.message)]
    assert len(far) == int(warns)
    if warns:
        assert 'subtract a constant from y_train' in str(far[0].message)


def test_predict_bad_input(fit, data):
    x, _, x_test = data
    with pytest.raises(ValueError, match='x_new'):
        fit.predict(np.zeros((5, P + 1)))
    with pytest.raises(ValueError, match='x_new'):
        fit.predict(_with(x_test, (1, 1), np.inf))
    with pytest.raises(TypeError, match='x_new'):
        fit.predict(x_test.astype(str))
    with pytest.raises(ValueError, match='kind'):
        fit.predict(x_test, kind='median')
    with pytest.raises(ValueError, match='max_memory'):
        fit.predict(x_test, max_memory=0)
    with pytest.raises(ValueError, match='x_new'):
        fit.predict(scipy.sparse.csr_matrix(np.zeros((5, P + 1))))


def test_predict_sparse_matches_dense(fit, data):
    """A SciPy sparse x_new (made dense chunk by chunk) predicts as the
    same dense array."""
    _, _, x_test = data
    sparse = scipy.sparse.csr_matrix(np.where(x_test > 0.5, x_test, 0.0))
    dense = sparse.toarray()
    assert_array_equal(fit.predict(sparse), fit.predict(dense))


# ---------------------------------------------------------------- result object


def test_by_chain_points_from_sigma_to_kept_draws(fit):
    """``by_chain('sigma')`` (burn-in included, R's layout) says to use
    ``'sigma_'``; an unknown name says it is not available."""
    assert fit.by_chain('sigma_').shape == (1, fit.ndpost)
    with pytest.raises(ValueError, match=r"by_chain\('sigma_'\)"):
        fit.by_chain('sigma')
    with pytest.raises(ValueError, match='not available'):
        fit.by_chain('no_such_draws')


def test_result_attributes(fit, data):
    x, y, x_test = data
    ndpost, nskip = SMALL['ndpost'], SMALL['nskip']
    assert fit.ndpost == ndpost
    assert fit.yhat_train.shape == (ndpost, N)
    assert fit.yhat_test.shape == (ndpost, N_TEST)
    assert_allclose(fit.yhat_train_mean, fit.yhat_train.mean(axis=0), rtol=1e-6, atol=1e-6)
    assert_allclose(fit.yhat_test_mean, fit.yhat_test.mean(axis=0), rtol=1e-6, atol=1e-6)
    assert np.all(np.isfinite(fit.yhat_train))
    assert np.all(np.isfinite(fit.yhat_test))

    assert fit.sigma.shape == (nskip + ndpost,)
    assert fit.sigma_.shape == (ndpost,)
    assert_array_equal(fit.sigma[nskip:], fit.sigma_)
    assert np.all(fit.sigma > 0)
    assert fit.sigma_mean == pytest.approx(fit.sigma_.mean())

    assert fit.varcount.shape == (ndpost, P)
    assert np.issubdtype(fit.varcount.dtype, np.integer)
    assert np.all(fit.varcount >= 0)
    assert fit.varcount.sum() > 0
    assert_allclose(fit.varcount_mean, fit.varcount.mean(axis=0))
    assert fit.varprob.shape == (ndpost, P)
    assert_allclose(fit.varprob.sum(axis=1), 1)
    assert_allclose(fit.varprob_mean, fit.varprob.mean(axis=0))

    # R's defaults: offset = mean(y), sigest = OLS residual sd, lambda such
    # that P(sigma < sigest) = sigquant under sigma^2 ~ nu lambda / chi2_nu
    assert fit.offset == pytest.approx(y.mean())
    assert fit.sigest == pytest.approx(ols_sigest(x, y), rel=1e-6)
    prob_below = stats.chi2.sf(fit.sigdf * fit.lambda_ / fit.sigest**2, fit.sigdf)
    assert prob_below == pytest.approx(fit.sigquant)
    assert 'wbart' in repr(fit)


def test_fit_follows_data(fit, data):
    """A sanity check of the small fit: far better than the constant."""
    x, y, x_test = data
    assert rmse(fit.yhat_train_mean, f_true(x)) < 0.3 * np.std(y)
    assert rmse(fit.yhat_test_mean, f_true(x_test)) < 0.4 * np.std(y)
    # the noise sd is 0.1 on a signal of sd ~ 0.9
    assert 0.05 < fit.sigma_mean < 0.3
    # x0 and x1 matter, x2 does not
    vc = fit.varcount_mean
    assert vc[2] < vc[0]
    assert vc[2] < vc[1]


def test_predict_matches_yhat_test(fit, data):
    _, y, x_test = data
    scale = np.std(y)
    pred = fit.predict(x_test)
    assert pred.shape == fit.yhat_test.shape
    assert_allclose(pred, fit.yhat_test, rtol=1e-5, atol=1e-5 * scale)
    mean = fit.predict(x_test, kind='mean')
    assert mean.shape == (N_TEST,)
    assert_allclose(mean, fit.yhat_test.mean(axis=0), rtol=1e-5, atol=1e-5 * scale)


def test_predict_at_train_matches_yhat_train(fit, data):
    """yhat_train comes from the sampler's cached residuals; re-evaluating
    the saved trees must give the same function (up to float drift)."""
    x, y, _ = data
    assert_allclose(fit.predict(x), fit.yhat_train, rtol=0, atol=1e-4 * np.std(y))


@pytest.fixture(scope='module')
def df_fit(data):
    """The `fit` fixture's data, as a DataFrame and a Series with their own index,
    x_test with the columns in another order."""
    x, y, x_test = data
    columns = ['alpha', 'beta', 'gamma']
    index = np.arange(1000, 1000 + N)
    x_df = pd.DataFrame(x, columns=columns, index=index)
    y_ser = pd.Series(y, index=index[::-1], name='y')
    x_test_df = pd.DataFrame(x_test, columns=columns)[['gamma', 'alpha', 'beta']]
    return gbart(x_df, y_ser, x_test=x_test_df, seed=0, **SMALL)


def test_dataframe_input_same_draws(df_fit, fit):
    """DataFrame/Series input is read in row order, columns by name."""
    assert_array_equal(df_fit.yhat_train, fit.yhat_train)
    assert_array_equal(df_fit.yhat_test, fit.yhat_test)
    assert_array_equal(df_fit.sigma, fit.sigma)


def test_dataframe_keeps_column_names(df_fit, fit):
    columns = ['alpha', 'beta', 'gamma']
    assert isinstance(df_fit.varcount, pd.DataFrame)
    assert list(df_fit.varcount.columns) == columns
    assert_array_equal(df_fit.varcount.to_numpy(), fit.varcount)
    assert isinstance(df_fit.varprob, pd.DataFrame)
    assert list(df_fit.varprob.columns) == columns
    assert list(df_fit.varcount_mean.index) == columns
    assert list(df_fit.varprob_mean.index) == columns


def test_dataframe_predict_by_column_name(df_fit, data):
    _, y, x_test = data
    x_test_df = pd.DataFrame(x_test, columns=['alpha', 'beta', 'gamma'])
    pred = df_fit.predict(x_test_df[['beta', 'gamma', 'alpha']])
    assert_allclose(pred, df_fit.yhat_test, rtol=1e-5, atol=1e-5 * np.std(y))
    with pytest.raises(ValueError, match='x_new'):
        df_fit.predict(x_test_df[['beta', 'gamma']])


def test_rm_const_drops_constant_column(fit, data):
    """A constant column is dropped: it gets no splits, and the draws are
    those of the fit without it (same data and seed otherwise)."""
    x, y, x_test = data
    x4 = np.insert(x, 1, 7.0, axis=1)
    x_test4 = np.insert(x_test, 1, -3.0, axis=1)
    fit4 = gbart(x4, y, x_test=x_test4, seed=0, **SMALL)
    assert fit4.varcount.shape == (SMALL['ndpost'], P + 1)
    assert np.all(fit4.varcount[:, 1] == 0)
    assert np.all(fit4.varprob[:, 1] == 0)
    assert_allclose(fit4.varprob.sum(axis=1), 1)
    assert_array_equal(fit4.varcount[:, [0, 2, 3]], fit.varcount)
    assert_array_equal(fit4.yhat_train, fit.yhat_train)
    assert_array_equal(fit4.yhat_test, fit.yhat_test)
    assert_allclose(fit4.predict(x_test4), fit.yhat_test, rtol=1e-5, atol=1e-5 * np.std(y))


def test_two_chains(fit, data):
    """mc_cores=2: ndpost draws in total, chain after chain, same posterior."""
    x, y, x_test = data
    fit2 = gbart(x, y, x_test=x_test, seed=0, **SMALL, mc_cores=2)
    ndpost = SMALL['ndpost']
    assert fit2.yhat_train.shape == (ndpost, N)
    assert fit2.yhat_test.shape == (ndpost, N_TEST)
    assert fit2.varcount.shape == (ndpost, P)
    assert np.all(np.isfinite(fit2.yhat_train))
    assert np.all(np.isfinite(fit2.sigma_))
    half = ndpost // 2
    assert not np.allclose(fit2.yhat_train[:half], fit2.yhat_train[half:])
    assert_allclose(fit2.predict(x_test), fit2.yhat_test, rtol=1e-5, atol=1e-5 * np.std(y))
    assert rmse(fit2.yhat_train_mean, fit.yhat_train_mean) < 0.25 * np.std(y)


def test_no_burn_in_with_chains(data):
    """nskip=0 with several chains: sigma has no burn-in rows, one column per chain."""
    x, y, _ = data
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', ConvergenceWarning)
        fit = gbart(x, y, seed=0, **{**SMALL, 'nskip': 0}, mc_cores=2)
    assert fit.sigma.shape == (SMALL['ndpost'] // 2, 2)
    assert_array_equal(fit.sigma.T.reshape(-1), fit.sigma_)


# ---------------------------------------------------------- convergence warning


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_unconverged_fit_warns(seed):
    """No burn-in and 50 draws: f drifts from the empty forest, so the median
    split R-hat of f is above 1.1 (1.14 to 1.21 over seeds 0-7) and that is
    warned; sigma (starting at the OLS residual sd, split R-hat 1.2 to 2.1,
    ESS a few draws) is only reported."""
    x, y, _ = make_data(seed)
    with pytest.warns(ConvergenceWarning, match=r'median R-hat of f over 100 points is \d') as record:
        fit = gbart(x, y, seed=seed, **{**SMALL, 'nskip': 0})
    (warning,) = [w for w in record if issubclass(w.category, ConvergenceWarning)]
    assert 'sigma' not in str(warning.message)
    assert warning.filename == __file__  # points at the call of gbart
    with pytest.warns(ConvergenceWarning, match='median R-hat of f') as record:
        table = fit.diagnostics()
    assert [note[0] for note in table.attrs['notes']] == ['R-hat of sigma', 'ESS of sigma']
    assert [problem[0] for problem in table.attrs['problems']] == [f'median R-hat of f over {N} points']
    text = fit.summary()
    assert 'convergence: WARNING' in text and 'Reported, not warned: R-hat of sigma is' in text
    assert repr(text) == str(text)  # displays as text
    with pytest.warns(ConvergenceWarning) as record:
        bartz.mc_gbart(x, y, seed=seed, **{**SMALL, 'nskip': 0})
    assert {w.filename for w in record if issubclass(w.category, ConvergenceWarning)} == {__file__}


@pytest.mark.slow
@pytest.mark.parametrize('seed', [0, 1])
def test_slow_sigma_at_r_defaults_is_reported_not_warned(seed):
    """R's defaults (200 trees, 100 burn-in, 1000 draws) on Friedman's
    function, n = 1000, one chain: sigma mixes slowly (ESS about 5, split
    R-hat 1.12-1.15 over seeds 0-1) while the chain's halves agree on f
    (median R-hat 1.03-1.04): no warning, and the notes say what to do."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(1000, 10))
    y = 10 * np.sin(np.pi * x[:, 0] * x[:, 1]) + 20 * (x[:, 2] - 0.5) ** 2 + 10 * x[:, 3] + 5 * x[:, 4]
    y = y + rng.normal(size=1000)
    with warnings.catch_warnings():
        warnings.simplefilter('error', ConvergenceWarning)
        fit = gbart(x, y, seed=seed, printevery=None)
        table = fit.diagnostics()
    assert table.attrs['problems'] == []
    assert 'ESS of sigma' in [note[0] for note in table.attrs['notes']]
    assert 'more draws (ndpost)' in table.attrs['advice']
    assert 'no evidence of a problem' in fit.summary()


def test_stuck_chain_warns(data):
    """A chain whose forests are frozen (here: every kept draw of chain 1
    replaced by its first) is warned by name, however well f mixes."""
    x, y, _ = data
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', ConvergenceWarning)
        fit = gbart(x, y, seed=0, **SMALL, mc_cores=2)
    trace = fit._trace  # noqa: SLF001
    per_chain = fit.ndpost // 2
    frozen = {}
    for name in ('var_tree', 'split_tree'):
        array = np.array(getattr(trace, name))
        array[per_chain:] = array[per_chain]
        frozen[name] = array
    fit._trace = trace._replace(**frozen)  # noqa: SLF001
    with pytest.warns(ConvergenceWarning, match=r'stuck chains \(of 2: trees never changed, chain 1\) is 1'):
        fit.diagnostics()


@pytest.mark.parametrize('seed', [0, 1, 2])
@pytest.mark.parametrize('save_yhat_train', [True, False])
def test_unconverged_binary_fit_warns_on_f(seed, save_yhat_train):
    """Binary outcomes have no sigma: f is checked, from the trees when the
    training draws are not saved. Labels from a strong signal, no burn-in, 10
    draws: the median R-hat of f was 1.12 to 1.58 over seeds 0-7."""
    x, _, _ = make_data(seed)
    y = (f_true(x) > 1).astype(float)
    settings = {**SMALL, 'nskip': 0, 'ndpost': 10, 'keepevery': 1}
    with pytest.warns(ConvergenceWarning, match=r'median R-hat of f over 100 points is \d') as record:
        gbart(x, y, type='pbart', seed=seed, save_yhat_train=save_yhat_train, **settings)
    assert not any('sigma' in str(w.message) for w in record if issubclass(w.category, ConvergenceWarning))


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_converged_fit_does_not_warn(seed):
    """A weak signal in unit noise, 200 burn-in iterations, 2000 draws: the
    trees stay small and mix fast. With 1000 draws, ESS of sigma was 157-431
    and the median R-hat of f below 1.01 over seeds 0-3."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(N, P))
    y = x[:, 0] + rng.normal(size=N)
    with warnings.catch_warnings():
        warnings.simplefilter('error', ConvergenceWarning)
        fit = gbart(x, y, seed=seed, **{**SMALL, 'nskip': 200, 'ndpost': 2000})
        table = fit.diagnostics()
    assert table.loc['sigma', 'ess_bulk'] > 100


@pytest.mark.slow
def test_diagnostics_from_x_train_without_saved_draws():
    """A binary fit with ``save_yhat_train=False`` has no sigma and no saved
    draws: ``diagnostics(x_train)`` computes the rows of f from the trees,
    and they equal those of the same fit with the draws saved (R-hat and
    ESS are rank-based: probabilities and latent draws rank alike)."""
    x, _, _ = make_data(0)
    y = (f_true(x) > 1).astype(float)
    settings = {**SMALL, 'nskip': 20, 'ndpost': 40, 'mc_cores': 2}
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', ConvergenceWarning)
        lean = gbart(x, y, type='pbart', seed=3, save_yhat_train=False, **settings)
        full = gbart(x, y, type='pbart', seed=3, **settings)
        assert lean.diagnostics().empty
        table = lean.diagnostics(x)
        reference = full.diagnostics()
    assert list(table.index) == ['yhat_train (worst point)', 'yhat_train (median point)']
    # (float32 probabilities near 0 or 1 can tie where the latent draws do
    # not, which moves the ranks a little: the worst point most)
    np.testing.assert_allclose(table.iloc[1].to_numpy(float), reference.iloc[1].to_numpy(float), rtol=0.05)
    np.testing.assert_allclose(table.iloc[0].to_numpy(float), reference.iloc[0].to_numpy(float), rtol=0.25)
    # by chunks of rows (memory bounded by the chunk): the same statistics
    chunked, _ = lean._point_stats(x, chunk_bytes=4 * lean.ndpost * 7)  # noqa: SLF001
    whole, _ = lean._point_stats(x)  # noqa: SLF001
    for a, b in zip(chunked, whole, strict=True):
        np.testing.assert_array_equal(a, b)
    for bad, message in [(x[:0], 'x_train must have at least one row'), (x[:, :2], 'x_train must have')]:
        with pytest.raises(ValueError, match=message):
            lean.diagnostics(bad)


def test_diagnostics_with_too_few_draws_says_so(data):
    """3 kept draws per chain are too few for R-hat: the error names the fit's
    ndpost and chains, not the axes of an internal array."""
    x, y, _ = data
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', ConvergenceWarning)
        fit = gbart(x, y, seed=0, **{**SMALL, 'ndpost': 6}, mc_cores=2)
    with pytest.raises(ValueError, match=r'at least 4 kept draws per chain, this fit has 3 \(ndpost=6 over 2 chains\)'):
        fit.diagnostics()


def test_convergence_warning_can_be_silenced(data):
    x, y, _ = data
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        warnings.filterwarnings('ignore', category=bartz.ConvergenceWarning)
        fit = gbart(x, y, seed=0, **{**SMALL, 'nskip': 0})
        fit.diagnostics()
    assert not [w for w in caught if issubclass(w.category, ConvergenceWarning)]


# ---------------------------------------------------------------- probit


def test_probit_result(pfit, binary_data):
    _, y, x_test = binary_data
    ndpost = SMALL['ndpost']
    assert pfit.type == 'pbart'
    assert pfit.prob_train.shape == (ndpost, N)
    assert pfit.prob_test.shape == (ndpost, N_TEST)
    for prob in (pfit.prob_train, pfit.prob_test):
        assert np.all((prob >= 0) & (prob <= 1))
    assert_allclose(pfit.prob_train, stats.norm.cdf(pfit.yhat_train), rtol=1e-6, atol=1e-7)
    assert_allclose(pfit.prob_test, stats.norm.cdf(pfit.yhat_test), rtol=1e-6, atol=1e-7)
    assert_allclose(pfit.prob_train_mean, pfit.prob_train.mean(axis=0, dtype=np.float64), atol=1e-12)
    assert_allclose(pfit.prob_test_mean, pfit.prob_test.mean(axis=0, dtype=np.float64), atol=1e-12)
    assert_allclose(pfit.yhat_train_mean, pfit.yhat_train.mean(axis=0), rtol=1e-6, atol=1e-6)
    assert pfit.offset == pytest.approx(stats.norm.ppf(y.mean()))
    # the probability follows x0 (P(y=1) = Phi(2 (x0 - 1/2)))
    truth = stats.norm.cdf(2 * (x_test[:, 0] - 0.5))
    assert rmse(pfit.prob_test_mean, truth) < rmse(y.mean(), truth)
    assert 'pbart' in repr(pfit)


def test_probit_predict(pfit, binary_data):
    _, _, x_test = binary_data
    pred = pfit.predict(x_test)
    assert pred.shape == (SMALL['ndpost'], N_TEST)
    assert np.all((pred >= 0) & (pred <= 1))
    assert_allclose(pred, pfit.prob_test, rtol=1e-5, atol=1e-6)
    mean = pfit.predict(x_test, kind='mean')
    assert_allclose(mean, pfit.prob_test.mean(axis=0), rtol=1e-5, atol=1e-6)


def test_probit_bool_outcome_same_draws(pfit, binary_data):
    x, y, x_test = binary_data
    fit_bool = gbart(x, pd.Series(y.astype(bool)), x_test=x_test, type='pbart', seed=0, **SMALL)
    assert_array_equal(fit_bool.yhat_train, pfit.yhat_train)


@pytest.fixture
def extreme_uniform(monkeypatch, traced_code_patched):
    """Make `jax.random.uniform` return its lowest possible value (what it
    computes from all-zero random bits, probability 2**-23 per number) at the
    first element of every non-scalar draw. Only a fresh trace sees the
    patch: use it with ntree=13, which no unpatched test uses."""
    original = jax.random.uniform

    def uniform(key, shape=(), dtype=float, minval=0.0, maxval=1.0):
        u = original(key, shape, dtype, minval, maxval)
        if u.ndim == 0:
            return u
        flat = u.reshape(-1)
        zero_bits = flat[0] * 0  # computed at run time, like jax's own
        lowest = jax.lax.max(jnp.asarray(minval, u.dtype), zero_bits * (maxval - minval) + minval)
        return flat.at[0].set(lowest).reshape(u.shape)

    monkeypatch.setattr(jax.random, 'uniform', uniform)


@pytest.mark.parametrize(
    'far_tail',
    [
        pytest.param(False, id='default'),
        pytest.param(True, id='far_tail'),
    ],
)
def test_probit_chain_survives_extreme_uniform(binary_data, extreme_uniform, far_tail):
    """A uniform draw equal to its minimum must not break the probit chain
    (it did, with probability ~2**-23 per latent draw, ~1 fit in 5 at n =
    1000). With ``far_tail`` the offset puts point 0 8 sd on the wrong side
    of the threshold, and a tiny leaf prior sd (huge k) keeps it there, so
    its latent is drawn from the exponential tail approximation."""
    x, y, x_test = binary_data
    if far_tail:
        extra = {'offset': 8.0 if y[0] == 0 else -8.0, 'k': 1e4}
    else:
        extra = {}
    fit = gbart(x, y, x_test=x_test, type='pbart', seed=0, **{**SMALL, 'ntree': 13}, **extra)
    assert np.all(np.isfinite(fit.yhat_train))
    assert np.all(np.isfinite(fit.yhat_test))


# ---------------------------------------------------------------- determinism


def test_same_seed_same_draws(fit, data):
    x, y, x_test = data
    again = gbart(x, y, x_test=x_test, seed=0, **SMALL)
    assert_array_equal(again.yhat_train, fit.yhat_train)
    assert_array_equal(again.yhat_test, fit.yhat_test)
    assert_array_equal(again.sigma, fit.sigma)
    assert_array_equal(again.varcount, fit.varcount)


def test_other_seed_other_draws(fit, data):
    x, y, x_test = data
    other = gbart(x, y, x_test=x_test, seed=1, **SMALL)
    assert not np.allclose(other.yhat_train, fit.yhat_train)
    assert not np.allclose(other.sigma_, fit.sigma_)
    # but the same posterior, roughly (short chains: loose)
    assert rmse(other.yhat_train_mean, fit.yhat_train_mean) < 0.25 * np.std(y)


@pytest.mark.parametrize('kind', ['draws', 'mean'])
def test_predict_independent_of_memory_budget(fit, data, kind):
    _, y, x_test = data
    default = fit.predict(x_test, kind=kind)
    tiny = fit.predict(x_test, kind=kind, max_memory=1)
    small = fit.predict(x_test, kind=kind, max_memory=20_000)
    assert_allclose(tiny, default, rtol=1e-6, atol=1e-6 * np.std(y))
    assert_allclose(small, default, rtol=1e-6, atol=1e-6 * np.std(y))


def test_draws_independent_of_printevery(fit, data, capsys):
    """printevery sets the size of the compiled chunks; draws must not change."""
    x, y, x_test = data
    chunked = gbart(x, y, x_test=x_test, seed=0, **{**SMALL, 'printevery': 7})
    out = capsys.readouterr().out
    assert f'{SMALL["nskip"] + SMALL["ndpost"]}/{SMALL["nskip"] + SMALL["ndpost"]}' in out
    # the progress line shows the acceptance rate of every move
    last = out.strip().splitlines()[-1]
    assert all(f' {move} ' in last for move in ('grow', 'prune', 'change', 'swap')), last
    assert_array_equal(chunked.yhat_train, fit.yhat_train)
    assert_array_equal(chunked.sigma, fit.sigma)


# ---------------------------------------------------------------- compile once


@pytest.fixture
def runners_used():
    """For each MCMC chunk runner `run_mcmc` asks for
    (`bartz.run.loop.wrap_chunk_runners`), the number of runners
    `bartz.run.loop.chunk_runner` made since the fixture started: 0 for
    a runner made before (compiled, in memory or stored)."""
    used = []
    made = mcmcloop.chunk_runner.cache_info().misses

    def recording(runner):
        used.append(mcmcloop.chunk_runner.cache_info().misses - made)
        return runner

    with mcmcloop.wrap_chunk_runners(recording):
        yield used


def test_refit_same_shape_does_not_recompile(fit, runners_used):
    """A second fit on other data of the same shape reuses the compiled
    MCMC chunk (the `fit` fixture compiled it) and compiles nothing."""
    x, y, _ = make_data(7)
    with count_jax_events() as events:
        other = gbart(x, 3 * y + 1, seed=5, **SMALL)
    assert np.all(np.isfinite(other.yhat_train))
    assert runners_used and not any(runners_used)  # the runners the `fit` fixture made
    assert events[_COMPILE_EVENT] == 0
    # eager jnp ops between chunks may re-trace their primitive ('bind'),
    # but no jitted function of bartz is traced again
    assert set(events['traced']) <= {'bind'}


def test_new_keepevery_does_not_recompile_and_thins_the_same_chain(fit, runners_used):
    """The thinning is not compiled in: fits with ``keepevery`` 1 and 3 use
    the MCMC chunk the `fit` fixture compiled and compile nothing, and the
    draws kept with ``keepevery=3`` are every third draw of the chain that
    keeps them all (the same iterations, the same keys)."""
    x, y, _ = make_data(7)
    ndpost = 12
    with count_jax_events() as events:
        thin = gbart(x, y, seed=5, **{**SMALL, 'ndpost': ndpost, 'keepevery': 3})
        full = gbart(x, y, seed=5, **{**SMALL, 'ndpost': 3 * ndpost, 'keepevery': 1})
    assert events[_COMPILE_EVENT] == 0
    assert runners_used and not any(runners_used)
    nskip = SMALL['nskip']
    assert thin.yhat_train.shape == (ndpost, x.shape[0])
    assert_array_equal(thin.yhat_train, full.yhat_train[2::3])
    assert_array_equal(thin.sigma[:nskip], full.sigma[:nskip])
    assert_array_equal(thin.sigma[nskip:], full.sigma[nskip:][2::3])


def test_compile_counter_works():
    """The event counter used above does see a fresh compilation."""
    with count_jax_events() as events:
        jax.jit(lambda a: a * 3 + 1)(np.float32(2))
    assert events[_TRACE_EVENT] >= 1
    assert events[_COMPILE_EVENT] >= 1


def test_refit_with_x_test_same_shape_does_not_recompile(fit):
    x, y, x_test = make_data(8)
    with count_jax_events() as events:
        gbart(x, y, x_test=x_test, seed=6, **SMALL)
    assert events[_COMPILE_EVENT] == 0


def test_predict_twice_does_not_recompile(fit, data):
    _, _, x_test = data
    fit.predict(x_test)
    with count_jax_events() as events:
        fit.predict(x_test)
    assert events[_COMPILE_EVENT] == 0


# ---------------------------------------------------------------- weights


@pytest.fixture(scope='module')
def shifted_data():
    """Half the points (at random, unrelated to x) are shifted up by 3."""
    x, _, _ = make_data(11)
    rng = np.random.default_rng(12)
    f = f_true(x)
    shifted = rng.permutation(N) < N // 2
    y = f + 0.3 * rng.normal(size=N) + 3.0 * shifted
    return x, y, f, shifted


def test_w_downweights_points(shifted_data):
    """With w = 10 on the shifted points (error sd 10 sigma there), they are
    treated as noise: the fit stays near f, and sigma near the sd of the
    other points. With w = 1 the fit is pulled up by about 1.5."""
    x, y, f, shifted = shifted_data
    ones = gbart(x, y, w=np.ones(N), seed=2, **SMALL)
    weighted = gbart(x, y, w=np.where(shifted, 10.0, 1.0), seed=2, **SMALL)
    pull_ones = np.mean(ones.yhat_train_mean - f)
    pull_weighted = np.mean(weighted.yhat_train_mean - f)
    assert 1.0 < pull_ones < 2.0
    assert abs(pull_weighted) < 0.4
    assert weighted.sigma.shape == (SMALL['nskip'] + SMALL['ndpost'],)
    assert np.all(np.isfinite(weighted.sigma)) and np.all(weighted.sigma > 0)
    # unweighted residual sd is ~1.5; weighted, ~0.3 (0.3 noise, and 3/10 shifts)
    assert 0.15 < weighted.sigma_mean < 0.5
    assert ones.sigma_mean > 1.0


def test_unit_w_same_as_no_w(fit, data):
    """w = 1 everywhere is the unweighted model: same draws up to rounding."""
    x, y, x_test = data
    ones = gbart(x, y, x_test=x_test, w=np.ones(N), seed=0, **SMALL)
    assert_allclose(ones.yhat_train, fit.yhat_train, rtol=1e-5, atol=1e-5 * np.std(y))
    assert_allclose(ones.sigma, fit.sigma, rtol=1e-5)


# ---------------------------------------------------------------- statistical recovery (slow)


def friedman(x):
    return 10 * np.sin(np.pi * x[:, 0] * x[:, 1]) + 20 * (x[:, 2] - 0.5) ** 2 + 10 * x[:, 3] + 5 * x[:, 4]


def coverage(draws, truth, level=0.95):
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return float(np.mean((lo <= truth) & (truth <= hi)))


@pytest.mark.slow
@pytest.mark.parametrize('seed', [1, 2, 3])
def test_friedman_recovery(seed):
    """Friedman #1, n = 1000, p = 10, noise sd 1, R's default BART settings.

    Thresholds: over 10 data sets, the RMSE of the posterior mean was
    0.52-0.62 at the training points and 0.62-0.79 at 1000 test points
    (mean 0.70, sd 0.05; the spread is mostly from the data set, a chain 4
    times longer on the worst one gave 0.75); 95% coverage 0.88-0.96;
    posterior mean of sigma 0.86-0.95: with 200 trees and n = 1000 BART
    overfits a little, sigma -> 1 as n grows (0.99 at n = 4000) and is
    above 1 with 50 trees.
    """
    rng = np.random.default_rng(seed)
    n = 1000
    x = rng.uniform(size=(n, 10))
    x_test = rng.uniform(size=(n, 10))
    f, f_test = friedman(x), friedman(x_test)
    y = f + rng.normal(size=n)
    fit = gbart(x, y, x_test=x_test, ntree=200, nskip=200, ndpost=500, printevery=None, seed=seed)
    assert np.all(np.isfinite(fit.yhat_train))
    assert rmse(fit.yhat_train_mean, f) < 0.75
    assert rmse(fit.yhat_test_mean, f_test) < 0.85
    assert 0.85 <= coverage(fit.yhat_train, f) <= 1.0
    assert 0.85 <= coverage(fit.yhat_test, f_test) <= 1.0
    assert 0.8 < fit.sigma_mean < 1.15
    # x1..x5 are split on more than the 5 irrelevant predictors (on average:
    # without DART, BART splits on noise predictors too, and about as often
    # as on x5, which enters linearly with a small slope)
    vc = fit.varcount_mean
    assert vc[:5].mean() > 1.3 * vc[5:].mean()


@pytest.mark.slow
@pytest.mark.parametrize('seed', [0, 2, 3])
def test_probit_recovery(seed):
    """P(y = 1 | x) = Phi(f(x)), f Friedman #1 standardised (sd ~1), n = 1000,
    R's probit defaults (50 trees, keepevery 10).

    Thresholds: the true probabilities have sd ~0.29 (the RMSE of the
    constant predictor); over 4 data sets the RMSE of the posterior mean
    probability was 0.107-0.119 (train and test), so < 0.15 and < half the
    constant's leaves a margin of several data-set sds.
    """
    rng = np.random.default_rng(100 + seed)
    n = 1000
    x = rng.uniform(size=(n, 10))
    x_test = rng.uniform(size=(n, 10))
    f = (friedman(x) - 14.4) / 4.9
    f_test = (friedman(x_test) - 14.4) / 4.9
    prob, prob_test = stats.norm.cdf(f), stats.norm.cdf(f_test)
    y = (rng.uniform(size=n) < prob).astype(float)
    fit = gbart(x, y, x_test=x_test, type='pbart', nskip=200, ndpost=200, printevery=None, seed=seed)
    assert np.all(np.isfinite(fit.prob_train))
    assert np.all(np.isfinite(fit.prob_test))
    const_train = rmse(y.mean(), prob)
    const_test = rmse(y.mean(), prob_test)
    assert rmse(fit.prob_train_mean, prob) < min(0.15, 0.5 * const_train)
    assert rmse(fit.prob_test_mean, prob_test) < min(0.15, 0.5 * const_test)
