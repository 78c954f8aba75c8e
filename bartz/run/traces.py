"""The draws `run_mcmc` saves (`Trace`), their packing into the chunk's
buffers and their collection on the host, and the run's `RunInfo`."""

import functools
import math
import time
from typing import NamedTuple

import jax
import numpy as np
from jax import lax
from jax import numpy as jnp

from bartz.run import sharding
from bartz.sampler import step as mcmcstep


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
    change_proposed: int = 0
    change_accepted: int = 0
    swap_proposed: int = 0
    swap_accepted: int = 0
    # where the last Ctrl-C stopped the fit: 'sampling' (`run_mcmc`), or a
    # stage of `bartz.api.fit.package` or the convergence check (`bartz.api.fit.STAGES`);
    # None if not interrupted
    interrupted_in: str | None = None
    missing: tuple = ()  # attributes of the fit left None by that Ctrl-C (`bartz.api.fit.package`)
    sigma2: np.ndarray | None = None  # (iterations, [chains]) error variance after every iteration; None: binary


def _extract(state: mcmcstep.State, save_train: bool) -> Trace:
    """The fields of a draw that the compiled chunk saves (``varcount`` is
    None: `run_mcmc` counts it on the host, `var_count`)."""
    forest = state.forest
    if save_train:
        target = state.y if state.z is None else state.z
        fit_train = target - state.resid
    else:
        fit_train = None
    return Trace(
        var_tree=forest.var_tree,
        split_tree=forest.split_tree,
        leaf_tree=forest.leaf_tree,
        sigma2=None if state.z is not None else state.sigma2,
        varcount=None,  # counted on the host from the saved trees (`var_count`)
        fit_train=fit_train,
        log_s=None if state.dart is None else state.log_s,
    )


class _ChunkOut(NamedTuple):
    """What one compiled chunk returns besides the state."""

    info: jax.Array  # (8,) int32: the `mcmcstep.StepInfo` counts, summed over the chunk (and chains)
    sigma2: jax.Array  # (chunk, [chains]) error variance after each iteration
    # (chunk_draws + 1, [chains], ...) the draws saved in the chunk, then
    # junk: a `Trace`, or without a mesh its fields packed (`Packing`)
    draws: 'Trace | tuple'


class Packing(NamedTuple):
    """How the fields of a saved draw (a `Trace`) travel in the chunk's
    buffer without a mesh: each field's bits, flattened, in one row per
    item size (``uint8`` for the trees, ``uint32`` for the floats and
    counts), so that the loop writes one row per item size and the
    program zeroes one buffer per item size, instead of one of each per
    field (8 kernels fewer in the program of a fit, each one a kernel's
    compile time; the same draws bit for bit). The host takes the fields
    back as views of the rows (`unpack_draws`)."""

    treedef: object  # the `Trace`'s pytree structure (its None fields dropped)
    fields: tuple  # per field: (shape, dtype, row, offset)
    rows: tuple  # per row: (unsigned dtype, size)


def draw_packing(shapes: Trace) -> Packing:
    """The `Packing` of draws of the shapes `shapes`.

    Parameters
    ----------
    shapes
        A `Trace` of `jax.ShapeDtypeStruct` (of one draw, as the chunk saves it).

    Returns
    -------
    The fields' places in one row per item size, rows ordered by item size.
    """
    leaves, treedef = jax.tree.flatten(shapes)
    widths = sorted({np.dtype(leaf.dtype).itemsize for leaf in leaves})
    sizes = dict.fromkeys(widths, 0)
    fields = []
    for leaf in leaves:
        width = np.dtype(leaf.dtype).itemsize
        fields.append((tuple(leaf.shape), np.dtype(leaf.dtype), widths.index(width), sizes[width]))
        sizes[width] += math.prod(leaf.shape)
    rows = tuple((np.dtype(f'uint{8 * width}'), sizes[width]) for width in widths)
    return Packing(treedef, tuple(fields), rows)


def pack_draw(packing: Packing, draw: Trace) -> tuple:
    """The rows of one draw (traced, in the compiled chunk).

    Parameters
    ----------
    packing
        The `Packing` of the draw's shapes (`draw_packing`).
    draw
        One saved draw, of those shapes.

    Returns
    -------
    One flat unsigned array per row of `packing`: the fields' bits.
    """
    parts = [[] for _ in packing.rows]
    for leaf, (_, dtype, row, _) in zip(jax.tree.leaves(draw), packing.fields, strict=True):
        unsigned = packing.rows[row][0]
        bits = leaf.astype(unsigned) if dtype == np.bool_ else lax.bitcast_convert_type(leaf, unsigned)
        parts[row].append(bits.reshape(-1))
    return tuple(jnp.concatenate(p) if len(p) > 1 else p[0] for p in parts)


def unpack_draws(packing: Packing, rows: tuple) -> Trace:
    """The `Trace` of packed draws, on the host.

    Parameters
    ----------
    packing
        The `Packing` the draws were packed with (`pack_draw`).
    rows
        Per row of `packing`, a numpy array ``(draws, size)``.

    Returns
    -------
    The draws' fields with a leading draws axis: views of `rows`, not copies.
    """
    leaves = []
    for shape, dtype, row, offset in packing.fields:
        block = rows[row][:, offset : offset + math.prod(shape)]
        leaves.append(block.view(dtype).reshape(block.shape[0], *shape))
    return jax.tree.unflatten(packing.treedef, leaves)


def var_count(var_tree: np.ndarray, split_tree: np.ndarray, num_vars: int) -> np.ndarray:
    """`bartz.grove.var_count_scatter` of every forest of saved draws
    ``(..., m, H/2)``, on the host: ``(..., num_vars)`` int32.

    The loop saves the trees anyway; counted here, only for the kept draws,
    the counts cost the compiled chunk no kernels (four per iteration: a
    scatter, its zeroed operand and its indices) and run beside the next
    chunk.

    Parameters
    ----------
    var_tree
        The split variables of the saved trees, ``(..., m, H/2)``.
    split_tree
        Their split indices, of the same shape (0: not an internal node).
    num_vars
        The number of predictors ``p``.

    Returns
    -------
    The number of internal nodes splitting on each predictor, per forest.
    """
    lead = var_tree.shape[:-2]
    var = var_tree.reshape(-1, var_tree.shape[-2] * var_tree.shape[-1]).astype(np.int64)
    internal = split_tree.reshape(var.shape) != 0
    rows = np.arange(var.shape[0], dtype=np.int64)[:, None] * num_vars
    counts = np.bincount((var + rows)[internal], minlength=var.shape[0] * num_vars)
    return counts.reshape(*lead, num_vars).astype(np.int32)


def _chunk_packing(state: mcmcstep.State, save_train: bool) -> Packing:
    """The `Packing` of the draws of a chunk run from `state` (no mesh)."""
    leaves, treedef = jax.tree.flatten(state)
    return _packing_of(treedef, tuple((x.shape, np.dtype(x.dtype)) for x in leaves), save_train)


@functools.lru_cache(maxsize=64)
def _packing_of(treedef, shapes: tuple, save_train: bool) -> Packing:
    """`_chunk_packing` by the state's structure and shapes: a refit of the
    same shapes traces nothing (`_extract`'s shapes are traced once)."""
    state = jax.tree.unflatten(treedef, [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in shapes])
    return draw_packing(jax.eval_shape(lambda s: _extract(s, save_train), state))


def _internal_nodes(split_tree) -> tuple[int, int]:
    """The number of internal nodes of the trees and of trees: with the
    accepted moves' counts (a GROW adds a leaf, a PRUNE removes one, CHANGE
    and SWAP keep them), the host follows the mean number of leaves per
    tree, one more than of internal nodes, without a reduction in the
    compiled chunk."""
    split_tree = np.asarray(sharding.to_host(split_tree))
    return int(np.count_nonzero(split_tree)), split_tree.size // split_tree.shape[-1]


def _figures(done_iters, total, totals, internal, num_forest_trees, sigma, start_time) -> dict:
    """The progress figures given to the progress bar and the callback;
    `totals`: the `StepInfo` counts summed so far, in order."""
    return {
        'iteration': done_iters,
        'total': total,
        'grow_acc': totals[1] / max(totals[0], 1),
        'prune_acc': totals[3] / max(totals[2], 1),
        'change_acc': totals[5] / max(totals[4], 1),
        'swap_acc': totals[7] / max(totals[6], 1),
        'mean_leaves': float(1 + (internal + totals[1] - totals[3]) / num_forest_trees),
        'sigma': sigma,
        'elapsed': time.perf_counter() - start_time,
    }


def _run_info(totals, burn_sigma2, elapsed: float, compile_time: float, interrupted: bool) -> RunInfo:
    """The `RunInfo` of a run; `totals`: the `StepInfo` counts summed, in order."""
    return RunInfo(
        burn_sigma2=burn_sigma2,
        grow_proposed=int(totals[0]),
        grow_accepted=int(totals[1]),
        prune_proposed=int(totals[2]),
        prune_accepted=int(totals[3]),
        elapsed=elapsed,
        compile_time=compile_time,
        interrupted=interrupted,
        interrupted_in='sampling' if interrupted else None,
        change_proposed=int(totals[4]),
        change_accepted=int(totals[5]),
        swap_proposed=int(totals[6]),
        swap_accepted=int(totals[7]),
    )


def _num_draws(traces: list, split, num_chains: int | None) -> int:
    """The draws in the chunks' `traces`, over all chains (a fit's ``ndpost``)."""
    axis = 1 if split is not None else 0  # (the chains on threads have the chain axis first)
    return sum(int(t.leaf_tree.shape[axis]) for t in traces) * (num_chains or 1)


def collect_draws(traces: list, split, state, save_train: bool, num_vars: int, num_chains, chain_major: bool) -> Trace:
    """The `Trace` of `run_mcmc` from the draws of its chunks.

    Parameters
    ----------
    traces
        The kept draws of each call, in order (a `Trace` each; empty: a
        trace of no draws, of the shapes of `state`).
    split
        The `bartz.run.chains.SplitChains` of chains on threads (their
        draws have the chain axis first), or None.
    state
        The final state (for the shapes of an empty trace).
    save_train
        Whether the draws include the training fits.
    num_vars
        The number of predictors.
    num_chains
        None for one chain, else the number of chains.
    chain_major
        Whether to put the chain axis first.

    Returns
    -------
    The draws, ``(draws, [chains], ...)`` or ``(chains, draws, ...)``.
    """
    if traces:
        trace = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1 if split is not None else 0), *traces)
    else:
        shapes = jax.eval_shape(lambda s: _extract(s, save_train), state)
        trace = jax.tree.map(lambda s: np.zeros((0, *s.shape), s.dtype), shapes)
        trace = trace._replace(varcount=var_count(trace.var_tree, trace.split_tree, num_vars))
        if split is not None:
            trace = jax.tree.map(lambda a: np.swapaxes(a, 0, 1), trace)
    if num_chains is not None and chain_major != (split is not None):  # the layout asked
        trace = jax.tree.map(lambda a: np.swapaxes(a, 0, 1), trace)
    return trace
