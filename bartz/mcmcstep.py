"""One full Gibbs sweep of the BART sampler: `init` and `step`.

The sampler state is an immutable pytree (`State`). Every setting that fixes a
shape (number of trees, maximum depth, number of predictors and of
cut-points) is read from array shapes, so ``jax.jit(step)`` needs no static
arguments, and hyperparameters are arrays in the state: changing them does not
recompile.

One `step` is Chipman, George & McCulloch's "Bayesian backfitting":

1. For every tree at once (``vmap``), propose GROW (split a growable leaf) or
   PRUNE (collapse a node whose two children are leaves), and compute the
   tree-structure part of the Metropolis-Hastings ratio (proposal and prior
   probabilities). Moves depend only on the tree's own structure, so they can
   be drawn in parallel before the sequential part.
2. Move every point to its leaf in the finer of the current and proposed
   structures of each tree (for all trees at once: a tree's leaf indices do
   not change in the sweep before its turn).
3. Sequentially over trees (``lax.scan``), one pass over the data per tree:
   apply the previous tree's change to the residuals (one lookup of
   ``old - new`` leaf values), sum the residuals per leaf of the finer
   structure with one scatter-add, add back the tree's own old values
   (constant per leaf), accept or reject with the exact marginal-likelihood
   ratio, and draw all leaf values from their conjugate Gaussian posterior.
4. Draw the error variance from its conjugate inverse gamma (continuous
   outcome) or the probit latent variables (binary outcome).

The residuals (and, with weights, the per-leaf precision sums) are carried
from sweep to sweep and updated incrementally in float32; `refresh`
recomputes them exactly from the trees, against the slow drift of rounding
errors over long runs (`bartz.mcmcloop.run_mcmc` calls it every
`bartz.mcmcloop.REFRESH_EVERY` iterations).

The marginal likelihood of a leaf with precision sum ``P = sum_i 1 / (sigma^2
w_i^2)`` and weighted residual sum ``S = sum_i r_i / (sigma^2 w_i^2)`` is
``log L = 1/2 log(tau^-2 / (tau^-2 + P)) + 1/2 S^2 / (tau^-2 + P)``, with
``tau`` the prior sd of the leaves.

Tree prior (as R's BART): a node at depth ``d`` is internal with probability
``base / (1 + d)**power`` if it can split (it is above the bottom level and
some predictor still has a usable cut-point in it), else 0; the split
variable is drawn among the predictors with a usable cut-point (uniformly, or
with DART probabilities), the split index uniformly among the usable ones.
Like R's BART, a GROW is rejected when a child would hold fewer than
``min_points_per_leaf`` points; this makes the target the prior restricted to
trees whose leaves all have that many points, times the likelihood, and the
MH ratio stays exact for it.

References
----------
Chipman, George & McCulloch (2010), "BART: Bayesian additive regression
trees", Ann. Appl. Stat. 4(1).
"""

import functools
import math
import os
from typing import NamedTuple

import jax
import numpy as np
from jax import lax, random
from jax import numpy as jnp
from jax.scipy.special import ndtr, ndtri

from bartz import grove, polyagamma

__all__ = [
    'Dart',
    'Forest',
    'Moves',
    'State',
    'propose_moves',
    'StepInfo',
    'refresh',
    'chain_axes',
    'fold_in',
    'init',
    'init_chains',
    'step',
    'sweep_count_info',
]


class Forest(NamedTuple):
    """The trees and what the next sweep needs about them."""

    var_tree: jax.Array  # (m, H/2) uint8/uint16: split variable
    split_tree: jax.Array  # (m, H/2) uint: split index, 0 = not internal
    leaf_tree: jax.Array  # (m, H) float32: leaf values, 0 at non-leaves
    leaf_indices: jax.Array  # (m, n) uint8: heap index of each point's leaf
    leaf_count: jax.Array  # (m, H) int32: points per leaf (0 at non-leaves)
    leaf_prec: jax.Array | None  # (m, H) float32: sum of 1/w^2 per leaf; None if unweighted


class State(NamedTuple):
    """State of the BART Markov chain (one chain)."""

    X: jax.Array  # (p, n) uint8/uint16: binned predictors
    max_split: jax.Array  # (p,) int32: number of cut-points of each predictor
    y: jax.Array  # (n,) float32 centred outcome, or bool for binary outcomes
    z: jax.Array | None  # (n,) float32: probit latent (centred by offset); None if continuous
    prec_weights: jax.Array | None  # (n,) float32: 1 / w^2; None if unweighted
    resid: jax.Array  # (n,) float32: y (or z) minus the sum of trees
    sigma2: jax.Array  # () float32: error variance (1 for probit)
    forest: Forest
    # hyperparameters (arrays, so changing them does not recompile)
    leaf_prior_var: jax.Array  # () float32: tau^2, prior variance of the leaves
    sigma2_alpha: jax.Array | None  # () float32: nu / 2 (inverse gamma shape); None for probit
    sigma2_beta: jax.Array | None  # () float32: nu * lambda / 2 (scale); None for probit
    p_nonterminal: jax.Array  # (D,) float32: base / (1 + d)**power, 0 at the bottom level
    min_points_per_leaf: jax.Array  # () int32
    log_s: jax.Array  # (p,) float32: log split probabilities (uniform: zeros)
    probit_threshold: jax.Array | None  # () float32: latent > threshold iff y = 1 (= -offset)
    dart: 'Dart | None'  # DART variable selection; None if off
    logit_offset: jax.Array | None = None  # () float32: logistic (lbart) offset; None unless logistic


class Dart(NamedTuple):
    """DART (Linero 2018): split probabilities ``s ~ Dirichlet(theta/p, ...)``,
    ``theta / (theta + rho) ~ Beta(a, b)``."""

    theta: jax.Array  # () float32: concentration of the Dirichlet
    theta_fixed: jax.Array  # () bool: keep theta fixed (R: theta != 0)
    a: jax.Array  # () float32
    b: jax.Array  # () float32
    rho: jax.Array  # () float32
    on: jax.Array  # () bool: updates switched on (R: after half the burn-in)


class StepInfo(NamedTuple):
    """Diagnostics of one sweep, not needed by the next one."""

    grow_proposed: jax.Array  # () int32: trees that proposed a grow
    grow_accepted: jax.Array  # () int32
    prune_proposed: jax.Array  # () int32
    prune_accepted: jax.Array  # () int32


def _uint_for(max_value: int):
    for dtype in (jnp.uint8, jnp.uint16, jnp.uint32):
        if max_value <= jnp.iinfo(dtype).max:
            return dtype
    raise ValueError(max_value)


def init(
    *,
    X: jax.Array,
    max_split: jax.Array,
    y: jax.Array,
    num_trees: int,
    max_depth: int = 6,
    leaf_prior_var: float,
    sigma2_alpha: float | None = None,
    sigma2_beta: float | None = None,
    sigma2_init: float = 1.0,
    base: float = 0.95,
    power: float = 2.0,
    prec_weights: jax.Array | None = None,
    min_points_per_leaf: int = 0,
    log_s: jax.Array | None = None,
    probit_threshold: float | None = None,
    valid: jax.Array | None = None,
    dart: dict | None = None,
    logit_offset: float | None = None,
) -> State:
    """Make the initial state: every tree a single leaf with value 0.

    Parameters
    ----------
    X
        Binned predictors, shape ``(p, n)``, unsigned ints (see
        `bartz.prepcovars`).
    max_split
        Number of cut-points of each predictor, shape ``(p,)``.
    y
        Outcome, shape ``(n,)``: float (continuous, already centred by the
        offset), or bool (binary, probit).
    num_trees
        Number of trees ``m``.
    max_depth
        Number of levels ``D`` of the heap arrays; trees have at most
        ``2**(D-1)`` leaves. Leaves at the bottom level cannot split.
    leaf_prior_var
        Prior variance of the leaf values.
    sigma2_alpha, sigma2_beta
        Shape and scale of the inverse gamma prior of the error variance
        (``nu/2`` and ``nu*lambda/2``). Ignored for binary ``y``.
    sigma2_init
        Starting error variance. Ignored for binary ``y``.
    base, power
        Tree prior: a node at depth ``d`` is internal with probability
        ``base / (1 + d)**power``.
    prec_weights
        ``1 / w_i^2``, shape ``(n,)``, for heteroskedastic errors with sd
        ``sigma * w_i``; None for homoskedastic errors.
    min_points_per_leaf
        Reject grows that would leave fewer points than this in a leaf.
    log_s
        Log of the (unnormalised) probabilities of choosing each predictor
        for a split, shape ``(p,)``; None for uniform.
    probit_threshold
        For binary ``y``: the latent is above this iff ``y`` is 1 (minus the
        offset, since the latent is centred by it).
    dart
        None (no variable selection) or a dict with keys ``theta`` (0 for
        random, starting at 1, as R), ``a``, ``b``, ``rho`` (default: the
        number of predictors with a cut-point) and ``on`` (start with the
        updates switched on; `bartz.mcmcloop.run_mcmc` switches them on
        after half the burn-in).
    logit_offset
        For binary ``y``: None for probit; a float for logistic BART
        (``P(y = 1) = 1 / (1 + exp(-(logit_offset + f)))``), sampled by
        Polya-Gamma augmentation (`_draw_latent_logit`). Then ``z`` holds
        the Gaussian pseudo-responses minus the offset and `prec_weights`
        the Polya-Gamma variables (per chain), so `prec_weights` must be
        None.
    valid
        Optional ``(n,)`` bool mask of real points. Other points (padding, so
        that ``n`` divides among devices) get leaf index 0, an unused heap
        slot, and so never enter any sum; their ``y`` must be 0.
    """
    # built with numpy and moved to the device at the end with device_put:
    # eager jnp operations (jnp.array of a numpy array too) each compile a
    # small program, tens of ms each
    X = X if isinstance(X, jax.Array) else jax.device_put(np.asarray(X))
    p, n = X.shape
    heap_size = 2**max_depth
    grove.heap_depth(heap_size)
    half = heap_size // 2
    y = np.asarray(y)
    is_binary = y.dtype == np.bool_
    y = y.astype(np.bool_ if is_binary else np.float32)
    valid = np.ones(n, bool) if valid is None else np.asarray(valid, bool)
    logistic = logit_offset is not None
    if logistic:
        if not is_binary or prec_weights is not None:
            msg = 'logit_offset needs a binary y and no prec_weights'
            raise ValueError(msg)
        # start at the mean of omega ~ PG(1, offset), i.e. given f = 0
        prec_weights = np.full(n, polyagamma.pg1_mean(logit_offset), np.float32)
        z = np.where(valid, (y - 0.5) / prec_weights - logit_offset, 0.0).astype(np.float32)
        resid = z
        threshold = None
        sigma2 = np.float32(1.0)
    elif is_binary:
        threshold = np.float32(probit_threshold if probit_threshold is not None else 0.0)
        # start at the mean of the latent truncated normal given f = 0
        z = np.where(y, threshold + 0.8, threshold - 0.8).astype(np.float32)
        resid = z
        sigma2 = np.float32(1.0)
    else:
        threshold = None
        z = None
        resid = y
        sigma2 = np.float32(sigma2_init)
    resid = np.where(valid, resid, 0.0).astype(np.float32)
    leaf_count = np.zeros((num_trees, heap_size), np.int32)
    leaf_count[:, 1] = np.sum(valid)
    if prec_weights is not None:
        prec_weights = np.where(valid, np.asarray(prec_weights, np.float32), 0.0).astype(np.float32)
        leaf_prec = np.zeros((num_trees, heap_size), np.float32)
        leaf_prec[:, 1] = np.sum(prec_weights, dtype=np.float32)
    else:
        leaf_prec = None
    forest = Forest(
        var_tree=np.zeros((num_trees, half), _uint_for(max(p - 1, 1))),
        split_tree=np.zeros((num_trees, half), X.dtype),
        leaf_tree=np.zeros((num_trees, heap_size), np.float32),
        leaf_indices=np.broadcast_to(valid.astype(np.uint8), (num_trees, n)),
        leaf_count=leaf_count,
        leaf_prec=leaf_prec,
    )
    depths = np.arange(max_depth)
    p_nonterminal = base / (1.0 + depths) ** power
    p_nonterminal[-1] = 0.0
    state = State(
        X=X,
        max_split=np.asarray(max_split, np.int32),
        y=y,
        z=z,
        prec_weights=prec_weights,
        resid=resid,
        sigma2=sigma2,
        forest=forest,
        leaf_prior_var=np.float32(leaf_prior_var),
        sigma2_alpha=None if is_binary else np.float32(sigma2_alpha),
        sigma2_beta=None if is_binary else np.float32(sigma2_beta),
        p_nonterminal=p_nonterminal.astype(np.float32),
        min_points_per_leaf=np.int32(min_points_per_leaf),
        log_s=np.zeros(p, np.float32) if log_s is None else np.asarray(log_s, np.float32),
        probit_threshold=threshold,
        dart=None if dart is None else _init_dart(dart, max_split),
        logit_offset=np.float32(logit_offset) if logistic else None,
    )
    # distinct device buffers for every field, so that the state can be donated
    return jax.tree.map(lambda x: x if x is X else jax.device_put(x), state)


def _init_dart(options: dict, max_split) -> Dart:
    theta = float(options.get('theta', 0.0))
    rho = options.get('rho')
    if rho is None:
        rho = float(np.sum(np.asarray(max_split) > 0))
    return Dart(
        theta=np.float32(theta if theta > 0 else 1.0),
        theta_fixed=np.bool_(theta > 0),
        a=np.float32(options.get('a', 0.5)),
        b=np.float32(options.get('b', 1.0)),
        rho=np.float32(rho),
        on=np.bool_(options.get('on', False)),
    )


class Moves(NamedTuple):
    """Proposed move of each tree (leading axis: trees)."""

    allowed: jax.Array  # bool: a move is possible
    grow: jax.Array  # bool: GROW (else PRUNE)
    node: jax.Array  # int32: leaf to grow, or node to prune
    var: jax.Array  # int32: split variable of a grow
    split: jax.Array  # int32: split index of a grow
    log_ratio_tree: jax.Array  # float32: log of proposal ratio times prior ratio
    leaf: jax.Array  # (H,) bool: leaf mask of the current tree


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


def _num_exhausted(var_tree, split_tree, max_split, heap_size):
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


def _propose_tree(u, var_tree, split_tree, max_split, log_s, p_nonterminal):
    """Propose a move for one tree (the data enter in the sweep)."""
    half = split_tree.shape[0]
    heap_size = 2 * half
    depth_of = jnp.asarray(grove.node_depths(heap_size))
    # all the randomness of the proposal from five uniforms (one RNG call
    # for the forest: random bits dominate the cost of this phase on CPU);
    # the leaf, node and variable are chosen by inverse cdf
    p = max_split.shape[0]
    u_move, u_split, u_leaf, u_nog, u_var = u

    leaf = grove.is_leaf(split_tree)
    nog = jnp.concatenate([grove.is_nog(split_tree), jnp.zeros(half, bool)])

    avail_root = jnp.sum(max_split > 0)
    n_avail = avail_root - _num_exhausted(var_tree, split_tree, max_split, heap_size)  # (H,)
    p_split = jnp.where(n_avail > 0, p_nonterminal[depth_of], 0.0)
    growable = leaf & (p_split > 0)
    num_growable = jnp.sum(growable)
    num_nog = jnp.sum(nog)

    p_grow = jnp.where(num_nog == 0, 1.0, jnp.where(num_growable == 0, 0.0, 0.5))
    grow = u_move < p_grow
    possible = (num_growable > 0) | (num_nog > 0)

    # GROW: leaf, variable, split index
    leaf_node = _choose(growable, u_leaf)
    d = depth_of[leaf_node]
    anc, valid, right = _ancestor_tables(heap_size)
    path_var = var_tree.astype(jnp.int32)[jnp.asarray(anc)[leaf_node]]  # (L,)
    path_cut = split_tree.astype(jnp.int32)[jnp.asarray(anc)[leaf_node]]
    path_valid = jnp.asarray(valid)[leaf_node]
    path_right = jnp.asarray(right)[leaf_node]
    on_var = (path_var[None, :] == jnp.arange(p)[:, None]) & path_valid[None, :]  # (p, L)
    var_lo = jnp.max(jnp.where(on_var & path_right, path_cut, 0), axis=1)
    var_hi = jnp.min(jnp.where(on_var & ~path_right, path_cut - 1, max_split[:, None]), axis=1)
    num_splits = var_hi - var_lo  # (p,)
    usable = num_splits > 0
    shift = jnp.max(jnp.where(usable, log_s, -jnp.inf))
    var_weight = jnp.where(usable, jnp.exp(log_s - jnp.where(jnp.isfinite(shift), shift, 0.0)), 0.0)
    var = _choose_weighted(var_weight, u_var)
    lo_v = var_lo[var]
    hi_v = var_hi[var]
    split = lo_v + 1 + jnp.floor(u_split * (hi_v - lo_v)).astype(jnp.int32)
    split = jnp.minimum(split, hi_v)
    avail_left = n_avail[leaf_node] - (split - 1 <= lo_v)
    avail_right = n_avail[leaf_node] - (hi_v <= split)
    p_child = p_nonterminal[jnp.minimum(d + 1, p_nonterminal.shape[0] - 1)]
    p_split_left = jnp.where(avail_left > 0, p_child, 0.0)
    p_split_right = jnp.where(avail_right > 0, p_child, 0.0)
    p_split_leaf = p_split[leaf_node]
    new_growable = num_growable - 1 + (p_split_left > 0) + (p_split_right > 0)
    sibling_leaf = leaf[leaf_node ^ 1] & (leaf_node != 1)
    new_nog = num_nog + 1 - sibling_leaf
    new_p_prune = jnp.where(new_growable == 0, 1.0, 0.5)
    log_ratio_grow = (
        jnp.log(new_p_prune / new_nog)
        - jnp.log(p_grow / num_growable)
        + jnp.log(p_split_leaf)
        + jnp.log1p(-p_split_left)
        + jnp.log1p(-p_split_right)
        - jnp.log1p(-p_split_leaf)
    )

    # PRUNE: node whose children are both leaves
    prune_node = _choose(nog, u_nog)
    child = 2 * prune_node
    p_split_node = p_split[prune_node]
    pruned_growable = num_growable - growable[child] - growable[child + 1] + 1
    new_p_grow = jnp.where(prune_node == 1, 1.0, 0.5)
    log_ratio_prune = (
        jnp.log(new_p_grow / pruned_growable)
        - jnp.log((1.0 - p_grow) / num_nog)
        + jnp.log1p(-p_split_node)
        - jnp.log(p_split_node)
        - jnp.log1p(-p_split[child])
        - jnp.log1p(-p_split[child + 1])
    )

    # an impossible move gets node 1, so the sweep's bookkeeping stays in bounds
    node = jnp.where(possible, jnp.where(grow, leaf_node, prune_node), 1).astype(jnp.int32)
    return Moves(
        allowed=possible,
        grow=grow,
        node=node,
        var=var.astype(jnp.int32),
        split=split.astype(jnp.int32),
        log_ratio_tree=jnp.where(grow, log_ratio_grow, log_ratio_prune).astype(jnp.float32),
        leaf=leaf,
    )


def propose_moves(key, state: State) -> Moves:
    """Propose a GROW or PRUNE for every tree at once."""
    forest = state.forest
    num_trees = forest.split_tree.shape[0]
    u = _uniform(key, (num_trees, 5))
    return jax.vmap(_propose_tree, in_axes=(0, 0, 0, None, None, None))(
        u, forest.var_tree, forest.split_tree, state.max_split, state.log_s, state.p_nonterminal
    )


def _threefry2x32(key0, key1, x0, x1):
    """The Threefry-2x32 block cipher (20 rounds; Salmon et al. 2011), the
    generator of JAX's default keys, written out in array operations.

    JAX's own CPU lowering runs the rounds in a rolled loop of five
    iterations, each a dozen small kernels: in the sweep, about ten such
    loops per iteration. Written out, each call is one fused kernel.
    """
    key2 = key0 ^ key1 ^ np.uint32(0x1BD11BDA)
    keys = (key0, key1, key2)
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    x0 = x0 + key0
    x1 = x1 + key1
    for i in range(5):
        for r in rotations[i % 2]:
            x0 = x0 + x1
            x1 = (x1 << np.uint32(r)) | (x1 >> np.uint32(32 - r))
            x1 = x1 ^ x0
        x0 = x0 + keys[(i + 1) % 3]
        x1 = x1 + keys[(i + 2) % 3] + np.uint32(i + 1)
    return x0, x1


def _random_words(key, num):
    """`num` random uint32 words from a threefry `key`: the cipher applied
    to the counters 0, 1, ...; None for other kinds of keys."""
    data = random.key_data(key)
    if data.shape != (2,) or data.dtype != jnp.uint32:
        return None
    half = -(-num // 2)
    count = jnp.arange(half, dtype=jnp.uint32)
    x0, x1 = _threefry2x32(data[0], data[1], count, jnp.zeros_like(count))
    return jnp.concatenate([x0, x1])[:num]


def _uniform(key, shape):
    """Uniforms in (0, 1) (as ``random.uniform(key, shape, minval=tiny)``,
    another stream of the same generator)."""
    num = math.prod(shape)
    words = _random_words(key, num)
    tiny = jnp.finfo(jnp.float32).tiny
    if words is None:
        return random.uniform(key, shape, minval=tiny, maxval=1.0)
    return jnp.maximum(_unit_float(words), tiny).reshape(shape)


def fold_in(key, data):
    """``random.fold_in(key, data)`` for a uint32-range `data`, bit for bit,
    with the cipher written out (`_threefry2x32`); other kinds of keys go
    to `random.fold_in`."""
    key_words = random.key_data(key)
    if key_words.shape != (2,) or key_words.dtype != jnp.uint32:
        return random.fold_in(key, data)
    data = jnp.asarray(data).astype(jnp.uint32)
    y0, y1 = _threefry2x32(key_words[0], key_words[1], jnp.zeros_like(data), data)
    return random.wrap_key_data(jnp.stack([y0, y1]), impl='threefry2x32')


_GAMMA_MAX_TRIES = 1 << 16


def _gamma(key, alpha):
    """A Gamma(`alpha`, 1) draw by Marsaglia & Tsang's (2000) rejection
    method, from uniforms of `_threefry2x32` (as `random.gamma`, another
    stream; its loop calls JAX's rolled cipher several times per try)."""
    key_words = random.key_data(key)
    if key_words.shape != (2,) or key_words.dtype != jnp.uint32:
        return random.gamma(key, alpha)
    tiny = jnp.finfo(jnp.float32).tiny

    def uniforms(counter):
        words = _threefry2x32(key_words[0], key_words[1], counter, jnp.uint32(1))
        return [jnp.maximum(_unit_float(w), tiny) for w in words]

    # alpha < 1: Gamma(alpha) = Gamma(alpha + 1) * U^(1 / alpha)
    boost = alpha < 1
    shape = jnp.where(boost, alpha + 1, alpha)
    d = shape - 1.0 / 3.0
    c = lax.rsqrt(9.0 * d)

    def body(carry):
        counter, _, _ = carry
        u_normal, u_accept = uniforms(counter)
        x = ndtri(u_normal)
        v = (1.0 + c * x) ** 3
        ok = (v > 0) & (jnp.log(u_accept) < 0.5 * x * x + d - d * v + d * jnp.log(jnp.maximum(v, tiny)))
        return counter + 1, ok, d * v

    # a try is accepted with probability above 0.95 for any finite shape;
    # a NaN or infinite shape ends the loop at once (and gives NaN), the
    # cap keeps it finite whatever happens
    finite = jnp.isfinite(d)

    def more(carry):
        counter, ok, _ = carry
        return ~ok & finite & (counter < _GAMMA_MAX_TRIES)

    _, _, value = lax.while_loop(more, body, (jnp.uint32(1), jnp.bool_(False), d))
    value = jnp.where(finite, value, jnp.nan)
    u_boost, _ = uniforms(jnp.uint32(0))
    return jnp.where(boost, value * u_boost ** (1.0 / alpha), value)


def _normal_quantile(u):
    """Standard normal quantile of `u` in (0, 1), float32: Wichura's
    algorithm AS 241 (PPND7), three rational functions of degree 3.

    As accurate as `jax.scipy.special.ndtri` in float32 (relative error
    below 4e-7 on the grid of `_uniform`, tails included) at about 60% of
    its cost, which matters for the leaf noise of a sweep (trees x heap
    size values per iteration): ``ndtri`` evaluates six rational functions
    of degree 8 and two logarithms per value.

    References
    ----------
    Wichura, M. J. (1988). Algorithm AS 241: The percentage points of the
    normal distribution. Applied Statistics 37(3), 477-484.
    """
    q = u - 0.5
    r = 0.180625 - q * q
    central = q * _poly(_PPND7_A, r) / _poly(_PPND7_B, r)
    s = jnp.sqrt(-jnp.log(jnp.minimum(u, 1.0 - u)))
    near = s <= 5.0
    t = jnp.where(near, s - 1.6, s - 5.0)
    num = jnp.where(near, _poly(_PPND7_C, t), _poly(_PPND7_E, t))
    den = jnp.where(near, _poly(_PPND7_D, t), _poly(_PPND7_F, t))
    return jnp.where(jnp.abs(q) <= 0.425, central, jnp.where(q < 0, -num, num) / den)


def _poly(coef, x):
    """``sum(coef[k] * x**k)`` by Horner's rule."""
    out = jnp.full_like(x, coef[-1])
    for c in coef[-2::-1]:
        out = out * x + c
    return out


# AS 241 PPND7: central region |u - 1/2| <= 0.425, then the tails for
# sqrt(-log(min(u, 1 - u))) up to 5 and beyond
_PPND7_A = (3.3871327179, 50.434271938, 159.29113202, 59.109374720)
_PPND7_B = (1.0, 17.895169469, 78.757757664, 67.187563600)
_PPND7_C = (1.4234372777, 2.7568153900, 1.3067284816, 0.17023821103)
_PPND7_D = (1.0, 0.73700164250, 0.12021132975)
_PPND7_E = (6.6579051150, 3.0812263860, 0.42868294337, 0.017337203997)
_PPND7_F = (1.0, 0.24197894225, 0.012258202635)


def _unit_float(words):
    """Floats in [0, 1) from uint32 words: 23 random mantissa bits in
    [1, 2), minus 1."""
    return lax.bitcast_convert_type((words >> np.uint32(9)) | np.uint32(0x3F800000), jnp.float32) - 1.0


def _split(key, num):
    """`num` new keys from `key` (as ``random.split``, another stream)."""
    words = _random_words(key, 2 * num)
    if words is None:
        return random.split(key, num)
    return random.wrap_key_data(words.reshape(2, num).T, impl='threefry2x32')


def _psum(x, axis_name):
    return x if axis_name is None else lax.psum(x, axis_name)


def _log_marginal(resid_sum, prec_sum, inv_sigma2, inv_tau2):
    """Log marginal likelihood of a leaf, up to terms that cancel in ratios."""
    post_prec = prec_sum * inv_sigma2 + inv_tau2
    scaled_sum = resid_sum * inv_sigma2
    return 0.5 * jnp.log(inv_tau2 / post_prec) + 0.5 * scaled_sum**2 / post_prec


def _leaf_sums(indices, values, size):
    """``zeros(size).at[indices].add(values)`` for uint8 `indices`, fast.

    The scatter reads the uint8 indices as they are (JAX would widen them
    to int32 first: a pass over the data and four times the bytes).
    Consecutive points are spread over several copies of the bins, as many
    as fit uint8 indices: XLA's CPU scatter adds the values
    one after the other, and consecutive points mostly fall in the same
    leaf, so each add would wait for the previous one to land (on GPU, they
    would contend for the same atomic). Together about twice as fast at
    n = 100,000 on CPU. Under `vmap` (several chains) on CPU, one scatter
    per chain (`_unbatched_on_cpu`).
    """
    return _unbatched_on_cpu(functools.partial(_leaf_sums_impl, size=size))(indices, values)


def _leaf_sums_impl(indices, values, size):
    n = indices.shape[0]
    lanes = 256 // size if n >= _SCATTER_LANES_MIN_POINTS else 1
    if lanes > 1:
        lane = (jnp.arange(n, dtype=jnp.int32) & (lanes - 1)).astype(jnp.uint8)
        indices = (indices << (lanes.bit_length() - 1)) | lane
    dims = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,))
    copies = lax.scatter_add(
        jnp.zeros(size * lanes, values.dtype), indices[:, None], values, dims, mode=lax.GatherScatterMode.FILL_OR_DROP
    )
    return copies if lanes == 1 else copies.reshape(size, lanes).sum(axis=1)


_SCATTER_LANES_MIN_POINTS = 0  # (a knob for the tests: all n gain, n = 1,000 by 3-8%)


def _lookup(table, indices):
    """``table[indices]`` for in-bounds uint8 `indices`, read as they are
    (JAX would widen them to int32 and wrap negative indices first)."""
    return _unbatched_on_cpu(_lookup_impl)(table, indices)


def _lookup_impl(table, indices):
    dims = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))
    return lax.gather(table, indices[:, None], dims, (1,), mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS)


def _unbatched_on_cpu(fun):
    """`fun` whose `vmap` on CPU calls it once per batch element.

    XLA's CPU scatters and gathers with a batch dimension run about twice as
    slow per element as one plain scatter per element of the batch (several
    chains on one CPU device are vmapped). Elsewhere, or for batches larger
    than `_MAX_UNBATCHED` (the program grows with the batch), the usual
    `vmap`.
    """

    @jax.custom_batching.custom_vmap
    def wrapped(*args):
        return fun(*args)

    @wrapped.def_vmap
    def rule(axis_size, in_batched, *args):
        if jax.default_backend() != 'cpu' or axis_size > _MAX_UNBATCHED:
            axes = [0 if b else None for b in in_batched]
            return jax.vmap(fun, in_axes=axes)(*args), True
        outs = [wrapped(*(a[i] if b else a for a, b in zip(args, in_batched, strict=True))) for i in range(axis_size)]
        return jnp.stack(outs), True

    return wrapped


_MAX_UNBATCHED = 16


def _data_blocks(n):
    """Split ``range(n)`` into blocks that `_sweep_trees` processes with
    independent kernels, which XLA's CPU runtime overlaps (a scatter runs
    on one thread). One block below `_BLOCK_MIN_POINTS` points (kernel
    overhead dominates) or off CPU; else 1 to 4 blocks per CPU core (at
    most 8 in all, about 2**14 points or more each; measured on 2 cores:
    a multiple of the core count works best), boundaries multiple of 128."""
    if n < _BLOCK_MIN_POINTS or jax.default_backend() != 'cpu':
        return [(0, n)]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count() or 1
    per_core = max(1, min(4, n // (cores * 2**14)))
    blocks = min(8, cores * per_core)
    bounds = [0] + [n * b // blocks // 128 * 128 for b in range(1, blocks)] + [n]
    return list(zip(bounds[:-1], bounds[1:]))


_BLOCK_MIN_POINTS = 2**15


def _propose_partitions(state: State, moves: Moves):
    """Move every point to its leaf in the proposed structure of its tree.

    A GROW sends the points of the grown leaf to its children; a PRUNE leaves
    the points in the children of the pruned node. The result ("fine"
    indices) is the finer of the current and proposed partitions, from which
    the sweep reads both. Tree ``j``'s leaf indices do not change in the
    sweep before tree ``j``, so this is done before the sweep, in place in
    the ``(m, n)`` index array, for groups of trees whose temporaries take
    about `_PROPOSE_GROUP_BYTES` (all trees at once for small n).
    """
    leaf_indices = state.forest.leaf_indices
    num_trees, n = leaf_indices.shape
    group = _largest_divisor(num_trees, max(1, _PROPOSE_GROUP_BYTES // max(n, 1)))

    def fine_rows(rows, grow, node, var, split):
        idx = rows.astype(jnp.int32)
        x = state.X[var].astype(jnp.int32)
        node = node[:, None]
        fine = jnp.where(grow[:, None] & (idx == node), 2 * node + (x >= split[:, None]), idx)
        return fine.astype(rows.dtype)

    fields = (moves.grow, moves.node, moves.var, moves.split)
    if group == num_trees:
        return fine_rows(leaf_indices, *fields)

    def body(g, leaf_indices):
        start = g * group
        rows = lax.dynamic_slice_in_dim(leaf_indices, start, group)
        args = [lax.dynamic_slice_in_dim(a, start, group) for a in fields]
        return lax.dynamic_update_slice_in_dim(leaf_indices, fine_rows(rows, *args), start, 0)

    return lax.fori_loop(0, num_trees // group, body, leaf_indices)


_PROPOSE_GROUP_BYTES = 2**22


def _largest_divisor(m, at_most):
    return max(d for d in range(1, min(m, at_most) + 1) if m % d == 0)


def _sweep_trees(key, state: State, moves: Moves, data_axis=None):
    """Accept/reject the moves and redraw the leaves, one tree after the other."""
    forest = state.forest
    num_trees, heap_size = forest.leaf_tree.shape
    # one RNG call: the acceptance uniforms and the leaf noise (by inverse cdf)
    u = _uniform(key, (num_trees, 1 + heap_size))
    log_u = jnp.log(u[:, 0])
    noise = _normal_quantile(u[:, 1:])
    inv_sigma2 = 1.0 / state.sigma2
    inv_tau2 = 1.0 / state.leaf_prior_var
    prec_weights = state.prec_weights
    weighted = prec_weights is not None
    min_points = state.min_points_per_leaf
    fine_indices = _propose_partitions(state, moves)

    # the data axis in blocks, processed by independent kernels that XLA's
    # CPU runtime runs in parallel (its scatter uses one thread)
    n = state.resid.shape[0]
    bounds = _data_blocks(n)
    weights = [None if prec_weights is None else prec_weights[start:stop] for start, stop in bounds]

    def finish(resid, leaf_indices, fine, delta, merged_node, j):
        """Apply tree ``j``'s change to the residuals and to its leaf indices.

        Its change in the residuals is one lookup, ``old - new`` leaf values
        indexed by its fine partition, which determines both the old and
        the new leaf of each point.
        """
        out = []
        for (start, _), block_resid, block_fine in zip(bounds, resid, fine, strict=True):
            out.append(block_resid + _lookup(delta, block_fine))
            block_fine = block_fine.astype(jnp.int32)
            idx = jnp.where((block_fine >> 1) == merged_node, merged_node, block_fine)
            leaf_indices = lax.dynamic_update_slice(leaf_indices, idx[None].astype(leaf_indices.dtype), (j, start))
        return tuple(out), leaf_indices

    def body(carry, tree):
        # The previous tree's change is applied here rather than at the end of
        # its own iteration: one pass over the data per tree.
        resid, leaf_indices, prev_fine, prev_delta, prev_merged_node = carry
        j, old_values, count, prec, move, log_u, noise = tree
        # (for the first tree, a no-op: zero delta, no merged node)
        resid, leaf_indices = finish(resid, leaf_indices, prev_fine, prev_delta, prev_merged_node, jnp.maximum(j - 1, 0))

        node = move.node
        child = 2 * node
        fine_rows = []
        sums = 0.0
        grow_left = 0
        grow_prec_left = 0.0 if weighted else None
        for (start, stop), block_resid, block_weights in zip(bounds, resid, weights, strict=True):
            row = lax.dynamic_slice(leaf_indices, (j, start), (1, stop - start))[0]
            fine_rows.append(row)
            fine = row.astype(jnp.int32)
            in_left = fine == child
            if weighted:
                sums = sums + _leaf_sums(row, block_resid * block_weights, heap_size)
                grow_prec_left = grow_prec_left + jnp.sum(jnp.where(in_left, block_weights, 0.0))
            else:
                sums = sums + _leaf_sums(row, block_resid, heap_size)
            if stop - start <= 2**24:
                # a float sum of 0/1 is exact up to 2**24 and faster than XLA's int reduction
                grow_left = grow_left + jnp.sum(jnp.where(in_left, 1.0, 0.0)).astype(jnp.int32)
            else:
                grow_left = grow_left + jnp.sum(in_left, dtype=jnp.int32)
        sums, grow_left, grow_prec_left = _psum((sums, grow_left, grow_prec_left), data_axis)

        # points (and precision) in the children: known for a prune, counted for a grow
        count_left = jnp.where(move.grow, grow_left, count[child])
        count_right = jnp.where(move.grow, count[node] - grow_left, count[child + 1])
        if weighted:
            prec_left = jnp.where(move.grow, grow_prec_left, prec[child])
            prec_right = jnp.where(move.grow, prec[node] - grow_prec_left, prec[child + 1])
        else:
            prec_left = count_left.astype(jnp.float32)
            prec_right = count_right.astype(jnp.float32)

        # the sums above include this tree: add back its old value in each
        # fine leaf (constant there), times the leaf's precision
        slot = jnp.arange(heap_size)
        at_node = slot == node
        at_child = (slot >> 1) == node
        at_left = slot == child
        grow_child = move.grow & at_child
        old_prec = prec if weighted else count.astype(jnp.float32)
        fine_prec = jnp.where(
            move.grow & at_node, 0.0, jnp.where(grow_child, jnp.where(at_left, prec_left, prec_right), old_prec)
        )
        old_at = jnp.where(grow_child, old_values[node], old_values)
        sums = sums + fine_prec * old_at
        sum_left, sum_right = sums[child], sums[child + 1]

        # the three leaves as one vector: fewer kernels than one per term
        marginals = _log_marginal(
            jnp.stack([sum_left, sum_right, sum_left + sum_right]),
            jnp.stack([prec_left, prec_right, prec_left + prec_right]),
            inv_sigma2,
            inv_tau2,
        )
        loglik_split = marginals[0] + marginals[1] - marginals[2]
        log_alpha = move.log_ratio_tree + jnp.where(move.grow, loglik_split, -loglik_split)
        big_enough = (count_left >= min_points) & (count_right >= min_points)
        allowed = move.allowed & (big_enough | ~move.grow)
        accept = allowed & (log_u < log_alpha)
        grew = accept & move.grow
        pruned = accept & ~move.grow

        # leaf statistics of the final structure, written as elementwise
        # expressions over the heap (one fused kernel each, not a chain of
        # scatters: at small n the per-kernel overhead dominates)
        merged = jnp.where(move.grow, ~accept, accept)  # the children's points end up in the node
        sums = sums + jnp.where(at_node & merged, sum_left + sum_right, 0.0)

        def update(stat, left, right):
            grown = jnp.where(at_node, 0, jnp.where(at_left, left, right))
            pruned_stat = jnp.where(at_node, left + right, 0)
            stat = jnp.where(grew & (at_node | at_child), grown, stat)
            return jnp.where(pruned & (at_node | at_child), pruned_stat, stat).astype(stat.dtype)

        count = update(count, count_left, count_right)
        if weighted:
            prec = update(prec, prec_left, prec_right)
            prec_final = prec
        else:
            prec_final = count.astype(jnp.float32)
        leaf = move.leaf
        leaf = jnp.where(grew & (at_node | at_child), at_child, leaf)
        leaf = jnp.where(pruned & (at_node | at_child), at_node, leaf)

        post_prec = prec_final * inv_sigma2 + inv_tau2
        post_mean = sums * inv_sigma2 / post_prec
        new_values = jnp.where(leaf, post_mean + noise * lax.rsqrt(post_prec), 0.0)
        new_at = jnp.where(merged & at_child, new_values[node], new_values)
        delta = old_at - new_at

        # the node whose children's points end up in it, or -1
        merged_node = jnp.where(merged, node, -1)
        carry = (resid, leaf_indices, tuple(fine_rows), delta, merged_node)
        return carry, (new_values, count, prec if weighted else None, accept, allowed)

    xs = (
        jnp.arange(num_trees),
        forest.leaf_tree,
        forest.leaf_count,
        forest.leaf_prec,
        moves,
        log_u,
        noise,
    )
    carry = (
        tuple(state.resid[start:stop] for start, stop in bounds),
        fine_indices,
        tuple(fine_indices[0, start:stop] for start, stop in bounds),
        jnp.zeros(heap_size, jnp.float32),
        jnp.int32(-1),
    )
    carry, (leaf_tree, leaf_count, leaf_prec, accepted, allowed) = lax.scan(body, carry, xs)
    resid, leaf_indices = finish(*carry, num_trees - 1)
    resid = jnp.concatenate(resid)
    moves = moves._replace(allowed=allowed)

    grew = accepted & moves.grow
    pruned = accepted & ~moves.grow
    tree_idx = jnp.arange(num_trees)
    split_tree = forest.split_tree
    var_tree = forest.var_tree
    new_split = jnp.where(grew, moves.split, jnp.where(pruned, 0, split_tree[tree_idx, moves.node]))
    new_var = jnp.where(grew, moves.var, jnp.where(pruned, 0, var_tree[tree_idx, moves.node]))
    split_tree = split_tree.at[tree_idx, moves.node].set(new_split.astype(split_tree.dtype))
    var_tree = var_tree.at[tree_idx, moves.node].set(new_var.astype(var_tree.dtype))
    forest = Forest(
        var_tree=var_tree,
        split_tree=split_tree,
        leaf_tree=leaf_tree,
        leaf_indices=leaf_indices,
        leaf_count=leaf_count,
        leaf_prec=leaf_prec,
    )
    # one reduction for the four counts: at small n every kernel counts
    flags = jnp.stack([moves.allowed & moves.grow, grew, moves.allowed & ~moves.grow, pruned])
    info = StepInfo(*jnp.sum(flags, axis=-1, dtype=jnp.int32))
    return state._replace(forest=forest, resid=resid), info


def _draw_sigma2(key, state: State, data_axis=None) -> State:
    """Conjugate inverse gamma draw of the error variance."""
    resid = state.resid
    sq = resid * resid if state.prec_weights is None else resid * resid * state.prec_weights
    n = jnp.sum(state.forest.leaf_count[0])  # real points: padding has no leaf
    alpha = state.sigma2_alpha + n.astype(jnp.float32) / 2
    beta = state.sigma2_beta + _psum(jnp.sum(sq), data_axis) / 2
    sigma2 = beta / _gamma(key, alpha)
    return state._replace(sigma2=sigma2.astype(jnp.float32))


def _point_uniforms(key, offset, n):
    """Uniforms in (0, 1) for the points ``offset`` to ``offset + n - 1`` of
    the whole data set, the same whichever way the points are split among
    devices: point ``i`` gets number ``i % B`` of the stream
    ``fold_in(key, i // B)``, with ``B = _UNIFORM_BLOCK``. Memory
    O(n + B), not O(total n)."""
    block = _UNIFORM_BLOCK
    num_blocks = -(-n // block) + 1  # enough for any alignment of the slice
    first = offset // block
    blocks = first + jnp.arange(num_blocks)
    tiny = jnp.finfo(jnp.float32).tiny
    key_words = random.key_data(key)
    if key_words.shape == (2,) and key_words.dtype == jnp.uint32:
        # _uniform(fold_in(key, b), (block,)) for every block b at once
        k0, k1 = _threefry2x32(key_words[0], key_words[1], jnp.zeros_like(blocks, jnp.uint32), blocks.astype(jnp.uint32))
        count = jnp.arange(block // 2, dtype=jnp.uint32)
        x0, x1 = _threefry2x32(k0[:, None], k1[:, None], count, jnp.zeros_like(count))
        u = jnp.maximum(_unit_float(jnp.concatenate([x0, x1], axis=1)), tiny).reshape(-1)
    else:
        keys = jax.vmap(lambda b: random.fold_in(key, b))(blocks)
        u = jax.vmap(lambda k: random.uniform(k, (block,), minval=tiny, maxval=1.0))(keys).reshape(-1)
    return lax.dynamic_slice_in_dim(u, offset - first * block, n)


_UNIFORM_BLOCK = 1024


def _draw_latent(key, state: State, data_axis=None) -> State:
    """Albert & Chib: latent ~ N(f, 1) truncated to the side given by y."""
    mean = state.z - state.resid
    n = mean.shape[0]
    offset = 0 if data_axis is None else lax.axis_index(data_axis) * n
    u = _point_uniforms(key, offset, n)
    # standardised truncation point, mirrored so we always sample a lower tail
    a = jnp.where(state.y, state.probit_threshold - mean, mean - state.probit_threshold)
    a = jnp.maximum(a, -10.0)  # below, the truncation has probability < 1e-23
    # eps ~ N(0, 1) | eps > a  <=>  -eps = ndtri(u * ndtr(-a)); far in the
    # tail (a > 5, probability < 3e-7 of y given f) float32 underflows, and
    # eps - a is exponential with rate a to within a relative O(1/a^2)
    inverse_cdf = -ndtri(jnp.maximum(u * ndtr(-jnp.minimum(a, 5.0)), 1e-37))
    tail = a - jnp.log(u) / jnp.maximum(a, 1.0)
    eps = jnp.where(a > 5.0, tail, jnp.maximum(inverse_cdf, a))
    z = jnp.where(state.y, mean + eps, mean - eps)
    return state._replace(z=z, resid=z - mean)


def _draw_latent_logit(key, state: State, data_axis=None) -> State:
    """Logistic BART by Polya-Gamma augmentation (Polson, Scott & Windle 2013).

    With ``psi_i = offset + f_i``, ``omega_i | psi_i ~ PG(1, psi_i)``
    exactly (`bartz.polyagamma`); given ``omega``, the logistic likelihood
    of ``psi`` is that of ``(y_i - 1/2) / omega_i ~ N(psi_i, 1 / omega_i)``,
    so the trees are drawn by the weighted Gaussian sweep with ``sigma^2 =
    1``, precision weights ``omega`` and pseudo-responses ``z`` (stored minus
    the offset). The per-leaf precision sums ``leaf_prec`` follow ``omega``:
    they are recomputed from the leaf indices, one scatter per tree, memory
    O(n).
    """
    forest = state.forest
    mean = state.z - state.resid
    n = mean.shape[0]
    offset = 0 if data_axis is None else lax.axis_index(data_axis) * n
    real = forest.leaf_indices[0] != 0  # padding has no leaf
    psi = jnp.where(real, state.logit_offset + mean, 0.0)
    omega = polyagamma.pg1(key, psi, offset)
    omega = jnp.where(real, omega, 0.0)
    kappa = jnp.where(state.y, 0.5, -0.5)
    z = jnp.where(real, kappa / jnp.where(real, omega, 1.0) - state.logit_offset, 0.0)
    heap_size = forest.leaf_tree.shape[1]
    leaf_prec = lax.map(lambda row: _leaf_sums(row, omega, heap_size), forest.leaf_indices)
    leaf_prec = _psum(leaf_prec, data_axis)
    return state._replace(
        z=z, resid=jnp.where(real, z - mean, 0.0), prec_weights=omega, forest=forest._replace(leaf_prec=leaf_prec)
    )


_THETA_GRID_SIZE = 1000


def _draw_dart(key, state: State) -> State:
    """DART: ``s | counts ~ Dirichlet(theta/p + counts)``, then theta by
    griddy Gibbs on ``lambda = theta / (theta + rho)`` over the grid
    ``k / 1001``, k = 1..1000, as R's BART. Predictors with no cut-point
    keep probability 0."""
    dart = state.dart
    key_s, key_theta = random.split(key)
    usable = state.max_split > 0
    p = jnp.sum(usable).astype(jnp.float32)
    counts = grove.var_count_scatter(state.forest.var_tree, state.forest.split_tree, state.max_split.shape[0])
    alpha = dart.theta / p + counts
    log_gamma = random.loggamma(key_s, jnp.where(usable, alpha, 1.0))
    log_gamma = jnp.where(usable, log_gamma, -jnp.inf)
    log_s = log_gamma - jax.scipy.special.logsumexp(log_gamma)

    lam = jnp.arange(1, _THETA_GRID_SIZE + 1, dtype=jnp.float32) / (_THETA_GRID_SIZE + 1)
    theta_grid = lam * dart.rho / (1 - lam)
    sum_log_s = jnp.sum(jnp.where(usable, log_s, 0.0))
    loglik = jax.scipy.special.gammaln(theta_grid) - p * jax.scipy.special.gammaln(theta_grid / p) + theta_grid / p * sum_log_s
    logprior = (dart.a - 1) * jnp.log(lam) + (dart.b - 1) * jnp.log1p(-lam)
    theta = theta_grid[random.categorical(key_theta, loglik + logprior)]
    theta = jnp.where(dart.theta_fixed, dart.theta, theta)

    on = dart.on
    return state._replace(
        log_s=jnp.where(on, log_s, state.log_s),
        dart=dart._replace(theta=jnp.where(on, theta, dart.theta)),
    )


def step(key: jax.Array, state: State, *, data_axis: str | None = None) -> tuple[State, StepInfo]:
    """One full Gibbs sweep: all trees, then the error variance or latents.

    Parameters
    ----------
    key
        A JAX random key, used once.
    state
        The current state.
    data_axis
        Name of the mesh axis the data points are split over, when called
        inside `jax.shard_map`: every sum over the data is then a ``psum``
        over it, and the trees stay replicated. None without sharding.

    Returns
    -------
    The new state and diagnostics of the sweep.
    """
    key_moves, key_sweep, key_last, key_dart = _split(key, 4)
    moves = propose_moves(key_moves, state)
    state, info = _sweep_trees(key_sweep, state, moves, data_axis)
    if state.dart is not None:
        state = _draw_dart(key_dart, state)
    if state.logit_offset is not None:
        state = _draw_latent_logit(key_last, state, data_axis)
    elif state.z is not None:
        state = _draw_latent(key_last, state, data_axis)
    else:
        state = _draw_sigma2(key_last, state, data_axis)
    return state, info


def chain_axes(state: State) -> State:
    """`vmap` axes of a multi-chain state: 0 for per-chain fields, None for
    the data and hyperparameters, which the chains share."""
    per_chain = {'z', 'resid', 'sigma2', 'forest', 'log_s', 'dart'}
    if state.logit_offset is not None:
        per_chain.add('prec_weights')  # the Polya-Gamma variables
    return State(*(0 if name in per_chain else None for name in State._fields))


def init_chains(state: State, num_chains: int) -> State:
    """Replicate the per-chain fields of a single-chain state."""
    axes = chain_axes(state)
    fields = []
    for value, axis in zip(state, axes, strict=True):
        if axis == 0:
            # on the host: eager jnp broadcasts would compile a program each
            value = jax.tree.map(lambda x: jax.device_put(np.broadcast_to(np.asarray(x), (num_chains, *x.shape))), value)
        fields.append(value)
    return State(*fields)


def sweep_count_info(info: StepInfo) -> dict:
    """Acceptance rates from a (possibly stacked) `StepInfo`, as floats."""
    grow_prop = np.sum(info.grow_proposed)
    prune_prop = np.sum(info.prune_proposed)
    return {
        'grow_acc': float(np.sum(info.grow_accepted) / max(grow_prop, 1)),
        'prune_acc': float(np.sum(info.prune_accepted) / max(prune_prop, 1)),
    }


def refresh(state: State, *, data_axis: str | None = None) -> State:
    """Recompute the carried residuals (and per-leaf precision sums) from the trees.

    `step` updates the residuals incrementally, ``r += old - new`` per tree
    and sweep, and (with weights) the per-leaf precision sums by adding and
    subtracting parts of them; each update rounds in float32, so over many
    sweeps the carried values drift from the exact ones like a random walk
    (about ``sqrt(sweeps * trees)`` roundings). This recomputes them from
    the trees, as the sampler's caches would be without rounding:

    - ``resid = y - sum_j leaf_tree[j, leaf_indices[j]]`` (``z`` instead of
      ``y`` for binary outcomes), one gather per tree with the cached leaf
      indices (no traversal), accumulated in float32 over the trees
      (rounding ``sqrt(m)`` ulps of the sum of trees); padding points
      (leaf index 0) keep residual 0.
    - ``leaf_prec[j] = sum of prec_weights by leaf_indices[j]``, one scatter
      per tree, if the state carries them (weighted, or logistic).

    Leaf counts are integers and exact: they are not recomputed. The draws
    of the chain are unchanged in law; `bartz.mcmcloop.run_mcmc` calls this
    every `bartz.mcmcloop.REFRESH_EVERY` iterations.

    Parameters
    ----------
    state
        A single-chain state (``vmap`` it, with `chain_axes`, for several).
    data_axis
        Name of the mesh axis the data points are split over, inside
        `jax.shard_map`: residuals are per point and need nothing, the
        precision sums are ``psum``-ed over it. None without sharding.

    Returns
    -------
    The state with ``resid`` and ``forest.leaf_prec`` recomputed.
    """
    forest = state.forest
    num_trees, n = forest.leaf_indices.shape
    heap_size = forest.leaf_tree.shape[1]
    group = _largest_divisor(num_trees, 8)  # trees per loop iteration: few kernels, a small program

    def add_trees(g, fx):
        rows = lax.dynamic_slice_in_dim(forest.leaf_indices, g * group, group)
        values = lax.dynamic_slice_in_dim(forest.leaf_tree, g * group, group)
        # sequential over the group's trees: the same rounding for any group size
        for k in range(group):
            fx = fx + _lookup(values[k], rows[k])
        return fx

    fx = lax.fori_loop(0, num_trees // group, add_trees, jnp.zeros(n, jnp.float32))
    target = state.y if state.z is None else state.z
    real = forest.leaf_indices[0] != 0  # padding has no leaf
    resid = jnp.where(real, target.astype(jnp.float32) - fx, 0.0)
    if forest.leaf_prec is not None:
        weights = jnp.where(real, state.prec_weights, 0.0)
        leaf_prec = lax.map(lambda row: _leaf_sums(row, weights, heap_size), forest.leaf_indices)
        forest = forest._replace(leaf_prec=_psum(leaf_prec, data_axis))
    return state._replace(resid=resid, forest=forest)
