"""The sampler's step and refresh for one chain, several chains (`jax.vmap`)
or a device mesh (`jax.shard_map`), and the `PartitionSpec`s of a state on
the mesh (`state_specs`)."""

import functools

import jax
from jax import random

from bartz.sampler import step as mcmcstep


def state_specs(state: mcmcstep.State, chain_axis: str = 'chains', data_axis: str = 'data') -> mcmcstep.State:
    """The `PartitionSpec` of each field of a multi-chain state on a ('chains', 'data') mesh.

    Chains are split over `chain_axis`; data points (the last axis of ``X``,
    ``y``, residuals, latents, weights and leaf indices) over `data_axis`;
    trees, hyperparameters and everything else of size independent of ``n``
    are replicated within a chain.

    Parameters
    ----------
    state
        A state of several chains (`bartz.mcmcstep.init_chains`).
    chain_axis
        The name of the mesh axis of the chains.
    data_axis
        The name of the mesh axis of the data points.

    Returns
    -------
    A `bartz.mcmcstep.State` of `jax.sharding.PartitionSpec` (None where the field is None).
    """
    P = jax.sharding.PartitionSpec
    C, D = chain_axis, data_axis

    def opt(x, spec):
        return None if x is None else spec

    forest = state.forest
    return mcmcstep.State(
        X=P(None, D),
        max_split=P(),
        y=P(C, D) if state.censor_bound is not None else P(D),  # per chain: the draws of the censored points
        z=opt(state.z, P(C, D)),
        # per chain for logistic BART, where they are the Polya-Gamma variables
        prec_weights=opt(state.prec_weights, P(C, D) if state.logit_offset is not None else P(D)),
        resid=P(C, D),
        sigma2=P(C),
        forest=mcmcstep.Forest(
            var_tree=P(C),
            split_tree=P(C),
            leaf_tree=P(C),
            leaf_indices=P(C, None, D),
            leaf_count=P(C),
            leaf_prec=opt(forest.leaf_prec, P(C)),
        ),
        leaf_prior_var=P(),
        sigma2_alpha=opt(state.sigma2_alpha, P()),
        sigma2_beta=opt(state.sigma2_beta, P()),
        p_nonterminal=P(),
        min_points_per_leaf=P(),
        log_s=P(C),
        probit_threshold=opt(state.probit_threshold, P()),
        dart=None if state.dart is None else mcmcstep.Dart(*(P(C) for _ in mcmcstep.Dart._fields)),
        logit_offset=opt(state.logit_offset, P()),
        move_probs=opt(state.move_probs, P()),
        move_kinds=state.move_kinds,  # static: no arrays to place
        plan=state.plan,  # static too
        censor_bound=opt(state.censor_bound, P(D)),
    )


def make_step(num_chains: int | None, mesh=None):
    """The step function for one chain, several (vmap), or a device mesh.

    Parameters
    ----------
    num_chains
        None for one chain (`bartz.mcmcstep.step` itself); else the number
        of chains of the state (`bartz.mcmcstep.init_chains`).
    mesh
        Optional `jax.sharding.Mesh` with axes ``('chains', 'data')``; the
        state must be placed on it as `state_specs` says.

    Returns
    -------
    ``step(key, state) -> (state, info)``; with chains, chain ``c`` uses
    ``random.split(key, num_chains)[c]`` and the `bartz.mcmcstep.StepInfo`
    counts have a chain axis.
    """
    if num_chains is None:
        return mcmcstep.step

    def chains_step(keys, state, data_axis=None):
        axes = mcmcstep.chain_axes(state)
        step = functools.partial(mcmcstep.step, data_axis=data_axis)
        return jax.vmap(step, in_axes=(0, axes), out_axes=(axes, 0))(keys, state)

    if mesh is None:
        return lambda key, state: chains_step(random.split(key, num_chains), state)

    P = jax.sharding.PartitionSpec
    data_axis = 'data' if mesh.shape['data'] > 1 else None

    def sharded_step(key, state):
        keys = random.split(key, num_chains)
        specs = state_specs(state)
        info_specs = mcmcstep.StepInfo(*(P('chains') for _ in mcmcstep.StepInfo._fields))
        f = jax.shard_map(
            functools.partial(chains_step, data_axis=data_axis),
            mesh=mesh,
            in_specs=(P('chains'), specs),
            out_specs=(specs, info_specs),
            check_vma=False,
        )
        return f(keys, state)

    return sharded_step


def make_refresh(num_chains: int | None, mesh=None):
    """`bartz.mcmcstep.refresh` for one chain, several (vmap), or a device mesh.

    Parameters
    ----------
    num_chains
        None for one chain; else the number of chains of the state.
    mesh
        Optional `jax.sharding.Mesh` with axes ``('chains', 'data')``: the
        residuals are refreshed per shard of data, the precision sums summed
        over the shards.

    Returns
    -------
    ``refresh(state) -> state``.
    """
    if num_chains is None:
        return mcmcstep.refresh

    def chains_refresh(state, data_axis=None):
        axes = mcmcstep.chain_axes(state)
        refresh = functools.partial(mcmcstep.refresh, data_axis=data_axis)
        return jax.vmap(refresh, in_axes=(axes,), out_axes=axes)(state)

    if mesh is None:
        return chains_refresh
    data_axis = 'data' if mesh.shape['data'] > 1 else None

    def sharded_refresh(state):
        specs = state_specs(state)
        f = jax.shard_map(
            functools.partial(chains_refresh, data_axis=data_axis),
            mesh=mesh,
            in_specs=(specs,),
            out_specs=specs,
            check_vma=False,
        )
        return f(state)

    return sharded_refresh
