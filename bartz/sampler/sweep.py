"""The sweep over trees: accept or reject each tree's move, redraw its leaves.

Per tree, as the paper writes it (Chipman, George & McCulloch 2010):

1. the move's cells (`bartz.kernels.cell_partitions`, all trees at once);
2. their sufficient statistics, one pass over the data (`_data_pass`: the
   previous tree's residual update, then the residual sums by cell, a
   kernel call each);
3. the log marginal likelihood ratio of the leaves the move touches
   (`_log_ratio`);
4. accept or reject (`_tree_stats`);
5. the conjugate draws of all the final tree's leaves (`_leaf_values`);
6. the tree's output row, from which the next tree's pass updates the
   residuals (`_output_row`).

A move regroups the points of at most two leaves into at most four cells
(heap slots, `bartz.sampler.moves.Moves`). The pass sums the residuals by
slot (one scatter), with weights also the precisions (the same scatter:
every precision sum is fresh, never a difference of larger sums, which
would lose all digits of a small leaf among millions of points). It counts
the points of every slot with one more column of the same scatter
(`SweepPlan.count_in_scatter`), else of at most two cells (the others are
carried integer counts, or differences of them, which are exact). The
other leaves are the same in both trees and cancel from the ratio.

How the sums are formed (data blocks, lanes, the loop body split in
executors, pairs of trees sharing a pass) is the plan's choice
(`bartz.kernels.plan.SweepPlan`); every plan draws the same chain, up to
float rounding.

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
from bartz.sampler.leaves import _FLAGS_SLOT, accept_and_noise, final_leaves, _leaf_draw, _row_accepted
from bartz.sampler.moves import Moves
from bartz.sampler.pairs import _pair_sweep, pair_eligible
from bartz.sampler.state import Forest, State, StepInfo, plan_for

# ``_EARLIER[c, d]``: cell ``d`` comes before cell ``c`` (of the four cells of a move)
_EARLIER = np.tri(4, k=-1, dtype=bool)

# per kind of move (GROW, PRUNE, CHANGE, SWAP), the (at most two) cells
# whose points are counted: GROW's left cell, CHANGE's two cells that change
# side, SWAP's cell that leaves the sibling (cells in `bartz.sampler.moves` order)
_COUNTED_OF_KIND = np.array([[0, -1], [-1, -1], [2, 3], [3, -1]])
# the (at most two) cells whose points can end in another leaf than their
# slot: GROW's and PRUNE's two children (to the node if the tree ends
# pruned), CHANGE's two side-changing cells, SWAP's cells leaving the moved
# leaf and the sibling
_REMAPPED_OF_KIND = np.array([[0, 1], [0, 1], [2, 3], [1, 3]])


def log_marginal(resid_sum, prec_sum, inv_sigma2, inv_tau2):
    """Log marginal likelihood of a leaf, up to terms that cancel in ratios."""
    post_prec = prec_sum * inv_sigma2 + inv_tau2
    scaled_sum = resid_sum * inv_sigma2
    return 0.5 * jnp.log(inv_tau2 / post_prec) + 0.5 * scaled_sum**2 / post_prec


class _TreeInputs(NamedTuple):
    """What the loop over trees reads of each tree (leading axis: trees)."""

    old_at: jax.Array  # (m, H): the tree's current value on each slot
    counted: jax.Array  # (m, 2): the cells whose points are counted (-1: none)
    prev_cells: jax.Array | None  # (m, 3, 2): the remapped cells of the tree before (`write_in_loop`)
    same: jax.Array | tuple  # (m, 2, 4, 4): which cells share a leaf, in the current and proposed tree
    first: jax.Array  # (m, 2, 4): the first cell of its leaf
    noise_at: jax.Array  # (m, 2, 4): the noise of each cell's leaf, in both trees
    count: jax.Array  # (m, H): the points per leaf
    move: Moves
    log_u: jax.Array  # (m,)
    noise: jax.Array  # (m, H)


class _Sweep(NamedTuple):
    """What the loop over trees reads that does not change in it."""

    plan: SweepPlan
    data_axis: str | None
    heap_size: int
    num_cells: int  # cells per move: 4, or 2 with GROW and PRUNE alone
    weighted: bool
    keep_prec: bool  # the state carries per-leaf precision sums (not logistic)
    inv_sigma2: jax.Array
    inv_tau2: jax.Array
    min_points: jax.Array
    cell_indices: jax.Array  # (m, n) uint8: each point's cell in each tree
    weights: tuple  # the precision weights of each data block (or Nones)
    lane: jax.Array | None  # the scatter's lane of each point (one block)
    xs: _TreeInputs


def sweep_trees(key, state: State, moves: Moves, data_axis=None, plan: SweepPlan | None = None):
    """Accept/reject the moves and redraw the leaves, one tree after the other.

    Returns the state with the new trees and residuals, and the `StepInfo`.
    """
    forest = state.forest
    num_trees, heap_size = forest.leaf_tree.shape
    if plan is None:
        plan = plan_for(state, data_axis)
    # one RNG call: the acceptance uniforms and the leaf noise
    log_u, noise = accept_and_noise(key, num_trees, heap_size)
    cell_indices = kernels.cell_partitions(state.X, forest.leaf_indices, moves.var, moves.split, moves.remap_leaf, moves.remap_cell)
    if state.move_kinds is not None and state.move_kinds.grow_prune_only:
        # GROW and PRUNE touch two cells (the node's children): the last
        # two of the four are always unused, so they are not carried
        moves = moves._replace(**{name: getattr(moves, name)[:, :2] for name in ('cells', 'cell_old', 'cell_new', 'cell_fresh')})
    xs, remapped_cells = _tree_inputs(forest, moves, log_u, noise, plan)
    prec_weights = state.prec_weights
    sweep = _Sweep(
        plan=plan,
        data_axis=data_axis,
        heap_size=heap_size,
        num_cells=moves.cells.shape[1],
        weighted=prec_weights is not None,
        keep_prec=forest.leaf_prec is not None,
        inv_sigma2=1.0 / state.sigma2,
        inv_tau2=1.0 / state.leaf_prior_var,
        min_points=state.min_points_per_leaf,
        cell_indices=cell_indices,
        weights=tuple(None if prec_weights is None else prec_weights[start:stop] for start, stop in plan.blocks),
        # (the scatter's lane of each point, formed once outside the loop,
        # behind a barrier that keeps XLA from forming it again inside)
        lane=lax.optimization_barrier(kernels.lane_pattern(state.resid.shape[0], heap_size, plan=plan) if plan.one_block else None),
        xs=xs,
    )
    resid_blocks = tuple(
        jnp.stack([state.resid[start:stop], jnp.ones(stop - start, jnp.float32)], axis=1) if plan.stacked else state.resid[start:stop]
        for start, stop in plan.blocks
    )
    num_columns = 3 + sweep.keep_prec
    if plan.pair_loop:
        eligible = pair_eligible(moves, num_trees, plan.pair_shared)
        tree_stats = _programs.inlined(functools.partial(_tree_stats, sweep))
        resid, leaf_indices, outs = _pair_sweep(
            resid_blocks, cell_indices, eligible, remapped_cells, tree_stats, heap_size, num_trees, num_columns, plan
        )
    else:
        resid, leaf_indices, outs = _tree_loop(sweep, resid_blocks, remapped_cells, num_trees, num_columns)
    return _sweep_result(state, moves, sweep, outs, resid, leaf_indices, remapped_cells)


def _tree_inputs(forest: Forest, moves: Moves, log_u, noise, plan: SweepPlan):
    """What depends on the moves alone, for all trees at once, outside the
    loop over trees (`_TreeInputs`), and the cells whose points can change
    leaf with their current and proposed leaves (``(m, 3, 2)``)."""
    heap_size = forest.leaf_tree.shape[1]
    num_cells = moves.cells.shape[1]
    used = moves.cells >= 0  # (m, num_cells)
    slot = np.arange(heap_size, dtype=np.int32)  # a constant: an iota is a kernel of its own
    at_cell = jnp.clip(moves.cells, 0, heap_size - 1)
    cell_old = jnp.clip(moves.cell_old, 0, heap_size - 1)
    # this tree's current value on each slot (its leaf's; for a cell, its
    # current leaf's); the cells are distinct slots, none a leaf the move
    # leaves alone: selects over the heap, not a scatter
    old_of_cell = jnp.take_along_axis(forest.leaf_tree, cell_old, axis=1)  # (m, num_cells)
    old_at = jnp.where(moves.identity, forest.leaf_tree, 0.0)
    for d in range(num_cells):
        old_at = jnp.where(used[:, d : d + 1] & (slot == at_cell[:, d : d + 1]), old_of_cell[:, d : d + 1], old_at)
    counted_of_kind = np.where(_COUNTED_OF_KIND < num_cells, _COUNTED_OF_KIND, -1)  # (kinds not compiled)
    remapped_of_kind = jnp.asarray(np.minimum(_REMAPPED_OF_KIND, num_cells - 1))[moves.kind]  # (m, 2)
    which = jnp.asarray(counted_of_kind)[moves.kind]  # (m, 2) positions in `cells`, -1: none
    counted = jnp.where((which >= 0) & moves.allowed[:, None], jnp.take_along_axis(moves.cells, jnp.maximum(which, 0), axis=1), -1)

    remapped_cells = jnp.stack(
        [jnp.take_along_axis(x, remapped_of_kind, axis=1) for x in (moves.cells, moves.cell_old, moves.cell_new)], axis=1
    )  # (m, 3, 2)
    leaves = jnp.stack([moves.cell_old, moves.cell_new], axis=1)  # (m, 2, 4)
    same = (leaves[:, :, :, None] == leaves[:, :, None, :]) & used[:, None, None, :]  # (m, 2, 4, 4)
    first = used[:, None, :] & ~jnp.any(same & _EARLIER[:num_cells, :num_cells], axis=3)  # (m, 2, 4)
    noise_at = jnp.take_along_axis(noise[:, None, :], jnp.clip(leaves, 0, heap_size - 1), axis=2)  # (m, 2, 4)
    # with `write_in_loop`, each tree gets the remapped cells of the tree before it (whose final leaves it writes)
    prev_cells = jnp.concatenate([jnp.full((1, 3, 2), -1, jnp.int32), remapped_cells[:-1]]) if plan.write_in_loop else None
    if plan.one_block:
        # (`same` by its last axis: the loop reads each part in the kernel
        # that uses it, where a slice of the whole is a kernel of its own)
        same = tuple(same[..., d] for d in range(num_cells))
    xs = _TreeInputs(old_at, counted, prev_cells, same, first, noise_at, forest.leaf_count, moves, log_u, noise)
    return xs, remapped_cells


def _tree_loop(sweep: _Sweep, resid_blocks, remapped_cells, num_trees, num_columns):
    """The loop over trees, one tree after the other: the residuals, the
    final leaves of the points and the trees' output rows."""
    plan, heap_size, cell_indices = sweep.plan, sweep.heap_size, sweep.cell_indices
    always = _cpu.always_true()
    carry = (
        np.uint32(0),  # (unsigned tree index: no wrap of negative indices in the slices)
        resid_blocks,
        cell_indices if plan.write_in_loop else None,
        tuple(kernels.lane_indices(cell_indices[0, start:stop], heap_size, sweep.lane, plan=plan) for start, stop in plan.blocks)
        if plan.carry_rows
        else None,
        jnp.zeros((heap_size, num_columns), jnp.float32),
        jnp.zeros((num_trees, heap_size, num_columns), jnp.float32),
    )
    body = _programs.inlined(functools.partial(_loop_body, sweep, always))
    _, *carry, outs = lax.while_loop(lambda carry: carry[0] < num_trees, body, carry)
    resid, leaf_indices = _finish(sweep, *carry, remapped_cells[-1], np.uint32(num_trees - 1))
    return resid, leaf_indices, outs


def _loop_body(sweep: _Sweep, always, carry):
    """One tree: its pass over the data, then its statistics and draws
    (with `SweepPlan.split_body`, each an executor of its own,
    `bartz.kernels.cpu.in_order`; the same draws bit for bit)."""
    j, resid, leaf_indices, prev_rows, prev_row, outs = carry
    data_pass = _programs.inlined(functools.partial(_data_pass, sweep))
    tree_stats = _programs.inlined(functools.partial(_tree_stats, sweep))
    if sweep.plan.split_body:
        args = resid, leaf_indices, prev_rows, prev_row, j
        resid, leaf_indices, rows, data_sums = _cpu.in_order(always, data_pass, *args, through=3)
        row = _cpu.in_order(always, tree_stats, data_sums, j, shapes=jax.ShapeDtypeStruct(prev_row.shape, prev_row.dtype))
    else:
        resid, leaf_indices, rows, data_sums = data_pass(resid, leaf_indices, prev_rows, prev_row, j)
        row = tree_stats(data_sums, j)
    outs = lax.dynamic_update_index_in_dim(outs, row, j, 0)
    return j + 1, resid, leaf_indices, rows, row, outs


def _tree_row(cells, j, start, stop):
    """Points ``start:stop`` of tree `j`'s row of `cells` (``(m, n)``)."""
    return lax.dynamic_slice(cells, (j, jnp.asarray(start, j.dtype)), (1, stop - start))[0]


def _at_tree(j, *arrays):
    """The rows of tree `j` of `arrays` (pytrees of per-tree arrays)."""
    return jax.tree.map(lambda a: lax.dynamic_index_in_dim(a, j, 0, keepdims=False), arrays)


def _finish(sweep: _Sweep, resid, leaf_indices, rows, prev_row, prev_cells, j):
    """The residual update of tree `j`: its change (its output row
    `prev_row`, whose last column is ``old - new`` value by slot; `rows`: its
    cells, the carried rows of each block, or None: read from the cells)
    applied to the residuals; with `write_in_loop`, its final leaves written
    in `leaf_indices` too (`prev_cells`: its remapped cells, `final_leaves`)."""
    plan, heap_size = sweep.plan, sweep.heap_size
    delta = prev_row[:, -1]
    if plan.write_in_loop:
        accepted = _row_accepted(prev_row)
    out = []
    if rows is None:
        rows = [_tree_row(sweep.cell_indices, j, start, stop) for start, stop in plan.blocks]
    for (start, _), block_resid, row in zip(plan.blocks, resid, rows, strict=True):
        if plan.one_block:
            row = kernels.unlane(row, heap_size, plan=plan)
        change = kernels.lookup(delta, row, plan=plan)
        if plan.stacked:  # (the ones stay exact: 1 + 0)
            change = jnp.stack([change, jnp.zeros_like(change)], axis=1)
        out.append(block_resid + change)
        if plan.write_in_loop:
            final = final_leaves(row, prev_cells, accepted)
            leaf_indices = lax.dynamic_update_slice(leaf_indices, final[None], (j, jnp.asarray(start, j.dtype)))
    return tuple(out), leaf_indices


def _data_pass(sweep: _Sweep, resid, leaf_indices, prev_rows, prev_row, j):
    """Tree `j`'s pass over the data: the previous tree's residual update
    (here rather than at the end of its own iteration: one pass over the
    data per tree), then tree `j`'s sums by slot (with `count_in_scatter`,
    the counts as their last column) and the points of its counted cells,
    not yet summed over devices. Its cells are read from the carried
    `leaf_indices` with `write_in_loop`, else from the cells (not written
    in the loop)."""
    plan = sweep.plan
    if plan.fused_pass:
        return _fused_data_pass(sweep, resid, leaf_indices, prev_rows, prev_row, j)
    prev_cells, counted = _at_tree(j, sweep.xs.prev_cells, sweep.xs.counted)
    # (for the first tree, a no-op: zero delta, no cell)
    resid, leaf_indices = _finish(sweep, resid, leaf_indices, prev_rows, prev_row, prev_cells, jnp.maximum(j, 1) - 1)
    cells = leaf_indices if plan.write_in_loop else sweep.cell_indices
    rows = []
    sums = 0.0
    num_counted = 0
    for (start, stop), block_resid, block_weights in zip(plan.blocks, resid, sweep.weights, strict=True):
        row = _tree_row(cells, j, start, stop)
        if plan.one_block:
            row = kernels.lane_indices(row, sweep.heap_size, sweep.lane, plan=plan)
        rows.append(row)
        block_sums = _block_sums(sweep, row, block_resid, block_weights)
        if plan.count_in_scatter:
            # (one block: split by `_tree_stats`)
            sums = block_sums
            continue
        sums = sums + block_sums
        if plan.count_by_block:
            if plan.one_block:
                row = kernels.unlane(row, sweep.heap_size, plan=plan)
            num_counted = num_counted + kernels.count_cells(row, counted)
    if not plan.count_in_scatter and not plan.count_by_block:
        # at many data blocks, the counted cells' points over the whole row in one pass
        num_counted = kernels.count_equal(_tree_row(cells, j, 0, sweep.cell_indices.shape[1]), counted)
    return resid, leaf_indices, tuple(rows) if plan.carry_rows else None, (sums, None if plan.count_in_scatter else num_counted)


def _fused_data_pass(sweep: _Sweep, resid, leaf_indices, prev_rows, prev_row, j):
    """`_data_pass` at one block in one kernel (`SweepPlan.fused_pass`,
    `bartz.kernels.data_pass`): the same residual update, final leaves
    (`_final_by_params`) and sums by slot (`_sum_columns`)."""
    plan = sweep.plan
    prev_cells, counted = _at_tree(j, sweep.xs.prev_cells, sweep.xs.counted)
    (block_resid,), (prev,), (block_weights,) = resid, prev_rows, sweep.weights
    row = _tree_row(leaf_indices, j, 0, prev.shape[0])
    # `final_leaves`' parameters: the remapped cells, then the leaves they go to
    to = jnp.where(_row_accepted(prev_row), prev_cells[2], prev_cells[1])
    params = jnp.concatenate([prev_cells[0], to])
    columns = functools.partial(_sum_columns, sweep)
    block_resid, final, sums = kernels.data_pass(
        prev, row, block_resid, block_weights, prev_row[:, -1], params, final=_final_by_params, columns=columns, plan=plan
    )
    # (for the first tree, a no-op: zero delta, no cell)
    leaf_indices = lax.dynamic_update_slice(leaf_indices, final[None], (jnp.maximum(j, 1) - 1, jnp.zeros((), j.dtype)))
    num_counted = None if plan.count_in_scatter else kernels.count_cells(row, counted)
    return (block_resid,), leaf_indices, (row,), (sums, num_counted)


def _final_by_params(cells, params):
    """`final_leaves` of a tile of cells, its remapped cells and their
    final leaves given as the scalars ``params`` (two cells, two leaves)."""
    return kernels.replace_indices(cells, params[:2], params[2:])


def _sum_columns(sweep: _Sweep, resid, weights):
    """The columns `_block_sums` sums by slot, from the list of a tile's
    residual columns and its weights (or None)."""
    plan = sweep.plan
    if plan.stacked:
        return resid
    columns = [resid[0] * weights, weights] if sweep.weighted else [resid[0]]
    if plan.count_in_scatter:
        if plan.pad_columns:
            columns.append(jnp.zeros_like(resid[0]))  # (unread)
        columns.append(jnp.ones_like(resid[0]))
    return columns


def _block_sums(sweep: _Sweep, row, block_resid, block_weights):
    """A data block's sums by slot (`bartz.kernels.leaf_sums`): residuals
    (times the weights, and the weights), and the counts if the plan
    counts in the scatter."""
    plan = sweep.plan
    if plan.stacked:
        return kernels.leaf_sums(row, block_resid, sweep.heap_size, laned=plan.one_block, plan=plan)
    columns = [block_resid * block_weights, block_weights] if sweep.weighted else [block_resid]
    if plan.count_in_scatter:
        if plan.pad_columns:
            columns.append(jnp.zeros_like(block_resid))  # (unread)
        columns.append(jnp.ones_like(block_resid))
    return kernels.leaf_sums(row, jnp.stack(columns, axis=1), sweep.heap_size, laned=plan.one_block, plan=plan)


def _tree_stats(sweep: _Sweep, data_sums, j):
    """Tree `j`'s acceptance and leaf draws from its `_data_pass` sums: its output row."""
    sums, num_counted = kernels.psum(data_sums, sweep.data_axis)
    if sweep.plan.count_in_scatter:
        # every slot's count from the scatter's last column (exact: fewer than 2**24 points)
        sums, num_counted = sums[:, :-1], sums[:, -1].astype(jnp.int32)
    xs = sweep.xs
    old_at, counted, same, first, noise_at, count, move, log_u, noise = _at_tree(
        j, xs.old_at, xs.counted, xs.same, xs.first, xs.noise_at, xs.count, xs.move, xs.log_u, xs.noise
    )
    slot = np.arange(sweep.heap_size, dtype=np.int32)
    used = move.cells >= 0
    at_cell = slot[:, None] == move.cells[None, :]  # (H, 4)
    slot_count = num_counted if sweep.plan.count_in_scatter else _slot_counts(sweep, move, counted, num_counted, count, at_cell)
    per_slot, cell_stats, count_col = _cell_stats(sweep, sums, slot_count, old_at, move, at_cell)
    log_ratio, allowed = _log_ratio(sweep, cell_stats, same, first, count_col, move)
    accept = allowed & (log_u < move.log_ratio_tree + log_ratio)
    leaf, final, new_values, new_at = _leaf_values(sweep, per_slot, cell_stats, move, accept, at_cell, used, noise, noise_at)
    return _output_row(sweep, leaf, final, new_values, new_at, old_at, count_col, accept, allowed)


def _slot_counts(sweep: _Sweep, move, counted, num_counted, count, at_cell):
    """Points per slot, without the counts in the scatter: a counted cell's
    count; another cell's is its current leaf's count minus the counted
    cells that leave that leaf (exact integers); an untouched leaf keeps its count."""
    used = move.cells >= 0
    is_counted = (move.cells[:, None] == counted[None, :]) & (counted[None, :] >= 0)  # (4, 2)
    counted_num = jnp.sum(jnp.where(is_counted, num_counted, 0), axis=1)  # (4,)
    fresh = jnp.any(is_counted, axis=1)
    old_leaf = jnp.clip(move.cell_old, 0, sweep.heap_size - 1)
    leaves_leaf = (move.cell_old[:, None] == move.cell_old[None, :]) & fresh[None, :]  # (4, 4)
    derived = count[old_leaf] - jnp.sum(jnp.where(leaves_leaf, counted_num[None, :], 0), axis=1)
    cell_count = jnp.where(used, jnp.where(fresh, counted_num, derived), 0)
    return jnp.where(move.identity, count, 0) + jnp.sum(jnp.where(at_cell, cell_count, 0), axis=1)


def _cell_stats(sweep: _Sweep, sums, slot_count, old_at, move, at_cell):
    """Per slot, then per cell, the sufficient statistics: residual sum,
    precision and count (a float, exact below 2**24; without weights the
    precision is the count). The residual sums include this tree: its old
    value on each slot (constant there) times the slot's precision is added
    back. Returns the statistics by slot ``(H, C)``, by cell ``(4, C)``, and
    the column of the counts."""
    heap_size, num_cells = sweep.heap_size, sweep.num_cells
    slot = np.arange(heap_size, dtype=np.int32)
    count_f = slot_count.astype(jnp.float32)
    prec_sum = sums[:, 1] if sweep.weighted else count_f
    columns = [sums[:, 0] + prec_sum * old_at, prec_sum] + ([count_f] if sweep.weighted else [])
    count_col = len(columns) - 1
    # a cell's statistics are its slot's: at one data block in one gather (an
    # unused cell reads the unused slot 0, zeroed here: padding points count
    # there); else in one masked reduction over the heap. A leaf has at most
    # two cells, so the sums over cells are exact whatever their order.
    if sweep.plan.one_block:
        per_slot = jnp.where(slot[:, None] == _FLAGS_SLOT, 0.0, jnp.stack(columns, axis=1))  # (H, C)
        return per_slot, per_slot[jnp.maximum(move.cells, 0)], count_col  # (4, C)
    # (XLA's CPU backend splits a reduction of more than 32 values in two
    # kernels, jaxlib 0.10.2: the heap is summed in halves of at most 32)
    half = min(heap_size, 32)
    per_slot = jnp.stack(columns, axis=1)  # (H, C)
    masked = jnp.where(at_cell.T[:, None, :], per_slot.T[None], 0.0)  # (num_cells, C, H)
    parts = jnp.sum(masked.reshape(num_cells, len(columns), heap_size // half, half), axis=3)
    cell_stats = parts[:, :, 0]
    for i in range(1, parts.shape[2]):
        cell_stats = cell_stats + parts[:, :, i]  # (4, C)
    return per_slot, cell_stats, count_col


def _over_cells(num_cells, mask, values):
    """``sum_d where(mask[..., d], values[d], 0)``, written out (`mask` may
    also be the tuple of its ``mask[..., d]``): at small n a tree costs what
    its kernels cost, and a reduction is a kernel of its own."""
    total = 0.0
    for d in range(num_cells):
        mask_d = mask[d] if isinstance(mask, tuple) else mask[..., d]
        total = total + jnp.where(mask_d[..., None], values[d], 0.0)
    return total


def _log_ratio(sweep: _Sweep, cell_stats, same, first, count_col, move):
    """The log marginal likelihood ratio of the proposed to the current
    tree, and whether the move is allowed (no leaf of the proposed tree
    with fewer than ``min_points_per_leaf`` points).

    The statistics of each cell's leaf in the current (row 0) and in the
    proposed tree (row 1): only the touched leaves (at most two per tree)
    enter the ratio, each once, at its first cell (`first`); in the same
    reduction, the number of leaves of the proposed tree with too few points."""
    leaf_stats = _over_cells(sweep.num_cells, same, cell_stats)  # (2, 4, C)
    marginals = log_marginal(leaf_stats[..., 0], leaf_stats[..., 1], sweep.inv_sigma2, sweep.inv_tau2)  # (2, 4)
    too_small = first[1] & (leaf_stats[1, :, count_col] < sweep.min_points)
    terms = [jnp.where(first[1], marginals[1], 0.0) - jnp.where(first[0], marginals[0], 0.0), too_small.astype(jnp.float32)]
    totals = jnp.sum(jnp.stack(terms), axis=1)
    return totals[0], move.allowed & (totals[1] == 0)


def _leaf_values(sweep: _Sweep, per_slot, cell_stats, move, accept, at_cell, used, noise, noise_at):
    """The final tree's leaves and their conjugate draws (`_leaf_draw`).

    The values twice in one expression (XLA puts an expensive expression
    used twice in a kernel of its own): by leaf (row 0; an untouched leaf
    is its own slot, a touched one the sum of its cells) and by slot (row 1:
    the value of the final leaf of the slot's points). Returns whether each
    slot is a final leaf, the final statistics by leaf, the values by leaf
    and by slot."""
    num_cells = sweep.num_cells
    slot = np.arange(sweep.heap_size, dtype=np.int32)
    cell_final = jnp.where(accept, move.cell_new, move.cell_old)
    to = (slot[:, None] == cell_final[None, :]) & used  # (H, 4)
    of_cell = _over_cells(num_cells, cell_final[:, None] == cell_final[None, :], cell_stats)  # (4, C)
    noise_of_cell = jnp.where(accept, noise_at[1], noise_at[0])
    identity = move.identity[:, None]
    is_cell = at_cell[:, 0] | at_cell[:, 1]
    if num_cells == 4:
        is_cell = is_cell | (at_cell[:, 2] | at_cell[:, 3])
    stats = jnp.stack([
        jnp.where(identity, per_slot, 0.0) + _over_cells(num_cells, to, cell_stats),
        jnp.where(identity, per_slot, 0.0) + _over_cells(num_cells, at_cell, of_cell),
    ])  # (2, H, C)
    leaf_noise = jnp.stack([noise, jnp.where(move.identity, noise, 0.0) + _over_cells(num_cells, at_cell, noise_of_cell[:, None])[:, 0]])
    is_leaf = jnp.stack([jnp.where(accept, move.new_leaf, move.leaf), move.identity | is_cell])
    values = jnp.where(is_leaf, _leaf_draw(stats, leaf_noise, sweep.inv_sigma2, sweep.inv_tau2), 0.0)  # (2, H)
    return is_leaf[0], stats[0], values[0], values[1]


def _output_row(sweep: _Sweep, leaf, final, new_values, new_at, old_at, count_col, accept, allowed):
    """The tree's output row, also carried to the next tree: per slot the
    value, the count (its int32 bits; at the unused slot 0, the flags:
    accepted, allowed), the precision, and old minus new value."""
    slot = np.arange(sweep.heap_size, dtype=np.int32)
    final_count = jnp.where(leaf, final[:, count_col].astype(jnp.int32), 0)
    flags = accept.astype(jnp.int32) | (allowed.astype(jnp.int32) << 1)
    final_count = jnp.where(slot == _FLAGS_SLOT, flags, final_count)
    out = [new_values, lax.bitcast_convert_type(final_count, jnp.float32)]
    if sweep.keep_prec:
        out.append(jnp.where(leaf, final[:, 1], 0.0))
    out.append(old_at - new_at)
    return jnp.stack(out, axis=1)


def _sweep_result(state: State, moves: Moves, sweep: _Sweep, outs, resid, leaf_indices, remapped_cells):
    """The new state and the `StepInfo` from the trees' output rows."""
    forest = state.forest
    num_trees, heap_size = forest.leaf_tree.shape
    leaf_tree = outs[:, :, 0]
    bits = lax.bitcast_convert_type(outs[:, :, 1], jnp.int32)
    flags = bits[:, _FLAGS_SLOT]
    accepted, allowed = (flags & 1).astype(bool), (flags & 2).astype(bool)
    if not sweep.plan.write_in_loop:
        # the final leaf of every point in every tree, in one pass
        leaf_indices = final_leaves(sweep.cell_indices, remapped_cells, accepted)
    leaf_count = bits.at[:, _FLAGS_SLOT].set(0)
    leaf_prec = outs[:, :, 2] if sweep.keep_prec else None
    resid = jnp.concatenate([r[:, 0] for r in resid] if sweep.plan.stacked else resid)
    forest = Forest(
        var_tree=_set_rules(forest.var_tree, moves.set_var, moves, accepted),
        split_tree=_set_rules(forest.split_tree, moves.set_split, moves, accepted),
        leaf_tree=leaf_tree,
        leaf_indices=leaf_indices,
        leaf_count=leaf_count,
        leaf_prec=leaf_prec,
    )
    # one reduction for the counts: at small n every kernel counts
    kinds = moves.kind[None, :] == jnp.arange(4)[:, None]  # (4, m)
    # a move whose proposed tree has a leaf with too few points counts as not proposed
    proposed = kinds & allowed[None, :]
    flags = jnp.stack([proposed, proposed & accepted[None, :]], axis=1).reshape(8, num_trees)
    info = StepInfo(*jnp.sum(flags, axis=-1, dtype=jnp.int32))
    return state._replace(forest=forest, resid=resid), info


def _set_rules(tree, values, moves: Moves, accepted):
    """The accepted moves' new rules (at most two nodes per tree) in `tree`,
    as selects over the trees' nodes, not a gather and a scatter (kernels of
    their own; a pair's two nodes are the same only with the same rule)."""
    node = jnp.arange(tree.shape[1], dtype=jnp.int32)
    acc = accepted[:, None]
    out = tree
    for d in reversed(range(moves.set_node.shape[1])):
        here = acc & (node == moves.set_node[:, d : d + 1])
        out = jnp.where(here, values[:, d : d + 1].astype(tree.dtype), out)
    return out
