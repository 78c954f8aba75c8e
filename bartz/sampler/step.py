"""One full Gibbs sweep of the BART sampler: `init` and `step`.

The sampler state is an immutable pytree (`State`). Every setting that fixes a
shape (number of trees, maximum depth, number of predictors and of
cut-points) is read from array shapes, so ``jax.jit(step)`` needs no static
arguments, and hyperparameters are arrays in the state: changing them does not
recompile.

One `step` is Chipman, George & McCulloch's "Bayesian backfitting":

1. For every tree at once (``vmap``), propose a move (GROW, PRUNE, CHANGE or
   SWAP, `bartz.sampler.moves`) and compute the tree-structure part of its
   Metropolis-Hastings ratio (proposal and prior probabilities). Moves
   depend only on the tree's own structure, so they are drawn in parallel
   before the sequential part.
2. Move every point to its "cell" for its tree's move (for all trees at
   once, `bartz.kernels.cell_partitions`: a tree's leaf indices do not
   change in the sweep before its turn). A cell determines the point's leaf
   in both the current and the proposed tree.
3. Sequentially over trees (``lax.scan``), one pass over the data per tree:
   apply the previous tree's change to the residuals (one lookup of ``old -
   new`` leaf values by cell), sum the residuals per cell with one
   scatter-add, count the points (and sum the precision weights) of the few
   cells the move regroups, add back the tree's own old values (constant
   per cell), accept or reject with the exact marginal-likelihood ratio,
   and draw all leaf values from their conjugate Gaussian posterior.
4. Draw the error variance from its conjugate inverse gamma (continuous
   outcome; right-censored responses first, `draw_censored`) or the probit
   latent variables (binary outcome).

The residuals (and, with weights, the per-leaf precision sums) are carried
from sweep to sweep and updated incrementally in float32; `refresh`
recomputes them exactly from the trees, against the slow drift of rounding
errors over long runs (`bartz.mcmcloop.run_mcmc` calls it every
`bartz.mcmcloop.REFRESH_EVERY` iterations).

Layout: the state and `init` in `bartz.sampler.state`, the moves and their
MH ratios in `bartz.sampler.moves`, the sweep over trees in
`bartz.sampler.sweep` (by pairs of trees: `bartz.sampler.pairs`; the leaves'
draws and output rows: `bartz.sampler.leaves`), the other Gibbs updates in
`bartz.sampler.conditionals`, several chains in `bartz.sampler.chains`; the
data-axis kernels and the plan that chooses them in `bartz.kernels`, the
random numbers in `bartz.kernels.rng`. This module holds `step` and
`refresh` and keeps every name at its old path (`bartz.mcmcstep`). No draw
depends on the number of CPU cores (the data blocks only change float
rounding).

The marginal likelihood of a leaf with precision sum ``P = sum_i 1 / (sigma^2
w_i^2)`` and weighted residual sum ``S = sum_i r_i / (sigma^2 w_i^2)`` is
``log L = 1/2 log(tau^-2 / (tau^-2 + P)) + 1/2 S^2 / (tau^-2 + P)``, with
``tau`` the prior sd of the leaves.

Tree prior (as R's BART): a node at depth ``d`` is internal with probability
``base / (1 + d)**power`` if it can split (it is above the bottom level and
some predictor still has a usable cut-point in it), else 0; the split
variable is drawn among the predictors with a usable cut-point (uniformly, or
with DART probabilities), the split index uniformly among the usable ones.
Like R's BART, a move is rejected when a leaf of the proposed tree would hold
fewer than ``min_points_per_leaf`` points; this makes the target the prior
restricted to trees whose leaves all have that many points, times the
likelihood, and the MH ratio stays exact for it.

References
----------
Chipman, George & McCulloch (1998), "Bayesian CART model search", JASA
93(443). Chipman, George & McCulloch (2010), "BART: Bayesian additive regression
trees", Ann. Appl. Stat. 4(1).
"""

import functools

import jax
import numpy as np
from jax import lax
from jax import numpy as jnp

from bartz import kernels
from bartz._compile import programs as _programs
from bartz.kernels import rng
from bartz.kernels.plan import SweepPlan, plan_sweep
from bartz.kernels.rng import fold_in
from bartz.sampler.chains import (
    chain_axes,
    chain_fields,
    init_chains,
    merge_fields,
    shared_fields,
    stack_chains,
    unstack_chains,
)
from bartz.sampler.conditionals import draw_censored, draw_dart, draw_latent, draw_latent_logit, draw_sigma2
from bartz.sampler.moves import ALL_KINDS, Moves, move_probs_array, propose_tree
from bartz.sampler.state import Dart, Forest, MoveKinds, State, StepInfo, init, plan_for
from bartz.sampler.sweep import sweep_trees

__all__ = [
    'Dart',
    'Forest',
    'Moves',
    'MoveKinds',
    'State',
    'propose_moves',
    'StepInfo',
    'SweepPlan',
    'plan_for',
    'plan_sweep',
    'refresh',
    'chain_axes',
    'chain_fields',
    'shared_fields',
    'merge_fields',
    'unstack_chains',
    'stack_chains',
    'fold_in',
    'init',
    'init_chains',
    'step',
    'sweep_count_info',
]


def propose_moves(key, state: State) -> Moves:
    """Propose a move (GROW, PRUNE, CHANGE or SWAP, see `bartz.sampler.moves`) for
    every tree at once."""
    forest = state.forest
    num_trees = forest.split_tree.shape[0]
    u = rng.uniform(key, (num_trees, 4))
    move_probs = _move_probs(state)
    kinds = ALL_KINDS if state.move_kinds is None else state.move_kinds.enabled
    exhaustible = None if state.move_kinds is None else state.move_kinds.exhaustible
    uniform = state.move_kinds is not None and state.move_kinds.uniform_splits
    r_birth = None if state.move_kinds is None else state.move_kinds.r_birth
    # (the small fields come as their entries, stacked here: fewer kernels
    # than stacked inside the vmap)
    propose = functools.partial(
        propose_tree, kinds=kinds, entries=True, exhaustible=exhaustible, uniform_splits=uniform, r_birth=r_birth
    )
    propose = jax.vmap(propose, in_axes=(0, 0, 0, None, None, None, None))
    moves = _programs.inlined(propose)(
        u, forest.var_tree, forest.split_tree, state.max_split, state.log_s, state.p_nonterminal, move_probs
    )
    entries = {name: jnp.stack(value, axis=1) for name, value in moves._asdict().items() if isinstance(value, tuple)}
    return moves._replace(**entries)


def _move_probs(state: State):
    if state.move_probs is None:
        return jnp.asarray(move_probs_array(None))
    return state.move_probs


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
    key_moves, key_sweep, key_last, key_dart = rng._split(key, 4)
    moves = propose_moves(key_moves, state)
    state, info = sweep_trees(key_sweep, state, moves, data_axis, plan_for(state, data_axis))
    if state.dart is not None:
        state = draw_dart(key_dart, state)
    if state.logit_offset is not None:
        state = draw_latent_logit(key_last, state, data_axis)
    elif state.z is not None:
        state = draw_latent(key_last, state, data_axis)
    else:
        if state.censor_bound is not None:
            # (its own key only here: fits without censoring keep their draws)
            key_censored, key_last = rng._split(key_last, 2)
            state = draw_censored(key_censored, state, data_axis)
        if state.sigma2_alpha is not None:
            state = draw_sigma2(key_last, state, data_axis)
        # else the error variance is known (R's lambda=0) and stays at its starting value
    return state, info


def sweep_count_info(info: StepInfo) -> dict:
    """Acceptance rates from a (possibly stacked) `StepInfo`, as floats."""
    grow_prop = np.sum(info.grow_proposed)
    prune_prop = np.sum(info.prune_proposed)
    change_prop = np.sum(info.change_proposed)
    swap_prop = np.sum(info.swap_proposed)
    return {
        'grow_acc': float(np.sum(info.grow_accepted) / max(grow_prop, 1)),
        'prune_acc': float(np.sum(info.prune_accepted) / max(prune_prop, 1)),
        'change_acc': float(np.sum(info.change_accepted) / max(change_prop, 1)),
        'swap_acc': float(np.sum(info.swap_accepted) / max(swap_prop, 1)),
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
      per tree, if the state carries them (with fixed weights; a logistic
      state has none, see `draw_latent_logit`).

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
    plan = plan_for(state, data_axis)
    group = kernels._largest_divisor(num_trees, 8)  # trees per loop iteration: few kernels, a small program

    def add_trees(g, fx):
        rows = lax.dynamic_slice_in_dim(forest.leaf_indices, g * group, group)
        values = lax.dynamic_slice_in_dim(forest.leaf_tree, g * group, group)
        # sequential over the group's trees: the same rounding for any group size
        for k in range(group):
            fx = fx + kernels.lookup(values[k], rows[k], plan=plan)
        return fx

    fx = lax.fori_loop(0, num_trees // group, add_trees, jnp.zeros(n, jnp.float32))
    target = state.y if state.z is None else state.z
    real = forest.leaf_indices[0] != 0  # padding has no leaf
    resid = jnp.where(real, target.astype(jnp.float32) - fx, 0.0)
    if forest.leaf_prec is not None:
        weights = jnp.where(real, state.prec_weights, 0.0)
        leaf_prec = lax.map(lambda row: kernels.leaf_sums(row, weights, heap_size, plan=plan), forest.leaf_indices)
        forest = forest._replace(leaf_prec=kernels.psum(leaf_prec, data_axis))
    return state._replace(resid=resid, forest=forest)
