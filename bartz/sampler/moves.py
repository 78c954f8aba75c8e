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

Only the kinds with positive probability are compiled (``kinds`` of
`propose_tree`, `bartz.mcmcstep.MoveKinds`): with ``('grow', 'prune')``
(R's BART, whose sampler has birth and death steps only) the code of CHANGE
and SWAP is left out, and the sweep carries two cells per move instead of
four; the draws are those of the four-kind program with the same
probabilities, up to float rounding.

This module holds the statistics: the steps of `propose_tree` and the terms
of its ratio. The prior of the rules it uses (ranges on a path, rule and
split probabilities, a rule drawn from the prior) is in `_move_rules`, the
machine tricks (packed masks, element-wise reductions, values kept in
kernels of their own) in `_move_bits`, the cells of the sweep in
`_move_cells`; `bartz.sampler.reference` is the same proposal, plainly.

R's birth step. R BART 2.9.9 (``moves='R'``, ``r_birth`` of `propose_tree`)
proposes GROW and PRUNE only, and its birth differs from the one above in
two ways. With ``augment=FALSE`` (R's default) it draws the split variable
among all predictors, not only those with a usable cut-point at the leaf;
such a variable gets an ancestor's cut-point, which empties a child, and
R's rule of five points per leaf refuses the move (here: a log ratio of
-inf). The chain's rule prior is then ``s_v / sum of all s`` where the
stated one is ``s_v / sum of the usable s``. And its probability of
choosing, back in the proposed tree, the new parent for a death counts one
node too many when the leaf's parent is the root of a two-leaf tree (the
root is never classed as a node with two leaf children): a birth there gets
half the ratio it should. The second is not in detailed balance; it is
reproduced so that R's results can be.

The log ratio of each kind is a sum of named terms (`TERM_PERTURBATION`
and `TERM_SCALE` let the tests perturb any one of them and check that the
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

from bartz.sampler import _move_bits as bits
from bartz.sampler._move_bits import (
    EXHAUSTED,
    GROWABLE,
    LEAF,
    NOG,
    SWAPPABLE,
    bits_at,
    choose_set_bit,
    computed,
    finite_or_zero,
    first_above,
    level_of_node,
    num_exhausted,
    opaque_one,
    take_small,
    tree_summary,
)
from bartz.sampler._move_cells import CHANGE, GROW, PRUNE, SWAP, MoveNodes, cell_tables, picked
from bartz.sampler._move_rules import (
    Path,
    children_of_new_rule,
    draw_rule,
    log_rule_prior,
    node_ranges,
    pair_rules,
    path_rules,
    rule_log_prior,
    rule_normalisers,
    split_prior,
    swapped_rules,
    usable_at,
)

__all__ = [
    'ALL_KINDS',
    'CHANGE',
    'DEFAULT_MOVE_PROBS',
    'GROW',
    'MOVE_NAMES',
    'PRUNE',
    'SWAP',
    'Moves',
    'log_rule_prior',
    'move_probs_array',
    'node_ranges',
    'num_exhausted',
    'propose_tree',
    'r_birth_of',
]
MOVE_NAMES = ('grow', 'prune', 'change', 'swap')
DEFAULT_MOVE_PROBS = {'grow': 0.25, 'prune': 0.25, 'change': 0.4, 'swap': 0.1}
ALL_KINDS = (True, True, True, True)

# hooks for the power tests, read at trace time: {(move name, term name):
# log factor added to that term} and {(move name, term name): factor the
# term is multiplied by} (a state-dependent error: scaling a term
# log g(s') - log g(s) makes the chain target pi * g**(factor - 1))
TERM_PERTURBATION: dict = {}
TERM_SCALE: dict = {}


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
        ``'R'``: GROW and PRUNE 1/2 each, with R's birth (`r_birth_of`).
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
        if moves != 'R':
            msg = (
                "moves must be 'R' (R BART's birth/death sampler), a sequence of move names or a dict of "
                f'probabilities, got the string {moves!r}'
            )
            raise ValueError(msg)
        probs = {'grow': 0.5, 'prune': 0.5}
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


def r_birth_of(moves, augment=False) -> str | None:
    """The ``r_birth`` of `propose_tree` for a move specification of
    `move_probs_array`: for ``'R'``, ``'all'`` or with R's ``augment=TRUE``
    ``'usable'`` (R draws a birth's variable among the usable predictors
    then); None for any other (the stated prior's birth)."""
    if isinstance(moves, str) and moves == 'R':
        return 'usable' if augment else 'all'
    return None


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

# ---------------------------------------------------------------- the proposal


def _sum_terms(move, terms):
    """The sum of a move's named log ratio terms (with the test hooks)."""
    total = 0.0
    for name, value in terms.items():
        factor = TERM_SCALE.get((move, name), 1.0)
        total = total + value * factor + TERM_PERTURBATION.get((move, name), 0.0)
    return total


def propose_tree(
    u,
    var_tree,
    split_tree,
    max_split,
    log_s,
    p_nonterminal,
    move_probs,
    kinds=ALL_KINDS,
    entries=False,
    exhaustible=None,
    uniform_splits=False,
    r_birth=None,
) -> Moves:
    """Propose a move for one tree (the data enter in the sweep).

    Parameters
    ----------
    u
        Four uniforms in (0, 1): kind, split index, node, variable.
    var_tree, split_tree
        The tree, shape ``(H/2,)``.
    max_split, log_s, p_nonterminal, move_probs
        As in `bartz.mcmcstep.State` (the last entry of `p_nonterminal`, the
        bottom level, is 0).
    kinds
        Static: four bools, the kinds (GROW, PRUNE, CHANGE, SWAP) that can
        be proposed at all (GROW and PRUNE must be among them). A kind left
        out is never proposed, whatever `move_probs` says, and none of its
        outputs is selected, so XLA drops its code from the compiled
        program.
    entries
        Static: return the small integer fields (``remap_leaf``, ``cells``,
        ``cell_old``, ``cell_new``, ``cell_fresh``, ``set_*``) as tuples of
        their entries, for a caller that vmaps this function and stacks
        them along the trees' axis itself (`bartz.mcmcstep.propose_moves`):
        stacked here, under vmap, each is a kernel of its own and a
        transposing copy; stacked after it, XLA fuses them into their users
        (jaxlib 0.10.2).
    exhaustible
        Static: whether fewer predictors have cut-points than the tree has
        levels, so that all of them can be exhausted at a node, which the
        proposal must then count (`bartz.mcmcstep.MoveKinds`); None: it
        checks at run time (both ways compiled).
    uniform_splits
        Static: `log_s` is all 0 (uniform split probabilities): it is
        taken as constants, which XLA folds, and the maxima that shift its
        exponentials are 0 too.
    r_birth
        Static: None for the birth above; ``'all'`` or ``'usable'`` for R
        BART 2.9.9's birth (see the module's notes) with ``augment=FALSE``
        (the variable among all predictors with cut-points) or
        ``augment=TRUE`` (among those usable at the leaf). Only with GROW
        and PRUNE alone in `kinds`.

    Notes
    -----
    The steps, as in Chipman, George & McCulloch (1998): choose the kind
    (`_choose_kind`) and the node (`_choose_node`); a new rule from the
    prior (`draw_rule`); the log proposal ratio (`_log_proposal_ratio`,
    from the counts of eligible nodes in the proposed tree,
    `_counts_after_move`) and the log prior ratio (`_log_prior_terms`,
    `_swap_prior_terms`), as named terms; the cells for the sweep.

    A move changes the tree only at its node ``k`` (and for SWAP at ``k``'s
    child ``c``), so the proposed tree is not summarised again: its counts
    of eligible nodes and the split probabilities of its new leaves follow
    from the current tree around the node. ``tests/test_moves_fast.py``
    checks the result against `bartz.sampler.reference.propose_tree`.
    """
    heap_size = 2 * split_tree.shape[0]
    _check_r_birth(r_birth, kinds)
    if uniform_splits:
        log_s = np.zeros(log_s.shape, np.float32)
    slot = jnp.arange(heap_size, dtype=jnp.int32)
    u_move, u_split, u_node, u_var = u
    pick = functools.partial(bits.pick, kinds=kinds)
    now = tree_summary(var_tree, split_tree, max_split, p_nonterminal, move_probs, kinds, exhaustible)
    counts_now = tuple(now.counts[i] for i in range(4))
    possible = (counts_now[0] > 0) | (counts_now[1] > 0) | (counts_now[2] > 0) | (counts_now[3] > 0)
    kind, is_swap = _choose_kind(now.log_probs, u_move, kinds)
    n = _choose_node(now.words, counts_now, kind, is_swap, u_node)
    one = opaque_one(u_move)
    kind, n, possible = computed(one, kind, n, possible)
    nodes = _move_nodes(n, is_swap, heap_size, one)

    # the current tree around n, and the split prior there
    near = _around(now.words, n, heap_size)
    n_root = jnp.sum(max_split > 0)
    depth_n = level_of_node(n)
    prior = split_prior(p_nonterminal, n_root, depth_n, exhaustible)
    near_p_split = [prior.at(near.exhausted[i], level) for i, level in enumerate([0, 1, 1, 0])]

    # the rules on the path to n; k is n or its parent (SWAP: A = rule at k, B = rule at c)
    path = Path(*computed(one, *path_rules(var_tree, split_tree, max_split, log_s, n, depth_n)))
    depth_k = jnp.where(is_swap, depth_n - 1, depth_n)
    rule_a, rule_b = pair_rules(path, depth_n, depth_k)
    usable = usable_at(path, depth_k, max_split, one)
    rule_a, rule_b, usable, norms = rule_normalisers(rule_a, rule_b, usable, log_s, nodes.dc, one, uniform_splits)
    drawable, shift = usable, norms.shift
    if r_birth == 'all':
        drawable = max_split > 0
        shift = 0.0 if uniform_splits else finite_or_zero(jnp.max(jnp.where(drawable, log_s, -jnp.inf)))
    new_rule = draw_rule(path, depth_k, drawable, log_s, max_split, shift, u_var, u_split, one)
    if r_birth == 'all':  # a variable with no cut-point left at n gets one that empties a child, not 0 (no rule)
        new_rule = new_rule._replace(split=jnp.maximum(new_rule.split, 1))

    # the split probabilities of the nodes the move changes, in the proposed tree
    exhausted_k = jnp.where(is_swap, near.exhausted[4], near.exhausted[0])
    children_new = children_of_new_rule(prior, exhausted_k, new_rule)
    children_now = (near_p_split[1], near_p_split[2])
    swapped = swapped_rules(prior, exhausted_k, rule_a, rule_b, nodes.dc, norms.same_ab)
    leaves_now = [near_p_split[1], near_p_split[2], near_p_split[3]]

    counts_new = _counts_after_move(kind, pick, counts_now, near, n, children_new, near_p_split[0], swapped.leaves, heap_size)
    log_move, log_nodes = _log_proposal_ratio(kind, pick, kinds, move_probs, now.log_probs, counts_now, counts_new)
    grow_prior, prune_prior, change_prior = _log_prior_terms(near_p_split[0], children_now, children_new)
    swap_prior = _swap_prior_terms(rule_a, rule_b, swapped, norms, near_p_split[0], leaves_now)
    if r_birth is not None:
        grow_prior.update(_r_birth_terms(r_birth, n, near, usable, new_rule))
    terms = {
        'grow': {'move': log_move, 'node': log_nodes, **grow_prior},
        'prune': {'move': log_move, 'node': log_nodes, **prune_prior},
        'change': {'move': log_move, **change_prior},
        'swap': {'move': log_move, **swap_prior},
    }
    log_ratio = pick(kind, [_sum_terms(move, terms[move]) for move in MOVE_NAMES])

    cells = cell_tables(kind, possible, pick, nodes, slot, now.leaf, one)
    rules = _rules_to_set(kind, possible, pick, nodes, new_rule, rule_a, rule_b)
    return _as_moves(possible, kind, is_swap, nodes, new_rule, rule_b, log_ratio, cells, rules, now.leaf, entries)


def _check_r_birth(r_birth, kinds):
    if r_birth not in (None, 'all', 'usable'):
        msg = f"r_birth must be None, 'all' or 'usable', got {r_birth!r}"
        raise ValueError(msg)
    if r_birth is not None and (kinds[CHANGE] or kinds[SWAP]):
        msg = f'r_birth (R BART 2.9.9\'s birth/death sampler) needs GROW and PRUNE alone, got kinds={kinds}'
        raise ValueError(msg)


def _r_birth_terms(r_birth, n, near, usable, new_rule) -> dict:
    """GROW's terms of R BART 2.9.9's birth at leaf n (module notes):
    'r_variable', -inf for a variable with no usable cut-point at n
    (``'all'``: R refuses it), and 'r_nog', -log 2 when n's parent is the
    root of a two-leaf tree (R's count of the proposed tree's nodes with two
    leaf children is one too many there)."""
    terms = {'r_nog': jnp.where(((n >> 1) == 1) & near.leaf[3], -jnp.log(2.0), 0.0)}
    if r_birth == 'all':
        terms['r_variable'] = jnp.where(usable[new_rule.var], 0.0, -jnp.inf)
    return terms


def _as_moves(possible, kind, is_swap, nodes, new_rule, rule_b, log_ratio, cells, rules, leaf, entries) -> Moves:
    """The `Moves` of one tree from the proposal's parts; the small fields
    stacked, or with `entries` as tuples of their entries."""

    def output(values):
        return tuple(values) if entries else jnp.stack(values)

    set_node, set_var, set_split = rules
    return Moves(
        allowed=possible,
        kind=kind,
        node=jnp.where(possible, nodes.k, 1).astype(jnp.int32),
        var=jnp.where(is_swap, rule_b.var, new_rule.var),
        split=jnp.where(is_swap, rule_b.split, new_rule.split),
        log_ratio_tree=log_ratio.astype(jnp.float32),
        cell_of=cells['cell_of'],
        remap_leaf=output(cells['rows']),
        remap_cell=cells['remap_cell'],
        cells=output(cells['cells']),
        cell_old=output(cells['cell_old']),
        cell_new=output(cells['cell_new']),
        cell_fresh=output([cells['cell_fresh'][i] for i in range(4)]),
        identity=cells['identity'],
        leaf=leaf,
        new_leaf=jnp.where(possible, cells['new_leaf'], leaf),
        set_node=output(set_node),
        set_var=output(set_var),
        set_split=output(set_split),
    )


def _choose_kind(log_probs, u_move, kinds):
    """The kind of move, drawn by inverse cdf from the kinds' probabilities
    in the current tree; and whether it is SWAP (False if SWAP cannot be
    proposed at all)."""
    weight = jnp.exp(log_probs)
    s1 = weight[0] + weight[1]
    s2 = s1 + weight[2]
    cum = jnp.stack([weight[0], s1, s2, s2 + weight[3]])  # jnp.cumsum's order
    kind = first_above(cum, u_move * cum[3])
    is_swap = kind == SWAP if kinds[SWAP] else jnp.bool_(False)
    return kind, is_swap


def _choose_node(words, counts_now, kind, is_swap, u_node):
    """The node n, uniform among the eligible ones: a growable leaf (GROW),
    a node whose children are leaves (PRUNE, CHANGE), or for SWAP the child
    c of the pair (k, c)."""
    g_now, nog_now, _, swap_now = counts_now
    eligible = jnp.where(kind == GROW, words[GROWABLE], jnp.where(is_swap, words[SWAPPABLE], words[NOG]))
    num_eligible = jnp.where(kind == GROW, g_now, jnp.where(is_swap, swap_now, nog_now))
    return choose_set_bit(eligible, num_eligible, u_node)


def _move_nodes(n, is_swap, heap_size, one) -> MoveNodes:
    """The nodes the move acts on: k (n, or its parent for SWAP), c, k's
    children, c's side and sibling."""
    half = heap_size // 2
    k = jnp.where(is_swap, n >> 1, n)
    c = jnp.minimum(n, half - 1)
    left, right = jnp.minimum(2 * k, heap_size - 2), jnp.minimum(2 * k + 1, heap_size - 1)
    k, c, left, right = computed(one, k, c, left, right)
    dc = (c & 1).astype(bool)
    sib = c ^ 1
    return MoveNodes(n, k, c, left, right, dc, sib)


class _Near(NamedTuple):
    """Masks of the current tree at n, its children, sibling, parent and
    parent's sibling (for SWAP: c, its leaves, c's leaf sibling, k), ``(6,)``."""

    leaf: jax.Array  # bool
    nog: jax.Array  # int32
    swappable: jax.Array  # int32
    growable: jax.Array  # int32
    exhausted: jax.Array  # int32: number of exhausted predictors


def _around(words, n, heap_size) -> _Near:
    """The `_Near` masks around n, read from the packed summary `words`."""
    near = jnp.minimum(jnp.stack([n, 2 * n, 2 * n + 1, n ^ 1, n >> 1, (n >> 1) ^ 1]), heap_size - 1)
    at = bits_at(words, near)  # (F, 6)
    near_leaf = at[LEAF].astype(bool)
    near_nog = at[NOG]
    near_swappable = at[SWAPPABLE]
    near_growable = at[GROWABLE]
    near_exhausted = at[EXHAUSTED]
    for b in range(1, at.shape[0] - EXHAUSTED):
        near_exhausted = near_exhausted + (at[EXHAUSTED + b] << b)
    return _Near(near_leaf, near_nog, near_swappable, near_growable, near_exhausted)

def _counts_after_move(kind, pick, counts_now, near, n, children_new, p_split_k, swap_leaves, heap_size):
    """The numbers of eligible nodes of each kind in the proposed tree
    (growable leaves, nodes whose children are leaves for PRUNE and CHANGE,
    swappable pairs), from those now and the tree around n, entry by entry
    (as scalars: the proposal's stacks are kernels of their own, jaxlib
    0.10.2)."""

    def count(x):
        return x.astype(jnp.int32)

    g_now, nog_now, change_now, swap_now = counts_now
    growable_new_children = count(children_new[0].p > 0) + count(children_new[1].p > 0)
    sibling_leaf = (n > 1) & near.leaf[3]
    parent_swappable_after_prune = sibling_leaf & ((n >> 1) > 1) & near.leaf[5]
    nog_after_grow = nog_now + 1 - count(sibling_leaf)
    nog_after_prune = nog_now - 1 + count(sibling_leaf)
    small = heap_size <= 4
    after_grow = (
        g_now - near.growable[0] + growable_new_children,
        nog_after_grow,
        jnp.int32(0) if small else nog_after_grow,
        swap_now + count(sibling_leaf) - near.swappable[4] - near.swappable[3],
    )
    after_prune = (
        g_now - near.growable[1] - near.growable[2] + count(p_split_k.p > 0),
        nog_after_prune,
        jnp.int32(0) if small else nog_after_prune,
        swap_now - near.swappable[0] + near.nog[3] + count(parent_swappable_after_prune),
    )
    after_change = (g_now - near.growable[1] - near.growable[2] + growable_new_children, nog_now, change_now, swap_now)
    after_swap = (
        g_now
        - near.growable[1]
        - near.growable[2]
        - near.growable[3]
        + count(swap_leaves[0].p > 0)
        + count(swap_leaves[1].p > 0)
        + count(swap_leaves[2].p > 0),
        nog_now,
        change_now,
        swap_now,
    )
    return [pick(kind, list(values)) for values in zip(after_grow, after_prune, after_change, after_swap, strict=True)]


def _log_proposal_ratio(kind, pick, kinds, move_probs, log_probs_now, counts_now, counts_new):
    """The log proposal ratio, as two terms: 'move', the log probability of
    the reverse move's kind in the proposed tree (each kind is its own
    reverse but GROW and PRUNE) less that of the kind now; 'node' (GROW,
    PRUNE), the log number of nodes to choose from now less that for the
    reverse move."""
    g_now, nog_now = counts_now[0], counts_now[1]
    weight_new = [jnp.where((count > 0) & kinds[i], move_probs[i], 0.0) for i, count in enumerate(counts_new)]
    total_new = ((weight_new[0] + weight_new[1]) + weight_new[2]) + weight_new[3]
    reverse = pick(kind, [jnp.int32(PRUNE), jnp.int32(GROW), jnp.int32(CHANGE), jnp.int32(SWAP)])
    log_reverse_new = jnp.log(take_small(weight_new, reverse)) - jnp.log(jnp.where(total_new > 0, total_new, 1.0))
    log_kind_now = take_small(log_probs_now, kind)
    log_move = log_reverse_new - log_kind_now
    log_nodes = jnp.log(jnp.where(kind == GROW, g_now, nog_now).astype(jnp.float32)) - jnp.log(
        take_small(counts_new, reverse).astype(jnp.float32)
    )
    return log_move, log_nodes


def _log_prior_terms(p_split_k, children_now, children_new):
    """The log prior ratio of GROW, PRUNE and CHANGE, as named terms: 'split',
    k becomes internal (GROW) or a leaf (PRUNE); 'children', k's children
    are leaves in the proposed tree (GROW, CHANGE) or not any more (PRUNE,
    CHANGE). CHANGE has no rule term: the rule's proposal is its prior, so
    they cancel."""
    (left_now, right_now), (left_new, right_new) = children_now, children_new
    grow = {
        'split': p_split_k.log - p_split_k.log_not,
        'children': left_new.log_not + right_new.log_not,
    }
    prune = {
        'split': p_split_k.log_not - p_split_k.log,
        'children': -left_now.log_not - right_now.log_not,
    }
    change = {
        'children': left_new.log_not + right_new.log_not - left_now.log_not - right_now.log_not,
    }
    return grow, prune, change


def _swap_prior_terms(rule_a, rule_b, swapped, norms, p_split_c_now, leaves_now):
    """The log prior ratio of SWAP, as named terms: the rules at k
    ('rule_parent': the normaliser at k cancels) and at c ('rule_child'),
    c's split probability ('split_child') and its leaves' and its
    sibling's ('leaves'). The pair is chosen uniformly among the same pairs
    both ways, so the proposal ratio is the kinds' only."""
    leaves = [new.log_not - old.log_not for new, old in zip(swapped.leaves, leaves_now, strict=True)]
    a_at_c, b_at_c = swapped.rule_a_at_c, swapped.rule_b_at_c
    return {
        'rule_parent': rule_log_prior(rule_b.lo, rule_b.hi, rule_b.log_s, 0.0, rule_b.split)
        - rule_log_prior(rule_a.lo, rule_a.hi, rule_a.log_s, 0.0, rule_a.split),
        'rule_child': rule_log_prior(a_at_c.lo, a_at_c.hi, rule_a.log_s, norms.log_norm_c_new, rule_a.split)
        - rule_log_prior(b_at_c.lo, b_at_c.hi, rule_b.log_s, norms.log_norm_c, rule_b.split),
        'split_child': swapped.p_split_c.log - p_split_c_now.log,
        'leaves': (leaves[0] + leaves[1]) + leaves[2],
    }


def _rules_to_set(kind, possible, pick, nodes, new_rule, rule_a, rule_b):
    """The nodes whose rule changes if the move is accepted and their new
    rules (variable and split index 0 for a node that becomes a leaf)."""
    zero = jnp.int32(0)
    k, c = nodes.k, nodes.c
    var, split = new_rule.var, new_rule.split
    set_node = picked(kind, possible, pick, (k, k), (k, k), (k, k), (k, c), unused=zero)
    set_var = picked(kind, possible, pick, (var, var), (zero, zero), (var, var), (rule_b.var, rule_a.var), unused=zero)
    set_split = picked(
        kind, possible, pick, (split, split), (zero, zero), (split, split), (rule_b.split, rule_a.split), unused=zero
    )
    return set_node, set_var, set_split
