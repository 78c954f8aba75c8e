"""Logistic BART: the Polya-Gamma sampler, the latent update, ``gbart(type='lbart')``."""

import math

import jax
import numpy as np
import pytest
from jax import numpy as jnp
from jax import random
from scipy import integrate, special, stats

from bartz import gbart
from bartz.run import loop as mcmcloop
from bartz.sampler import step as mcmcstep
from bartz.sampler import polyagamma
from tests.coupling import assert_same_fit

P_MIN = 1e-3  # per-test p-value threshold of the statistical tests


# ---------------------------------------------------------------- the PG(1, c) sampler


def pg1_density(x, c):
    """Density of PG(1, c) at x > 0, by the alternating series of J*(1, 0)
    (x = J* / 4), each x with the form that converges fastest."""
    j = 4 * np.asarray(x, np.float64)
    n = np.arange(60)[:, None]
    a_left = np.pi * (n + 0.5) * (2 / (np.pi * j)) ** 1.5 * np.exp(-2 * (n + 0.5) ** 2 / j)
    a_right = np.pi * (n + 0.5) * np.exp(-((n + 0.5) ** 2) * np.pi**2 * j / 2)
    sign = (-1.0) ** n
    jstar = np.where(j < 0.64, np.sum(sign * a_left, 0), np.sum(sign * a_right, 0))
    return 4 * np.cosh(c / 2) * np.exp(-(c**2) * x / 2) * jstar


C_VALUES = [0.0, 1e-3, 0.7, 3.0, 3.2, 6.0, 15.0, -4.0]


@pytest.fixture(scope='module')
def pg_draws():
    c = jnp.array(C_VALUES, jnp.float32)
    draw = jax.jit(jax.vmap(lambda k: polyagamma.pg1(k, c)))
    return np.asarray(draw(random.split(random.key(0), 100_000)), np.float64)


def test_pg_density_integrates_to_one():
    for c in (0.0, 3.0, 15.0):
        total, _ = integrate.quad(lambda x, c: pg1_density(x, c).item(), 1e-8, 5, args=(c,), limit=200, points=[0.16])
        assert total == pytest.approx(1, abs=1e-6)


@pytest.mark.parametrize('i', range(len(C_VALUES)))
def test_pg_moments(pg_draws, i):
    """Mean tanh(c/2)/(2c) and variance (sinh c - c)/(4 c^3 cosh^2(c/2)),
    within Monte Carlo error (batch means of 20 batches)."""
    c = C_VALUES[i]
    x = pg_draws[:, i]
    assert np.all(x > 0)
    batches = x.reshape(20, -1)
    means = batches.mean(axis=1)
    varis = batches.var(axis=1)
    z_mean = (means.mean() - polyagamma.pg1_mean(c)) / (means.std(ddof=1) / math.sqrt(20))
    z_var = (varis.mean() - polyagamma.pg1_var(c)) / (varis.std(ddof=1) / math.sqrt(20))
    # t with 19 degrees of freedom: |t| > 4.5 has probability < 3e-4
    assert abs(z_mean) < 4.5, z_mean
    assert abs(z_var) < 4.5, z_var


@pytest.mark.parametrize('i', [0, 3, 4, 6])
def test_pg_law(pg_draws, i):
    """Kolmogorov-Smirnov against the exact cdf (numerical integral of the series)."""
    c = C_VALUES[i]
    x = np.sort(pg_draws[:5000, i])
    grid = np.linspace(1e-6, max(4.0, x[-1] * 1.01), 80_001)
    cdf = integrate.cumulative_trapezoid(pg1_density(grid, c), grid, initial=0)
    assert cdf[-1] == pytest.approx(1, abs=1e-4)
    assert stats.kstest(x, lambda q: np.interp(q, grid, cdf)).pvalue > P_MIN


def test_pg_small_c_limit():
    """As c -> 0 the moments tend to those of PG(1, 0): 1/4 and 1/24."""
    assert polyagamma.pg1_mean(1e-9) == pytest.approx(0.25)
    assert polyagamma.pg1_var(1e-9) == pytest.approx(1 / 24)
    assert polyagamma.pg1_mean(1e-3) == pytest.approx(np.tanh(5e-4) / 2e-3, rel=1e-9)
    # the series branch near 0 joins the closed forms continuously
    assert polyagamma.pg1_mean(0.99e-4) == pytest.approx(polyagamma.pg1_mean(1.01e-4), rel=1e-9)
    assert polyagamma.pg1_var(0.99e-2) == pytest.approx(polyagamma.pg1_var(1.01e-2), rel=1e-6)


def test_pg_extreme_and_nonfinite():
    c = jnp.array([0.0, 80.0, -200.0, jnp.nan, jnp.inf], jnp.float32)
    x = np.asarray(jax.jit(polyagamma.pg1)(random.key(1), c))
    assert np.all(np.isfinite(x[:3])) and np.all(x[:3] > 0)
    assert np.all(np.isnan(x[3:]))
    # far out, PG(1, c) concentrates at its mean ~ 1 / (2 |c|)
    assert x[2] == pytest.approx(1 / 400, rel=0.3)


def test_pg_draw_depends_only_on_its_stream():
    """A subset of the elements, with their stream numbers, gets the same
    draws: the draws do not depend on the batch (or device) they are in."""
    c = 3 * random.normal(random.key(0), (3000,))
    draw = jax.jit(polyagamma.pg1)
    whole = np.asarray(draw(random.key(1), c))
    part = np.asarray(draw(random.key(1), c[1000:1300], 1000))
    np.testing.assert_array_equal(part, whole[1000:1300])


# ---------------------------------------------------------------- the latent update


def root_state(y, offset, tau2):
    """One tree that cannot split (base 0): the root leaf is the only parameter."""
    X = jnp.zeros((1, y.size), jnp.uint8)
    return mcmcstep.init(
        X=X, max_split=jnp.array([1]), y=y, num_trees=1, max_depth=3, leaf_prior_var=tau2, base=0.0, logit_offset=offset
    )


@pytest.mark.slow  # statistical (55 s with its compilation)
@pytest.mark.no_key_reuse_check
@pytest.mark.parametrize('seed', [0, 1])
def test_root_leaf_posterior_matches_quadrature(seed):
    """A single leaf mu ~ N(0, tau^2) with P(y = 1) = logistic(offset + mu):
    the Gibbs chain's draws of mu follow the posterior computed by quadrature."""
    rng = np.random.default_rng(seed)
    n, offset, tau2 = 25, 0.4, 0.8
    y = rng.uniform(size=n) < 0.3
    state = root_state(jnp.asarray(y), offset, tau2)
    num_chains, num_iters = 3000, 30
    state = mcmcstep.init_chains(state, num_chains)
    axes = mcmcstep.chain_axes(state)
    step = jax.vmap(mcmcstep.step, in_axes=(0, axes), out_axes=(axes, 0))

    @jax.jit
    def run(keys, state):
        return jax.lax.fori_loop(0, num_iters, lambda i, s: step(keys[i], s)[0], state)

    state = run(random.split(random.key(seed), (num_iters, num_chains)), state)
    mu = np.asarray(state.forest.leaf_tree[:, 0, 1], np.float64)

    k = y.sum()
    grid = np.linspace(-6, 6, 20001)
    psi = offset + grid
    logpost = -(grid**2) / (2 * tau2) + k * -np.logaddexp(0, -psi) + (n - k) * -np.logaddexp(0, psi)
    dens = np.exp(logpost - logpost.max())
    cdf = integrate.cumulative_trapezoid(dens, grid, initial=0)
    cdf /= cdf[-1]
    assert stats.kstest(mu, lambda q: np.interp(q, grid, cdf)).pvalue > P_MIN
    # the weights are positive; a logistic state carries no precision sums
    # (the sweep sums them afresh)
    omega = np.asarray(state.prec_weights)
    assert state.forest.leaf_prec is None
    assert np.all(omega > 0)


def test_weights_and_latents_after_sweeps():
    """After sweeps the Polya-Gamma weights are positive at real points and 0
    at padding, the pseudo-responses follow them, and the state carries no
    per-leaf precision sums (every sweep sums them afresh from the weights;
    the exactness of those sums is checked by the root-leaf posterior test
    above and by the bookkeeping tests of `test_mcmcstep`)."""
    rng = np.random.default_rng(0)
    n, p = 300, 3
    X = rng.integers(0, 10, size=(p, n)).astype(np.uint8)
    y = rng.uniform(size=n) < 0.5
    valid = np.arange(n) < 290
    y &= valid
    state = mcmcstep.init(
        X=X, max_split=np.full(p, 9), y=y, num_trees=5, leaf_prior_var=0.3, logit_offset=0.1, valid=valid,
        min_points_per_leaf=3,
    )
    step = jax.jit(mcmcstep.step)
    for key in random.split(random.key(0), 10):
        state, _ = step(key, state)
    omega = np.asarray(state.prec_weights)
    assert np.all(omega[valid] > 0) and np.all(omega[~valid] == 0)
    assert state.forest.leaf_prec is None
    # z and resid: (y - 1/2) / omega - offset, and z minus the sum of trees
    z = np.asarray(state.z)
    np.testing.assert_allclose(z[valid], np.where(y, 0.5, -0.5)[valid] / omega[valid] - 0.1, rtol=1e-5)
    assert np.all(z[~valid] == 0) and np.all(np.asarray(state.resid)[~valid] == 0)


def test_logit_offset_refuses_continuous():
    with pytest.raises(ValueError, match='logit_offset'):
        mcmcstep.init(
            X=np.zeros((1, 4), np.uint8), max_split=np.array([1]), y=np.zeros(4, np.float32), num_trees=1,
            leaf_prior_var=1.0, sigma2_alpha=1.0, sigma2_beta=1.0, logit_offset=0.0,
        )


# ---------------------------------------------------------------- gbart(type='lbart')

SMALL = {'ntree': 20, 'ndpost': 50, 'nskip': 20, 'printevery': None}


def logistic_data(seed, n=300, n_test=200):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, size=(n + n_test, 2))
    prob = special.expit(1.5 * np.sin(2 * x[:, 0]) + x[:, 1])
    y = (rng.uniform(size=n + n_test) < prob).astype(int)
    return x[:n], y[:n], x[n:], prob[n:]


@pytest.fixture(scope='module')
def lfit():
    x, y, x_test, _ = logistic_data(0, n=100, n_test=30)
    return gbart(x, y, x_test=x_test, type='lbart', seed=0, **SMALL), x, y, x_test


def test_lbart_result(lfit):
    fit, x, y, x_test = lfit
    assert fit.type == 'lbart'
    assert 'logistic' in repr(fit)
    assert fit.offset == pytest.approx(special.logit(y.mean()))
    assert fit.tau_num == 6.0
    assert fit.prob_train.shape == fit.yhat_train.shape == (50, 100)
    np.testing.assert_allclose(fit.prob_train, special.expit(fit.yhat_train), rtol=1e-6)
    np.testing.assert_allclose(fit.prob_test, special.expit(fit.yhat_test), rtol=1e-6)
    np.testing.assert_allclose(fit.prob_test_mean, fit.prob_test.mean(axis=0), rtol=1e-6)
    assert not hasattr(fit, 'sigma')
    # predict gives probabilities, as for probit
    np.testing.assert_allclose(fit.predict(x_test), fit.prob_test, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fit.predict(x_test, kind='mean'), fit.prob_test_mean, rtol=1e-5, atol=1e-6)
    assert set(fit.diagnostics().index) >= {'yhat_train (worst point)'}


class _Captured(Exception):  # noqa: N818
    """Raised in place of the MCMC run."""


def test_lbart_r_defaults(monkeypatch):
    """As R's gbart(type='lbart'): 50 trees, keepevery 10, tau_num 6,
    offset qlogis(mean(y)); bool outcome and no probit threshold."""
    calls = {}

    def run_mcmc(key, state, **kwargs):
        calls['run_mcmc'] = kwargs
        raise _Captured

    real_init = mcmcstep.init

    def init(**kwargs):
        calls['init'] = kwargs
        return real_init(**kwargs)

    monkeypatch.setattr(mcmcstep, 'init', init)
    monkeypatch.setattr(mcmcloop, 'run_mcmc', run_mcmc)
    x, y, _, _ = logistic_data(1, n=60, n_test=0)
    with pytest.raises(_Captured):
        gbart(x, y, type='lbart')
    init_kw, run_kw = calls['init'], calls['run_mcmc']
    assert init_kw['num_trees'] == 50
    assert run_kw['n_skip'] == 10
    assert (run_kw['n_burn'], run_kw['n_save']) == (100, 1000)
    assert init_kw['y'].dtype == bool
    assert init_kw['probit_threshold'] is None
    assert init_kw['logit_offset'] == pytest.approx(special.logit(y.mean()))
    assert init_kw['leaf_prior_var'] == pytest.approx((6 / (2 * math.sqrt(50))) ** 2)


@pytest.mark.parametrize(
    ('kwargs', 'match'),
    [
        ({'type': 'logit'}, "'lbart'"),
        ({'type': 'lbart', 'y_train': np.arange(60) % 3}, 'y_train'),
        ({'type': 'lbart', 'w': np.ones(60)}, r'\bw\b'),
    ],
)
def test_lbart_bad_input(kwargs, match):
    x, y, _, _ = logistic_data(1, n=60, n_test=0)
    kwargs = {'y_train': y, **kwargs}
    with pytest.raises(ValueError, match=match):
        gbart(x, kwargs.pop('y_train'), **kwargs, **SMALL)


@pytest.mark.slow
def test_lbart_same_draws_on_mesh():
    """Data split over devices (padded) and chains: the same draws."""
    x, y, x_test, _ = logistic_data(2, n=101, n_test=10)
    settings = {**SMALL, 'ntree': 10, 'keepevery': 2, 'mc_cores': 2, 'seed': 3}
    ref = gbart(x, y, x_test, type='lbart', devices=jax.devices()[:1], **settings)
    fit = gbart(x, y, x_test, type='lbart', num_chain_devices=2, num_data_devices=2, **settings)
    # up to a decision that float rounding flips; the latent yhat (|.| up to ~3)
    # carries the rounding of 10 trees' sums over the run: 1e-5 is too tight
    assert_same_fit(fit, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.slow  # statistical (35 s with its compilation); test_lbart_result stays in the default run
@pytest.mark.parametrize('seed', [0, 1, 2])
def test_lbart_recovers_probability(seed):
    """P(y = 1 | x) on simulated logistic data, with R's defaults: the
    posterior mean is close to the truth and the 95% intervals cover it."""
    x, y, x_test, prob = logistic_data(seed, n=500)
    fit = gbart(x, y, x_test=x_test, type='lbart', ndpost=200, nskip=100, printevery=None, seed=seed)
    rmse = np.sqrt(np.mean((fit.prob_test_mean - prob) ** 2))
    lo, hi = np.quantile(fit.prob_test, [0.025, 0.975], axis=0)
    coverage = np.mean((lo <= prob) & (prob <= hi))
    # a logistic GLM that knows the true predictor gets about 0.04 at this n
    assert rmse < 0.1, rmse
    assert coverage > 0.8, coverage
    # and it beats the constant predictor by far
    assert rmse < 0.5 * np.sqrt(np.mean((y.mean() - prob) ** 2))
