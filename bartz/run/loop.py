"""`run_mcmc`: burn-in, thinning, traces, progress, in compiled chunks.

The chain runs in chunks of iterations, each one call of a jitted function
built once per (shapes, chunk size): between chunks, control returns to
Python to print progress and to honour Ctrl-C, and the draws saved in the
chunk come to the host. Burn-in and kept iterations run in the same loop,
so the sweep is compiled once. The random key of iteration ``i`` is
``fold_in(key, i)``, so the draws do not depend on the chunking.

Several chains on one CPU device run as separate calls of the one-chain
program on a thread pool (`SplitChains`): one vmapped program is slower
there, and would leave all but one core mostly idle.

Every `REFRESH_EVERY` iterations (`run_mcmc`'s ``refresh_every``; at fixed
global iterations, again independent of the chunking) the residuals and
weighted per-leaf precision sums that the sweep updates incrementally are
recomputed exactly from the trees (`bartz.mcmcstep.refresh`): float32
rounding errors then never accumulate over more than that many sweeps,
however long the run. Its cost is one gather per tree per period.
"""

import functools
import sys
import time
from collections.abc import Callable

import jax
import numpy as np

from bartz._compile import options as _options
from bartz.run import sharding
from bartz.run.chains import (  # noqa: F401 (re-exported: bartz.mcmcloop.<name>)
    SplitChains,
    _threads_state,
    chain_workers,
    keys_by_fold_in,
)
from bartz.run.chunk import (  # noqa: F401 (re-exported: bartz.mcmcloop.<name>)
    REFRESH_EVERY,
    _wrapped,
    chunk_runner,
    chunk_shape,
    wrap_chunk_runners,
)
from bartz.run.progress import Progress
from bartz.run.steps import make_refresh, make_step, state_specs  # noqa: F401 (re-exported)
from bartz.run.traces import (  # noqa: F401 (re-exported: bartz.mcmcloop.<name>)
    RunInfo,
    Trace,
    _chunk_packing,
    _ChunkOut,
    _figures,
    _internal_nodes,
    _num_draws,
    _run_info,
    collect_draws,
    unpack_draws,
    var_count,
)
from bartz.sampler import step as mcmcstep

__all__ = ['REFRESH_EVERY', 'Trace', 'RunInfo', 'run_mcmc', 'state_specs']


CALLS_AHEAD = 1
"""The default of `run_mcmc`'s ``calls_ahead``: calls of the chunk
dispatched ahead of the one whose outputs it reads. They wait on the device
behind it, which then does not sit idle while the host reads the draws,
updates the progress and dispatches the next call; the draw buffers of
``1 + calls_ahead`` calls (`chunk_shape`) are then on the device at once."""


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
    refresh_every: int = REFRESH_EVERY,
    calls_ahead: int = CALLS_AHEAD,
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
    refresh_every
        The period of the refresh (see Notes; `REFRESH_EVERY`). A static
        setting of the compiled chunk: another value compiles another one.
    calls_ahead
        Calls of the compiled chunk dispatched before the outputs of the
        one before them are read (see Notes; `CALLS_AHEAD`); 0: call by
        call. The draws are the same.

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
    After every iteration ``i`` with ``(i + 1) % refresh_every == 0`` the
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
    one before it are read (one chain, or chains vmapped: `calls_ahead`),
    so that the device does not wait for the host between calls. The
    draws are the same; after Ctrl-C the returned state is that after the
    call in flight, up to `calls_ahead` calls ahead of the draws returned.
    """
    _check_count('refresh_every', refresh_every, 1)
    _check_count('calls_ahead', calls_ahead, 0)
    is_binary = state.z is not None
    num_vars = state.X.shape[0]
    n = state.resid.shape[-1]
    chunk, chunk_draws, iters_per_call = _call_sizes(n, num_chains, save_train, chunk_size, n_skip, printevery)
    if mesh is not None:
        state = _place_on_mesh(state, mesh, num_chains)
    total = n_burn + n_save * n_skip
    internal_nodes = _internal_nodes(state.forest.split_tree)
    kind = (chunk, chunk_draws, save_train, num_chains, mesh, refresh_every)
    runner, split, packing, quick = _runner(state, kind, total)
    if split is not None:
        state = None  # its buffers now belong to `split`
    if dart_start is None:
        dart_start = n_burn // 2
    args = (np.int32(n_burn), np.int32(n_skip), np.int32(dart_start))
    # (the chains on threads, `split`, run call by call)
    calls = _Calls(runner, key, state, total, iters_per_call, args, calls_ahead if split is None else 0, quick)
    tally = _Tally(n_burn, n_skip, num_vars, num_chains, split, packing, is_binary)
    progress = Progress(total, printevery)
    start_time = time.perf_counter()
    interrupted = False
    try:
        _sample(calls, tally, progress, callback, internal_nodes, sigma_scale, start_time)
    except KeyboardInterrupt:
        interrupted = True
        progress.close()
        kept = tally.num_draws()
        print(_interrupt_message(tally.done_iters, total, kept), file=sys.stderr)
        if not kept:
            raise
    finally:
        # (a Ctrl-C after the loop: `late`; the draws are all in `tally`)
        late = split is not None and split.close()
    progress.close()
    elapsed = time.perf_counter() - start_time
    state = calls.state
    if split is not None:
        state, late = _threads_state(split, late)
    trace, late = _collect_traces(tally, state, save_train, chain_major, late)
    if late and not interrupted:
        print(
            f'bartz: interrupted by Ctrl-C after the last iteration; returning all {tally.num_draws()} draws.',
            file=sys.stderr,
        )
    interrupted |= late
    compile_time = _compile_time(tally.first_call, tally.done_iters, elapsed)
    info = _run_info(tally.totals, tally.burn_sigma2s(), elapsed, compile_time, interrupted)
    return state, trace, info._replace(sigma2=tally.all_sigma2s())


def _call_sizes(n: int, num_chains, save_train: bool, chunk_size, n_skip: int, printevery) -> tuple[int, int, int]:
    """The compiled chunk's iterations and draw slots (`chunk_shape`, or
    `chunk_size` both), and the iterations of one call of it."""
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
    return chunk, chunk_draws, iters_per_call


def _check_count(name: str, value, least: int) -> None:
    """Refuse a count that is not an integer >= `least`, before any tracing."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < least:
        msg = f'{name} must be an integer >= {least}, got {value!r}'
        raise ValueError(msg)


def _place_on_mesh(state: mcmcstep.State, mesh, num_chains) -> mcmcstep.State:
    """`state` placed on `mesh` as `state_specs` says."""
    if num_chains is None:
        msg = 'a mesh needs num_chains'
        raise ValueError(msg)
    specs = state_specs(state)
    return jax.tree.map(
        lambda s, x: jax.device_put(x, jax.sharding.NamedSharding(mesh, s)),
        specs,
        state,
        is_leaf=lambda s: isinstance(s, jax.sharding.PartitionSpec),
    )


class _Calls:
    """The calls of the compiled chunk, dispatched ahead and read in order.

    `pending` holds the calls dispatched and not yet read, ``(outputs,
    iterations, time dispatched)``, up to `ahead` beyond the one being read.
    A quick first program (`quick`) is read before the second call, whose
    dispatch waits for the full program's compilation (its progress is not
    held back until then). `state` is the state after the last call
    dispatched (None for the chains on threads).
    """

    def __init__(self, runner, key, state, total: int, iters_per_call: int, args: tuple, ahead: int, quick):
        self.runner = runner
        self.key = key
        self.state = state
        self.total = total
        self.iters_per_call = iters_per_call
        self.args = args  # n_burn, n_skip, dart_start
        self.ahead = ahead
        self.quick = quick
        self.pending = []
        self.dispatched = 0

    def dispatch(self, first: bool):
        """Dispatch calls until `ahead` wait behind the next one to read
        (none for a quick `first` call), or all iterations are dispatched."""
        limit = 0 if self.quick is not None and first else self.ahead
        while self.dispatched < self.total and len(self.pending) <= limit:
            iters = min(self.iters_per_call, self.total - self.dispatched)
            t0 = time.perf_counter()
            self.state, out = self.runner(self.key, self.state, np.int32(self.dispatched), np.int32(iters), *self.args)
            self.pending.append((out, iters, t0))
            self.dispatched += iters


class _Tally:
    """What `run_mcmc` has read of the calls of its chunk, on the host: the
    iterations done, the burn-in error variances, the kept draws, the
    `StepInfo` counts summed (in order) and the time of the first call."""

    def __init__(self, n_burn: int, n_skip: int, num_vars: int, num_chains, split, packing, is_binary: bool):
        self.n_burn, self.n_skip, self.num_vars, self.num_chains = n_burn, n_skip, num_vars, num_chains
        self.split, self.packing, self.is_binary = split, packing, is_binary
        self.done_iters = 0
        self.burn_sigma2 = []
        self.sigma2 = []  # every iteration's error variance (R's wbart keeps them all)
        self.traces = []
        self.totals = np.zeros(len(mcmcstep.StepInfo._fields), np.int64)
        self.first_call = None  # (seconds, iterations) of the first call read

    def _draws_before(self, i: int) -> int:
        """Number of draws saved by the iterations before ``i``."""
        return max(0, i - self.n_burn) // self.n_skip

    def read(self, out: _ChunkOut, iters: int, t0: float) -> _ChunkOut:
        """Take in the outputs of a call of `iters` iterations dispatched at
        `t0`; return them on the host."""
        out = _to_host(out, self.packing)
        done = self.done_iters
        if not self.is_binary:
            if done < self.n_burn:
                self.burn_sigma2.append(out.sigma2[: min(iters, self.n_burn - done)])
            self.sigma2.append(out.sigma2[:iters])
        num_draws = self._draws_before(done + iters) - self._draws_before(done)
        if num_draws:
            self.traces.append(_kept_draws(out.draws, num_draws, self.split, self.num_vars))
        self.done_iters += iters
        self.totals += np.asarray(out.info, np.int64)  # the StepInfo fields, in order
        dt = time.perf_counter() - t0
        if self.first_call is None:
            self.first_call = (dt, iters)
        return out

    def num_draws(self) -> int:
        """The draws kept so far, over all chains (a fit's ``ndpost``)."""
        return _num_draws(self.traces, self.split, self.num_chains)

    def burn_sigma2s(self) -> np.ndarray | None:
        """The burn-in error variances read, in one array (None for binary outcomes)."""
        if self.is_binary:
            return None
        return np.concatenate(self.burn_sigma2) if self.burn_sigma2 else np.zeros(0, np.float32)

    def all_sigma2s(self) -> np.ndarray | None:
        """The error variances of every iteration read, in one array (None for binary outcomes)."""
        if self.is_binary:
            return None
        return np.concatenate(self.sigma2) if self.sigma2 else np.zeros(0, np.float32)


def _sample(calls: _Calls, tally: _Tally, progress, callback, internal_nodes: tuple, sigma_scale, start_time):
    """The loop of `run_mcmc`: dispatch the calls, read them in order, and
    report the progress after each."""
    while tally.done_iters < calls.total:
        calls.dispatch(first=tally.done_iters == 0)
        out, iters, t0 = calls.pending.pop(0)
        out = tally.read(out, iters, t0)
        sigma = None if tally.is_binary else float(np.mean(np.sqrt(out.sigma2[iters - 1]))) * sigma_scale
        figures = _figures(tally.done_iters, calls.total, tally.totals, *internal_nodes, sigma, start_time)
        progress.update(figures)
        if callback is not None:
            callback(figures)


def _to_host(out: _ChunkOut, packing) -> _ChunkOut:
    """The outputs of one call of the chunk on the host, the draws unpacked
    (`packing`, None where they come unpacked)."""
    out = jax.tree.map(sharding.to_host, out)
    if packing is not None:
        out = out._replace(draws=unpack_draws(packing, out.draws))
    return out


def _kept_draws(draws: Trace, num_draws: int, split, num_vars: int) -> Trace:
    """The first `num_draws` draws of a call's buffer, with their variable counts."""
    draws = jax.tree.map(lambda b: b[:, :num_draws] if split is not None else b[:num_draws], draws)
    return draws._replace(varcount=var_count(draws.var_tree, draws.split_tree, num_vars))


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


def _collect_traces(tally: _Tally, state, save_train: bool, chain_major: bool, late: bool):
    """`collect_draws` of the calls' draws, again after a Ctrl-C during it;
    and whether a Ctrl-C came after the last iteration (`late`)."""

    def collect():
        # (looked up at each call: tests wrap it to interrupt it)
        return collect_draws(
            tally.traces, tally.split, state, save_train, tally.num_vars, tally.num_chains, chain_major
        )

    try:
        return collect(), late
    except KeyboardInterrupt:
        return collect(), True


def _runner(state: mcmcstep.State, kind: tuple, total: int):
    """How `run_mcmc` calls its compiled chunk.

    `kind` is ``(chunk, chunk_draws, save_train, num_chains, mesh,
    refresh_every)``. Returns the function that runs one call of it,
    ``runner(key, state, i, iters, n_burn, n_skip, dart_start) -> (state,
    outputs)``; the `SplitChains` that holds the states of the chains on
    threads (its runner returns None for the state), or None; the packing
    of the draws (`_chunk_packing`), or None where they come unpacked; and
    the options of a quick first program, or None.
    """
    chunk, chunk_draws, save_train, num_chains, mesh, refresh_every = kind
    n = state.resid.shape[-1]
    workers = chain_workers(num_chains, mesh)
    runs = -(-num_chains // workers) if workers else 1
    num_trees = state.forest.split_tree.shape[-2]
    # (the runners of a mesh are not `_programs.persistent`, but those of chains on threads are)
    quick = _options.quick_options(n, total, num_trees, runs) if workers or mesh is None else None
    options = _options.chunk_options(n)
    if workers:
        split_chains = 0 if keys_by_fold_in() else num_chains
        one_chain = chunk_runner(
            chunk, chunk_draws, save_train, compiler_options=options, split_chains=split_chains, refresh_every=refresh_every
        )
        split = SplitChains(_wrapped(one_chain), state, num_chains, workers, save_train, quick)

        def runner(key, _state, *args):
            return None, split(key, *args)

        return runner, split, None, quick  # (the chains on threads unpack their draws themselves)
    runner = _wrapped(chunk_runner(chunk, chunk_draws, save_train, num_chains, mesh, options, refresh_every=refresh_every))
    packing = _chunk_packing(state, save_train) if mesh is None else None
    if quick is not None:
        runner = functools.partial(runner, quick=quick)
    return runner, None, packing, quick


def _compile_time(first_chunk_time, done_iters: int, elapsed: float) -> float:
    """Seconds of compilation: what the first call, of ``(seconds,
    iterations)`` `first_chunk_time`, took beyond the rate of the later ones."""
    if first_chunk_time is None or done_iters <= first_chunk_time[1]:
        return 0.0
    rate = (elapsed - first_chunk_time[0]) / (done_iters - first_chunk_time[1])
    return max(0.0, first_chunk_time[0] - rate * first_chunk_time[1])
