"""A plain, slow, readable sweep over trees that the fast one is tested against.

`sweep_trees` computes what `bartz.sampler.sweep.sweep_trees` computes,
tree after tree, the way Chipman, George & McCulloch (2010) write it: the
partial residuals of the tree, both trees traversed for every point, the
sufficient statistics of every leaf of both, the log marginal likelihood
ratio summed over all their leaves, accept or reject, the conjugate draw of
every leaf of the final tree, the residuals updated. It takes the same moves
and key as the fast sweep, and so the same random numbers: the same trees,
the same values up to float rounding (the fast sweep sums only the leaves
the move touches, by cells, in another order).
"""

import numpy as np
from jax import numpy as jnp
from jax import ops

from bartz.sampler.leaves import accept_and_noise, _leaf_draw
from bartz.sampler.moves import Moves
from bartz.sampler.state import Forest, State, StepInfo
from bartz.sampler.sweep import log_marginal


def traverse(X, var_tree, split_tree):
    """The leaf (heap index) of every point ``(n,)`` in one tree: from the
    root, go right where ``X[var] >= split``, until a node that does not split."""
    half = split_tree.shape[0]
    node = jnp.ones(X.shape[1], jnp.int32)
    for _ in range(half.bit_length() - 1):  # (the levels above the bottom one)
        at = jnp.minimum(node, half - 1)
        internal = (node < half) & (split_tree[at] > 0)
        right = X[var_tree[at], jnp.arange(X.shape[1])] >= split_tree[at]
        node = jnp.where(internal, 2 * node + right, node)
    return node


def proposed_tree(var_tree, split_tree, moves: Moves, j):
    """The rules of tree `j` if its move is accepted (the nodes ``set_node``
    get ``set_var`` and ``set_split``; the first listed wins a tie)."""
    node = jnp.arange(var_tree.shape[0])
    for d in reversed(range(moves.set_node.shape[1])):
        here = node == moves.set_node[j, d]
        var_tree = jnp.where(here, moves.set_var[j, d].astype(var_tree.dtype), var_tree)
        split_tree = jnp.where(here, moves.set_split[j, d].astype(split_tree.dtype), split_tree)
    return var_tree, split_tree


def leaf_stats(leaves, resid, weights, real, heap_size):
    """Per heap slot: the weighted residual sum, the precision sum and the
    number of (real) points of the leaves `leaves` ``(n,)``."""
    resid_sum = ops.segment_sum(jnp.where(real, resid * weights, 0.0), leaves, heap_size)
    prec_sum = ops.segment_sum(jnp.where(real, weights, 0.0), leaves, heap_size)
    count = ops.segment_sum(real.astype(jnp.int32), leaves, heap_size)
    return resid_sum, prec_sum, count


def sweep_trees(key, state: State, moves: Moves):
    """Accept or reject each tree's move and redraw its leaves, tree after
    tree (a Python loop: slow to compile for many trees). Returns the state
    with the new trees and residuals, and the `StepInfo`."""
    forest = state.forest
    num_trees, heap_size = forest.leaf_tree.shape
    log_u, noise = accept_and_noise(key, num_trees, heap_size)
    inv_sigma2, inv_tau2 = 1.0 / state.sigma2, 1.0 / state.leaf_prior_var
    real = forest.leaf_indices[0] != 0  # padding has no leaf
    weights = jnp.ones_like(state.resid) if state.prec_weights is None else state.prec_weights
    resid = state.resid
    var_trees, split_trees, leaf_trees, counts, precs, indices, accepted = [], [], [], [], [], [], []
    for j in range(num_trees):
        var_now, split_now = forest.var_tree[j], forest.split_tree[j]
        var_new, split_new = proposed_tree(var_now, split_now, moves, j)
        leaves_now = traverse(state.X, var_now, split_now)
        leaves_new = traverse(state.X, var_new, split_new)
        partial = jnp.where(real, resid + forest.leaf_tree[j][leaves_now], 0.0)  # y minus the other trees

        s_now, p_now, n_now = leaf_stats(leaves_now, partial, weights, real, heap_size)
        s_new, p_new, n_new = leaf_stats(leaves_new, partial, weights, real, heap_size)
        log_ratio = jnp.sum(jnp.where(moves.new_leaf[j], log_marginal(s_new, p_new, inv_sigma2, inv_tau2), 0.0)) - jnp.sum(
            jnp.where(moves.leaf[j], log_marginal(s_now, p_now, inv_sigma2, inv_tau2), 0.0)
        )
        allowed = moves.allowed[j] & jnp.all(~moves.new_leaf[j] | (n_new >= state.min_points_per_leaf))
        accept = allowed & (log_u[j] < moves.log_ratio_tree[j] + log_ratio)

        is_leaf = jnp.where(accept, moves.new_leaf[j], moves.leaf[j])
        resid_sum, prec_sum = jnp.where(accept, s_new, s_now), jnp.where(accept, p_new, p_now)
        values = jnp.where(is_leaf, _leaf_draw(jnp.stack([resid_sum, prec_sum], axis=1), noise[j], inv_sigma2, inv_tau2), 0.0)
        final = jnp.where(accept, leaves_new, leaves_now)
        resid = jnp.where(real, partial - values[final], 0.0)

        var_trees.append(jnp.where(accept, var_new, var_now))
        split_trees.append(jnp.where(accept, split_new, split_now))
        leaf_trees.append(values)
        counts.append(jnp.where(is_leaf, jnp.where(accept, n_new, n_now), 0))
        precs.append(jnp.where(is_leaf, prec_sum, 0.0))
        indices.append(jnp.where(real, final, 0).astype(jnp.uint8))
        accepted.append(accept)
        moves = moves._replace(allowed=moves.allowed.at[j].set(allowed))
    forest = Forest(
        var_tree=jnp.stack(var_trees),
        split_tree=jnp.stack(split_trees),
        leaf_tree=jnp.stack(leaf_trees),
        leaf_indices=jnp.stack(indices),
        leaf_count=jnp.stack(counts),
        leaf_prec=None if forest.leaf_prec is None else jnp.stack(precs),
    )
    accepted = jnp.stack(accepted)
    proposed = (moves.kind[None, :] == np.arange(4)[:, None]) & moves.allowed[None, :]  # (4, m): GROW, PRUNE, CHANGE, SWAP
    info = StepInfo(*jnp.sum(jnp.stack([proposed, proposed & accepted], axis=1).reshape(8, num_trees), axis=1, dtype=jnp.int32))
    return state._replace(forest=forest, resid=resid), info
