"""A plain, slow, readable sampler that the fast one is tested against.

Each function here computes what a function of the fast sampler computes,
written the way the paper writes it (Chipman, George & McCulloch 1998,
2010): whole-tree summaries, the ranges of every predictor recomputed at
each node that needs them, the proposed tree built and summarised again,
one log prior per rule. It does none of the fast code's tricks (packed bit
masks, element-wise reductions, constants hidden from XLA, the proposed
tree's summary derived from the current one), so it is easy to check by
reading and slow to run. The tests compare every fast path with it: the
same moves, field by field, and the log ratio up to float rounding.

The tree moves
--------------
`propose_tree` is `bartz.sampler.moves.propose_tree` for all four kinds
(GROW, PRUNE, CHANGE, SWAP: the fast one's static options only choose what
is compiled, not what is drawn). Its helpers `num_exhausted`, `node_ranges`,
`log_rule_prior` and `tree_summary` are the statistics of a tree that the
log Metropolis-Hastings ratio is made of.

References
----------
Chipman, George & McCulloch (1998), "Bayesian CART model search", JASA
93(443). Chipman, George & McCulloch (2010), "BART: Bayesian additive
regression trees", Ann. Appl. Stat. 4(1).
"""

import functools
from typing import NamedTuple

import jax
import numpy as np
from jax import numpy as jnp

from bartz.forest import grove
from bartz.sampler.moves import CHANGE, GROW, PRUNE, SWAP, Moves

# ---------------------------------------------------------------- the tree moves


@functools.cache
def ancestor_tables(heap_size: int):
    """Static tables of the ancestors of each node of a heap of `heap_size` slots.

    Returns
    -------
    anc : (heap_size, L) int32
        ``anc[k, j]`` is the ancestor of node ``k`` at level ``j``.
    valid : (heap_size, L) bool
        It is a proper ancestor.
    right : (heap_size, L) bool
        The path to ``k`` turns right at it.
    """
    depth = heap_size.bit_length() - 1
    levels = max(depth - 1, 1)
    node_level = grove.node_depths(heap_size)
    anc = np.zeros((heap_size, levels), np.int32)
    valid = np.zeros_like(anc, bool)
    right = np.zeros_like(anc, bool)
    for k in range(1, heap_size):
        d = node_level[k]
        for j in range(d):
            anc[k, j] = k >> (d - j)
            valid[k, j] = True
            right[k, j] = (k >> (d - j - 1)) & 1
    return anc, valid, right


def num_exhausted(var_tree, split_tree, max_split, heap_size):
    """Number of predictors with no usable split index left at each node, ``(H,)`` int32.

    A predictor is exhausted at a node when the rules on it along the path
    leave no split index between them. Only the parent's variable can
    become exhausted at a child, so the count is the number of nodes on the
    path (the node included) where the parent's variable ran out.
    """
    anc, valid, right = ancestor_tables(heap_size)
    half = heap_size // 2
    var = var_tree.astype(jnp.int32)
    cut = split_tree.astype(jnp.int32)
    path_var = var[anc[:half]]  # (H/2, L)
    path_cut = cut[anc[:half]]
    same = (path_var == var[:, None]) & valid[:half]
    lo = jnp.max(jnp.where(same & right[:half], path_cut, 0), axis=1)
    hi = jnp.min(jnp.where(same & ~right[:half], path_cut - 1, max_split[var][:, None]), axis=1)
    left_exhausted = cut - 1 <= lo
    right_exhausted = hi <= cut
    newly = jnp.stack([left_exhausted, right_exhausted], axis=1).reshape(heap_size)  # node 2k + r
    newly = newly.at[:2].set(False)  # nodes 0 and 1 have no parent
    on_path = jnp.where(valid, newly[anc], False)
    return newly.astype(jnp.int32) + jnp.sum(on_path, axis=1, dtype=jnp.int32)


def node_ranges(var_tree, split_tree, max_split, node):
    """Usable split indices ``lo + 1, ..., hi`` of every predictor at `node`,
    given the rules of its ancestors: two ``(p,)`` int32 arrays."""
    heap_size = 2 * split_tree.shape[0]
    p = max_split.shape[0]
    anc, valid, right = ancestor_tables(heap_size)
    path_var = var_tree.astype(jnp.int32)[jnp.asarray(anc)[node]]
    path_cut = split_tree.astype(jnp.int32)[jnp.asarray(anc)[node]]
    path_valid = jnp.asarray(valid)[node]
    path_right = jnp.asarray(right)[node]
    on_var = (path_var[None, :] == jnp.arange(p)[:, None]) & path_valid[None, :]
    lo = jnp.max(jnp.where(on_var & path_right, path_cut, 0), axis=1)
    hi = jnp.min(jnp.where(on_var & ~path_right, path_cut - 1, max_split[:, None]), axis=1)
    return lo, hi


def log_rule_prior(lo, hi, log_s, var, split):
    """Log prior probability of the rule ``(var, split)`` at a node where the
    predictors have usable ranges ``lo, hi``: the variable's split
    probability among the usable predictors, times 1 / (number of its usable
    split indices); -inf if the split index is not usable there."""
    usable = hi > lo
    log_norm = jax.scipy.special.logsumexp(jnp.where(usable, log_s, -jnp.inf))
    width = (hi[var] - lo[var]).astype(jnp.float32)
    ok = (lo[var] < split) & (split <= hi[var]) & jnp.isfinite(log_s[var])
    value = log_s[var] - log_norm - jnp.log(jnp.where(ok, width, 1.0))
    return jnp.where(ok, value, -jnp.inf)


class TreeSummary(NamedTuple):
    """The nodes of a tree where each kind of move can act, and the kinds' probabilities."""

    leaf: jax.Array  # (H,) bool: leaves
    nog: jax.Array  # (H,) bool: internal nodes whose two children are leaves
    swappable: jax.Array  # (H,) bool: such nodes, not the root, with a leaf sibling
    p_split: jax.Array  # (H,) float32: prior probability that the node is internal
    growable: jax.Array  # (H,) bool: leaves with positive p_split
    counts: jax.Array  # (4,) int32: eligible nodes of GROW, PRUNE, CHANGE, SWAP
    log_probs: jax.Array  # (4,) float32: log probability of proposing each kind


def tree_summary(var_tree, split_tree, max_split, p_nonterminal, move_probs) -> TreeSummary:
    """The `TreeSummary` of a tree: which nodes each move kind can act on.

    GROW acts on a growable leaf, PRUNE and CHANGE on an internal node whose
    children are leaves (CHANGE only when the heap has a spare slot, depth
    above 2), SWAP on such a node and its parent when its sibling is a leaf.
    The kinds with no eligible node get probability 0, the others share
    `move_probs` renormalised.
    """
    half = split_tree.shape[0]
    heap_size = 2 * half
    depth_of = jnp.asarray(grove.node_depths(heap_size))
    slot = jnp.arange(heap_size)
    leaf = grove.is_leaf(split_tree)
    nog = jnp.concatenate([grove.is_nog(split_tree), jnp.zeros(half, bool)])
    swappable = nog & (slot > 1) & leaf[slot ^ 1]
    n_avail = jnp.sum(max_split > 0) - num_exhausted(var_tree, split_tree, max_split, heap_size)
    p_split = jnp.where(n_avail > 0, p_nonterminal[depth_of], 0.0)
    growable = leaf & (p_split > 0)
    num_nog = jnp.sum(nog, dtype=jnp.int32)
    counts = jnp.stack(
        [
            jnp.sum(growable, dtype=jnp.int32),
            num_nog,
            num_nog if heap_size > 4 else jnp.int32(0),
            jnp.sum(swappable, dtype=jnp.int32),
        ]
    )
    weight = jnp.where(counts > 0, move_probs, 0.0)
    total = jnp.sum(weight)
    log_probs = jnp.log(weight) - jnp.log(jnp.where(total > 0, total, 1.0))
    return TreeSummary(leaf, nog, swappable, p_split, growable, counts, log_probs)


def _choose_uniform(mask, u):
    """The ``floor(u * count)``-th set entry of the bool `mask` (a uniform choice)."""
    count = jnp.sum(mask, dtype=jnp.int32)
    k = jnp.minimum(jnp.floor(u * count).astype(jnp.int32), count - 1)
    return jnp.argmax(jnp.cumsum(mask, dtype=jnp.int32) > k)


def _choose_weighted(weight, u):
    """An index drawn with probability proportional to `weight`, by inverse cdf."""
    cum = jnp.cumsum(weight)
    return jnp.argmax(cum > u * cum[-1])


def _sum_terms(terms):
    """The sum of a move's named log ratio terms."""
    total = 0.0
    for value in terms.values():
        total = total + value
    return total


def propose_tree(u, var_tree, split_tree, max_split, log_s, p_nonterminal, move_probs, r_birth=None) -> Moves:
    """Propose a move for one tree: `bartz.sampler.moves.propose_tree`, plainly.

    Parameters
    ----------
    u
        Four uniforms in (0, 1): kind, split index, node, variable.
    var_tree, split_tree
        The tree, shape ``(H/2,)``.
    max_split, log_s, p_nonterminal, move_probs
        As in `bartz.sampler.moves.propose_tree`.
    r_birth
        Static: R BART 2.9.9's birth, as in `bartz.sampler.moves.propose_tree`
        (here GROW's terms are written as R's birth proposal computes them).

    Returns
    -------
    The move and its tree-structure log ratio (log proposal ratio plus log
    prior ratio, as named terms), with the cells of the sweep.
    """
    half = split_tree.shape[0]
    u_move, u_split, u_node, u_var = u
    now = tree_summary(var_tree, split_tree, max_split, p_nonterminal, move_probs)
    possible = jnp.any(now.counts > 0)

    # the kind, and its node: a growable leaf (GROW), a node whose children
    # are leaves (PRUNE, CHANGE), the child c of the pair (k, c) (SWAP)
    kind = _choose_weighted(jnp.exp(now.log_probs), u_move).astype(jnp.int32)
    eligible = jnp.stack([now.growable, now.nog, now.nog, now.swappable])[kind]
    chosen = _choose_uniform(eligible, u_node).astype(jnp.int32)
    k = jnp.where(kind == SWAP, chosen >> 1, chosen)
    c = jnp.minimum(chosen, half - 1)

    # a new rule at k from the prior (GROW, CHANGE): a usable variable by its
    # split probability, a split index uniform in its range
    # (R with augment=FALSE: among all predictors with cut-points)
    lo_k, hi_k = node_ranges(var_tree, split_tree, max_split, k)
    usable = hi_k > lo_k
    drawable = max_split > 0 if r_birth == 'all' else usable
    shift = jnp.max(jnp.where(drawable, log_s, -jnp.inf))
    var_weight = jnp.where(drawable, jnp.exp(log_s - jnp.where(jnp.isfinite(shift), shift, 0.0)), 0.0)
    var = _choose_weighted(var_weight, u_var).astype(jnp.int32)
    split = lo_k[var] + 1 + jnp.floor(u_split * (hi_k[var] - lo_k[var])).astype(jnp.int32)
    split = jnp.minimum(split, hi_k[var])
    if r_birth == 'all':  # no cut-point left for var at k: one that empties a child (R: an ancestor's)
        split = jnp.maximum(split, 1)

    # SWAP: rule A at k, rule B at c
    k_int = jnp.minimum(k, half - 1)
    var_a, split_a = var_tree[k_int].astype(jnp.int32), split_tree[k_int].astype(jnp.int32)
    var_b, split_b = var_tree[c].astype(jnp.int32), split_tree[c].astype(jnp.int32)

    def pick(values):
        return jnp.stack(values)[kind]

    # the proposed tree, summarised again
    zero2 = jnp.zeros(2, jnp.int32)
    set_node = pick([jnp.stack([k, k]), jnp.stack([k, k]), jnp.stack([k, k]), jnp.stack([k, c])])
    set_var = pick([jnp.stack([var, var]), zero2, jnp.stack([var, var]), jnp.stack([var_b, var_a])])
    set_split = pick([jnp.stack([split, split]), zero2, jnp.stack([split, split]), jnp.stack([split_b, split_a])])
    set_node = jnp.where(possible, set_node, 0)
    set_var = jnp.where(possible, set_var, 0)
    set_split = jnp.where(possible, set_split, 0)
    new_var_tree = var_tree.at[set_node].set(set_var.astype(var_tree.dtype))
    new_split_tree = split_tree.at[set_node].set(set_split.astype(split_tree.dtype))
    new = tree_summary(new_var_tree, new_split_tree, max_split, p_nonterminal, move_probs)

    terms = _log_ratio_terms(now, new, k, c, (var_tree, split_tree), (new_var_tree, new_split_tree), max_split, log_s)
    if r_birth is not None:
        terms[GROW].update(_r_birth_terms(now, k, usable[var]))
    log_ratio = pick([_sum_terms(t) for t in terms])
    cells = _cells(kind, possible, k, c, now.leaf)
    return Moves(
        allowed=possible,
        kind=kind,
        node=jnp.where(possible, k, 1).astype(jnp.int32),
        var=pick([var, var, var, var_b]),
        split=pick([split, split, split, split_b]),
        log_ratio_tree=log_ratio.astype(jnp.float32),
        **cells,
        leaf=now.leaf,
        new_leaf=jnp.where(possible, new.leaf, now.leaf),
        set_node=set_node,
        set_var=set_var,
        set_split=set_split,
    )


def _log_ratio_terms(now, new, k, c, tree, new_tree, max_split, log_s):
    """The named terms of the log ratio of GROW, PRUNE, CHANGE and SWAP at
    node `k` (SWAP: the pair `k`, `c`), from the `TreeSummary` of the
    current and the proposed tree: 'move' and 'node' are the log proposal
    ratio (the reverse move is drawn in the proposed tree), the others the
    log prior ratio. Four dicts."""
    heap_size = now.leaf.shape[0]
    left, right = jnp.minimum(2 * k, heap_size - 2), jnp.minimum(2 * k + 1, heap_size - 1)
    log = jnp.log
    grow_terms = {
        'move': new.log_probs[PRUNE] - now.log_probs[GROW],
        'node': log(now.counts[GROW].astype(jnp.float32)) - log(new.counts[PRUNE].astype(jnp.float32)),
        'split': log(now.p_split[k]) - jnp.log1p(-now.p_split[k]),
        'children': jnp.log1p(-new.p_split[left]) + jnp.log1p(-new.p_split[right]),
    }
    prune_terms = {
        'move': new.log_probs[GROW] - now.log_probs[PRUNE],
        'node': log(now.counts[PRUNE].astype(jnp.float32)) - log(new.counts[GROW].astype(jnp.float32)),
        'split': jnp.log1p(-new.p_split[k]) - log(new.p_split[k]),
        'children': -jnp.log1p(-now.p_split[left]) - jnp.log1p(-now.p_split[right]),
    }
    # CHANGE: the rule's proposal is its prior, so they cancel
    change_terms = {
        'move': new.log_probs[CHANGE] - now.log_probs[CHANGE],
        'children': (
            jnp.log1p(-new.p_split[left])
            + jnp.log1p(-new.p_split[right])
            - jnp.log1p(-now.p_split[left])
            - jnp.log1p(-now.p_split[right])
        ),
    }
    # SWAP: the pair is chosen uniformly among the same pairs both ways;
    # rule A (at k now) and rule B (at c now) trade places
    half = heap_size // 2
    var_tree, split_tree = tree
    k_int = jnp.minimum(k, half - 1)
    var_a, split_a = var_tree[k_int].astype(jnp.int32), split_tree[k_int].astype(jnp.int32)
    var_b, split_b = var_tree[c].astype(jnp.int32), split_tree[c].astype(jnp.int32)
    lo_k, hi_k = node_ranges(var_tree, split_tree, max_split, k)
    lo_c, hi_c = node_ranges(var_tree, split_tree, max_split, c)
    lo_c_new, hi_c_new = node_ranges(*new_tree, max_split, c)
    grandchildren = jnp.minimum(jnp.stack([2 * c, 2 * c + 1, c ^ 1]), heap_size - 1)
    swap_terms = {
        'move': new.log_probs[SWAP] - now.log_probs[SWAP],
        'rule_parent': log_rule_prior(lo_k, hi_k, log_s, var_b, split_b)
        - log_rule_prior(lo_k, hi_k, log_s, var_a, split_a),
        'rule_child': log_rule_prior(lo_c_new, hi_c_new, log_s, var_a, split_a)
        - log_rule_prior(lo_c, hi_c, log_s, var_b, split_b),
        'split_child': log(new.p_split[c]) - log(now.p_split[c]),
        'leaves': jnp.sum(jnp.log1p(-new.p_split[grandchildren]) - jnp.log1p(-now.p_split[grandchildren])),
    }
    return grow_terms, prune_terms, change_terms, swap_terms


def _r_birth_terms(now, k, usable_var):
    """GROW's terms where R BART 2.9.9's birth at leaf `k` differs: its
    probability of choosing the new parent back in the proposed tree is
    one over the nodes with two leaf children there, counted as the current
    tree's plus one unless k's parent is one of them, and R never classes
    the root as one; a variable with no usable cut-point at k empties a
    child, which R refuses."""
    parent_is_nog = (k >> 1 > 1) & now.leaf[k ^ 1]
    nogs_new = jnp.where(k == 1, 1, jnp.where(parent_is_nog, now.counts[PRUNE], now.counts[PRUNE] + 1))
    return {
        'node': jnp.log(now.counts[GROW].astype(jnp.float32)) - jnp.log(nogs_new.astype(jnp.float32)),
        'r_variable': jnp.where(usable_var, 0.0, -jnp.inf),
    }


def _cells(kind, possible, k, c, leaf):
    """The cell fields of `Moves` for a move of `kind` at node `k` (SWAP:
    the pair `k`, `c`) in a tree with leaves `leaf`.

    Every point goes to ``cell_of[its leaf, its bit for the move's rule]``.
    GROW splits k into its children; CHANGE sends the points of k's left
    child with bit 1 to k, of its right child with bit 0 to ``extra`` (a
    slot with no points); SWAP sends the points of c's sibling with the bit
    of c's side to k. Every other leaf is its own cell."""
    heap_size = leaf.shape[0]
    slot = jnp.arange(heap_size, dtype=jnp.int32)
    left, right = jnp.minimum(2 * k, heap_size - 2), jnp.minimum(2 * k + 1, heap_size - 1)

    def pick(values):
        return jnp.stack(values)[kind]

    extra = jnp.where(k > 1, k >> 1, 4)
    dc = c & 1
    sib = c ^ 1
    keep = 2 * c + dc
    moved = 2 * c + 1 - dc
    col0, col1 = slot, slot
    grow_of = (jnp.where(slot == k, left, col0), jnp.where(slot == k, right, col1))
    change_of = (jnp.where(slot == right, extra, col0), jnp.where(slot == left, k, col1))
    swap_of = (jnp.where((slot == sib) & (dc == 0), k, col0), jnp.where((slot == sib) & (dc == 1), k, col1))
    col0 = jnp.where(possible, pick([grow_of[0], col0, change_of[0], swap_of[0]]), slot)
    col1 = jnp.where(possible, pick([grow_of[1], col1, change_of[1], swap_of[1]]), slot)
    cell_of = jnp.stack([col0, col1], axis=1).astype(jnp.uint8)
    no = jnp.int32(-1)
    rows = pick([jnp.stack([k, no]), jnp.full(2, -1, jnp.int32), jnp.stack([left, right]), jnp.stack([sib, no])])
    rows = jnp.where(possible, rows, -1)

    def quad(*values):
        return jnp.stack([jnp.asarray(v, jnp.int32) for v in values])

    cells = pick([quad(left, right, no, no), quad(left, right, no, no), quad(left, right, k, extra), quad(keep, moved, sib, k)])
    cell_old = pick([quad(k, k, no, no), quad(left, right, no, no), quad(left, right, left, right), quad(keep, moved, sib, sib)])
    cell_new = pick([quad(left, right, no, no), quad(k, k, no, no), quad(left, right, right, left), quad(keep, sib, sib, moved)])
    t, f = True, False
    cell_fresh = jnp.array([[t, t, t, t], [f, f, t, t], [t, t, t, t], [f, f, t, t]])[kind]
    cell_old = jnp.where(possible, cell_old, no)
    touched = jnp.any(slot[:, None] == cell_old[None, :], axis=1)
    return dict(
        cell_of=cell_of,
        remap_leaf=rows.astype(jnp.int32),
        remap_cell=cell_of[jnp.clip(rows, 0, heap_size - 1)].astype(jnp.int32),
        cells=jnp.where(possible, cells, no),
        cell_old=cell_old,
        cell_new=jnp.where(possible, cell_new, no),
        cell_fresh=cell_fresh,
        identity=leaf & ~touched,
    )
