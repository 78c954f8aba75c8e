"""Data-axis kernels of the sweep: per-leaf sums, lookups, partitions.

What makes a per-leaf sum or a residual update fast on a given machine
lives here, behind a small interface, apart from the statistics of the
moves (`bartz.sampler.moves`) and of the sweep (`bartz.mcmcstep`):

- `_leaf_sums(indices, values, size)`: ``zeros(size).at[indices].add(values)``
  (a scatter on CPU, a masked reduction on GPU from 4,096 points);
- `_lookup(table, indices)`: ``table[indices]`` for uint8 indices;
- `lane_indices` / `unlane`: the scatter's lanes put in / taken out of
  the bins' low bits (the sweep carries a tree's laned cells to the next
  tree);
- `cell_partitions`: every point's cell for every tree's proposed move;
- `count_equal`: how many indices of a row equal each of a few targets;
- `_data_blocks(n)`: how the data axis is cut into independently scheduled
  blocks on CPU (the draws never depend on it, only float rounding);
- `_psum`: sums over the devices the data are split over.
"""

import functools

import jax
from jax import lax
from jax import numpy as jnp

from bartz.forest import grove


def _on_cpu():
    """Whether the kernels are traced for CPU (JAX's default backend; a
    function, so that tests can take the other paths on CPU)."""
    return jax.default_backend() == 'cpu'


def _psum(x, axis_name):
    return x if axis_name is None else lax.psum(x, axis_name)


def _leaf_sums(indices, values, size, *, laned=False):
    """``zeros(size).at[indices].add(values)`` for uint8 `indices`, fast.

    The scatter reads the uint8 indices as they are (JAX would widen them
    to int32 first: a pass over the data and four times the bytes).
    Consecutive points are spread over several copies of the bins, as many
    as fit uint8 indices: XLA's CPU scatter adds the values
    one after the other, and consecutive points mostly fall in the same
    leaf, so each add would wait for the previous one to land (on GPU, they
    would contend for the same atomic). Together about twice as fast at
    n = 100,000 on CPU. Under `vmap` (several chains) on CPU, one scatter
    per chain (`_unbatched_on_cpu`).

    With ``laned=True``, `indices` are already `lane_indices` (the sweep
    carries them to the next tree, which reads the bins back with
    `unlane`: one kernel less per tree than a separate lane pass).
    """
    return _unbatched_on_cpu(functools.partial(_leaf_sums_impl, size=size, laned=laned))(indices, values)


def _scatter_lanes(n, size):
    """How many copies of the `size` bins the scatter of `n` points uses
    (1: no lanes; `_masked_leaf_sums` uses none)."""
    if (not _on_cpu() and n >= _REDUCE_MIN_POINTS) or n < _SCATTER_LANES_MIN_POINTS:
        return 1
    return 256 // size


def lane_indices(indices, size, lane=None):
    """uint8 bin `indices` ``(n,)`` with the scatter's lane of each point in
    their low bits (as `_leaf_sums` forms them); unchanged without lanes.
    `lane`: ``lane_pattern(n, size)``, if already computed."""
    n = indices.shape[0]
    lanes = _scatter_lanes(n, size)
    if lanes == 1:
        return indices
    if lane is None:
        lane = lane_pattern(n, size)
    return (indices << (lanes.bit_length() - 1)) | lane


def lane_pattern(n, size):
    """The lane of each of `n` points (uint8 ``(n,)``; None without lanes).

    A loop that forms laned indices again and again reads it computed once:
    formed in the loop from a counter, the lanes cost a conversion from
    int32 per point, which at LLVM's optimisation level 1 (the sweep's at
    small n, `bartz.mcmcloop._compiler_options`) is not vectorised: 0.6 ns
    per point, five times the shift and the OR of the bins."""
    lanes = _scatter_lanes(n, size)
    if lanes == 1:
        return None
    return (jnp.arange(n, dtype=jnp.int32) & (lanes - 1)).astype(jnp.uint8)


def unlane(indices, size):
    """The bins of `lane_indices` output."""
    lanes = _scatter_lanes(indices.shape[0], size)
    return indices if lanes == 1 else indices >> (lanes.bit_length() - 1)


def _leaf_sums_impl(indices, values, size, laned):
    n = indices.shape[0]
    if not _on_cpu() and n >= _REDUCE_MIN_POINTS:
        return _masked_leaf_sums(indices, values, size)
    lanes = _scatter_lanes(n, size)
    if not laned:
        indices = lane_indices(indices, size)
    # values (n,) or (n, k): k sums per bin from one scatter (the cost is
    # per point, not per value: a second column is nearly free)
    window = values.shape[1:]
    dims = lax.ScatterDimensionNumbers(
        update_window_dims=tuple(range(1, values.ndim)), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)
    )
    copies = lax.scatter_add(
        jnp.zeros((size * lanes, *window), values.dtype),
        indices[:, None],
        values,
        dims,
        mode=lax.GatherScatterMode.FILL_OR_DROP,
    )
    if lanes == 1:
        return copies
    # the lanes added element-wise, not by a reduction: the sum then fuses
    # into the kernel that reads it (one kernel less per tree in the sweep)
    copies = copies.reshape(size, lanes, *window)
    total = copies[:, 0]
    for lane in range(1, lanes):
        total = total + copies[:, lane]
    return total


_SCATTER_LANES_MIN_POINTS = 0  # (a knob for the tests: all n gain, n = 1,000 by 3-8%)


def _masked_leaf_sums(indices, values, size):
    """The per-leaf sums as one reduction over the points of ``values``
    masked by leaf (``size`` outputs per column), which XLA's GPU backend
    fuses into one kernel without forming the mask. On GPU a scatter-add serialises on
    the atomics of the few leaves most points share: in the sweep on an
    H100 the reduction (with the counts as one more column,
    `counts_in_sums`) took the step from 11.5 to 4.1 ms per iteration at
    n = 100,000 and from 75 to 11 ms at 1,000,000. Below
    `_REDUCE_MIN_POINTS` the scatter is as fast or faster (3.1 against 3.5
    ms at n = 1,000). Memory: on GPU the compiled temporaries stay within
    the size of ``values`` (``memory_analysis`` at n = 1,000,000: 0.26 MB
    for one column, 12.8 MB for three, the data being 4 and 12 MB); on CPU
    XLA would form the ``(n, size)`` mask (256 MB there) and the reduction
    costs a pass per leaf: never used there."""
    mask = indices[:, None] == jnp.arange(size, dtype=indices.dtype)  # (n, size)
    mask = mask.reshape(*mask.shape, *(1,) * (values.ndim - 1))  # (n, size, 1...) against (n, 1, k...)
    return jnp.sum(jnp.where(mask, values[:, None], 0), axis=0)


_REDUCE_MIN_POINTS = 4096


def _lookup(table, indices):
    """``table[indices]`` for in-bounds uint8 `indices`, read as they are
    (JAX would widen them to int32 and wrap negative indices first)."""
    return _unbatched_on_cpu(_lookup_impl)(table, indices)


def _lookup_impl(table, indices):
    dims = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))
    return lax.gather(table, indices[:, None], dims, (1,), mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS)


def _unbatched_on_cpu(fun):
    """`fun` whose `vmap` on CPU calls it once per batch element.

    XLA's CPU scatters and gathers with a batch dimension run about twice as
    slow per element as one plain scatter per element of the batch (several
    chains on one CPU device are vmapped). Elsewhere, or for batches larger
    than `_MAX_UNBATCHED` (the program grows with the batch), the usual
    `vmap`.
    """

    @jax.custom_batching.custom_vmap
    def wrapped(*args):
        return fun(*args)

    @wrapped.def_vmap
    def rule(axis_size, in_batched, *args):
        if jax.default_backend() != 'cpu' or axis_size > _MAX_UNBATCHED:
            axes = [0 if b else None for b in in_batched]
            return jax.vmap(fun, in_axes=axes)(*args), True
        outs = [wrapped(*(a[i] if b else a for a, b in zip(args, in_batched, strict=True))) for i in range(axis_size)]
        return jnp.stack(outs), True

    return wrapped


_MAX_UNBATCHED = 16


def _data_blocks(n):
    """Split ``range(n)`` into blocks that `_sweep_trees` processes with
    independent kernels, which XLA's CPU runtime overlaps (a scatter runs
    on one thread). One block below `_BLOCK_MIN_POINTS` points (kernel
    overhead dominates) or off CPU; else 16, boundaries multiple of 128.

    Why 16: the time per point at 6 or 8 blocks
    (the former rule, one per 2**14 points, at most 8) swung by up to 40%
    between nearby n (n = 100,000 ran at 25 ms per iteration, 102,400 and
    108,544 at 33-37 ms), while at 16 blocks it is smooth: 10-25% faster
    at the ladder's lengths 81,920, 106,496, 114,688, 212,992 and
    1,048,576, 5% slower at 98,304 (benchmarks/README.md, "data blocks at large n");
    again with the counts in one pass (`count_equal`): 8 blocks 1.38, 4
    blocks 1.23 and 32 blocks 1.08 times the time of 16 at n = 100,000.
    From 2**15 to 2**16 points 2 blocks were faster while each block
    counted its points with four kernels of its own; with the counts in
    one pass, 16 blocks take 0.72-0.88 times the time of 2 there (33,000,
    40,000 and 55,000 points; 2026-11-27, benchmarks/README.md).

    The blocks depend on n only, not on the number of CPU cores: the
    per-block sums are added in a fixed order, so the draws (float
    rounding included) are the same on any machine with the same n. (The
    former rule, 1 to 4 blocks per core, gave the same blocks on 2 cores.)
    """
    if n < _BLOCK_MIN_POINTS or not _on_cpu():
        return [(0, n)]
    blocks = 16
    bounds = [0] + [n * b // blocks // 128 * 128 for b in range(1, blocks)] + [n]
    return list(zip(bounds[:-1], bounds[1:]))


_BLOCK_MIN_POINTS = 2**15


def counts_in_sums(n, num_blocks):
    """Whether the sweep counts the points per leaf with one more column
    of `_leaf_sums` (exact below 2**24 points) rather than with masked
    reductions of the counted cells. One more column is about free in a
    scatter at small n, and in the masked reduction of GPUs at any n (on
    an H100 at n = 100,000: 5.5 -> 4.1 ms per iteration); a CPU scatter at
    large n pays a pass over the data for it."""
    if not _on_cpu():
        return n < _COUNT_EXACT_POINTS and num_blocks == 1
    return num_blocks == 1 and n < _BLOCK_MIN_POINTS


_COUNT_EXACT_POINTS = 2**24


def count_equal(row, targets):
    """``[sum(row == t) for t in targets]``: how many points of `row`
    (``(n,)`` uint8 leaf or cell indices) equal each of `targets`
    (``(k,)`` int32; a negative target counts 0), exact int32.

    Four indices at a time: the row read as uint32 words, a word XOR the
    target repeated in its four bytes has a zero byte where an index
    equals the target, and the zero bytes are counted with a population
    count (``~((v & 0x7F..) + 0x7F.. | v | 0x7F..)`` has the high bit of
    exactly the zero bytes set). XLA's CPU reductions take about as long
    per element whatever the element: a quarter of the elements, and all
    targets in one pass. (XLA's CPU backend reads the words with a kernel
    of its own, which assembles them byte by byte: three kernels in all.)
    The sweep uses it at many data blocks, where a masked sum per target
    and block took four kernels per block (2026-11-27, benchmarks/README.md).
    """
    n = row.shape[0]
    body = n - n % 4
    lo7 = jnp.uint32(0x7F7F7F7F)
    pattern = targets.astype(jnp.uint8).astype(jnp.uint32) * jnp.uint32(0x01010101)  # (k,)
    words = lax.bitcast_convert_type(row[:body].reshape(body // 4, 4), jnp.uint32)  # (n // 4,)
    v = words[None, :] ^ pattern[:, None]  # (k, n // 4)
    zero_bytes = ~(((v & lo7) + lo7) | v | lo7)
    ones = lax.population_count(zero_bytes)
    if n <= _COUNT_EXACT_POINTS:
        # (a float sum of small integers is exact up to 2**24; XLA's CPU
        # sums floats in one kernel, integers in a tree of several)
        counts = jnp.sum(ones.astype(jnp.float32), axis=1).astype(jnp.int32)
    else:
        counts = jnp.sum(ones.astype(jnp.int32), axis=1)
    if body < n:
        tail = row[body:].astype(jnp.int32)
        counts = counts + jnp.sum(tail[None, :] == targets[:, None], axis=1, dtype=jnp.int32)
    return jnp.where(targets >= 0, counts, 0)


def replace_indices(indices, sources, targets):
    """`indices` (unsigned ints) where each equals ``sources[r]``
    replaced by ``targets[r]`` (int32 arrays that broadcast against
    `indices`; a negative source matches no index), every source compared
    with the original `indices`.

    Compared and selected in the indices' own type, not int32 (with uint8,
    four times the values per vector instruction; at LLVM's level 1, the
    sweep's below 2**15 points, which does not vectorise, narrower scalar
    code): the cell partition and the final leaves in it took warm fits to
    0.92-0.97 times the time at n = 1,000 and 10,000 (2026-11-27,
    benchmarks/README.md)."""
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
