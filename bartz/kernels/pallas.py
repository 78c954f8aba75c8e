"""GPU kernels of bartz's own, written in Pallas (chosen by the sweep's
plan, `bartz.kernels.plan.SweepPlan.pallas`).

`leaf_sums` forms ``zeros(size).at[indices].add(values)`` in one kernel
launch over a grid of point blocks: each program sums its block's points by
bin with masked reductions over a ``(points, bins)`` comparison and writes
its partial sums; the partials are then added by one reduction in a fixed
order. Unlike a scatter's atomics the result is the same from run to run,
and no bin's additions wait for each other.

`data_pass` is a tree's whole pass over the data in one launch, for the
sweep at one data block (`bartz.kernels.plan.SweepPlan.fused_pass`): the
residual update of the tree before (``resid += delta[cell]``, a masked sum
over the cells as no gather is allowed), its points' final leaves, and this
tree's sums as `leaf_sums` forms them; each point's data is read once and
written once. The statistics stay in the sampler: the final leaves and the
summed columns are elementwise functions the sweep passes in, traced into
the kernel.

The kernels use only what Pallas' GPU (Triton) lowering supports: block
loads and stores through `BlockSpec` and ref slices, elementwise operations,
comparisons, selects, reductions and static Python loops; no gather. Block
shapes are powers of two (a Triton tensor's size must be one): the points
are padded to a multiple of the block where no block divides them (padding
points add nothing) and the bins to a power of two (the extra bins are
dropped). On CPU they run in Pallas' interpret mode (``interpret=True``),
which the tests use to check them against XLA; whether to interpret is the
caller's (the plan's) choice, never asked of the backend here. The tests
also lower them with Triton on CPU (``lowering_platforms=('cuda',)``), which
checks every operation against Pallas' Triton lowering, not Triton's own
compiler: they have not yet been compiled or run on a GPU.

The plan does not select them on any backend by default: they are there for
a GPU benchmark to compare with the masked reduction of `bartz.kernels.gpu`.

What this module says of Pallas was read from jax 0.10.2, where a
`pallas_call` without compiler parameters lowers with Mosaic GPU: the
kernels ask for Triton explicitly.
"""

import math

import jax
from jax import lax
from jax import numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

__all__ = ['block_points', 'data_pass', 'leaf_sums']

# elements of a program's (points, bins) comparison tile: registers of a few warps
TILE_ELEMENTS = 2**13
# tiles each program sums in a static loop (fewer partials to add after the launch)
TILES_PER_BLOCK = 4


def _bins(size: int) -> int:
    """`size` bins rounded up to a power of two (a Triton tensor's size must be one)."""
    return 1 << max(0, size - 1).bit_length()


def _tile_points(size: int) -> int:
    return max(16, TILE_ELEMENTS // _bins(size))


def block_points(size: int) -> int:
    """Points each program of `leaf_sums` sums for `size` bins, at most
    (fewer where a smaller block divides the points: no padding)."""
    return TILES_PER_BLOCK * _tile_points(size)


def _blocking(n: int, tile: int):
    """Tiles per program, programs, and padding points for `n` points in
    tiles of `tile`: the largest block of at most `TILES_PER_BLOCK` tiles
    that divides `n` (the size ladder's lengths are multiples of large
    powers of two), else `TILES_PER_BLOCK` tiles and padding."""
    tiles = TILES_PER_BLOCK
    if n % tile == 0:
        while (n // tile) % tiles:
            tiles //= 2
    num_blocks = max(1, math.ceil(n / (tiles * tile)))
    return tiles, num_blocks, num_blocks * tiles * tile - n


def _check_size(size: int):
    if not 1 <= size <= 256:
        msg = f'size must be in 1..256 (uint8 bins), got {size}'
        raise ValueError(msg)


def _call(kernel, inputs, block_specs, out_shape, out_specs, num_blocks, interpret, aliases=None):
    """`pl.pallas_call` over a grid of `num_blocks` point blocks, with Triton off interpret mode."""
    return pl.pallas_call(
        kernel,
        out_shape=out_shape,
        grid=(num_blocks,),
        in_specs=block_specs,
        out_specs=out_specs,
        input_output_aliases=aliases or {},
        compiler_params=None if interpret else pl_triton.CompilerParams(),
        interpret=interpret,
        name='bartz_' + kernel.__name__,
    )(*inputs)


def _points_spec(block: int, columns: int | None = None):
    """The `BlockSpec` of a per-point input: program ``b`` sees points ``b * block + range(block)``."""
    if columns is None:
        return pl.BlockSpec((block,), lambda b: (b,))
    return pl.BlockSpec((block, columns), lambda b: (b, 0))


def _whole_spec(length: int):
    """The `BlockSpec` of a small input that every program reads whole."""
    return pl.BlockSpec((length,), lambda b: (0,))


def _partials_spec(bins: int, columns: int):
    """Each program's partial sums: row ``b`` of ``(blocks, bins, columns)``."""
    return pl.BlockSpec((None, bins, columns), lambda b: (b, 0, 0))


def _add_partials(partials, size: int):
    """The programs' partial sums ``(blocks, bins, k)`` added over the blocks, bins cut to `size`."""
    # (XLA's reductions are race-free, unlike a scatter's atomics: the same sums on every run, jaxlib 0.10.2)
    return jnp.sum(partials, axis=0)[:size]


def leaf_sums(indices, values, size: int, *, interpret: bool):
    """``zeros(size).at[indices].add(values)`` by a Pallas kernel.

    Parameters
    ----------
    indices
        ``(n,)`` uint8 bins; a bin out of ``range(size)`` adds nowhere (as
        the scatter drops it).
    values
        ``(n,)`` or ``(n, k)`` float32.
    size
        Number of bins, at most 256.
    interpret
        Run in Pallas' interpret mode (on CPU), else lower with Triton (GPU).

    Returns
    -------
    ``(size,)`` or ``(size, k)`` float32 sums: each program's block partial
    sums, added over the blocks in a fixed order.
    """
    _check_size(size)
    column = values.ndim == 1
    values = values[:, None] if column else values
    n, k = values.shape
    bins, tile = _bins(size), _tile_points(size)
    tiles, num_blocks, pad = _blocking(n, tile)
    indices = jnp.pad(indices, (0, pad))  # (bin 0, adding zeros)
    values = jnp.pad(values.astype(jnp.float32), ((0, pad), (0, 0)))
    block = tiles * tile
    partials = _call(
        _leaf_sums_kernel(bins, tile, k),
        (indices, values),
        [_points_spec(block), _points_spec(block, k)],
        jax.ShapeDtypeStruct((num_blocks, bins, k), jnp.float32),
        _partials_spec(bins, k),
        num_blocks,
        interpret,
    )
    sums = _add_partials(partials, size)
    return sums[:, 0] if column else sums


def _leaf_sums_kernel(bins: int, tile: int, num_columns: int):
    """The program of one block of points: its partial sums ``(bins, k)``,
    tile by tile, each tile's points compared with every bin at once and
    each column summed through the mask."""

    def leaf_sums(indices_ref, values_ref, out_ref):
        num_tiles = indices_ref.shape[0] // tile
        totals = [jnp.zeros((bins,), jnp.float32) for _ in range(num_columns)]
        for t in range(num_tiles):
            points = pl.ds(t * tile, tile)
            hit = _bin_mask(indices_ref[points], bins)
            for c in range(num_columns):
                totals[c] = totals[c] + _masked_sum(hit, values_ref[points, c])
        for c in range(num_columns):
            out_ref[:, c] = totals[c]

    return leaf_sums


def _bin_mask(indices, bins: int):
    """``(points, bins)``: whether each point is in each bin (the
    comparison in int32, the type Triton compares in)."""
    return indices.astype(jnp.int32)[:, None] == lax.broadcasted_iota(jnp.int32, (1, bins), 1)


def _masked_sum(hit, values):
    """``(bins,)`` sums of `values` ``(points,)`` through the mask `hit` ``(points, bins)``."""
    return jnp.sum(jnp.where(hit, values[:, None], 0.0), axis=0)


def data_pass(prev_cells, cells, resid, weights, delta, params, *, final, columns, interpret: bool):
    """One tree's pass over the data in one launch: the residual update and
    the final leaves of the tree before, then this tree's sums by cell.

    The statistics stay the caller's: `final` and `columns` are elementwise
    functions of a tile of points, traced into the kernel.

    Parameters
    ----------
    prev_cells, cells
        ``(n,)`` uint8: each point's cell in the tree before and in this tree.
    resid
        ``(n,)`` or ``(n, c)`` float32 residuals; the first column is
        updated, the others carried as they are.
    weights
        ``(n,)`` float32 precision weights, or None.
    delta
        ``(size,)`` float32: the change of the residuals by cell of the
        tree before (``old - new`` leaf values), ``size`` at most 256.
    params
        ``(p,)`` int32: the parameters of `final`.
    final
        ``final(prev_cells, params)``: the tree before's final leaves (uint8)
        from a tile of its cells and the list of the `params` scalars.
    columns
        ``columns(resid, weights)``: the columns summed by cell, from the
        list of the updated residual columns of a tile and its weights.
    interpret
        Run in Pallas' interpret mode (on CPU), else lower with Triton (GPU).

    Returns
    -------
    ``resid + delta[prev_cells]`` (first column), ``final(prev_cells,
    params)``, and ``zeros(size).at[cells].add(columns(...))`` ``(size, k)``
    summed as `leaf_sums` sums.
    """
    size = delta.shape[0]
    _check_size(size)
    column = resid.ndim == 1
    resid = resid[:, None] if column else resid
    n, num_resid = resid.shape
    bins, tile = _bins(size), _tile_points(size)
    tile_shape = jax.ShapeDtypeStruct((tile,), jnp.float32)
    weight_shape = None if weights is None else tile_shape
    num_sums = len(jax.eval_shape(columns, [tile_shape] * num_resid, weight_shape))
    tiles, num_blocks, pad = _blocking(n, tile)
    block = tiles * tile
    per_point = [jnp.pad(prev_cells, (0, pad)), jnp.pad(cells, (0, pad)), jnp.pad(resid, ((0, pad), (0, 0)))]
    specs = [_points_spec(block), _points_spec(block), _points_spec(block, num_resid)]
    if weights is not None:
        per_point.append(jnp.pad(weights, (0, pad)))  # (padding points weigh 0)
        specs.append(_points_spec(block))
    num_params = params.shape[0]
    small = [jnp.pad(delta.astype(jnp.float32), (0, bins - size)), jnp.pad(params, (0, _bins(num_params) - num_params))]
    specs += [_whole_spec(a.shape[0]) for a in small]
    kernel = _data_pass_kernel(bins, tile, (num_resid, num_params, num_sums), weights is not None, final, columns, n if pad else None)
    out_shape = (
        jax.ShapeDtypeStruct(per_point[2].shape, jnp.float32),
        jax.ShapeDtypeStruct(per_point[0].shape, jnp.uint8),
        jax.ShapeDtypeStruct((num_blocks, bins, num_sums), jnp.float32),
    )
    out_specs = (_points_spec(block, num_resid), _points_spec(block), _partials_spec(bins, num_sums))
    new_resid, final_leaves, partials = _call(kernel, per_point + small, specs, out_shape, out_specs, num_blocks, interpret, {2: 0})
    new_resid = new_resid[:n, 0] if column else new_resid[:n]
    return new_resid, final_leaves[:n], _add_partials(partials, size)


def _data_pass_kernel(bins, tile, counts, weighted, final, columns, n):
    """The program of one block of points of `data_pass`, tile by tile
    (`counts`: residual columns, parameters of `final`, summed columns;
    `n`: the points before padding, None without: `columns` may give a
    padding point values, which its bin mask drops)."""
    num_resid, num_params, num_sums = counts

    def data_pass(prev_ref, cells_ref, resid_ref, *refs):
        weights_ref, refs = (refs[0], refs[1:]) if weighted else (None, refs)
        delta_ref, params_ref, resid_out, final_out, sums_out = refs
        params = [params_ref[i] for i in range(num_params)]
        delta = delta_ref[...]
        totals = [jnp.zeros((bins,), jnp.float32) for _ in range(num_sums)]
        for t in range(prev_ref.shape[0] // tile):
            points = pl.ds(t * tile, tile)
            prev = prev_ref[points]
            resid = [resid_ref[points, c] for c in range(num_resid)]
            resid[0] = resid[0] + _select_by_cell(prev, delta, bins)
            for c in range(num_resid):
                resid_out[points, c] = resid[c]
            final_out[points] = final(prev, params).astype(jnp.uint8)
            hit = _bin_mask(cells_ref[points], bins)
            if n is not None:
                first = pl.program_id(0) * prev_ref.shape[0] + t * tile
                hit = hit & (first + lax.broadcasted_iota(jnp.int32, (tile, 1), 0) < n)
            weights = None if weights_ref is None else weights_ref[points]
            totals = [a + _masked_sum(hit, x) for a, x in zip(totals, columns(resid, weights), strict=True)]
        for c, total in enumerate(totals):
            sums_out[:, c] = total

    return data_pass


def _select_by_cell(cells, values, bins: int):
    """``values[cells]`` for a tile of uint8 `cells` and `values` ``(bins,)``,
    as a masked sum over the bins (no gather in a kernel): a point is in
    one bin, whose value it reads exactly (the other terms are zeros; a
    value ``-0.0`` may read as ``+0.0``)."""
    return jnp.sum(jnp.where(_bin_mask(cells, bins), values[None, :], 0.0), axis=1)
