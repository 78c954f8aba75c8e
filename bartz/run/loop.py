"""`run_mcmc`: burn-in, thinning, traces, progress, in compiled chunks.

The chain runs in chunks of iterations, each one call of a jitted function
built once per (shapes, chunk size): between chunks, control returns to
Python to print progress and to honour Ctrl-C, and the draws saved in the
chunk come to the host. Burn-in and kept iterations run in the same loop,
so the sweep is compiled once. The random key of iteration ``i`` is
``fold_in(key, i)``, so the draws do not depend on the chunking.

Several chains on one CPU device run as separate calls of the one-chain
program on a thread pool (`_SplitChains`): one vmapped program is slower
there, and would leave all but one core mostly idle.

Every `REFRESH_EVERY` iterations (at fixed global iterations, again
independent of the chunking) the residuals and weighted per-leaf precision
sums that the sweep updates incrementally are recomputed exactly from the
trees (`bartz.mcmcstep.refresh`): float32 rounding errors then never
accumulate over more than `REFRESH_EVERY` sweeps, however long the run.
Its cost is one gather per tree every `REFRESH_EVERY` sweeps.
"""

import functools
import sys
import time
from collections.abc import Callable

import jax
import numpy as np
from jax import lax, random
from jax import numpy as jnp

from bartz._compile import programs as _programs
from bartz.run import sharding
from bartz.run.chains import (  # noqa: F401 (re-exported: bartz.mcmcloop.<name>)
    _chain_key,
    _keys_by_fold_in,
    _SplitChains,
    _threads_state,
    _usable_cores,
    chain_workers,
)
from bartz.run.progress import _fmt_time, _Progress, _supports_carriage_return  # noqa: F401 (re-exported)
from bartz.run.traces import (  # noqa: F401 (re-exported: bartz.mcmcloop.<name>)
    RunInfo,
    Trace,
    _ChunkOut,
    _collect,
    _draws_packing,
    _extract,
    _figures,
    _internal_nodes,
    _num_draws,
    _pack,
    _packing,
    _packing_of,
    _Packing,
    _run_info,
    _unpack,
    _var_count,
)
from bartz.sampler import step as mcmcstep

__all__ = ['REFRESH_EVERY', 'Trace', 'RunInfo', 'run_mcmc', 'state_specs']


def state_specs(state: mcmcstep.State, chain_axis: str = 'chains', data_axis: str = 'data') -> mcmcstep.State:
    """`PartitionSpec`s of a multi-chain state on a ('chains', 'data') mesh.

    Chains are split over `chain_axis`; data points (the last axis of ``X``,
    ``y``, residuals, latents, weights and leaf indices) over `data_axis`;
    trees, hyperparameters and everything else of size independent of ``n``
    are replicated within a chain.
    """
    P = jax.sharding.PartitionSpec
    C, D = chain_axis, data_axis

    def opt(x, spec):
        return None if x is None else spec

    forest = state.forest
    return mcmcstep.State(
        X=P(None, D),
        max_split=P(),
        y=P(D),
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
    )


def _make_step(num_chains: int | None, mesh):
    """The step function for one chain, several (vmap), or a device mesh."""
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


def _make_refresh(num_chains: int | None, mesh):
    """`bartz.mcmcstep.refresh` for one chain, several (vmap), or a device mesh."""
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


REFRESH_EVERY = 100
"""`run_mcmc` recomputes the residuals (and weighted per-leaf precision
sums) exactly from the trees (`bartz.mcmcstep.refresh`) after every
iteration ``i`` with ``(i + 1) % REFRESH_EVERY == 0``: at fixed global
iterations, so the draws do not depend on the chunking."""


def _maybe_refresh(refresh, state: mcmcstep.State, i) -> mcmcstep.State:
    """``refresh(state)`` if iteration ``i`` ends a refresh period, else `state`.

    The conditional returns only the recomputed fields: a branch that passed
    the whole state through could make XLA (jaxlib 0.10.2) copy it (leaf indices, ``m n``
    bytes) at every iteration. (Refreshing after the last iteration of each
    call instead would make the draws depend on `printevery`.)
    """

    def fields(s):
        return s.resid, s.forest.leaf_prec

    resid, leaf_prec = lax.cond((i + 1) % REFRESH_EVERY == 0, lambda s: fields(refresh(s)), fields, state)
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


def _compiler_options(n: int) -> tuple:
    """XLA options for the chunk, on CPU (jaxlib 0.10.2; the figures are in
    benchmarks/LOG.md):

    - below `_LOW_OPT_MAX_POINTS` points, LLVM's optimisation level 1
      instead of 3 compiles the sweep faster and runs it faster too
      (per-kernel overheads dominate there); above, level 3 runs faster;
    - below `_ONE_TASK_MAX_POINTS` points, no ``cpu-parallel-task-assigner``
      pass: it splits kernels over a value per tree (logs and divisions of
      the proposal) in tasks for the runtime's threads, where the hand-over
      costs more than the work; above, the split of the ``(trees, n)``
      kernels pays;
    - below `_LOW_OPT_MAX_POINTS` points, no ``while-loop-invariant-code-motion``
      pass: it hoists what the loop computes from values that do not
      change (the hyperparameters' logs and reciprocals, the tables of the
      proposal, the scatter's lanes) out of the loop, each into a kernel
      of its own (XLA's CPU backend fuses no two outputs in one kernel),
      where inside the loop they fuse into the kernels that read them:
      fewer kernels to compile, and the loop is no slower;
    - below `_LOW_OPT_MAX_POINTS` points, no ``tree_reduction_rewriter``
      pass: it splits every reduction of more than 32 values in two
      kernels (blocks, then their sums), for accuracy over long float
      sums; below 2**15 values a single float32 sum is accurate to about
      1e-5 (the squared residuals of the error variance's draw; the
      counts are integers), and fewer kernels run.

    Without the task split or the hoisting the draws are the same bit for
    bit; level 1 and single reductions change their float rounding only
    (`tests/test_mcmcstep.py`)."""
    if jax.default_backend() != 'cpu' or n >= _LOW_OPT_MAX_POINTS:
        return ()
    options = (('xla_backend_optimization_level', 1),)
    passes = ('while-loop-invariant-code-motion', 'tree_reduction_rewriter')
    if n < _ONE_TASK_MAX_POINTS:
        passes += ('cpu-parallel-task-assigner',)
    return (*options, ('xla_disable_hlo_passes', ','.join(passes)))


_LOW_OPT_MAX_POINTS = 2**15
_ONE_TASK_MAX_POINTS = 2**12


def _quick_options(n: int, iterations: int, num_trees: int, runs: int) -> dict | None:
    """XLA options for a quick first chunk program (`_programs.persistent`'s
    ``quick``), or None to compile the full program only.

    On CPU, XLA's older kernel emitters (``xla_cpu_use_fusion_emitters=False``)
    compile the chunk faster but run it slower; the draws are the same bit
    for bit (checked with jaxlib `_programs.QUICK_CHECKED_JAXLIB`). A first run that
    is short enough to finish sooner that way starts on the quick program,
    while the full one compiles on a thread and takes over between calls
    (and is the one stored for later processes). Short enough: the
    estimated extra run time, `_QUICK_COST_PER_TREE` and
    `_QUICK_COST_PER_POINT` per tree and iteration times `runs` (iterations
    in a row on one thread: chains per worker), at most
    `_QUICK_MAX_EXTRA_SECONDS`.

    Off unless the environment variable ``BARTZ_QUICK_COMPILE`` is ``1``
    (or ``true``, ``on``, ``yes``): on a 2-core machine the full program
    compiling on its thread slows what follows the first fit (a refit, a
    `predict`) about as much as the first fit gains, and a process
    that ends meanwhile waits for it, so it pays only where the first
    result matters most (a first look in a notebook)."""
    if jax.default_backend() != 'cpu' or not _programs.quick_allowed():
        return None
    extra = iterations * runs * num_trees * (_QUICK_COST_PER_TREE + _QUICK_COST_PER_POINT * n)
    if extra > _QUICK_MAX_EXTRA_SECONDS:
        return None
    return {'xla_cpu_use_fusion_emitters': False}


# seconds of extra run time of the quick program, per tree and iteration and
# per tree, iteration and point (jaxlib 0.10.2 on CPU; see benchmarks/LOG.md)
_QUICK_COST_PER_TREE = 3.2e-6
_QUICK_COST_PER_POINT = 2.5e-9
_QUICK_MAX_EXTRA_SECONDS = 0.5


@functools.cache
def _chunk_runner(
    chunk: int,
    chunk_draws: int,
    save_train: bool,
    num_chains: int | None = None,
    mesh=None,
    compiler_options: tuple = (),
    split_chains: int | None = None,
):
    """Jitted function running up to `chunk` iterations (a dynamic count)
    from global iteration ``start``, saving the state after every
    iteration ``i >= n_burn`` with ``(i - n_burn + 1) % keepevery == 0``.

    With `split_chains` (and `num_chains` None), the function runs one chain
    of several, its index ``chain`` a dynamic argument, with the keys the
    vmapped step gives it (`_chain_key`; `split_chains` is their number, or
    0 when the keys do not depend on it), so that the chains can run as
    separate calls (`_SplitChains`) with the draws of the vmapped run.

    The step is traced once: burn-in and kept iterations run in the same
    loop, so compilation costs one sweep.
    """
    step = _make_step(num_chains, mesh)
    refresh = _make_refresh(num_chains, mesh)
    multichain = num_chains is not None

    def run(key, state, start, n_iters, n_burn, keepevery, dart_start, chain=None):
        trace = jax.eval_shape(lambda s: _extract(s, save_train), state)
        # (with a mesh, the fields stay apart: the training fits are split
        # over the data axis, the others are not)
        packing = None if mesh is not None else _packing(trace)
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
                step_key = _chain_key(step_key, chain, split_chains)
            state, step_info = step(step_key, state)
            state = _maybe_refresh(refresh, state, i)  # exact residuals against float32 drift
            if multichain:
                step_info = jax.tree.map(lambda x: jnp.sum(x, axis=0), step_info)
            sigma2s = sigma2s.at[t].set(state.sigma2)
            save = (i >= n_burn) & ((i - n_burn + 1) % keepevery == 0)
            # iterations not saved write to a spare last slot: one in-place
            # update, with no lax.cond closing over the whole state
            where = jnp.where(save, slot, chunk_draws)
            saved = _extract(state, save_train)
            if packing is not None:
                saved = _pack(packing, saved)
            buffer = jax.tree.map(lambda b, x: lax.dynamic_update_index_in_dim(b, x, where, 0), buffer, saved)
            # the counts summed as one vector: one kernel, not four
            return state, info + jnp.stack(step_info), sigma2s, buffer, slot + save.astype(jnp.int32)

        carry = (state, jnp.zeros(len(mcmcstep.StepInfo._fields), jnp.int32), sigma2s, buffer, jnp.int32(0))
        state, info, sigma2s, buffer, _ = lax.fori_loop(0, n_iters, body, carry)
        # the counts stay one vector, split on the host (8 slices in the
        # program otherwise); the host follows the number of leaves from
        # them (`_internal_nodes`: no kernels here)
        return state, _ChunkOut(info, sigma2s, buffer)

    static = (chunk, chunk_draws, save_train, num_chains)
    return _jit_runner(run, compiler_options, split_chains, mesh, static)


def _draw_buffers(trace: Trace, packing, chunk_draws: int):
    """The chunk's buffers of saved draws, zeros: `chunk_draws` slots and a
    spare one for the iterations not saved; by field of `trace` (shapes),
    or by row of `packing`."""
    if packing is None:
        return jax.tree.map(lambda s: jnp.zeros((chunk_draws + 1, *s.shape), s.dtype), trace)
    return tuple(jnp.zeros((chunk_draws + 1, size), dtype) for dtype, size in packing.rows)


def _jit_runner(run, compiler_options: tuple, split_chains, mesh, static: tuple):
    """`run` (the chunk of `_chunk_runner`) jitted, its state donated; with
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


# calls of the chunk dispatched ahead of the one whose outputs `run_mcmc`
# reads: they wait on the device behind it, which then does not sit idle
# while the host reads the draws, updates the progress and dispatches the
# next call. The draw buffers of
# 1 + `_CALLS_AHEAD` calls (`chunk_shape`) are then on the device at once.
# 0: call by call.
_CALLS_AHEAD = 1


def run_mcmc(
    key: jax.Array,
    state: mcmcstep.State,
    *,
    n_burn: int,
    n_save: int,
    n_skip: int = 1,
    printevery: int | None = 100,
    save_train: bool = True,
    callback: Callable[[dict], None] | None = None,
    chunk_size: int | None = None,
    sigma_scale: float = 1.0,
    num_chains: int | None = None,
    mesh=None,
    dart_start: int | None = None,
    chain_major: bool = False,
) -> tuple[mcmcstep.State, Trace, RunInfo]:
    """Run the BART Markov chain: burn-in, then thinned draws.

    Parameters
    ----------
    key
        Random key; iteration ``i`` uses ``fold_in(key, i)``.
    state
        Initial state from `bartz.mcmcstep.init`.
    n_burn
        Iterations discarded as burn-in.
    n_save
        Draws kept.
    n_skip
        Iterations per kept draw (thinning; 1 keeps every iteration).
    printevery
        Print progress every this many iterations (a progress bar that
        updates in place in terminals and notebooks); None for silence.
    save_train
        Save the sum of trees at the training points for each draw.
    callback
        Called between chunks with a dict of progress figures.
    chunk_size
        Iterations per compiled chunk. The default (`chunk_shape`: 100, with
        fewer draw slots when the saved training fits would take over 64
        MiB) depends only on ``n`` and the chains, so runs that differ in
        `n_burn`, `n_save`, `n_skip` or `printevery` share one compiled
        chunk; a call runs up to `printevery` iterations of it.
    sigma_scale
        Multiplier of the error sd shown in the progress line (the front
        end works in standardised units).
    num_chains
        None for one chain (`state` from `bartz.mcmcstep.init`); else the
        number of chains, with `state` from `bartz.mcmcstep.init_chains`.
        Chain ``c`` at iteration ``i`` uses ``split(fold_in(key, i),
        num_chains)[c]``. Traces then have a chain axis after the draws
        axis (before it with `chain_major`). On one CPU device (no `mesh`,
        or a mesh of one device) each chain runs as its own calls of a
        one-chain program, on a pool of up to as many threads as cores
        (`chain_workers`: faster than one vmapped program, and using every
        core); elsewhere the chains run together with `jax.vmap`. The draws
        are the same either way, up to float rounding.
    mesh
        Optional `jax.sharding.Mesh` with axes ``('chains', 'data')`` (needs
        `num_chains`, a multiple of the 'chains' size): chains are split over
        the first axis and data points over the second (``n`` must be a
        multiple of its size; pad with `bartz.mcmcstep.init`'s ``valid``).
        The state is placed on the mesh by `state_specs`.
    dart_start
        Iteration from which DART updates the split probabilities (if the
        state has DART); default half the burn-in, as R.
    chain_major
        With `num_chains`, return traces with the chain axis first,
        ``(chains, draws, ...)`` (contiguous when the chains ran on threads:
        chain after chain, as R's ``mc.gbart`` orders them, is then a free
        reshape), instead of ``(draws, chains, ...)``.

    Returns
    -------
    state
        The final state.
    trace
        The kept draws (`Trace` of numpy arrays, on the host), ``n_save``
        long (shorter if interrupted).
    info
        `RunInfo`: burn-in error variances, acceptance counts, timing.

    Notes
    -----
    After every iteration ``i`` with ``(i + 1) % REFRESH_EVERY == 0`` the
    residuals (and weighted per-leaf precision sums) are recomputed from the
    trees (`bartz.mcmcstep.refresh`), so float32 rounding does not
    accumulate over long runs.

    Ctrl-C between chunks stops the run cleanly: the draws collected so far
    (over all chains) are returned with ``info.interrupted`` set and
    ``info.interrupted_in`` ``'sampling'``, and a message on stderr says
    how many. If no draw was collected yet, the message says so and
    `KeyboardInterrupt` is raised again. A Ctrl-C after the last chunk,
    while the draws are put together, returns them all (marked the same
    way). With the chains on threads, the returned state is None when a
    Ctrl-C came inside a call (which had taken a chain's state), or a
    second one stopped the wait for the calls in flight.

    Each call of the compiled chunk is dispatched before the outputs of the
    one before it are read (one chain, or chains vmapped: `_CALLS_AHEAD`),
    so that the device does not wait for the host between calls. The
    draws are the same; after Ctrl-C the returned state is that after the
    call in flight, up to one call ahead of the draws returned.
    """
    is_binary = state.z is not None
    n = state.resid.shape[-1]
    if chunk_size is None:
        chunk, chunk_draws = chunk_shape(n, num_chains, save_train)
    else:
        chunk = chunk_draws = max(1, int(chunk_size))
    # the compiled chunk has a static length; a call may run fewer
    # iterations (a dynamic count), to print progress as often as asked,
    # and saves at most `chunk_draws` draws, whatever the thinning
    iters_per_call = min(chunk, chunk_draws * n_skip)
    if printevery:
        iters_per_call = min(iters_per_call, printevery)
    if mesh is not None:
        if num_chains is None:
            msg = 'a mesh needs num_chains'
            raise ValueError(msg)
        specs = state_specs(state)
        state = jax.tree.map(
            lambda s, x: jax.device_put(x, jax.sharding.NamedSharding(mesh, s)),
            specs,
            state,
            is_leaf=lambda s: isinstance(s, jax.sharding.PartitionSpec),
        )
    workers = chain_workers(num_chains, mesh)
    total = n_burn + n_save * n_skip
    num_trees = state.forest.split_tree.shape[-2]
    runs = -(-num_chains // workers) if workers else 1
    # (the runners of a mesh are not `_programs.persistent`, but those of chains on threads are)
    quick = _quick_options(n, total, num_trees, runs) if workers or mesh is None else None
    internal, num_forest_trees = _internal_nodes(state.forest.split_tree)
    num_vars = state.X.shape[0]
    runner, split, packing = _runner(state, chunk, chunk_draws, save_train, num_chains, mesh, workers, quick)
    if split is not None:
        state = None  # its buffers now belong to `split`
    progress = _Progress(total, printevery)
    if dart_start is None:
        dart_start = n_burn // 2

    def draws_before(i):
        """Number of draws saved by the iterations before ``i``."""
        return max(0, i - n_burn) // n_skip

    done_iters = 0
    burn_sigma2 = []
    traces = []
    totals = np.zeros(len(mcmcstep.StepInfo._fields), np.int64)
    start_time = time.perf_counter()
    first_chunk_time = None
    interrupted = False
    # the calls dispatched and not yet read: (outputs, iterations, time
    # dispatched), up to `_CALLS_AHEAD` beyond the one being read. The
    # chains on threads (`split`) run call by call; a quick first program
    # (`quick`) is read before the second call, whose dispatch waits for the
    # full program's compilation (its progress is not held back until then)
    pending = []
    dispatched = 0
    ahead = _CALLS_AHEAD if split is None else 0
    try:
        while done_iters < total:
            limit = 0 if quick is not None and done_iters == 0 else ahead
            while dispatched < total and len(pending) <= limit:
                iters = min(iters_per_call, total - dispatched)
                t0 = time.perf_counter()
                state, out = runner(
                    key,
                    state,
                    np.int32(dispatched),
                    np.int32(iters),
                    np.int32(n_burn),
                    np.int32(n_skip),
                    np.int32(dart_start),
                )
                pending.append((out, iters, t0))
                dispatched += iters
            out, iters, t0 = pending.pop(0)
            out = _to_host(out, packing)
            if done_iters < n_burn and not is_binary:
                burn_sigma2.append(out.sigma2[: min(iters, n_burn - done_iters)])
            num_draws = draws_before(done_iters + iters) - draws_before(done_iters)
            if num_draws:
                traces.append(_kept_draws(out.draws, num_draws, split, num_vars))
            done_iters += iters
            totals += np.asarray(out.info, np.int64)  # the StepInfo fields, in order
            dt = time.perf_counter() - t0
            if first_chunk_time is None:
                first_chunk_time = (dt, iters)
            sigma = None if is_binary else float(np.mean(np.sqrt(out.sigma2[iters - 1]))) * sigma_scale
            figures = _figures(done_iters, total, totals, internal, num_forest_trees, sigma, start_time)
            progress.update(figures)
            if callback is not None:
                callback(figures)
    except KeyboardInterrupt:
        interrupted = True
        progress.close()
        kept = _num_draws(traces, split, num_chains)
        print(_interrupt_message(done_iters, total, kept), file=sys.stderr)
        if not kept:
            raise
    finally:
        # (a Ctrl-C after the loop: `late`; the draws are all in `traces`)
        late = split is not None and split.close()
    progress.close()
    elapsed = time.perf_counter() - start_time
    if split is not None:
        state, late = _threads_state(split, late)
    trace, late = _collect_traces(traces, split, state, save_train, num_vars, num_chains, chain_major, late)
    if late and not interrupted:
        print(
            f'bartz: interrupted by Ctrl-C after the last iteration; returning all '
            f'{_num_draws(traces, split, num_chains)} draws.',
            file=sys.stderr,
        )
    interrupted |= late
    compile_time = _compile_time(first_chunk_time, done_iters, elapsed)
    burn_sigma2 = None if is_binary else (np.concatenate(burn_sigma2) if burn_sigma2 else np.zeros(0, np.float32))
    return state, trace, _run_info(totals, burn_sigma2, elapsed, compile_time, interrupted)


def _to_host(out: _ChunkOut, packing) -> _ChunkOut:
    """The outputs of one call of the chunk on the host, the draws unpacked
    (`packing`, None where they come unpacked)."""
    out = jax.tree.map(sharding.to_host, out)
    if packing is not None:
        out = out._replace(draws=_unpack(packing, out.draws))
    return out


def _kept_draws(draws: Trace, num_draws: int, split, num_vars: int) -> Trace:
    """The first `num_draws` draws of a call's buffer, with their variable counts."""
    draws = jax.tree.map(lambda b: b[:, :num_draws] if split is not None else b[:num_draws], draws)
    return draws._replace(varcount=_var_count(draws.var_tree, draws.split_tree, num_vars))


def _interrupt_message(done_iters: int, total: int, kept: int) -> str:
    """What `run_mcmc` prints on a Ctrl-C during the loop."""
    if not kept:
        return (
            f'bartz: interrupted by Ctrl-C after {done_iters} of {total} iterations, before any draw '
            'was kept; nothing to return.'
        )
    return (
        f'bartz: interrupted by Ctrl-C after {done_iters} of {total} iterations; '
        f'returning the {kept} draws collected so far.'
    )


def _collect_traces(traces, split, state, save_train, num_vars, num_chains, chain_major, late: bool):
    """`_collect` of the chunks' draws, again after a Ctrl-C during it; and
    whether a Ctrl-C came after the last iteration (`late`)."""
    collect = functools.partial(_collect, traces, split, state, save_train, num_vars, num_chains, chain_major)
    try:
        return collect(), late
    except KeyboardInterrupt:
        return collect(), True


def _runner(state, chunk, chunk_draws, save_train, num_chains, mesh, workers, quick):
    """The function that runs one call of the compiled chunk,
    ``runner(key, state, i, iters, n_burn, n_skip, dart_start) -> (state,
    outputs)``; the `_SplitChains` that holds the states of the chains on
    threads (its runner returns None for the state), or None; and the
    packing of the draws (`_draws_packing`), or None where they come
    unpacked."""
    n = state.resid.shape[-1]
    if workers:
        split = _SplitChains(
            _chunk_runner(
                chunk,
                chunk_draws,
                save_train,
                compiler_options=_compiler_options(n),
                split_chains=0 if _keys_by_fold_in() else num_chains,
            ),
            state,
            num_chains,
            workers,
            save_train,
            quick,
        )

        def runner(key, _state, *args):
            return None, split(key, *args)

        return runner, split, None  # (the chains on threads unpack their draws themselves)
    chunk_runner = _chunk_runner(chunk, chunk_draws, save_train, num_chains, mesh, _compiler_options(n))
    packing = _draws_packing(state, save_train) if mesh is None else None
    runner = chunk_runner if quick is None else functools.partial(chunk_runner, quick=quick)
    return runner, None, packing


def _compile_time(first_chunk_time, done_iters: int, elapsed: float) -> float:
    """Seconds of compilation: what the first call, of ``(seconds,
    iterations)`` `first_chunk_time`, took beyond the rate of the later ones."""
    if first_chunk_time is None or done_iters <= first_chunk_time[1]:
        return 0.0
    rate = (elapsed - first_chunk_time[0]) / (done_iters - first_chunk_time[1])
    return max(0.0, first_chunk_time[0] - rate * first_chunk_time[1])
