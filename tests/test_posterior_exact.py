"""Exact posterior of one small tree, with data: checks the likelihood part
of the Metropolis-Hastings ratio (the prior test checks the structure part).

One tree, one predictor with 3 cut-points, at most 2 levels of splits, known
error variance: every tree can be enumerated, and its posterior probability
is prior(T) * prod over leaves of the leaf marginal likelihood. Many
independent chains of the sampler, each run long enough to forget its start,
must visit the trees with these probabilities (chi-square test).
"""

import jax
import numpy as np
import pytest
from jax import lax
from jax import numpy as jnp
from scipy import stats

from bartz.sampler import step as mcmcstep

MAX_SPLIT = 3
MAX_DEPTH = 3  # heap levels: splits at levels 0 and 1
BASE, POWER = 0.95, 2.0
SIGMA2 = 0.5
TAU2 = 0.3


def _p_split(depth, num_cuts):
    if depth >= MAX_DEPTH - 1 or num_cuts <= 0:
        return 0.0
    return BASE / (1 + depth) ** POWER


def _enumerate_trees():
    """All trees as tuples of (node, split) for internal nodes, with prior
    probability; the leaves are given as lists of (node, lo, hi) bin ranges."""
    trees = []

    def node_options(node, depth, lo, hi):
        """Subtrees at a node whose bins are lo..hi: list of (prior, splits, leaves)."""
        num_cuts = hi - lo  # usable split indices lo+1 .. hi
        ps = _p_split(depth, num_cuts)
        options = [(1 - ps, (), ((node, lo, hi),))]
        if ps > 0:
            for s in range(lo + 1, hi + 1):
                for lp, lsplits, lleaves in node_options(2 * node, depth + 1, lo, s - 1):
                    for rp, rsplits, rleaves in node_options(2 * node + 1, depth + 1, s, hi):
                        prior = ps / num_cuts * lp * rp
                        options.append((prior, ((node, s), *lsplits, *rsplits), lleaves + rleaves))
        return options

    for prior, splits, leaves in node_options(1, 0, 0, MAX_SPLIT):
        trees.append((tuple(sorted(splits)), prior, leaves))
    return trees


def log_marginal(resid_sum, count):
    post_prec = count / SIGMA2 + 1 / TAU2
    return 0.5 * np.log(1 / TAU2 / post_prec) + 0.5 * (resid_sum / SIGMA2) ** 2 / post_prec


def _exact_posterior(xbin, y):
    trees = _enumerate_trees()
    logp = []
    for _, prior, leaves in trees:
        ll = 0.0
        for _, lo, hi in leaves:
            mask = (xbin >= lo) & (xbin <= hi)
            ll += log_marginal(y[mask].sum(), mask.sum())
        logp.append(np.log(prior) + ll)
    logp = np.array(logp)
    prob = np.exp(logp - logp.max())
    return [t[0] for t in trees], prob / prob.sum()


def _run_chains(xbin, y, key, num_chains, num_iters, moves=None):
    state = mcmcstep.init(
        move_probs=moves,
        X=xbin[None, :].astype(np.uint8),
        max_split=np.array([MAX_SPLIT]),
        y=y.astype(np.float32),
        num_trees=1,
        max_depth=MAX_DEPTH,
        leaf_prior_var=TAU2,
        # sigma^2 fixed in practice: the prior is a spike at SIGMA2
        sigma2_alpha=1e9,
        sigma2_beta=1e9 * SIGMA2,
        sigma2_init=SIGMA2,
        base=BASE,
        power=POWER,
        min_points_per_leaf=0,
    )
    state = mcmcstep.init_chains(state, num_chains)
    axes = mcmcstep.chain_axes(state)
    step = jax.vmap(mcmcstep.step, in_axes=(0, axes), out_axes=(axes, 0))

    @jax.jit
    def run(keys, state):
        def body(i, state):
            return step(keys[i], state)[0]

        return lax.fori_loop(0, num_iters, body, state)

    keys = jax.random.split(key, (num_iters, num_chains))
    state = run(keys, state)
    split = np.asarray(state.forest.split_tree)[:, 0, :]  # (chains, H/2)
    return [tuple((node, int(s)) for node, s in enumerate(row) if s) for row in split]


# slow (the first case compiles for about a minute); the default run keeps
# test_mcmcstep.py's test_tree_posterior_exact as the guard of the posterior
@pytest.mark.slow
@pytest.mark.no_key_reuse_check
@pytest.mark.parametrize(
    ('seed', 'moves'),
    [
        (0, None),
        (1, None),
        (2, None),
        (0, ('grow', 'prune')),
        (1, {'grow': 0.1, 'prune': 0.1, 'change': 0.8}),
        (2, {'grow': 0.1, 'prune': 0.1, 'swap': 0.8}),
    ],
    ids=['default0', 'default1', 'default2', 'growprune', 'change', 'swap'],
)
def test_single_tree_posterior_matches_enumeration(seed, moves):
    rng = np.random.default_rng(seed)
    n = 16
    xbin = rng.integers(0, MAX_SPLIT + 1, n)
    # a step function with noise, so that the posterior is spread over trees
    y = 0.25 * (xbin >= 2) + np.sqrt(SIGMA2) * rng.normal(size=n)
    y -= y.mean()
    names, prob = _exact_posterior(xbin, y)
    assert abs(prob.sum() - 1) < 1e-12
    assert len(names) == len(set(names))

    num_chains = 4000
    visited = _run_chains(xbin, y, jax.random.key(seed), num_chains, num_iters=400, moves=moves)
    index = {name: i for i, name in enumerate(names)}
    counts = np.zeros(len(names))
    for tree in visited:
        counts[index[tree]] += 1  # KeyError would mean an impossible tree
    expected = prob * num_chains
    # merge the rare trees so that the chi-square approximation holds
    order = np.argsort(expected)
    small = order[np.cumsum(expected[order]) < 20]
    keep = np.setdiff1d(np.arange(len(names)), small)
    obs, exp = counts[keep], expected[keep]
    if small.size:
        obs = np.append(obs, counts[small].sum())
        exp = np.append(exp, expected[small].sum())
    chi2 = np.sum((obs - exp) ** 2 / exp)
    pvalue = stats.chi2.sf(chi2, len(obs) - 1)
    assert pvalue > 1e-4, (chi2, len(obs), list(zip(obs, exp.round(1), strict=True)))


def test_enumeration_covers_prior():
    """The enumerated prior sums to one, so no tree is missing."""
    total = sum(prior for _, prior, _ in _enumerate_trees())
    assert abs(total - 1) < 1e-12
