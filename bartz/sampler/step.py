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
   outcome) or the probit latent variables (binary outcome).

The residuals (and, with weights, the per-leaf precision sums) are carried
from sweep to sweep and updated incrementally in float32; `refresh`
recomputes them exactly from the trees, against the slow drift of rounding
errors over long runs (`bartz.mcmcloop.run_mcmc` calls it every
`bartz.mcmcloop.REFRESH_EVERY` iterations).

Layout: the statistics of the moves live in `bartz.sampler.moves`, the data-axis
kernels (scatter lanes, unbatched vmaps on CPU, data blocks) in
`bartz.kernels`, the random numbers in `bartz.kernels.rng`; this module holds
the state, `init`, the sweep and the other Gibbs updates. No draw depends on
the number of CPU cores (the data blocks only change float rounding).

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

import dataclasses
import functools
from typing import NamedTuple

import jax
import numpy as np
from jax import lax, random
from jax import numpy as jnp
from jax.scipy.special import ndtr, ndtri

from bartz._compile import programs as _programs
from bartz.forest import grove
from bartz import kernels
from bartz.sampler import polyagamma
from bartz.kernels.rng import (  # noqa: F401 (fold_in is public here; the others are used by tests and peers)
    _gamma,
    _normal_from_words,
    _point_uniforms,
    _random_words,
    _split,
    _threefry2x32,
    _uniform,
    _unit_float,
    fold_in,
)
from bartz.kernels import _largest_divisor, _leaf_sums, _lookup, _psum  # noqa: F401
from bartz.kernels import cpu as _cpu
from bartz.kernels.plan import SweepPlan, plan_sweep
from bartz.sampler.moves import ALL_KINDS, CHANGE, SWAP, move_probs_array
from bartz.sampler.moves import Moves
from bartz.sampler.moves import propose_tree as _propose_tree

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


class Forest(NamedTuple):
    """The trees and what the next sweep needs about them."""

    var_tree: jax.Array  # (m, H/2) uint8/uint16: split variable
    split_tree: jax.Array  # (m, H/2) uint: split index, 0 = not internal
    leaf_tree: jax.Array  # (m, H) float32: leaf values, 0 at non-leaves
    leaf_indices: jax.Array  # (m, n) uint8: heap index of each point's leaf
    leaf_count: jax.Array  # (m, H) int32: points per leaf (0 at non-leaves)
    leaf_prec: jax.Array | None  # (m, H) float32: sum of 1/w^2 per leaf; None if unweighted or logistic


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
    move_probs: jax.Array | None = None  # (4,) float32: grow, prune, change, swap; None: the defaults
    move_kinds: 'MoveKinds | None' = None  # static: the kinds compiled (those with positive probability at init); None: all
    plan: SweepPlan | None = None  # static: the sweep's kernels; None: `plan_sweep` for the shapes `step` traces


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class MoveKinds:
    """The kinds of tree move (GROW, PRUNE, CHANGE, SWAP) that the compiled
    step can propose: static (part of the state's tree structure, not an
    array), so that a sampler without CHANGE and SWAP (R's birth/death
    sampler) compiles neither their proposal (about 40% of it) nor the
    sweep's bookkeeping of four cells per move (two suffice). A kind left
    out is never proposed, whatever ``State.move_probs`` says; the draws
    are those of the step compiled for all four kinds with the same
    probabilities, up to float rounding.

    With them, whether the proposal must count the predictors exhausted at
    each node (`exhaustible`, from the predictors with cut-points, at
    `init`): at most ``D - 1`` are exhausted on a path of a tree of ``D``
    levels, so with at least ``D`` predictors every node keeps one and the
    count is not compiled; with fewer, only the count is (None, the
    default: both, chosen at run time; the same draws bit for bit). In a
    first fit at n = 1,000 the unused way cost 6 kernel modules of about
    130 (benchmarks/README.md, "Session of 2026-11-29").

    And whether the split probabilities are uniform for good
    (`uniform_splits`: ``log_s`` all 0 at `init`, no DART to change it):
    the proposal then takes them as constants, which XLA folds into its
    code, and knows the maxima that shift their exponentials (0): 6 kernel
    modules fewer and 16% less LLVM IR at n = 1,000, the same draws bit
    for bit."""

    enabled: tuple  # 4 bools: GROW, PRUNE, CHANGE, SWAP
    exhaustible: bool | None = None  # fewer predictors with cut-points than levels; None: checked at run time
    uniform_splits: bool = False  # log_s is 0 and stays so

    @property
    def grow_prune_only(self) -> bool:
        return not (self.enabled[CHANGE] or self.enabled[SWAP])


def _move_kinds(move_probs, max_split, max_depth: int, log_s, dart) -> MoveKinds:
    exhaustible = int(np.count_nonzero(np.asarray(max_split) > 0)) < max_depth
    uniform = dart is None and not np.any(np.asarray(log_s))
    return MoveKinds(tuple(bool(p > 0) for p in np.asarray(move_probs)), exhaustible, uniform)


class Dart(NamedTuple):
    """DART (Linero 2018): split probabilities ``s ~ Dirichlet(theta/p, ...)``,
    ``theta / (theta + rho) ~ Beta(a, b)``."""

    theta: jax.Array  # () float32: concentration of the Dirichlet
    theta_fixed: jax.Array  # () bool: keep theta fixed (R: theta != 0)
    a: jax.Array  # () float32
    b: jax.Array  # () float32
    rho: jax.Array  # () float32
    on: jax.Array  # () bool: updates switched on (R: after half the burn-in)
    group: jax.Array  # (p,) int32: the predictor of each column (copies of a column with missing values share one)


class StepInfo(NamedTuple):
    """Diagnostics of one sweep, not needed by the next one."""

    grow_proposed: jax.Array  # () int32: trees that proposed a grow
    grow_accepted: jax.Array  # () int32
    prune_proposed: jax.Array  # () int32
    prune_accepted: jax.Array  # () int32
    change_proposed: jax.Array  # () int32
    change_accepted: jax.Array  # () int32
    swap_proposed: jax.Array  # () int32
    swap_accepted: jax.Array  # () int32


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
    move_probs=None,
    plan: SweepPlan | None = None,
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
    move_probs
        The tree moves and their probabilities (see `bartz.sampler.moves`): None
        for the default ``{'grow': 0.25, 'prune': 0.25, 'change': 0.4,
        'swap': 0.1}`` (as BayesTree and dbarts), a sequence of names (their
        default probabilities, renormalised: ``('grow', 'prune')`` is the
        classical sampler), or a dict ``{name: probability}``. Validated
        here (`bartz.sampler.moves.move_probs_array`); stored as an array, so
        changing a probability does not recompile, and with the set of
        kinds of positive probability (`MoveKinds`, static): only those are
        compiled.
    valid
        Optional ``(n,)`` bool mask of real points. Other points (padding, so
        that ``n`` divides among devices) get leaf index 0, an unused heap
        slot, and so never enter any sum; their ``y`` must be 0.
    plan
        The sweep's kernels (`bartz.kernels.plan.SweepPlan`, static: part of
        the state's tree structure). None (the default): `step` plans for
        the points it sees (on each device, inside ``shard_map``), the
        backend and the weights, before tracing the sweep. Give one (from
        `plan_sweep`, changed with its ``replace``) to force a path;
        every plan draws the same chain, up to float rounding.
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
    leaf_prec = None
    if prec_weights is not None:
        prec_weights = np.where(valid, np.asarray(prec_weights, np.float32), 0.0).astype(np.float32)
    if prec_weights is not None and not logistic:
        # (logistic: the weights change every sweep, see `_draw_latent_logit`)
        leaf_prec = np.zeros((num_trees, heap_size), np.float32)
        leaf_prec[:, 1] = np.sum(prec_weights, dtype=np.float32)
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
        move_probs=move_probs_array(move_probs),
        plan=plan,
    )
    state = state._replace(move_kinds=_move_kinds(state.move_probs, max_split, max_depth, state.log_s, state.dart))
    # distinct device buffers for every field, so that the state can be donated
    return jax.tree.map(lambda x: x if x is X else jax.device_put(x), state)


def _init_dart(options: dict, max_split) -> Dart:
    theta = float(options.get('theta', 0.0))
    p = np.asarray(max_split).shape[0]
    group = options.get('group')
    group = np.arange(p, dtype=np.int32) if group is None else np.asarray(group, np.int32)
    if group.shape != (p,) or np.any(group < 0) or np.any(group >= p):
        raise ValueError(f'dart group must be {p} indices in [0, {p}), got {group!r}')
    rho = options.get('rho')
    if rho is None:  # the number of predictors with a cut-point
        rho = float(np.unique(group[np.asarray(max_split) > 0]).size)
    return Dart(
        theta=np.float32(theta if theta > 0 else 1.0),
        theta_fixed=np.bool_(theta > 0),
        a=np.float32(options.get('a', 0.5)),
        b=np.float32(options.get('b', 1.0)),
        rho=np.float32(rho),
        on=np.bool_(options.get('on', False)),
        group=group,
    )


def propose_moves(key, state: State) -> Moves:
    """Propose a move (GROW, PRUNE, CHANGE or SWAP, see `bartz.sampler.moves`) for
    every tree at once."""
    forest = state.forest
    num_trees = forest.split_tree.shape[0]
    u = _uniform(key, (num_trees, 4))
    move_probs = _move_probs(state)
    kinds = ALL_KINDS if state.move_kinds is None else state.move_kinds.enabled
    exhaustible = None if state.move_kinds is None else state.move_kinds.exhaustible
    uniform = state.move_kinds is not None and state.move_kinds.uniform_splits
    # (the small fields come as their entries, stacked here: 10 kernels
    # fewer per iteration at n = 1,000 than stacked inside the vmap)
    propose = functools.partial(_propose_tree, kinds=kinds, entries=True, exhaustible=exhaustible, uniform_splits=uniform)
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



# ``_EARLIER[c, d]``: cell ``d`` comes before cell ``c`` (of the four cells of a move)
_EARLIER = np.tri(4, k=-1, dtype=bool)


def _log_marginal(resid_sum, prec_sum, inv_sigma2, inv_tau2):
    """Log marginal likelihood of a leaf, up to terms that cancel in ratios."""
    post_prec = prec_sum * inv_sigma2 + inv_tau2
    scaled_sum = resid_sum * inv_sigma2
    return 0.5 * jnp.log(inv_tau2 / post_prec) + 0.5 * scaled_sum**2 / post_prec


def _sweep_trees(key, state: State, moves: Moves, data_axis=None, plan: SweepPlan | None = None):
    """Accept/reject the moves and redraw the leaves, one tree after the other.

    Per tree, one pass over the data. A move regroups the points of at most
    two leaves into at most four cells (heap slots, `bartz.sampler.moves.Moves`);
    the pass sums the residuals by slot (one scatter), with weights also
    the precisions (the same scatter: every precision sum is fresh, never a
    difference of larger sums, which would lose all digits of a small leaf
    among millions of points). It counts the points of every slot with one
    more column of the same scatter at small n (one data block), else of
    at most two cells (the others are carried integer counts, or
    differences of them, which are exact). The statistics of the leaves
    the move touches (at most two per tree) are sums over its cells; the
    log marginal likelihood ratio is computed from them alone (the other
    leaves are the same in both trees and cancel), and every leaf of the
    final tree gets its conjugate draw. The tree writes one row (per slot:
    the new value, the count, the precision, ``old - new`` value; its flags
    at the unused slot 0), which is its output and which the next tree
    reads: the tree's change in the residuals is applied with the next
    tree's pass; at several data blocks the loop only reads the cells of
    the points, and their final leaves, in every tree, are set in one pass
    after it (`write_in_loop`).

    On CPU below `_SPLIT_MAX_POINTS` points (data not sharded), where a
    tree costs what its kernels cost, the loop body is its pass over the
    data (`data_pass`) and its statistics and draws (`tree_stats`), each
    in a conditional whose predicate is always true: XLA's CPU runtime runs an executor of at most 8 kernels in order
    on one thread, and one of more kernels (the whole body, 17) in its
    concurrent mode, which hands kernels between threads. Split, the body
    is three executors of at most 8 kernels (6, 6 and 8 at n = 1,000), the
    draws the same bit for bit.

    On CPU at one data block without weights, from `_PAIR_MIN_POINTS`
    points, the loop goes by pairs of trees instead (`_pair_sweep`): two
    small trees share one pass over the data, the draws differ by float
    rounding only.
    """
    forest = state.forest
    num_trees, heap_size = forest.leaf_tree.shape
    if plan is None:
        plan = plan_for(state, data_axis)
    # one RNG call: the acceptance uniforms and the leaf noise
    log_u, noise = _accept_and_noise(key, num_trees, heap_size)
    inv_sigma2 = 1.0 / state.sigma2
    inv_tau2 = 1.0 / state.leaf_prior_var
    prec_weights = state.prec_weights
    weighted = prec_weights is not None
    min_points = state.min_points_per_leaf
    cell_indices = kernels.cell_partitions(
        state.X, forest.leaf_indices, moves.var, moves.split, moves.remap_leaf, moves.remap_cell
    )
    if state.move_kinds is not None and state.move_kinds.grow_prune_only:
        # GROW and PRUNE touch two cells (the node's children): the last
        # two of the four are always unused, so they are not carried
        moves = moves._replace(**{name: getattr(moves, name)[:, :2] for name in ('cells', 'cell_old', 'cell_new', 'cell_fresh')})
    num_cells = moves.cells.shape[1]

    # for all trees at once, outside the loop over trees: this tree's
    # current value on each slot (its leaf's; for a cell, its current
    # leaf's), and the (at most two) cells whose points are counted: GROW's left cell,
    # CHANGE's two cells that change side, SWAP's cell that leaves the
    # sibling (cells in `bartz.sampler.moves` order)
    used = moves.cells >= 0  # (m, num_cells)
    slot = np.arange(heap_size, dtype=np.int32)  # a constant: an iota is a kernel of its own (an LLVM module)
    at_cell = jnp.clip(moves.cells, 0, heap_size - 1)
    cell_old = jnp.clip(moves.cell_old, 0, heap_size - 1)
    # (the cells are distinct slots, none a leaf the move leaves alone:
    # selects over the heap, not a scatter, which is a kernel of its own)
    old_of_cell = jnp.take_along_axis(forest.leaf_tree, cell_old, axis=1)  # (m, num_cells)
    old_at = jnp.where(moves.identity, forest.leaf_tree, 0.0)
    for d in range(num_cells):
        old_at = jnp.where(used[:, d : d + 1] & (slot == at_cell[:, d : d + 1]), old_of_cell[:, d : d + 1], old_at)
    counted_of_kind = np.array([[0, -1], [-1, -1], [2, 3], [3, -1]])  # GROW, PRUNE, CHANGE, SWAP
    counted_of_kind = np.where(counted_of_kind < num_cells, counted_of_kind, -1)  # (kinds not compiled)
    # the (at most two) cells whose points can end in another leaf than
    # their slot: GROW's and PRUNE's two children (to the node if the tree
    # ends pruned), CHANGE's two side-changing cells, SWAP's cells leaving
    # the moved leaf and the sibling
    remapped_of_kind = np.minimum(np.array([[0, 1], [0, 1], [2, 3], [1, 3]]), num_cells - 1)
    remapped_of_kind = jnp.asarray(remapped_of_kind)[moves.kind]  # (m, 2)
    which = jnp.asarray(counted_of_kind)[moves.kind]  # (m, 2) positions in `cells`, -1: none
    counted = jnp.where((which >= 0) & moves.allowed[:, None], jnp.take_along_axis(moves.cells, jnp.maximum(which, 0), axis=1), -1)

    # the data axis in blocks, processed by independent kernels that XLA's
    # CPU runtime runs in parallel (its scatter uses one thread)
    n = state.resid.shape[0]
    bounds = plan.blocks
    weights = [None if prec_weights is None else prec_weights[start:stop] for start, stop in bounds]
    # small n on CPU, and GPUs: the counts come from one more column of the
    # per-leaf sums (about free), not from masked reductions (several
    # kernels each, which at small n cost more than the data); large n on
    # CPU: the reductions (a second scatter column costs a pass over the
    # data) (`kernels.counts_in_sums`)
    count_in_scatter = plan.count_in_scatter
    keep_prec = forest.leaf_prec is not None  # (a logistic state has none)
    # without weights, when the scatter counts the points, the loop carries
    # the residuals beside a column of ones: the scatter reads its two
    # columns as they are, instead of a copy stacked for every tree (one
    # pass over the data and one kernel less per tree)
    stacked = plan.stacked
    # at one data block (small n, where a tree costs what its kernels
    # cost), three changes take 20 kernels per tree to 17: the loop carries
    # a tree's cells with the scatter's lanes already in their low bits
    # (`kernels.lane_indices`; the next tree reads the cells back with
    # `kernels.unlane`) instead of a lane pass beside the carried row; the
    # cells' statistics are a gather, not a masked reduction; and `same`
    # enters split by its last axis. With several blocks the first made warm
    # fits slower (1.13 times at n = 100,000) and the others did not help
    # (2026-11-26, benchmarks/README.md): that path is unchanged
    one_block = plan.one_block
    # without the counts in the scatter, the points of the (at most two)
    # counted cells: by masked sums in each data block at one or two
    # blocks (one: on GPUs from 2**24 points); at more (16 on CPU), where
    # those were 64 of the 170 kernels of a tree, over the whole row at
    # once (2026-11-27: warm fits 0.90-0.92 times the time at n = 100,000,
    # where one kernel at two blocks took 1.07 times the time at 40,000;
    # benchmarks/README.md)
    count_by_block = plan.count_by_block

    # where the final leaves of the points are written: at several data
    # blocks (CPU from 2**15 points, compiled at LLVM level 3), in one pass
    # over all trees after the loop, which then only reads the cells (per
    # tree and block inside the loop, that write was a chain of kernels on
    # the path of every next tree: warm fits 0.74-0.91 times the time at
    # n = 100,000, 0.85 at 40,000); at one block, by each tree for the tree
    # before it, in the few kernels of its data pass (after the loop, the
    # pass over all trees, at level 1, which does not vectorise it, made
    # warm fits 1.1 times slower at n = 1,000; benchmarks/README.md)
    write_in_loop = plan.write_in_loop
    # the previous tree's cells, which its change in the residuals reads:
    # at one block, carried from its data pass with the lanes in their low
    # bits; at several, sliced again from the cells (read only in the
    # loop): a carried row that is read and then overwritten costs two
    # copies per block and tree (XLA's copy insertion), 32 of the 134
    # kernels of a tree at 16 blocks (warm fits 0.97-0.99 times the time
    # at n = 40,000 and 100,000; benchmarks/README.md)
    carry_rows = plan.carry_rows

    def tree_row(cells, j, start, stop):
        """Points ``start:stop`` of tree `j`'s row of `cells` (``(m, n)``)."""
        return lax.dynamic_slice(cells, (j, jnp.asarray(start, j.dtype)), (1, stop - start))[0]

    @_programs.inlined
    def finish(resid, leaf_indices, rows, prev_row, prev_cells, j):
        """Apply the change of tree `j` (its output row `prev_row`, whose
        last column is ``old - new`` value by slot; `rows`: its cells, the
        carried rows of each block, or None: read from `cell_indices`) to
        the residuals; with `write_in_loop`, write its final leaves in
        `leaf_indices` too (`prev_cells`: its remapped cells, `_final_leaves`)."""
        delta = prev_row[:, -1]
        if write_in_loop:
            accepted = _row_accepted(prev_row)
        out = []
        if rows is None:
            rows = [tree_row(cell_indices, j, start, stop) for start, stop in bounds]
        for (start, _), block_resid, row in zip(bounds, resid, rows, strict=True):
            if one_block:
                row = kernels.unlane(row, heap_size, plan=plan)
            change = _lookup(delta, row, plan=plan)
            if stacked:  # (the ones stay exact: 1 + 0)
                change = jnp.stack([change, jnp.zeros_like(change)], axis=1)
            out.append(block_resid + change)
            if write_in_loop:
                final = _final_leaves(row, prev_cells, accepted)
                leaf_indices = lax.dynamic_update_slice(leaf_indices, final[None], (j, jnp.asarray(start, j.dtype)))
        return tuple(out), leaf_indices

    def at_tree(j, *arrays):
        """The rows of tree `j` of `arrays` (pytrees of per-tree arrays)."""
        return jax.tree.map(lambda a: lax.dynamic_index_in_dim(a, j, 0, keepdims=False), arrays)

    @_programs.inlined
    def data_pass(resid, leaf_indices, prev_rows, prev_row, j):
        """Tree `j`'s pass over the data: the previous tree's change
        applied (here rather than at the end of its own iteration: one pass
        over the data per tree), then tree `j`'s sums by slot (at small n
        with the counts as their last column), not yet summed over devices.
        Its cells are read from the carried `leaf_indices` with
        `write_in_loop`, else from `cell_indices` (not written in the loop)."""
        prev_cells, counted = at_tree(j, xs.prev_cells, xs.counted)
        # (for the first tree, a no-op: zero delta, no cell)
        resid, leaf_indices = finish(resid, leaf_indices, prev_rows, prev_row, prev_cells, jnp.maximum(j, 1) - 1)
        cells = leaf_indices if write_in_loop else cell_indices

        rows = []
        sums = 0.0
        num_counted = 0
        for (start, stop), block_resid, block_weights in zip(bounds, resid, weights, strict=True):
            row = tree_row(cells, j, start, stop)
            if one_block:
                row = kernels.lane_indices(row, heap_size, lane, plan=plan)
            rows.append(row)
            if stacked:
                block_sums = _leaf_sums(row, block_resid, heap_size, laned=one_block, plan=plan)
            else:
                columns = [block_resid * block_weights, block_weights] if weighted else [block_resid]
                if count_in_scatter:
                    if plan.pad_columns:
                        # a column of zeros (unread): XLA's CPU scatter adds
                        # a row of 4 floats as one vector, one of 3 float by
                        # float (weighted fits at n = 1,000: 0.72 times the time)
                        columns.append(jnp.zeros_like(block_resid))
                    columns.append(jnp.ones_like(block_resid))
                block_sums = _leaf_sums(row, jnp.stack(columns, axis=1), heap_size, laned=one_block, plan=plan)
            if count_in_scatter:
                # (one block: split by `tree_stats`)
                sums = block_sums
                continue
            sums = sums + block_sums
            if count_by_block:
                if one_block:
                    row = kernels.unlane(row, heap_size, plan=plan)
                hits = [row.astype(jnp.int32) == counted[a] for a in range(2)]
                if stop - start <= 2**24:
                    # a float sum of 0/1 is exact up to 2**24 and faster than XLA's int reduction
                    num = jnp.stack([jnp.sum(jnp.where(h, 1.0, 0.0)) for h in hits]).astype(jnp.int32)
                else:
                    num = jnp.stack([jnp.sum(h, dtype=jnp.int32) for h in hits])
                num_counted = num_counted + num
        if not count_in_scatter and not count_by_block:
            # at many data blocks, the counted cells' points over the
            # whole row in one kernel (`kernels.count_equal`), not in four
            # kernels per block
            row = tree_row(cells, j, 0, n)
            num_counted = kernels.count_equal(row, counted)
        return resid, leaf_indices, tuple(rows) if carry_rows else None, (sums, None if count_in_scatter else num_counted)

    @_programs.inlined
    def tree_stats(data_sums, j):
        """Tree `j`'s acceptance and leaf draws from its `data_pass` sums: its output row."""
        sums, num_counted = _psum(data_sums, data_axis)
        if count_in_scatter:
            # every slot's count from the scatter's last column (exact:
            # fewer than 2**24 points)
            sums, num_counted = sums[:, :-1], sums[:, -1].astype(jnp.int32)
        old_at, counted, same, first, noise_at, count, move, log_u, noise = at_tree(
            j, xs.old_at, xs.counted, xs.same, xs.first, xs.noise_at, xs.count, xs.move, xs.log_u, xs.noise
        )

        # points per slot: at small n, the scatter counted them all;
        # else a counted cell's count; another cell's is its current leaf's
        # count minus the counted cells that leave that leaf (exact
        # integers); an untouched leaf keeps its count
        used = move.cells >= 0
        at_cell = slot[:, None] == move.cells[None, :]  # (H, 4)
        if count_in_scatter:
            slot_count = num_counted
        else:
            is_counted = (move.cells[:, None] == counted[None, :]) & (counted[None, :] >= 0)  # (4, 2)
            counted_num = jnp.sum(jnp.where(is_counted, num_counted, 0), axis=1)  # (4,)
            fresh = jnp.any(is_counted, axis=1)
            old_leaf = jnp.clip(move.cell_old, 0, heap_size - 1)
            leaves_leaf = (move.cell_old[:, None] == move.cell_old[None, :]) & fresh[None, :]  # (4, 4)
            derived = count[old_leaf] - jnp.sum(jnp.where(leaves_leaf, counted_num[None, :], 0), axis=1)
            cell_count = jnp.where(used, jnp.where(fresh, counted_num, derived), 0)
            slot_count = jnp.where(move.identity, count, 0) + jnp.sum(jnp.where(at_cell, cell_count, 0), axis=1)

        # per slot: residual sum, precision and count (a float, exact below
        # 2**24; without weights the precision is the count); the residual
        # sums include this tree: add back its old value on each slot
        # (constant there), times the slot's precision
        count_f = slot_count.astype(jnp.float32)
        prec_sum = sums[:, 1] if weighted else count_f
        columns = [sums[:, 0] + prec_sum * old_at, prec_sum] + ([count_f] if weighted else [])
        count_col = len(columns) - 1

        # per cell, its statistics: at one data block its slot's, in one
        # gather (an unused cell reads the unused slot 0, zeroed here:
        # padding points count there); else in one masked reduction over
        # the heap. After it, one reduction (the log likelihood ratio) and
        # element-wise code, on the heap or on the four cells, with the sums
        # over cells written out: at small n a tree costs what its kernels
        # cost, and every reduction or gather is a kernel (2026-11-24: 26 ->
        # 22 kernels per tree, 10% faster at n = 1,000; 2026-11-26: 20 -> 17,
        # see benchmarks/README.md). A leaf has at most two cells, so these
        # sums are exact whatever their order.
        if one_block:
            per_slot = jnp.where(slot[:, None] == _FLAGS_SLOT, 0.0, jnp.stack(columns, axis=1))  # (H, C)
            cell_stats = per_slot[jnp.maximum(move.cells, 0)]  # (4, C)
        else:
            # (XLA's CPU backend splits a reduction of more than 32 values
            # in two kernels: the heap is summed in halves of at most 32)
            half = min(heap_size, 32)
            per_slot = jnp.stack(columns, axis=1)  # (H, C)
            masked = jnp.where(at_cell.T[:, None, :], per_slot.T[None], 0.0)  # (num_cells, C, H)
            parts = jnp.sum(masked.reshape(num_cells, len(columns), heap_size // half, half), axis=3)
            cell_stats = parts[:, :, 0]
            for i in range(1, parts.shape[2]):
                cell_stats = cell_stats + parts[:, :, i]  # (4, C)

        def over_cells(mask, values):
            """``sum_d where(mask[..., d], values[d], 0)``, written out
            (`mask` may also be the tuple of its ``mask[..., d]``)."""
            total = 0.0
            for d in range(num_cells):
                mask_d = mask[d] if isinstance(mask, tuple) else mask[..., d]
                total = total + jnp.where(mask_d[..., None], values[d], 0.0)
            return total

        # the statistics of each cell's leaf in the current (row 0) and in
        # the proposed tree (row 1). The leaves the move does not touch are
        # the same in both trees and cancel from the ratio: only the
        # touched leaves (at most two per tree) enter it, each once, at its
        # first cell (`first`); in the same reduction, the number of leaves
        # of the proposed tree with too few points
        leaf_stats = over_cells(same, cell_stats)  # (2, 4, C)
        marginals = _log_marginal(leaf_stats[..., 0], leaf_stats[..., 1], inv_sigma2, inv_tau2)  # (2, 4)
        too_small = first[1] & (leaf_stats[1, :, count_col] < min_points)
        totals = jnp.sum(
            jnp.stack([jnp.where(first[1], marginals[1], 0.0) - jnp.where(first[0], marginals[0], 0.0), too_small.astype(jnp.float32)]),
            axis=1,
        )
        allowed = move.allowed & (totals[1] == 0)
        accept = allowed & (log_u < move.log_ratio_tree + totals[0])

        # the final tree, and the values of its leaves twice in one
        # expression (XLA puts an expensive expression used twice in a
        # kernel of its own): by leaf (row 0; an untouched leaf is its own
        # slot, a touched one the sum of its cells) and by slot (row 1:
        # the value of the final leaf of the slot's points)
        cell_final = jnp.where(accept, move.cell_new, move.cell_old)
        to = (slot[:, None] == cell_final[None, :]) & used  # (H, 4)
        of_cell = over_cells(cell_final[:, None] == cell_final[None, :], cell_stats)  # (4, C)
        noise_of_cell = jnp.where(accept, noise_at[1], noise_at[0])
        identity = move.identity[:, None]
        is_cell = at_cell[:, 0] | at_cell[:, 1]
        if num_cells == 4:
            is_cell = is_cell | (at_cell[:, 2] | at_cell[:, 3])
        stats = jnp.stack([
            jnp.where(identity, per_slot, 0.0) + over_cells(to, cell_stats),
            jnp.where(identity, per_slot, 0.0) + over_cells(at_cell, of_cell),
        ])  # (2, H, C)
        leaf_noise = jnp.stack([noise, jnp.where(move.identity, noise, 0.0) + over_cells(at_cell, noise_of_cell[:, None])[:, 0]])
        is_leaf = jnp.stack([jnp.where(accept, move.new_leaf, move.leaf), move.identity | is_cell])
        values = jnp.where(is_leaf, _leaf_draw(stats, leaf_noise, inv_sigma2, inv_tau2), 0.0)  # (2, H)
        leaf = is_leaf[0]
        final = stats[0]
        new_values = values[0]
        new_at = values[1]

        # the tree's output row, also carried to the next tree: per slot the
        # value, the count (its int32 bits; at the unused slot 0, the flags:
        # accepted, allowed), the precision, and old minus new value
        final_count = jnp.where(leaf, final[:, count_col].astype(jnp.int32), 0)
        flags = accept.astype(jnp.int32) | (allowed.astype(jnp.int32) << 1)
        final_count = jnp.where(slot == _FLAGS_SLOT, flags, final_count)
        out = [new_values, lax.bitcast_convert_type(final_count, jnp.float32)]
        if keep_prec:
            out.append(jnp.where(leaf, final[:, 1], 0.0))
        out.append(old_at - new_at)
        row = jnp.stack(out, axis=1)
        return row

    @_programs.inlined
    def body(carry):
        j, resid, leaf_indices, prev_rows, prev_row, outs = carry
        if split_body:
            args = resid, leaf_indices, prev_rows, prev_row, j
            zero_sums = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), jax.eval_shape(data_pass, *args)[3])

            def no_data_pass(resid, leaf_indices, prev_rows, *_):
                return resid, leaf_indices, prev_rows, zero_sums

            resid, leaf_indices, rows, data_sums = lax.cond(always, data_pass, no_data_pass, *args)
            row = lax.cond(always, tree_stats, lambda *_: jnp.zeros_like(prev_row), data_sums, j)
        else:
            resid, leaf_indices, rows, data_sums = data_pass(resid, leaf_indices, prev_rows, prev_row, j)
            row = tree_stats(data_sums, j)
        outs = lax.dynamic_update_index_in_dim(outs, row, j, 0)
        return j + 1, resid, leaf_indices, rows, row, outs

    # what depends on the move alone, for all trees at once: the cells
    # whose points can change leaf, with their current and proposed leaves;
    # which cells share a leaf (`same`, rows: current and proposed tree) and
    # which is the first cell of its leaf; the noise of each cell's leaf
    # in both trees
    remapped_cells = jnp.stack(
        [jnp.take_along_axis(x, remapped_of_kind, axis=1) for x in (moves.cells, moves.cell_old, moves.cell_new)], axis=1
    )  # (m, 3, 2)
    leaves = jnp.stack([moves.cell_old, moves.cell_new], axis=1)  # (m, 2, 4)
    same = (leaves[:, :, :, None] == leaves[:, :, None, :]) & used[:, None, None, :]  # (m, 2, 4, 4)
    first = used[:, None, :] & ~jnp.any(same & _EARLIER[:num_cells, :num_cells], axis=3)  # (m, 2, 4)
    noise_at = jnp.take_along_axis(noise[:, None, :], jnp.clip(leaves, 0, heap_size - 1), axis=2)  # (m, 2, 4)
    # with `write_in_loop`, each tree gets the remapped cells of the tree before it (whose final leaves it writes)
    prev_cells = jnp.concatenate([jnp.full((1, 3, 2), -1, jnp.int32), remapped_cells[:-1]]) if write_in_loop else None
    if one_block:
        # (`same` by its last axis: the loop reads each part in the kernel
        # that uses it, where a slice of the whole is a kernel of its own)
        same = tuple(same[..., d] for d in range(num_cells))
    xs = _TreeInputs(old_at, counted, prev_cells, same, first, noise_at, forest.leaf_count, moves, log_u, noise)
    num_columns = 3 + keep_prec
    # on CPU, below `_SPLIT_MAX_POINTS` points on one device: the loop body
    # split in two conditionals (`body`; benchmarks/README.md: warm `gbart`
    # 0.88 times the time at n = 1,000, 0.93 at 3,000, 0.91-0.96 at 10,000,
    # 0.99 at 15,000, 1.04 at 20,000, where the concurrent mode's overlap
    # of the residual update with the other kernels pays; at several data
    # blocks, where the data pass has a hundred kernels, no faster)
    split_body = plan.split_body
    # (true, but not to XLA: computed once, outside the loop; the
    # conditionals only split the body in executors of a few kernels each,
    # which XLA's CPU runtime runs one after the other on one thread,
    # without the hand-overs between threads of a larger loop body)
    always = lax.optimization_barrier(jnp.asarray(True))
    # (at one data block, the scatter's lane of each point: formed once,
    # outside the loop, behind a barrier that keeps XLA from forming it
    # again inside; `kernels.lane_pattern`)
    lane = lax.optimization_barrier(kernels.lane_pattern(n, heap_size, plan=plan) if one_block else None)
    resid_blocks = tuple(
        jnp.stack([state.resid[start:stop], jnp.ones(stop - start, jnp.float32)], axis=1) if stacked else state.resid[start:stop]
        for start, stop in bounds
    )
    carry = (
        np.uint32(0),  # (unsigned tree index: no wrap of negative indices in the slices)
        resid_blocks,
        cell_indices if write_in_loop else None,
        tuple(kernels.lane_indices(cell_indices[0, start:stop], heap_size, lane, plan=plan) for start, stop in bounds) if carry_rows else None,
        jnp.zeros((heap_size, num_columns), jnp.float32),
        jnp.zeros((num_trees, heap_size, num_columns), jnp.float32),
    )
    # on CPU at one data block, without weights, the loop goes by pairs of
    # trees (`_pair_sweep`): a pair whose cells are all below `_PAIR_CELLS`
    # (trees of at most 3 levels after the move) shares one pass over the
    # data (warm `gbart` 0.83 times the time at n = 5,000, 0.79-0.81 at
    # 10,000, 0.81 at 20,000; 0.91 at 2,000 and 0.96 at 1,000, where its
    # larger program compiles about 0.4 s longer in a first fit of 3.5 s:
    # from `_PAIR_MIN_POINTS`; benchmarks/README.md)
    pair_loop = plan.pair_loop
    if pair_loop:
        max_cell = jnp.maximum(jnp.max(jnp.where(moves.identity, slot, 0), axis=1), jnp.max(moves.cells, axis=1))
        eligible = jnp.all((max_cell < _PAIR_CELLS).reshape(num_trees // 2, 2), axis=1) & plan.pair_shared
        resid, leaf_indices, outs = _pair_sweep(
            resid_blocks, cell_indices, eligible, remapped_cells, tree_stats, heap_size, num_trees, num_columns, plan
        )
    else:
        _, *carry, outs = lax.while_loop(lambda carry: carry[0] < num_trees, body, carry)
        resid, leaf_indices = finish(*carry, remapped_cells[-1], np.uint32(num_trees - 1))
    leaf_tree = outs[:, :, 0]
    bits = lax.bitcast_convert_type(outs[:, :, 1], jnp.int32)
    flags = bits[:, _FLAGS_SLOT]
    accepted, allowed = (flags & 1).astype(bool), (flags & 2).astype(bool)
    if not write_in_loop:
        # the final leaf of every point in every tree, in one pass
        leaf_indices = _final_leaves(cell_indices, remapped_cells, accepted)
    leaf_count = bits.at[:, _FLAGS_SLOT].set(0)
    leaf_prec = outs[:, :, 2] if keep_prec else None
    resid = jnp.concatenate([r[:, 0] for r in resid] if stacked else resid)

    # the accepted moves' new rules (at most two nodes per tree), as
    # selects over the trees' nodes, not a gather and a scatter (kernels
    # of their own; a pair's two nodes are the same only with the same rule)
    node = jnp.arange(heap_size // 2, dtype=jnp.int32)
    acc = accepted[:, None]

    def set_rules(tree, values):
        out = tree
        for d in reversed(range(moves.set_node.shape[1])):
            here = acc & (node == moves.set_node[:, d : d + 1])
            out = jnp.where(here, values[:, d : d + 1].astype(tree.dtype), out)
        return out

    split_tree = set_rules(forest.split_tree, moves.set_split)
    var_tree = set_rules(forest.var_tree, moves.set_var)
    forest = Forest(
        var_tree=var_tree,
        split_tree=split_tree,
        leaf_tree=leaf_tree,
        leaf_indices=leaf_indices,
        leaf_count=leaf_count,
        leaf_prec=leaf_prec,
    )
    # one reduction for the counts: at small n every kernel counts
    kinds = moves.kind[None, :] == jnp.arange(4)[:, None]  # (4, m)
    # a move whose proposed tree has a leaf with too few points counts as not proposed
    proposed = kinds & allowed[None, :]
    flags = jnp.stack([proposed, proposed & accepted[None, :]], axis=1).reshape(8, num_trees)
    info = StepInfo(*jnp.sum(flags, axis=-1, dtype=jnp.int32))
    return state._replace(forest=forest, resid=resid), info


def _pair_sweep(resid, cell_indices, eligible, remapped_cells, tree_stats, heap_size, num_trees, num_columns, plan):
    """The loop over trees of `_sweep_trees`, by pairs of trees.

    A pair whose cells are all slots below `_PAIR_CELLS` (`eligible`, one
    per pair) shares one pass over the data: it sums the residuals (and
    counts the points) by pair of cells ``(a, b)`` of its two trees
    (``8 a + b``: a table of 64 sums, with the scatter's lanes as for one
    tree). The first tree's sums are the table summed over ``b``; the
    second tree's, summed over ``a`` after adding the first tree's change
    of each point (``old - new`` value of its cell ``a``: a constant of the
    cell) times the points of each pair of cells. Another pair takes a
    second pass for its second tree, over the residuals with the first
    tree's change (not written). Each pair's change (both trees') is
    applied to the residuals, and its final leaves written, by the next
    pair's first pass. Per tree about half the passes over the data of
    `_sweep_trees`'s loop, whose statistics and draws (`tree_stats`) it
    shares; the draws differ by float rounding only. Under `vmap` (chains
    vmapped on one device) the choice of a pair's path is a select, and
    both paths run.

    `resid`: the one data block's residuals beside a column of ones.
    Returns the residuals (as `resid`), the final leaves of the points and
    the trees' output rows.
    """
    cells = _PAIR_CELLS
    n = cell_indices.shape[1]
    # the scatter's bins: the 64 pairs of cells, or the slots of one tree
    # (at most 256: uint8 cells), with as many lanes as fit uint8 indices
    bins = max(cells * cells, heap_size)
    cell_bits = cells.bit_length() - 1
    # (per tree: whether it starts an eligible pair; indexed by the loop's
    # tree counter without a division, each scalar operation being a kernel)
    eligible = jnp.repeat(eligible, 2)
    # the scatter's lanes, formed in the kernel of the pair's index from a
    # uint32 copy of the lane pattern: XLA's task assigner (from 2**12
    # points, `bartz.mcmcloop._compiler_options`) splits a kernel over the
    # runtime's threads when it counts more operations than bytes, which
    # with uint8 lanes this kernel did (warm fits at n = 10,000: 0.90 times
    # the time of the loop of `_sweep_trees` split, 0.79 not;
    # benchmarks/README.md)
    lane_shift = plan.num_lanes(bins).bit_length() - 1
    lane = kernels.lane_pattern(n, bins, plan=plan)
    wide_lane = None if lane is None else lax.optimization_barrier(lane.astype(jnp.uint32))

    def laned(index):
        return index if lane is None else (index << lane_shift) | wide_lane.astype(jnp.uint8)

    def by_slot(sums):
        """Sums over the first `cells` slots, as sums over the heap's slots."""
        if heap_size <= cells:
            return sums[:heap_size]
        return jnp.pad(sums, ((0, heap_size - cells), (0, 0)))

    def tree_row(leaf_indices, j):
        return lax.dynamic_index_in_dim(leaf_indices, j, 0, keepdims=False)

    def with_change(resid, *row_deltas):
        change = sum(_lookup(delta, row, plan=plan) for row, delta in row_deltas)
        return resid + jnp.stack([change, jnp.zeros_like(change)], axis=1)

    def final_row(leaf_indices, row, j, out, first):
        accepted = _row_accepted(out)
        remapped = jnp.where(first, -1, lax.dynamic_index_in_dim(remapped_cells, j, 0, keepdims=False))
        final = _final_leaves(row, remapped, accepted)
        return lax.dynamic_update_slice(leaf_indices, final[None], (j, jnp.zeros((), j.dtype)))

    def finish(resid, leaf_indices, outs, j, first, rows, pair_outs, next_j):
        """The change of the pair of trees ``j, j + 1`` applied to the
        residuals (`rows`: their cells, carried from their pass: read here
        from `leaf_indices`, which this writes, they cost XLA a copy of all
        of it; `pair_outs`: their output rows, ``old - new`` value by slot
        in their last column), their final leaves written (where not
        `first`), and their output rows; the index of the next pair's second
        tree, and whether that pair is eligible (scalar kernels that do not
        fit in `pair_sums`'s executor)."""
        (row_t, row_u), (out_t, out_u) = rows, pair_outs
        resid = with_change(resid, (row_t, out_t[:, -1]), (row_u, out_u[:, -1]))
        leaf_indices = final_row(leaf_indices, row_t, j, out_t, first)
        leaf_indices = final_row(leaf_indices, row_u, j + 1, out_u, first)
        outs = lax.dynamic_update_slice_in_dim(outs, jnp.stack([out_t, out_u]), j, 0)
        return resid, leaf_indices, outs, next_j + 1, eligible[next_j]

    def pair_sums(resid, leaf_indices, j, u, pair):
        """The trees' cells; the residuals summed by pair of cells (else by
        the first tree's cells), with the first tree's sums."""
        row_t, row_u = tree_row(leaf_indices, j), tree_row(leaf_indices, u)
        index = jnp.where(pair, (row_t << cell_bits) | row_u, row_t)
        sums = _leaf_sums(laned(index), resid, bins, laned=True, plan=plan)
        by_pair = sums[: cells * cells].reshape(cells, cells, 2)
        first = jnp.where(pair, by_slot(jnp.sum(by_pair, axis=1)), sums[:heap_size])
        return row_t, row_u, sums, first

    def corrected(sums, resid, row_t, row_u, out_t):
        """The second tree's sums from the table: summed over the first
        tree's cells, with the first tree's change (a constant by cell) times its points."""
        by_pair = sums[: cells * cells].reshape(cells, cells, 2)
        points = by_pair[:, :, 1]
        resid_u = jnp.sum(by_pair[:, :, 0] + out_t[:cells, -1, None] * points, axis=0)
        return by_slot(jnp.stack([resid_u, jnp.sum(points, axis=0)], axis=1))

    def second_pass(sums, resid, row_t, row_u, out_t):
        """The second tree's sums from a pass over the residuals with the
        first tree's change (not written: `finish` applies both trees' changes)."""
        resid = with_change(resid, (row_t, out_t[:, -1]))
        return _leaf_sums(laned(row_u), resid, bins, laned=True, plan=plan)[:heap_size]

    # XLA's CPU runtime runs an executor of at most 8 kernels in order on
    # one thread, a larger one in its concurrent mode, which hands kernels
    # between threads (idle and OS time about tripled, for the body in
    # executors of 9 to 24 kernels). As in the loop of `_sweep_trees`, the
    # body is a sequence of conditionals whose predicate is always true, of
    # at most 8 kernels each; the branch never taken passes the updated
    # arguments through (taken, they are updated in place)
    always = lax.optimization_barrier(jnp.asarray(True))

    row_shape = jax.ShapeDtypeStruct((heap_size, num_columns), jnp.float32)

    def in_order(fun, *args, through=0, shapes=None):
        """``fun(*args)`` in an executor of its own; it returns its first
        `through` arguments first, updated. `shapes`: those of its outputs,
        if known (else traced once more)."""
        if shapes is None:
            shapes = jax.eval_shape(fun, *args)

        def never(*args):
            zeros = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)
            return (*args[:through], *zeros[through:]) if through else zeros

        return lax.cond(always, _programs.inlined(fun), never, *args)

    def pair_stats(resid, row_t, row_u, sums, first, j, u, pair):
        """Both trees' statistics and draws (their output rows)."""
        out_t = in_order(tree_stats, (first, None), j, shapes=row_shape)
        sums_u = lax.cond(pair, corrected, second_pass, sums, resid, row_t, row_u, out_t)
        return out_t, in_order(tree_stats, (sums_u, None), u, shapes=row_shape)

    def body(carry):
        j, resid, leaf_indices, outs, rows, pair_outs = carry
        # (before the first pair, pair 0 finishes as if unchanged: no change, its cells written back)
        prev = jnp.maximum(j, 2) - 2
        resid, leaf_indices, outs, u, pair = in_order(finish, resid, leaf_indices, outs, prev, j == 0, rows, pair_outs, j, through=3)
        row_t, row_u, sums, first = in_order(pair_sums, resid, leaf_indices, j, u, pair)
        pair_outs = in_order(pair_stats, resid, row_t, row_u, sums, first, j, u, pair, shapes=(row_shape, row_shape))
        return j + 2, resid, leaf_indices, outs, (row_t, row_u), pair_outs

    (block,) = resid
    outs = jnp.zeros((num_trees, heap_size, num_columns), jnp.float32)
    zero = jnp.zeros((heap_size, num_columns), jnp.float32)
    carry = (np.uint32(0), block, cell_indices, outs, (cell_indices[0], cell_indices[1]), (zero, zero))
    carry = lax.while_loop(lambda c: c[0] < num_trees, body, carry)
    block, leaf_indices, outs, *_ = finish(*carry[1:4], np.uint32(num_trees - 2), False, *carry[4:], np.uint32(0))
    return (block,), leaf_indices, outs


_PAIR_CELLS = 8  # (cells per tree of a shared pass: pairs of cells ``8 a + b`` below 64)


def _row_accepted(row):
    """Whether the tree of output row `row` (``(H, columns)``) accepted its move (its flags' bit 0)."""
    return (lax.bitcast_convert_type(row[_FLAGS_SLOT, 1], jnp.int32) & 1).astype(bool)


def _final_leaves(cells, remapped, accepted):
    """The final leaves of points in their cells: ``cells`` ``(..., n)``,
    ``remapped`` ``(..., 3, 2)`` the (at most two) cells whose points can
    change leaf (-1: unused), their current and their proposed leaves,
    ``accepted`` ``(...)``: those cells go to their proposed leaf if the
    move was accepted, else to their current one; the other cells are their
    leaf's slot already."""
    to = jnp.where(accepted[..., None], remapped[..., 2, :], remapped[..., 1, :])
    return kernels.replace_indices(cells, [remapped[..., 0, c, None] for c in range(2)], [to[..., c, None] for c in range(2)])




class _TreeInputs(NamedTuple):
    """What the loop over trees of `_sweep_trees` reads of each tree (leading axis: trees)."""

    old_at: jax.Array
    counted: jax.Array
    prev_cells: jax.Array | None
    same: jax.Array | tuple
    first: jax.Array
    noise_at: jax.Array
    count: jax.Array
    move: Moves
    log_u: jax.Array
    noise: jax.Array


# the heap slot (never a node) where a tree's output row keeps its flags
_FLAGS_SLOT = 0


def _leaf_draw(stats, noise, inv_sigma2, inv_tau2):
    """Conjugate draw of leaf values from their statistics ``(..., C)``
    (residual sum, precision, ...) and standard normal `noise`."""
    post_prec = stats[..., 1] * inv_sigma2 + inv_tau2
    post_mean = stats[..., 0] * inv_sigma2 / post_prec
    return post_mean + noise * lax.rsqrt(post_prec)


@_programs.inlined
def _accept_and_noise(key, num_trees, heap_size):
    """Log acceptance uniforms ``(m,)`` and standard normal leaf noise
    ``(m, H)`` by heap slot, from ``H / 2`` values per tree, one per slot of
    the deepest level of the heap, which `_noise_slot` maps to the slots:
    the leaves of any tree get distinct (independent) values.

    Half the Threefry words of one value per slot (the words and the
    normals of the noise took about 6% of a warm fit at n = 1,000;
    benchmarks/README.md). The words are expanded, not the normals: XLA
    fuses the normals into the expansion, and emitted their code once per
    level of the heap (5% more compilation)."""
    size = max(1, heap_size // 2)
    words = _random_words(key, num_trees * (1 + 2 * size))
    if words is None:
        key_u, key_noise = random.split(key)
        u = random.uniform(key_u, (num_trees,), minval=jnp.finfo(jnp.float32).tiny, maxval=1.0)
        return jnp.log(u), _noise_by_slot(random.normal(key_noise, (num_trees, size)))
    u = jnp.maximum(_unit_float(words[:num_trees]), jnp.finfo(jnp.float32).tiny)
    pairs = _noise_by_slot(words[num_trees:].reshape(2, num_trees, size))
    return jnp.log(u), _normal_from_words(pairs[0], pairs[1])


def _noise_slot(heap_size: int) -> np.ndarray:
    """For each heap slot ``(H,)``, which of the ``H / 2`` leaf noise values
    of `_accept_and_noise` it takes: the position, on the deepest level of
    the heap, of the slot's leftmost descendant there (the map that
    `_noise_by_slot` applies, written as indices for the tests).

    The leaves of a tree partition that level into the ranges of their
    descendants, so their leftmost descendants differ: the leaves of any
    tree take distinct (independent) values. Two slots share a value only
    when one descends from the other by left children alone, and a node
    and its descendant are never leaves of the same tree. (Slot 0, never a
    node, takes value 0.)"""
    slot = np.arange(heap_size)
    depth = np.floor(np.log2(np.maximum(slot, 1))).astype(np.int64)
    deepest = max(0, heap_size.bit_length() - 2)
    return np.where(slot == 0, 0, (slot << (deepest - depth)) - (1 << deepest)).astype(np.int32)


def _noise_by_slot(noise):
    """``noise[..., _noise_slot(H)]`` for ``noise`` ``(..., H / 2)``, as
    strided slices (the slots of depth d take every ``2**(D - d)``-th value,
    D the deepest level), which XLA fuses into the kernel that reads them."""
    size = noise.shape[-1]
    parts = [noise[..., :1]]  # slot 0
    stride = size
    while stride >= 1:
        parts.append(noise[..., ::stride])
        stride //= 2
    return jnp.concatenate(parts, axis=-1)


def _draw_sigma2(key, state: State, data_axis=None) -> State:
    """Conjugate inverse gamma draw of the error variance."""
    resid = state.resid
    sq = resid * resid if state.prec_weights is None else resid * resid * state.prec_weights
    # the real points (padding has no leaf): one tree's counts, summed in
    # halves down to 32 (XLA's CPU backend splits a longer reduction in two kernels)
    counts = state.forest.leaf_count[0]
    while counts.shape[0] > 32:
        half = counts.shape[0] // 2
        counts = counts[:half] + counts[half:]
    n = jnp.sum(counts)
    alpha = state.sigma2_alpha + n.astype(jnp.float32) / 2
    beta = state.sigma2_beta + _psum(jnp.sum(sq), data_axis) / 2
    sigma2 = beta / _gamma(key, alpha)
    return state._replace(sigma2=sigma2.astype(jnp.float32))


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
    real = state.forest.leaf_indices[0] != 0  # padding has no leaf: keep its residual 0
    return state._replace(z=z, resid=jnp.where(real, z - mean, 0.0))


def _draw_latent_logit(key, state: State, data_axis=None) -> State:
    """Logistic BART by Polya-Gamma augmentation (Polson, Scott & Windle 2013).

    With ``psi_i = offset + f_i``, ``omega_i | psi_i ~ PG(1, psi_i)``
    exactly (`bartz.polyagamma`); given ``omega``, the logistic likelihood
    of ``psi`` is that of ``(y_i - 1/2) / omega_i ~ N(psi_i, 1 / omega_i)``,
    so the trees are drawn by the weighted Gaussian sweep with ``sigma^2 =
    1``, precision weights ``omega`` and pseudo-responses ``z`` (stored minus
    the offset). The sweep sums the precisions of each leaf afresh from the
    weights, so a logistic state carries no per-leaf precision sums
    (``forest.leaf_prec`` is None): keeping them equal to the new ``omega``
    would take one more scatter per tree and sweep, about 15% of an
    iteration at n = 10,000, for a field nothing reads.
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
    return state._replace(z=z, resid=jnp.where(real, z - mean, 0.0), prec_weights=omega)


_THETA_GRID_SIZE = 1000


def _draw_dart(key, state: State) -> State:
    """DART: ``s | counts ~ Dirichlet(theta/p + counts)`` over the
    predictors, then theta by griddy Gibbs on ``lambda = theta / (theta +
    rho)`` over the grid ``k / 1001``, k = 1..1000, as R's BART. Predictors
    with no cut-point keep probability 0. The two copies of a column with
    missing values (`bartz.encoding`) are one predictor (``dart.group``):
    its split count is theirs summed, and each copy gets half its
    probability (the uniform choice of the copy, as without DART)."""
    dart = state.dart
    key_s, key_theta = random.split(key)
    num = state.max_split.shape[0]
    usable = state.max_split > 0
    group = dart.group
    copies = jax.ops.segment_sum(usable.astype(jnp.float32), group, num)  # usable copies per predictor
    usable_g = copies > 0
    p = jnp.sum(usable_g).astype(jnp.float32)
    counts = grove.var_count_scatter(state.forest.var_tree, state.forest.split_tree, num)
    counts = jax.ops.segment_sum(counts, group, num)
    alpha = dart.theta / p + counts
    log_gamma = random.loggamma(key_s, jnp.where(usable_g, alpha, 1.0))
    log_gamma = jnp.where(usable_g, log_gamma, -jnp.inf)
    log_s_g = log_gamma - jax.scipy.special.logsumexp(log_gamma)
    log_s = jnp.where(usable, log_s_g[group] - jnp.log(jnp.maximum(copies[group], 1.0)), -jnp.inf)

    lam = jnp.arange(1, _THETA_GRID_SIZE + 1, dtype=jnp.float32) / (_THETA_GRID_SIZE + 1)
    theta_grid = lam * dart.rho / (1 - lam)
    sum_log_s = jnp.sum(jnp.where(usable_g, log_s_g, 0.0))
    loglik = jax.scipy.special.gammaln(theta_grid) - p * jax.scipy.special.gammaln(theta_grid / p) + theta_grid / p * sum_log_s
    logprior = (dart.a - 1) * jnp.log(lam) + (dart.b - 1) * jnp.log1p(-lam)
    theta = theta_grid[random.categorical(key_theta, loglik + logprior)]
    theta = jnp.where(dart.theta_fixed, dart.theta, theta)

    on = dart.on
    return state._replace(
        log_s=jnp.where(on, log_s, state.log_s),
        dart=dart._replace(theta=jnp.where(on, theta, dart.theta)),
    )


def plan_for(state: State, data_axis: str | None = None) -> SweepPlan:
    """The sweep's plan of a (single-chain) `state`: its own, checked
    against its shapes, or `plan_sweep` for the points it holds (on this
    device, under ``shard_map``), its weights and its trees."""
    n = state.resid.shape[0]
    weighted = state.prec_weights is not None
    plan = state.plan
    if plan is None:
        return plan_sweep(n, weighted=weighted, sharded=data_axis is not None, num_trees=state.forest.leaf_tree.shape[0])
    if plan.n != n or (plan.stacked and weighted) or ((plan.pair_loop or plan.split_body) and data_axis is not None):
        msg = f'the state\'s plan does not fit it ({n} points, weighted={weighted}, data_axis={data_axis!r}): {plan}'
        raise ValueError(msg)
    return plan


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
    state, info = _sweep_trees(key_sweep, state, moves, data_axis, plan_for(state, data_axis))
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


def chain_fields(state: State) -> State:
    """The per-chain fields of `state` (`chain_axes` 0), None elsewhere."""
    axes = chain_axes(state)
    return State(*(x if a == 0 else None for x, a in zip(state, axes, strict=True)))


def shared_fields(state: State) -> State:
    """The fields of `state` that the chains share, None elsewhere."""
    axes = chain_axes(state)
    return State(*(None if a == 0 else x for x, a in zip(state, axes, strict=True)))


def merge_fields(own: State, shared: State) -> State:
    """A state from its `chain_fields` and its `shared_fields`."""
    return State(*(o if o is not None else s for o, s in zip(own, shared, strict=True)))


def unstack_chains(state: State, num_chains: int, device) -> list[State]:
    """The `chain_fields` of each chain of a multi-chain state, on `device`
    (sliced on the host: no program compiled per slice)."""
    own = jax.tree.map(np.asarray, chain_fields(state))
    return [jax.tree.map(lambda x, c=c: jax.device_put(np.array(x[c]), device), own) for c in range(num_chains)]


def stack_chains(owns: list[State], shared: State, device) -> State:
    """The multi-chain state of the chains' `chain_fields` `owns` (the
    inverse of `unstack_chains`, on the host, then on `device`)."""
    own = jax.tree.map(lambda *xs: jax.device_put(np.stack([np.asarray(x) for x in xs]), device), *owns)
    return merge_fields(own, shared)


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
      state has none, see `_draw_latent_logit`).

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
    group = _largest_divisor(num_trees, 8)  # trees per loop iteration: few kernels, a small program

    def add_trees(g, fx):
        rows = lax.dynamic_slice_in_dim(forest.leaf_indices, g * group, group)
        values = lax.dynamic_slice_in_dim(forest.leaf_tree, g * group, group)
        # sequential over the group's trees: the same rounding for any group size
        for k in range(group):
            fx = fx + _lookup(values[k], rows[k], plan=plan)
        return fx

    fx = lax.fori_loop(0, num_trees // group, add_trees, jnp.zeros(n, jnp.float32))
    target = state.y if state.z is None else state.z
    real = forest.leaf_indices[0] != 0  # padding has no leaf
    resid = jnp.where(real, target.astype(jnp.float32) - fx, 0.0)
    if forest.leaf_prec is not None:
        weights = jnp.where(real, state.prec_weights, 0.0)
        leaf_prec = lax.map(lambda row: _leaf_sums(row, weights, heap_size, plan=plan), forest.leaf_indices)
        forest = forest._replace(leaf_prec=_psum(leaf_prec, data_axis))
    return state._replace(resid=resid, forest=forest)
