"""GPU kernels of bartz's own, written in Pallas (chosen by the sweep's
plan, `bartz.kernels.plan.SweepPlan.pallas`).

`leaf_sums` forms ``zeros(size).at[indices].add(values)`` in one kernel
launch over a grid of point blocks: each program sums its block's points by
bin with masked reductions over a ``(points, bins)`` comparison and writes
its partial sums; the partials are then added by one reduction in a fixed
order. Unlike a scatter's atomics the result is the same from run to run,
and no bin's additions wait for each other.

The kernels use only what Pallas' GPU (Triton) lowering supports: block
loads and stores through `BlockSpec` and ref slices, elementwise operations,
comparisons, selects, reductions and static Python loops; no gather. Block
shapes are powers of two (a Triton tensor's size must be one): the points
are padded to a multiple of the block (padding points add zeros) and the
bins to a power of two (the extra bins are dropped). On CPU they run in
Pallas' interpret mode (``interpret=True``), which the tests use to check
them against XLA's scatter; whether to interpret is the caller's (the
plan's) choice, never asked of the backend here.

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

__all__ = ['block_points', 'leaf_sums']

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
    """Points each program of `leaf_sums` sums for `size` bins (a power of two)."""
    return TILES_PER_BLOCK * _tile_points(size)


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
    if not 1 <= size <= 256:
        msg = f'leaf_sums: size must be in 1..256 (uint8 bins), got {size}'
        raise ValueError(msg)
    column = values.ndim == 1
    values = values[:, None] if column else values
    n, k = values.shape
    bins, tile = _bins(size), _tile_points(size)
    block = block_points(size)
    num_blocks = max(1, math.ceil(n / block))
    pad = num_blocks * block - n
    indices = jnp.pad(indices, (0, pad))  # (bin 0, adding zeros)
    values = jnp.pad(values.astype(jnp.float32), ((0, pad), (0, 0)))
    kernel = _leaf_sums_kernel(bins, tile, k)
    partials = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((num_blocks, bins, k), jnp.float32),
        grid=(num_blocks,),
        in_specs=[pl.BlockSpec((block,), lambda b: (b,)), pl.BlockSpec((block, k), lambda b: (b, 0))],
        out_specs=pl.BlockSpec((None, bins, k), lambda b: (b, 0, 0)),
        compiler_params=None if interpret else pl_triton.CompilerParams(),
        interpret=interpret,
        name='bartz_leaf_sums',
    )(indices, values)
    # (XLA's reductions are race-free, unlike a scatter's atomics: the same sums on every run, jaxlib 0.10.2)
    sums = jnp.sum(partials, axis=0)[:size]
    return sums[:, 0] if column else sums


def _leaf_sums_kernel(bins: int, tile: int, num_columns: int):
    """The program of one block of points: its partial sums ``(bins, k)``,
    tile by tile, each tile's points compared with every bin at once and
    each column summed through the mask."""

    def kernel(indices_ref, values_ref, out_ref):
        num_tiles = indices_ref.shape[0] // tile
        totals = [jnp.zeros((bins,), jnp.float32) for _ in range(num_columns)]
        for t in range(num_tiles):
            points = pl.ds(t * tile, tile)
            hit = _bin_mask(indices_ref[points], bins)
            for c in range(num_columns):
                totals[c] = totals[c] + _masked_sum(hit, values_ref[points, c])
        for c in range(num_columns):
            out_ref[:, c] = totals[c]

    return kernel


def _bin_mask(indices, bins: int):
    """``(points, bins)``: whether each point is in each bin (the
    comparison in int32, the type Triton compares in)."""
    return indices.astype(jnp.int32)[:, None] == lax.broadcasted_iota(jnp.int32, (1, bins), 1)


def _masked_sum(hit, values):
    """``(bins,)`` sums of `values` ``(points,)`` through the mask `hit` ``(points, bins)``."""
    return jnp.sum(jnp.where(hit, values[:, None], 0.0), axis=0)
