"""Competing-risks BART (`bartz.crisk_pre_bart`, `crisk_bart`, `crisk2_bart`, their
``mc_`` versions and R's predict for them) against R's layout and known cumulative
incidence functions."""


import numpy as np
import pandas as pd
import pytest
import scipy.stats

import bartz
from familyfiles import assert_round_trip
from rdata import r_data

# ---------------------------------------------------------------- R's layout, worked by hand

# person: time, delta, x
TIMES = [2.0, 1.0, 3.0, 2.0]
DELTA = [1, 0, 2, 2]
X = np.array([[10.0], [11.0], [12.0], [13.0]])
# rows: person 0 at t = 1, 2; person 1 at 1; person 2 at 1, 2, 3; person 3 at 1, 2
ROWS_T = [1, 2, 1, 1, 2, 3, 1, 2]
ROWS_X = [10, 10, 11, 12, 12, 12, 13, 13]


def test_layout_by_hand():
    pre = bartz.crisk_pre_bart(TIMES, DELTA, X, x_test=np.array([[0.0], [1.0]]))
    assert pre.K == 3 and pre.times.tolist() == [1, 2, 3]
    assert pre.y_train.tolist() == [0, 1, 0, 0, 0, 0, 0, 0]
    assert pre.y_train2.tolist() == [0, 0, 0, 0, 0, 1, 0, 1]
    assert pre.cond.tolist() == [0, 2, 3, 4, 5, 6, 7]  # the rows without a cause-1 event (0-based)
    for tx in (pre.tx_train, pre.tx_train2):
        assert tx[:, 0].tolist() == ROWS_T and tx[:, 1].tolist() == ROWS_X
    assert pre.tx_test.tolist() == [[1, 0], [2, 0], [3, 0], [1, 1], [2, 1], [3, 1]]
    assert pre.tx_test2.tolist() == pre.tx_test.tolist()


def test_layout_other_covariates_of_cause_2_and_K():
    x2 = np.array([[1.0, 5], [2, 6], [3, 7], [4, 8]])
    pre = bartz.crisk_pre_bart([0.5, 1.5, 2.5, 3.5], [1, 2, 0, 2], X, None, x2, None, K=2)
    # the grid: the quantiles 1/2 and 1 of the times, each time moved up onto it
    assert pre.times.tolist() == [2.0, 3.5]
    assert pre.tx_train[:, 0].tolist() == [2.0, 2.0, 2.0, 3.5, 2.0, 3.5]
    assert pre.tx_train2[:, 1:].tolist() == [[1, 5], [2, 6], [3, 7], [3, 7], [4, 8], [4, 8]]
    assert pre.y_train.tolist() == [1, 0, 0, 0, 0, 0] and pre.y_train2.tolist() == [0, 1, 0, 0, 0, 1]
    assert pre.tx_test is None and pre.tx_test2 is None


def test_layout_kaplan_meier_analogue():
    pre = bartz.crisk_pre_bart(TIMES, DELTA)
    assert pre.tx_train.tolist() == [[t] for t in ROWS_T] and pre.tx_test.tolist() == [[1], [2], [3]]


@pytest.mark.parametrize(
    ('delta', 'x2', 'match'),
    [
        ([0, 1, 1, 0], None, 'delta must be coded as'),
        ([0, 1, 3, 2], None, 'delta must be coded as'),
        ([1, 0, 2], None, 'length of times and delta'),
        (DELTA, np.ones((3, 1)), 'number of rows in x_train and x_train2'),
        # x_test2 defaults to x_test, which lacks a column of x_train2
        (DELTA, np.ones((4, 2)), r'x_test2 \(x_test, its default\) must have 2 columns like x_train2, got 1'),
    ],
)
def test_layout_errors(delta, x2, match):
    with pytest.raises(ValueError, match=match):
        bartz.crisk_pre_bart(TIMES, delta, X, x_test=X[:1], x_train2=x2)


# ---------------------------------------------------------------- the fits, R's attributes and predict

SMALL = dict(ntree=20, ndpost=60, nskip=30, keepevery=1, printevery=None)
X_TEST = np.array([[0.0], [1.0]])


def _two_exponentials(seed, n, rates=((0.4, 1.0), (0.6, 0.3)), end=1.5):
    """Exponential times of causes 1 and 2 with rates ``rates[cause][x]`` for a binary
    x, the first of the two observed, censored at `end` (on the grid)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2, n)
    t1, t2 = (rng.exponential(1 / np.asarray(r)[x]) for r in rates)
    t = np.minimum(np.minimum(t1, t2), end)
    delta = np.where(t >= end, 0, np.where(t1 < t2, 1, 2))
    return x[:, None].astype(float), t, delta


def _true_cif(rates, times):
    """CIF_c(t | x) = r_c / (r_1 + r_2) (1 - exp(-(r_1 + r_2) t)), in R's layout (x slowest)."""
    r1, r2 = (np.asarray(r, np.float64)[:, None] for r in rates)
    total = r1 + r2
    done = 1 - np.exp(-total * np.asarray(times)[None, :])
    return (r1 / total * done).reshape(-1), (r2 / total * done).reshape(-1), (1 - done).reshape(-1)


@pytest.fixture(scope='module')
def small():
    x, times, delta = _two_exponentials(0, 60)
    post = bartz.crisk_bart(x, times=times, delta=delta, x_test=X_TEST, K=4, seed=1, **SMALL)
    post2 = bartz.crisk2_bart(x, times=times, delta=delta, x_test=X_TEST, K=4, seed=1, **SMALL)
    return x, times, delta, post, post2


def test_crisk_attributes(small):
    x, times, delta, post, _ = small
    pre = bartz.crisk_pre_bart(times, delta, x, X_TEST, K=4)
    assert isinstance(post, bartz.CriskBARTFit) and post.type == 'pbart' and post.K == 4
    assert np.array_equal(post.times, pre.times) and np.array_equal(post.cond, pre.cond)
    assert np.array_equal(post.tx_train, pre.tx_train) and np.array_equal(post.tx_test2, pre.tx_test2)
    for name in ('yhat_test', 'yhat_test2', 'prob_test', 'prob_test2', 'surv_test', 'cif_test', 'cif_test2'):
        assert getattr(post, name).shape == (60, 8), name
        assert np.allclose(getattr(post, f'{name}_mean'), getattr(post, name).mean(axis=0), atol=1e-6)
    # the second fit ran on the rows at risk of cause 2 only
    assert post.fit2.yhat_train is None and post.offset2 == post.fit2.offset
    assert post.varcount2.shape == (60, 2) and post.varcount.shape == (60, 2) and post.ndpost == 60
    # R's prob_test2 of a criskbart is the hazard of cause 2, (1 - p1) p2
    p2 = bartz.predict(post.fit2, post.tx_test2).prob_test
    assert np.allclose(post.prob_test2, (1 - post.prob_test) * p2, atol=1e-6)


def test_crisk2_attributes(small):
    x, times, delta, _, post2 = small
    assert isinstance(post2, bartz.Crisk2BARTFit) and post2.cond is None
    # the second fit ran on the rows with an event (any cause), cause 1 vs 2
    pre = bartz.surv_pre_bart(times, (delta > 0).astype(int), x, K=4)
    event = pre.y_train == 1
    assert np.array_equal(post2.tx_train2, pre.tx_train[event])
    cause1 = bartz.surv_pre_bart(times, (delta == 1).astype(int), x, K=4).y_train[event]
    assert post2.fit2.offset == pytest.approx(scipy.stats.norm.ppf(cause1.mean()))
    # R's prob_test2 of a crisk2bart is P(cause 1 | an event) itself; the survival is 1 - p
    p2 = bartz.predict(post2.fit2, post2.tx_test2).prob_test
    assert np.allclose(post2.prob_test2, p2, atol=1e-6)
    assert np.allclose(post2.surv_test[:, 0], 1 - post2.prob_test[:, 0], atol=1e-6)


@pytest.mark.parametrize('which', [3, 4])
def test_cifs_and_survival_sum_to_one(small, which):
    post = small[which]
    total = post.cif_test.astype(np.float64) + post.cif_test2 + post.surv_test
    assert np.allclose(total, 1, atol=1e-5)
    # within each setting, the CIFs increase and the survival decreases over time
    for draws, sign in ((post.cif_test, 1), (post.cif_test2, 1), (post.surv_test, -1)):
        steps = np.diff(draws.reshape(draws.shape[0], -1, post.K), axis=2)
        assert np.all(sign * steps >= -1e-6)


@pytest.mark.parametrize('which', [3, 4])
def test_predict_gives_the_fit_test_draws(small, which):
    post = small[which]
    pred = bartz.predict(post, post.tx_test)
    for name in ('yhat_test', 'yhat_test2', 'prob_test', 'prob_test2', 'surv_test', 'cif_test', 'cif_test2'):
        np.testing.assert_allclose(getattr(pred, name), getattr(post, name), rtol=0, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(pred.cif_test2_mean, post.cif_test2_mean, atol=1e-6)
    assert pred.K == post.K and pred.binary_offset2 == post.offset2
    # one setting per block (a small max_memory), and newdata2 given apart: the same draws
    blocks = post.r_predict(post.tx_test, post.tx_test2, max_memory=post.ndpost * post.K * 200)
    np.testing.assert_allclose(blocks.cif_test, post.cif_test, atol=1e-6)


def test_predict_refuses_a_bad_layout(small):
    post = small[3]
    with pytest.raises(ValueError, match='grid times'):
        bartz.predict(post, post.tx_test[::-1])
    with pytest.raises(ValueError, match='same number of rows'):
        post.r_predict(post.tx_test, post.tx_test2[:4])
    wide = np.column_stack([post.tx_test2, post.tx_test2[:, 1]])
    with pytest.raises(ValueError, match=r'newdata2 must have 2 columns like tx_train2 \(the time first'):
        post.r_predict(post.tx_test, wide)


def test_crisk_expanded_input_same_draws(small):
    x, times, delta, post, _ = small
    pre = bartz.crisk_pre_bart(times, delta, x, X_TEST, K=4)
    again = bartz.crisk_bart(pre.tx_train, pre.y_train, pre.tx_train2, pre.y_train2, x_test=pre.tx_test,
                             rho=1, rho2=1, seed=1, **SMALL)  # fmt: skip
    np.testing.assert_array_equal(again.cif_test, post.cif_test)


def test_mc_crisk_bart_chains():
    x, times, delta = _two_exponentials(0, 60)
    post = bartz.mc_crisk_bart(x, times=times, delta=delta, x_test=X_TEST, K=4, mc_cores=2, seed=1, **SMALL)
    assert post.fit.chains == 2 and post.fit2.chains == 2 and post.cif_test.shape == (60, 8)


def test_crisk_dataframe_and_id():
    x, times, delta = _two_exponentials(0, 60)
    frame = pd.DataFrame({'x': x[:, 0]})
    post = bartz.crisk2_bart(frame, times=times, delta=delta, x_test=frame.iloc[:2], K=4, id='a', **SMALL)
    assert list(post.tx_train.columns) == ['t', 'x'] and post.id == 'a' and post.cif_test.shape == (60, 8)


@pytest.mark.parametrize(
    ('kwargs', 'error', 'match'),
    [
        (dict(type='wbart'), ValueError, "'pbart' or 'lbart'"),
        (dict(nkeeptrain=3), TypeError, 'unexpected keyword'),
        (dict(times=None), ValueError, 'needs times and delta'),
        (dict(cond=np.array([0, 10_000])), ValueError, 'cond must hold row indices'),
        # ntree=0 would be refused when the first fit starts: the test rows are checked before it
        (dict(x_test=np.ones((2, 1)), x_test2=np.ones((2, 3)), ntree=0), ValueError,
         r'x_test2 must have 1 columns like x_train2 \(x_train, its default\), got 3'),
        (dict(x_test=np.ones((2, 1)), x_train2=np.ones((20, 2)), ntree=0), ValueError,
         r'x_test2 \(x_test, its default\) must have 2 columns like x_train2, got 1'),
    ],
)
def test_crisk_bart_errors(kwargs, error, match):
    """Refused in the terms of the arguments given, before any fit."""
    x, times, delta = _two_exponentials(0, 20)
    args = dict(x_train=x, times=times, delta=delta) | kwargs
    with pytest.raises(error, match=match):
        bartz.crisk_bart(**(SMALL | args))


# ---------------------------------------------------------------- recovery of known cumulative incidence


@pytest.mark.parametrize(('model', 'seed'), [('crisk_bart', 0), ('crisk_bart', 1), ('crisk2_bart', 0)])
def test_recovers_two_exponential_causes(model, seed):
    """The CIFs and the survival on the grid (no censoring inside it): the truth within 4
    standard errors, the posterior sd and the Monte Carlo error (from the ESS) together."""
    rates = ((0.4, 1.0), (0.6, 0.3))
    x, times, delta = _two_exponentials(seed, 250, rates)
    post = getattr(bartz, model)(
        x, times=times, delta=delta, x_test=X_TEST, K=6, seed=seed,
        ntree=50, ndpost=300, nskip=150, keepevery=2, printevery=None,
    )  # fmt: skip
    truths = _true_cif(rates, post.times)
    for name, truth in zip(('cif_test', 'cif_test2', 'surv_test'), truths, strict=True):
        draws = getattr(post, name).astype(np.float64)
        sd = draws.std(axis=0, ddof=1)
        ess = bartz.diagnostics.ess(draws, chain_axis=None, draw_axis=0)
        z = (draws.mean(axis=0) - truth) / np.sqrt(sd**2 + sd**2 / ess)
        assert np.all(np.abs(z) < 4), (name, z)
    # the covariate matters: at the end cause 1 is more likely at x = 1, cause 2 at x = 0, by
    # many standard errors (a fit that misses either effect, or swaps the causes, fails here)
    last = [post.K - 1, 2 * post.K - 1]
    for mean, draws, sign in ((post.cif_test_mean, post.cif_test, 1), (post.cif_test2_mean, post.cif_test2, -1)):
        sd = draws.std(axis=0, ddof=1)[last]
        assert sign * (mean[last[1]] - mean[last[0]]) / np.hypot(*sd) > 3


# ---------------------------------------------------------------- R's demo liver.crisk.bart.R



def _aalen_johansen(times, delta, grid):
    """The Aalen-Johansen (nonparametric) CIFs of causes 1 and 2 at the discrete times `grid`."""
    at_risk = np.maximum(1, [(times >= t).sum() for t in grid]).astype(np.float64)
    hazards = [np.array([((times == t) & (delta == c)).sum() for t in grid]) / at_risk for c in (1, 2)]
    surv = np.cumprod(1 - hazards[0] - hazards[1])
    before = np.concatenate([[1.0], surv[:-1]])
    return [np.cumsum(before * h) for h in hazards]


@pytest.mark.slow
def test_liver_demo():
    """R's demo liver.crisk.bart.R (no R result stored): transplant (cause 1) against death or
    withdrawal (cause 2) for blood type O, times in weeks. The CIFs end inside [0, 1], transplant
    well above death/withdrawal (as R's paper), and both near the Aalen-Johansen estimates."""
    data = pd.read_csv(r_data() / 'transplant.csv')
    delta = np.select([data.event == 'ltx', data.event == 'censored'], [1, 0], 2)
    times = np.maximum(1, np.ceil(data.futime / 7))
    x_train = np.column_stack([(data.abo == b).astype(float) for b in ('O', 'A', 'B', 'AB')])
    post = bartz.mc_crisk_bart(
        x_train, times=times, delta=delta, x_test=np.array([[1.0, 0, 0, 0]]), mc_cores=2, seed=99,
        ndpost=400, nskip=200, keepevery=2, printevery=None,
    )  # fmt: skip
    end = {name: getattr(post, name)[:, -1].astype(np.float64) for name in ('cif_test', 'cif_test2')}
    assert all(0 <= v.min() and v.max() <= 1 for v in end.values())
    assert end['cif_test'].mean() > 4 * end['cif_test2'].mean()
    type_o = (data.abo == 'O').to_numpy()
    aj = _aalen_johansen(times[type_o].to_numpy(), delta[type_o], post.times)
    # where at least 20 of type O are still at risk (the estimate is undefined once none are)
    kept = np.array([(times[type_o] >= t).sum() >= 20 for t in post.times])
    for name, truth in zip(('cif_test', 'cif_test2'), aj, strict=True):
        draws = getattr(post, name)[:, kept].astype(np.float64)
        z = (draws.mean(axis=0) - truth[kept]) / (draws.std(axis=0, ddof=1) + 0.01)
        assert np.all(np.abs(z) < 4), (name, np.abs(z).max())


@pytest.mark.parametrize('which', [3, 4])
def test_save_load_crisk(small, which, tmp_path):
    """Both fits and the layout of either cause come back (crisk and crisk2)."""
    post = small[which]
    assert_round_trip(post, tmp_path, post.tx_test)


def test_bartz_predict_takes_newdata2(small):
    """R's predict(post, newdata, newdata2): by keyword, or positionally as R."""
    post = small[3]
    by_keyword = bartz.predict(post, post.tx_test, newdata2=post.tx_test2)
    positional = bartz.predict(post, post.tx_test, post.tx_test2)
    np.testing.assert_array_equal(by_keyword.cif_test2, post.r_predict(post.tx_test, post.tx_test2).cif_test2)
    np.testing.assert_array_equal(positional.cif_test, by_keyword.cif_test)
    with pytest.raises(TypeError, match='newdata2 is for competing risks fits'):
        bartz.predict(post.fit, post.tx_test, newdata2=post.tx_test2)
