"""Starting states of the chains: grow-from-root warm start, random prior trees.

`bartz.mcmcstep.init` makes the state where every tree is a single leaf of
value 0 (the "root start"). This module maps that state to other starting
points, each a consistent `bartz.mcmcstep.State` (trees, cached leaf indices,
per-leaf counts and precision sums, residuals, error variance, latents) that
`bartz.mcmcloop.run_mcmc` continues exactly:

- `warm_start`: ``k`` sweeps of XBART's grow-from-root (He, Yalov & Hahn
  2019). Each tree in turn is regrown from its root on the current partial
  residual, level by level: at every node the split (a predictor and a
  cut-point) or "no split" is drawn with probability proportional to the
  prior probability times the marginal likelihood of the resulting leaves,
  then the leaves are drawn from their conjugate posterior and the error
  variance from its conditional (probit / logistic: the latents after each
  sweep). It is a heuristic start: the MCMC that follows is what keeps the
  chain exact, and the trees respect every invariant of the sampler (split
  ranges, exhausted predictors, depth, points per leaf).
- `prior_trees`: trees drawn from the tree prior (forward sampler,
  vectorised over trees), leaves from their prior.
- `state_from_trees`: the shared last step, given trees -> consistent state.
- `start_chains`: what `bartz.gbart` calls: one chain or several, each from
  its own key.

Choices where the algorithm leaves room (documented in the user guide):

- Candidate cut-points: all of them. The per-node sums are histograms over
  the binned values (one scatter per tree and level), so trying every
  cut-point costs one cumulative sum, the same as trying a subsample.
- Weights: "no split" has weight ``(1 - p_split(d)) L(node)``; the split
  on predictor ``v`` at cut-point ``c`` has ``p_split(d) s_v / (sum of s over
  the usable predictors) / (number of usable cut-points of v) L(left)
  L(right)``, with ``p_split(d) = base / (1 + d)**power`` and ``L`` the leaf
  marginal likelihood: the BART prior of "this node splits once, its
  children are leaves" times the likelihood. With the same number of
  cut-points for every predictor this is XBART's rule (whose no-split weight
  is multiplied by the number of candidates because its split weights are
  not divided by it). ``s`` is uniform, or DART's ``exp(log_s)`` as it
  stands in the state (the warm start does not update it).
- A split is a candidate only if it is inside the range left by the
  ancestors and leaves at least ``min_points_per_leaf`` points in each
  child; the bottom level of the heap does not split.
- The error variance is redrawn after every tree (as XBART), the probit
  latents (or the logistic Polya-Gamma variables) after every sweep.

Memory: besides the state, ``O(n)`` per chain plus the histograms of one
level, ``2**(D-2) * p * (numcut + 1)`` floats (three times); the scatter
over predictors runs in groups of about `_HIST_GROUP_POINTS` point-predictor
pairs. Sharding the data over devices is not supported (`bartz.gbart`
refuses ``warmstart`` with a data-split mesh).

References
----------
He, Yalov & Hahn (2019), "XBART: Accelerated Bayesian additive regression
trees", AISTATS. Chipman, George & McCulloch (2010), "BART: Bayesian
additive regression trees", Ann. Appl. Stat. 4(1).
"""

import functools
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import jax
import numpy as np
from jax import lax
from jax import numpy as jnp

from bartz import kernels
from bartz.forest import grove
from bartz.kernels import rng
from bartz.run import loop as mcmcloop
from bartz.sampler import step as mcmcstep
from bartz.sampler.sweep import log_marginal

__all__ = ['num_bins', 'prior_trees', 'start_chains', 'state_from_trees', 'warm_start']

_leaf_sums = kernels.leaf_sums
# fast random numbers (one fused kernel per call on CPU, where JAX's own
# generators run a rolled loop of a dozen kernels per round; jaxlib 0.10.2)
_uniform = rng.uniform
_split = rng._split
_gamma = rng.gamma


def _gumbel(u):
    return -jnp.log(-jnp.log(u))


def _valid(state: mcmcstep.State):
    """Mask of the real points: padding sits at leaf index 0 in any
    consistent state."""
    return state.forest.leaf_indices[0] != 0


def state_from_trees(state: mcmcstep.State, var_tree, split_tree, leaf_tree) -> mcmcstep.State:
    """The state of one chain with the given trees, everything else made
    consistent with them.

    Leaf indices by traversal (padding: index 0), counts and precision sums
    per leaf by scatter, residuals ``y - f`` (``z - f`` for binary outcomes,
    with the latents of `state`). The error variance, latents and
    hyperparameters are those of `state`.

    Parameters
    ----------
    state
        A consistent single-chain state (e.g. from `bartz.mcmcstep.init`):
        it gives the data, which points are padding, and the latents.
    var_tree, split_tree, leaf_tree
        The trees, shapes and dtypes as in ``state.forest``.
    """
    forest = state.forest
    heap_size = forest.leaf_tree.shape[1]
    valid = _valid(state)
    leaf_indices = grove.traverse_forest(state.X, var_tree, split_tree)
    leaf_indices = jnp.where(valid, leaf_indices, 0).astype(jnp.uint8)
    ones = valid.astype(jnp.float32)
    count_rows = functools.partial(_leaf_sums, values=ones, size=heap_size)
    leaf_count = lax.map(lambda row: count_rows(row), leaf_indices).astype(jnp.int32)
    if forest.leaf_prec is None:
        leaf_prec = None
    else:
        weights = jnp.where(valid, state.prec_weights, 0.0)
        leaf_prec = lax.map(lambda row: _leaf_sums(row, weights, heap_size), leaf_indices)

    def add_tree(f, tree):
        row, values = tree
        return f + values[row.astype(jnp.int32)], None

    fx, _ = lax.scan(add_tree, jnp.zeros(state.resid.shape, jnp.float32), (leaf_indices, leaf_tree))
    target = state.y if state.z is None else state.z
    resid = jnp.where(valid, target - fx, 0.0).astype(jnp.float32)
    new_forest = forest._replace(
        var_tree=var_tree.astype(forest.var_tree.dtype),
        split_tree=split_tree.astype(forest.split_tree.dtype),
        leaf_tree=jnp.where(grove.is_leaf(split_tree), leaf_tree, 0.0).astype(jnp.float32),
        leaf_indices=leaf_indices,
        leaf_count=leaf_count,
        leaf_prec=leaf_prec,
    )
    return state._replace(forest=new_forest, resid=resid)


def _redraw_latents(key, state: mcmcstep.State) -> mcmcstep.State:
    """Probit latents or logistic Polya-Gamma variables given the trees; a
    no-op for continuous outcomes."""
    if state.logit_offset is not None:
        return mcmcstep.draw_latent_logit(key, state)
    if state.z is not None:
        return mcmcstep.draw_latent(key, state)
    return state


# ------------------------------------------------------------ prior trees


def prior_trees(key, state: mcmcstep.State) -> mcmcstep.State:
    """Start one chain from trees drawn from the tree prior.

    Level by level for all trees at once: a node at depth ``d`` splits with
    probability ``p_nonterminal[d]`` if some predictor has a usable cut-point
    in it, the predictor is drawn with probabilities ``exp(log_s)`` among the
    usable ones, the cut-point uniformly in the usable range. A split that
    would leave fewer than ``min_points_per_leaf`` points of the data in a
    child is not made (the node stays a leaf), so the start is in the
    support of the sampler's target. Leaf values are drawn from their prior
    ``N(0, tau^2)``; the error variance is that of `state`; probit latents
    are drawn given the trees.
    """
    key_trees, key_leaves, key_latent = _split(key, 3)
    forest = state.forest
    num_trees, heap_size = forest.leaf_tree.shape
    p = state.X.shape[0]
    depth = grove.heap_depth(heap_size)
    # all the uniforms of the structures at once: (trees, levels, nodes, 2 + p)
    u = _uniform(key_trees, (num_trees, depth - 1, 2 ** (depth - 2), 2 + p))
    grow = functools.partial(_prior_tree, state=state)
    var_tree, split_tree = jax.vmap(grow)(u)
    noise = jax.scipy.special.ndtri(_uniform(key_leaves, (num_trees, heap_size)))
    leaf_tree = noise * jnp.sqrt(state.leaf_prior_var)
    state = state_from_trees(state, var_tree, split_tree, leaf_tree)
    return _redraw_latents(key_latent, state)


def _prior_tree(u, state: mcmcstep.State):
    """One tree from the prior, as ``(var_row, split_row)``, from uniforms
    ``u`` of shape ``(D - 1, 2**(D-2), 2 + p)``."""
    X = state.X
    max_split = state.max_split
    p, n = X.shape
    heap_size = state.forest.leaf_tree.shape[1]
    depth = grove.heap_depth(heap_size)
    half = heap_size // 2
    valid = _valid(state)
    var_row = jnp.zeros(half, jnp.int32)
    split_row = jnp.zeros(half, jnp.int32)
    lo = jnp.zeros((heap_size, p), jnp.int32)
    hi = jnp.zeros((heap_size, p), jnp.int32).at[1].set(max_split)
    idx = jnp.where(valid, 1, 0).astype(jnp.int32)
    points = jnp.arange(n)
    for d in range(depth - 1):
        first, width = 2**d, 2**d
        nodes = first + jnp.arange(width)
        u_split, u_cut, u_var = u[d, :width, 0], u[d, :width, 1], u[d, :width, 2:]
        exists = (nodes == 1) | (split_row[nodes >> 1] != 0)
        num_cuts = hi[nodes] - lo[nodes]  # (width, p)
        usable = num_cuts > 0
        wants = u_split < state.p_nonterminal[d]
        v = jnp.argmax(jnp.where(usable, state.log_s + _gumbel(u_var), -jnp.inf), axis=1)
        lo_v = lo[nodes, v]
        hi_v = hi[nodes, v]
        c = jnp.minimum(lo_v + 1 + jnp.floor(u_cut * (hi_v - lo_v)).astype(jnp.int32), hi_v)
        split = exists & usable.any(axis=1) & wants
        # points per child of the candidate splits, on the actual data
        local = idx - first
        here = (local >= 0) & (local < width)
        local = jnp.clip(local, 0, width - 1)
        x = X[v[local], points].astype(jnp.int32)
        child = jnp.where(here, 2 * local + (x >= c[local]), 2 * width)
        counts = jnp.zeros(2 * width, jnp.int32).at[child].add(1, mode='drop').reshape(width, 2)
        split = split & (counts.min(axis=1) >= state.min_points_per_leaf)
        var_row, split_row, lo, hi, idx = _apply_splits(
            d, split, v, c, var_row, split_row, lo, hi, idx, X, points
        )
    return var_row, split_row


def _apply_splits(d, split, v, c, var_row, split_row, lo, hi, idx, X, points):
    """Record the splits of the nodes of level `d` (masks and choices of
    shape ``(2**d,)``), the ranges of their children, and move the points."""
    first, width = 2**d, 2**d
    nodes = first + jnp.arange(width)
    var_row = var_row.at[nodes].set(jnp.where(split, v, 0))
    split_row = split_row.at[nodes].set(jnp.where(split, c, 0))
    left, right = 2 * nodes, 2 * nodes + 1
    lo = lo.at[left].set(lo[nodes]).at[right].set(lo[nodes])
    hi = hi.at[left].set(hi[nodes]).at[right].set(hi[nodes])
    hi = hi.at[left, v].set(jnp.where(split, c - 1, hi[left, v]))
    lo = lo.at[right, v].set(jnp.where(split, c, lo[right, v]))
    local = idx - first
    here = (local >= 0) & (local < width)
    local = jnp.clip(local, 0, width - 1)
    go = here & split[local]
    x = X[v[local], points].astype(jnp.int32)
    idx = jnp.where(go, 2 * idx + (x >= c[local]), idx)
    return var_row, split_row, lo, hi, idx


# ------------------------------------------------------------ grow from root


def warm_start(key, state: mcmcstep.State, num_sweeps: int, bins: int | None = None) -> mcmcstep.State:
    """`num_sweeps` sweeps of grow-from-root from `state` (one chain).

    Every sweep regrows each tree in turn from its root on the partial
    residual of the others (see the module docstring for the weights), draws
    its leaves from their conjugate posterior and then the error variance;
    after all trees, the probit latents (or logistic Polya-Gamma variables).
    The result is a consistent state, made by `state_from_trees`.
    """
    if num_sweeps == 0:
        return state
    if bins is None:
        bins = num_bins(state.max_split)
    forest = state.forest
    num_trees = forest.leaf_tree.shape[0]
    continuous = state.z is None

    def sweep(state, key):
        key_trees, key_latent = _split(key, 2)
        keys = _split(key_trees, num_trees)
        valid = _valid(state)
        carry = (state.resid, state.sigma2)
        xs = (keys, state.forest.leaf_tree, state.forest.leaf_indices)
        (resid, sigma2), trees = lax.scan(functools.partial(_grow_tree, state=state, valid=valid, bins=bins), carry, xs)
        var_tree, split_tree, leaf_tree, leaf_indices, leaf_count, leaf_prec = trees
        forest = state.forest._replace(
            var_tree=var_tree.astype(state.forest.var_tree.dtype),
            split_tree=split_tree.astype(state.forest.split_tree.dtype),
            leaf_tree=leaf_tree,
            leaf_indices=leaf_indices,
            leaf_count=leaf_count,
            leaf_prec=leaf_prec if state.forest.leaf_prec is not None else None,
        )
        state = state._replace(forest=forest, resid=resid, sigma2=sigma2 if continuous else state.sigma2)
        return _redraw_latents(key_latent, state), None

    state, _ = lax.scan(sweep, state, _split(key, num_sweeps))
    # rebuilt from the trees alone: the residuals lose the rounding of the
    # incremental updates, and the bookkeeping is the same as `prior_trees`'
    return state_from_trees(state, state.forest.var_tree, state.forest.split_tree, state.forest.leaf_tree)


def _grow_tree(carry, tree, *, state: mcmcstep.State, valid, bins):
    """Regrow one tree from its root (a `lax.scan` body over the trees)."""
    resid, sigma2 = carry
    key, old_leaves, old_indices = tree
    key_grow, key_sigma = _split(key, 2)
    p, n = state.X.shape
    heap_size = old_leaves.shape[0]
    depth = grove.heap_depth(heap_size)
    half = heap_size // 2
    weights = state.prec_weights
    inv_sigma2 = 1.0 / sigma2
    inv_tau2 = 1.0 / state.leaf_prior_var

    # the partial residual: this tree's current values added back
    r = jnp.where(valid, resid + old_leaves[old_indices.astype(jnp.int32)], 0.0)
    stats = _point_stats(r, weights, valid)

    var_row = jnp.zeros(half, jnp.int32)
    split_row = jnp.zeros(half, jnp.int32)
    lo = jnp.zeros((heap_size, p), jnp.int32)
    hi = jnp.zeros((heap_size, p), jnp.int32).at[1].set(state.max_split)
    idx = jnp.where(valid, 1, 0).astype(jnp.int32)
    points = jnp.arange(n)
    # the tree's uniforms in one call: per level and node, p + 1 for the
    # choice among "no split" and the predictors, bins - 1 for the cut-point;
    # then the leaf noise
    per_node = p + bins
    u = _uniform(key_grow, ((2 ** (depth - 1) - 1) * per_node + heap_size,))
    cuts = jnp.arange(1, bins)  # split index c: a point goes left iff its bin < c
    below = (jnp.arange(bins)[:, None] < cuts[None, :]).astype(jnp.float32)  # (bins, bins - 1)
    level = _Level(state, stats, u, per_node, bins, cuts, below, points, inv_sigma2, inv_tau2)
    var_row, split_row, lo, hi, idx = _grow_levels((var_row, split_row, lo, hi, idx), depth, level)

    leaves, leaf_idx, leaf_stats = _draw_leaves(stats, idx, valid, split_row, u[-heap_size:], inv_sigma2, inv_tau2)
    resid = jnp.where(valid, r - leaves[idx], 0.0)

    count = leaf_stats[:, -1].astype(jnp.int32)
    prec = leaf_stats[:, 1] if weights is not None else None
    if state.sigma2_alpha is not None:
        sigma2 = _draw_sigma2(key_sigma, state, resid, count, weights)
    return (resid, sigma2), (var_row, split_row, leaves, leaf_idx, count, prec)


class _Level(NamedTuple):
    """What every level of a tree regrown by `_grow_tree` reads."""

    state: mcmcstep.State
    stats: jax.Array  # (n, k): per point weighted residual, precision[, count] (`_point_stats`)
    u: jax.Array  # the tree's uniforms, ``per_node`` per node of each level, then the leaf noise
    per_node: int  # p + bins: uniforms per node
    bins: int  # bins of every predictor (`num_bins`)
    cuts: jax.Array  # (bins - 1,) the split indices 1, ..., bins - 1
    below: jax.Array  # (bins, bins - 1) float32: bin b < cut c
    points: jax.Array  # (n,) the points' indices
    inv_sigma2: jax.Array  # 1 / sigma^2
    inv_tau2: jax.Array  # 1 / the leaves' prior variance


def _grow_levels(carry, depth: int, level: _Level):
    """Grow the tree level by level from its root: ``carry`` is
    ``(var_row, split_row, lo, hi, idx)`` (`_apply_splits`)."""
    for d in range(depth - 1):
        grow = functools.partial(_grow_level, d, level=level)
        if d == 0:
            carry = grow(carry)
        else:
            # most trees stop after a few levels: skip the histograms of a
            # level with no node (a branch under lax.map, a select under vmap)
            parents = carry[1][2 ** (d - 1) : 2**d]
            carry = lax.cond(jnp.any(parents != 0), grow, lambda c: c, carry)
    return carry


def _grow_level(d: int, carry, *, level: _Level):
    """Level `d` of a regrown tree: at each of its nodes, no split, or a
    split on a predictor and cut-point, drawn in proportion to their
    posterior weights (`_log_weights`); then the points follow the splits."""
    var_row, split_row, lo, hi, idx = carry
    X = level.state.X
    first, width = 2**d, 2**d
    nodes = first + jnp.arange(width)
    hist = _histograms(X, idx - first, width, level.bins, level.stats)  # (width, p, bins, k)
    # sums left of each cut-point: a product with a triangular matrix,
    # one kernel (a cumsum is a scan of many small ones on CPU, jaxlib 0.10.2)
    left = jnp.einsum('wpbk,bc->wpck', hist, level.below, precision=lax.Precision.HIGHEST)
    total = hist[:, 0].sum(axis=1)  # (width, k)
    right = total[:, None, None, :] - left
    log_split, log_stay, exists = _log_weights(d, nodes, left, right, total, lo, hi, split_row, level)
    u_level = level.u[(first - 1) * level.per_node : (2 * first - 1) * level.per_node].reshape(width, level.per_node)
    split, v, c = _draw_split(log_split, log_stay, exists, u_level)
    return _apply_splits(d, split, v, c, var_row, split_row, lo, hi, idx, X, level.points)


def _log_weights(d: int, nodes, left, right, total, lo, hi, split_row, level: _Level):
    """The log posterior weights of the choices at the nodes of level `d`:
    the prior times the marginal likelihood of the leaves.

    A split on predictor ``j`` at cut-point ``c``: ``log P(split at depth
    d) + log s_j - log(cut-points of j) + log L(left) + log L(right)``,
    ``(width, p, bins - 1)``, -inf where the cut-point is out of the node's
    range, leaves a child with fewer than the minimum points, or the node
    does not exist; no split: ``log(1 - P(split)) + log L(node)``,
    ``(width,)``. Also whether each node exists."""
    state = level.state
    # S = weighted residual sum, P = precision sum, N = count
    S_l, S_r, S = left[..., 0], right[..., 0], total[:, 0]
    P_l, P_r, P = left[..., 1], right[..., 1], total[:, 1]
    N_l, N_r = left[..., -1], right[..., -1]
    inv_sigma2, inv_tau2 = level.inv_sigma2, level.inv_tau2

    lo_n, hi_n = lo[nodes], hi[nodes]  # (width, p)
    num_cuts = hi_n - lo_n
    usable = num_cuts > 0
    in_range = (level.cuts > lo_n[:, :, None]) & (level.cuts <= hi_n[:, :, None])
    big_enough = (N_l >= state.min_points_per_leaf) & (N_r >= state.min_points_per_leaf)
    candidate = in_range & big_enough

    p_split = state.p_nonterminal[d]
    exists = (nodes == 1) | (split_row[nodes >> 1] != 0)
    can_split = exists & usable.any(axis=1) & (p_split > 0)
    log_var = jnp.where(usable, state.log_s, -jnp.inf)
    log_var = log_var - jax.scipy.special.logsumexp(log_var, axis=1, keepdims=True)
    log_prior_split = jnp.log(p_split) + log_var - jnp.log(jnp.maximum(num_cuts, 1))  # (width, p)
    log_split = log_prior_split[:, :, None] + log_marginal(S_l, P_l, inv_sigma2, inv_tau2)
    log_split = log_split + log_marginal(S_r, P_r, inv_sigma2, inv_tau2)
    log_split = jnp.where(candidate & can_split[:, None, None], log_split, -jnp.inf)
    log_stay = jnp.log1p(-p_split) + log_marginal(S, P, inv_sigma2, inv_tau2)
    log_stay = jnp.where(p_split < 1, log_stay, -jnp.inf)
    return log_split, log_stay, exists


def _draw_split(log_split, log_stay, exists, u_level):
    """Draw each node's choice from its log weights (`_log_weights`), in two
    stages, exactly: "no split" or the predictor, with the predictor's
    weight summed over its cut-points, then the cut-point given the
    predictor; both by Gumbel-max on the uniforms `u_level` (``(width,
    p + bins)``). Returns whether each node splits, the predictor and the
    cut-point."""
    p = log_split.shape[1]
    log_var_total = jax.scipy.special.logsumexp(log_split, axis=2)  # (width, p)
    logits = jnp.concatenate([log_stay[:, None], log_var_total], axis=1)
    choice = jnp.argmax(logits + _gumbel(u_level[:, : p + 1]), axis=1)
    split = exists & (choice > 0)
    v = jnp.maximum(choice - 1, 0)
    log_cut = jnp.take_along_axis(log_split, v[:, None, None], axis=1)[:, 0]  # (width, bins - 1)
    c = jnp.argmax(log_cut + _gumbel(u_level[:, p + 1 :]), axis=1) + 1
    return split, v, c


def _point_stats(r, weights, valid):
    """Per point: weighted residual, precision, count (the last only if
    weighted); zero on the points not `valid`."""
    if weights is not None:
        w = jnp.where(valid, weights, 0.0)
        return jnp.stack([r * w, w, valid.astype(jnp.float32)], axis=1)
    return jnp.stack([r, valid.astype(jnp.float32)], axis=1)


def _draw_leaves(stats, idx, valid, split_row, u_leaves, inv_sigma2, inv_tau2):
    """The leaves from their conjugate posterior (by inverse CDF of the
    uniforms `u_leaves`), the points' leaf indices, and the leaves' sums of
    `stats`."""
    heap_size = split_row.shape[0] * 2
    leaf_idx = jnp.where(valid, idx, 0).astype(jnp.uint8)
    leaf_stats = jnp.zeros((heap_size, stats.shape[1]), jnp.float32).at[idx].add(stats)
    leaf_stats = leaf_stats.at[0].set(0.0)
    S, P = leaf_stats[:, 0], leaf_stats[:, 1]
    post_prec = P * inv_sigma2 + inv_tau2
    post_mean = S * inv_sigma2 / post_prec
    noise = jax.scipy.special.ndtri(u_leaves)
    leaf = grove.is_leaf(split_row)
    leaves = jnp.where(leaf, post_mean + noise * lax.rsqrt(post_prec), 0.0)
    return leaves, leaf_idx, leaf_stats


def _draw_sigma2(key, state: mcmcstep.State, resid, count, weights):
    """The error variance from its inverse-gamma conditional given the residuals."""
    sq = resid * resid if weights is None else resid * resid * weights
    alpha = state.sigma2_alpha + jnp.sum(count).astype(jnp.float32) / 2
    beta = state.sigma2_beta + jnp.sum(sq) / 2
    return (beta / _gamma(key, alpha)).astype(jnp.float32)


def _histograms(X, local, width, bins, stats):
    """``hist[k, v, b] = sum of stats[i]`` over the points ``i`` in node
    ``k`` of the level (`local`: node index within the level, others out
    of ``0 .. width - 1``) with ``X[v, i] == b``; shape ``(width, p, bins,
    stats.shape[1])``. One scatter per group of predictors, so the
    temporaries take about `_HIST_GROUP_POINTS` point-predictor pairs."""
    p, n = X.shape
    k = stats.shape[1]
    group = kernels._largest_divisor(p, max(1, _HIST_GROUP_POINTS // max(n, 1)))
    size = width * group * bins
    here = (local >= 0) & (local < width)
    offset = jnp.where(here, local * (group * bins), size)  # out of the level: dropped
    lanes = (jnp.arange(group, dtype=jnp.int32) * bins)[:, None]
    values = jnp.broadcast_to(stats, (group, n, k)).reshape(group * n, k)

    def one_group(Xg):  # (group, n)
        index = jnp.where(here, offset + lanes + Xg.astype(jnp.int32), size)
        hist = jnp.zeros((size, k), stats.dtype).at[index.reshape(-1)].add(values, mode='drop')
        return hist.reshape(width, group, bins, k)

    if group == p:
        return one_group(X)
    hists = lax.map(one_group, X.reshape(p // group, group, n))  # (p / group, width, group, bins, k)
    return jnp.moveaxis(hists, 0, 1).reshape(width, p, bins, k)


_HIST_GROUP_POINTS = 2**22


def _sequential():
    """Chains one after the other on CPU, where XLA's batched scatters are
    slower per element than unbatched ones (jaxlib 0.10.2); `vmap` elsewhere."""
    return jax.default_backend() == 'cpu'


def num_bins(max_split) -> int:
    """Static number of histogram bins: one more than the most cut-points
    of a predictor (from a concrete ``max_split``)."""
    return max(int(np.max(np.asarray(max_split), initial=0)) + 1, 2)


# ------------------------------------------------------------ the chains


DEFAULT_START = 'root'
"""The start of `start_chains` with ``warmstart=0``: ``'root'`` or ``'prior'``
(``benchmarks/warmstart.py`` compares them; see the user guide)."""


def start_chains(key, state: mcmcstep.State, num_chains: int | None, warmstart: int, start: str | None = None):
    """The starting states of the chains, each from its own key.

    Parameters
    ----------
    key
        A JAX random key (only used when the start is random).
    state
        The root start from `bartz.mcmcstep.init`: single chain if
        `num_chains` is None, else with the chain axis of
        `bartz.mcmcstep.init_chains`.
    num_chains
        Number of chains, or None for a single chain without chain axis.
    warmstart
        Number of grow-from-root sweeps (`warm_start`); 0 for none.
    start
        With ``warmstart=0``: ``'root'`` (every tree a leaf of value 0, all
        chains the same, `state` returned as it is) or ``'prior'``
        (`prior_trees`, a different draw for every chain); None for
        `DEFAULT_START`.

    Returns
    -------
    The state for `bartz.mcmcloop.run_mcmc`, with the same chain axis.
    """
    start = DEFAULT_START if start is None else start
    if warmstart == 0 and start == 'root':
        return state
    bins = num_bins(state.max_split)
    workers = mcmcloop.chain_workers(num_chains, None) if len(state.X.devices()) == 1 else 0
    if workers:
        program = _chain_start_program(num_chains, warmstart, start, bins)
        return _start_on_threads(key, state, num_chains, workers, program)
    program = _start_program(num_chains, warmstart, start, bins, _sequential())
    return program(key, state)


def _start_on_threads(key, state, num_chains, workers, program):
    """The chains' starts as separate calls on up to `workers` threads (on
    one CPU device, as `bartz.mcmcloop.run_mcmc` runs the chains), with the
    keys of the single program: the same starting states."""
    device = next(iter(state.X.devices()))
    shared = mcmcstep.shared_fields(state)
    owns = mcmcstep.unstack_chains(state, num_chains, device)
    with ThreadPoolExecutor(workers, thread_name_prefix='bartz-start') as pool:
        owns = list(pool.map(lambda c: program(key, owns[c], shared, np.int32(c)), range(num_chains)))
    return mcmcstep.stack_chains(owns, shared, device)


@functools.cache
def _chain_start_program(num_chains, warmstart, start, bins):
    """The compiled start of chain ``chain`` of `num_chains` (its own
    fields; the shared ones only read)."""
    one = _one_start(warmstart, start, bins)

    def start_chain(key, own, shared, chain):
        out = one(_split(key, num_chains)[chain], mcmcstep.merge_fields(own, shared))
        return mcmcstep.chain_fields(out)

    return jax.jit(start_chain)


@functools.cache
def _start_program(num_chains, warmstart, start, bins, sequential):
    """The compiled start (cached: fits of the same shapes reuse it, and the
    data axis is padded to `bartz.buckets`' ladder)."""
    one = _one_start(warmstart, start, bins)

    def start_from(key, state):
        if num_chains is None:
            return one(key, state)
        keys = _split(key, num_chains)
        return _map_chains(one, keys, state, sequential)

    return jax.jit(start_from)


def _one_start(warmstart, start, bins):
    """The start of one chain: ``fn(key, state)``."""
    if warmstart > 0:
        return functools.partial(warm_start, num_sweeps=warmstart, bins=bins)
    if start == 'prior':
        return prior_trees
    raise ValueError(start)


def _map_chains(fn, keys, state, sequential):
    """``fn(key, state)`` for every chain: `vmap` over the chain axes, or on
    CPU a `lax.map` (one chain after the other)."""
    axes = mcmcstep.chain_axes(state)
    if not sequential:
        return jax.vmap(fn, in_axes=(0, axes), out_axes=axes)(keys, state)
    names = [name for name, axis in zip(mcmcstep.State._fields, axes, strict=True) if axis == 0]

    def body(args):
        key, fields = args
        out = fn(key, state._replace(**fields))
        return {name: getattr(out, name) for name in names}

    out = lax.map(body, (keys, {name: getattr(state, name) for name in names}))
    return state._replace(**out)
