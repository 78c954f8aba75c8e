"""Each argument of R's ``gbart`` changes in bartz what it changes in R.

One test (or a few) per argument, on tiny fits (n = 100, p = 3, 20 trees,
50 draws) that share shapes, so that the MCMC chunk compiles once per model
structure (continuous, weighted, probit, DART) and the fits are cheap.
Settings are chosen so that each effect is large (e.g. a prior made so
strong that it dominates), and checks are exact where the math allows
(e.g. ``tau_num`` and ``k`` only enter through ``tau_num / k``).
Defaults are checked on the arguments `gbart` passes to the numerical
core, captured before anything runs.

Several tests compare draws for equality (same model, same seed). On CPU
they are bit-identical; on GPU, XLA's scatter-adds use float atomics and
the draws differ in the last bits from run to run unless
``XLA_FLAGS=--xla_gpu_deterministic_ops=true``.

See docs/r_parity.md for the table of arguments.
"""

import math
import subprocess
import sys

import jax
import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy import special, stats

from bartz import gbart
from bartz.prep import sizes as buckets
from bartz.run import loop as mcmcloop
from bartz.sampler import step as mcmcstep
from bartz.prep import priors

N, P = 100, 3
NTREE, NDPOST, NSKIP = 20, 50, 20
SMALL = {'ntree': NTREE, 'ndpost': NDPOST, 'nskip': NSKIP, 'printevery': None}


def f_true(x):
    return np.sin(6 * x[:, 0]) + 2 * x[:, 1]


@pytest.fixture(scope='module')
def data():
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(N, P))
    y = f_true(x) + 0.1 * rng.normal(size=N)
    return x, y


def fit_with(data, **kwargs):
    x, y = data
    return gbart(x, y, **{'seed': 0, **SMALL, **kwargs})


@pytest.fixture(scope='module')
def fit(data):
    x, _ = data
    return fit_with(data, x_test=x[:30])


def total_splits(fit):
    """Number of internal nodes of the forest, per draw."""
    return np.asarray(fit.varcount).sum(axis=1)


def ols_sigest(x, y):
    design = np.column_stack([np.ones(len(y)), x])
    resid = y - design @ np.linalg.lstsq(design, y, rcond=None)[0]
    return float(np.sqrt(resid @ resid / (len(y) - design.shape[1])))


# ---------------------------------------------------------------- captured calls


class _Captured(Exception):  # noqa: N818
    """Raised in place of the MCMC run: the core's arguments are recorded."""


@pytest.fixture
def captured(monkeypatch):
    """``captured(x, y, **kwargs)`` calls gbart without running the sampler and
    returns the keyword arguments given to `mcmcstep.init`, ``init_chains``'s
    number of chains and `mcmcloop.run_mcmc`'s keywords."""
    calls = {}

    def init(**kwargs):
        calls['init'] = kwargs
        return 'state'

    def init_chains(state, num_chains):
        calls['num_chains'] = num_chains
        return state

    def run_mcmc(key, state, **kwargs):
        calls['run_mcmc'] = kwargs
        raise _Captured

    monkeypatch.setattr(mcmcstep, 'init', init)
    monkeypatch.setattr(mcmcstep, 'init_chains', init_chains)
    monkeypatch.setattr(mcmcloop, 'run_mcmc', run_mcmc)

    def call(x, y, **kwargs):
        calls.clear()
        with pytest.raises(_Captured):
            gbart(x, y, **kwargs)
        return dict(calls)

    return call


# ---------------------------------------------------------------- type, ntree, keepevery


def test_type_ntree_keepevery_defaults(data, captured):
    """ntree defaults to 200 (wbart) and 50 (pbart), keepevery to 1 and 10, as R."""
    x, y = data
    binary = (y > np.median(y)).astype(float)
    cont = captured(x, y)
    prob = captured(x, binary, type='pbart')
    assert cont['init']['num_trees'] == 200
    assert prob['init']['num_trees'] == 50
    assert cont['run_mcmc']['n_skip'] == 1
    assert prob['run_mcmc']['n_skip'] == 10
    assert (cont['run_mcmc']['n_burn'], cont['run_mcmc']['n_save']) == (100, 1000)  # nskip, ndpost
    given = captured(x, binary, type='pbart', ntree=7, keepevery=3, nskip=4, ndpost=9)
    assert given['init']['num_trees'] == 7
    assert (given['run_mcmc']['n_skip'], given['run_mcmc']['n_burn'], given['run_mcmc']['n_save']) == (3, 4, 9)
    # the probit model: bool outcome, offset Phi^-1(mean y), tau_num 3
    assert prob['init']['y'].dtype == bool
    offset = stats.norm.ppf(binary.mean())
    assert prob['init']['probit_threshold'] == pytest.approx(-offset)
    assert prob['init']['leaf_prior_var'] == pytest.approx((3 / (2 * math.sqrt(50))) ** 2)


def test_iterations_run(data):
    """The chain runs ntree moves in each of nskip + ndpost * keepevery
    iterations (every tree proposes a move in each sweep; with
    min_points_per_leaf=0 none is cancelled), keepevery 1 for wbart."""
    fit = fit_with(data, min_points_per_leaf=0)
    info = fit.run_info
    assert info.grow_proposed + info.prune_proposed + info.change_proposed + info.swap_proposed == NTREE * (NSKIP + NDPOST)
    thinned = fit_with(data, min_points_per_leaf=0, keepevery=2)
    info = thinned.run_info
    assert info.grow_proposed + info.prune_proposed + info.change_proposed + info.swap_proposed == NTREE * (NSKIP + 2 * NDPOST)
    assert thinned.yhat_train.shape == (NDPOST, N)


def test_pbart_keepevery_10(data):
    """type='pbart' thins by 10 by default: 10 sweeps per kept draw."""
    x, y = data
    binary = (y > np.median(y)).astype(float)
    fit = gbart(x, binary, type='pbart', seed=0, min_points_per_leaf=0, **SMALL)
    info = fit.run_info
    assert info.grow_proposed + info.prune_proposed + info.change_proposed + info.swap_proposed == NTREE * (NSKIP + 10 * NDPOST)
    assert fit.prob_train.shape == (NDPOST, N)
    assert not hasattr(fit, 'sigma')
    # the probit fit follows y
    assert np.mean((fit.prob_train_mean > 0.5) == binary) > 0.8


def test_ntree_scales_leaf_prior(data, captured):
    """The leaf prior sd is tau_num / (k sqrt(ntree)), in units of sd(y)."""
    x, y = data
    for ntree in (1, 20, 200):
        init = captured(x, y, ntree=ntree)['init']
        tau = (y.max() - y.min()) / 2 / (2 * math.sqrt(ntree)) / np.std(y)
        assert init['leaf_prior_var'] == pytest.approx(tau**2, rel=1e-12)
        assert init['num_trees'] == ntree


# ---------------------------------------------------------------- k, tau_num, offset


def test_k_shrinks_the_fit(data, fit):
    """Larger k: smaller leaf prior sd, a flatter fit; with a huge k the fit
    is the offset."""
    x, y = data
    spread = {2: np.std(fit.yhat_train_mean)}
    for k in (30, 1e4):
        spread[k] = np.std(fit_with(data, k=k).yhat_train_mean)
    assert spread[2] > 0.9 * np.std(f_true(x))  # the default fits
    assert spread[30] < 0.3 * spread[2]  # 0.03-0.04 over seeds 0-2
    assert spread[1e4] < 1e-3 * spread[2]


def test_tau_num_enters_as_tau_num_over_k(data):
    """tau_num = 1, k = 2 and tau_num = 2, k = 4 are the same model: same draws.
    The default tau_num is (max y - min y) / 2."""
    x, y = data
    a = fit_with(data, tau_num=1.0, k=2.0)
    b = fit_with(data, tau_num=2.0, k=4.0)
    assert_array_equal(a.yhat_train, b.yhat_train)
    assert_array_equal(a.sigma, b.sigma)
    default = fit_with(data)
    explicit = fit_with(data, tau_num=(y.max() - y.min()) / 2)
    assert default.tau_num == explicit.tau_num == (y.max() - y.min()) / 2
    assert_array_equal(default.yhat_train, explicit.yhat_train)
    # a tiny tau_num flattens the fit like a huge k
    assert np.std(fit_with(data, tau_num=1e-4).yhat_train_mean) < 1e-3 * np.std(y)


def test_offset_is_used(data, fit):
    """The default offset is mean(y); a given offset is used as given: with a
    huge k (trees near 0) the fit is the offset."""
    x, y = data
    assert fit.offset == pytest.approx(y.mean())
    for offset in (-3.0, 7.5):
        flat = fit_with(data, k=1e4, offset=offset)
        assert flat.offset == offset
        assert_allclose(flat.yhat_train_mean, offset, atol=1e-3 * np.std(y))
    # with the default k the trees fit the data whatever the offset
    shifted = fit_with(data, offset=y.mean() + 0.5)
    assert np.sqrt(np.mean((shifted.yhat_train_mean - f_true(x)) ** 2)) < 0.2


# ---------------------------------------------------------------- sigma prior


def test_sigest_sigdf_sigquant_set_lambda(data, fit, captured):
    """lambda_ is such that P(sigma < sigest) = sigquant under the prior
    sigma^2 ~ sigdf lambda / chi2(sigdf); sigest is the OLS residual sd by
    default (sd(y) when p >= n - 1); the sampler gets nu/2 and nu lambda/2."""
    x, y = data
    assert fit.sigest == pytest.approx(ols_sigest(x, y), rel=1e-10)
    qchi = stats.chi2.ppf(1 - 0.9, 3)
    assert fit.lambda_ == pytest.approx(fit.sigest**2 * qchi / 3, rel=1e-10)
    for sigest, sigdf, sigquant in [(0.3, 3, 0.9), (2.0, 10, 0.5), (1.0, 1, 0.99)]:
        init = captured(x, y, sigest=sigest, sigdf=sigdf, sigquant=sigquant)['init']
        lam = sigest**2 * stats.chi2.ppf(1 - sigquant, sigdf) / sigdf
        # P(sigma < sigest) = P(chi2 > sigdf lambda / sigest^2) = sigquant
        assert stats.chi2.sf(sigdf * lam / sigest**2, sigdf) == pytest.approx(sigquant)
        assert init['sigma2_alpha'] == pytest.approx(sigdf / 2)
        assert init['sigma2_beta'] == pytest.approx(sigdf * lam / 2 / np.var(y))
    # an explicit lambda_ overrides sigest and sigquant
    init = captured(x, y, lambda_=0.7, sigest=5.0, sigquant=0.5)['init']
    assert init['sigma2_beta'] == pytest.approx(3 * 0.7 / 2 / np.var(y))
    # p >= n - 1: sigest is sd(y)
    rng = np.random.default_rng(1)
    xs, ys = rng.uniform(size=(6, 5)), rng.normal(size=6)
    init = captured(xs, ys, sigquant=0.5)['init']
    lam = np.std(ys, ddof=1) ** 2 * stats.chi2.ppf(0.5, 3) / 3
    assert init['sigma2_beta'] == pytest.approx(3 * lam / 2 / np.var(ys))


def test_ols_sigest_matches_least_squares_with_aliased_columns():
    """The OLS guess of sigma (normal equations of the centred columns) is
    the residual sd of LAPACK's least squares, rank-deficient designs
    included: a column equal to a sum of others, a constant column and a
    column of large values far from 0 count as R's ``lm`` counts them."""
    from bartz.prep.priors import ols_sigest  # noqa: PLC0415

    rng = np.random.default_rng(2)

    def reference(x, y):
        design = np.column_stack([np.ones(len(y)), x])
        coef, _, rank, _ = np.linalg.lstsq(design, y, rcond=None)
        resid = y - design @ coef
        return np.sqrt(resid @ resid / (len(y) - rank))

    x = rng.normal(size=(80, 4)) * [1e-3, 1.0, 1e3, 5.0] + [0.0, 2e3, -1e5, 1.0]
    y = x @ rng.normal(size=4) + rng.normal(size=80)
    assert ols_sigest(x, y) == pytest.approx(reference(x, y), rel=1e-9)
    aliased = np.column_stack([x, x[:, 1] - 2 * x[:, 3], np.full(80, 7.0), np.full(80, 0.1)])
    assert ols_sigest(aliased, y) == pytest.approx(reference(x, y), rel=1e-9)
    assert ols_sigest(np.full((80, 2), 0.1), y) == pytest.approx(np.std(y, ddof=1), rel=1e-12)


def test_lambda_and_sigdf_prior_dominates(data):
    """With sigdf huge the prior pins sigma^2 at lambda_ (the data, n = 100,
    weigh nothing against it), burn-in included."""
    for lam in (4.0, 0.25):
        fit = fit_with(data, sigdf=1e5, lambda_=lam)
        assert_allclose(fit.sigma, math.sqrt(lam), rtol=0.02)


def test_larger_lambda_larger_sigma(data, fit):
    """A huge lambda_ (or sigest) inflates the error sd; a larger sigquant,
    i.e. a smaller lambda_, deflates it again."""
    assert fit.sigma_mean < 0.3
    assert fit_with(data, lambda_=1e4).sigma_mean > 10
    high = fit_with(data, sigest=100.0, sigquant=0.5)
    low = fit_with(data, sigest=100.0, sigquant=0.99)
    assert high.lambda_ / low.lambda_ == pytest.approx(stats.chi2.ppf(0.5, 3) / stats.chi2.ppf(0.01, 3))
    assert high.sigma_mean > 2 * low.sigma_mean > 2 * fit.sigma_mean


# ---------------------------------------------------------------- tree prior


def test_base_and_power_set_tree_size(data, fit):
    """A smaller base or a larger power gives smaller trees."""
    default = total_splits(fit).mean()
    assert total_splits(fit_with(data, base=0.1)).mean() < 0.6 * default
    deep = total_splits(fit_with(data, power=0.5)).mean()
    shallow = total_splits(fit_with(data, power=10.0))
    # power 10: nodes below the root split with probability 0.95 / 2^10
    assert shallow.mean() < 1.1 * NTREE
    assert shallow.mean() < 0.9 * deep


def test_base_and_power_passed(data, captured):
    x, y = data
    init = captured(x, y)['init']
    assert (init['base'], init['power']) == (0.95, 2.0)  # R's defaults
    init = captured(x, y, base=0.5, power=3.0)['init']
    assert (init['base'], init['power']) == (0.5, 3.0)


# ---------------------------------------------------------------- cut-points


def cell_spread(fit, x, cuts):
    """Largest range of yhat_train_mean within a cell of the grid `cuts`,
    and the sd of the cell means."""
    cells = np.zeros(len(x), np.int64)
    for j, c in enumerate(cuts):
        cells = cells * (len(c) + 1) + np.searchsorted(np.asarray(c, np.float32), x[:, j].astype(np.float32), 'right')
    yhat = fit.yhat_train_mean
    within = max(np.ptp(yhat[cells == c]) for c in np.unique(cells))
    between = np.std([yhat[cells == c].mean() for c in np.unique(cells)])
    return within, between


def test_numcut(data):
    """numcut evenly spaced cut-points strictly inside the range of each
    predictor (R's default); the fit is constant between them."""
    x, y = data
    for numcut in (1, 5):
        fit = fit_with(data, numcut=numcut)
        assert_array_equal(fit.numcut, [numcut] * P)
        expected = [np.linspace(x[:, j].min(), x[:, j].max(), numcut + 2)[1:-1] for j in range(P)]
        assert_allclose(fit.xinfo, np.array(expected, np.float32), rtol=1e-6)
        within, between = cell_spread(fit, x, expected)
        assert within < 1e-3 * np.std(y)  # float drift of the cached residuals
        assert between > 0.3 * np.std(y)
    assert_array_equal(fit_with(data, numcut=[2, 3, 4]).numcut, [2, 3, 4])
    # with at most numcut + 1 distinct values, the midpoints between them
    # (a documented deviation: R does so only below numcut distinct values)
    assert_array_equal(fit_with(data).numcut, [N - 1] * P)


def test_numcut_default(captured):
    rng = np.random.default_rng(2)
    init = captured(rng.uniform(size=(300, P)), rng.normal(size=300))['init']
    # R's default numcut; the predictors padded to 8 (`bartz.buckets`) have none
    assert_array_equal(init['max_split'], [100] * P + [0] * (buckets.predictor_length(P) - P))


def test_usequants(data):
    """usequants=True: cut-points at quantiles of the predictor (equal counts
    between them), not evenly spaced."""
    x, y = data
    skewed = x.copy()
    skewed[:, 0] = x[:, 0] ** 4
    even = gbart(skewed, y, numcut=9, seed=0, **SMALL)
    quant = gbart(skewed, y, numcut=9, usequants=True, seed=0, **SMALL)
    col = skewed[:, 0].astype(np.float32)
    assert_allclose(even.xinfo[0], np.linspace(col.min(), col.max(), 11)[1:-1], rtol=1e-6)
    assert_allclose(quant.xinfo[0], np.quantile(np.unique(col).astype(np.float64), np.arange(1, 10) / 10), rtol=1e-6)
    counts_even = np.bincount(np.searchsorted(even.xinfo[0], col, 'right'), minlength=10)
    counts_quant = np.bincount(np.searchsorted(quant.xinfo[0], col, 'right'), minlength=10)
    assert counts_quant.max() - counts_quant.min() <= 2
    assert counts_even.max() > 40  # x^4 piles up near 0


def test_xinfo_used_as_given(data):
    """User cut-points are used as given, as a list or a NaN-padded matrix."""
    x, y = data
    cuts = [np.array([0.5]), np.array([0.25, 0.5, 0.75]), np.array([0.3])]
    fit = fit_with(data, xinfo=cuts)
    assert_array_equal(fit.numcut, [1, 3, 1])
    for j, c in enumerate(cuts):
        assert_array_equal(fit.xinfo[j, : len(c)], c.astype(np.float32))
    within, between = cell_spread(fit, x, cuts)
    assert within < 1e-3 * np.std(y)  # float drift of the cached residuals
    assert between > 0.3 * np.std(y)
    matrix = np.full((3, 3), np.nan)
    for j, c in enumerate(cuts):
        matrix[j, : len(c)] = c
    assert_array_equal(fit_with(data, xinfo=matrix).yhat_train, fit.yhat_train)
    # numcut and usequants are ignored with xinfo
    assert_array_equal(fit_with(data, xinfo=cuts, numcut=50, usequants=True).yhat_train, fit.yhat_train)


def test_rm_const(data, fit, capsys):
    """rm_const=True drops constant columns: the same fit as without them,
    with zero varcount and varprob there; rm_const=False keeps them, and they
    are never split on."""
    x, y = data
    with_const = np.insert(x, 2, 4.0, axis=1)
    dropped = gbart(with_const, y, x_test=with_const[:30], seed=0, **{**SMALL, 'printevery': 100})
    out = capsys.readouterr().out
    assert 'rm_const dropped 1 predictor' in out
    assert_array_equal(dropped.rm_const, [0, 1, 3])
    assert_array_equal(dropped.yhat_train, fit.yhat_train)
    assert_array_equal(dropped.yhat_test, fit.yhat_test)
    assert np.all(dropped.varcount[:, 2] == 0)
    assert_array_equal(dropped.varcount[:, [0, 1, 3]], fit.varcount)
    assert_array_equal(dropped.varprob, np.tile([1 / 3, 1 / 3, 0, 1 / 3], (NDPOST, 1)))

    const_last = x.copy()
    const_last[:, 2] = 4.0
    kept = gbart(const_last, y, rm_const=False, seed=0, **SMALL)
    assert_array_equal(kept.rm_const, [0, 1, 2])
    assert kept.numcut[2] == 0
    assert np.all(kept.varcount[:, 2] == 0)
    # as R: without DART the reported split probability is 1/p for every column
    assert_array_equal(kept.varprob, np.full((NDPOST, P), 1 / 3))


# ---------------------------------------------------------------- weights


def test_w_multiplies_the_error_sd(data, fit):
    """eps_i ~ N(0, (sigma w_i)^2): w = 2 everywhere, with the sigma prior
    scaled to match (sigest / 2, lambda_ / 4), is the unweighted model for
    sigma / 2: the same fit and half the sigma draws."""
    x, y = data
    lam = fit.lambda_
    plain = fit_with(data, sigest=fit.sigest, lambda_=lam)
    assert_array_equal(plain.yhat_train, fit.yhat_train)
    weighted = fit_with(data, w=np.full(N, 2.0), sigest=fit.sigest / 2, lambda_=lam / 4)
    assert_allclose(weighted.yhat_train, plain.yhat_train, rtol=1e-4, atol=1e-4 * np.std(y))
    assert_allclose(weighted.sigma, plain.sigma / 2, rtol=1e-4)


# ---------------------------------------------------------------- DART arguments


@pytest.fixture(scope='module')
def varprob_spread():
    """Mean over draws of max_v s_v - min_v s_v, the spread of the split
    probabilities of a DART fit (0 if uniform)."""

    def run(data, **kwargs):
        fit = fit_with(data, sparse=True, **kwargs)
        varprob = np.asarray(fit.varprob)
        assert np.allclose(varprob.sum(axis=1), 1, atol=1e-4)
        return np.mean(varprob.max(axis=1) - varprob.min(axis=1))

    return run


def test_sparse_theta_rho_a_b(data, fit, varprob_spread):
    """sparse=True draws the split probabilities s ~ Dirichlet(theta/p +
    split counts): a large theta keeps them near uniform, a small one lets
    the counts decide (x2 is irrelevant: s_2 drops). theta = 0 draws theta
    via lambda = theta / (theta + rho) ~ Beta(a, b): a large a (lambda near
    1) or rho make theta large; a large b (lambda near 0) or a tiny rho make
    it small. Over seeds 0-2: spread 0.005-0.02 for the large ones, 0.43-0.57
    for the small ones."""
    assert_array_equal(fit.varprob, np.full((NDPOST, P), 1 / 3))  # sparse=False
    for kwargs in ({'theta': 1e4}, {'rho': 1e6}, {'a': 1e3}):
        assert varprob_spread(data, **kwargs) < 0.05, kwargs
    for kwargs in ({'theta': 1e-3}, {'rho': 1e-4}, {'b': 1e3}):
        assert varprob_spread(data, **kwargs) > 0.3, kwargs


def test_omega_is_ignored(data):
    """omega is in R's signature but unused (also by R's gbart)."""
    a = fit_with(data, sparse=True, omega=1)
    b = fit_with(data, sparse=True, omega=7.5)
    assert_array_equal(a.yhat_train, b.yhat_train)
    assert_array_equal(a.varprob, b.varprob)


def test_augment_changes_the_dart_update(data):
    """With sparse, augment=True runs Linero's augmented update of s
    (tests/test_dart.py checks its law): other draws of s, still summing to 1."""
    plain = fit_with(data, sparse=True)
    augmented = fit_with(data, sparse=True, augment=True)
    assert np.allclose(np.asarray(augmented.varprob).sum(axis=1), 1, atol=1e-5)
    assert not np.array_equal(np.asarray(plain.varprob), np.asarray(augmented.varprob))


# ---------------------------------------------------------------- draws and output


def test_ndpost_nskip_shapes(data, capsys):
    """ndpost kept draws after nskip burn-in iterations; sigma has both, as R."""
    x, _ = data
    # printevery=10 makes chunks of 10 iterations: both fits share a compilation
    for nskip, ndpost in [(10, 20), (30, 10)]:
        fit = fit_with(data, nskip=nskip, ndpost=ndpost, printevery=10, min_points_per_leaf=0, x_test=x[:7])
        assert fit.ndpost == ndpost
        assert fit.yhat_train.shape == (ndpost, N)
        assert fit.yhat_test.shape == (ndpost, 7)
        assert fit.varcount.shape == fit.varprob.shape == (ndpost, P)
        assert fit.sigma.shape == (nskip + ndpost,)
        assert_array_equal(fit.sigma[nskip:], fit.sigma_)
        info = fit.run_info
        assert info.grow_proposed + info.prune_proposed + info.change_proposed + info.swap_proposed == NTREE * (nskip + ndpost)
    capsys.readouterr()


def test_x_test(data, fit):
    """Predictions at x_test are those at the same points of x_train."""
    x, y = data
    assert fit.yhat_test.shape == (NDPOST, 30)
    # yhat_train comes from the sampler's cached residuals: float drift
    assert_allclose(fit.yhat_test, fit.yhat_train[:, :30], rtol=0, atol=1e-4 * np.std(y))
    # (the mean in float64, from the draws before float32 rounding)
    assert_allclose(fit.yhat_test_mean, fit.yhat_test.mean(axis=0, dtype=np.float64), rtol=1e-6, atol=1e-6 * np.std(y))
    assert fit_with(data).yhat_test is None


def test_printevery(data, fit, capsys):
    """printevery=None is silent; otherwise a progress line reaches the end."""
    capsys.readouterr()
    fit_with(data)
    out = capsys.readouterr()
    assert out.out == '' and out.err == ''
    fit_with(data, printevery=100)
    out = capsys.readouterr().out
    assert f'{NSKIP + NDPOST}/{NSKIP + NDPOST}' in out


def test_seed(data, fit):
    """Same seed, same draws (an integer, or the equivalent JAX key); another
    seed, other draws."""
    again = fit_with(data, seed=0, x_test=data[0][:30])
    assert_array_equal(again.yhat_train, fit.yhat_train)
    assert_array_equal(again.yhat_test, fit.yhat_test)
    assert_array_equal(fit_with(data, seed=jax.random.key(0)).yhat_train, fit.yhat_train)
    other = fit_with(data, seed=1)
    assert not np.allclose(other.yhat_train, fit.yhat_train)


def test_mc_cores_splits_ndpost(data, captured):
    """mc_cores chains, ndpost in total: ceil(ndpost / mc_cores) each."""
    x, y = data
    calls = captured(x, y, mc_cores=3, ndpost=10)
    assert calls['num_chains'] == 3
    assert calls['run_mcmc']['num_chains'] == 3
    assert calls['run_mcmc']['n_save'] == 4


@pytest.mark.parametrize('name', ['ntype', 'transposed', 'hostname', 'nice'])
def test_r_only_arguments_are_refused(data, name):
    """Arguments of R's gbart with no meaning in bartz are not accepted (see
    docs/r_parity.md), rather than silently ignored."""
    x, y = data
    with pytest.raises(TypeError, match=name):
        gbart(x, y, **{name: 1})


def test_rm_const_message_names_columns(captured, capsys):
    """The message names the dropped columns plainly, as 0-based indices."""
    rng = np.random.default_rng(3)
    x = np.insert(rng.uniform(size=(20, 2)), 1, 4.0, axis=1)
    captured(x, rng.normal(size=20), printevery=100)
    out = capsys.readouterr().out
    assert out.startswith('bartz: rm_const dropped 1 predictor')
    assert out.rstrip().endswith(': [1]'), out


def test_prior_quantiles_are_scipy_stats_bit_for_bit():
    """`bartz.priors` computes R's quantiles with `scipy.special` (so that
    ``import bartz`` need not import `scipy.stats`, about half a second):
    the same floats as the `scipy.stats` calls they replace, so no fit
    changes."""
    q = np.linspace(0.001, 0.999, 999)
    for df in (1, 2, 2.5, 3, 10, 30, 100):
        assert_array_equal(2 * special.gammaincinv(df / 2, 1 - q), stats.chi2.ppf(1 - q, df))
    assert_array_equal(special.ndtri(q), stats.norm.ppf(q))
    z = np.linspace(-40, 40, 8001)
    assert_array_equal(priors.OUTCOME_TYPES['pbart'].prob(z), stats.norm.cdf(z))
    y = np.array([True, False, True, True])
    assert priors.OUTCOME_TYPES['pbart'].default_offset(y) == stats.norm.ppf(0.75)


def test_import_bartz_does_not_import_scipy_stats_or_fft():
    """A new process pays for what ``import bartz`` imports (a subprocess,
    to start clean): not `scipy.stats` nor `scipy.fft` (about 0.5 and 0.15
    s; the ESS's autocovariance uses NumPy's FFT)."""
    code = 'import sys, bartz; print("scipy.stats" in sys.modules, "scipy.fft" in sys.modules)'
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ['False', 'False']


def test_next_fast_len_is_scipys():
    """`bartz.diagnostics.spectral.next_fast_len` is `scipy.fft.next_fast_len`
    for real transforms (5-smooth lengths)."""
    from scipy import fft  # noqa: PLC0415

    from bartz.diagnostics import spectral  # noqa: PLC0415

    sizes = [*range(1, 3000), 2**20 + 1, 3**12 + 7, 5**9 - 1, 10**7 + 19]
    assert [spectral.next_fast_len(n) for n in sizes] == [fft.next_fast_len(n, real=True) for n in sizes]
