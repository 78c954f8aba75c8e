"""Tests for bartz.grove: heap-layout trees, traversal, evaluation, statistics."""

import numpy as np
import pytest
import jax
from jax import numpy as jnp
from jax.scipy.special import ndtr

from bartz.forest import grove
from bartz.forest.grove import TreeHeaps


def random_forest(rng, num_trees, depth, p, max_split, *, p_internal=0.7, dtype=np.uint8):
    """Random valid heaps: a node is internal only if it exists and is above the bottom level.

    Split variables of non-internal nodes are garbage on purpose (the layout
    says they are ignored), and leaf values are nonzero only at leaves.
    """
    half = 2 ** (depth - 1)
    heap_size = 2 * half
    var = rng.integers(0, p, size=(num_trees, half))
    split = np.zeros((num_trees, half), np.int64)
    exists = np.zeros((num_trees, heap_size), bool)
    exists[:, 1] = True
    for node in range(1, half):
        internal = exists[:, node] & (rng.random(num_trees) < p_internal)
        split[internal, node] = rng.integers(1, max_split + 1, size=internal.sum())
        exists[:, 2 * node] = exists[:, 2 * node + 1] = internal
    internal = np.concatenate([split != 0, np.zeros_like(split, bool)], axis=1)
    leaf = exists & ~internal
    leaf_values = np.where(leaf, rng.normal(size=(num_trees, heap_size)), 0.0)
    return TreeHeaps(
        var_tree=jnp.asarray(var.astype(dtype)),
        split_tree=jnp.asarray(split.astype(dtype)),
        leaf_tree=jnp.asarray(leaf_values.astype(np.float32)),
    )


def brute_leaf(X, var_tree, split_tree, tree, point):
    """Leaf index of one point in one tree, walking the heap in Python."""
    half = split_tree.shape[1]
    node = 1
    while node < half and split_tree[tree, node] != 0:
        node = 2 * node + int(X[var_tree[tree, node], point] >= split_tree[tree, node])
    return node


def brute_leaves(X, trees):
    X, var, split = (np.asarray(a) for a in (X, trees.var_tree, trees.split_tree))
    return np.array(
        [[brute_leaf(X, var, split, t, i) for i in range(X.shape[1])] for t in range(split.shape[0])]
    )


def brute_eval(X, trees):
    leaves = brute_leaves(X, trees)
    values = np.asarray(trees.leaf_tree, np.float64)
    return np.take_along_axis(values, leaves, axis=1).sum(axis=0)


@pytest.mark.parametrize(('depth', 'dtype'), [(1, np.uint8), (2, np.uint8), (4, np.uint16), (6, np.uint8)])
def test_traverse_and_evaluate_match_brute_force(depth, dtype):
    rng = np.random.default_rng(depth)
    p, n, max_split = 3, 60, 9
    trees = random_forest(rng, 8, depth, p, max_split, dtype=dtype)
    X = jnp.asarray(rng.integers(0, max_split + 1, size=(p, n)).astype(dtype))
    leaves = grove.traverse_forest(X, trees.var_tree, trees.split_tree)
    assert leaves.dtype == jnp.uint8
    assert leaves.shape == (8, n)
    expected = brute_leaves(X, trees)
    np.testing.assert_array_equal(np.asarray(leaves), expected)
    # every point lands on a leaf
    leaf_mask = np.asarray(grove.is_leaf(trees.split_tree))
    assert np.all(np.take_along_axis(leaf_mask, expected, axis=1))
    f = grove.evaluate_forest(X, trees)
    assert f.shape == (n,)
    np.testing.assert_allclose(np.asarray(f), brute_eval(X, trees), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('roll', [False, True])
def test_traverse_by_levels_matches_brute_force(roll):
    """The unrolled traversal of other backends than the CPU's, and the loop."""
    rng = np.random.default_rng(7)
    p, n, max_split = 3, 23, 6
    trees = random_forest(rng, 9, 5, p, max_split)
    X = jnp.asarray(rng.integers(0, max_split + 1, size=(p, n)).astype(np.uint8))
    leaves = grove.traverse_forest(X, trees.var_tree, trees.split_tree, roll=roll)
    np.testing.assert_array_equal(np.asarray(leaves), brute_leaves(X, trees))


def test_traverse_boundaries():
    """A point goes left iff its bin is strictly below the split index."""
    var = jnp.zeros((1, 2), jnp.uint8)
    split = jnp.array([[0, 3]], jnp.uint8)
    X = jnp.array([[0, 2, 3, 4, 255]], jnp.uint8)
    np.testing.assert_array_equal(grove.traverse_forest(X, var, split), [[2, 2, 3, 3, 3]])


# Hand-built forest, depth 3 (heap size 8), p = 3. Garbage var at non-internal nodes.
HAND_SPLIT = np.array(
    [
        [0, 0, 0, 0],  # stump
        [0, 2, 0, 1],  # root (var 1), node 3 (var 0); leaves 2, 6, 7
        [0, 3, 1, 5],  # full: leaves 4..7
        [0, 1, 0, 0],  # root only: leaves 2, 3
    ],
    np.uint8,
)
HAND_VAR = np.array(
    [
        [2, 1, 2, 0],
        [2, 1, 2, 0],
        [1, 0, 2, 1],
        [0, 2, 1, 1],
    ],
    np.uint8,
)


def test_is_leaf_is_nog_on_hand_built_trees():
    split = jnp.asarray(HAND_SPLIT)
    expected_leaf = np.zeros((4, 8), bool)
    expected_leaf[0, [1]] = True
    expected_leaf[1, [2, 6, 7]] = True
    expected_leaf[2, [4, 5, 6, 7]] = True
    expected_leaf[3, [2, 3]] = True
    np.testing.assert_array_equal(grove.is_leaf(split), expected_leaf)
    expected_internal = np.zeros((4, 8), bool)
    expected_internal[:, :4] = HAND_SPLIT != 0
    np.testing.assert_array_equal(grove.is_internal(split), expected_internal)
    expected_nog = np.zeros((4, 4), bool)
    expected_nog[1, 3] = True
    expected_nog[2, [2, 3]] = True
    expected_nog[3, 1] = True
    np.testing.assert_array_equal(grove.is_nog(split), expected_nog)
    np.testing.assert_array_equal(grove.forest_depth(split), [0, 2, 2, 1])
    np.testing.assert_array_equal(grove.forest_num_leaves(split), [1, 3, 4, 2])


def test_statistics_broadcast_over_leading_axes():
    split = jnp.stack([jnp.asarray(HAND_SPLIT), jnp.asarray(HAND_SPLIT[::-1])])
    np.testing.assert_array_equal(grove.forest_depth(split), [[0, 2, 2, 1], [1, 2, 2, 0]])
    np.testing.assert_array_equal(grove.forest_num_leaves(split), [[1, 3, 4, 2], [2, 4, 3, 1]])
    assert grove.is_leaf(split).shape == (2, 4, 8)
    assert grove.is_nog(split).shape == (2, 4, 4)


def test_var_count_on_hand_built_trees():
    var, split = jnp.asarray(HAND_VAR), jnp.asarray(HAND_SPLIT)
    # internal nodes: tree 1: var 1, var 0; tree 2: var 0, 2, 1; tree 3: var 2
    expected = np.array([2, 2, 2])
    np.testing.assert_array_equal(grove.var_count(var, split, 3), expected)
    np.testing.assert_array_equal(grove.var_count_scatter(var, split, 3), expected)
    # extra variables that are never used get 0
    np.testing.assert_array_equal(grove.var_count(var, split, 5), [2, 2, 2, 0, 0])
    # a trace: leading draws axis
    trace_var = jnp.stack([var, var])
    trace_split = jnp.stack([split, split.at[2].set(0)])
    counts = grove.var_count(trace_var, trace_split, 3)
    np.testing.assert_array_equal(counts, [[2, 2, 2], [1, 1, 1]])


def test_var_count_matches_brute_force_on_random_forests():
    rng = np.random.default_rng(7)
    p = 5
    trees = random_forest(rng, 30, 5, p, 4)
    var, split = np.asarray(trees.var_tree), np.asarray(trees.split_tree)
    expected = np.bincount(var[split != 0], minlength=p)
    np.testing.assert_array_equal(grove.var_count(trees.var_tree, trees.split_tree, p), expected)
    np.testing.assert_array_equal(grove.var_count_scatter(trees.var_tree, trees.split_tree, p), expected)


def test_heap_depth():
    assert grove.heap_depth(2) == 1
    assert grove.heap_depth(64) == 6
    assert grove.heap_depth(256) == 8
    for bad in (0, 1, 3, 48, 512):
        with pytest.raises(ValueError, match='heap size'):
            grove.heap_depth(bad)


def _leaf_mask(split):
    half = split.shape[-1]
    internal = np.concatenate([split != 0, np.zeros_like(split, bool)], axis=-1)
    nodes = np.arange(2 * half)
    exists = internal[..., nodes >> 1] | (nodes == 1)
    exists[..., 0] = False
    return exists & ~internal


def _next_draw(rng, var, split, p, max_split):
    """The next draw of a chain: each tree kept, or edited as the sampler or a thinned trace would."""
    var, split = var.copy(), split.copy()
    num_trees, half = split.shape
    for t in range(num_trees):
        leaf = _leaf_mask(split[t])
        leaves = np.flatnonzero(leaf[:half])  # leaves above the bottom level
        nogs = [k for k in range(1, half) if split[t, k] and leaf[2 * k] and leaf[2 * k + 1]]
        internal = np.flatnonzero(split[t])
        # the sampler's swap: the rules of a node and of its child whose children and sibling are leaves
        swaps = [
            (k, c)
            for k in internal
            for c in (2 * k, 2 * k + 1)
            if c < half and split[t, c] and leaf[2 * c] and leaf[2 * c + 1] and leaf[c ^ 1]
        ]
        action = rng.choice(['keep', 'grow', 'prune', 'resplit', 'garbage', 'fresh', 'grow2', 'swap'])
        if action in ('grow', 'grow2') and leaves.size:
            for k in rng.choice(leaves, size=min(leaves.size, 1 + (action == 'grow2')), replace=False):
                var[t, k], split[t, k] = rng.integers(p), rng.integers(1, max_split + 1)
        elif action == 'prune' and nogs:
            k = rng.choice(nogs)
            split[t, k] = 0
            var[t, k] = rng.choice([0, rng.integers(p)])  # the sampler resets it; garbage is allowed
        elif action == 'resplit' and internal.size:
            k = rng.choice(internal)
            var[t, k], split[t, k] = rng.integers(p), rng.integers(1, max_split + 1)
        elif action == 'swap' and swaps:
            k, c = swaps[rng.integers(len(swaps))]
            var[t, [k, c]], split[t, [k, c]] = var[t, [c, k]], split[t, [c, k]]
        elif action == 'garbage':  # a non-internal node's variable changes: nothing moves
            k = rng.integers(1, half)
            if split[t, k] == 0:
                var[t, k] = (var[t, k] + 1) % p
        elif action == 'fresh':
            fresh = random_forest(rng, 1, int(np.log2(half)) + 1, p, max_split)
            var[t], split[t] = np.asarray(fresh.var_tree[0]), np.asarray(fresh.split_tree[0])
    return var, split


def random_trace(rng, ndraws, num_trees, depth, p, max_split):
    """Draws of a forest where consecutive draws share most structure, as in an MCMC trace."""
    first = random_forest(rng, num_trees, depth, p, max_split)
    var, split = np.asarray(first.var_tree), np.asarray(first.split_tree)
    forests = []
    for i in range(ndraws):
        if i > 0:
            var, split = _next_draw(rng, var, split, p, max_split)
        forests.append(_with_leaf_values(rng, var, split))
    return forests


def _with_leaf_values(rng, var, split):
    """The forest of these heaps, with random values at its leaves."""
    leaf = _leaf_mask(split)
    values = np.where(leaf, rng.normal(size=leaf.shape), 0.0).astype(np.float32)
    return TreeHeaps(jnp.asarray(var), jnp.asarray(split), jnp.asarray(values))


@pytest.fixture(scope='module')
def trace_setup():
    rng = np.random.default_rng(42)
    p, n, max_split, ndraws, num_trees, depth = 3, 37, 6, 40, 5, 4
    forests = random_trace(rng, ndraws, num_trees, depth, p, max_split)
    # a stump forest and a forest with only the roots split, at the start
    forests[0] = TreeHeaps(*(jnp.zeros_like(a) for a in forests[0]))
    trace = TreeHeaps(*(jnp.stack(arrays) for arrays in zip(*forests, strict=True)))
    X = jnp.asarray(rng.integers(0, max_split + 1, size=(p, n)).astype(np.uint8))
    draws = np.stack([brute_eval(X, forest) for forest in forests])
    return X, trace, draws


# tiny budget: one point per batch; medium: several batches with a remainder (n = 37 is prime)
BUDGETS = [1, 3000, grove.DEFAULT_MAX_MEMORY]
LINKS = [(None, ()), ('affine', (0.5, 2.0)), ('probit', (-0.3,))]


def apply_link(f, link, params):
    if link == 'affine':
        return params[0] + params[1] * f
    if link == 'probit':
        return ndtr(params[0] + f)
    return f


@pytest.mark.parametrize('max_memory', BUDGETS)
@pytest.mark.parametrize(('link', 'params'), LINKS)
def test_evaluate_trace_draws(trace_setup, max_memory, link, params):
    X, trace, draws = trace_setup
    out = grove.evaluate_trace(X, trace, kind='draws', max_memory=max_memory, link=link, link_params=params)
    expected = np.asarray(apply_link(draws, link, params))
    assert out.shape == draws.shape
    assert out.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-5)
    # and the loop over draws with evaluate_forest
    for i in range(draws.shape[0]):
        f = grove.evaluate_forest(X, TreeHeaps(*(a[i] for a in trace)))
        np.testing.assert_allclose(np.asarray(out[i]), np.asarray(apply_link(f, link, params)), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize('max_memory', BUDGETS)
@pytest.mark.parametrize(('link', 'params'), LINKS)
def test_evaluate_trace_mean(trace_setup, max_memory, link, params):
    X, trace, draws = trace_setup
    out = grove.evaluate_trace(X, trace, kind='mean', max_memory=max_memory, link=link, link_params=params)
    expected = np.asarray(apply_link(draws, link, params)).mean(axis=0)
    assert out.shape == (X.shape[1],)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-5)


def test_evaluate_trace_independent_of_budget(trace_setup):
    X, trace, _ = trace_setup
    for kind in ('draws', 'mean'):
        outs = [np.asarray(grove.evaluate_trace(X, trace, kind=kind, max_memory=m)) for m in BUDGETS]
        for out in outs[1:]:
            np.testing.assert_allclose(out, outs[0], rtol=1e-6, atol=1e-6)


def test_evaluate_trace_of_sampler_trace():
    """A trace of the actual sampler (grows and prunes from one draw to the next)."""
    from jax import lax, random  # noqa: PLC0415

    from bartz.sampler import step as mcmcstep  # noqa: PLC0415

    rng = np.random.default_rng(3)
    p, n, max_split = 3, 50, np.array([5, 9, 2])
    X = jnp.asarray(np.stack([rng.integers(0, m + 1, size=n) for m in max_split]).astype(np.uint8))
    y = jnp.asarray(np.sin(np.asarray(X[0])) + rng.normal(scale=0.1, size=n), jnp.float32)
    state = mcmcstep.init(
        X=X, max_split=max_split, y=y, num_trees=6, max_depth=4, leaf_prior_var=0.1, sigma2_alpha=2.0, sigma2_beta=0.1
    )

    def body(state, key):
        state, _ = mcmcstep.step(key, state)
        f = state.forest
        return state, TreeHeaps(f.var_tree, f.split_tree, f.leaf_tree)

    _, trace = jax.jit(lambda key, state: lax.scan(body, state, random.split(key, 30)))(random.key(0), state)
    expected = np.stack([brute_eval(X, TreeHeaps(*(a[i] for a in trace))) for i in range(30)])
    out = grove.evaluate_trace(X, trace, kind='draws', max_memory=2000)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-5)


def test_evaluate_trace_retraverses_any_number_of_trees():
    """Draws in which 0 to all of 37 trees are replaced by new random trees:
    the replaced ones are traversed again in groups of 16 while more than 8
    remain, then of 4, the last group shifted back at the end of the list
    (`bartz.forest.trace._RETRAVERSE_GROUPS`); every count around those sizes (37 trees,
    all replaced: the last group starts at the last tree)."""
    rng = np.random.default_rng(11)
    p, n, max_split, num_trees, depth = 3, 29, 6, 37, 4
    counts = [0, 1, 3, 4, 5, 8, 9, 12, 16, 17, 24, 25, 33, 36, 37, 2]
    forest = random_forest(rng, num_trees, depth, p, max_split)
    var, split = np.asarray(forest.var_tree), np.asarray(forest.split_tree)
    forests = [forest]
    for count in counts:
        fresh = random_forest(rng, num_trees, depth, p, max_split)
        var, split = var.copy(), split.copy()
        # trees at either end of the list too: the shifted last group
        which = rng.choice(num_trees, size=count, replace=False)
        var[which], split[which] = np.asarray(fresh.var_tree)[which], np.asarray(fresh.split_tree)[which]
        forests.append(_with_leaf_values(rng, var, split))
    trace = TreeHeaps(*(jnp.stack(arrays) for arrays in zip(*forests, strict=True)))
    X = jnp.asarray(rng.integers(0, max_split + 1, size=(p, n)).astype(np.uint8))
    expected = np.stack([brute_eval(X, forest) for forest in forests])
    out = grove.evaluate_trace(X, trace, kind='draws')
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-5)


def test_evaluate_trace_bad_arguments(trace_setup):
    X, trace, _ = trace_setup
    with pytest.raises(ValueError, match='kind'):
        grove.evaluate_trace(X, trace, kind='median')
    with pytest.raises(ValueError, match='link'):
        grove.evaluate_trace(X, trace, link='cloglog')
