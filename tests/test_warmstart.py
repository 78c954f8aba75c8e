"""Tests for bartz.run.warmstart: the starting states of the chains.

Both starts (grow-from-root and random prior trees) must hand the sampler a
consistent state (`check_state`: leaf indices, counts, precision sums,
residuals, split ranges, points per leaf) for every kind of outcome, and
trees that the sampler can continue from. Their laws are checked where they
are known exactly: with no data the likelihood is flat, so both must draw
trees from the tree prior, compared with the exact forward sampler of
test_mcmcstep. The warm start's fit is compared with the MCMC's, with a
tolerance from the spread over seeds.
"""

import jax
import numpy as np
import pytest
from jax import numpy as jnp
from jax import random

from bartz import gbart
from bartz.forest import grove
from bartz.sampler import step as mcmcstep
from bartz.run import warmstart
from tests.test_BART import count_jax_events
from tests.test_mcmcstep import (
    DATA_MIN_POINTS,
    DATA_N,
    P_MIN,
    PRIOR_CONFIGS,
    check_state,
    data_state,
    prior_pvalues,
    prior_state,
)

KINDS = ['continuous', 'weighted', 'probit', 'padded', 'logistic']
PADDED_VALID = np.arange(DATA_N) < DATA_N - 37


def kind_state(kind, seed=0):
    if kind == 'logistic':
        state = data_state(seed, binary=True)
        return _logistic(state), None
    valid = PADDED_VALID if kind == 'padded' else None
    state = data_state(seed, weighted=kind == 'weighted', binary=kind == 'probit', valid=valid)
    return state, valid


def _logistic(probit_state):
    """The data of a probit state as a logistic one."""
    return mcmcstep.init(
        X=probit_state.X,
        max_split=probit_state.max_split,
        y=np.asarray(probit_state.y),
        num_trees=probit_state.forest.leaf_tree.shape[0],
        max_depth=grove.heap_depth(probit_state.forest.leaf_tree.shape[1]),
        leaf_prior_var=0.1,
        min_points_per_leaf=DATA_MIN_POINTS,
        logit_offset=0.3,
    )


def chain(state, c):
    """Chain `c` of a multi-chain state."""
    axes = mcmcstep.chain_axes(state)
    return mcmcstep.State(*(v if a is None else jax.tree.map(lambda x: x[c], v) for v, a in zip(state, axes, strict=True)))


SLOW = pytest.mark.slow
# (warm starts of probit, weighted and logistic fits: the slow run; the
# default run has the continuous and padded ones, and probit from the prior)
_SLOW_WARM = {'probit', 'weighted', 'logistic'}
CONSISTENT_CASES = [pytest.param(kind, 3, None, marks=SLOW) if kind in _SLOW_WARM else (kind, 3, None) for kind in KINDS] + [
    ('continuous', 0, 'prior'),
    ('probit', 0, 'prior'),
    pytest.param('weighted', 0, 'prior', marks=SLOW),
    pytest.param('padded', 0, 'prior', marks=SLOW),
    pytest.param('logistic', 0, 'prior', marks=SLOW),
]


@pytest.mark.parametrize(('kind', 'warm', 'start'), CONSISTENT_CASES)
def test_start_consistent(kind, warm, start):
    """One chain: the start is a consistent state, and stays one under the MCMC."""
    state, valid = kind_state(kind)
    out = warmstart.start_chains(random.key(1), state, None, warm, start)
    check_state(out, DATA_MIN_POINTS, valid)
    assert np.any(np.asarray(out.forest.split_tree) != 0), 'no tree grew'
    if kind in ('probit', 'logistic'):
        # the latents were drawn given the trees, on the side given by y
        z = np.asarray(out.z)
        if kind == 'probit':
            threshold = float(out.probit_threshold)
            assert np.all((z > threshold) == np.asarray(out.y))
    step = jax.jit(mcmcstep.step)
    for key in random.split(random.key(2), 3):
        out, _ = step(key, out)
    check_state(out, DATA_MIN_POINTS, valid)


@pytest.mark.parametrize(
    ('kind', 'warm', 'start'),
    [
        ('padded', 2, None),
        ('padded', 0, 'prior'),
        pytest.param('continuous', 2, None, marks=SLOW),
        pytest.param('logistic', 2, None, marks=SLOW),
        pytest.param('logistic', 0, 'prior', marks=SLOW),
    ],
)
def test_several_chains(kind, warm, start):
    """Every chain starts from its own consistent state."""
    state, valid = kind_state(kind)
    num_chains = 3
    out = warmstart.start_chains(random.key(3), mcmcstep.init_chains(state, num_chains), num_chains, warm, start)
    trees = []
    for c in range(num_chains):
        one = chain(out, c)
        check_state(one, DATA_MIN_POINTS, valid)
        trees.append(np.asarray(one.forest.leaf_tree))
    for a in range(num_chains):
        for b in range(a):
            assert not np.array_equal(trees[a], trees[b]), (a, b)


def test_root_start_is_identity():
    """``warmstart=0`` with the root start hands the state over untouched
    (today's fits do not change)."""
    state, _ = kind_state('continuous')
    assert warmstart.start_chains(random.key(0), state, None, 0, 'root') is state
    assert warmstart.DEFAULT_START == 'root'


def test_split_weights_follow_log_s():
    """A predictor with (numerically) zero DART probability is never split on,
    and the others still are."""
    state, _ = kind_state('continuous')
    log_s = jnp.asarray([0.0, -1e9, 0.0, 0.0, 0.0], jnp.float32)
    state = state._replace(log_s=log_s)
    for warm, start in [(2, None), (0, 'prior')]:
        out = warmstart.start_chains(random.key(4), state, None, warm, start)
        internal = np.asarray(out.forest.split_tree) != 0
        var = np.asarray(out.forest.var_tree)
        assert internal.any()
        assert not np.any(internal & (var == 1)), (warm, start)


# ------------------------------------------------ the laws, where known exactly


@pytest.mark.parametrize(
    ('config', 'warm'),
    [('B', 0), ('B', 1)] + [pytest.param(c, w, marks=SLOW) for c in ('A', 'A2', 'A3') for w in (0, 1)],
)
def test_no_data_draws_the_prior(config, warm):
    """With no data every leaf's likelihood is 1, so the grow-from-root
    weights reduce to the tree prior (this checks the "no split" weight
    against the split weights, the predictor and cut-point weights and
    the exhausted predictors), as does the prior start; both are compared
    with the exact forward sampler."""
    max_depth, max_split, base, power, s, num_trees, _ = PRIOR_CONFIGS[config]
    state = prior_state(max_depth, max_split, base, power, s, num_trees)
    out = warmstart.start_chains(random.key(5), state, None, warm, None if warm else 'prior')
    out = jax.device_get(out)
    pvalues = prior_pvalues(out, config, 7)
    bad = {k: v for k, v in pvalues.items() if v < P_MIN}
    assert not bad, f'{config} warm={warm}: {pvalues}'


def test_no_data_detects_wrong_weights():
    """The comparison above has power: doubling the split probability of
    the grow-from-root weights is rejected."""
    max_depth, max_split, base, power, s, num_trees, _ = PRIOR_CONFIGS['B']
    state = prior_state(max_depth, max_split, base, power, s, num_trees)
    state = state._replace(p_nonterminal=jnp.minimum(2 * state.p_nonterminal, 0.99))
    out = jax.device_get(warmstart.start_chains(random.key(5), state, None, 1))
    pvalues = prior_pvalues(out, 'B', 7)
    assert min(pvalues.values()) < P_MIN


# ------------------------------------------------------------- the fit


def _friedman(n, rng):
    x = rng.uniform(size=(n, 10))
    f = 10 * np.sin(np.pi * x[:, 0] * x[:, 1]) + 20 * (x[:, 2] - 0.5) ** 2 + 10 * x[:, 3] + 5 * x[:, 4]
    return x, f


FIT_N = 500
FIT_SEEDS = 6


@pytest.fixture(scope='module')
def friedman_fits():
    """Errors ``rmse(f_hat - f)`` on Friedman #1 of: the first draw after 5
    warm-start sweeps (several seeds), the draw after 10 iterations from
    the root start (same seeds), and the draws of a long MCMC run."""
    rng = np.random.default_rng(2024)
    x, f = _friedman(FIT_N, rng)
    y = f + rng.normal(size=FIT_N)

    def rmse(fit):
        return np.sqrt(np.mean((fit.yhat_train - f) ** 2, axis=1))

    kw = {'printevery': None, 'ntree': 50}
    warm = [rmse(gbart(x, y, nskip=0, ndpost=1, seed=seed, warmstart=5, **kw))[0] for seed in range(FIT_SEEDS)]
    root = [rmse(gbart(x, y, nskip=9, ndpost=1, seed=seed, **kw))[0] for seed in range(FIT_SEEDS)]
    mcmc = rmse(gbart(x, y, nskip=300, ndpost=300, seed=0, **kw))
    return np.array(warm), np.array(root), mcmc


@SLOW
def test_warm_start_fits_the_data(friedman_fits):
    """The warm start is near the posterior: its error (mean over seeds, up
    to 4 standard errors from the spread over seeds) is below that of the
    root start after 10 MCMC iterations, and within 25% of a posterior
    draw's (measured: about 12% above after 5 sweeps, which is why it is a
    start and not a substitute for the burn-in; benchmarks/README.md)."""
    warm, root, mcmc = friedman_fits
    se_warm = warm.std(ddof=1) / np.sqrt(warm.size)
    se_root = root.std(ddof=1) / np.sqrt(root.size)
    assert warm.mean() + 4 * se_warm < root.mean() - 4 * se_root, (warm, root)
    assert warm.mean() - 4 * se_warm < 1.25 * mcmc.mean(), (warm, mcmc.mean())
    assert warm.mean() + 4 * se_warm > mcmc.mean() - 4 * mcmc.std(ddof=1), (warm, mcmc.mean())


# ----------------------------------------------------------- the front end


@pytest.mark.parametrize(
    ('value', 'error'),
    [(-1, ValueError), (1.5, ValueError), ('2', TypeError), (True, TypeError), (None, TypeError)],
)
def test_invalid_warmstart(value, error):
    x = np.random.default_rng(0).uniform(size=(30, 2))
    with pytest.raises(error, match='warmstart'):
        gbart(x, x[:, 0], warmstart=value, printevery=None)


def test_warmstart_refused_with_data_sharding():
    x = np.random.default_rng(0).uniform(size=(30, 2))
    with pytest.raises(ValueError, match='warmstart=2 is not supported with the data split'):
        gbart(x, x[:, 0], warmstart=2, printevery=None, num_data_devices=2, devices=jax.devices()[:2])


def test_gbart_warmstart_chains_and_reuse():
    """Several chains, each from its own warm start; a second fit of
    another n in the same bucket does not trace the start again."""
    rng = np.random.default_rng(1)
    x, f = _friedman(300, rng)
    y = f + rng.normal(size=300)
    kw = {'nskip': 0, 'ndpost': 4, 'mc_cores': 2, 'printevery': None, 'ntree': 20, 'warmstart': 1}
    with count_jax_events() as events:
        fit = gbart(x, y, **kw)
    # on one CPU device each chain's start is a call of 'start_chain', on a
    # thread (elsewhere one program, 'start_from', runs them all)
    assert 'start_chain' in events['traced']  # the counter sees the program
    first = fit.yhat_train.reshape(2, 2, -1)[:, 0]
    assert not np.allclose(first[0], first[1])
    with count_jax_events() as events:
        gbart(x[:290], y[:290], **kw)
    assert 'start_chain' not in events['traced'], events['traced']
