"""Recurrent-events BART: R's ``recur.pre.bart`` layout, `recur_bart`, `mc_recur_bart`, R's predict."""


import numpy as np
import pandas as pd
import pytest
from scipy.special import expit, ndtr

import bartz
from familyfiles import assert_round_trip
from rdata import r_data
from bartz import recur_pre_bart

NAN = np.nan

# ---------------------------------------------------------------- R's layout, worked by hand


def test_layout_two_subjects():
    """Subject 1: an event at 1, censored at 3; subject 2: an event at 2, its last time."""
    pre = recur_pre_bart([[1, 3], [2, NAN]], [[1, 0], [1, NAN]])
    np.testing.assert_array_equal(pre.times, [1, 2, 3])
    assert pre.K == 3
    np.testing.assert_array_equal(pre.y_train, [1, 0, 0, 0, 1])
    # columns t, v (time since the last event), N (events before t)
    np.testing.assert_array_equal(pre.tx_train, [[1, 1, 0], [2, 1, 1], [3, 2, 1], [1, 1, 0], [2, 2, 0]])
    # every subject at every grid time; after its follow-up the history carries on
    np.testing.assert_array_equal(pre.tx_test[3:], [[1, 1, 0], [2, 2, 0], [3, 1, 1]])
    np.testing.assert_array_equal(pre.tx_test[:3], pre.tx_train[:3])


def test_layout_covariates_and_censoring():
    """Three subjects with a covariate: two events for the third, the second censored without any."""
    pre = recur_pre_bart([[2, 5], [3, NAN], [1, 4]], [[1, 0], [0, NAN], [1, 1]], x_train=[[10.0], [20.0], [30.0]])
    np.testing.assert_array_equal(pre.times, [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(pre.y_train, [0, 1, 0, 0, 0] + [0, 0, 0] + [1, 0, 0, 1])
    expected = [
        [1, 1, 0, 10], [2, 2, 0, 10], [3, 1, 1, 10], [4, 2, 1, 10], [5, 3, 1, 10],
        [1, 1, 0, 20], [2, 2, 0, 20], [3, 3, 0, 20],
        [1, 1, 0, 30], [2, 1, 1, 30], [3, 2, 1, 30], [4, 3, 1, 30],
    ]
    np.testing.assert_array_equal(pre.tx_train, expected)
    assert pre.tx_test.shape == (15, 4)
    np.testing.assert_array_equal(pre.tx_test[8:10], [[4, 4, 0, 20], [5, 5, 0, 20]])
    np.testing.assert_array_equal(pre.tx_test[14], [5, 1, 2, 30])


def test_layout_tstop_leaves_the_risk_set():
    """An event at 1 lasting to 3: not at risk at 3; the stop time joins the grid."""
    pre = recur_pre_bart([[1, 5]], [[1, 0]], tstop=[[3, 0]])
    np.testing.assert_array_equal(pre.times, [1, 3, 5])
    np.testing.assert_array_equal(pre.y_train, [1, 0])
    np.testing.assert_array_equal(pre.tx_train, [[1, 1, 0], [5, 4, 1]])
    np.testing.assert_array_equal(pre.tx_test, [[1, 1, 0], [3, 2, 1], [5, 4, 1]])


def test_layout_last_value_false():
    """R's last.value=FALSE: the history is NA after the follow-up (at the last time's empty slot)."""
    pre = recur_pre_bart([[1, 3], [2, NAN]], [[1, 0], [1, NAN]], last_value=False)
    np.testing.assert_array_equal(pre.tx_test[:5], recur_pre_bart([[1, 3], [2, NAN]], [[1, 0], [1, NAN]]).tx_test[:5])
    np.testing.assert_array_equal(pre.tx_test[5], [3, NAN, NAN])


def test_layout_vector_times_and_dataframe():
    """One time per subject (a vector) and a DataFrame: R's column names t, v, N first."""
    x = pd.DataFrame({'age': [50.0, 60.0]})
    pre = recur_pre_bart([2, 1], [1, 0], x_train=x)
    assert list(pre.tx_train.columns) == ['t', 'v', 'N', 'age']
    np.testing.assert_array_equal(pre.tx_train.to_numpy(), [[1, 1, 0, 50], [2, 2, 0, 50], [1, 1, 0, 60]])
    np.testing.assert_array_equal(pre.y_train, [0, 1, 0])
    assert isinstance(pre.tx_test, pd.DataFrame) and pre.tx_test.shape == (4, 4)


@pytest.mark.parametrize(
    ('kwargs', 'match'),
    [
        (dict(times=[[1], [2]], delta=[[1]]), 'number of rows in times and delta'),
        (dict(times=[[1, 2]], delta=[[1]]), 'same shape'),
        (dict(times=[[1]], delta=[[2]]), 'delta must be 0'),
        (dict(times=[[NAN]], delta=[[NAN]]), 'at least one time'),
        (dict(times=[[1], [2]], delta=[[1], [0]], x_train=[[1.0]]), 'number of rows in x.train'),
        (dict(times=[[1]], delta=[[1]], tstop=[[1, 2]]), 'tstop must have the shape'),
        (dict(times=[[2, 4]], delta=[[1, 1]], tstop=[[3, 3.5]]), r'tstop must be at or after times.*got 3.5 < 4 at \[0, 1\]'),
        (dict(times=[[1]], delta=[[1]], last_value=0), 'last_value must be True or False'),
        (dict(times=[[1]], delta=[[1]], x_train=pd.DataFrame({'N': [1.0]})), "columns named \\['N'\\]"),
    ],
)
def test_layout_errors(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        recur_pre_bart(**kwargs)


# ---------------------------------------------------------------- recur_bart and R's predict

SMALL = dict(ntree=20, ndpost=40, nskip=20, keepevery=1, printevery=None)
TIMES = np.array([[1, 2, 4], [3, 4, NAN], [2, 5, NAN], [1, 3, 5]], float)
DELTA = np.array([[1, 1, 0], [1, 0, NAN], [1, 1, NAN], [1, 1, 0]], float)


@pytest.fixture(scope='module')
def small():
    return bartz.recur_bart(times=TIMES, delta=DELTA, seed=1, **SMALL)


def test_recur_bart_attributes(small):
    """R's recurbart list: the grid, the layout, hazards at the training and test rows."""
    pre = recur_pre_bart(TIMES, DELTA)
    assert small.K == 5 and small.type == 'pbart'
    np.testing.assert_array_equal(small.times, pre.times)
    np.testing.assert_array_equal(small.tx_train, pre.tx_train)
    np.testing.assert_array_equal(small.tx_test, pre.tx_test)
    m, m_test = pre.y_train.size, 4 * 5
    assert small.haz_train.shape == small.cum_train.shape == small.prob_train.shape == (40, m)
    for name in ('yhat_test', 'prob_test', 'haz_test', 'cum_test'):
        assert getattr(small, name).shape == (40, m_test)
        np.testing.assert_allclose(getattr(small, f'{name}_mean'), getattr(small, name).mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(small.prob_test, ndtr(small.yhat_test), rtol=1e-5)


def test_hazard_and_cumulative_hazard_formulas(small):
    """R's formulas: h = p / (t_j - t_{j-1}), the cumulative hazard the running sum of p per subject."""
    width = np.diff(small.times, prepend=0.0)
    prob = small.prob_test.astype(np.float64).reshape(40, 4, 5)
    np.testing.assert_allclose(small.haz_test, (prob / width).reshape(40, -1), rtol=1e-6)
    np.testing.assert_allclose(small.cum_test, np.cumsum(prob, axis=2).reshape(40, -1), rtol=1e-6)
    # training rows: the subjects' rows up to their follow-up, restarting at t_1
    t = small.tx_train[:, 0]
    starts = np.flatnonzero(t == small.times[0])
    for start, end in zip(starts, [*starts[1:], t.size], strict=True):
        block = np.asarray(small.prob_train, np.float64)[:, start:end]
        np.testing.assert_allclose(small.cum_train[:, start:end], np.cumsum(block, axis=1), rtol=1e-6)
        np.testing.assert_allclose(small.haz_train[:, start:end], block / width[: end - start], rtol=1e-6)


def test_predict_equals_the_fits_test_draws(small):
    """R's predict at tx_test gives the fit's own draws, in one block or in blocks of a few rows."""
    for pred in (bartz.predict(small, small.tx_test), small.r_predict(small.tx_test, max_memory=40 * 36 * 3)):
        assert isinstance(pred, bartz.api.recur.RecurPrediction)
        assert pred.K == 5 and pred.binary_offset == small.offset
        np.testing.assert_array_equal(pred.times, small.times)
        for name in ('yhat_test', 'prob_test', 'haz_test', 'cum_test'):
            np.testing.assert_array_equal(getattr(pred, name), getattr(small, name))
        for name in ('prob_test_mean', 'haz_test_mean', 'cum_test_mean'):
            np.testing.assert_allclose(getattr(pred, name), getattr(small, name), rtol=1e-12)
    mean = small.r_predict(small.tx_test, kind='mean')
    assert mean.cum_test is None and mean.haz_test is None
    np.testing.assert_allclose(mean.cum_test_mean, small.cum_test_mean, rtol=1e-12)


def test_predict_refuses_rows_out_of_time_order(small):
    """The cumulative hazard is a running sum along a subject's rows: shuffled rows are refused."""
    rows = np.arange(len(small.tx_test))
    rows[[1, 2]] = rows[[2, 1]]  # the first subject's second and third grid times swapped
    with pytest.raises(ValueError, match=r'newdata must have, for each subject, its rows in time order'):
        bartz.predict(small, small.tx_test[rows])


def test_expanded_rows_give_the_same_fit(small):
    """R's second case: y_train and the expanded rows give the chain of the times/delta call."""
    pre = recur_pre_bart(TIMES, DELTA)
    post = bartz.recur_bart(pre.tx_train, pre.y_train, x_test=pre.tx_test, seed=1, **SMALL)
    np.testing.assert_array_equal(post.times, small.times)
    np.testing.assert_array_equal(post.cum_test, small.cum_test)
    np.testing.assert_array_equal(post.haz_train, small.haz_train)


def test_options_nogrid_keeptrainfits_and_means_only():
    post = bartz.recur_bart(times=TIMES, delta=DELTA, x_test_nogrid=True, keeptrainfits=False, seed=1, **SMALL)
    assert post.haz_train is None and post.cum_train is None
    assert post.haz_test is None and post.cum_test_mean is None and post.prob_test.shape == (40, 20)
    means = bartz.recur_bart(times=TIMES, delta=DELTA, keep_test_draws=False, seed=1, **SMALL)
    assert means.cum_test is None and means.cum_test_mean.shape == (20,)


def test_lbart():
    """R's logistic variant: p is the logistic function of the latent draws."""
    post = bartz.recur_bart(times=TIMES, delta=DELTA, type='lbart', seed=1, **SMALL)
    assert post.type == 'lbart'
    np.testing.assert_allclose(post.prob_test, expit(post.yhat_test), rtol=1e-5)
    np.testing.assert_allclose(post.haz_train, post.prob_train / np.diff(post.times, prepend=0.0)[
        np.searchsorted(post.times, post.tx_train[:, 0])], rtol=1e-5)


def test_mc_recur_bart():
    """Two chains, ndpost the total, R's class of result."""
    post = bartz.mc_recur_bart(times=TIMES, delta=DELTA, mc_cores=2, seed=2, **SMALL)
    assert isinstance(post, bartz.RecurBARTFit)
    assert post.cum_test.shape == (40, 20) and post.ndpost == 40


@pytest.mark.parametrize(
    ('kwargs', 'error', 'match'),
    [
        (dict(times=TIMES, delta=DELTA, type='wbart'), ValueError, "either 'pbart' or 'lbart'"),
        (dict(times=TIMES, delta=DELTA, sigdf=3), TypeError, 'unexpected keyword'),
        (dict(times=TIMES), ValueError, 'needs times and delta'),
        (dict(times=TIMES, delta=DELTA, x_test_nogrid=1), TypeError, 'x_test_nogrid must be True or False'),
        (dict(x_train=np.ones((3, 3)), y_train=[0, 2, 1]), ValueError, 'y_train must be 0/1'),
        (dict(x_train=[[1.0, 1.0, 0.0], [2.0, 1.0, 1.0]], y_train=[0, 1], x_test=[[1.5, 1.0, 0.0]]),
         ValueError, 'not on the time grid'),
        (dict(times=TIMES, delta=DELTA, tstop=TIMES), TypeError, r"recur_bart\(\) got unexpected .* R's recur.bart"),
        (dict(times=TIMES, delta=np.where(np.isnan(DELTA), np.nan, 0)), ValueError, 'delta has no events'),
        # ntree=0 would be refused when the fit starts: the test rows are checked before it
        (dict(x_train=[[1.0, 1.0, 0.0], [2.0, 1.0, 1.0]], y_train=[0, 1], x_test=[[1.0, 1.0]], ntree=0),
         ValueError, 'x_test must have 3 columns like x_train, got 2'),
        (dict(x_train=[[1.0, 1.0, 0.0], [2.0, 1.0, 1.0]], y_train=[0, 1], x_test=[[2.0, 1.0, 0.0], [1.0, 1.0, 0.0]],
              ntree=0), ValueError, r'x_test must have, for each subject, its rows in time order'),
    ],
)
def test_recur_bart_errors(kwargs, error, match):
    """Refused in the terms of the arguments given, before any fit."""
    with pytest.raises(error, match=match):
        bartz.recur_bart(**(SMALL | kwargs))


def test_x_test_ignored_with_a_warning():
    """As R: with times and delta, tx_test is the training subjects' grid, x_test is not used."""
    with pytest.warns(UserWarning, match='x_test is ignored'):
        post = bartz.recur_bart(times=TIMES, delta=DELTA, x_test=[[1.0]], seed=1, **SMALL)
    assert post.tx_test.shape == (20, 3)


# ---------------------------------------------------------------- recovery of a known hazard


def _bernoulli_process(seed, n=150, K=6, probs=(0.1, 0.3)):
    """Events at the times 1..K with probability ``probs[x]`` each, whatever the history,
    followed up to a time in {4, ..., K}; the cumulative hazard at t_j is ``j probs[x]``."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2, n)
    end = rng.integers(4, K + 1, n)
    events = (rng.random((n, K)) < np.asarray(probs)[x][:, None]) & (np.arange(1, K + 1) <= end[:, None])
    times = np.where(events, np.arange(1.0, K + 1), NAN)
    times = np.column_stack([times, end.astype(float)])  # the end of follow-up, censored
    delta = np.where(np.isnan(times), NAN, np.column_stack([np.ones((n, K)), np.zeros(n)]))
    return x.astype(float)[:, None], times, delta


@pytest.fixture(scope='module', params=[0, 1])
def recovery(request):
    x, times, delta = _bernoulli_process(request.param)
    post = bartz.recur_bart(x, times=times, delta=delta, seed=request.param, ntree=20, ndpost=200, nskip=100,
                            keepevery=1, printevery=None)
    return x, post


def test_cumulative_hazard_recovered(recovery):
    """The posterior of each group's mean cumulative hazard at t_K covers the truth within
    4 posterior sds (Monte Carlo error of the mean included)."""
    x, post = recovery
    assert post.K == 6
    cum_at_end = post.cum_test.reshape(post.ndpost, -1, 6)[:, :, -1]
    for group, prob in ((0, 0.1), (1, 0.3)):
        draws = cum_at_end[:, x[:, 0] == group].mean(axis=1, dtype=np.float64)
        ess = bartz.diagnostics.ess(draws, chain_axis=None, draw_axis=0)
        sd = draws.std(ddof=1)
        tolerance = 4 * np.sqrt(sd**2 + sd**2 / ess)
        assert abs(draws.mean() - 6 * prob) < tolerance, (group, draws.mean(), 6 * prob, tolerance)
        assert sd < 0.5 * prob * 6  # informative, not only wide


# ---------------------------------------------------------------- R's demo bladder.recur.bart.R



@pytest.mark.slow
def test_bladder_demo():
    """R's bladder demo on survival's WLW form of the data (rx, number, size at entry): the layout
    keeps every recurrence, the fit is calibrated in sample, and thiotepa lowers the intensity
    relative to placebo (R's demo figure, Wei, Lin & Weissfeld 1989)."""
    data = pd.read_csv(r_data() / 'bladder.csv').sort_values(['id', 'enum'])
    times = data.pivot(index='id', columns='enum', values='stop').to_numpy(float)
    delta = data.pivot(index='id', columns='enum', values='event').to_numpy(float)
    first = data[data.enum == 1].set_index('id')
    x = np.column_stack([(first.rx == 2).astype(float), first.number, first['size']])
    pre = recur_pre_bart(times, delta, x)
    assert pre.y_train.sum() == delta.sum() == 112
    N, K = times.shape[0], pre.K
    # R's partial dependence: the whole cohort's grid under each treatment
    test = np.concatenate([pre.tx_test, pre.tx_test])
    test[: N * K, 3], test[N * K :, 3] = 0, 1
    post = bartz.mc_recur_bart(pre.tx_train, pre.y_train, x_test=test, mc_cores=2, seed=99, ndpost=400,
                               nskip=200, keepevery=2, printevery=None)
    assert abs(post.prob_train_mean.sum() - 112) < 3 * np.sqrt(112)
    prob = post.prob_test.astype(np.float64)
    relative = (prob[:, N * K :] / prob[:, : N * K]).reshape(post.ndpost, N, K).mean(axis=1)
    assert relative.mean() < 1
    cum_at_end = post.cum_test_mean.reshape(2, N, K)[:, :, -1].mean(axis=1)
    assert cum_at_end[1] < cum_at_end[0]


def test_save_load_recurbart(small, tmp_path):
    assert_round_trip(small, tmp_path, small.tx_test)
