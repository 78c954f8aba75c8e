"""Trees as fixed-size heap arrays: layout, structure, traversal.

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

The public face of the forest layer is `bartz.grove`, which re-exports
these names.
"""

import functools
from typing import NamedTuple

import jax
import numpy as np
from jax import lax
from jax import numpy as jnp

__all__ = [
    'MAX_SUPPORTED_DEPTH',
    'TreeHeaps',
    'evaluate_forest',
    'forest_depth',
    'forest_num_leaves',
    'heap_depth',
    'is_internal',
    'is_leaf',
    'is_nog',
    'node_depths',
    'rowwise_take',
    'traverse_forest',
    'var_count',
    'var_count_scatter',
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


def rowwise_take(table: jax.Array, index: jax.Array) -> jax.Array:
    """``table[i, index[i, j]]`` for a small ``(m, k)`` table: a flat gather
    (``take_along_axis`` builds an ``(m, n, 2)`` index array, which XLA
    constant-folds into a large buffer read at every call; jaxlib 0.10.2)."""
    num_rows, row_len = table.shape
    offset = (jnp.arange(num_rows, dtype=jnp.int32) * row_len)[:, None]
    return table.reshape(-1)[index + offset]


def traverse_forest(
    X: jax.Array, var_tree: jax.Array, split_tree: jax.Array, *, roll: bool | None = None
) -> jax.Array:
    """Find the leaf of every point in every tree.

    Parameters
    ----------
    X
        Binned predictors, shape ``(p, n)``.
    var_tree, split_tree
        Shape ``(m, H/2)``.
    roll
        Whether to loop over the tree levels (True) or unroll them (False);
        None: loop on CPU, unroll elsewhere. Both give the same leaves.

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
        split = rowwise_take(split_tree, node)
        var = rowwise_take(var_tree, node)
        x = X[var, point].astype(jnp.int32)
        return jnp.where(split != 0, 2 * node + (x >= split), node)

    if _roll_levels() if roll is None else roll:
        # on CPU a loop over the levels, not unrolled: XLA compiles one
        # level's kernels instead of one set per level, and the loop runs
        # as fast (faster where many trees are traversed)
        node = lax.fori_loop(0, depth - 1, level, node)
    else:  # elsewhere unrolled, the choice on GPUs (where the loop has not been timed)
        for i in range(depth - 1):
            node = level(i, node)
    return node.astype(jnp.uint8)


def _roll_levels():
    """Whether `traverse_forest` loops over the levels by default (on CPU,
    JAX's default backend) instead of unrolling them."""
    return jax.default_backend() == 'cpu'


def evaluate_forest(X: jax.Array, trees: TreeHeaps) -> jax.Array:
    """Sum of the leaf values of all trees at each point, shape ``(n,)``."""
    leaf_indices = traverse_forest(X, trees.var_tree, trees.split_tree)
    values = rowwise_take(trees.leaf_tree, leaf_indices.astype(jnp.int32))
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
