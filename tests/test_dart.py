"""Tests of DART variable selection (Linero 2018): `bartz.mcmcstep.Dart`.

The central test is a prior test, like the one of `test_mcmcstep`: without
data the sampler must target the joint prior of ``(theta, s, trees)``,

- ``lambda = theta / (theta + rho)`` on R's grid ``k / 1001``, ``k = 1..1000``,
  with weights proportional to ``lambda^(a-1) (1 - lambda)^(b-1)``;
- ``s | theta ~ Dirichlet(theta/p, ..., theta/p)``;
- trees iid from the tree prior given ``s``: the split variable of a node is
  drawn with probability proportional to ``s`` among the predictors with a
  usable cut-point in the node.

The conjugate update ``s | trees ~ Dirichlet(theta/p + counts)`` is exact only
if every predictor is available at every node (otherwise the prior of a
choice is ``s_v / sum of the available s``, and DART without R's data
augmentation is an approximation). So the settings here make exhaustion
rare: 65,535 cut-points per predictor (the most uint16 bins hold) and at
most 3 nested splits above a node that can split. Nested splits on one
variable shrink its range like a product of uniforms, so with a
concentrated ``s`` a variable is exhausted at about 0.1% of the nodes at
depth 3. That is far below what these tests resolve; but with 10,000
cut-points (0.5%) a 50,000-chain run drifted measurably from the exact
prior after ~1,500 sweeps (KS p ~ 1e-6 for ``max s``), the approximation
at work, while with 65,535 it did not in 3,000 sweeps.

Sampling plan: many independent chains (``vmap``) start from independent
draws of the exact joint prior, so the sampler is stationary from the start
if it is right (no burn-in bias, whatever its mixing time), and each chain's
final state is one draw, iid across chains; a wrong kernel drifts away from
the prior as the run goes on. The statistics (lambda, the log odds of
``max_v s_v`` and of ``s_0``, number of leaves, splits on predictor 0, splits
on the predictor with the largest ``s``) are compared with an independent
sample of the exact prior by chi-square and Kolmogorov-Smirnov two-sample
tests. `test_dart_prior_test_has_power` shows that a sampler with a wrong
Dirichlet update, or one proposing split variables not as the prior does,
fails (p < 1e-10); `test_dart_prior_from_default_start` starts instead from
the default initial state (stumps, theta = 1, uniform s) after a burn-in.
"""

import jax
import numpy as np
import pytest
from jax import lax, random
from jax import numpy as jnp
from scipy import special, stats

from bartz import gbart
from bartz.forest import grove
from bartz.run import loop as mcmcloop
from bartz.sampler import conditionals
from bartz.sampler import step as mcmcstep

P_MIN = 1e-4  # each statistical test must have a p-value above this

# ---------------------------------------------------------------- settings

P = 5  # predictors
MAX_SPLIT = 65_535  # cut-points per predictor (the most uint16 bins hold)
DEPTH = 5  # levels of the heap arrays: at most 4 splits along a path
BASE, POWER = 0.95, 1.0  # bushier than R's default: more splits per chain
NUM_TREES = 5
NUM_CHAINS = 2000
A, B = 0.5, 1.0  # R's defaults
RHO = float(P)  # R's default: the number of predictors
GRID = 1000  # R's grid of lambda: k / 1001, k = 1..1000
SWEEPS_PER_CALL = 25
REF_CHAINS = 20_000


# ---------------------------------------------------------------- exact prior


def lambda_grid_prior():
    """R's discrete prior of ``lambda = theta / (theta + rho)``: grid and weights."""
    lam = np.arange(1, GRID + 1) / (GRID + 1)
    weights = lam ** (A - 1) * (1 - lam) ** (B - 1)
    return lam, weights / weights.sum()


def sample_dart_prior(rng, num_chains, theta=None):
    """Exact sampler of the joint DART prior of ``(theta, log s, trees)``.

    Returns ``theta`` ``(C,)``, ``log_s`` ``(C, p)`` and the heap arrays
    ``var``, ``split`` ``(C, m, H/2)`` of the ``m`` trees of each chain. A
    given `theta` is fixed instead of drawn.
    """
    if theta is None:
        lam, weights = lambda_grid_prior()
        lam = lam[rng.choice(GRID, size=num_chains, p=weights)]
        theta = lam * RHO / (1 - lam)
    else:
        theta = np.full(num_chains, float(theta))
    # log Gamma(alpha) draws that do not underflow for tiny alpha:
    # Gamma(alpha) = Gamma(alpha + 1) * U^(1/alpha)
    alpha = np.broadcast_to(theta[:, None] / P, (num_chains, P))
    log_gamma = np.log(rng.gamma(alpha + 1)) + np.log1p(-rng.random(alpha.shape)) / alpha
    log_s = log_gamma - np.logaddexp.reduce(log_gamma, axis=1, keepdims=True)

    half = 2 ** (DEPTH - 1)
    shape = (num_chains, NUM_TREES)
    var = np.zeros((*shape, half), np.int64)
    split = np.zeros((*shape, half), np.int64)
    variables = np.arange(P)
    for node in range(1, half):
        depth = node.bit_length() - 1
        exists = np.ones(shape, bool) if node == 1 else split[..., node >> 1] > 0
        # usable range lo + 1 .. hi of every variable, from the ancestors' splits
        lo = np.zeros((*shape, P), np.int64)
        hi = np.full((*shape, P), MAX_SPLIT, np.int64)
        for level in range(depth):
            anc = node >> (depth - level)
            goes_right = (node >> (depth - level - 1)) & 1
            on = variables == var[..., anc, None]
            cut = split[..., anc, None]
            if goes_right:
                lo = np.where(on, np.maximum(lo, cut), lo)
            else:
                hi = np.where(on, np.minimum(hi, cut - 1), hi)
        usable = hi > lo
        p_internal = BASE / (1 + depth) ** POWER
        internal = exists & usable.any(axis=-1) & (rng.random(shape) < p_internal)
        # Gumbel-max: a variable with probability proportional to s among the usable ones
        v = np.argmax(np.where(usable, log_s[:, None, :] + rng.gumbel(size=(*shape, P)), -np.inf), axis=-1)
        lo_v = np.take_along_axis(lo, v[..., None], -1)[..., 0]
        hi_v = np.take_along_axis(hi, v[..., None], -1)[..., 0]
        s = lo_v + 1 + np.floor(rng.random(shape) * (hi_v - lo_v)).astype(np.int64)
        var[..., node] = np.where(internal, v, 0)
        split[..., node] = np.where(internal, s, 0)
    return theta, log_s, var, split


def log_odds(log_s, v):
    """``log(s_v / (1 - s_v))`` of predictor ``v[c]`` in each chain ``c``."""
    rows = np.arange(log_s.shape[0])
    others = log_s.copy()
    others[rows, v] = -np.inf
    return log_s[rows, v] - np.logaddexp.reduce(others, axis=1)


def dart_stats(theta, log_s, var, split):
    """Per-chain statistics, iid across chains."""
    theta = np.asarray(theta, np.float64)
    log_s = np.asarray(log_s, np.float64)
    internal = np.asarray(split) != 0
    var = np.asarray(var)
    top = np.argmax(log_s, axis=1)
    return {
        # index k of lambda = k / 1001 on the grid
        'lambda_k': np.rint(theta / (theta + RHO) * (GRID + 1)).astype(np.int64),
        # log odds rather than log s: s_v close to 1 is rounded in float32,
        # but log(1 - s_v), the log of the sum of the others, is not
        'logit_s_max': log_odds(log_s, top),
        'logit_s0': log_odds(log_s, np.zeros_like(top)),
        'num_leaves': internal.sum(axis=(1, 2)) + NUM_TREES,
        'varcount0': np.sum(internal & (var == 0), axis=(1, 2)),
        'varcount_top': np.sum(internal & (var == top[:, None, None]), axis=(1, 2)),
    }


def chi2_two_sample(a, b, min_expected=5.0):
    """p-value of the chi-square test that two iid integer samples have the same law.

    Categories are merged from the top down until each has at least
    `min_expected` expected counts in both samples.
    """
    values = np.unique(np.concatenate([a, b]))
    frac = len(a) / (len(a) + len(b))
    table, acc = [], np.zeros(2)
    for v in values[::-1]:
        acc += [np.sum(a == v), np.sum(b == v)]
        total = acc.sum()
        if min(frac, 1 - frac) * total >= min_expected:
            table.append(acc)
            acc = np.zeros(2)
    if acc.sum() and table:
        table[-1] = table[-1] + acc
    if len(table) < 2:
        return 1.0
    return stats.chi2_contingency(np.array(table).T, correction=False).pvalue


def binned(x, edges):
    return np.searchsorted(edges, x, side='right')


def stat_pvalues(mcmc, ref):
    """Two-sample p-values of each statistic."""
    out = {}
    for name in mcmc:
        if name == 'lambda_k':
            # 1000 grid points: bin at the reference's deciles
            edges = np.unique(np.quantile(ref[name], np.linspace(0.1, 0.9, 9)))
            out[name] = chi2_two_sample(binned(mcmc[name], edges), binned(ref[name], edges))
        elif name.startswith('logit'):
            out[name] = stats.ks_2samp(mcmc[name], ref[name]).pvalue
        else:
            out[name] = chi2_two_sample(mcmc[name], ref[name])
    return out


# ---------------------------------------------------------------- the sampler


def data_free_state(dart, p=P, num_trees=NUM_TREES):
    """Default initial state of one chain without data: stumps, uniform s,
    DART options `dart`."""
    return mcmcstep.init(
        X=jnp.zeros((p, 0), jnp.uint16),
        max_split=jnp.full(p, MAX_SPLIT),
        y=jnp.zeros(0, jnp.float32),
        num_trees=num_trees,
        max_depth=DEPTH,
        leaf_prior_var=1.0,
        sigma2_alpha=1.0,
        sigma2_beta=1.0,
        base=BASE,
        power=POWER,
        min_points_per_leaf=0,
        dart=dart,
    )


def initial_states(dart, num_chains=NUM_CHAINS):
    """Default initial state (stumps, uniform s, theta from `dart`) of many chains, no data."""
    return mcmcstep.init_chains(data_free_state(dart), num_chains)


def prior_states(rng):
    """Chains starting from independent draws of the exact DART prior."""
    states = initial_states({'theta': 0, 'a': A, 'b': B, 'on': True})
    theta, log_s, var, split = sample_dart_prior(rng, NUM_CHAINS)
    forest = states.forest
    forest = forest._replace(
        var_tree=jnp.asarray(var, forest.var_tree.dtype),
        split_tree=jnp.asarray(split, forest.split_tree.dtype),
    )
    return states._replace(
        forest=forest,
        log_s=jnp.asarray(log_s, jnp.float32),
        dart=states.dart._replace(theta=jnp.asarray(theta, jnp.float32)),
    )


def make_runner():
    """A fresh jitted function: `SWEEPS_PER_CALL` sweeps of independent chains."""

    @jax.jit
    def run(key, states):
        num_chains = states.sigma2.shape[0]
        axes = mcmcstep.chain_axes(states)
        step = jax.vmap(mcmcstep.step, in_axes=(0, axes), out_axes=(axes, 0))

        # scan over split keys (rather than fori_loop with fold_in): the key
        # reuse checker of jax 0.10.2 flags the latter (false positive)
        def body(states, key):
            states, _ = step(random.split(key, num_chains), states)
            return states, None

        return lax.scan(body, states, random.split(key, SWEEPS_PER_CALL))[0]

    return run


run_chains = make_runner()


def run(runner, key, states, sweeps):
    for k in random.split(key, sweeps // SWEEPS_PER_CALL):
        states = runner(k, states)
    return jax.device_get(states)


def final_stats(states):
    return dart_stats(states.dart.theta, states.log_s, states.forest.var_tree, states.forest.split_tree)


def reference_stats(seed):
    return dart_stats(*sample_dart_prior(np.random.default_rng([seed, 1]), REF_CHAINS))


# ---------------------------------------------------------------- prior tests


def test_reference_sampler_is_consistent():
    """The exact sampler: s sums to 1, lambda follows the grid prior, splits
    stay in their ranges (so the prior states are valid sampler states)."""
    rng = np.random.default_rng(0)
    theta, log_s, var, split = sample_dart_prior(rng, 5000)
    assert np.allclose(np.exp(log_s).sum(axis=1), 1)
    lam, weights = lambda_grid_prior()
    k = np.rint(theta / (theta + RHO) * (GRID + 1)).astype(np.int64) - 1
    assert np.allclose(lam[k] * RHO / (1 - lam[k]), theta)
    # a few grid points carry most of the mass near 0 (a < 1): check them
    counts = np.bincount(np.minimum(k, 10), minlength=11)
    expected = np.append(weights[:10], weights[10:].sum()) * len(k)
    assert stats.chisquare(counts, expected).pvalue > P_MIN
    assert np.all(var < P)
    for c, t in np.ndindex(100, NUM_TREES):
        check_split_ranges(var[c, t], split[c, t])


def check_split_ranges(var, split):
    """Every internal node of one tree splits inside the range its ancestors leave."""
    half = split.size

    def visit(node, lo, hi):
        if node >= half or split[node] == 0:
            for child in (2 * node, 2 * node + 1):  # no internal node below a leaf
                assert child >= half or split[child] == 0
            return
        v, s = var[node], split[node]
        assert lo[v] < s <= hi[v], (node, v, s, lo[v], hi[v])
        visit(2 * node, lo, {**hi, v: s - 1})
        visit(2 * node + 1, {**lo, v: s}, hi)

    visit(1, dict.fromkeys(range(P), 0), dict.fromkeys(range(P), MAX_SPLIT))


# the perturbed samplers of the power test fail after 25 sweeps already
PRIOR_SWEEPS = 100


@pytest.mark.slow  # statistical; test_dart_selects_relevant_predictors_quick stays in the default run
@pytest.mark.parametrize('seed', [0, 1, 2])
def test_dart_prior(seed):
    """Without data, the sampler leaves the joint prior of (theta, s, trees) invariant."""
    states = prior_states(np.random.default_rng([seed, 0]))
    states = run(run_chains, random.key(seed), states, PRIOR_SWEEPS)
    assert np.all(np.isfinite(states.log_s))
    assert np.allclose(np.exp(np.asarray(states.log_s, np.float64)).sum(axis=1), 1, atol=1e-5)
    pvalues = stat_pvalues(final_stats(states), reference_stats(seed))
    bad = {k: v for k, v in pvalues.items() if v < P_MIN}
    assert not bad, f'seed {seed}: {pvalues}'


@pytest.mark.slow
def test_dart_prior_from_default_start():
    """From the default initial state (stumps, theta = 1, uniform s), after a
    burn-in the chains reach the joint prior. Starting there, the p-values
    stop drifting after ~350 sweeps (s and theta are sticky when theta is
    small: the few splits then keep s concentrated); the burn-in is 2.5
    times that."""
    states = initial_states({'theta': 0, 'a': A, 'b': B, 'on': True})
    states = run(run_chains, random.key(10), states, 900)
    pvalues = stat_pvalues(final_stats(states), reference_stats(10))
    bad = {k: v for k, v in pvalues.items() if v < P_MIN}
    assert not bad, pvalues


def _doubled_counts(original):
    """`grove.var_count_scatter` counting every split twice."""
    return lambda *args: 2 * original(*args)


def _tempered_proposal(original):
    """`mcmcstep.propose_tree` choosing variables with probability ~ s^0.8 (the
    MH ratio then misses the ratio of prior to proposal probabilities)."""
    return lambda key, var, split, max_split, log_s, *rest, **kwargs: original(
        key, var, split, max_split, 0.8 * log_s, *rest, **kwargs
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ('module', 'name', 'perturbation'),
    [(grove, 'var_count_scatter', _doubled_counts), (mcmcstep, 'propose_tree', _tempered_proposal)],
    ids=['dirichlet_update', 'variable_proposal'],
)
def test_dart_prior_test_has_power(monkeypatch, module, name, perturbation):
    """A sampler with a wrong s update, or proposing variables not as the
    prior does, fails the prior test."""
    monkeypatch.setattr(module, name, perturbation(getattr(module, name)))
    runner = make_runner()  # a fresh jit, so it traces the perturbed function
    states = run(runner, random.key(0), prior_states(np.random.default_rng([0, 0])), PRIOR_SWEEPS)
    pvalues = stat_pvalues(final_stats(states), reference_stats(0))
    assert min(pvalues.values()) < 1e-10, pvalues


# ---------------------------------------------------------------- switches


def test_fixed_theta_stays_fixed():
    """With theta > 0 given, theta never changes, s does (and follows
    Dirichlet(theta/p) marginally: here from the exact prior given theta)."""
    theta = 0.7
    states = initial_states({'theta': theta, 'a': A, 'b': B, 'on': True})
    assert np.all(np.asarray(states.dart.theta_fixed))
    rng = np.random.default_rng(3)
    _, log_s, var, split = sample_dart_prior(rng, NUM_CHAINS, theta=theta)
    states = states._replace(
        log_s=jnp.asarray(log_s, jnp.float32),
        forest=states.forest._replace(
            var_tree=jnp.asarray(var, states.forest.var_tree.dtype),
            split_tree=jnp.asarray(split, states.forest.split_tree.dtype),
        ),
    )
    states = run(run_chains, random.key(3), states, 2 * SWEEPS_PER_CALL)
    assert np.all(np.asarray(states.dart.theta) == np.float32(theta))
    mcmc = final_stats(states)
    ref = dart_stats(*sample_dart_prior(np.random.default_rng(4), REF_CHAINS, theta=theta))
    pvalues = stat_pvalues(mcmc, ref)
    assert np.all(mcmc['lambda_k'] == ref['lambda_k'][0])
    bad = {k: v for k, v in pvalues.items() if v < P_MIN}
    assert not bad, pvalues


def test_dart_off_leaves_s_uniform():
    """Before DART is switched on, s stays uniform and theta at its start (1),
    while the trees grow with uniform variable choice."""
    states = initial_states({'theta': 0, 'a': A, 'b': B, 'on': False})
    states = run(run_chains, random.key(5), states, SWEEPS_PER_CALL)
    assert np.all(np.asarray(states.log_s) == 0)
    assert np.all(np.asarray(states.dart.theta) == 1)
    varcount = np.asarray(grove.var_count(states.forest.var_tree, states.forest.split_tree, P))  # (chains, p)
    assert varcount.sum() > NUM_CHAINS  # the trees did grow
    # uniform choice: each predictor gets about a fifth of the splits
    assert stats.chisquare(varcount.sum(axis=0)).pvalue > P_MIN


@pytest.fixture(scope='module')
def one_chain():
    """A single data-free chain with DART, for `run_mcmc`."""
    state = data_free_state({'theta': 0, 'a': A, 'b': B})
    assert not bool(state.dart.on)  # off until run_mcmc switches it on
    return state


def _run_mcmc(state, **kwargs):
    # chunks of one iteration: every call below shares one compiled chunk
    kwargs = {'printevery': None, 'chunk_size': 1, 'save_train': False, **kwargs}
    copy = jax.tree.map(jnp.copy, state)  # run_mcmc donates its state
    return mcmcloop.run_mcmc(random.key(7), copy, **kwargs)


def test_run_mcmc_switches_dart_on_at_dart_start(one_chain):
    """Iteration i (from 0) updates s iff i >= dart_start."""
    _, trace, _ = _run_mcmc(one_chain, n_burn=0, n_save=12, dart_start=5)
    log_s = np.asarray(trace.log_s)  # after iterations 0..11
    assert np.all(log_s[:5] == 0)
    assert np.all(np.any(log_s[5:] != 0, axis=1))
    assert np.allclose(np.exp(log_s[5:].astype(np.float64)).sum(axis=1), 1, atol=1e-5)


@pytest.fixture
def iterations():
    """Record the state after each call of `run_mcmc`'s compiled chunk (one
    iteration each with ``chunk_size=1``)."""
    record = []

    def spy(runner):
        def wrapped(key, state, start, *rest):
            out = runner(key, state, start, *rest)
            new_state = out[0]  # read now: the next call donates it
            record.append({
                'iteration': int(start),
                'dart_start': int(rest[-1]),
                'on': bool(new_state.dart.on),
                'log_s': np.asarray(new_state.log_s),
                'theta': float(new_state.dart.theta),
            })
            return out

        return wrapped

    with mcmcloop.wrap_chunk_runners(spy):
        yield record


def test_run_mcmc_dart_starts_halfway_through_burn_in(one_chain, iterations):
    """By default DART switches on after half the burn-in: with 10 burn-in
    iterations, s is first drawn at iteration 5 (from 0), as R."""
    _run_mcmc(one_chain, n_burn=10, n_save=2)
    assert [r['iteration'] for r in iterations] == list(range(12))
    assert {r['dart_start'] for r in iterations} == {5}
    for r in iterations:
        assert r['on'] == (r['iteration'] >= 5)
        if r['iteration'] < 5:
            assert np.all(r['log_s'] == 0) and r['theta'] == 1
        else:
            assert np.any(r['log_s'] != 0)
            assert np.isclose(np.exp(r['log_s'].astype(np.float64)).sum(), 1, atol=1e-5)


# ---------------------------------------------------------------- variable selection


def friedman(x):
    return 10 * np.sin(np.pi * x[:, 0] * x[:, 1]) + 20 * (x[:, 2] - 0.5) ** 2 + 10 * x[:, 3] + 5 * x[:, 4]


def selection_fits(seed, n, p, ntree, nskip, ndpost):
    """gbart with and without DART on y = Friedman #1 of the first 5 of p predictors."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(n, p))
    y = friedman(x) + rng.normal(size=n)
    kw = {'ntree': ntree, 'nskip': nskip, 'ndpost': ndpost, 'printevery': None, 'seed': seed}
    return gbart(x, y, sparse=True, **kw), gbart(x, y, **kw)


def check_selection(sparse, plain, p, each_min, total_min, share_gain, ranked_first=5):
    varprob = np.asarray(sparse.varprob_mean)
    assert np.all(varprob[:5] > each_min), varprob[:5]
    assert varprob[:5].sum() > total_min, varprob[:5]
    assert np.allclose(np.asarray(sparse.varprob).sum(axis=1), 1, atol=1e-4)
    # without DART, split probabilities are uniform and splits spread out
    assert np.all(np.asarray(plain.varprob) == 1 / p)
    share = {
        name: np.asarray(fit.varcount_mean)[:5].sum() / np.asarray(fit.varcount_mean).sum()
        for name, fit in (('sparse', sparse), ('plain', plain))
    }
    if share_gain is not None:
        assert share['sparse'] > share['plain'] + share_gain, share
    # the helper ranks the relevant predictors first (the `ranked_first`
    # strongest among the top 5: x4, the weakest, can lose its place to a
    # noise predictor in short runs)
    table = sparse.variable_importance()
    assert set(table.index[:5]) >= {f'x{j}' for j in range(ranked_first)}, table.head(8)
    assert np.allclose(table.loc['x0', 'varprob_mean'], varprob[0])
    return share['sparse'] - share['plain']


def test_dart_selects_relevant_predictors_quick():
    """5 relevant predictors of 20 (n = 300, 20 trees): DART puts most of the
    split probability on them. Over seeds 0-7: share of the splits on them
    0.89-0.98 with DART, 0.71-0.83 without; the gain is 0.09-0.22 per seed
    (sd about 0.04), so its mean over 3 seeds is checked, and so are the
    means of the relevant predictors' total split probability (0.75-0.9 per
    seed) and of their number among the top 5 of `variable_importance`
    (x4, the weakest, can lose its place in these short runs)."""
    gains, totals, ranked = [], [], []
    for seed in range(3):
        sparse, plain = selection_fits(seed, n=300, p=20, ntree=20, nskip=200, ndpost=100)
        gains.append(check_selection(sparse, plain, 20, each_min=1 / 20, total_min=0.6, share_gain=None, ranked_first=3))
        totals.append(np.asarray(sparse.varprob_mean)[:5].sum())
        ranked.append(len(set(sparse.variable_importance().index[:5]) & {f'x{j}' for j in range(5)}))
    assert np.mean(gains) > 0.1, gains
    assert np.mean(totals) > 0.75, totals
    assert np.mean(ranked) >= 4, ranked  # at random: 1.25


@pytest.mark.slow
@pytest.mark.parametrize('seed', [0, 1, 2])
def test_dart_selects_relevant_predictors(seed):
    """5 relevant predictors of 100, n = 1000, 50 trees. Over seeds 0-2: each
    relevant varprob 0.07-0.32 (uniform: 0.01), total 0.93-0.98; share of the
    splits on them 0.95-0.99 with DART, 0.57-0.59 without."""
    sparse, plain = selection_fits(seed, n=1000, p=100, ntree=50, nskip=300, ndpost=200)
    check_selection(sparse, plain, 100, each_min=5 / 100, total_min=0.8, share_gain=0.25)


@pytest.mark.parametrize('root_var', [None, 0, 1])
def test_copies_of_a_column_are_one_predictor(root_var):
    """The two copies of a column with missing values (``group``) are one
    entry of the Dirichlet: their split counts are summed, each copy gets
    half the predictor's probability, and the predictor's prior weight is
    that of any other predictor. Model columns 0 and 1 are the copies,
    column 2 another predictor; the trees are stumps (no split: ``s`` over
    the two predictors ~ Dirichlet(1/2, 1/2), so the copies' predictor has
    mean 1/2, where two entries would give 2/3) or all split at the root
    on one copy (4 splits: Dirichlet(4.5, 1/2), mean 0.9, where two entries
    would give 14/15). Tolerance: 5 Monte Carlo standard errors of the
    mean of 4,000 independent draws (the Beta's exact variance)."""
    trees = 4
    state = data_free_state({'theta': 1.0, 'on': True, 'group': [0, 0, 1]}, p=3, num_trees=trees)
    assert float(state.dart.rho) == 2  # predictors, not model columns
    if root_var is not None:
        forest = state.forest
        state = state._replace(
            forest=forest._replace(
                var_tree=forest.var_tree.at[:, 1].set(root_var),
                split_tree=forest.split_tree.at[:, 1].set(1),
            )
        )
    keys = jax.random.split(jax.random.key(2026), 4000)
    log_s = jax.jit(jax.vmap(lambda k: mcmcstep.draw_dart(k, state).log_s))(keys)  # noqa: SLF001
    s = np.exp(np.asarray(log_s, np.float64))
    np.testing.assert_allclose(s.sum(axis=1), 1, rtol=1e-5)
    np.testing.assert_allclose(s[:, 0], s[:, 1], rtol=1e-5)  # half each
    a, b = (0.5, 0.5) if root_var is None else (0.5 + trees, 0.5)
    mean, var = a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1))
    share = s[:, 0] + s[:, 1]
    assert abs(share.mean() - mean) < 5 * np.sqrt(var / share.size)


def test_dart_group_validated():
    with pytest.raises(ValueError, match='dart group must be 3 indices'):
        data_free_state({'group': [0, 3, 1]}, p=3, num_trees=2)


# ---------------------------------------------------------------- data augmentation
#
# With binary predictors (one cut-point each) a split exhausts its variable
# in both children, so below the root some predictors are unusable at most
# split nodes: there ``Dirichlet(theta/p + counts)`` is not the conditional
# of ``s``, and only Linero's augmentation (``augment``) keeps the prior.
# Chains start from the exact prior given theta; each chain's final ``s``
# is then one draw of the sampler's marginal, iid across chains, to be
# compared with ``Dirichlet(theta/p)``. A small theta concentrates ``s``,
# so that nodes where only predictors of tiny ``s`` are usable (huge latent
# counts) are common.

AUG_P = 3
AUG_DEPTH = 4  # at most 3 nested splits: the 3 predictors can all be used on a path
AUG_THETA = 0.5
AUG_CHAINS = 1000


def sample_binary_prior(rng, num_chains, theta):
    """Exact draws of ``(log s, trees)`` given theta with `AUG_P` binary
    predictors: a predictor is usable at a node iff no ancestor splits on it."""
    alpha = np.full((num_chains, AUG_P), theta / AUG_P)
    # Gamma(alpha) = Gamma(alpha + 1) * U^(1/alpha), in logs (no underflow)
    log_gamma = np.log(rng.gamma(alpha + 1)) + np.log1p(-rng.random(alpha.shape)) / alpha
    log_s = log_gamma - np.logaddexp.reduce(log_gamma, axis=1, keepdims=True)
    shape = (num_chains, NUM_TREES)
    half = 2 ** (AUG_DEPTH - 1)
    var = np.zeros((*shape, half), np.int64)
    split = np.zeros_like(var)
    for node in range(1, half):
        depth = node.bit_length() - 1
        exists = np.ones(shape, bool) if node == 1 else split[..., node >> 1] > 0
        used = np.zeros((*shape, AUG_P), bool)
        for level in range(depth):
            used |= np.arange(AUG_P) == var[..., node >> (depth - level), None]
        internal = exists & ~used.all(axis=-1) & (rng.random(shape) < BASE / (1 + depth) ** POWER)
        v = np.argmax(np.where(used, -np.inf, log_s[:, None, :] + rng.gumbel(size=(*shape, AUG_P))), axis=-1)
        var[..., node] = np.where(internal, v, 0)
        split[..., node] = internal
    return log_s, var, split


def binary_prior_states(seed, augment):
    state = mcmcstep.init(
        X=jnp.zeros((AUG_P, 0), jnp.uint8),
        max_split=jnp.ones(AUG_P, jnp.int32),
        y=jnp.zeros(0, jnp.float32),
        num_trees=NUM_TREES,
        max_depth=AUG_DEPTH,
        leaf_prior_var=1.0,
        sigma2_alpha=1.0,
        sigma2_beta=1.0,
        base=BASE,
        power=POWER,
        min_points_per_leaf=0,
        dart={'theta': AUG_THETA, 'on': True, 'augment': augment},
    )
    states = mcmcstep.init_chains(state, AUG_CHAINS)
    log_s, var, split = sample_binary_prior(np.random.default_rng([seed, 2]), AUG_CHAINS, AUG_THETA)
    forest = states.forest
    forest = forest._replace(
        var_tree=jnp.asarray(var, forest.var_tree.dtype), split_tree=jnp.asarray(split, forest.split_tree.dtype)
    )
    return states._replace(forest=forest, log_s=jnp.asarray(log_s, jnp.float32))


def dirichlet_z_scores(log_s):
    """z-scores of the sample mean and variance of each ``s_j`` and the mean
    of each ``log s_j`` against ``Dirichlet(theta/p)``, from iid draws: the
    standard errors are the samples' own (sd / sqrt(n); for the variance,
    that of the squared deviations)."""
    log_s = np.asarray(log_s, np.float64)
    s = np.exp(log_s)
    n = s.shape[0]
    a, total = AUG_THETA / AUG_P, AUG_THETA
    mean, var = a / total, a * (total - a) / (total**2 * (total + 1))
    mean_log = special.digamma(a) - special.digamma(total)
    sq = (s - mean) ** 2
    return {
        'mean_s': (s.mean(0) - mean) / (s.std(0) / np.sqrt(n)),
        'var_s': (sq.mean(0) - var) / (sq.std(0) / np.sqrt(n)),
        'mean_log_s': (log_s.mean(0) - mean_log) / (log_s.std(0) / np.sqrt(n)),
    }


def random_trees(rng, max_split, depth, num_trees, p_internal=0.8):
    """Heap arrays of random valid trees: each node splits with probability
    `p_internal` on a uniform usable variable, at a uniform usable index."""
    p, half = len(max_split), 2 ** (depth - 1)
    var = np.zeros((num_trees, half), np.int64)
    split = np.zeros_like(var)
    for t in range(num_trees):
        ranges = {1: (np.zeros(p, np.int64), np.array(max_split, np.int64))}
        for node in range(1, half):
            if node not in ranges:
                continue
            lo, hi = ranges[node]
            good = np.flatnonzero(hi > lo)
            if good.size == 0 or rng.random() > p_internal:
                continue
            v = rng.choice(good)
            c = rng.integers(lo[v] + 1, hi[v] + 1)
            var[t, node], split[t, node] = v, c
            ranges[2 * node] = (lo, np.where(np.arange(p) == v, c - 1, hi))
            ranges[2 * node + 1] = (np.where(np.arange(p) == v, c, lo), hi)
    return var, split


def direct_rejection_rates(exponential, var, split, max_split, log_s):
    """``log(s_j Lambda_j)`` the plain way, in float64: at each split node
    the usable range of every column from the ancestors' rules, ``P_good``
    summed over the usable columns, ``lambda = exponential / P_good`` added
    to each column unusable there."""
    p, half = len(max_split), var.shape[1]
    usable = np.asarray(max_split) > 0
    log_s = np.where(usable, np.asarray(log_s, np.float64), -np.inf)
    log_s = log_s - np.logaddexp.reduce(log_s)
    terms = [[] for _ in range(p)]
    for t, node in np.ndindex(var.shape[0], half):
        if node == 0 or split[t, node] == 0:
            continue
        lo, hi = np.zeros(p, np.int64), np.array(max_split, np.int64)
        depth = node.bit_length() - 1
        for level in range(depth):
            anc = node >> (depth - level)
            v, c = var[t, anc], split[t, anc]
            if (node >> (depth - level - 1)) & 1:
                lo[v] = max(lo[v], c)
            else:
                hi[v] = min(hi[v], c - 1)
        good = hi > lo
        log_lambda = np.log(exponential[t, node]) - np.logaddexp.reduce(np.where(good, log_s, -np.inf))
        for j in np.flatnonzero(~good & usable):
            terms[j].append(log_lambda)
    return np.array([log_s[j] + np.logaddexp.reduce(terms[j]) if terms[j] else -np.inf for j in range(p)])


@pytest.mark.parametrize('scale', [1.0, 30.0, 300.0])
def test_rejection_rates_match_the_direct_sum(scale):
    """`conditionals.dart_rejection_rates` (float32, per node and level)
    equals the plain float64 sum over nodes and columns, also where ``s``
    is so concentrated (log s spread over hundreds) that ``P_good`` is far
    below float32's 1 - P_bad resolution; a column without cut-points gets
    none."""
    rng = np.random.default_rng(int(scale))
    max_split = np.array([1, 1, 2, 3, 0, 1, 5, 1])
    var, split = random_trees(rng, max_split, depth=5, num_trees=30)
    log_s = np.where(max_split > 0, scale * rng.normal(size=max_split.size), 0).astype(np.float32)
    exponential = rng.exponential(size=var.shape).astype(np.float32)
    rates = jax.jit(conditionals.dart_rejection_rates)(
        exponential, jnp.asarray(var, jnp.uint8), jnp.asarray(split, jnp.uint8), jnp.asarray(max_split, jnp.int32), log_s
    )
    expected = direct_rejection_rates(exponential, var, split, max_split, log_s)
    assert np.isneginf(rates[4]) and np.isneginf(expected[4])
    assert np.sum(np.isfinite(expected)) >= 6  # most columns are exhausted somewhere
    np.testing.assert_allclose(np.asarray(rates, np.float64), expected, rtol=2e-6)


@pytest.fixture(scope='module')
def binary_runner():
    return make_runner()


@pytest.mark.parametrize('seed', [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)])
def test_augmented_dart_keeps_the_prior(binary_runner, seed):
    """With augmentation the marginal of ``s`` stays Dirichlet(theta/p)
    after 25 sweeps from the exact prior (9 z-scores, each within 4.5)."""
    states = run(binary_runner, random.key(seed), binary_prior_states(seed, augment=True), SWEEPS_PER_CALL)
    assert np.all(np.isfinite(states.log_s))
    z = dirichlet_z_scores(states.log_s)
    assert all(np.all(np.abs(v) < 4.5) for v in z.values()), z


@pytest.mark.slow
def test_dart_without_augmentation_fails_the_binary_prior_test(binary_runner):
    """The power of `test_augmented_dart_keeps_the_prior`: the plain update
    ``Dirichlet(theta/p + counts)`` on the same chains shrinks the spread
    of ``s`` (variance z-scores far below -10)."""
    states = run(binary_runner, random.key(0), binary_prior_states(0, augment=False), SWEEPS_PER_CALL)
    z = dirichlet_z_scores(states.log_s)
    assert np.all(z['var_s'] < -10), z


def test_augmented_dart_selects_relevant_predictors():
    """R's demo sparse.wbart, small: Friedman's function of 5 of 100
    predictors, n = 200. With ``sparse=True, augment=True`` the 5 relevant
    predictors have the 5 largest ``varprob_mean`` (over seeds 0-2 the
    5th relevant is 0.07-0.11, the largest irrelevant 0.01-0.04)."""
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(200, 100))
    y = friedman(x) + rng.normal(size=200)
    fit = gbart(x, y, sparse=True, augment=True, ntree=20, nskip=300, ndpost=200, printevery=None, seed=0)
    varprob = np.asarray(fit.varprob_mean)
    assert set(np.argsort(varprob)[-5:]) == set(range(5)), varprob[:8]
    assert np.allclose(np.asarray(fit.varprob).sum(axis=1), 1, atol=1e-4)


def test_augment_without_sparse_changes_nothing():
    """As R, ``augment`` has no effect without ``sparse``: the same draws."""
    rng = np.random.default_rng(1)
    x = rng.uniform(size=(30, 3))
    y = x[:, 0] + rng.normal(size=30)
    kw = {'ntree': 5, 'nskip': 5, 'ndpost': 10, 'printevery': None, 'seed': 1}
    plain, augmented = gbart(x, y, **kw), gbart(x, y, augment=True, **kw)
    np.testing.assert_array_equal(plain.yhat_train, augmented.yhat_train)
    np.testing.assert_array_equal(plain.sigma, augmented.sigma)
    np.testing.assert_array_equal(plain.varcount, augmented.varcount)
