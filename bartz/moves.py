"""The moves of the tree sampler and their Metropolis-Hastings ratios.

Every tree proposes one move per sweep, drawn before the sweep (the moves of
different trees are independent given the trees, so they are drawn for all
trees at once with ``vmap``); the data enter only through the leaf marginal
likelihoods, which the sweep (`bartz.mcmcstep`) adds to the log ratio
computed here. Four kinds (Chipman, George & McCulloch 1998):

GROW
    split a leaf that can split (above the bottom level, some predictor with
    a usable cut-point in it) with a rule drawn from the prior;
PRUNE
    collapse an internal node whose two children are leaves;
CHANGE
    redraw the rule of an internal node whose two children are leaves, the
    variable from the prior's split probabilities at that node and the
    cut-point uniformly in its usable range;
SWAP
    exchange the rules of an internal node ``k`` and of its child ``c``,
    where ``c``'s children are leaves and ``k``'s other child is a leaf
    (the tree keeps its topology).

Restrictions (they keep the chain exact, because each reverse move is a move
of the same kind on the same node or pair): CHANGE only at nodes whose
children are leaves, SWAP only for such a child with a leaf sibling. CGM
(1998) and BayesTree/dbarts change any internal node and swap any
parent-child pair (rejecting proposals that empty a leaf), at the cost of
re-partitioning whole subtrees. With a single extra cell per tree the moves
here need one rule per point to find its new leaf, so the sweep stays one
pass over the data per tree. With ``max_depth = 2`` (stumps), CHANGE is
never eligible (the sweep would have no spare heap slot for it).

Choice of the kind. ``move_probs = (grow, prune, change, swap)`` are
unnormalised base probabilities; in a tree, the kinds with no eligible node
(no growable leaf; no internal node with two leaf children for prune and
change; no swappable pair) get probability 0 and the others are
renormalised. With the default ``(0.25, 0.25, 0.4, 0.1)`` (the proportions of
BayesTree and dbarts: birth/death 0.5, change 0.4, swap 0.1) a single-leaf
tree always grows; with ``moves=('grow', 'prune')`` this is the classical
sampler (grow and prune 1/2 each, 1 when only one is possible). The
probabilities in the proposed tree enter the ratio (the reverse move is
drawn there).

The log ratio of each kind is a sum of named terms (`_TERM_PERTURBATION`
and `_TERM_SCALE` let the tests perturb any one of them and check that the
prior test notices).

References
----------
Chipman, George & McCulloch (1998), "Bayesian CART model search", JASA
93(443). Linero (2018), "Bayesian regression trees for high-dimensional
prediction and variable selection", JASA 113(522).
"""

import functools
import math
from typing import NamedTuple

import jax
import numpy as np
from jax import numpy as jnp

from bartz import grove

GROW, PRUNE, CHANGE, SWAP = 0, 1, 2, 3
MOVE_NAMES = ('grow', 'prune', 'change', 'swap')
DEFAULT_MOVE_PROBS = {'grow': 0.25, 'prune': 0.25, 'change': 0.4, 'swap': 0.1}

# hooks for the power tests, read at trace time: {(move name, term name):
# log factor added to that term} and {(move name, term name): factor the
# term is multiplied by} (a state-dependent error: scaling a term
# log g(s') - log g(s) makes the chain target pi * g**(factor - 1))
_TERM_PERTURBATION: dict = {}
_TERM_SCALE: dict = {}


def move_probs_array(moves=None) -> np.ndarray:
    """Validate a move specification and return ``(grow, prune, change,
    swap)`` probabilities summing to 1, float32.

    Parameters
    ----------
    moves
        None for the default `DEFAULT_MOVE_PROBS`; a sequence of move names
        (the default probabilities of those moves, renormalised, e.g.
        ``('grow', 'prune')``: 1/2 each); or a dict ``{name: probability}``
        (missing names get 0; renormalised). GROW and PRUNE must both have
        positive probability (without them the chain is not irreducible).
    """
    if moves is None:
        probs = dict(DEFAULT_MOVE_PROBS)
    elif hasattr(moves, 'shape'):  # an array (grow, prune, change, swap), e.g. from a previous call
        values = np.asarray(moves, np.float64)
        if values.shape != (len(MOVE_NAMES),):
            msg = f'moves as an array must have shape (4,) (grow, prune, change, swap), got shape {values.shape}'
            raise ValueError(msg)
        probs = dict(zip(MOVE_NAMES, values.tolist(), strict=True))
        for name, value in probs.items():
            if not math.isfinite(value) or value < 0:
                msg = f'moves: the probability of {name!r} must be finite and >= 0, got {value!r}'
                raise ValueError(msg)
    elif isinstance(moves, dict):
        probs = {}
        for name, value in moves.items():
            if name not in MOVE_NAMES:
                msg = f'moves: unknown move {name!r}, expected some of {MOVE_NAMES}'
                raise ValueError(msg)
            try:
                value = float(value)
            except (TypeError, ValueError):
                msg = f'moves: the probability of {name!r} must be a number, got {value!r}'
                raise ValueError(msg) from None
            if not math.isfinite(value) or value < 0:
                msg = f'moves: the probability of {name!r} must be finite and >= 0, got {value!r}'
                raise ValueError(msg)
            probs[name] = value
    elif isinstance(moves, str):
        msg = f'moves must be a sequence of move names or a dict of probabilities, got the string {moves!r}'
        raise ValueError(msg)
    else:
        try:
            names = list(moves)
        except TypeError:
            msg = f'moves must be None, a sequence of move names or a dict of probabilities, got {moves!r}'
            raise ValueError(msg) from None
        for name in names:
            if name not in MOVE_NAMES:
                msg = f'moves: unknown move {name!r}, expected some of {MOVE_NAMES}'
                raise ValueError(msg)
        probs = {name: DEFAULT_MOVE_PROBS[name] for name in names}
    for name in ('grow', 'prune'):
        if probs.get(name, 0.0) <= 0:
            msg = f"moves must include 'grow' and 'prune' with positive probability, got {moves!r}"
            raise ValueError(msg)
    out = np.array([probs.get(name, 0.0) for name in MOVE_NAMES], np.float64)
    return (out / out.sum()).astype(np.float32)


class Moves(NamedTuple):
    """Proposed move of each tree (leading axis: trees).

    The data side of a move is described by "cells": each point of the tree
    gets the cell ``cell_of[leaf, b]``, where ``leaf`` is its current leaf
    and ``b = X[var] >= split`` its bit for the move's rule. Cells are heap
    slots. The cells listed in ``cells`` are those the move changes, with
    their leaf in the current (``cell_old``) and proposed (``cell_new``)
    tree; every other leaf is its own cell, unchanged (``identity``).
    """

    allowed: jax.Array  # bool: some move is possible
    kind: jax.Array  # int32: GROW, PRUNE, CHANGE or SWAP
    node: jax.Array  # int32: leaf grown, node pruned or changed, parent swapped
    var: jax.Array  # int32: the rule's variable (grow, change: the new rule; swap: the child's)
    split: jax.Array  # int32: the rule's split index
    log_ratio_tree: jax.Array  # float32: log of proposal ratio times prior ratio
    cell_of: jax.Array  # (H, 2) uint8: cell of a point from its leaf and bit
    remap_leaf: jax.Array  # (2,) int32: the (at most two) leaves whose rows of cell_of are not identity, -1 if unused
    remap_cell: jax.Array  # (2, 2) int32: their rows of cell_of
    cells: jax.Array  # (4,) int32: the changed cells, -1 if unused
    cell_old: jax.Array  # (4,) int32: leaf of each changed cell now (-1: unused)
    cell_new: jax.Array  # (4,) int32: its leaf in the proposed tree
    cell_fresh: jax.Array  # (4,) bool: its count and precision must be summed (else: the leaf's)
    identity: jax.Array  # (H,) bool: leaves the move does not touch
    leaf: jax.Array  # (H,) bool: leaves of the current tree
    new_leaf: jax.Array  # (H,) bool: leaves of the proposed tree
    set_node: jax.Array  # (2,) int32: nodes whose rule changes if accepted
    set_var: jax.Array  # (2,) int32: their new variable (0 if they become leaves)
    set_split: jax.Array  # (2,) int32: their new split index (0: not internal)


@functools.cache
def _ancestor_tables(heap_size: int):
    """Static tables of the ancestors of each node.

    ``anc[k, j]`` is the ancestor of node ``k`` at level ``j``, ``valid[k, j]``
    says it is a proper ancestor, ``right[k, j]`` says the path to ``k`` turns
    right at it.
    """
    depth = heap_size.bit_length() - 1
    levels = depth - 1
    nodes = np.arange(heap_size)
    node_level = grove.node_depths(heap_size)
    anc = np.zeros((heap_size, max(levels, 1)), np.int32)
    valid = np.zeros_like(anc, bool)
    right = np.zeros_like(anc, bool)
    for k in nodes[1:]:
        d = node_level[k]
        for j in range(d):
            anc[k, j] = k >> (d - j)
            valid[k, j] = True
            right[k, j] = (k >> (d - j - 1)) & 1
    return anc, valid, right


def num_exhausted(var_tree, split_tree, max_split, heap_size):
    """Number of predictors with no usable split index left at each node.

    A predictor is exhausted at a node when the splits on it along the path
    leave no split index between them; it stays exhausted below. Only the
    parent's split variable can become exhausted at a child, so the count
    accumulates along the path: O(H * depth) per tree, independent of p.
    """
    anc, valid, right = _ancestor_tables(heap_size)
    half = heap_size // 2
    var = var_tree.astype(jnp.int32)
    cut = split_tree.astype(jnp.int32)
    # range of each internal node's own split variable at that node
    path_var = var[anc[:half]]  # (H/2, L)
    path_cut = cut[anc[:half]]
    same = (path_var == var[:, None]) & valid[:half]
    lo = jnp.max(jnp.where(same & right[:half], path_cut, 0), axis=1)
    hi = jnp.min(jnp.where(same & ~right[:half], path_cut - 1, max_split[var][:, None]), axis=1)
    # the variable is newly exhausted at the left child if no index is left
    # in [lo + 1, cut - 1], at the right child if none in [cut + 1, hi]
    left_exhausted = cut - 1 <= lo
    right_exhausted = hi <= cut
    newly = jnp.stack([left_exhausted, right_exhausted], axis=1).reshape(heap_size)  # node 2k + r
    newly = newly.at[:2].set(False)  # nodes 0 and 1 have no parent split
    on_path = jnp.where(valid, newly[anc], False)  # proper ancestors, the root contributes 0
    return newly.astype(jnp.int32) + jnp.sum(on_path, axis=1, dtype=jnp.int32)


def node_ranges(var_tree, split_tree, max_split, node):
    """Usable split indices ``lo + 1 .. hi`` of every predictor at `node`,
    given the rules of its ancestors: two ``(p,)`` int32 arrays."""
    heap_size = 2 * split_tree.shape[0]
    p = max_split.shape[0]
    anc, valid, right = _ancestor_tables(heap_size)
    path_var = var_tree.astype(jnp.int32)[jnp.asarray(anc)[node]]  # (L,)
    path_cut = split_tree.astype(jnp.int32)[jnp.asarray(anc)[node]]
    path_valid = jnp.asarray(valid)[node]
    path_right = jnp.asarray(right)[node]
    on_var = (path_var[None, :] == jnp.arange(p)[:, None]) & path_valid[None, :]  # (p, L)
    lo = jnp.max(jnp.where(on_var & path_right, path_cut, 0), axis=1)
    hi = jnp.min(jnp.where(on_var & ~path_right, path_cut - 1, max_split[:, None]), axis=1)
    return lo, hi


def log_rule_prior(lo, hi, log_s, var, split):
    """Log prior probability of the rule ``(var, split)`` at a node with
    usable ranges ``lo, hi``: the variable's split probability among the
    usable predictors, times 1 / (number of its usable split indices); -inf
    if the split index is not usable there."""
    usable = hi > lo
    log_norm = jax.scipy.special.logsumexp(jnp.where(usable, log_s, -jnp.inf))
    width = (hi[var] - lo[var]).astype(jnp.float32)
    ok = (lo[var] < split) & (split <= hi[var]) & jnp.isfinite(log_s[var])
    value = log_s[var] - log_norm - jnp.log(jnp.where(ok, width, 1.0))
    return jnp.where(ok, value, -jnp.inf)


class _Summary(NamedTuple):
    leaf: jax.Array  # (H,) bool
    nog: jax.Array  # (H,) bool: internal nodes whose children are leaves
    swappable: jax.Array  # (H,) bool: such nodes (not the root) with a leaf sibling
    p_split: jax.Array  # (H,) float32: prior probability that the node is internal
    growable: jax.Array  # (H,) bool
    counts: jax.Array  # (4,) int32: eligible nodes of each kind
    log_probs: jax.Array  # (4,) float32: log probability of each kind


def _summary(var_tree, split_tree, max_split, p_nonterminal, move_probs) -> _Summary:
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
    return _Summary(leaf, nog, swappable, p_split, growable, counts, log_probs)


def _choose(mask, u):
    """Index of a uniformly chosen True entry of `mask` (0 if none), from one
    uniform ``u`` in (0, 1): the ``floor(u * count)``-th True entry."""
    count = jnp.sum(mask, dtype=jnp.int32)
    k = jnp.minimum(jnp.floor(u * count).astype(jnp.int32), count - 1)
    return jnp.argmax(jnp.cumsum(mask, dtype=jnp.int32) > k)


def _choose_weighted(weight, u):
    """Index drawn with probability proportional to the non-negative
    `weight` (0 if all zero), from one uniform ``u`` in (0, 1)."""
    cum = jnp.cumsum(weight)
    return jnp.argmax(cum > u * cum[-1])


def _sum_terms(move, terms):
    total = 0.0
    for name, value in terms.items():
        factor = _TERM_SCALE.get((move, name), 1.0)
        total = total + value * factor + _TERM_PERTURBATION.get((move, name), 0.0)
    return total


def propose_tree(u, var_tree, split_tree, max_split, log_s, p_nonterminal, move_probs) -> Moves:
    """Propose a move for one tree (the data enter in the sweep).

    Parameters
    ----------
    u
        Four uniforms in (0, 1): kind, split index, node, variable.
    var_tree, split_tree
        The tree, shape ``(H/2,)``.
    max_split, log_s, p_nonterminal, move_probs
        As in `bartz.mcmcstep.State`.
    """
    half = split_tree.shape[0]
    heap_size = 2 * half
    slot = jnp.arange(heap_size, dtype=jnp.int32)
    u_move, u_split, u_node, u_var = u
    now = _summary(var_tree, split_tree, max_split, p_nonterminal, move_probs)
    possible = jnp.any(now.counts > 0)
    kind = _choose_weighted(jnp.exp(now.log_probs), u_move).astype(jnp.int32)

    # the node: a growable leaf, a node whose children are leaves, or for
    # SWAP the child c of the pair (k, c)
    eligible = jnp.stack([now.growable, now.nog, now.nog, now.swappable])[kind]
    chosen = _choose(eligible, u_node).astype(jnp.int32)
    k = jnp.where(kind == SWAP, chosen >> 1, chosen)
    k_int = jnp.minimum(k, half - 1)  # in the internal arrays (a growable leaf is above the bottom)
    c = jnp.minimum(chosen, half - 1)

    # a new rule at k from the prior (GROW, CHANGE)
    lo_k, hi_k = node_ranges(var_tree, split_tree, max_split, k)
    usable = hi_k > lo_k
    shift = jnp.max(jnp.where(usable, log_s, -jnp.inf))
    var_weight = jnp.where(usable, jnp.exp(log_s - jnp.where(jnp.isfinite(shift), shift, 0.0)), 0.0)
    var = _choose_weighted(var_weight, u_var).astype(jnp.int32)
    split = lo_k[var] + 1 + jnp.floor(u_split * (hi_k[var] - lo_k[var])).astype(jnp.int32)
    split = jnp.minimum(split, hi_k[var])

    # SWAP: A = rule at k, B = rule at c
    var_a, split_a = var_tree[k_int].astype(jnp.int32), split_tree[k_int].astype(jnp.int32)
    var_b, split_b = var_tree[c].astype(jnp.int32), split_tree[c].astype(jnp.int32)

    def pick(values):
        return jnp.stack(values)[kind]

    zero2 = jnp.zeros(2, jnp.int32)
    set_node = pick([jnp.stack([k, k]), jnp.stack([k, k]), jnp.stack([k, k]), jnp.stack([k, c])])
    set_var = pick([jnp.stack([var, var]), zero2, jnp.stack([var, var]), jnp.stack([var_b, var_a])])
    set_split = pick([jnp.stack([split, split]), zero2, jnp.stack([split, split]), jnp.stack([split_b, split_a])])
    set_node = jnp.where(possible, set_node, 0)
    set_var = jnp.where(possible, set_var, 0)
    set_split = jnp.where(possible, set_split, 0)
    new_var_tree = var_tree.at[set_node].set(set_var.astype(var_tree.dtype))
    new_split_tree = split_tree.at[set_node].set(set_split.astype(split_tree.dtype))
    new = _summary(new_var_tree, new_split_tree, max_split, p_nonterminal, move_probs)

    # the log ratio of each kind, as named terms
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
    # SWAP: the pair is chosen uniformly among the same pairs both ways
    lo_c, hi_c = node_ranges(var_tree, split_tree, max_split, c)
    lo_c_new, hi_c_new = node_ranges(new_var_tree, new_split_tree, max_split, c)
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
    log_ratio = pick(
        [
            _sum_terms('grow', grow_terms),
            _sum_terms('prune', prune_terms),
            _sum_terms('change', change_terms),
            _sum_terms('swap', swap_terms),
        ]
    )

    # the cells
    extra = jnp.where(k > 1, k >> 1, 4)  # CHANGE: a slot with no points (k's parent, or a child of leaf 2)
    dc = c & 1
    sib = c ^ 1
    keep = 2 * c + dc  # SWAP: leaf of c that stays
    moved = 2 * c + 1 - dc  # SWAP: leaf of c whose points go to c's sibling
    col0, col1 = slot, slot
    grow_of = (jnp.where(slot == k, left, col0), jnp.where(slot == k, right, col1))
    change_of = (
        jnp.where(slot == right, extra, col0),
        jnp.where(slot == left, k, col1),
    )
    swap_of = (
        jnp.where((slot == sib) & (dc == 0), k, col0),
        jnp.where((slot == sib) & (dc == 1), k, col1),
    )
    col0 = pick([grow_of[0], col0, change_of[0], swap_of[0]])
    col1 = pick([grow_of[1], col1, change_of[1], swap_of[1]])
    col0 = jnp.where(possible, col0, slot)
    col1 = jnp.where(possible, col1, slot)
    cell_of = jnp.stack([col0, col1], axis=1).astype(jnp.uint8)
    rows = pick(
        [
            jnp.stack([k, jnp.int32(-1)]),
            jnp.full(2, -1, jnp.int32),
            jnp.stack([left, right]),
            jnp.stack([sib, jnp.int32(-1)]),
        ]
    )
    rows = jnp.where(possible, rows, -1)
    remap_cell = cell_of[jnp.clip(rows, 0, heap_size - 1)].astype(jnp.int32)

    def quad(*values):
        return jnp.stack([jnp.asarray(v, jnp.int32) for v in values])

    no = -1
    cells = pick([quad(left, right, no, no), quad(left, right, no, no), quad(left, right, k, extra), quad(keep, moved, sib, k)])
    cell_old = pick([quad(k, k, no, no), quad(left, right, no, no), quad(left, right, left, right), quad(keep, moved, sib, sib)])
    cell_new = pick(
        [quad(left, right, no, no), quad(k, k, no, no), quad(left, right, right, left), quad(keep, sib, sib, moved)]
    )
    t, f = True, False
    cell_fresh = jnp.stack(
        [jnp.array([t, t, t, t]), jnp.array([f, f, t, t]), jnp.array([t, t, t, t]), jnp.array([f, f, t, t])]
    )[kind]
    cells = jnp.where(possible, cells, no)
    cell_old = jnp.where(possible, cell_old, no)
    cell_new = jnp.where(possible, cell_new, no)
    touched = jnp.any(slot[:, None] == cell_old[None, :], axis=1)
    identity = now.leaf & ~touched

    return Moves(
        allowed=possible,
        kind=kind,
        node=jnp.where(possible, k, 1).astype(jnp.int32),
        var=pick([var, var, var, var_b]),
        split=pick([split, split, split, split_b]),
        log_ratio_tree=log_ratio.astype(jnp.float32),
        cell_of=cell_of,
        remap_leaf=rows.astype(jnp.int32),
        remap_cell=remap_cell,
        cells=cells,
        cell_old=cell_old,
        cell_new=cell_new,
        cell_fresh=cell_fresh,
        identity=identity,
        leaf=now.leaf,
        new_leaf=jnp.where(possible, new.leaf, now.leaf),
        set_node=set_node,
        set_var=set_var,
        set_split=set_split,
    )
