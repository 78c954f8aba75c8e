"""Survival BART: R's ``surv.pre.bart`` layout, `surv_bart`, `mc_surv_bart`, R's predict."""


import numpy as np
import pandas as pd
import pytest
from scipy.special import expit

import bartz
from familyfiles import assert_round_trip
from rdata import r_data
from bartz import surv_pre_bart

# ---------------------------------------------------------------- R's layout, worked by hand


def test_layout_covariates():
    """3 people at times 3, 1, 2 (the last censored): rows up to each one's time, time first."""
    pre = surv_pre_bart([3, 1, 2], [1, 1, 0], x_train=[[10.0], [20.0], [30.0]], x_test=[[5.0], [6.0]])
    np.testing.assert_array_equal(pre.times, [1, 2, 3])
    assert pre.K == 3
    np.testing.assert_array_equal(pre.y_train, [0, 0, 1, 1, 0, 0])
    np.testing.assert_array_equal(pre.tx_train, [[1, 10], [2, 10], [3, 10], [1, 20], [1, 30], [2, 30]])
    np.testing.assert_array_equal(pre.tx_test, [[1, 5], [2, 5], [3, 5], [1, 6], [2, 6], [3, 6]])


def test_layout_ties_and_censoring_at_an_event_time():
    """Two people at time 2, one dead, one censored there: the censored one is at risk at 2, no event."""
    pre = surv_pre_bart([2, 2, 1], [1, 0, 1])
    np.testing.assert_array_equal(pre.times, [1, 2])
    np.testing.assert_array_equal(pre.y_train, [0, 1, 0, 0, 1])
    np.testing.assert_array_equal(pre.tx_train[:, 0], [1, 2, 1, 2, 1])
    assert pre.tx_train.shape == (5, 1)
    np.testing.assert_array_equal(pre.tx_test, [[1], [2]])  # Kaplan-Meier analogue: the grid


def test_layout_no_x_test():
    pre = surv_pre_bart([2, 1], [1, 0], x_train=[[0.0], [1.0]])
    assert pre.tx_test is None


def test_layout_K_quantiles():
    """K=2: the grid is the quantiles at 1/2 and 1 (3 and 5), times moved up onto it."""
    pre = surv_pre_bart([1, 2, 3, 4, 5], [1, 1, 0, 1, 1], K=2)
    np.testing.assert_array_equal(pre.times, [3, 5])
    assert pre.K == 2
    np.testing.assert_array_equal(pre.y_train, [1, 1, 0, 0, 1, 0, 1])
    np.testing.assert_array_equal(pre.tx_train[:, 0], [3, 3, 3, 3, 5, 3, 5])


def test_layout_K_quantiles_with_ties():
    """Repeated quantiles are dropped (R's unique): K=3 on 1, 1, 1, 2 gives the grid 1, 2."""
    pre = surv_pre_bart([1, 1, 1, 2], [1, 0, 1, 1], K=3)
    np.testing.assert_array_equal(pre.times, [1, 2])
    assert pre.K == 2
    np.testing.assert_array_equal(pre.y_train, [1, 0, 1, 0, 1])


def test_layout_events_grid():
    """A time off the given grid gives no event row (R's rule), with a warning counting the lost events."""
    with pytest.warns(UserWarning, match='1 of the 3 events are at times not on the events grid'):
        pre = surv_pre_bart([1.5, 2, 3], [1, 1, 1], events=[1, 2, 3])
    np.testing.assert_array_equal(pre.y_train, [0, 0, 1, 0, 0, 1])
    np.testing.assert_array_equal(pre.tx_train[:, 0], [1, 1, 2, 1, 2, 3])


def test_layout_x_test_without_x_train_warns():
    """As R, x_test is ignored without x_train (tx_test is the grid), but not silently."""
    with pytest.warns(UserWarning, match='x_test is ignored without x_train'):
        pre = surv_pre_bart([1, 2], [1, 0], x_test=[[1.0], [2.0]])
    np.testing.assert_array_equal(pre.tx_test, [[1.0], [2.0]])


def test_layout_dataframe():
    x = pd.DataFrame({'age': [60.0, 70.0], 'arm': pd.Categorical(['a', 'b'])})
    pre = surv_pre_bart([2, 1], [0, 1], x_train=x, x_test=x.iloc[:1])
    assert list(pre.tx_train.columns) == ['t', 'age', 'arm']
    assert pre.tx_train['arm'].tolist() == ['a', 'a', 'b']
    np.testing.assert_array_equal(pre.tx_test['t'], [1, 2])
    assert isinstance(pre.tx_train['arm'].dtype, pd.CategoricalDtype)


def test_layout_time_dependent():
    """ztimes/zdelta: the indicator switches on at z, the time becomes the sojourn since z."""
    x = np.array([[2.0, 1.0], [2.0, 0.0]])  # (z, d) of two people observed to time 3
    pre = surv_pre_bart([3, 3], [1, 0], x_train=x, x_test=x[:1], events=[1, 2, 3], ztimes=[0], zdelta=[1])
    np.testing.assert_array_equal(pre.tx_train[:3], [[1, 1, 0], [2, 0, 1], [3, 1, 1]])
    np.testing.assert_array_equal(pre.tx_train[3:], [[1, 1, 0], [2, 2, 0], [3, 3, 0]])
    np.testing.assert_array_equal(pre.tx_test, pre.tx_train[:3])


@pytest.mark.parametrize(
    ('kwargs', 'match'),
    [
        (dict(times=[1, 2], delta=[1]), 'times and delta must be identical'),
        (dict(times=[0, 2], delta=[1, 1]), 'less than or equal to time zero'),
        (dict(times=[1, 2], delta=[1, 2]), 'delta must be 0'),
        (dict(times=[1, 2], delta=[1, 1], events=[2, 1]), 'events must be'),
        (dict(times=[1, 2], delta=[1, 1], x_train=[[1.0]]), 'number of rows in x.train'),
        (dict(times=[1, 2], delta=[1, 1], x_train=[[1.0], [2.0]], ztimes=[0]), 'ztimes and zdelta'),
        (dict(times=[1, 2], delta=[1, 1], x_train=[[1.0], [2.0]], ztimes=[3], zdelta=[0]), 'ztimes must'),
        (dict(times=[], delta=[]), 'times must have at least one value'),
        (dict(times=[1, 2], delta=[1, 1], x_train=[[1.0], [2.0]], x_test=[[1.0, 2.0]]),
         'x_test must have 1 columns like x_train, got 2'),
        (dict(times=[1, 2], delta=[1, 1], x_train=pd.DataFrame({'g': ['a', 'b']}), x_test=pd.DataFrame({'g': ['c']})),
         "level 'c', not seen in x_train"),
    ],
)
def test_layout_errors(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        surv_pre_bart(**kwargs)


# ---------------------------------------------------------------- surv_bart and R's predict

SMALL = dict(ntree=20, ndpost=60, nskip=30, keepevery=1, printevery=None)


def _exponential(seed, n=200, rates=(0.5, 1.5), end=1.5):
    """Exponential times of rate ``rates[x]`` for a binary x, censored at `end` (on the grid)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2, n).astype(float)
    t = rng.exponential(1 / np.asarray(rates)[x.astype(int)])
    return x[:, None], np.minimum(t, end), (t < end).astype(int)


@pytest.fixture(scope='module')
def small():
    x, times, delta = _exponential(0, n=60)
    x_test = np.array([[0.0], [1.0]])
    post = bartz.surv_bart(x, times=times, delta=delta, x_test=x_test, K=4, seed=1, **SMALL)
    return x, times, delta, x_test, post


def test_surv_bart_attributes(small):
    """R's survbart list: the grid, the hazards at tx_test and their running products."""
    _, _, _, _, post = small
    assert post.K == 4 and post.times.shape == (4,) and post.type == 'pbart'
    assert post.tx_test.shape == (8, 2) and post.surv_test.shape == (60, 8)
    assert isinstance(post.fit, bartz.BARTFit) and post.prob_train is post.fit.prob_train
    assert post.varcount.shape == (60, 2) and post.ndpost == 60
    np.testing.assert_allclose(post.prob_test, post.fit.predict(post.tx_test), rtol=1e-6)
    np.testing.assert_allclose(post.prob_test, bartz.predict(post.fit, post.tx_test).prob_test, rtol=1e-6)
    by_hand = np.cumprod(1 - post.prob_test.astype(np.float64).reshape(60, 2, 4), axis=2).reshape(60, 8)
    np.testing.assert_allclose(post.surv_test, by_hand, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(post.surv_test_mean, by_hand.mean(axis=0), rtol=1e-5, atol=1e-7)
    assert np.all(np.diff(post.surv_test.reshape(60, 2, 4), axis=2) <= 0)


def test_predict_survbart(small):
    """bartz.predict is R's predict.survbart; blocks of settings and kind='mean' change nothing."""
    _, _, _, _, post = small
    pred = bartz.predict(post, post.tx_test)
    assert pred.K == 4
    np.testing.assert_array_equal(pred.times, post.times)
    np.testing.assert_array_equal(pred.surv_test, post.surv_test)
    np.testing.assert_array_equal(pred.yhat_test, post.yhat_test)
    assert pred.binary_offset == post.offset
    mean = post.r_predict(post.tx_test, kind='mean', max_memory=1)  # one setting per block
    assert mean.surv_test is None and mean.prob_test is None
    np.testing.assert_allclose(mean.surv_test_mean, post.surv_test_mean, rtol=1e-6)



def test_predict_survbart_in_blocks(small):
    """The draws too are the same one setting of x at a time (the host bound)."""
    _, _, _, _, post = small
    pred = post.r_predict(post.tx_test, max_memory=1)
    np.testing.assert_allclose(pred.surv_test, post.surv_test, rtol=1e-5, atol=1e-7)


def test_surv_bart_dataframe_and_id():
    x, times, delta = _exponential(4, n=40)
    frame = pd.DataFrame({'arm': pd.Categorical(np.where(x[:, 0] > 0, 'b', 'a'))})
    post = bartz.surv_bart(frame, times=times, delta=delta, x_test=frame.iloc[:2], K=3, id='trial 1', **SMALL)
    assert post.id == 'trial 1'
    assert list(post.tx_train.columns) == ['t', 'arm'] and post.surv_test.shape == (60, 2 * post.K)
    pred = bartz.predict(post, post.tx_test)
    np.testing.assert_allclose(pred.surv_test_mean, post.surv_test_mean, rtol=1e-6)

def test_predict_survbart_layout_refused(small):
    _, _, _, _, post = small
    with pytest.raises(ValueError, match=r'newdata must have 2 columns like tx_train \(the time first'):
        bartz.predict(post, np.ones((4, 1)))  # the covariate without the time column
    with pytest.raises(ValueError, match='grid times'):
        bartz.predict(post, post.tx_test[::-1])
    with pytest.raises(ValueError, match="'draws' or 'mean'"):
        post.r_predict(post.tx_test, kind='sd')


def test_surv_bart_expanded_input_same_draws(small):
    """y_train given: x_train taken as the expanded rows (R's second case), the same chain."""
    x, times, delta, x_test, post = small
    pre = bartz.surv_pre_bart(times, delta, x, x_test, K=4)
    again = bartz.surv_bart(pre.tx_train, pre.y_train, x_test=pre.tx_test, seed=1, **SMALL)
    np.testing.assert_array_equal(again.times, post.times)
    np.testing.assert_array_equal(again.surv_test, post.surv_test)


def test_surv_bart_means_only(small):
    x, times, delta, x_test, post = small
    means = bartz.surv_bart(x, times=times, delta=delta, x_test=x_test, K=4, seed=1, keep_test_draws=False, **SMALL)
    assert means.surv_test is None and means.prob_test is None and means.yhat_test is None
    np.testing.assert_allclose(means.surv_test_mean, post.surv_test_mean, rtol=1e-6)
    np.testing.assert_allclose(means.prob_test_mean, post.prob_test.mean(axis=0), rtol=1e-5)


def test_mc_surv_bart_chains(small):
    x, times, delta, x_test, _ = small
    post = bartz.mc_surv_bart(x, times=times, delta=delta, x_test=x_test, K=4, mc_cores=2, **SMALL)
    assert post.fit.chains == 2 and post.ndpost == 60 and post.surv_test.shape == (60, 8)


def test_surv_bart_lbart_and_kaplan_meier_analogue():
    """No covariates (R's Kaplan-Meier analogue): tx_test is the grid; type='lbart' uses the logistic link."""
    _, times, delta = _exponential(2, n=40)
    post = bartz.surv_bart(times=times, delta=delta, K=3, type='lbart', **SMALL)
    assert post.tx_test.shape == (3, 1)
    np.testing.assert_allclose(post.prob_test, expit(post.yhat_test.astype(np.float64)), rtol=1e-5)


@pytest.mark.parametrize(
    ('kwargs', 'error', 'match'),
    [
        (dict(type='wbart'), ValueError, "either 'pbart' or 'lbart'"),
        (dict(sigest=1.0), TypeError, 'unexpected keyword'),
        (dict(times=None), ValueError, 'needs times and delta'),
        (dict(y_train=[0, 1, 2]), ValueError, r'y.train has >2 values'),
        (dict(keep_test_draws=1), TypeError, 'keep_test_draws'),
        (dict(delta=[0, 0, 0]), ValueError, 'delta has no events'),
        (dict(x_train=[[1.0]], times=[1.0], delta=[1]), ValueError, 'every one of the 1 person-period rows is an event'),
        # ntree=0 would be refused when the fit starts: the test rows are checked before it
        (dict(x_test=np.ones((2, 2)), ntree=0), ValueError, 'x_test must have 1 columns like x_train, got 2'),
        (dict(y_train=[0, 1, 0], x_test=[[1.0, 2, 3]], ntree=0), ValueError, 'x_test must have 2 columns like x_train, got 3'),
    ],
)
def test_surv_bart_errors(kwargs, error, match):
    """Refused in the terms of the arguments given, before any fit."""
    x, times, delta = _exponential(3, n=3)
    args = dict(x_train=x, times=times, delta=delta) | kwargs
    if 'y_train' in kwargs:  # R's second case: x_train the expanded rows (time, covariate)
        args |= dict(x_train=np.array([[1.0, 0], [2, 0], [1, 1]]), times=None, delta=None)
    with pytest.raises(error, match=match):
        bartz.surv_bart(**(SMALL | args))


# ---------------------------------------------------------------- recovery of a known survival


@pytest.mark.parametrize('seed', [0, 1])
def test_recovers_exponential_survival(seed):
    """S(t_j | x) = exp(-rate_x t_j) on the grid (no censoring inside it): the truth within
    4 standard errors, the posterior sd and the Monte Carlo error (from the ESS) together."""
    rates = (0.5, 1.5)
    x, times, delta = _exponential(seed, n=200, rates=rates)
    post = bartz.surv_bart(
        x, times=times, delta=delta, x_test=np.array([[0.0], [1.0]]), K=6, seed=seed,
        ntree=50, ndpost=400, nskip=200, keepevery=2, printevery=None,
    )
    truth = np.exp(-np.asarray(rates)[:, None] * post.times[None, :]).reshape(-1)
    draws = post.surv_test.astype(np.float64)
    sd = draws.std(axis=0, ddof=1)
    ess = bartz.diagnostics.ess(draws, chain_axis=None, draw_axis=0)
    se = np.sqrt(sd**2 + sd**2 / ess)
    z = (post.surv_test_mean - truth) / se
    assert np.all(np.abs(z) < 4), z
    # the covariate matters: the two curves apart by many standard errors at the last time
    last = (post.K - 1, 2 * post.K - 1)
    assert (post.surv_test_mean[last[0]] - post.surv_test_mean[last[1]]) / np.hypot(*sd[list(last)]) > 3


# ---------------------------------------------------------------- R's demo lung.surv.bart.R



@pytest.mark.slow
@pytest.mark.parametrize('moves', [None, 'R'])
def test_lung_demo(moves):
    """R's demo/lung.surv.bart.R, line by line: the partial dependence of S(t, x) on sex
    agrees with R's (reference/lung_surv_pd.csv) within Monte Carlo error; closer with
    R's sampler (``moves='R'``), whose tree prior is R's.

    Both sides are estimates: the standard error of the difference combines ours (the sd
    of our draws over their ESS) and R's (the sd from R's 95% interval over the same ESS:
    R's draws are not stored, its chain has the same length and thinning)."""
    root = r_data()
    if not (root / 'lung.csv').exists():
        pytest.skip(f"R's demo data not found in {root}")
    lung = pd.read_csv(root / 'lung.csv')
    N = len(lung)
    # if physician's KPS unavailable, then use the patient's
    lung['ph.karno'] = lung['ph.karno'].fillna(lung['pat.karno'])
    times = np.ceil(lung['time'] / 7).to_numpy()  # weeks
    delta = (lung['status'] - 1).to_numpy()  # 0 censored, 1 dead
    x_train = np.column_stack([lung['sex'], lung['age'], lung['ph.karno']]).astype(float)
    post = bartz.mc_surv_bart(
        x_train=x_train, times=times, delta=delta, mc_cores=1, seed=99, printevery=None, moves=moves
    )
    pre = bartz.surv_pre_bart(times=times, delta=delta, x_train=x_train, x_test=x_train)
    K, M = pre.K, post.ndpost
    tx_test = np.vstack([pre.tx_test, pre.tx_test])
    tx_test[:, 1] = np.r_[np.full(N * K, 1.0), np.full(N * K, 2.0)]  # sex in column 1, time in column 0
    pred = bartz.predict(post, newdata=tx_test)
    pd_draws = pred.surv_test.reshape(M, 2, N, K).mean(axis=2, dtype=np.float64).reshape(M, 2 * K)

    ref = pd.read_csv(root / 'reference' / 'lung_surv_pd.csv')
    ref = pd.concat([ref[ref['sex'] == 1], ref[ref['sex'] == 2]])
    np.testing.assert_array_equal(ref['time'], np.tile(pre.times, 2))
    ess = bartz.diagnostics.ess(pd_draws, chain_axis=None, draw_axis=0)
    se_ours = pd_draws.std(axis=0, ddof=1) / np.sqrt(ess)
    se_r = (ref['hi'] - ref['lo']).to_numpy() / (2 * 1.96) / np.sqrt(ess)
    z = (pd_draws.mean(axis=0) - ref['mean'].to_numpy()) / np.hypot(se_ours, se_r)
    # (|z| averages 0.8 for standard normal z; the default's stated prior is not R's)
    assert np.all(np.abs(z) < (4.5 if moves == 'R' else 5)), z
    assert np.mean(np.abs(z)) < (1.5 if moves == 'R' else 2.5), z
    # and the quantiles R reports: ours within a few posterior sds' Monte Carlo error of R's
    lo, hi = np.quantile(pd_draws, [0.025, 0.975], axis=0)
    width = ref['hi'].to_numpy() - ref['lo'].to_numpy()
    np.testing.assert_allclose(hi - lo, width, rtol=0.25)


def test_save_load_survbart(small, tmp_path):
    """post.save keeps the whole survbart list (not only its binary fit)."""
    _, _, _, _, post = small
    loaded = assert_round_trip(post, tmp_path, post.tx_test)
    np.testing.assert_array_equal(loaded.surv_test_mean, post.surv_test_mean)
