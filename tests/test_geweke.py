"""Geweke's "getting it right" test of the whole sampler (Geweke 2004).

The joint law of the parameters ``theta`` (trees, leaves, sigma^2) and the
data ``y`` can be simulated in two ways:

- marginal-conditional: ``theta`` from the prior (sigma^2 from its inverse
  gamma, the trees from the exact forward sampler of the tree prior
  `test_mcmcstep.sample_prior_heaps`, the leaves from their normal prior),
  then ``y | theta``;
- successive-conditional: alternate one full `bartz.mcmcstep.step` (a draw
  of ``theta | y`` if the sampler is right) and a fresh ``y | theta``.

If the step leaves the posterior invariant, the second chain leaves the
joint law invariant, and started from a marginal-conditional draw it stays
there; any error in any part of the sweep (the tree moves' MH ratios with
their likelihood terms, the leaf and sigma^2 draws, the probit latents, the
weights) makes it drift away. Unlike the prior test (no data) and the exact
one-tree posterior test, this checks all the parts at once, with several
trees and sigma^2 free.

Sampling plan: many independent chains in parallel (``vmap``), each
started from its own marginal-conditional draw and run for
`GEWEKE_STEPS` successive-conditional steps; only the final state of each
chain is used, so the samples are iid across chains, and are compared with
an independent marginal-conditional sample by two-sample tests (KS for
continuous functions, chi-square for discrete ones) of several test
functions of ``(theta, y)``. Multiplicity: with ``k`` functions, each
p-value must exceed ``P_MIN / k`` (Bonferroni), so a correct sampler fails a
case with probability below ``P_MIN``, as a single test of the other
modules. The power checks (`test_geweke_has_power`) show that a sampler
with a 10% error in the leaf prior variance, in sigma^2's prior shape, or
in the MH ratio of the grow move fails by far (p-values below 1e-16).

For probit outcomes, ``y | theta`` is ``y = 1(z > threshold)`` with ``z ~
N(f, 1)``; ``z`` and ``y`` are regenerated together, so the latent in the
state has its exact conditional law given ``y`` and the trees.

Not covered: DART. Its update ``s ~ Dirichlet(theta/p + counts)`` (as R's
BART and Linero 2018) is the exact conditional only when every predictor is
usable at every internal node; a predictor with no cut-point left in a node
is not eligible there, which the Dirichlet update ignores, so a Geweke test
would measure that approximation (frequent with few cut-points, as here)
rather than find a bug. The tree moves with DART probabilities are checked
by the prior test (configuration A3 of `test_mcmcstep`).

References
----------
Geweke, J. (2004), "Getting it right: joint distribution tests of posterior
simulators", J. Am. Stat. Assoc. 99(467), 799-804.
"""

import jax
import numpy as np
import pytest
from jax import lax, random
from jax import numpy as jnp
from scipy import stats

from bartz.forest import grove
from bartz.sampler import step as mcmcstep
from bartz.sampler.moves import GROW
from test_mcmcstep import P_MIN, chi2_two_sample, sample_prior_heaps

N_POINTS = 20
MAX_SPLIT = (3, 4, 2)
NUM_TREES = 4
MAX_DEPTH = 4
BASE, POWER = 0.95, 1.0
LEAF_PRIOR_VAR = 0.5
SIGMA2_ALPHA, SIGMA2_BETA = 3.0, 2.0
PROBIT_THRESHOLD = 0.3
GEWEKE_CHAINS = 4000
GEWEKE_STEPS = 100  # successive-conditional steps per chain
MC_SAMPLES = 20_000  # marginal-conditional reference sample

# Move settings of `mcmcstep.init` the test runs with: the default moves
# (GROW, PRUNE, CHANGE, SWAP), the classical GROW/PRUNE sampler, and a
# setting where CHANGE and SWAP are most of the proposals
MOVE_SETTINGS = {
    'default-moves': {},
    'grow-prune': {'move_probs': ('grow', 'prune')},
    'change-swap': {'move_probs': {'grow': 0.15, 'prune': 0.15, 'change': 0.35, 'swap': 0.35}},
}


def design(seed=0):
    """Binned predictors ``(p, n)`` and precision weights of the test problem."""
    rng = np.random.default_rng(seed)
    X = np.stack([rng.integers(0, m + 1, size=N_POINTS) for m in MAX_SPLIT]).astype(np.uint8)
    prec_weights = rng.uniform(0.5, 2.0, size=N_POINTS).astype(np.float32)
    return X, prec_weights


def template_state(kind, init_kwargs, leaf_prior_var=LEAF_PRIOR_VAR, sigma2_alpha=SIGMA2_ALPHA):
    """A single-chain state (its trees and data are replaced per chain)."""
    X, prec_weights = design()
    binary = kind == 'probit'
    return mcmcstep.init(
        X=X,
        max_split=np.asarray(MAX_SPLIT),
        y=np.zeros(N_POINTS, bool if binary else np.float32),
        num_trees=NUM_TREES,
        max_depth=MAX_DEPTH,
        leaf_prior_var=leaf_prior_var,
        sigma2_alpha=None if binary else sigma2_alpha,
        sigma2_beta=None if binary else SIGMA2_BETA,
        base=BASE,
        power=POWER,
        prec_weights=prec_weights if kind == 'weighted' else None,
        min_points_per_leaf=0,  # else the target is the prior restricted by the data
        probit_threshold=PROBIT_THRESHOLD if binary else None,
        **init_kwargs,
    )


@jax.jit
def _leaf_indices(X, var_tree, split_tree):
    """Leaf of each point in each tree, for trees ``(..., m, H/2)``."""
    lead = var_tree.shape[:-1]
    flat = grove.traverse_forest(X, var_tree.reshape(-1, var_tree.shape[-1]), split_tree.reshape(-1, split_tree.shape[-1]))
    return flat.reshape(*lead, X.shape[1])


def forest_values(X, var, split, leaf):
    """Leaf indices ``(N, m, n)`` and sum of trees ``(N, n)`` in float64."""
    idx = np.asarray(_leaf_indices(X, var, split)).astype(np.int64)
    values = np.take_along_axis(np.asarray(leaf, np.float64), idx, axis=-1)
    return idx, values.sum(axis=1)


def draw_data(rng, kind, f, sigma2, prec_weights):
    """``y | theta`` in numpy: ``(y, z)``, with ``z`` None unless probit."""
    eps = rng.standard_normal(f.shape)
    if kind == 'probit':
        z = f + eps
        return z > PROBIT_THRESHOLD, z
    w = 1.0 if prec_weights is None else prec_weights
    return f + np.sqrt(sigma2[:, None] / w) * eps, None


def marginal_conditional(rng, kind, num):
    """``num`` iid draws of ``(theta, y)`` from the prior and the model, in numpy."""
    X, prec_weights = design()
    m, heap_size = NUM_TREES, 2**MAX_DEPTH
    var, split = sample_prior_heaps(rng, num * m, MAX_SPLIT, MAX_DEPTH, BASE, POWER)
    var = var.reshape(num, m, -1)
    split = split.reshape(num, m, -1)
    leaf_mask = np.asarray(grove.is_leaf(split))
    leaf = np.where(leaf_mask, rng.normal(scale=np.sqrt(LEAF_PRIOR_VAR), size=(num, m, heap_size)), 0.0)
    if kind == 'probit':
        sigma2 = np.ones(num)
    else:
        sigma2 = SIGMA2_BETA / rng.gamma(SIGMA2_ALPHA, size=num)
    _, f = forest_values(X, var, split, leaf)
    y, z = draw_data(rng, kind, f, sigma2, prec_weights if kind == 'weighted' else None)
    return {'var': var, 'split': split, 'leaf': leaf, 'sigma2': sigma2, 'y': y, 'z': z}


def chain_state_axes(state):
    """`vmap` axes of the Geweke chains: as `mcmcstep.chain_axes`, and ``y`` per chain."""
    return mcmcstep.chain_axes(state)._replace(y=0)


def initial_states(template, draws):
    """Chains started at the marginal-conditional `draws`, caches consistent."""
    num = draws['sigma2'].shape[0]
    states = mcmcstep.init_chains(template, num)
    forest = states.forest
    var = jnp.asarray(draws['var'], forest.var_tree.dtype)
    split = jnp.asarray(draws['split'], forest.split_tree.dtype)
    leaf_indices = _leaf_indices(template.X, var, split)
    heap_size = forest.leaf_tree.shape[-1]
    leaf_count = jnp.sum(leaf_indices[..., None] == jnp.arange(heap_size), axis=-2, dtype=jnp.int32)
    forest = forest._replace(
        var_tree=var,
        split_tree=split,
        leaf_tree=jnp.asarray(draws['leaf'], jnp.float32),
        leaf_indices=leaf_indices,
        leaf_count=leaf_count,
    )
    binary = draws['z'] is not None
    states = states._replace(
        forest=forest,
        y=jnp.asarray(draws['y'], bool if binary else jnp.float32),
        z=None if not binary else jnp.asarray(draws['z'], jnp.float32),
        sigma2=jnp.asarray(draws['sigma2'], jnp.float32),
    )
    # residuals and precision sums from the trees
    axes = chain_state_axes(states)
    return jax.jit(jax.vmap(mcmcstep.refresh, in_axes=(axes,), out_axes=axes))(states)


def _regenerate_data(key, state):
    """``y | theta`` for one chain, the residuals updated to match."""
    target = state.y if state.z is None else state.z
    f = target - state.resid
    eps = random.normal(key, f.shape)
    if state.z is not None:
        z = f + eps
        return state._replace(y=z > state.probit_threshold, z=z, resid=eps)
    scale = jnp.sqrt(state.sigma2) if state.prec_weights is None else jnp.sqrt(state.sigma2 / state.prec_weights)
    y = f + scale * eps
    return state._replace(y=y, resid=y - f)


def _successive_step(key, state):
    key_step, key_data = random.split(key)
    state, _ = mcmcstep.step(key_step, state)
    return _regenerate_data(key_data, state)


def make_successive_runner():
    """A fresh jitted function running `GEWEKE_STEPS` successive-conditional steps of all chains."""

    @jax.jit
    def run(key, states):
        axes = chain_state_axes(states)
        num_chains = states.sigma2.shape[0]
        step = jax.vmap(_successive_step, in_axes=(0, axes), out_axes=axes)

        # scan of vmap (not vmap of scan): the key reuse checker of jax
        # 0.10.2 flags keys scanned over inside vmap as reused (false positive)
        def body(states, key):
            return step(random.split(key, num_chains), states), None

        states, _ = lax.scan(body, states, random.split(key, GEWEKE_STEPS))
        return states

    return run


def geweke_functions(kind, var, split, leaf, sigma2, y, z):
    """Test functions of ``(theta, y)``, one value per draw: ``{name: (values, discrete)}``."""
    X, _ = design()
    idx, f = forest_values(X, var, split, leaf)
    leaf_mask = np.asarray(grove.is_leaf(split))
    depth = np.asarray(grove.forest_depth(split))
    out = {
        'num_leaves': (leaf_mask.sum(axis=(1, 2)), True),
        'depth_tree0': (depth[:, 0], True),
        'max_depth': (depth.max(axis=1), True),
        'splits_on_var0': (np.sum((split != 0) & (var == 0), axis=(1, 2)), True),
        'sum_sq_leaves': (np.sum(np.asarray(leaf, np.float64) ** 2, axis=(1, 2)), False),
        'mean_f_sq': (np.mean(f**2, axis=1), False),
    }
    for i in range(3):
        out[f'f_at_x{i}'] = (f[:, i], False)
    target = np.asarray(z if kind == 'probit' else y, np.float64)
    out['mean_sq_resid'] = (np.mean((target - f) ** 2, axis=1), False)
    if kind == 'probit':
        out['num_y_true'] = (np.sum(y, axis=1), True)
        out['mean_z'] = (np.mean(target, axis=1), False)
    else:
        out['sigma2'] = (np.asarray(sigma2, np.float64), False)
        out['mean_y'] = (np.mean(target, axis=1), False)
        out['y_dot_f'] = (np.mean(target * f, axis=1), False)
    return out


def geweke_pvalues(kind, seed, init_kwargs, runner, **sampler_hyper):
    """p-values of the two-sample comparisons of every test function.

    `sampler_hyper` overrides hyperparameters of the sampler only (not of
    the marginal-conditional simulator): a sampler with a known error.
    """
    rng = np.random.default_rng([seed, 2004])
    reference = marginal_conditional(rng, kind, MC_SAMPLES)
    start = marginal_conditional(rng, kind, GEWEKE_CHAINS)
    template = template_state(kind, init_kwargs, **sampler_hyper)
    states = runner(random.key(seed), initial_states(template, start))
    states = jax.device_get(states)
    forest = states.forest
    final = geweke_functions(kind, forest.var_tree, forest.split_tree, forest.leaf_tree, states.sigma2, states.y, states.z)
    ref = geweke_functions(kind, **reference)
    pvalues = {}
    for name, (values, discrete) in final.items():
        if discrete:
            pvalues[name] = chi2_two_sample(values, ref[name][0])
        else:
            pvalues[name] = stats.ks_2samp(values, ref[name][0]).pvalue
    return pvalues


_successive_runner = make_successive_runner()


def assert_passes(pvalues, label):
    threshold = P_MIN / len(pvalues)  # Bonferroni over the test functions
    bad = {k: v for k, v in pvalues.items() if v < threshold}
    assert not bad, f'{label}: {pvalues}'


def _case(kind, seed, moves, slow):
    return pytest.param(kind, seed, moves, marks=[pytest.mark.slow] if slow else [], id=f'{kind}-{seed}-{moves}')


GEWEKE_CASES = [
    _case('continuous', 0, 'default-moves', slow=False),
    _case('probit', 0, 'default-moves', slow=True),
    _case('weighted', 0, 'default-moves', slow=True),
    _case('continuous', 1, 'default-moves', slow=True),
    _case('probit', 1, 'default-moves', slow=True),
    _case('weighted', 1, 'default-moves', slow=True),
    _case('continuous', 0, 'grow-prune', slow=True),
    _case('probit', 0, 'grow-prune', slow=True),
    _case('continuous', 0, 'change-swap', slow=True),
    _case('probit', 0, 'change-swap', slow=True),
    _case('weighted', 0, 'change-swap', slow=True),
]


@pytest.mark.parametrize(('kind', 'seed', 'moves'), GEWEKE_CASES)
def test_geweke(kind, seed, moves):
    """The successive-conditional chains keep the joint law of the
    marginal-conditional simulator (continuous, probit, weighted), with
    each move setting."""
    init_kwargs = MOVE_SETTINGS[moves]
    pvalues = geweke_pvalues(kind, seed, init_kwargs, _successive_runner)
    assert_passes(pvalues, f'{kind} seed {seed}')


def _perturbed_propose_moves(log_factor, original):
    """`propose_moves` with ``log_factor`` added to the log MH ratio of every grow."""

    def propose(key, state):
        moves = original(key, state)
        ratio = jnp.where(moves.kind == GROW, moves.log_ratio_tree + log_factor, moves.log_ratio_tree)
        return moves._replace(log_ratio_tree=ratio)

    return propose


POWER_ERRORS = {
    # the sampler's leaf prior variance 10% too large: the leaf posterior
    # variance and the marginal likelihoods of the moves are off
    'leaf_prior_var': {'leaf_prior_var': 1.1 * LEAF_PRIOR_VAR},
    # the sampler's sigma^2 prior shape 10% too large: the shape of the
    # full conditional of sigma^2 is 13.3 instead of 13 (2% off)
    'sigma2_alpha': {'sigma2_alpha': 1.1 * SIGMA2_ALPHA},
    # the MH ratio of every grow 10% too large
    'grow_ratio': None,
}


@pytest.mark.slow
@pytest.mark.parametrize('error', list(POWER_ERRORS))
def test_geweke_has_power(error, monkeypatch):
    """A sampler with a known small error fails the test by far.

    Measured (seed 0): min p-values about 1e-21 (leaf prior variance, on the
    sum of squared leaves), 1e-21 (sigma^2 shape, on sigma^2) and 1e-17
    (grow ratio, on the number of leaves), against a threshold of about 1e-5.
    """
    hyper = POWER_ERRORS[error]
    runner = _successive_runner
    if hyper is None:
        hyper = {}
        original = mcmcstep.propose_moves
        monkeypatch.setattr(mcmcstep, 'propose_moves', _perturbed_propose_moves(np.log(1.1), original))
        runner = make_successive_runner()  # a fresh jit, so it traces the perturbed function
    pvalues = geweke_pvalues('continuous', 0, {}, runner, **hyper)
    threshold = P_MIN / len(pvalues)
    assert min(pvalues.values()) < threshold * 1e-3, pvalues


@pytest.mark.parametrize('kind', ['continuous', pytest.param('probit', marks=pytest.mark.slow)])
def test_geweke_pairs_of_trees(kind):
    """The loop over trees by pairs (`bartz.sampler.pairs`, on CPU
    from `_PAIR_MIN_POINTS` points; forced here) keeps the joint law: with
    4 trees of at most 4 levels, a pair of trees of at most 3 levels
    shares a pass over the data (the second tree's sums corrected by the
    first tree's change), a pair with a deeper tree takes two passes."""
    plan = mcmcstep.plan_sweep(N_POINTS, num_trees=NUM_TREES).replace(pair_loop=True)
    pvalues = geweke_pvalues(kind, 2, {**MOVE_SETTINGS['default-moves'], 'plan': plan}, make_successive_runner())
    assert_passes(pvalues, f'{kind}, pairs of trees')
