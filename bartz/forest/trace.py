"""Evaluation of a trace of forests: each point's leaf carried from draw to draw.

A trace is a `bartz.forest.heaps.TreeHeaps` with a leading draws axis, the
forests saved by the MCMC. Consecutive draws share most tree structures
(only the leaf values change at every draw), so `trace_sums` scans the
draws carrying the leaf of each point in each tree, updating it only where
the tree changed. `compress_trace` merges the runs of draws in which a tree
keeps its structure, for sums over draws. These are the per-batch kernels
of the prediction pipeline (`bartz.forest.predict`).
"""

import jax
import numpy as np
from jax import lax
from jax import numpy as jnp

from bartz.forest.heaps import TreeHeaps, rowwise_take, traverse_forest

__all__ = [
    'DEFAULT_MAX_MEMORY',
    'LINEAR_LINKS',
    'LINKS',
    'apply_link',
    'batch_points',
    'compress_trace',
    'compressed_steps',
    'trace_sums',
]

# bytes of temporaries per (point, tree) in the trace evaluation
_TEMP_BYTES_PER_POINT_TREE = 16
DEFAULT_MAX_MEMORY = 256 * 2**20
# The traversal's per-draw temporaries of a batch of points, (trees, points)
# int32 arrays, must stay in the CPU's L2 cache: beyond it the time per
# point grows (measured with jaxlib 0.10.2; benchmarks/LOG.md, "prediction").
_CACHE_FRIENDLY_BYTES = 4 * 2**20
LINKS = (None, 'affine', 'probit', 'logit')
LINEAR_LINKS = (None, 'affine')


def _update_leaf_indices(X, leaf_indices, prev_var, prev_split, var_tree, split_tree):
    """Leaf indices of the next draw's forest from the previous draw's.

    Consecutive draws share most tree structures. A tree that differs from
    its previous version by one grow, one prune or one change of the rule
    of a node whose children are leaves (the usual cases without thinning)
    is updated with one comparison per point; a tree with more changes (or
    a swap) is traversed again. Trees are compacted so that only changed
    ones are traversed.
    """
    num_trees, half = split_tree.shape
    diff = (split_tree != prev_split) | (var_tree != prev_var)
    num_diff = jnp.sum(diff, axis=1)
    node = jnp.argmax(diff, axis=1)
    tree_idx = jnp.arange(num_trees)
    old_split = prev_split[tree_idx, node]
    new_split = split_tree[tree_idx, node]
    single = num_diff == 1
    grow = single & (old_split == 0) & (new_split != 0)
    prune = single & (old_split != 0) & (new_split == 0)
    # a new rule at a node whose children are leaves (CHANGE): its points
    # are sorted again between the same two leaves (nodes past the split
    # heap are bottom leaves)
    child = 2 * node
    leaf_child = [(c >= half) | (split_tree[tree_idx, jnp.minimum(c, half - 1)] == 0) for c in (child, child + 1)]
    change = single & (old_split != 0) & (new_split != 0) & leaf_child[0] & leaf_child[1]
    retraverse = (num_diff > 0) & ~grow & ~prune & ~change

    # one grow, prune or change: move the points of one node (a grow's
    # points are at the node, a change's in its children)
    idx = leaf_indices.astype(jnp.int32)
    x = X[var_tree[tree_idx, node].astype(jnp.int32)].astype(jnp.int32)  # (m, n)
    node = node[:, None]
    sort = (grow[:, None] & (idx == node)) | (change[:, None] & ((idx >> 1) == node))
    grown = jnp.where(sort, 2 * node + (x >= new_split[:, None].astype(jnp.int32)), idx)
    pruned = jnp.where(prune[:, None] & ((idx >> 1) == node), node, grown)
    leaf_indices = pruned.astype(jnp.uint8)
    return _retraverse(X, leaf_indices, retraverse, var_tree, split_tree)


def _retraverse(X, leaf_indices, retraverse, var_tree, split_tree):
    """Traverse again the trees marked in `retraverse` (``(m,)`` bool) and
    write their points' leaves into `leaf_indices` (``(m, n)`` uint8).

    The trees are traversed a group at a time, compacted so that unchanged
    trees are not traversed (`_RETRAVERSE_GROUPS`).
    """
    num_trees = split_tree.shape[0]
    # groups of 16 while more than 8 remain (thinned traces, the first draw
    # of a chain), then of 4 (a few swaps per draw: a group of 16 would
    # traverse mostly unchanged trees). The changed trees are listed once,
    # in `order`, followed by `num_trees` (none): position p holds the
    # number of trees whose inclusive count of changed trees is at most
    # p, which is the index of the (p + 1)-th changed tree. Two reductions
    # over (trees, trees), no cumulative sum (several kernels on CPU) and no
    # sort (XLA's CPU sort of a fit.predict program cannot be serialised to
    # be kept, `bartz._compile.programs`; jaxlib 0.10.2).
    large, threshold, small = _RETRAVERSE_GROUPS
    large, small = min(num_trees, large), min(num_trees, small)
    # (reductions over the leading axis: XLA vectorises them over the other)
    position = jnp.arange(num_trees, dtype=jnp.int32)
    upto = position[:, None] <= position[None, :]
    counts = jnp.sum(upto & retraverse[:, None], axis=0, dtype=jnp.int32)  # changed trees up to each
    order = jnp.sum(counts[:, None] <= position[None, :], axis=0, dtype=jnp.int32)
    carry = (leaf_indices, jnp.int32(0))
    for group, more_than in ((large, threshold), (small, 0)):

        def cond(carry, more_than=more_than):
            _, done = carry
            k = done + more_than
            return (k < num_trees) & (order[jnp.minimum(k, num_trees - 1)] < num_trees)

        def body(carry, group=group):
            leaf_indices, done = carry
            # a group past the end of the list: shifted back (trees traversed
            # twice find the same leaves) or padded with num_trees (dropped)
            which = lax.dynamic_slice(order, (done,), (group,))
            safe = jnp.minimum(which, num_trees - 1)
            fresh = traverse_forest(X, var_tree[safe], split_tree[safe])
            return leaf_indices.at[which].set(fresh, mode='drop'), done + group

        carry = lax.while_loop(cond, body, carry)
    return carry[0]


# trees traversed at once: groups of the first size while more than the
# second remain, then groups of the third
_RETRAVERSE_GROUPS = (16, 8, 4)


def apply_link(f, link, link_params):
    """The sum of trees `f` mapped by `link` (see `bartz.grove.evaluate_trace`)."""
    if link == 'affine':
        offset, scale = link_params
        return offset + scale * f
    if link == 'probit':
        (offset,) = link_params
        return jax.scipy.stats.norm.cdf(offset + f)
    if link == 'logit':
        (offset,) = link_params
        return jax.nn.sigmoid(offset + f)
    return f


def trace_sums(X, trace: TreeHeaps, *, kind, link=None, link_params=()):
    """Sum of trees of each draw at each point, or the sum over draws; unbatched.

    The kernel of `evaluate_trace`, for one batch of points: a scan over
    the draws that carries each point's leaf in each tree from one draw to
    the next (see `evaluate_trace`).

    Parameters
    ----------
    X
        Binned predictors, shape ``(p, n)``.
    trace
        Forests with a leading draws axis.
    kind
        ``'draws'``: return ``link(f)`` of each draw, ``(ndraws, n)``;
        ``'sum'``: return its sum over draws, ``(n,)``.
    link, link_params
        As in `evaluate_trace`.

    Returns
    -------
    ``(ndraws, n)`` or ``(n,)`` float32.
    """
    ndraws, num_trees, half = trace.split_tree.shape
    n = X.shape[1]

    def body(carry, trees):
        leaf_indices, prev_var, prev_split, acc = carry
        leaf_indices = _update_leaf_indices(X, leaf_indices, prev_var, prev_split, trees.var_tree, trees.split_tree)
        values = rowwise_take(trees.leaf_tree, leaf_indices.astype(jnp.int32))
        f = apply_link(jnp.sum(values, axis=0), link, link_params)
        if kind == 'sum':
            return (leaf_indices, trees.var_tree, trees.split_tree, acc + f), None
        return (leaf_indices, trees.var_tree, trees.split_tree, acc), f

    init = (
        jnp.ones((num_trees, n), jnp.uint8),
        jnp.zeros((num_trees, half), trace.var_tree.dtype),
        jnp.zeros((num_trees, half), trace.split_tree.dtype),
        jnp.zeros(n, jnp.float32),
    )
    (_, _, _, acc), draws = lax.scan(body, init, trace)
    return acc if kind == 'sum' else draws


def batch_points(num_trees: int, io_per_point: int, temp_per_point: int, max_memory: int) -> int:
    """Points per batch of a trace evaluation.

    As many as fit `max_memory` with their inputs, outputs and temporaries,
    but no more than keep the traversal's per-draw temporaries in cache
    (larger batches are not faster, but slower: the temporaries leave the cache).
    """
    traversal = _TEMP_BYTES_PER_POINT_TREE * num_trees
    points = max(1, max_memory // (io_per_point + traversal + temp_per_point))
    return min(points, max(64, _CACHE_FRIENDLY_BYTES // traversal))


def compress_trace(trace: TreeHeaps) -> TreeHeaps:
    """Merge the runs of draws in which a tree keeps its structure.

    Over a run of consecutive draws in which tree ``j`` has the same splits,
    its contribution to the sum over draws at any point is the sum of its
    leaf values over the run, read at the point's leaf: one traversal per
    run instead of one per draw. This function, on the host with numpy,
    returns a trace whose "draw" ``k`` holds, for each tree, its ``k``-th
    run: the structure and the leaf values summed over the run (in float64,
    then rounded to float32). Trees with fewer runs are padded with their
    last structure and zero leaves, which costs nothing to update. The sum
    over the draws of the result equals the sum over the draws of `trace`,
    up to float rounding.

    Parameters
    ----------
    trace
        Forests with a leading draws axis, ``(ndraws, m, ...)`` (numpy or
        concrete jax arrays).

    The number of steps is rounded up (`compressed_steps`), so that the
    traces of different fits share a compiled prediction program.

    Returns
    -------
    A `TreeHeaps` with leading axis ``K <= ndraws``, the largest number of
    runs of a tree rounded up by `compressed_steps`, as numpy arrays.
    """
    var = np.asarray(trace.var_tree)
    split = np.asarray(trace.split_tree)
    leaf = np.asarray(trace.leaf_tree)
    ndraws, num_trees = split.shape[:2]
    var = np.where(split != 0, var, 0).astype(var.dtype)  # var of a non-internal node is irrelevant
    if ndraws == 0:
        return TreeHeaps(var, split, leaf)
    changed = np.any((split[1:] != split[:-1]) | (var[1:] != var[:-1]), axis=2)  # (ndraws - 1, m)
    runs = 1 + changed.sum(axis=0)
    num_runs = compressed_steps(int(runs.max()), ndraws)
    out_var = np.empty((num_runs, *var.shape[1:]), var.dtype)
    out_split = np.empty((num_runs, *split.shape[1:]), split.dtype)
    out_leaf = np.zeros((num_runs, *leaf.shape[1:]), np.float32)
    for j in range(num_trees):
        starts = np.concatenate([[0], 1 + np.flatnonzero(changed[:, j])])
        r = starts.size
        out_var[:r, j] = var[starts, j]
        out_split[:r, j] = split[starts, j]
        out_var[r:, j] = var[starts[-1], j]
        out_split[r:, j] = split[starts[-1], j]
        out_leaf[:r, j] = np.add.reduceat(leaf[:, j].astype(np.float64), starts, axis=0)
    return TreeHeaps(out_var, out_split, out_leaf)


# The steps of a compressed trace are a multiple of ndraws / _RUN_STEPS: at
# most that many programs per ndraws, each at most ndraws / _RUN_STEPS
# traversals more than the runs need.
_RUN_STEPS = 16


def compressed_steps(num_runs: int, ndraws: int) -> int:
    """The steps of the compressed trace of `ndraws` draws whose tree with
    most runs has `num_runs`: rounded up to a multiple of
    ``ceil(ndraws / 16)``, at most `ndraws`.

    >>> [compressed_steps(r, 1000) for r in (1, 63, 64, 300, 990)]
    [63, 63, 126, 315, 1000]
    """
    unit = -(-ndraws // _RUN_STEPS)
    return min(ndraws, -(-num_runs // unit) * unit)
