"""The state of the BART Markov chain and `init`, the state where every
tree is a single leaf.

What this module says of XLA's code generation was measured with jaxlib 0.10.2.
"""

import dataclasses
from typing import NamedTuple

import jax
import numpy as np
from jax import numpy as jnp

from bartz.forest import grove
from bartz.kernels.plan import SweepPlan, plan_sweep
from bartz.sampler import polyagamma
from bartz.sampler.moves import CHANGE, SWAP, move_probs_array, r_birth_of


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
    y: jax.Array  # (n,) float32 centred outcome (censored points: their current draw, per chain), or bool for binary outcomes
    z: jax.Array | None  # (n,) float32: probit latent (centred by offset); None if continuous
    prec_weights: jax.Array | None  # (n,) float32: 1 / w^2; None if unweighted
    resid: jax.Array  # (n,) float32: y (or z) minus the sum of trees
    sigma2: jax.Array  # () float32: error variance (1 for probit)
    forest: Forest
    # hyperparameters (arrays, so changing them does not recompile)
    leaf_prior_var: jax.Array  # () float32: tau^2, prior variance of the leaves
    sigma2_alpha: jax.Array | None  # () float32: nu / 2 (inverse gamma shape); None: binary, or sigma known
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
    censor_bound: jax.Array | None = None  # (n,) float32: y > this at right-censored points, -inf elsewhere; None: no censoring


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class MoveKinds:
    """The kinds of tree move (GROW, PRUNE, CHANGE, SWAP) that the compiled
    step can propose: static (part of the state's tree structure, not an
    array), so that a sampler without CHANGE and SWAP (R's birth/death
    sampler) compiles neither their proposal nor the
    sweep's bookkeeping of four cells per move (two suffice). A kind left
    out is never proposed, whatever ``State.move_probs`` says; the draws
    are those of the step compiled for all four kinds with the same
    probabilities, up to float rounding.

    With them, whether the proposal must count the predictors exhausted at
    each node (`exhaustible`, from the predictors with cut-points, at
    `init`): at most ``D - 1`` are exhausted on a path of a tree of ``D``
    levels, so with at least ``D`` predictors every node keeps one and the
    count is not compiled; with fewer, only the count is (None, the
    default: both, chosen at run time; the same draws bit for bit): the
    unused way would cost kernels of its own.

    And whether the split probabilities are uniform for good
    (`uniform_splits`: ``log_s`` all 0 at `init`, no DART to change it):
    the proposal then takes them as constants, which XLA folds into its
    code, and knows the maxima that shift their exponentials (0): fewer
    kernels and a smaller program, the same draws bit for bit.

    And whether GROW is R BART 2.9.9's birth (`r_birth`, with ``move_probs
    'R'`` only; `bartz.sampler.moves` explains how it differs)."""

    enabled: tuple  # 4 bools: GROW, PRUNE, CHANGE, SWAP
    exhaustible: bool | None = None  # fewer predictors with cut-points than levels; None: checked at run time
    uniform_splits: bool = False  # log_s is 0 and stays so
    r_birth: str | None = None  # R BART 2.9.9's birth: 'all' or 'usable' (`bartz.sampler.moves.propose_tree`); None: the stated prior's

    @property
    def grow_prune_only(self) -> bool:
        """Whether only GROW and PRUNE can be proposed (R's birth/death sampler)."""
        return not (self.enabled[CHANGE] or self.enabled[SWAP])


def _move_kinds(move_probs, max_split, max_depth: int, log_s, dart, r_birth) -> MoveKinds:
    exhaustible = int(np.count_nonzero(np.asarray(max_split) > 0)) < max_depth
    uniform = dart is None and not np.any(np.asarray(log_s))
    enabled = tuple(bool(p > 0) for p in np.asarray(move_probs))
    if r_birth is not None and (enabled[CHANGE] or enabled[SWAP]):
        msg = f"r_birth={r_birth!r} (R BART's birth/death sampler) needs move_probs with grow and prune alone, e.g. 'R'"
        raise ValueError(msg)
    return MoveKinds(enabled, exhaustible, uniform, r_birth)


def _check_r_birth(r_birth, move_probs):
    """`init`'s ``r_birth``: None gives R's default for ``move_probs='R'``."""
    if r_birth is None:
        return r_birth_of(move_probs)
    if r_birth not in ('all', 'usable'):
        msg = f"r_birth must be None, 'all' or 'usable', got {r_birth!r}"
        raise ValueError(msg)
    return r_birth


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class DartOptions:
    """The static options of DART: part of the state's tree structure, not
    arrays, so that a fit without them compiles the program it compiled
    before they existed."""

    augment: bool = False  # Linero's data augmentation of the s update (`bartz.sampler.conditionals.draw_dart`)


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
    options: DartOptions = DartOptions()  # static


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
    censor_bound: jax.Array | None = None,
    r_birth: str | None = None,
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
        (``nu/2`` and ``nu*lambda/2``). Ignored for binary ``y``. None for
        continuous ``y``: the error variance is known, fixed at
        `sigma2_init` (R's ``lambda=0``).
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
        number of predictors with a cut-point), ``on`` (start with the
        updates switched on; `bartz.mcmcloop.run_mcmc` switches them on
        after half the burn-in), ``group`` (the predictor of each column)
        and ``augment`` (bool, default False: Linero's data augmentation,
        which makes the update of ``s`` exact when some predictors have no
        usable cut-point at some split node; see
        `bartz.sampler.conditionals.draw_dart`).
    logit_offset
        For binary ``y``: None for probit; a float for logistic BART
        (``P(y = 1) = 1 / (1 + exp(-(logit_offset + f)))``), sampled by
        Polya-Gamma augmentation (`draw_latent_logit`). Then ``z`` holds
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
        compiled. ``'R'``: R BART 2.9.9's sampler, GROW and PRUNE 1/2 each
        with R's birth (`r_birth`).
    r_birth
        R BART 2.9.9's birth (`bartz.sampler.moves`): ``'all'`` (R's
        ``augment=FALSE``: the split variable among all predictors with
        cut-points) or ``'usable'`` (``augment=TRUE``); only with GROW and
        PRUNE alone. None: ``'all'`` if `move_probs` is ``'R'``, else the
        birth of the stated prior.
    valid
        Optional ``(n,)`` bool mask of real points. Other points (padding, so
        that ``n`` divides among devices) get leaf index 0, an unused heap
        slot, and so never enter any sum; their ``y`` must be 0.
    censor_bound
        For continuous ``y``, right censoring (the accelerated failure time
        model of R's ``abart``), shape ``(n,)``: at a censored point the
        response is only known to exceed this value (centred like ``y``),
        and is drawn every `step` (`bartz.sampler.conditionals.draw_censored`,
        starting from ``y``, which must equal it there, as R); -inf at the
        observed points. None (the default): no censoring.
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
    # small program
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
    prec_weights, z, resid, threshold, sigma2 = _initial_latents(
        y, valid, is_binary, prec_weights, logit_offset, probit_threshold, sigma2_init
    )
    resid = np.where(valid, resid, 0.0).astype(np.float32)
    leaf_count = np.zeros((num_trees, heap_size), np.int32)
    leaf_count[:, 1] = np.sum(valid)
    leaf_prec = None
    if prec_weights is not None:
        prec_weights = np.where(valid, np.asarray(prec_weights, np.float32), 0.0).astype(np.float32)
    if prec_weights is not None and not logistic:
        # (logistic: the weights change every sweep, see `draw_latent_logit`)
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
        sigma2_alpha=None if is_binary or sigma2_alpha is None else np.float32(sigma2_alpha),
        sigma2_beta=None if is_binary or sigma2_alpha is None else np.float32(sigma2_beta),
        p_nonterminal=p_nonterminal.astype(np.float32),
        min_points_per_leaf=np.int32(min_points_per_leaf),
        log_s=np.zeros(p, np.float32) if log_s is None else np.asarray(log_s, np.float32),
        probit_threshold=threshold,
        dart=None if dart is None else _init_dart(dart, max_split),
        logit_offset=np.float32(logit_offset) if logistic else None,
        move_probs=move_probs_array(move_probs),
        plan=plan,
        censor_bound=_censor_bound(censor_bound, is_binary, valid),
    )
    r_birth = _check_r_birth(r_birth, move_probs)
    kinds = _move_kinds(state.move_probs, max_split, max_depth, state.log_s, state.dart, r_birth)
    state = state._replace(move_kinds=kinds)
    # distinct device buffers for every field, so that the state can be donated
    return jax.tree.map(lambda x: x if x is X else jax.device_put(x), state)


def _initial_latents(y, valid, is_binary, prec_weights, logit_offset, probit_threshold, sigma2_init):
    """The starting weights, latents, residuals, probit threshold and error
    variance (numpy) of `init`, for a continuous, probit or logistic `y`."""
    n = y.shape[0]
    if logit_offset is not None:
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
    return prec_weights, z, resid, threshold, sigma2


def _censor_bound(bound, is_binary, valid):
    """`init`'s censoring bounds, float32, -inf at the padding; None without."""
    if bound is None:
        return None
    if is_binary:
        msg = 'censor_bound needs a continuous y'
        raise ValueError(msg)
    bound = np.asarray(bound, np.float32)
    if bound.shape != valid.shape:
        msg = f'censor_bound must have shape {valid.shape}, got {bound.shape}'
        raise ValueError(msg)
    return np.where(valid, bound, -np.inf).astype(np.float32)


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
        options=DartOptions(augment=_check_augment(options.get('augment', False))),
    )


def _check_augment(augment) -> bool:
    if not isinstance(augment, bool | np.bool_):
        msg = f'dart augment must be a bool, got {augment!r}'
        raise TypeError(msg)
    return bool(augment)


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
