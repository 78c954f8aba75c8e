"""The CPU variants of the data-axis kernels, and XLA CPU runtime tricks.

Chosen by the sweep's plan (`bartz.kernels.plan.SweepPlan`); every claim
about XLA's CPU backend here was measured with jaxlib 0.10.2.
"""

import jax
from jax import lax
from jax import numpy as jnp

# batches larger than this are vmapped as usual by `unbatched` (the program grows with the batch)
MAX_UNBATCHED = 16


def lane_shift(lanes: int) -> int:
    """Bits of a laned index that hold the lane (`lanes` a power of 2)."""
    return lanes.bit_length() - 1


def lane_pattern(n: int, lanes: int):
    """The lane of each of `n` points, uint8 ``(n,)`` (None without lanes).

    A loop that forms laned indices again and again reads it computed once:
    formed in the loop from a counter, the lanes cost a conversion from
    int32 per point, which LLVM's optimisation level 1 (the sweep's at
    small n) does not vectorise."""
    if lanes == 1:
        return None
    return (jnp.arange(n, dtype=jnp.int32) & (lanes - 1)).astype(jnp.uint8)


def lane_indices(indices, lanes: int, lane=None):
    """uint8 bin `indices` ``(n,)`` with each point's lane in their low bits
    (`lane`: `lane_pattern`, if already computed)."""
    if lanes == 1:
        return indices
    if lane is None:
        lane = lane_pattern(indices.shape[0], lanes)
    return (indices << lane_shift(lanes)) | lane


def unlane(indices, lanes: int):
    """The bins of `lane_indices` output."""
    return indices if lanes == 1 else indices >> lane_shift(lanes)


def scatter_leaf_sums(indices, values, size: int, lanes: int):
    """``zeros(size).at[indices].add(values)`` for uint8 laned `indices`.

    The scatter reads the uint8 indices as they are (JAX would widen them
    to int32 first: a pass over the data and four times the bytes). With
    ``lanes > 1`` consecutive points go to distinct copies of the bins: XLA's
    CPU scatter adds the values one after the other, and consecutive points
    mostly fall in the same leaf, so each add would wait for the previous
    one to land. `values` ``(n,)`` or ``(n, k)``: k sums per bin from one
    scatter (the cost is per point, not per value)."""
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
    # into the kernel that reads it
    copies = copies.reshape(size, lanes, *window)
    total = copies[:, 0]
    for lane in range(1, lanes):
        total = total + copies[:, lane]
    return total


def unbatched(fun, enabled: bool):
    """`fun` whose `vmap` calls it once per batch element (if `enabled`).

    XLA's CPU scatters and gathers with a batch dimension run slower per
    element than one plain scatter per element of the batch (several chains
    on one CPU device are vmapped). Not `enabled`, or for batches larger
    than `MAX_UNBATCHED`, the usual `vmap`.
    """

    @jax.custom_batching.custom_vmap
    def wrapped(*args):
        return fun(*args)

    @wrapped.def_vmap
    def rule(axis_size, in_batched, *args):
        if not enabled or axis_size > MAX_UNBATCHED:
            axes = [0 if b else None for b in in_batched]
            return jax.vmap(fun, in_axes=axes)(*args), True
        outs = [wrapped(*(a[i] if b else a for a, b in zip(args, in_batched, strict=True))) for i in range(axis_size)]
        return jnp.stack(outs), True

    return wrapped


def count_equal(row, targets, exact_points: int):
    """``[sum(row == t) for t in targets]`` for uint8 `row` ``(n,)`` and
    int32 `targets` ``(k,)`` (a negative target counts 0), exact int32.

    Four indices at a time: the row read as uint32 words, a word XOR the
    target repeated in its four bytes has a zero byte where an index
    equals the target, and the zero bytes are counted with a population
    count (``~((v & 0x7F..) + 0x7F.. | v | 0x7F..)`` has the high bit of
    exactly the zero bytes set). XLA's CPU reductions take about as long
    per element whatever the element: a quarter of the elements, and all
    targets in one pass.
    """
    n = row.shape[0]
    body = n - n % 4
    lo7 = jnp.uint32(0x7F7F7F7F)
    pattern = targets.astype(jnp.uint8).astype(jnp.uint32) * jnp.uint32(0x01010101)  # (k,)
    words = lax.bitcast_convert_type(row[:body].reshape(body // 4, 4), jnp.uint32)  # (n // 4,)
    v = words[None, :] ^ pattern[:, None]  # (k, n // 4)
    zero_bytes = ~(((v & lo7) + lo7) | v | lo7)
    ones = lax.population_count(zero_bytes)
    if n <= exact_points:
        # (a float sum of small integers is exact up to 2**24; XLA's CPU
        # sums floats in one kernel, integers in a tree of several)
        counts = jnp.sum(ones.astype(jnp.float32), axis=1).astype(jnp.int32)
    else:
        counts = jnp.sum(ones.astype(jnp.int32), axis=1)
    if body < n:
        tail = row[body:].astype(jnp.int32)
        counts = counts + jnp.sum(tail[None, :] == targets[:, None], axis=1, dtype=jnp.int32)
    return jnp.where(targets >= 0, counts, 0)


def always_true():
    """A true scalar that XLA cannot see is true (behind an optimisation
    barrier, computed once outside a loop), for `in_order`."""
    return lax.optimization_barrier(jnp.asarray(True))


def in_order(always, fun, *args, through: int = 0, shapes=None):
    """``fun(*args)`` run as an executor of its own on XLA's CPU runtime.

    The runtime runs an executor (a loop body, a branch of a conditional)
    of at most 8 kernels in order on one thread, and a larger one in its
    concurrent mode, which hands kernels between threads, costly when a
    kernel takes microseconds. A conditional whose predicate `always` is
    true (`always_true`) makes `fun` a branch: an executor of its own. The
    branch never taken returns zeros, or passes its first `through`
    arguments through (taken, they are updated in place); `fun` returns
    those first. `shapes`: those of its outputs, if known (else traced
    once more). Measured with jaxlib 0.10.2; the draws do not depend on it.
    """
    if shapes is None:
        shapes = jax.eval_shape(fun, *args)

    def never(*args):
        zeros = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)
        return (*args[:through], *zeros[through:]) if through else zeros

    return lax.cond(always, fun, never, *args)
