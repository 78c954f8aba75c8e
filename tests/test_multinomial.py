"""Multinomial BART: R's sequence of binary models (`bartz.mbart`,
`bartz.mc_mbart`) and one binary model per category (`bartz.mbart2`,
`bartz.mc_mbart2`), R's predict: recovery of known probabilities, R's
layout, the categories, the checks, and R's demo ``alligator.R``."""


import numpy as np
import pandas as pd
import pytest
from scipy import special

import bartz
from familyfiles import assert_round_trip
from rdata import r_data
from bartz.api.multinomial import MBARTPrediction

N, NDPOST = 400, 300
GRID = np.linspace(0.1, 0.9, 9)
QUIET = {'printevery': None}
TINY = {'ndpost': 20, 'nskip': 10, 'keepevery': 1, 'printevery': None}  # the shapes of `recovery`: no new compilation


def truth(x):
    """(m, 3) category probabilities, linear in x, summing to 1."""
    return np.stack([0.2 + 0.5 * x, 0.5 - 0.3 * x, 0.3 - 0.2 * x], axis=-1)


def simulate(seed, n=N):
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=n)
    cum = np.cumsum(truth(x), axis=-1)
    y = 1 + (rng.uniform(size=(n, 1)) > cum).sum(axis=-1)
    return x[:, None], y


@pytest.fixture(scope='module', params=[1, 2])
def recovery(request):
    """A fit of each seed (data and chain) with the test points on a grid."""
    x, y = simulate(request.param)
    fit = bartz.mbart(x, y, GRID[:, None], ndpost=NDPOST, nskip=100, keepevery=2, seed=request.param, **QUIET)
    return x, y, fit


@pytest.fixture(scope='module')
def tiny():
    x, y = simulate(7)
    return x, y, bartz.mbart(x, y, GRID[:, None], **TINY)


def test_recovers_known_probabilities(recovery):
    """The posterior means are within the posterior's spread of the truth
    at every grid point (tolerance from the draws: 3.5 posterior sd plus
    the Monte Carlo error of the mean), and cover it on average."""
    _, _, fit = recovery
    draws = fit.prob_test.reshape(NDPOST, GRID.size, 3)
    mean, sd = draws.mean(axis=0), draws.std(axis=0, ddof=1)
    ess = bartz.diagnostics.ess(draws, chain_axis=None, draw_axis=0)
    tol = 3.5 * np.sqrt(sd**2 + sd**2 / ess)
    err = np.abs(mean - truth(GRID))
    assert np.all(err < tol), (err / tol).max()
    assert np.sqrt(np.mean((err / sd) ** 2)) < 2


def test_each_draw_is_a_distribution(recovery):
    _, _, fit = recovery
    assert fit.prob_test.shape == (NDPOST, GRID.size * 3)
    draws = fit.prob_test.reshape(NDPOST, GRID.size, 3)
    assert np.all(draws >= 0)
    np.testing.assert_allclose(draws.sum(axis=-1), 1, rtol=1e-12)
    np.testing.assert_allclose(fit.prob_test_mean, fit.prob_test.mean(axis=0))


def test_r_layout_and_steps(tiny):
    """Categories fastest; P(y = h) = p_h prod_{j<h} (1 - p_j) from the
    binary steps, each fitted on the rows with y >= h; yhat is the latent
    f_h + offset_h, NaN for the last category, as R."""
    _, y, fit = tiny
    assert (fit.K, list(fit.cats), fit.type, fit.ndpost, fit.ntree) == (3, [1, 2, 3], 'pbart', 20, 50)
    p0, p1 = (f.prob_test for f in fit.fits)
    np.testing.assert_allclose(fit.prob_test[:, 0::3], p0, rtol=1e-6)
    np.testing.assert_allclose(fit.prob_test[:, 1::3], (1 - p0) * p1, rtol=1e-6)
    np.testing.assert_allclose(fit.prob_test[:, 2::3], (1 - p0) * (1 - p1), rtol=1e-6)
    np.testing.assert_allclose(fit.yhat_test[:, 1::3], fit.fits[1].yhat_test, rtol=1e-6)
    assert np.isnan(fit.yhat_test[:, 2::3]).all()
    assert [f.yhat_train_mean.size for f in fit.fits] == [y.size, np.sum(y >= 2)]
    np.testing.assert_allclose(fit.offset, [f.offset for f in fit.fits])
    assert fit.varcount_mean.shape == fit.varprob_mean.shape == (2, 1)
    assert len(fit.varcount) == 2
    assert fit.varcount[0].shape == (20, 1)


def test_r_predict(tiny):
    """bartz.predict gives R's predict.mbart: the fit's own draws at x_test."""
    _, _, fit = tiny
    pred = bartz.predict(fit, GRID[:, None])
    assert isinstance(pred, MBARTPrediction)
    np.testing.assert_allclose(pred.prob_test, fit.prob_test, atol=1e-6)
    np.testing.assert_allclose(pred.yhat_test, fit.yhat_test, atol=1e-5)
    np.testing.assert_allclose(pred.prob_test_mean, pred.prob_test.mean(axis=0))
    assert pred.K == 3
    np.testing.assert_array_equal(pred.offset, fit.offset)
    np.testing.assert_allclose(fit.predict(GRID[:3, None]), pred.prob_test[:, :9], atol=1e-6)


def test_string_and_categorical_outcomes(tiny):
    """Strings are sorted as R's factor levels; a categorical keeps its
    order; the same categories give the same chain as integer codes."""
    x, y, fit = tiny
    labels = np.array(['bird', 'fish', 'other'])[y - 1]
    by_name = bartz.mbart(x, labels, GRID[:, None], **TINY)
    assert list(by_name.cats) == ['bird', 'fish', 'other']
    np.testing.assert_array_equal(by_name.prob_test, fit.prob_test)
    reordered = pd.Categorical(labels, categories=['other', 'fish', 'bird', 'unused'])
    cat = bartz.mbart(x, reordered, GRID[:, None], **TINY)
    assert list(cat.cats) == ['other', 'fish', 'bird']
    assert cat.fits[0].yhat_train_mean.size == x.shape[0]
    assert cat.prob_test.shape == fit.prob_test.shape


def test_dataframe_predictors(tiny):
    """A DataFrame with a categorical column is encoded once (R's model
    matrix); prediction takes the same columns by name."""
    x, y, _ = tiny
    df = pd.DataFrame({'u': x[:, 0], 'g': pd.Categorical(np.where(x[:, 0] > 0.5, 'hi', 'lo'))})
    fit = bartz.mbart(df, y, df.iloc[:4], **TINY)
    assert fit.varcount_mean.shape[0] == 2
    pred = bartz.predict(fit, df.iloc[:4][['g', 'u']])
    np.testing.assert_allclose(pred.prob_test, fit.prob_test, atol=1e-6)


def test_mc_mbart(tiny):
    """mc_mbart runs mc_cores chains in every step, ndpost in total;
    mc_cores=1 is mbart."""
    x, y, fit = tiny
    two = bartz.mc_mbart(x, y, GRID[:, None], mc_cores=2, **TINY)
    assert two.chains == 2
    assert two.prob_test.shape == fit.prob_test.shape
    one = bartz.mc_mbart(x, y, GRID[:, None], mc_cores=1, **TINY)
    np.testing.assert_array_equal(one.prob_test, fit.prob_test)


@pytest.mark.slow  # compiles the logistic sampler
def test_lbart_steps(tiny):
    x, y, _ = tiny
    fit = bartz.mbart(x, y, GRID[:, None], type='lbart', **TINY)
    assert fit.type == 'lbart'
    assert all(f.type == 'lbart' and f.tau_num == pytest.approx(6) for f in fit.fits)
    np.testing.assert_allclose(fit.prob_test.reshape(20, GRID.size, 3).sum(axis=-1), 1, rtol=1e-12)


def test_mbart2_layout(tiny):
    """mbart2: one binary fit per category on all rows, the probabilities
    the normalised exponentials of the latent draws, at x_train and x_test;
    R's predict.mbart2 recomputes them."""
    x, y, _ = tiny
    fit = bartz.mbart2(x, y, GRID[:, None], type='pbart', **TINY)
    assert (fit.model, fit.K, len(fit.fits)) == ('mbart2', 3, 3)
    assert [f.yhat_train_mean.size for f in fit.fits] == [y.size] * 3
    latent = np.stack([f.yhat_test for f in fit.fits], axis=-1)
    np.testing.assert_allclose(fit.yhat_test, latent.reshape(20, -1), rtol=1e-6)
    np.testing.assert_allclose(fit.prob_test, special.softmax(latent, axis=-1).reshape(20, -1), rtol=1e-6)
    assert fit.prob_train.shape == fit.yhat_train.shape == (20, y.size * 3)
    np.testing.assert_allclose(fit.prob_train.reshape(20, y.size, 3).sum(axis=-1), 1, rtol=1e-12)
    np.testing.assert_allclose(fit.prob_train_mean, fit.prob_train.mean(axis=0))
    pred = bartz.predict(fit, GRID[:, None])
    np.testing.assert_allclose(pred.prob_test, fit.prob_test, atol=1e-6)
    assert fit.offset.shape == (3,)


@pytest.mark.slow  # compiles the logistic sampler
def test_mc_mbart2_defaults(tiny):
    """R's defaults of mbart2: logistic steps (tau_num 6); mc_mbart2 runs 2
    chains, ndpost in total."""
    x, y, _ = tiny
    fit = bartz.mc_mbart2(x, y, GRID[:, None], **TINY)
    assert fit.chains == 2
    assert fit.type == 'lbart'
    assert all(f.type == 'lbart' and f.tau_num == pytest.approx(6) for f in fit.fits)
    assert fit.prob_test.shape == (20, GRID.size * 3)
    np.testing.assert_allclose(fit.prob_test.reshape(20, GRID.size, 3).sum(axis=-1), 1, rtol=1e-12)


@pytest.mark.parametrize(
    ('kwargs', 'error', 'match'),
    [
        ({'type': 'wbart'}, ValueError, "type must be 'pbart' or 'lbart'"),
        ({'offset': [0.0, 0.0]}, ValueError, 'offset must be None or 3 numbers'),
        ({'offset': [0.0, np.inf, 0.0]}, ValueError, 'offset must be finite'),
        ({'nkeeptrain': 5}, TypeError, 'unexpected keyword'),
        ({'y_train': slice(29)}, ValueError, r'y_train must have one category per row of x_train \(30 rows\), got 29'),
    ],
)
@pytest.mark.parametrize('function', [bartz.mbart, bartz.mbart2])
def test_bad_arguments(function, kwargs, error, match):
    x, y = simulate(3, 30)
    kwargs = dict(kwargs)
    y = y[kwargs.pop('y_train', slice(None))]  # a slice of the outcomes: lengths that differ
    with pytest.raises(error, match=match):
        function(x, y, **kwargs, **TINY)


@pytest.mark.parametrize(
    ('y', 'match'),
    [
        (np.ones(30), 'at least 2 categories'),
        (np.r_[np.nan, np.ones(29)], 'no missing values'),
        (np.ones((30, 2)), 'one-dimensional'),
    ],
)
def test_bad_outcome(y, match):
    with pytest.raises(ValueError, match=match):
        bartz.mbart(np.arange(30.0), y, **TINY)


def alligator():
    """R's demo: one row per alligator, x = (lake, size, sex) and y = food
    as R's factor codes (alphabetical levels); x_test the 80 cells."""
    table = pd.read_csv(r_data() / 'alligator.csv')
    codes = {c: pd.Categorical(table[c]).codes + 1 for c in ('lake', 'size', 'sex', 'food')}
    cells = np.column_stack([codes['lake'], codes['size'], codes['sex']])
    rows = np.repeat(np.arange(len(table)), table['count'])
    return cells[rows], codes['food'][rows], cells


@pytest.fixture(scope='module', params=[(None, 99), ('R', 99), ('R', 1)], ids=['default-99', 'R-99', 'R-1'])
def alligator_fit(request):
    """R's ``mc.mbart(x.train, y.train, x.test, mc.cores=1, seed=99)`` with
    bartz's default sampler and with R's (``moves='R'``, two seeds), and
    R's ``prob.test.mean`` of it (``reference/alligator_mbart.csv``)."""
    moves, seed = request.param
    x_train, y_train, x_test = alligator()
    fit = bartz.mc_mbart(x_train, y_train, x_test, mc_cores=1, seed=seed, moves=moves, **QUIET)
    reference = pd.read_csv(r_data() / 'reference' / 'alligator_mbart.csv').sort_values(['row', 'category'])
    return moves, fit, reference['prob_mean'].to_numpy()


@pytest.mark.slow
def test_alligator_agrees_with_r(alligator_fit):
    """R's alligator.R: bartz's prob.test.mean is R's to within a fraction
    of the posterior sd of each probability (the draws' spread), and the
    two correlate as R's demo checks against nnet's fit (r^2)."""
    _, fit, r_mean = alligator_fit
    assert fit.prob_test_mean.shape == r_mean.shape == (80 * 5,)
    sd = fit.prob_test.std(axis=0, ddof=1)
    gap = np.abs(fit.prob_test_mean - r_mean) / sd
    assert gap.max() < 0.75, gap.max()
    assert np.sqrt(np.mean(gap**2)) < 0.3
    assert np.corrcoef(fit.prob_test_mean, r_mean)[0, 1] ** 2 > 0.98


@pytest.mark.slow
def test_alligator_within_monte_carlo_error(alligator_fit):
    """With R's sampler (``moves='R'``) bartz reproduces R within Monte Carlo
    error: both sides estimate the same posterior means with chains of the
    same length, so the standard error of the difference is about sqrt(2)
    times bartz's (sd / sqrt(ESS) of the draws); with 400 correlated
    comparisons, |z| < 4.5 each. bartz's default samples the stated prior,
    which R's sampler does not: there the means differ by several standard
    errors (user guide, Multinomial outcomes)."""
    moves, fit, r_mean = alligator_fit
    ess = bartz.diagnostics.ess(fit.prob_test, chain_axis=None, draw_axis=0)
    se = fit.prob_test.std(axis=0, ddof=1) / np.sqrt(ess)
    z = (fit.prob_test_mean - r_mean) / (np.sqrt(2) * se)
    rms = np.sqrt(np.mean(z**2))
    if moves == 'R':
        assert np.abs(z).max() < 4.5, np.abs(z).max()
        assert rms < 1.5, rms
    else:
        assert rms > 2.5, rms


def test_save_load_mbart(tiny, tmp_path):
    """Every step's fit, the categories and the encoding come back."""
    _, _, fit = tiny
    assert_round_trip(fit, tmp_path, GRID[:, None])


def test_family_file_checked_on_load(tiny, tmp_path):
    """A family file whose inner fit is damaged, or that lacks an entry, is
    refused naming the file; an attribute the format cannot store is refused
    before anything is written, and the earlier file stays."""
    _, _, fit = tiny
    path = tmp_path / 'mbart.npz'
    fit.save(path)
    with np.load(path) as archive:
        entries = dict(archive)
    damaged = dict(entries)
    leaves = damaged['fits.0/trace.leaf_tree'].copy()
    leaves.flat[0] = np.nan
    damaged['fits.0/trace.leaf_tree'] = leaves
    np.savez(tmp_path / 'damaged.npz', **damaged)
    with pytest.raises(ValueError, match=r"bartz.load\(.*damaged.npz'\): an inner fit: .*leaf"):
        bartz.load(tmp_path / 'damaged.npz')
    del entries['prob_test']
    np.savez(tmp_path / 'short.npz', **entries)
    with pytest.raises(ValueError, match=r"short.npz'\): the file is truncated or corrupt: it lacks the arrays \['prob_test'\]"):
        bartz.load(tmp_path / 'short.npz')
    before = path.read_bytes()
    odd = bartz.api.multinomial.MBARTFit(**{name: getattr(fit, name) for name in fit.__slots__})
    odd.cats = {'not': 'storable'}
    with pytest.raises(TypeError, match='MBARTFit.cats is a dict'):
        odd.save(path)
    assert path.read_bytes() == before
