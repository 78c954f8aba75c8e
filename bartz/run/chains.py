"""Several chains on one CPU device as separate calls of the one-chain
program on a thread pool (`SplitChains`), and the chains' random keys."""

import os
from concurrent.futures import ThreadPoolExecutor

import jax
import numpy as np
from jax import random

from bartz.run import sharding
from bartz.run.traces import _ChunkOut, _chunk_packing, unpack_draws
from bartz.sampler import step as mcmcstep


def chain_key(key, chain, num_chains: int):
    """The key of chain `chain` in the vmapped step.

    Parameters
    ----------
    key
        The key of the iteration.
    chain
        The chain's index (traced).
    num_chains
        The number of chains; 0 where ``random.split(key, c)[chain]`` is
        ``fold_in(key, chain)`` for every ``c`` (`keys_by_fold_in`: JAX's
        default partitionable threefry), so that one compiled runner
        serves any number of chains.

    Returns
    -------
    ``random.split(key, num_chains)[chain]``.
    """
    if num_chains == 0:
        return mcmcstep.fold_in(key, chain)
    return random.split(key, num_chains)[chain]


def keys_by_fold_in() -> bool:
    """Whether ``random.split(key, c)[i]`` is ``fold_in(key, i)`` for every ``c``.

    Returns
    -------
    True with JAX's partitionable threefry (``jax_threefry_partitionable``
    and the ``threefry2x32`` implementation).
    """
    return jax.config.jax_threefry_partitionable and jax.config.jax_default_prng_impl == 'threefry2x32'


def chain_workers(num_chains: int | None, mesh=None) -> int:
    """Threads for running `num_chains` vmapped chains as separate one-chain
    calls (`SplitChains`); 0 to run them vmapped.

    On CPU, separate calls are faster even one after the other (the vmapped
    sweep does the per-chain scatters and gathers with batch indices), and
    on several threads they use the cores that one call leaves idle.
    Elsewhere (GPU, a mesh of
    several devices) the chains stay vmapped.
    """
    if num_chains is None:
        return 0
    if mesh is None:
        platform = jax.default_backend()
    elif mesh.devices.size == 1:
        platform = mesh.devices.flat[0].platform
    else:
        return 0
    if platform != 'cpu':
        return 0
    return max(1, min(num_chains, _usable_cores()))


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class SplitChains:
    """The chains of a vmapped state, each run by its own calls of a one-chain
    runner (`bartz.run.loop.chunk_runner` with ``split_chains``), on up to
    `workers` threads; a call returns what the vmapped runner would, except
    that the saved draws have the chain axis first.

    Parameters
    ----------
    runner
        The one-chain runner, ``runner(key, own, shared, start, iters,
        n_burn, n_skip, dart_start, chain, quick=...) -> (own, outputs)``.
    state
        The vmapped state (its chains' fields are taken apart, on the host).
    num_chains
        The number of chains.
    workers
        The number of threads (1: no pool, chain after chain).
    save_train
        Whether the draws include the training fits.
    quick
        Compiler options of a quick first program (see
        `bartz._compile.options.quick_options`), or None.
    """

    def __init__(self, runner, state: mcmcstep.State, num_chains: int, workers: int, save_train: bool, quick: dict | None = None):
        self.runner = runner
        self.quick = quick
        self.shared = mcmcstep.shared_fields(state)
        self.device = next(iter(state.X.devices()))
        self.own = mcmcstep.unstack_chains(state, num_chains, self.device)
        self.packing = _chunk_packing(mcmcstep.merge_fields(self.own[0], self.shared), save_train)
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix='bartz-chain') if workers > 1 else None

    def __call__(self, key, *args):
        def one(c):
            own, out = self.runner(key, self.own[c], self.shared, *args, np.int32(c), quick=self.quick)
            out = jax.tree.map(sharding.to_host, out)
            return own, out._replace(draws=unpack_draws(self.packing, out.draws))

        chains = range(len(self.own))
        results = list(self.pool.map(one, chains) if self.pool is not None else map(one, chains))
        self.own = [own for own, _ in results]
        outs = [out for _, out in results]
        return _ChunkOut(
            info=np.sum([o.info for o in outs], axis=0),
            sigma2=np.stack([o.sigma2 for o in outs], axis=1),
            draws=jax.tree.map(lambda *xs: np.stack(xs), *(o.draws for o in outs)),  # chains first
        )

    def state(self) -> mcmcstep.State:
        """The chains' states stacked as a vmapped state (on the host, then the device)."""
        return mcmcstep.stack_chains(self.own, self.shared, self.device)

    def close(self) -> bool:
        """Shut the threads down once their calls end; a Ctrl-C while
        waiting for them stops the wait (the calls end in the background,
        and the chains' states are then lost). Returns whether it did."""
        if self.pool is None:
            return False
        try:
            self.pool.shutdown()
        except KeyboardInterrupt:
            self.pool.shutdown(wait=False, cancel_futures=True)
            return True
        return False


def _threads_state(split, late: bool):
    """The final state of the chains on threads, and whether a Ctrl-C came
    late (after the last iteration). None where a Ctrl-C came after the
    loop (`late`), inside a call that had taken (donated) a chain's state,
    or while the states are stacked: the draws matter more."""
    if late:
        return None, late
    try:
        return split.state(), late
    except RuntimeError:
        return None, late
    except KeyboardInterrupt:
        return None, True
