"""Data-axis kernels of the sweep: per-leaf sums, lookups, partitions, counts.

What makes a per-leaf sum or a residual update fast on a given machine
lives here, behind a small interface, apart from the statistics of the
moves (`bartz.sampler.moves`) and of the sweep (`bartz.mcmcstep`). Which
variant runs is the plan's choice (`bartz.kernels.plan.SweepPlan`, made once
by `plan_sweep`); a kernel given no plan plans for its own points.

- `leaf_sums(indices, values, size)`: ``zeros(size).at[indices].add(values)``
  (a scatter with lanes, `bartz.kernels.cpu`, or a masked reduction,
  `bartz.kernels.gpu`, or bartz's Pallas kernel, `bartz.kernels.pallas`,
  when the plan asks for it);
- `data_pass`: a tree's whole pass over the data in one kernel
  (`bartz.kernels.pallas.data_pass`, when the plan asks for it);
- `lookup(table, indices)`: ``table[indices]`` for uint8 indices (the
  residual update reads ``old - new`` leaf values by cell);
- `lane_indices` / `lane_pattern` / `unlane`: the scatter's lanes put in /
  taken out of the bins' low bits (the sweep carries a tree's laned cells
  to the next tree);
- `cell_partitions`: every point's cell for every tree's proposed move;
- `count_cells` / `count_equal`: how many indices of a row equal each of
  a few targets;
- `psum`: sums over the devices the data are split over.

What this module says of XLA's code generation was measured with jaxlib 0.10.2.
"""

import functools

from jax import lax
from jax import numpy as jnp

from bartz.kernels import cpu, gpu, pallas
from bartz.kernels.plan import COUNT_EXACT_POINTS, SweepPlan, plan_sweep

__all__ = [
    'SweepPlan',
    'cell_partitions',
    'count_cells',
    'count_equal',
    'data_pass',
    'lane_indices',
    'lane_pattern',
    'leaf_sums',
    'lookup',
    'plan_sweep',
    'psum',
    'replace_indices',
    'unlane',
]


def _plan(plan: SweepPlan | None, n: int) -> SweepPlan:
    return plan_sweep(n) if plan is None else plan


def psum(x, axis_name):
    """``x`` summed over the devices of mesh axis `axis_name` (None: one device)."""
    return x if axis_name is None else lax.psum(x, axis_name)


def leaf_sums(indices, values, size, *, laned=False, plan=None):
    """``zeros(size).at[indices].add(values)`` for uint8 `indices` ``(n,)``
    and `values` ``(n,)`` or ``(n, k)``, by the plan's kernel.

    With ``laned=True``, `indices` are already `lane_indices` (the sweep
    carries them to the next tree, which reads the bins back with
    `unlane`: one kernel less per tree than a separate lane pass).
    """
    plan = _plan(plan, indices.shape[0])
    impl = functools.partial(_leaf_sums_impl, size=size, laned=laned, plan=plan)
    return cpu.unbatched(impl, plan.unbatched)(indices, values)


def _leaf_sums_impl(indices, values, size, laned, plan):
    if plan.pallas:
        if laned:
            indices = unlane(indices, size, plan=plan)
        return pallas.leaf_sums(indices, values, size, interpret=plan.backend == 'cpu')
    if plan.masked_sums:
        return gpu.masked_leaf_sums(indices, values, size)
    if not laned:
        indices = lane_indices(indices, size, plan=plan)
    return cpu.scatter_leaf_sums(indices, values, size, plan.num_lanes(size))


def data_pass(prev_cells, cells, resid, weights, delta, params, *, final, columns, plan):
    """One tree's pass over the data in one Pallas kernel (with
    `SweepPlan.fused_pass`): ``resid + delta[prev_cells]`` (first column),
    the final leaves ``final(prev_cells, params)`` of the tree before, and
    this tree's sums ``leaf_sums(cells, columns(resid, weights))``; see
    `bartz.kernels.pallas.data_pass`. Interpreted when the plan is for CPU."""
    interpret = plan.backend == 'cpu'
    return pallas.data_pass(prev_cells, cells, resid, weights, delta, params, final=final, columns=columns, interpret=interpret)


def lane_indices(indices, size, lane=None, *, plan=None):
    """uint8 bin `indices` ``(n,)`` of `size` bins with the scatter's lane
    of each point in their low bits (as `leaf_sums` forms them); unchanged
    without lanes. `lane`: `lane_pattern`, if already computed."""
    plan = _plan(plan, indices.shape[0])
    return cpu.lane_indices(indices, plan.num_lanes(size), lane)


def lane_pattern(n, size, *, plan=None):
    """The scatter's lane of each of `n` points (uint8 ``(n,)``; None without lanes)."""
    return cpu.lane_pattern(n, _plan(plan, n).num_lanes(size))


def unlane(indices, size, *, plan=None):
    """The bins of `lane_indices` output."""
    return cpu.unlane(indices, _plan(plan, indices.shape[0]).num_lanes(size))


def lookup(table, indices, *, plan=None):
    """``table[indices]`` for in-bounds uint8 `indices`, read as they are
    (JAX would widen them to int32 and wrap negative indices first)."""
    plan = _plan(plan, indices.shape[0])
    return cpu.unbatched(_lookup_impl, plan.unbatched)(table, indices)


def _lookup_impl(table, indices):
    dims = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))
    return lax.gather(table, indices[:, None], dims, (1,), mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS)


def count_equal(row, targets):
    """``[sum(row == t) for t in targets]``: how many points of `row`
    (``(n,)`` uint8 leaf or cell indices) equal each of `targets`
    (``(k,)`` int32; a negative target counts 0), exact int32, in one pass
    over the row (`bartz.kernels.cpu.count_equal`)."""
    return cpu.count_equal(row, targets, COUNT_EXACT_POINTS)


def count_cells(row, targets):
    """``[sum(row == t) for t in targets]`` for the (two) `targets`, one
    masked sum per target (int32 ``(2,)``): at few data blocks, where it
    fuses with the pass that reads the row."""
    hits = [row.astype(jnp.int32) == targets[a] for a in range(targets.shape[0])]
    if row.shape[0] <= COUNT_EXACT_POINTS:
        # a float sum of 0/1 is exact up to 2**24 and faster than XLA's int reduction
        return jnp.stack([jnp.sum(jnp.where(h, 1.0, 0.0)) for h in hits]).astype(jnp.int32)
    return jnp.stack([jnp.sum(h, dtype=jnp.int32) for h in hits])


def replace_indices(indices, sources, targets):
    """`indices` (unsigned ints) where each equals ``sources[r]``
    replaced by ``targets[r]`` (int32 arrays that broadcast against
    `indices`; a negative source matches no index), every source compared
    with the original `indices`.

    Compared and selected in the indices' own type, not int32: with uint8,
    four times the values per vector instruction, and narrower scalar code
    where LLVM does not vectorise."""
    index_type = indices.dtype
    out = indices
    for source, target in zip(sources, targets, strict=True):
        hit = (indices == jnp.maximum(source, 0).astype(index_type)) & (source >= 0)
        out = jnp.where(hit, target.astype(index_type), out)
    return out


def cell_partitions(X, leaf_indices, var, split, remap_leaf, remap_cell):
    """Move every point to its cell, for every tree: ``cell_of[j][leaf, X[var[j]] >= split[j]]``,
    where ``cell_of`` is the identity but at the (at most two) rows
    ``remap_leaf``, which are ``remap_cell`` (elementwise: a gather by
    point would cost several times more on CPU).

    Parameters
    ----------
    X
        ``(p, n)`` binned predictors.
    leaf_indices
        ``(m, n)`` uint8 leaf of each point in each tree.
    var, split
        ``(m,)`` the rule of each tree's move.
    remap_leaf, remap_cell
        ``(m, 2)`` and ``(m, 2, 2)`` int32 (see `bartz.sampler.moves.Moves`).

    Returns
    -------
    ``(m, n)`` uint8 cells, computed in place of `leaf_indices` for groups of
    trees whose temporaries take about `_PROPOSE_GROUP_BYTES` (all trees at
    once for small n).
    """
    num_trees, n = leaf_indices.shape
    group = _largest_divisor(num_trees, max(1, _PROPOSE_GROUP_BYTES // max(n, 1)))

    def cell_rows(rows, var, split, remap_leaf, remap_cell):
        bit = X[var] >= split[:, None].astype(X.dtype)
        cells = [jnp.where(bit, remap_cell[:, r, 1, None], remap_cell[:, r, 0, None]) for r in range(2)]
        return replace_indices(rows, [remap_leaf[:, r, None] for r in range(2)], cells)

    split = jnp.clip(split, 0, jnp.iinfo(X.dtype).max)
    fields = (var, split, remap_leaf, remap_cell)
    if group == num_trees:
        return cell_rows(leaf_indices, *fields)

    def body(g, leaf_indices):
        start = g * group
        rows = lax.dynamic_slice_in_dim(leaf_indices, start, group)
        args = [lax.dynamic_slice_in_dim(a, start, group) for a in fields]
        return lax.dynamic_update_slice_in_dim(leaf_indices, cell_rows(rows, *args), start, 0)

    return lax.fori_loop(0, num_trees // group, body, leaf_indices)


_PROPOSE_GROUP_BYTES = 2**22


def _largest_divisor(m, at_most):
    return max(d for d in range(1, min(m, at_most) + 1) if m % d == 0)


# the names the sampler and its helpers used before the interface above
_psum = psum
_leaf_sums = leaf_sums
_lookup = lookup
