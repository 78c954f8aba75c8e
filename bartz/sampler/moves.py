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

from bartz.forest import grove

GROW, PRUNE, CHANGE, SWAP = 0, 1, 2, 3
MOVE_NAMES = ('grow', 'prune', 'change', 'swap')
DEFAULT_MOVE_PROBS = {'grow': 0.25, 'prune': 0.25, 'change': 0.4, 'swap': 0.1}
ALL_KINDS = (True, True, True, True)

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


# A note on speed. `propose_tree` runs under a vmap over the trees, on arrays
# of a few dozen entries per tree, so on CPU its cost is the number of XLA
# kernels, not arithmetic: every reduction (or argmax, cumsum, gather) is a
# kernel, while element-wise code fuses. So reductions over the few levels of
# a path, the 4 kinds or the blocks of a cumulative sum are written out as
# element-wise code, boolean masks over the heap are packed into 32-bit words
# (counts are population counts, lookups are shifts), and the proposed tree
# is not summarised again: a move changes the summary only around its node.


def _computed(one, *values):
    """`values`, each computed once: XLA fuses cheap element-wise code into
    every kernel that uses it, so a long chain of scalar operations used by
    many kernels is recomputed in each. A division is expensive in XLA's
    fusion rules, so dividing by `one`, a 1 that XLA cannot see is constant,
    makes it compute the value in a kernel of its own.

    Values of one shape and kind (integers and booleans as int32, floats
    by their type) are stacked and divided together: one kernel for the
    group instead of one per value (each a kernel's compile time; about
    12 kernels fewer in the sampler's program), the same values."""
    groups = {}
    for i, value in enumerate(values):
        floating = jnp.issubdtype(value.dtype, jnp.floating)
        kind = value.dtype if floating or value.dtype not in (jnp.bool_, jnp.int32) else jnp.int32
        groups.setdefault((value.shape, kind), []).append(i)
    out = [None] * len(values)
    for (_, kind), members in groups.items():
        stacked = jnp.stack([values[i].astype(kind) for i in members])
        if jnp.issubdtype(kind, jnp.floating):
            stacked = stacked / one.astype(kind)
        else:
            stacked = jax.lax.div(stacked, one.astype(kind))
        for row, i in enumerate(members):
            out[i] = stacked[row] if values[i].dtype != jnp.bool_ else stacked[row].astype(bool)
    return tuple(out)


def _levels(half: int) -> int:
    """Number of levels of internal nodes (at least 1, for the tables)."""
    return max(half.bit_length() - 1, 1)


def _on_ancestors(x, num_nodes):
    """``x[anc[k, j]]`` (0 where ``j`` is not a proper ancestor level) for the
    first `num_nodes` nodes, shape ``(num_nodes, L)``, from the per-node
    ``x`` of shape ``(H/2,)``: slices and repeats, not a gather."""
    levels = _levels(x.shape[0])
    zero = jnp.zeros((), x.dtype)
    rows = [jnp.zeros((1, levels), x.dtype)]  # node 0
    d = 0
    while 2**d < num_nodes:
        width = 2**d
        cols = [
            jnp.repeat(x[2**j : 2 ** (j + 1)], 2 ** (d - j)) if j < d else jnp.broadcast_to(zero, (width,))
            for j in range(levels)
        ]
        rows.append(jnp.stack(cols, axis=1))
        d += 1
    return jnp.concatenate(rows)[:num_nodes]


def _down_the_tree(x):
    """Sum of ``x`` over each node and its proper ancestors, shape ``(H,)``."""
    heap_size = x.shape[0]
    out = [x[:1], x[1:2]]
    d = 1
    while 2**d < heap_size:
        out.append(x[2**d : 2 ** (d + 1)] + jnp.repeat(out[-1], 2))
        d += 1
    return jnp.concatenate(out)


def num_exhausted(var_tree, split_tree, max_split, heap_size):
    """Number of predictors with no usable split index left at each node.

    A predictor is exhausted at a node when the splits on it along the path
    leave no split index between them; it stays exhausted below. Only the
    parent's split variable can become exhausted at a child, so the count
    accumulates along the path: O(H * depth) per tree, independent of p.
    """
    _, valid, right = _ancestor_tables(heap_size)
    half = heap_size // 2
    var = var_tree.astype(jnp.int32)
    cut = split_tree.astype(jnp.int32)
    # range of each internal node's own split variable at that node
    path_var = _on_ancestors(var, half)  # (H/2, L)
    path_cut = _on_ancestors(cut, half)
    top = max_split[var]
    lo, hi = jnp.zeros_like(cut), top
    for j in range(path_var.shape[1]):
        same = (path_var[:, j] == var) & valid[:half, j]
        lo = jnp.maximum(lo, jnp.where(same & right[:half, j], path_cut[:, j], 0))
        hi = jnp.minimum(hi, jnp.where(same & ~right[:half, j], path_cut[:, j] - 1, top))
    # the variable is newly exhausted at the left child if no index is left
    # in [lo + 1, cut - 1], at the right child if none in [cut + 1, hi]
    left_exhausted = cut - 1 <= lo
    right_exhausted = hi <= cut
    newly = jnp.stack([left_exhausted, right_exhausted], axis=1).reshape(heap_size)  # node 2k + r
    newly = newly & (jnp.arange(heap_size) > 1)  # nodes 0 and 1 have no parent split
    return _down_the_tree(newly.astype(jnp.int32))


def _depth(node):
    """Level of `node` in the heap (0 for nodes 0 and 1)."""
    return 31 - jax.lax.clz(jnp.maximum(node, 1).astype(jnp.int32))


class _Path(NamedTuple):
    """The rules on the path to a node, level by level (``(L,)`` arrays)."""

    var: jax.Array  # int32: variable of the ancestor at each level (the node itself at its level)
    cut: jax.Array  # int32: its split index
    right: jax.Array  # bool: the path turns right there
    top: jax.Array  # int32: max_split of the variable
    log_s: jax.Array  # float32: log_s of the variable


def _path(var_tree, split_tree, max_split, log_s, node, depth) -> _Path:
    half = split_tree.shape[0]
    level = jnp.arange(_levels(half), dtype=jnp.int32)
    up = depth - level
    anc = jnp.clip(node >> jnp.maximum(up, 0), 0, half - 1)
    right = ((node >> jnp.maximum(up - 1, 0)) & 1).astype(bool)
    rule = (var_tree.astype(jnp.int32) << 16) | split_tree.astype(jnp.int32)  # one gather for both
    rule = rule[anc]
    var = rule >> 16
    table = jnp.stack([max_split.astype(jnp.float32), log_s], axis=1)[var]  # exact below 2**24
    return _Path(var, rule & 0xFFFF, right, table[:, 0].astype(jnp.int32), table[:, 1])


def _range_on_path(path: _Path, num_levels, var, top):
    """Usable split indices ``lo + 1 .. hi`` of `var` (with `top` =
    ``max_split[var]``) below the first `num_levels` rules of `path`; `var`
    and `top` may be arrays of the same shape (one range each)."""
    var, top = jnp.asarray(var)[..., None], jnp.asarray(top)[..., None]
    same = (path.var == var) & (jnp.arange(path.var.shape[0]) < num_levels)
    lo = jnp.max(jnp.where(same & path.right, path.cut, 0), axis=-1)
    hi = jnp.min(jnp.where(same & ~path.right, path.cut - 1, top), axis=-1)
    return lo, hi


def _exhausted_on_path(path: _Path, num_levels):
    """Whether the variable of each rule of `path` is exhausted below the
    first `num_levels` rules, ``(L,)``: only these variables can be (the
    others are usable iff their ``max_split`` is positive)."""
    lo, hi = _range_on_path(path, num_levels, path.var, path.top)
    return (jnp.arange(path.var.shape[0]) < num_levels) & (hi <= lo)


class _SplitProb(NamedTuple):
    """Prior probability that a node is internal, and its logs."""

    p: jax.Array
    log: jax.Array  # log p
    log_not: jax.Array  # log(1 - p)


def node_ranges(var_tree, split_tree, max_split, node):
    """Usable split indices ``lo + 1 .. hi`` of every predictor at `node`,
    given the rules of its ancestors: two ``(p,)`` int32 arrays."""
    p = max_split.shape[0]
    depth = _depth(node)
    path = _path(var_tree, split_tree, max_split, jnp.zeros(p), node, depth)
    return _range_on_path(path, depth, jnp.arange(p), max_split)


def log_rule_prior(lo, hi, log_s, var, split):
    """Log prior probability of the rule ``(var, split)`` at a node with
    usable ranges ``lo, hi``: the variable's split probability among the
    usable predictors, times 1 / (number of its usable split indices); -inf
    if the split index is not usable there."""
    log_norm = jax.scipy.special.logsumexp(jnp.where(hi > lo, log_s, -jnp.inf))
    return _rule_log_prior(lo[var], hi[var], log_s[var], log_norm, split)


def _rule_log_prior(lo_var, hi_var, log_s_var, log_norm, split):
    """`log_rule_prior` from the variable's range and log split probability
    and the log normaliser of the split probabilities at the node."""
    ok = (lo_var < split) & (split <= hi_var) & jnp.isfinite(log_s_var)
    width = (hi_var - lo_var).astype(jnp.float32)
    value = log_s_var - log_norm - jnp.log(jnp.where(ok, width, 1.0))
    return jnp.where(ok, value, -jnp.inf)


def _finite_or_zero(x):
    return jnp.where(jnp.isfinite(x), x, 0.0)


def _cumsum_like_xla(x):
    """``jnp.cumsum(x)`` of a short 1-d `x` with the same rounding on CPU:
    XLA sums sequentially within blocks of 16 and adds the cumulative sums
    of the blocks' totals (the same way, recursively)."""
    size = x.shape[0]
    if size <= 16:
        out = [x[0]]
        for i in range(1, size):
            out.append(out[-1] + x[i])
        return jnp.stack(out)
    num = -(-size // 16)
    blocks = jnp.pad(x, (0, 16 * num - size)).reshape(num, 16)
    inner = [blocks[:, 0]]
    for i in range(1, 16):
        inner.append(inner[-1] + blocks[:, i])
    inner = jnp.stack(inner, axis=1)
    totals = _cumsum_like_xla(inner[:, -1])
    before = jnp.concatenate([jnp.zeros(1, x.dtype), totals[:-1]])
    return (before[:, None] + inner).reshape(-1)[:size]


def _choose_variable(usable, log_s, max_split, shift, u):
    """A variable drawn with probability proportional to ``where(usable,
    exp(log_s - shift), 0)`` by inverse cdf, ``argmax(cumsum(weight) > u *
    sum(weight))`` (0 if all are 0), and its ``max_split``.

    The cumulative sums are those of `jnp.cumsum` on CPU, in blocks of 16
    (`_cumsum_like_xla`), so the draw is the same, but only the blocks'
    totals and the block of the draw are summed, element-wise."""
    p = log_s.shape[0]
    block = min(p, 16)
    num = -(-p // block)
    pad = num * block - p
    weight = jnp.where(usable, jnp.exp(log_s - shift), 0.0)
    weight = jnp.pad(weight, (0, pad)).reshape(num, block)
    tops = jnp.pad(max_split, (0, pad)).reshape(num, block)
    totals = weight[:, 0]
    for i in range(1, block):
        totals = totals + weight[:, i]
    if num > 1:
        totals = _cumsum_like_xla(totals)
    total = totals[num - 1]
    threshold = u * total
    # the block of the first cumulative sum above the threshold, and the sum before it
    which = jnp.int32(0)
    before = jnp.float32(0.0)
    for b in range(num - 1):
        below = totals[b] <= threshold
        which = which + below
        before = jnp.where(below, totals[b], before)
    row, row_tops = weight[0], tops[0]
    for b in range(1, num):
        row = jnp.where(which == b, weight[b], row)
        row_tops = jnp.where(which == b, tops[b], row_tops)
    inner = row[0]
    index = (before + inner <= threshold).astype(jnp.int32)
    top = row_tops[0]
    for i in range(1, block):
        inner = inner + row[i]
        top = jnp.where(index == i, row_tops[i], top)
        index = index + (before + inner <= threshold)
    found = total > threshold
    var = jnp.where(found, which * block + index, 0)
    return var, jnp.where(found, top, max_split[0])


class _Summary(NamedTuple):
    leaf: jax.Array  # (H,) bool
    words: jax.Array  # (F, W) uint32: the masks below (rows _LEAF, ...), bit k % 32 of word k // 32 for node k
    counts: jax.Array  # (4,) int32: eligible nodes of each kind
    log_probs: jax.Array  # (4,) float32: log probability of each kind


# rows of `_Summary.words`: leaves, nodes whose children are leaves, such
# nodes (not the root) with a leaf sibling, growable leaves, then the bits
# of `num_exhausted`
_LEAF, _NOG, _SWAPPABLE, _GROWABLE, _EXHAUSTED = range(5)


def _exhausted_bits(heap_size: int) -> int:
    return max(heap_size.bit_length() - 2, 1).bit_length()


def _eligible(counts, kinds):
    """The kinds with an eligible node, among the static `kinds`."""
    return counts > 0 if all(kinds) else (counts > 0) & np.array(kinds)


def _log_probs(counts, move_probs, kinds):
    """Log probability of each kind of move given the eligible counts (and
    the static `kinds` that can be proposed at all)."""
    weight = jnp.where(_eligible(counts, kinds), move_probs, 0.0)
    total = ((weight[0] + weight[1]) + weight[2]) + weight[3]
    return jnp.log(weight) - jnp.log(jnp.where(total > 0, total, 1.0))


def _pack(masks):
    """Pack ``(F, H)`` bool masks into ``(F, W)`` uint32 words, bit ``i % 32``
    of word ``i // 32`` for slot ``i``."""
    num, size = masks.shape
    bits = min(size, 32)
    shifted = masks.reshape(num, size // bits, bits).astype(jnp.uint32) << jnp.arange(bits, dtype=jnp.uint32)
    return jnp.sum(shifted, axis=-1, dtype=jnp.uint32)


def _bits_at(words, index):
    """The bits of the packed masks `words` ``(F, W)`` at the slots `index`
    ``(n,)``: ``(F, n)`` int32."""
    word = words[:, :1]
    for i in range(1, words.shape[1]):
        word = jnp.where((index >> 5) == i, words[:, i : i + 1], word)
    return ((word >> (index & 31).astype(jnp.uint32)) & 1).astype(jnp.int32)


def _popcount(words):
    """Number of set bits of each row of ``(..., W)`` words, int32."""
    counts = jax.lax.population_count(words).astype(jnp.int32)
    total = counts[..., 0]
    for i in range(1, words.shape[-1]):
        total = total + counts[..., i]
    return total


def _spread(x):
    """Bits 0..15 of the uint32 `x` moved to the even bits 0, 2, .., 30."""
    x = x & 0xFFFF
    x = (x | (x << 8)) & 0x00FF00FF
    x = (x | (x << 4)) & 0x0F0F0F0F
    x = (x | (x << 2)) & 0x33333333
    return (x | (x << 1)) & 0x55555555


def _compact(x):
    """The even bits 0, 2, .., 30 of the uint32 `x` moved to bits 0..15."""
    x = x & 0x55555555
    x = (x | (x >> 1)) & 0x33333333
    x = (x | (x >> 2)) & 0x0F0F0F0F
    x = (x | (x >> 4)) & 0x00FF00FF
    return (x | (x >> 8)) & 0x0000FFFF


def _unpack(words, size):
    """The first `size` bits of packed `words` ``(W,)`` as a bool mask."""
    slot = np.arange(size)
    return ((jnp.repeat(words, 32)[:size] >> (slot % 32).astype(np.uint32)) & 1).astype(bool)


def _summary(var_tree, split_tree, max_split, p_nonterminal, move_probs, kinds, exhaustible=None) -> _Summary:
    """The eligible nodes of the current tree, as bit masks over the heap.

    From the packed mask of internal nodes (a node exists if its parent,
    ``k >> 1``, is internal; bit ``k`` of the heap's words), with bit
    operations on a few words per tree. `exhaustible`: as in `propose_tree`."""
    half = split_tree.shape[0]
    heap_size = 2 * half
    num_words = max(heap_size // 32, 1)
    depth_of = grove.node_depths(heap_size)
    internal = _pack(split_tree[None] != 0)[0]  # (max(H/64, 1),), bit k for node k
    words_of_internal = [internal[w] if w < internal.shape[0] else jnp.uint32(0) for w in range(num_words)]
    evens = jnp.uint32(0x55555555)
    leaf, nog_pairs = [], []
    for w in range(num_words):
        # heap word w holds the nodes 32w .. 32w + 31, children of 16w .. 16w + 15
        parents = internal[w // 2] >> (16 * (w % 2)) if half >= 32 else internal[0]
        exists = _spread(parents) * 3 | (2 if w == 0 else 0)  # node 1 always exists
        leaf.append(exists & ~words_of_internal[w])
        nog_pairs.append(_compact(leaf[w] & (leaf[w] >> 1)) << (16 * (w % 2)))
    nog = [jnp.uint32(0)] * num_words
    for w in range(num_words):
        nog[w // 2] = nog[w // 2] | nog_pairs[w]
    nog = [words_of_internal[w] & nog[w] for w in range(num_words)]
    # bit k of sibling_leaf[w] is the leaf bit of node k ^ 1
    sibling_leaf = [((x >> 1) & evens) | ((x & evens) << 1) for x in leaf]
    swappable = [nog[w] & sibling_leaf[w] & (~jnp.uint32(3) if w == 0 else ~jnp.uint32(0)) for w in range(num_words)]
    # the nodes with some predictor left (where p_split > 0 if their level
    # allows splits). At most D - 1 predictors are exhausted at a node, so
    # with at least D the counts need not be computed
    n_root = jnp.sum(max_split > 0)
    level_ok = p_nonterminal[depth_of] > 0
    num_bits = _exhausted_bits(heap_size)

    def no_count():
        return _pack(level_ok[None])[0], jnp.zeros((num_bits, num_words), jnp.uint32)

    def count():
        exhausted = num_exhausted(var_tree, split_tree, max_split, heap_size)
        bits = [((exhausted >> b) & 1).astype(bool) for b in range(num_bits)]
        words = _pack(jnp.stack([level_ok & (n_root - exhausted > 0), *bits]))
        return words[0], words[1:]

    if exhaustible is None:
        splittable, exhausted_bits = jax.lax.cond(n_root >= heap_size.bit_length() - 1, no_count, count)
    else:  # (only the way taken is compiled)
        splittable, exhausted_bits = count() if exhaustible else no_count()
    growable = [leaf[w] & splittable[w] for w in range(num_words)]
    words = jnp.concatenate([jnp.stack([w for x in (leaf, nog, swappable, growable) for w in x]).reshape(4, num_words), exhausted_bits])
    count = _popcount(words)
    num_nog = count[_NOG]
    counts = jnp.stack([count[_GROWABLE], num_nog, num_nog if heap_size > 4 else jnp.int32(0), count[_SWAPPABLE]])
    return _Summary(_unpack(words[_LEAF], heap_size), words, counts, _log_probs(counts, move_probs, kinds))


def _choose(words, count, u):
    """Index of a uniformly chosen set bit of the packed mask `words` with
    `count` bits set (0 if none), from one uniform ``u`` in (0, 1): the
    ``floor(u * count)``-th set bit, found by bisection on population
    counts."""
    rank = jnp.minimum(jnp.floor(u * count).astype(jnp.int32), count - 1)
    # the word of the entry, and its rank in it
    counts = jax.lax.population_count(words).astype(jnp.int32)
    word, base, r = words[0], jnp.int32(0), rank
    before = counts[0]
    for i in range(1, words.shape[0]):
        later = rank >= before
        word = jnp.where(later, words[i], word)
        base = jnp.where(later, 32 * i, base)
        r = jnp.where(later, rank - before, r)
        before = before + counts[i]
    pos = jnp.int32(0)
    width = 32
    while width > 1:
        width //= 2
        low = jax.lax.population_count(word & jnp.uint32((1 << width) - 1)).astype(jnp.int32)
        up = r >= low
        r = jnp.where(up, r - low, r)
        word = jnp.where(up, word >> width, word)
        pos = jnp.where(up, pos + width, pos)
    return jnp.where(count > 0, base + pos, 0)


def _first_above(cum, threshold):
    """``argmax(cum > threshold)`` for a short non-decreasing `cum`."""
    index = jnp.int32(0)
    for i in range(cum.shape[0]):
        index = index + (cum[i] <= threshold)
    return jnp.where(cum[-1] > threshold, index, 0)


def _take_small(table, index):
    """``table[index]`` for a short table (or list of scalars), as selects."""
    out = table[0]
    for i in range(1, len(table)):
        out = jnp.where(index == i, table[i], out)
    return out


def _pick(kind, values, kinds):
    """``values[kind]`` for a list of 4 arrays of the same shape, as selects,
    among the `kinds` that can be proposed (the values of the others are
    not used, so XLA drops the code that computes them)."""
    enabled = [i for i in range(len(values)) if kinds[i]]
    out = values[enabled[-1]]
    for i in reversed(enabled[:-1]):
        out = jnp.where(kind == i, values[i], out)
    return out


def _sum_terms(move, terms):
    total = 0.0
    for name, value in terms.items():
        factor = _TERM_SCALE.get((move, name), 1.0)
        total = total + value * factor + _TERM_PERTURBATION.get((move, name), 0.0)
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
        program: with GROW and PRUNE alone the optimised proposal is about
        40% smaller (200 trees of depth 6).
    entries
        Static: return the small integer fields (``remap_leaf``, ``cells``,
        ``cell_old``, ``cell_new``, ``cell_fresh``, ``set_*``) as tuples of
        their entries, for a caller that vmaps this function and stacks
        them along the trees' axis itself (`bartz.mcmcstep.propose_moves`):
        stacked here, under vmap, each is a kernel of its own and a
        transposing copy; stacked after it, XLA fuses them into their users.
    exhaustible
        Static: whether fewer predictors have cut-points than the tree has
        levels, so that all of them can be exhausted at a node, which the
        proposal must then count (`bartz.mcmcstep.MoveKinds`); None: it
        checks at run time (both ways compiled).
    uniform_splits
        Static: `log_s` is all 0 (uniform split probabilities): it is
        taken as constants, which XLA folds, and the maxima that shift its
        exponentials are 0 too (fewer kernels).

    Notes
    -----
    A move changes the tree only at its node ``k`` (and for SWAP at ``k``'s
    child ``c``), so the proposed tree is not summarised again: its counts
    of eligible nodes and the split probabilities of its new leaves follow
    from the current tree around the node. ``tests/test_moves_fast.py``
    checks the result against a direct implementation.
    """
    half = split_tree.shape[0]
    heap_size = 2 * half
    p = max_split.shape[0]
    if uniform_splits:
        log_s = np.zeros(log_s.shape, np.float32)
    slot = jnp.arange(heap_size, dtype=jnp.int32)
    u_move, u_split, u_node, u_var = u
    pick = functools.partial(_pick, kinds=kinds)
    now = _summary(var_tree, split_tree, max_split, p_nonterminal, move_probs, kinds, exhaustible)
    g_now, nog_now, change_now, swap_now = (now.counts[i] for i in range(4))
    possible = (g_now > 0) | (nog_now > 0) | (change_now > 0) | (swap_now > 0)
    weight = jnp.exp(now.log_probs)
    s1 = weight[0] + weight[1]
    s2 = s1 + weight[2]
    cum = jnp.stack([weight[0], s1, s2, s2 + weight[3]])  # jnp.cumsum's order
    kind = _first_above(cum, u_move * cum[3])
    is_swap = kind == SWAP if kinds[SWAP] else jnp.bool_(False)

    # the node n: a growable leaf, a node whose children are leaves, or for
    # SWAP the child c of the pair (k, c)
    words = now.words
    eligible = jnp.where(kind == GROW, words[_GROWABLE], jnp.where(is_swap, words[_SWAPPABLE], words[_NOG]))
    num_eligible = jnp.where(kind == GROW, g_now, jnp.where(is_swap, swap_now, nog_now))
    n = _choose(eligible, num_eligible, u_node)
    one = 1 + (u_move < 0).astype(jnp.int32)  # see _computed
    kind, n, possible = _computed(one, kind, n, possible)
    k = jnp.where(is_swap, n >> 1, n)
    c = jnp.minimum(n, half - 1)
    left, right = jnp.minimum(2 * k, heap_size - 2), jnp.minimum(2 * k + 1, heap_size - 1)
    k, c, left, right = _computed(one, k, c, left, right)
    dc = (c & 1).astype(bool)
    sib = c ^ 1

    # the current tree around n: n, its children, sibling, parent and
    # parent's sibling (for SWAP: c, its leaves, c's leaf sibling, k)
    near = jnp.minimum(jnp.stack([n, 2 * n, 2 * n + 1, n ^ 1, n >> 1, (n >> 1) ^ 1]), heap_size - 1)
    bits = _bits_at(words, near)  # (F, 6)
    near_leaf = bits[_LEAF].astype(bool)
    near_nog = bits[_NOG]
    near_swappable = bits[_SWAPPABLE]
    near_growable = bits[_GROWABLE]
    near_exhausted = bits[_EXHAUSTED]
    for b in range(1, bits.shape[0] - _EXHAUSTED):
        near_exhausted = near_exhausted + (bits[_EXHAUSTED + b] << b)
    n_root = jnp.sum(max_split > 0)
    depth_n = _depth(n)

    # the logs of the split probabilities from tables (one log per level for
    # all trees)
    tables = (p_nonterminal, jnp.log(p_nonterminal), jnp.log1p(-p_nonterminal))
    at_level_n = _SplitProb(*(_take_small(table, depth_n) for table in tables))
    at_level_below = _SplitProb(*(_take_small(table, depth_n + 1) for table in tables))

    def p_split_at(exhausted, level):
        """The split probability of a node at the level of n (`level` 0) or
        below (1) with `exhausted` predictors."""
        p, log_p, log_not_p = (at_level_n, at_level_below)[level]
        if exhaustible is False:
            # every node keeps a predictor (but at the bottom level, where
            # p is 0 anyway): the counts of exhausted predictors are not
            # computed (zero) and the code that adds to them is dropped
            return _SplitProb(p, log_p, log_not_p)
        ok = n_root - exhausted > 0
        return _SplitProb(jnp.where(ok, p, 0.0), jnp.where(ok, log_p, -jnp.inf), jnp.where(ok, log_not_p, 0.0))

    near_p_split = [p_split_at(near_exhausted[i], level) for i, level in enumerate([0, 1, 1, 0])]

    # the rules on the path to n; k is n or its parent (SWAP: A = rule at k, B = rule at c)
    path = _computed(one, *_path(var_tree, split_tree, max_split, log_s, n, depth_n))
    path = _Path(*path)
    depth_k = jnp.where(is_swap, depth_n - 1, depth_n)
    level_a = jnp.maximum(depth_n - 1, 0)
    var_a, split_a = _take_small(path.var, level_a), _take_small(path.cut, level_a)
    top_a, log_s_a = _take_small(path.top, level_a), _take_small(path.log_s, level_a)
    var_b, split_b = _take_small(path.var, depth_n), _take_small(path.cut, depth_n)
    top_b, log_s_b = _take_small(path.top, depth_n), _take_small(path.log_s, depth_n)
    # (both ranges in one reduction each: a kernel fewer)
    lo_ab, hi_ab = _range_on_path(path, depth_k, jnp.stack([var_a, var_b]), jnp.stack([top_a, top_b]))
    (lo_a, lo_b), (hi_a, hi_b) = lo_ab, hi_ab
    gone = _exhausted_on_path(path, depth_k)
    (gone,) = _computed(one, gone)
    usable = max_split > 0
    for j in range(gone.shape[0]):
        usable = usable & ~(gone[j] & (jnp.arange(p) == path.var[j]))

    def exhausts(split, lo, hi, to_right):
        """Whether the rule leaves no split index in the child on that side."""
        return jnp.where(to_right, hi <= split, split - 1 <= lo)

    # the usable predictors at c, now and in the proposed tree, differ from
    # those at k at most in the variable of k's rule; `rest` are the usable
    # ones at both
    gone_a = (hi_a > lo_a) & exhausts(split_a, lo_a, hi_a, dc)
    gone_b = (hi_b > lo_b) & exhausts(split_b, lo_b, hi_b, dc)
    var_a, var_b, gone_a, gone_b, usable = _computed(one, var_a, var_b, gone_a, gone_b, usable)
    var_p = jnp.arange(p)
    rest = usable & ~((var_p == var_a) & gone_a) & ~((var_p == var_b) & gone_b)
    if uniform_splits:  # (the maxima below are 0 or, if none is usable, -inf made 0)
        shift = shift_rest = 0.0
    else:
        shift = _finite_or_zero(jnp.max(jnp.where(usable, log_s, -jnp.inf)))
        shift_rest = _finite_or_zero(jnp.max(jnp.where(rest, log_s, -jnp.inf)))
    log_norm_rest = jnp.log(jnp.sum(jnp.where(rest, jnp.exp(log_s - shift_rest), 0.0))) + shift_rest
    same_ab = var_a == var_b
    log_norm_c = jnp.logaddexp(log_norm_rest, jnp.where(gone_b & ~(gone_a & same_ab), log_s_b, -jnp.inf))
    log_norm_c_new = jnp.logaddexp(log_norm_rest, jnp.where(gone_a & ~(gone_b & same_ab), log_s_a, -jnp.inf))

    # a new rule at k from the prior (GROW, CHANGE)
    var, top = _computed(one, *_choose_variable(usable, log_s, max_split, shift, u_var))
    lo_v, hi_v = _range_on_path(path, depth_k, var, top)
    split = lo_v + 1 + jnp.floor(u_split * (hi_v - lo_v)).astype(jnp.int32)
    split = jnp.minimum(split, hi_v)

    # counts and split probabilities in the proposed tree
    exhausted_k = jnp.where(is_swap, near_exhausted[4], near_exhausted[0])
    # GROW, CHANGE: the new rule at k, whose children are leaves
    p_split_left_new = p_split_at(exhausted_k + exhausts(split, lo_v, hi_v, False), 1)
    p_split_right_new = p_split_at(exhausted_k + exhausts(split, lo_v, hi_v, True), 1)
    p_split_k = near_p_split[0]
    p_split_left, p_split_right = near_p_split[1], near_p_split[2]
    # SWAP: rule B at k, rule A at c; c's range of var_a is k's narrowed by B
    exhausted_c_new = exhausted_k + exhausts(split_b, lo_b, hi_b, dc)
    lo_a_c_new = jnp.where(same_ab & dc, jnp.maximum(lo_a, split_b), lo_a)
    hi_a_c_new = jnp.where(same_ab & ~dc, jnp.minimum(hi_a, split_b - 1), hi_a)
    lo_b_c = jnp.where(same_ab & dc, jnp.maximum(lo_b, split_a), lo_b)
    hi_b_c = jnp.where(same_ab & ~dc, jnp.minimum(hi_b, split_a - 1), hi_b)
    p_split_c_new = p_split_at(exhausted_c_new, 0)
    leaves_new = [  # 2c, 2c + 1, sibling
        p_split_at(exhausted_c_new + exhausts(split_a, lo_a_c_new, hi_a_c_new, False), 1),
        p_split_at(exhausted_c_new + exhausts(split_a, lo_a_c_new, hi_a_c_new, True), 1),
        p_split_at(exhausted_k + exhausts(split_b, lo_b, hi_b, ~dc), 0),
    ]
    leaves_now = [near_p_split[1], near_p_split[2], near_p_split[3]]

    # the proposed tree's counts (growable, nog, change, swappable)
    def count(x):
        return x.astype(jnp.int32)

    growable_new_children = count(p_split_left_new.p > 0) + count(p_split_right_new.p > 0)
    sibling_leaf = (n > 1) & near_leaf[3]
    parent_swappable_after_prune = sibling_leaf & ((n >> 1) > 1) & near_leaf[5]
    nog_after_grow = nog_now + 1 - count(sibling_leaf)
    nog_after_prune = nog_now - 1 + count(sibling_leaf)
    small = heap_size <= 4
    # (entry by entry, as scalars: the proposal's stacks are kernels of their own)
    counts_new = [
        pick(kind, list(values))
        for values in zip(
            (
                g_now - near_growable[0] + growable_new_children,
                nog_after_grow,
                jnp.int32(0) if small else nog_after_grow,
                swap_now + count(sibling_leaf) - near_swappable[4] - near_swappable[3],
            ),
            (
                g_now - near_growable[1] - near_growable[2] + count(p_split_k.p > 0),
                nog_after_prune,
                jnp.int32(0) if small else nog_after_prune,
                swap_now - near_swappable[0] + near_nog[3] + count(parent_swappable_after_prune),
            ),
            (g_now - near_growable[1] - near_growable[2] + growable_new_children, nog_now, change_now, swap_now),
            (
                g_now
                - near_growable[1]
                - near_growable[2]
                - near_growable[3]
                + count(leaves_new[0].p > 0)
                + count(leaves_new[1].p > 0)
                + count(leaves_new[2].p > 0),
                nog_now,
                change_now,
                swap_now,
            ),
            strict=True,
        )
    ]
    # the log probability of the reverse move's kind in the proposed tree
    # (each kind is its own reverse but GROW and PRUNE)
    weight_new = [jnp.where((c > 0) & kinds[i], move_probs[i], 0.0) for i, c in enumerate(counts_new)]
    total_new = ((weight_new[0] + weight_new[1]) + weight_new[2]) + weight_new[3]
    reverse = pick(kind, [jnp.int32(PRUNE), jnp.int32(GROW), jnp.int32(CHANGE), jnp.int32(SWAP)])
    log_reverse_new = jnp.log(_take_small(weight_new, reverse)) - jnp.log(jnp.where(total_new > 0, total_new, 1.0))
    log_kind_now = _take_small(now.log_probs, kind)
    log_move = log_reverse_new - log_kind_now
    # GROW, PRUNE: the number of nodes to choose from, both ways
    log_nodes = jnp.log(jnp.where(kind == GROW, g_now, nog_now).astype(jnp.float32)) - jnp.log(
        _take_small(counts_new, reverse).astype(jnp.float32)
    )

    # the log ratio of each kind, as named terms
    grow_terms = {
        'move': log_move,
        'node': log_nodes,
        'split': p_split_k.log - p_split_k.log_not,
        'children': p_split_left_new.log_not + p_split_right_new.log_not,
    }
    prune_terms = {
        'move': log_move,
        'node': log_nodes,
        'split': p_split_k.log_not - p_split_k.log,
        'children': -p_split_left.log_not - p_split_right.log_not,
    }
    # CHANGE: the rule's proposal is its prior, so they cancel
    change_terms = {
        'move': log_move,
        'children': (
            p_split_left_new.log_not
            + p_split_right_new.log_not
            - p_split_left.log_not
            - p_split_right.log_not
        ),
    }
    # SWAP: the pair is chosen uniformly among the same pairs both ways; the
    # normaliser of the rule prior at k cancels in 'rule_parent'
    leaves = [new.log_not - old.log_not for new, old in zip(leaves_new, leaves_now, strict=True)]
    swap_terms = {
        'move': log_move,
        'rule_parent': _rule_log_prior(lo_b, hi_b, log_s_b, 0.0, split_b)
        - _rule_log_prior(lo_a, hi_a, log_s_a, 0.0, split_a),
        'rule_child': _rule_log_prior(lo_a_c_new, hi_a_c_new, log_s_a, log_norm_c_new, split_a)
        - _rule_log_prior(lo_b_c, hi_b_c, log_s_b, log_norm_c, split_b),
        'split_child': p_split_c_new.log - near_p_split[0].log,
        'leaves': (leaves[0] + leaves[1]) + leaves[2],
    }
    log_ratio = pick(
        kind,
        [
            _sum_terms('grow', grow_terms),
            _sum_terms('prune', prune_terms),
            _sum_terms('change', change_terms),
            _sum_terms('swap', swap_terms),
        ],
    )

    # the cells
    extra = jnp.where(k > 1, k >> 1, 4)  # CHANGE: a slot with no points (k's parent, or a child of leaf 2)
    keep = 2 * c + dc  # SWAP: leaf of c that stays
    moved = 2 * c + 1 - dc  # SWAP: leaf of c whose points go to c's sibling
    # each column of cell_of is the identity but at most at one leaf: GROW
    # splits k into its children; CHANGE sends the points of k's left
    # child with bit 1 to k, of its right child with bit 0 to `extra`; SWAP
    # sends the points of c's sibling with the bit of c's side to k
    no = jnp.int32(-1)
    zero = jnp.int32(0)
    at0 = pick(kind, [k, no, right, jnp.where(dc, no, sib)])
    at1 = pick(kind, [k, no, left, jnp.where(dc, sib, no)])
    to0 = pick(kind, [left, zero, extra, k])
    to1 = pick(kind, [right, zero, k, k])
    at0, at1, to0, to1 = _computed(one, *(jnp.where(possible, x, no) for x in (at0, at1)), to0, to1)
    bit = jnp.arange(2) == 1
    cell_of = jnp.where(slot[:, None] == jnp.where(bit, at1, at0), jnp.where(bit, to1, to0), slot[:, None])
    cell_of = cell_of.astype(jnp.uint8)

    def picked(*options, unused=None):
        """`pick` of tuples of scalars, entry by entry (selects that fuse
        into one stack, where a stack per option is a kernel of its own);
        `unused`: the value of every entry where no move is possible."""
        out = [pick(kind, [jnp.asarray(o[i], jnp.int32) for o in options]) for i in range(len(options[0]))]
        return out if unused is None else [jnp.where(possible, x, unused) for x in out]

    def output(values):
        """A small output field from its entries: as they are with `entries`, else stacked."""
        return tuple(values) if entries else jnp.stack(values)

    rows = picked((k, no), (no, no), (left, right), (sib, no), unused=no)
    # the rows of cell_of at `rows` (row 0 where unused), from the definitions above
    remap_cell = picked(
        (left, right, zero, zero),
        (zero, zero, zero, zero),
        (left, k, extra, right),
        (jnp.where(dc, sib, k), jnp.where(dc, k, sib), zero, zero),
        unused=zero,
    )
    remap_cell = jnp.stack(remap_cell).reshape(2, 2).astype(jnp.uint8).astype(jnp.int32)

    cells = picked((left, right, no, no), (left, right, no, no), (left, right, k, extra), (keep, moved, sib, k), unused=no)
    cell_old = picked((k, k, no, no), (left, right, no, no), (left, right, left, right), (keep, moved, sib, sib), unused=no)
    cell_new = picked((left, right, no, no), (k, k, no, no), (left, right, right, left), (keep, sib, sib, moved), unused=no)
    cell_fresh = (jnp.arange(4) >= 2) | (kind == GROW) | (kind == CHANGE)
    touched = (slot == cell_old[0]) | (slot == cell_old[1]) | (slot == cell_old[2]) | (slot == cell_old[3])
    identity = now.leaf & ~touched
    is_k = slot == k
    is_child = (slot == left) | (slot == right)
    new_leaf = jnp.where(kind == GROW, (now.leaf & ~is_k) | is_child, jnp.where(kind == PRUNE, (now.leaf & ~is_child) | is_k, now.leaf))

    set_node = picked((k, k), (k, k), (k, k), (k, c), unused=zero)
    set_var = picked((var, var), (zero, zero), (var, var), (var_b, var_a), unused=zero)
    set_split = picked((split, split), (zero, zero), (split, split), (split_b, split_a), unused=zero)
    return Moves(
        allowed=possible,
        kind=kind,
        node=jnp.where(possible, k, 1).astype(jnp.int32),
        var=jnp.where(is_swap, var_b, var),
        split=jnp.where(is_swap, split_b, split),
        log_ratio_tree=log_ratio.astype(jnp.float32),
        cell_of=cell_of,
        remap_leaf=output(rows),
        remap_cell=remap_cell,
        cells=output(cells),
        cell_old=output(cell_old),
        cell_new=output(cell_new),
        cell_fresh=output([cell_fresh[i] for i in range(4)]),
        identity=identity,
        leaf=now.leaf,
        new_leaf=jnp.where(possible, new_leaf, now.leaf),
        set_node=output(set_node),
        set_var=output(set_var),
        set_split=output(set_split),
    )
