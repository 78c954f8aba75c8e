"""`run_mcmc`: burn-in, thinning, traces, progress, in compiled chunks.

The chain runs in chunks of iterations, each one call of a jitted function
built once per (shapes, chunk size): between chunks, control returns to
Python to print progress and to honour Ctrl-C. The random key of iteration
``i`` is ``fold_in(key, i)``, so the draws do not depend on the chunking.
"""

import functools
import math
import sys
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import numpy as np
from jax import lax, random
from jax import numpy as jnp

from bartz import grove, mcmcstep, sharding

__all__ = ['Trace', 'RunInfo', 'run_mcmc', 'state_specs']


class Trace(NamedTuple):
    """Saved draws (leading axis: draws)."""

    var_tree: jax.Array  # (ndraws, m, H/2) uint: split variables
    split_tree: jax.Array  # (ndraws, m, H/2) uint: split indices
    leaf_tree: jax.Array  # (ndraws, m, H) float32: leaf values
    sigma2: jax.Array | None  # (ndraws,) float32; None for probit
    varcount: jax.Array  # (ndraws, p) int32: splits on each predictor
    fit_train: jax.Array | None  # (ndraws, n) float32: sum of trees at the training points
    log_s: jax.Array | None  # (ndraws, p) float32: DART log split probabilities; None without DART


class RunInfo(NamedTuple):
    """What happened in the run, beyond the draws."""

    burn_sigma2: np.ndarray | None  # (nburn,) error variance during burn-in
    grow_proposed: int
    grow_accepted: int
    prune_proposed: int
    prune_accepted: int
    elapsed: float  # seconds, compilation included
    compile_time: float  # seconds spent in the first chunk beyond the others' rate
    interrupted: bool  # stopped early by Ctrl-C


def _sum_info(a: mcmcstep.StepInfo, b: mcmcstep.StepInfo) -> mcmcstep.StepInfo:
    return jax.tree.map(jnp.add, a, b)


def _zero_info() -> mcmcstep.StepInfo:
    return mcmcstep.StepInfo(*(jnp.int32(0) for _ in mcmcstep.StepInfo._fields))


def _extract(state: mcmcstep.State, save_train: bool, multichain: bool) -> Trace:
    forest = state.forest
    p = state.X.shape[0]
    if save_train:
        target = state.y if state.z is None else state.z
        fit_train = target - state.resid
    else:
        fit_train = None
    count = functools.partial(grove.var_count_scatter, num_vars=p)
    if multichain:
        count = jax.vmap(count)
    return Trace(
        var_tree=forest.var_tree,
        split_tree=forest.split_tree,
        leaf_tree=forest.leaf_tree,
        sigma2=None if state.z is not None else state.sigma2,
        varcount=count(forest.var_tree, forest.split_tree),
        fit_train=fit_train,
        log_s=None if state.dart is None else state.log_s,
    )


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
        prec_weights=opt(state.prec_weights, P(D)),
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


@functools.cache
def _chunk_runner(chunk_burn: int, chunk_draws: int, save_train: bool, num_chains: int | None = None, mesh=None):
    """Jitted function running up to `chunk_burn` burn-in iterations, then up
    to `chunk_draws` thinned draws; the counts are dynamic."""
    step = _make_step(num_chains, mesh)
    multichain = num_chains is not None

    def run(key, state, start, n_burn, n_draws, keepevery, dart_start):
        def one_step(i, carry):
            state, info = carry
            if state.dart is not None:
                on = jnp.broadcast_to(i >= dart_start, state.dart.on.shape)
                state = state._replace(dart=state.dart._replace(on=on))
            state, step_info = step(random.fold_in(key, i), state)
            if multichain:
                step_info = jax.tree.map(lambda x: jnp.sum(x, axis=0), step_info)
            return state, _sum_info(info, step_info)

        def burn_body(i, carry):
            state, info, sigma2s = carry
            state, info = one_step(start + i, (state, info))
            sigma2s = sigma2s.at[i].set(state.sigma2)
            return state, info, sigma2s

        sigma2s = jnp.zeros((chunk_burn, *state.sigma2.shape), jnp.float32)
        state, info, sigma2s = lax.fori_loop(0, n_burn, burn_body, (state, _zero_info(), sigma2s))

        trace = jax.eval_shape(lambda s: _extract(s, save_train, multichain), state)
        buffer = jax.tree.map(lambda s: jnp.zeros((chunk_draws, *s.shape), s.dtype), trace)
        first = start + n_burn

        def draw_body(d, carry):
            state, info, buffer = carry
            begin = first + d * keepevery
            state, info = lax.fori_loop(begin, begin + keepevery, one_step, (state, info))
            saved = _extract(state, save_train, multichain)
            buffer = jax.tree.map(lambda b, x: b.at[d].set(x), buffer, saved)
            return state, info, buffer

        state, info, buffer = lax.fori_loop(0, n_draws, draw_body, (state, info, buffer))
        return state, info, sigma2s, buffer

    return jax.jit(run, donate_argnums=(1,))


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
        Iterations per compiled chunk (default: `printevery`, or 100).
    sigma_scale
        Multiplier of the error sd shown in the progress line (the front
        end works in standardised units).
    num_chains
        None for one chain (`state` from `bartz.mcmcstep.init`); else the
        number of chains, run together with `jax.vmap`, with `state` from
        `bartz.mcmcstep.init_chains`. Chain ``c`` at iteration ``i`` uses
        ``split(fold_in(key, i), num_chains)[c]``. Traces then have a chain
        axis after the draws axis.
    mesh
        Optional `jax.sharding.Mesh` with axes ``('chains', 'data')`` (needs
        `num_chains`, a multiple of the 'chains' size): chains are split over
        the first axis and data points over the second (``n`` must be a
        multiple of its size; pad with `bartz.mcmcstep.init`'s ``valid``).
        The state is placed on the mesh by `state_specs`.
    dart_start
        Iteration from which DART updates the split probabilities (if the
        state has DART); default half the burn-in, as R.

    Returns
    -------
    state
        The final state.
    trace
        The kept draws (`Trace`), ``n_save`` long (shorter if interrupted).
    info
        `RunInfo`: burn-in error variances, acceptance counts, timing.

    Notes
    -----
    Ctrl-C between chunks stops the run cleanly: the draws collected so far
    are returned with ``info.interrupted`` set, and a message says so. If no
    draw was collected yet, `KeyboardInterrupt` is raised again.
    """
    if chunk_size is None:
        chunk_size = printevery if printevery else 100
    chunk_size = max(1, int(chunk_size))
    chunk_burn = min(chunk_size, max(n_burn, 1))
    chunk_draws = max(1, min(n_save, max(1, chunk_size // n_skip)))
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
    runner = _chunk_runner(chunk_burn, chunk_draws, save_train, num_chains, mesh)
    total = n_burn + n_save * n_skip
    progress = _Progress(total, printevery)

    is_binary = state.z is not None
    done_iters = 0
    done_draws = 0
    burn_sigma2 = []
    traces = []
    totals = np.zeros(4, np.int64)
    start_time = time.perf_counter()
    first_chunk_time = None
    interrupted = False
    try:
        while done_iters < total:
            n_burn_now = min(chunk_burn, n_burn - done_iters) if done_iters < n_burn else 0
            n_draws_now = 0 if n_burn_now else min(chunk_draws, n_save - done_draws)
            t0 = time.perf_counter()
            state, info, sigma2s, buffer = runner(
                key,
                state,
                jnp.int32(done_iters),
                jnp.int32(n_burn_now),
                jnp.int32(n_draws_now),
                jnp.int32(n_skip),
                jnp.int32(n_burn // 2 if dart_start is None else dart_start),
            )
            info = jax.tree.map(sharding.to_host, info)
            if n_burn_now:
                if not is_binary:
                    burn_sigma2.append(sharding.to_host(sigma2s)[:n_burn_now])
            else:
                traces.append(jax.tree.map(lambda b: b[:n_draws_now], buffer))
            chunk_iters = n_burn_now + n_draws_now * n_skip
            done_iters += chunk_iters
            done_draws += n_draws_now
            totals += np.array([info.grow_proposed, info.grow_accepted, info.prune_proposed, info.prune_accepted])
            jax.block_until_ready(state.resid)
            dt = time.perf_counter() - t0
            if first_chunk_time is None:
                first_chunk_time = (dt, chunk_iters)
            figures = {
                'iteration': done_iters,
                'total': total,
                'grow_acc': totals[1] / max(totals[0], 1),
                'prune_acc': totals[3] / max(totals[2], 1),
                'mean_leaves': float(jnp.mean(grove.forest_num_leaves(state.forest.split_tree))),
                'sigma': None if is_binary else float(jnp.mean(jnp.sqrt(state.sigma2))) * sigma_scale,
                'elapsed': time.perf_counter() - start_time,
            }
            progress.update(figures)
            if callback is not None:
                callback(figures)
    except KeyboardInterrupt:
        interrupted = True
        progress.close()
        if not traces:
            print('bartz: interrupted during burn-in; no draws to return.', file=sys.stderr)
            raise
        print(
            f'bartz: interrupted by Ctrl-C after {done_iters} of {total} iterations; '
            f'returning the {done_draws} draws collected so far.',
            file=sys.stderr,
        )
    progress.close()
    elapsed = time.perf_counter() - start_time
    if traces:
        trace = jax.tree.map(lambda *xs: jnp.concatenate(xs), *traces)
    else:
        trace = jax.tree.map(lambda b: b[:0], buffer)
    compile_time = 0.0
    if first_chunk_time is not None and done_iters > first_chunk_time[1]:
        rate = (elapsed - first_chunk_time[0]) / (done_iters - first_chunk_time[1])
        compile_time = max(0.0, first_chunk_time[0] - rate * first_chunk_time[1])
    run_info = RunInfo(
        burn_sigma2=None if is_binary else (np.concatenate(burn_sigma2) if burn_sigma2 else np.zeros(0, np.float32)),
        grow_proposed=int(totals[0]),
        grow_accepted=int(totals[1]),
        prune_proposed=int(totals[2]),
        prune_accepted=int(totals[3]),
        elapsed=elapsed,
        compile_time=compile_time,
        interrupted=interrupted,
    )
    return state, trace, run_info


class _Progress:
    """A one-line progress bar (in place on terminals and in notebooks)."""

    def __init__(self, total: int, printevery: int | None):
        self.total = total
        self.printevery = printevery
        self.stream = sys.stdout
        self.inplace = _supports_carriage_return(self.stream)
        self.last_printed = 0
        self.open = False

    def update(self, f: dict):
        if not self.printevery:
            return
        it = f['iteration']
        if it - self.last_printed < self.printevery and it < self.total:
            return
        self.last_printed = it
        frac = it / max(self.total, 1)
        width = 20
        bar = '#' * int(frac * width) + '-' * (width - int(frac * width))
        rate = f['elapsed'] / max(it, 1)
        remaining = rate * (self.total - it)
        sigma = '' if f['sigma'] is None else f' sigma {f["sigma"]:.3g}'
        line = (
            f'[{bar}] {it}/{self.total} it | grow acc {f["grow_acc"]:.0%} prune acc {f["prune_acc"]:.0%} '
            f'| leaves/tree {f["mean_leaves"]:.2f}{sigma} | {_fmt_time(f["elapsed"])} elapsed, '
            f'{_fmt_time(remaining)} left'
        )
        if self.inplace:
            self.stream.write('\r' + line)
            self.open = True
        else:
            self.stream.write(line + '\n')
        self.stream.flush()

    def close(self):
        if self.open:
            self.stream.write('\n')
            self.stream.flush()
            self.open = False


def _supports_carriage_return(stream) -> bool:
    if 'ipykernel' in sys.modules:
        return True
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _fmt_time(seconds: float) -> str:
    if not math.isfinite(seconds):
        return '?'
    if seconds < 60:
        return f'{seconds:.1f}s'
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f'{minutes}m{sec:02d}s'
    hours, minutes = divmod(minutes, 60)
    return f'{hours}h{minutes:02d}m'

