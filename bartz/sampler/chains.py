"""Several chains in one state: which fields are per chain, and moving
them between a stacked state and one state per chain."""

import jax
import numpy as np

from bartz.sampler.state import State


def chain_axes(state: State) -> State:
    """`vmap` axes of a multi-chain state: 0 for per-chain fields, None for
    the data and hyperparameters, which the chains share."""
    per_chain = {'z', 'resid', 'sigma2', 'forest', 'log_s', 'dart'}
    if state.logit_offset is not None:
        per_chain.add('prec_weights')  # the Polya-Gamma variables
    if state.censor_bound is not None:
        per_chain.add('y')  # the draws of the censored responses
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
