"""Trees as fixed-size heap arrays: layout, traversal, evaluation, statistics.

A forest of ``m`` trees of maximum depth ``D`` (number of levels, root at
level 0) is stored as dense arrays of static shape, in heap order: node 1 is
the root, the children of node ``k`` are ``2k`` (left) and ``2k + 1`` (right),
index 0 is unused. With ``H = 2**D``:

- ``var_tree``: ``(m, H // 2)`` unsigned int, split variable of each
  internal node (nodes ``1 .. H/2 - 1``; the bottom level cannot split);
- ``split_tree``: ``(m, H // 2)`` unsigned int, split index ``s`` of each
  internal node, 0 where the node is not internal. A point goes left iff its
  binned value ``b < s`` (see `bartz.prepcovars` for the binning);
- ``leaf_tree``: ``(m, H)`` float32, leaf values (0 at non-leaf slots).

A node exists if it is the root or its parent is internal; it is a leaf if it
exists and is not internal. Leaves live at levels ``0 .. D - 1``, so a point's
leaf index fits in a ``uint8`` for ``D <= 8``.
"""

import functools
from typing import NamedTuple

import jax
from jax import lax
import numpy as np
from jax import numpy as jnp

__all__ = [
    'TreeHeaps',
    'heap_depth',
    'is_internal',
    'is_leaf',
    'is_nog',
    'traverse_forest',
    'evaluate_forest',
    'forest_depth',
    'forest_num_leaves',
    'var_count',
    'var_count_scatter',
    'evaluate_trace',
    'compress_trace',
    'trace_sums',
    'batch_points',
]

MAX_SUPPORTED_DEPTH = 8


class TreeHeaps(NamedTuple):
    """A forest (or a trace of forests, with extra leading axes)."""

    var_tree: jax.Array  # (..., m, H/2) uint: split variable
    split_tree: jax.Array  # (..., m, H/2) uint: split index, 0 = not internal
    leaf_tree: jax.Array  # (..., m, H) float32: leaf values


def heap_depth(heap_size: int) -> int:
    """Number of levels ``D`` of a heap of size ``H = 2**D``."""
    depth = int(heap_size).bit_length() - 1
    if heap_size != 2**depth or not 1 <= depth <= MAX_SUPPORTED_DEPTH:
        msg = f'heap size must be 2**D with 1 <= D <= {MAX_SUPPORTED_DEPTH}, got {heap_size}'
        raise ValueError(msg)
    return depth


@functools.cache
def node_depths(heap_size: int) -> np.ndarray:
    """Level of each heap index (index 0 gets level 0; it is never used)."""
    nodes = np.arange(heap_size)
    return np.where(nodes > 0, np.floor(np.log2(np.maximum(nodes, 1))), 0).astype(np.int32)


def is_internal(split_tree: jax.Array) -> jax.Array:
    """Internal-node mask of shape ``(..., H)`` from ``split_tree (..., H/2)``."""
    internal = split_tree != 0
    return jnp.concatenate([internal, jnp.zeros_like(internal)], axis=-1)


def is_leaf(split_tree: jax.Array) -> jax.Array:
    """Leaf mask of shape ``(..., H)``: nodes that exist and are not internal."""
    internal = is_internal(split_tree)
    heap_size = internal.shape[-1]
    nodes = np.arange(heap_size)
    parent_internal = internal[..., nodes >> 1]
    exists = parent_internal | (nodes == 1)
    return exists & ~internal


def is_nog(split_tree: jax.Array) -> jax.Array:
    """Mask ``(..., H/2)`` of internal nodes whose two children are leaves."""
    leaf = is_leaf(split_tree)
    half = split_tree.shape[-1]
    nodes = np.arange(half)
    left = leaf[..., np.minimum(2 * nodes, 2 * half - 1)]
    right = leaf[..., np.minimum(2 * nodes + 1, 2 * half - 1)]
    return (split_tree != 0) & left & right


def _rowwise_take(table: jax.Array, index: jax.Array) -> jax.Array:
    """``table[i, index[i, j]]`` for a small ``(m, k)`` table: a flat gather
    (``take_along_axis`` builds an ``(m, n, 2)`` index array, which XLA
    constant-folds into a large buffer read at every call)."""
    num_rows, row_len = table.shape
    offset = (jnp.arange(num_rows, dtype=jnp.int32) * row_len)[:, None]
    return table.reshape(-1)[index + offset]


def traverse_forest(
    X: jax.Array, var_tree: jax.Array, split_tree: jax.Array
) -> jax.Array:
    """Find the leaf of every point in every tree.

    Parameters
    ----------
    X
        Binned predictors, shape ``(p, n)``.
    var_tree, split_tree
        Shape ``(m, H/2)``.

    Returns
    -------
    Leaf heap indices, shape ``(m, n)``, uint8.
    """
    heap_size = 2 * split_tree.shape[-1]
    depth = heap_depth(heap_size)
    num_trees = split_tree.shape[0]
    n = X.shape[1]
    node = jnp.ones((num_trees, n), jnp.int32)
    point = jnp.arange(n)
    X = jnp.asarray(X)  # numpy inputs too: the loop indexes them with traced values
    split_tree = jnp.asarray(split_tree, jnp.int32)
    var_tree = jnp.asarray(var_tree, jnp.int32)

    def level(_, node):
        split = _rowwise_take(split_tree, node)
        var = _rowwise_take(var_tree, node)
        x = X[var, point].astype(jnp.int32)
        return jnp.where(split != 0, 2 * node + (x >= split), node)

    if _roll_levels():
        # on CPU a loop over the levels, not unrolled: XLA compiles one
        # level's kernels instead of one set per level, and the loop runs
        # as fast (faster where many trees are traversed)
        node = lax.fori_loop(0, depth - 1, level, node)
    else:  # elsewhere unrolled, as measured on GPUs (a loop's steps there are not measured)
        for i in range(depth - 1):
            node = level(i, node)
    return node.astype(jnp.uint8)


def _roll_levels():
    """Whether `traverse_forest` loops over the levels (on CPU, JAX's
    default backend) instead of unrolling them (a function, so that tests
    can take the other path on CPU)."""
    return jax.default_backend() == 'cpu'


def evaluate_forest(X: jax.Array, trees: TreeHeaps) -> jax.Array:
    """Sum of the leaf values of all trees at each point, shape ``(n,)``."""
    leaf_indices = traverse_forest(X, trees.var_tree, trees.split_tree)
    values = _rowwise_take(trees.leaf_tree, leaf_indices.astype(jnp.int32))
    return values.sum(axis=0)


def forest_depth(split_tree: jax.Array) -> jax.Array:
    """Depth of each tree (level of its deepest leaf; a stump has depth 0)."""
    leaf = is_leaf(split_tree)
    depths = jnp.asarray(node_depths(leaf.shape[-1]))
    return jnp.max(jnp.where(leaf, depths, 0), axis=-1)


def forest_num_leaves(split_tree: jax.Array) -> jax.Array:
    """Number of leaves of each tree."""
    return jnp.sum(is_leaf(split_tree), axis=-1, dtype=jnp.int32)


def var_count(var_tree: jax.Array, split_tree: jax.Array, num_vars: int) -> jax.Array:
    """Number of splits on each variable, summed over the trees.

    Parameters
    ----------
    var_tree, split_tree
        Shape ``(..., m, H/2)``.
    num_vars
        Number of predictors ``p``.

    Returns
    -------
    Counts of shape ``(..., p)``, int32.
    """
    internal = (split_tree != 0).astype(jnp.int32)
    one_hot = var_tree[..., None] == jnp.arange(num_vars, dtype=var_tree.dtype)
    return jnp.sum(one_hot * internal[..., None], axis=(-3, -2), dtype=jnp.int32)


def var_count_scatter(var_tree: jax.Array, split_tree: jax.Array, num_vars: int) -> jax.Array:
    """`var_count` for a single forest via scatter-add (no ``(m, H, p)`` temporary)."""
    internal = (split_tree != 0).astype(jnp.int32)
    return jnp.zeros(num_vars, jnp.int32).at[var_tree.reshape(-1)].add(internal.reshape(-1))



# bytes of temporaries per (point, tree) in the trace evaluation
_TEMP_BYTES_PER_POINT_TREE = 16
DEFAULT_MAX_MEMORY = 256 * 2**20
# The traversal's per-draw temporaries of a batch of points, (trees, points)
# int32 arrays, must stay in the CPU's L2 cache: beyond it the time per
# point grows several times (see benchmarks/README.md, "prediction").
_CACHE_FRIENDLY_BYTES = 4 * 2**20
_LINKS = (None, 'affine', 'probit', 'logit')
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

    # anything else: traverse the changed trees again, a group at a time:
    # groups of 16 while more than 8 remain (thinned traces, the first draw
    # of a chain), then of 4 (a few swaps per draw: a group of 16 would
    # traverse mostly unchanged trees). The changed trees are listed once,
    # in `order`, followed by `num_trees` (none): position p holds the
    # number of trees whose inclusive count of changed trees is at most
    # p, which is the index of the (p + 1)-th changed tree. Two reductions
    # over (trees, trees), no cumulative sum (5 kernels on CPU) and no sort
    # (XLA's CPU sort of a fit.predict program cannot be serialised to be
    # kept, `bartz._compile.programs`).
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


def _apply_link(f, link, link_params):
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
        values = _rowwise_take(trees.leaf_tree, leaf_indices.astype(jnp.int32))
        f = _apply_link(jnp.sum(values, axis=0), link, link_params)
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
    (larger batches are not faster, they are several times slower).
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

    Returns
    -------
    A `TreeHeaps` with leading axis ``K``, the largest number of runs of
    a tree (``K <= ndraws``), as numpy arrays.
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
    num_runs = int(runs.max())
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


def _evaluate_trace_impl(X, trace, link_params, *, kind, link, max_memory, ndraws):
    from bartz.jaxext import autobatch  # noqa: PLC0415

    p, n = X.shape
    num_steps, num_trees, _ = trace.leaf_tree.shape
    out_per_point = 4 * num_steps if kind == 'draws' else 4
    io_per_point = p * X.dtype.itemsize + out_per_point
    points_per_batch = batch_points(num_trees, io_per_point, 0, max_memory)
    if points_per_batch >= 64:
        # a power of two: the padded lengths of `bartz.buckets` (k * 2**e) then
        # split into equal batches of that size, which vectorise without
        # remainders (an odd batch size costs 1.6 times per point)
        points_per_batch = 1 << (points_per_batch.bit_length() - 1)
    max_io_nbytes = max(points_per_batch * io_per_point, 1)

    if kind == 'draws':

        def per_batch(X, trace, link_params):
            return trace_sums(X, trace, kind='draws', link=link, link_params=link_params)

    elif kind == 'mean':

        def per_batch(X, trace, link_params):
            return trace_sums(X, trace, kind='sum', link=link, link_params=link_params) / num_steps

    else:  # 'compressed': a compressed trace, linear link applied to the mean

        def per_batch(X, trace, link_params):
            f = trace_sums(X, trace, kind='sum') / ndraws
            return _apply_link(f, link, link_params)

    out_axes = 1 if kind == 'draws' else 0
    batched = autobatch(per_batch, max_io_nbytes, in_axes=(1, None, None), out_axes=out_axes, warn_on_overflow=False)
    return batched(X, trace, link_params)


@functools.cache
def _evaluate_trace_runner(kind, link, max_memory, ndraws):
    """`_evaluate_trace_impl` jitted for these settings; a new process loads
    it whole from the compilation cache (`bartz._compile.programs`) instead of
    tracing it, and traced inputs go to the plain jit."""
    from bartz._compile import programs as _programs  # noqa: PLC0415

    return _programs.persistent_jit(
        _evaluate_trace_impl, 'evaluate_trace', kind=kind, link=link, max_memory=max_memory, ndraws=ndraws
    )


def evaluate_trace(
    X: jax.Array,
    trace: TreeHeaps,
    *,
    kind: str = 'draws',
    max_memory: int = DEFAULT_MAX_MEMORY,
    link: str | None = None,
    link_params: tuple = (),
) -> jax.Array:
    """Evaluate every saved forest of a trace at every point.

    Consecutive posterior draws share most tree structures (only the leaf
    values change at every draw), so the leaf of each point in each tree is
    carried from one draw to the next and only updated where the tree
    changed: one comparison per point for a single grow or prune, a fresh
    traversal otherwise. For the mean with a linear link (None or
    ``'affine'``) of a concrete trace, a run of draws in which a tree keeps
    its structure costs one step instead of one per draw (see
    `compress_trace`).

    Parameters
    ----------
    X
        Binned predictors, shape ``(p, n)``.
    trace
        Forests with a leading draws axis: ``var_tree (ndraws, m, H/2)``, ...
    kind
        ``'draws'``: return ``(ndraws, n)``; ``'mean'``: return the mean
        over draws, ``(n,)``, without materialising the draws.
    max_memory
        Approximate bound in bytes on the memory used at once by the batched
        inputs, outputs and temporaries (not counting `X` and the trace
        themselves, nor the full output). Points are processed in batches
        that respect it, through `bartz.jaxext.autobatch` (and of at most
        about 4 MiB of traversal temporaries, which keeps them in cache;
        see `batch_points`).
    link
        Applied to each draw's sum of trees ``f`` before it is returned or
        averaged: None (identity), ``'affine'`` (``offset + scale * f``, with
        ``link_params = (offset, scale)``), or ``'probit'`` (``Phi(offset +
        f)``, with ``link_params = (offset,)``), or ``'logit'`` (``1 / (1 +
        exp(-offset - f))``, with ``link_params = (offset,)``).
    link_params
        Parameters of the link, as arrays or floats.

    Returns
    -------
    ``(ndraws, n)`` or ``(n,)`` float32.
    """
    if kind not in ('draws', 'mean'):
        msg = f"kind must be 'draws' or 'mean', got {kind!r}"
        raise ValueError(msg)
    if link not in _LINKS:
        msg = f'link must be one of {_LINKS}, got {link!r}'
        raise ValueError(msg)
    ndraws = int(trace.leaf_tree.shape[0])
    concrete = not any(isinstance(a, jax.core.Tracer) for a in trace)
    if kind == 'mean' and link in LINEAR_LINKS and concrete and ndraws > 1:
        trace, kind = compress_trace(trace), 'compressed'
    runner, args = _evaluate_trace_call(X, trace, kind, max_memory, link, link_params, ndraws)
    return runner(*args)


def _evaluate_trace_call(X, trace, kind, max_memory, link, link_params, ndraws):
    """The program of `evaluate_trace` and its arguments (`ndraws`: the
    number of draws before `compress_trace`)."""
    # numpy scalars, not eager jnp conversions (each would compile a program)
    link_params = tuple(v.astype(jnp.float32) if isinstance(v, jax.Array) else np.float32(v) for v in link_params)
    return _evaluate_trace_runner(kind, link, int(max_memory), ndraws), (X, trace, link_params)


def prepare_evaluate_trace(X, trace: TreeHeaps, *, max_memory: int = DEFAULT_MAX_MEMORY, link=None, link_params=()) -> bool:
    """Load or compile the program of ``evaluate_trace(X, trace, kind='draws',
    ...)`` without running it, where `X` and the fields of `trace` may be
    `jax.ShapeDtypeStruct` (with the shardings the arrays will have), so
    that it can be compiled on another thread while the sampler runs
    (`bartz.gbart` does it for ``x_test``). Returns whether the program is
    ready (False when the compiled programs are not kept, `bartz._compile.programs`:
    then the call compiles as usual)."""
    runner, args = _evaluate_trace_call(X, trace, 'draws', max_memory, link, link_params, int(trace.leaf_tree.shape[0]))
    return runner.prepare(*args)
