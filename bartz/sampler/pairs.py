"""The loop over trees of the sweep by pairs of trees (`SweepPlan.pair_loop`).

A pair whose cells are all slots below `_PAIR_CELLS` (`eligible`, one per
pair) shares one pass over the data: it sums the residuals (and counts the
points) by pair of cells ``(a, b)`` of its two trees (``8 a + b``: a table
of 64 sums, with the scatter's lanes as for one tree). The first tree's
sums are the table summed over ``b``; the second tree's, summed over ``a``
after adding the first tree's change of each point (``old - new`` value of
its cell ``a``: a constant of the cell) times the points of each pair of
cells. Another pair takes a second pass for its second tree, over the
residuals with the first tree's change (not written). Each pair's change
(both trees') is applied to the residuals, and its final leaves written, by
the next pair's first pass. Per tree about half the passes over the data of
the loop tree by tree, whose statistics and draws (`tree_stats`) it shares;
the draws differ by float rounding only. Under `vmap` (chains vmapped on one
device) the choice of a pair's path is a select, and both paths run.

What this module says of XLA's code generation was measured with jaxlib 0.10.2.
"""

import functools
from typing import NamedTuple

import jax
import numpy as np
from jax import lax
from jax import numpy as jnp

from bartz import kernels
from bartz._compile import programs as _programs
from bartz.kernels import cpu as _cpu
from bartz.kernels.plan import SweepPlan
from bartz.sampler.leaves import final_leaves, _row_accepted

_PAIR_CELLS = 8  # (cells per tree of a shared pass: pairs of cells ``8 a + b`` below 64)


class _Pairs(NamedTuple):
    """What the loop by pairs reads that does not change in it."""

    plan: SweepPlan
    heap_size: int
    bins: int  # the scatter's bins: the 64 pairs of cells, or the slots of one tree
    eligible: jax.Array  # (m,) bool: whether tree j starts an eligible pair
    remapped_cells: jax.Array  # (m, 3, 2)
    tree_stats: object  # `bartz.sampler.sweep._tree_stats` of the sweep
    lane_shift: int
    wide_lane: jax.Array | None  # uint32 copy of the scatter's lane pattern
    always: jax.Array  # `bartz.kernels.cpu.always_true`
    row_shape: jax.ShapeDtypeStruct  # a tree's output row


def pair_eligible(moves, num_trees, pair_shared):
    """Per pair of trees, whether all its cells (and leaves) are below `_PAIR_CELLS`."""
    slot = np.arange(moves.identity.shape[1], dtype=np.int32)
    max_cell = jnp.maximum(jnp.max(jnp.where(moves.identity, slot, 0), axis=1), jnp.max(moves.cells, axis=1))
    return jnp.all((max_cell < _PAIR_CELLS).reshape(num_trees // 2, 2), axis=1) & pair_shared


def _pair_sweep(resid, cell_indices, eligible, remapped_cells, tree_stats, heap_size, num_trees, num_columns, plan):
    """The loop over trees of `bartz.sampler.sweep.sweep_trees`, by pairs of trees.

    `resid`: the one data block's residuals beside a column of ones.
    Returns the residuals (as `resid`), the final leaves of the points and
    the trees' output rows.
    """
    n = cell_indices.shape[1]
    # at most 256 bins (uint8 cells), with as many lanes as fit uint8 indices
    bins = max(_PAIR_CELLS * _PAIR_CELLS, heap_size)
    # the scatter's lanes, formed in the kernel of the pair's index from a
    # uint32 copy of the lane pattern: XLA's task assigner splits a kernel
    # over the runtime's threads when it counts more operations than bytes,
    # which with uint8 lanes this kernel did (jaxlib 0.10.2)
    lane_shift = plan.num_lanes(bins).bit_length() - 1
    lane = kernels.lane_pattern(n, bins, plan=plan)
    wide_lane = None if lane is None else lax.optimization_barrier(lane.astype(jnp.uint32))
    pairs = _Pairs(
        plan=plan,
        heap_size=heap_size,
        bins=bins,
        # (per tree: indexed by the loop's tree counter without a division, each scalar operation being a kernel)
        eligible=jnp.repeat(eligible, 2),
        remapped_cells=remapped_cells,
        tree_stats=tree_stats,
        lane_shift=lane_shift,
        wide_lane=wide_lane,
        always=_cpu.always_true(),
        row_shape=jax.ShapeDtypeStruct((heap_size, num_columns), jnp.float32),
    )
    (block,) = resid
    outs = jnp.zeros((num_trees, heap_size, num_columns), jnp.float32)
    zero = jnp.zeros((heap_size, num_columns), jnp.float32)
    carry = (np.uint32(0), block, cell_indices, outs, (cell_indices[0], cell_indices[1]), (zero, zero))
    carry = lax.while_loop(lambda c: c[0] < num_trees, functools.partial(_body, pairs), carry)
    block, leaf_indices, outs, *_ = _finish(pairs, *carry[1:4], np.uint32(num_trees - 2), False, *carry[4:], np.uint32(0))
    return (block,), leaf_indices, outs


def _in_order(pairs, fun, *args, through=0, shapes=None):
    return _cpu.in_order(pairs.always, _programs.inlined(fun), *args, through=through, shapes=shapes)


def _body(pairs, carry):
    """One pair of trees: the previous pair finished, this pair's sums, its statistics and draws,
    each an executor of its own (`bartz.kernels.cpu.in_order`)."""
    j, resid, leaf_indices, outs, rows, pair_outs = carry
    # (before the first pair, pair 0 finishes as if unchanged: no change, its cells written back)
    prev = jnp.maximum(j, 2) - 2
    finish = functools.partial(_finish, pairs)
    resid, leaf_indices, outs, u, pair = _in_order(pairs, finish, resid, leaf_indices, outs, prev, j == 0, rows, pair_outs, j, through=3)
    row_t, row_u, sums, first = _in_order(pairs, functools.partial(_pair_sums, pairs), resid, leaf_indices, j, u, pair)
    shapes = (pairs.row_shape, pairs.row_shape)
    pair_outs = _in_order(pairs, functools.partial(_pair_stats, pairs), resid, row_t, row_u, sums, first, j, u, pair, shapes=shapes)
    return j + 2, resid, leaf_indices, outs, (row_t, row_u), pair_outs


def _laned(pairs, index):
    return index if pairs.wide_lane is None else (index << pairs.lane_shift) | pairs.wide_lane.astype(jnp.uint8)


def _by_slot(pairs, sums):
    """Sums over the first `_PAIR_CELLS` slots, as sums over the heap's slots."""
    if pairs.heap_size <= _PAIR_CELLS:
        return sums[: pairs.heap_size]
    return jnp.pad(sums, ((0, pairs.heap_size - _PAIR_CELLS), (0, 0)))


def _tree_row(leaf_indices, j):
    return lax.dynamic_index_in_dim(leaf_indices, j, 0, keepdims=False)


def _with_change(pairs, resid, *row_deltas):
    change = sum(kernels.lookup(delta, row, plan=pairs.plan) for row, delta in row_deltas)
    return resid + jnp.stack([change, jnp.zeros_like(change)], axis=1)


def _final_row(pairs, leaf_indices, row, j, out, first):
    accepted = _row_accepted(out)
    remapped = jnp.where(first, -1, lax.dynamic_index_in_dim(pairs.remapped_cells, j, 0, keepdims=False))
    final = final_leaves(row, remapped, accepted)
    return lax.dynamic_update_slice(leaf_indices, final[None], (j, jnp.zeros((), j.dtype)))


def _finish(pairs, resid, leaf_indices, outs, j, first, rows, pair_outs, next_j):
    """The change of the pair of trees ``j, j + 1`` applied to the
    residuals (`rows`: their cells, carried from their pass: read here
    from `leaf_indices`, which this writes, they cost XLA a copy of all
    of it; `pair_outs`: their output rows, ``old - new`` value by slot
    in their last column), their final leaves written (where not
    `first`), and their output rows; the index of the next pair's second
    tree, and whether that pair is eligible (scalar kernels that do not
    fit in `_pair_sums`'s executor)."""
    (row_t, row_u), (out_t, out_u) = rows, pair_outs
    resid = _with_change(pairs, resid, (row_t, out_t[:, -1]), (row_u, out_u[:, -1]))
    leaf_indices = _final_row(pairs, leaf_indices, row_t, j, out_t, first)
    leaf_indices = _final_row(pairs, leaf_indices, row_u, j + 1, out_u, first)
    outs = lax.dynamic_update_slice_in_dim(outs, jnp.stack([out_t, out_u]), j, 0)
    return resid, leaf_indices, outs, next_j + 1, pairs.eligible[next_j]


def _pair_sums(pairs, resid, leaf_indices, j, u, pair):
    """The trees' cells; the residuals summed by pair of cells (else by
    the first tree's cells), with the first tree's sums."""
    cells, heap_size = _PAIR_CELLS, pairs.heap_size
    row_t, row_u = _tree_row(leaf_indices, j), _tree_row(leaf_indices, u)
    index = jnp.where(pair, (row_t << (cells.bit_length() - 1)) | row_u, row_t)
    sums = kernels.leaf_sums(_laned(pairs, index), resid, pairs.bins, laned=True, plan=pairs.plan)
    by_pair = sums[: cells * cells].reshape(cells, cells, 2)
    first = jnp.where(pair, _by_slot(pairs, jnp.sum(by_pair, axis=1)), sums[:heap_size])
    return row_t, row_u, sums, first


def _corrected(pairs, sums, resid, row_t, row_u, out_t):
    """The second tree's sums from the table: summed over the first
    tree's cells, with the first tree's change (a constant by cell) times its points."""
    cells = _PAIR_CELLS
    by_pair = sums[: cells * cells].reshape(cells, cells, 2)
    points = by_pair[:, :, 1]
    resid_u = jnp.sum(by_pair[:, :, 0] + out_t[:cells, -1, None] * points, axis=0)
    return _by_slot(pairs, jnp.stack([resid_u, jnp.sum(points, axis=0)], axis=1))


def _second_pass(pairs, sums, resid, row_t, row_u, out_t):
    """The second tree's sums from a pass over the residuals with the
    first tree's change (not written: `_finish` applies both trees' changes)."""
    resid = _with_change(pairs, resid, (row_t, out_t[:, -1]))
    return kernels.leaf_sums(_laned(pairs, row_u), resid, pairs.bins, laned=True, plan=pairs.plan)[: pairs.heap_size]


def _pair_stats(pairs, resid, row_t, row_u, sums, first, j, u, pair):
    """Both trees' statistics and draws (their output rows)."""
    out_t = _in_order(pairs, pairs.tree_stats, (first, None), j, shapes=pairs.row_shape)
    corrected, second_pass = functools.partial(_corrected, pairs), functools.partial(_second_pass, pairs)
    sums_u = lax.cond(pair, corrected, second_pass, sums, resid, row_t, row_u, out_t)
    return out_t, _in_order(pairs, pairs.tree_stats, (sums_u, None), u, shapes=pairs.row_shape)
