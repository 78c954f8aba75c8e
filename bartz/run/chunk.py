"""The compiled chunk of `bartz.run.loop.run_mcmc`: up to a fixed number of
iterations of the step in one `lax.fori_loop`, from a dynamic start, saving
the thinned draws in a buffer (`chunk_runner`), and the periodic refresh of
the carried residuals against float32 drift (`REFRESH_EVERY`)."""

import contextlib
import functools
from collections.abc import Callable

import jax
from jax import lax
from jax import numpy as jnp

from bartz._compile import programs as _programs
from bartz.run.chains import chain_key
from bartz.run.steps import make_refresh, make_step
from bartz.run.traces import Trace, _ChunkOut, _extract, draw_packing, pack_draw
from bartz.sampler import step as mcmcstep

REFRESH_EVERY = 100
"""The default period of `run_mcmc`'s refresh: it recomputes the residuals
(and weighted per-leaf precision sums) exactly from the trees
(`bartz.mcmcstep.refresh`) after every iteration ``i`` with ``(i + 1) %
refresh_every == 0``: at fixed global iterations, so the draws do not
depend on the chunking."""


def _maybe_refresh(refresh, state: mcmcstep.State, i, every: int) -> mcmcstep.State:
    """``refresh(state)`` if iteration ``i`` ends a refresh period of `every`
    iterations, else `state`.

    The conditional returns only the recomputed fields: a branch that passed
    the whole state through could make XLA (jaxlib 0.10.2) copy it (leaf indices, ``m n``
    bytes) at every iteration. (Refreshing after the last iteration of each
    call instead would make the draws depend on `printevery`.)
    """

    def fields(s):
        return s.resid, s.forest.leaf_prec

    resid, leaf_prec = lax.cond((i + 1) % every == 0, lambda s: fields(refresh(s)), fields, state)
    return state._replace(resid=resid, forest=state.forest._replace(leaf_prec=leaf_prec))


def chunk_shape(n: int, num_chains: int | None, save_train: bool) -> tuple[int, int]:
    """Iterations per compiled chunk and draw slots in its buffer.

    Both depend only on the (padded) number of points and the chains,
    never on ``nskip``, ``ndpost`` or the thinning, so fits that differ
    only in those reuse the compiled chunk. The buffer has fewer slots when
    the saved training fits would take more than `_CHUNK_BUFFER_BYTES`;
    a call then runs at most ``slots * n_skip`` iterations (`run_mcmc`),
    which save at most ``slots`` draws.
    """
    chains = num_chains or 1
    slots = _CHUNK_ITERS
    if save_train:
        slots = min(slots, max(1, _CHUNK_BUFFER_BYTES // (4 * n * chains)))
    return _CHUNK_ITERS, slots


_CHUNK_ITERS = 100
_CHUNK_BUFFER_BYTES = 2**26


@functools.cache
def chunk_runner(
    chunk: int,
    chunk_draws: int,
    save_train: bool,
    num_chains: int | None = None,
    mesh=None,
    compiler_options: tuple = (),
    split_chains: int | None = None,
    refresh_every: int = REFRESH_EVERY,
):
    """Jitted function running up to `chunk` iterations (a dynamic count)
    from global iteration ``start``, saving the state after every
    iteration ``i >= n_burn`` with ``(i - n_burn + 1) % keepevery == 0``:
    ``runner(key, state, start, n_iters, n_burn, keepevery, dart_start) ->
    (state, outputs)``, the state donated. Cached by its arguments, all
    static: `run_mcmc` asks for one per kind of run (see also the test
    hook `wrap_chunk_runners`).

    With `split_chains` (and `num_chains` None), the function runs one chain
    of several, its index ``chain`` a dynamic argument, with the keys the
    vmapped step gives it (`chain_key`; `split_chains` is their number, or
    0 when the keys do not depend on it), so that the chains can run as
    separate calls (`SplitChains`) with the draws of the vmapped run.

    The step is traced once: burn-in and kept iterations run in the same
    loop, so compilation costs one sweep.

    Parameters
    ----------
    chunk
        The most iterations of one call.
    chunk_draws
        The most draws saved by one call.
    save_train
        Whether to save the training fits.
    num_chains
        None for one chain; else the number of chains of the state.
    mesh
        Optional `jax.sharding.Mesh` of ``('chains', 'data')``.
    compiler_options
        XLA options, ``(name, value)`` pairs (`bartz._compile.options.chunk_options`).
    split_chains
        See above; None for all the chains in one call.
    refresh_every
        The refresh period (`REFRESH_EVERY`, `run_mcmc`).

    Returns
    -------
    The runner.
    """
    step = make_step(num_chains, mesh)
    refresh = make_refresh(num_chains, mesh)
    multichain = num_chains is not None

    def run(key, state, start, n_iters, n_burn, keepevery, dart_start, chain=None):
        trace = jax.eval_shape(lambda s: _extract(s, save_train), state)
        # (with a mesh, the fields stay apart: the training fits are split
        # over the data axis, the others are not)
        packing = None if mesh is not None else draw_packing(trace)
        buffer = _draw_buffers(trace, packing, chunk_draws)
        sigma2s = jnp.zeros((chunk, *state.sigma2.shape), jnp.float32)

        def body(t, carry):
            state, info, sigma2s, buffer, slot = carry
            i = start + t
            if state.dart is not None:
                on = jnp.broadcast_to(i >= dart_start, state.dart.on.shape)
                state = state._replace(dart=state.dart._replace(on=on))
            # (bit for bit random.fold_in, without JAX's rolled loop on CPU)
            step_key = mcmcstep.fold_in(key, i)
            if chain is not None:  # the key the vmapped step gives chain `chain`
                step_key = chain_key(step_key, chain, split_chains)
            state, step_info = step(step_key, state)
            state = _maybe_refresh(refresh, state, i, refresh_every)  # exact residuals against float32 drift
            if multichain:
                step_info = jax.tree.map(lambda x: jnp.sum(x, axis=0), step_info)
            sigma2s = sigma2s.at[t].set(state.sigma2)
            save = (i >= n_burn) & ((i - n_burn + 1) % keepevery == 0)
            # iterations not saved write to a spare last slot: one in-place
            # update, with no lax.cond closing over the whole state
            where = jnp.where(save, slot, chunk_draws)
            saved = _extract(state, save_train)
            if packing is not None:
                saved = pack_draw(packing, saved)
            buffer = jax.tree.map(lambda b, x: lax.dynamic_update_index_in_dim(b, x, where, 0), buffer, saved)
            # the counts summed as one vector: one kernel, not four
            return state, info + jnp.stack(step_info), sigma2s, buffer, slot + save.astype(jnp.int32)

        carry = (state, jnp.zeros(len(mcmcstep.StepInfo._fields), jnp.int32), sigma2s, buffer, jnp.int32(0))
        state, info, sigma2s, buffer, _ = lax.fori_loop(0, n_iters, body, carry)
        # the counts stay one vector, split on the host (8 slices in the
        # program otherwise); the host follows the number of leaves from
        # them (`_internal_nodes`: no kernels here)
        return state, _ChunkOut(info, sigma2s, buffer)

    static = (chunk, chunk_draws, save_train, num_chains, refresh_every)
    return _jit_runner(run, compiler_options, split_chains, mesh, static)


def _draw_buffers(trace: Trace, packing, chunk_draws: int):
    """The chunk's buffers of saved draws, zeros: `chunk_draws` slots and a
    spare one for the iterations not saved; by field of `trace` (shapes),
    or by row of `packing`."""
    if packing is None:
        return jax.tree.map(lambda s: jnp.zeros((chunk_draws + 1, *s.shape), s.dtype), trace)
    return tuple(jnp.zeros((chunk_draws + 1, size), dtype) for dtype, size in packing.rows)


def _jit_runner(run, compiler_options: tuple, split_chains, mesh, static: tuple):
    """`run` (the chunk of `chunk_runner`) jitted, its state donated; with
    `split_chains`, as a runner of one chain's own fields and the shared
    ones; off a mesh, persistent by ``static`` and the other arguments."""
    options = dict(compiler_options) or None
    if split_chains is None:
        runner = jax.jit(run, donate_argnums=(1,), compiler_options=options)
    else:

        def run_chain(key, own, shared, *args):
            # the chain's own fields are donated; the shared ones (the data) are
            # only read, so every chain's call can take the same buffers
            state, out = run(key, mcmcstep.merge_fields(own, shared), *args)
            return mcmcstep.chain_fields(state), out

        runner = jax.jit(run_chain, donate_argnums=(1,), compiler_options=options)
    if mesh is not None:
        return runner
    # a new process loads the compiled loop instead of tracing it again
    return _programs.persistent(runner, 'mcmc_chunk', (*static, compiler_options, split_chains))


_RUNNER_WRAPS: list = []  # the wrappers of the test hook `wrap_chunk_runners`, innermost first


@contextlib.contextmanager
def wrap_chunk_runners(wrap: Callable):
    """Test hook: within the block, `run_mcmc` runs each chunk runner it gets
    (`chunk_runner`) as ``wrap(runner)``.

    For tests that follow the calls of the compiled chunk (their starts, the
    states between them) or the runners' compiled versions. The wrapper
    gets the runner as `chunk_runner` returns it (for chains on threads, the
    one-chain runner, called with the chain's own and shared fields, the
    chain index and ``quick=``) and returns a function called the same way.

    Parameters
    ----------
    wrap
        ``wrap(runner) -> runner``.

    Yields
    ------
    None
    """
    _RUNNER_WRAPS.append(wrap)
    try:
        yield
    finally:
        _RUNNER_WRAPS.remove(wrap)


def _wrapped(runner):
    """`runner` through the wrappers of `wrap_chunk_runners`, if any."""
    for wrap in _RUNNER_WRAPS:
        runner = wrap(runner)
    return runner
