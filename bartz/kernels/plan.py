"""The sweep's plan: which kernel variant runs, decided once, before tracing.

`plan_sweep` is the only place that asks which backend the sampler runs on
or how many points it has; the sweep (`bartz.sampler.sweep`) and the kernels
(`bartz.kernels`) read the fields of the `SweepPlan` it returns and never ask
again. A plan changes how the sums are formed, never what is drawn: every
plan gives the same chain, up to float rounding where its docstring says so
(the coupling tests in ``tests/test_mcmcstep.py`` run each path against the
others).

What this module says of XLA's code generation was measured with jaxlib 0.10.2.
"""

import dataclasses

import jax

# points from which a GPU forms the per-leaf sums by a masked reduction (below, a scatter is as fast)
REDUCE_MIN_POINTS = 4096
# points from which the CPU sweep cuts the data axis in blocks
BLOCK_MIN_POINTS = 2**15
# the CPU's data blocks (independent kernels that XLA's CPU runtime overlaps)
NUM_BLOCKS = 16
# points below which a CPU sweep (one device) splits its loop body in executors of a few kernels
SPLIT_MAX_POINTS = 2**14
# points from which a CPU sweep goes by pairs of trees
PAIR_MIN_POINTS = 2**12
# a float32 sum of 0/1 values is exact below this
COUNT_EXACT_POINTS = 2**24
# where the Pallas kernels run: interpreted on CPU, lowered with Triton on GPU
PALLAS_BACKENDS = ('cpu', 'gpu', 'cuda', 'rocm')


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class SweepPlan:
    """How the sweep forms its sums: Python values fixed before tracing.

    Static (part of a `bartz.mcmcstep.State`'s tree structure when a state
    carries one, never an array), so that the compiled step, and the key of
    the programs stored on disk, depend on it. Build one with `plan_sweep`
    and change a field with `replace` to force a path (tests).
    """

    backend: str  # the platform the sweep is traced for ('cpu', 'gpu', ...)
    n: int  # points on each device (the length of the data axis the sweep sees)
    blocks: tuple  # ((start, stop), ...): the data axis cut in independently scheduled blocks
    masked_sums: bool  # per-leaf sums by a masked reduction (`bartz.kernels.gpu`), not a scatter
    lanes: bool  # the scatter spreads consecutive points over copies of the bins (`bartz.kernels.cpu`)
    unbatched: bool  # under vmap, one scatter or gather per batch element (`bartz.kernels.cpu.unbatched`)
    count_in_scatter: bool  # points per leaf counted by one more column of the per-leaf sums
    stacked: bool  # the loop carries the residuals beside a column of ones (no weights)
    count_by_block: bool  # counted cells' points by masked sums per block (else one `count_equal` pass)
    pad_columns: bool  # weighted scatter rows padded from 3 to 4 floats with an unread column of zeros
    split_body: bool  # the loop body split in conditionals of a few kernels (`bartz.kernels.cpu.in_order`)
    pair_loop: bool  # the loop over trees goes by pairs of trees (`bartz.sampler.step._pair_sweep`)
    pair_shared: bool = True  # eligible pairs share one pass over the data (False: two passes each)
    pallas: bool = False  # per-leaf sums by bartz's Pallas kernel (`bartz.kernels.pallas`; interpreted on CPU)

    @property
    def one_block(self) -> bool:
        """Whether the data axis is one block."""
        return len(self.blocks) == 1

    @property
    def write_in_loop(self) -> bool:
        """Whether each tree writes the final leaves of the tree before it
        (one block), else one pass after the loop writes all trees'."""
        return self.one_block

    @property
    def fused_pass(self) -> bool:
        """Whether each tree's whole pass over the data (the tree before's
        residual update and final leaves, its own sums) is one Pallas kernel
        (`bartz.kernels.data_pass`): with `pallas`, at one block, no lanes."""
        return self.pallas and self.one_block and not self.lanes

    @property
    def carry_rows(self) -> bool:
        """Whether the loop carries a tree's (laned) cells to the next tree
        (one block), else the next tree slices them again."""
        return self.one_block

    def replace(self, **changes) -> 'SweepPlan':
        """This plan with `changes` to its fields (a test forcing a path)."""
        return dataclasses.replace(self, **changes)

    def num_lanes(self, size: int) -> int:
        """Copies of `size` bins that a scatter uses (1: no lanes; uint8 indices)."""
        return 256 // size if self.lanes else 1


def plan_sweep(
    n: int,
    *,
    backend: str | None = None,
    weighted: bool = False,
    sharded: bool = False,
    num_trees: int = 2,
    pallas: bool = False,
) -> SweepPlan:
    """Choose the sweep's kernels for `n` points on each device.

    Parameters
    ----------
    n
        Points on each device.
    backend
        The platform (default ``jax.default_backend()``).
    weighted
        Whether the points have precision weights (heteroskedastic or
        logistic fits).
    sharded
        Whether the data axis is split over devices (then every sum is a
        ``psum`` over them).
    num_trees
        Number of trees.
    pallas
        Form the per-leaf sums with bartz's Pallas kernel
        (`bartz.kernels.pallas`), in Pallas' interpret mode on CPU (slow:
        for tests), with Triton on GPU. Off by default on every backend
        until a GPU benchmark has measured it against the masked reduction.

    Returns
    -------
    The plan. Each choice, and why:

    - ``blocks``: on CPU from `BLOCK_MIN_POINTS` points, `NUM_BLOCKS`
      blocks with boundaries multiple of 128, which XLA's CPU runtime runs
      in parallel (a scatter uses one thread); one block below (kernel
      overhead dominates) or off CPU. The blocks depend on n only, never on
      the number of cores, and their sums are added in a fixed order, so
      the draws are the same on any machine.
    - ``masked_sums``: on GPU from `REDUCE_MIN_POINTS` points, where a
      scatter serialises on the atomics of the few leaves most points share.
    - ``lanes``: wherever a scatter forms the sums: consecutive points
      mostly fall in the same leaf, and each add would wait for the
      previous one to land.
    - ``unbatched``: on CPU, where XLA's scatters and gathers with a batch
      dimension are slower per element than one plain call per element.
    - ``count_in_scatter``: at one block below `BLOCK_MIN_POINTS` on CPU
      (off CPU below `COUNT_EXACT_POINTS`): one more column is about free
      in a small scatter or a GPU's masked reduction; a large CPU scatter
      pays a pass over the data for it.
    - ``stacked``: with the counts in the scatter and no weights, so that
      the scatter reads its two carried columns as they are.
    - ``count_by_block``: at one or two blocks; at more, one pass over the
      whole row counts all targets (`bartz.kernels.count_equal`).
    - ``pad_columns``: weighted, on CPU: XLA's CPU scatter adds a row of 4
      floats as one vector, one of 3 float by float.
    - ``split_body``: on CPU, one device, below `SPLIT_MAX_POINTS` points,
      where a tree costs what its kernels cost and XLA's concurrent
      executor would hand them between threads.
    - ``pair_loop``: on CPU, one device, one block, ``stacked``, an even
      number of trees, from `PAIR_MIN_POINTS` points: two small trees share
      a pass over the data (below, the larger program compiles longer than
      it saves).
    - ``pallas``: only when asked (then no lanes: the kernel sums each bin
      through a mask, for which lanes would only multiply the bins).
    """
    if backend is None:
        backend = jax.default_backend()
    if pallas and backend not in PALLAS_BACKENDS:
        msg = f'plan_sweep: pallas=True needs a backend in {PALLAS_BACKENDS}, got {backend!r}'
        raise ValueError(msg)
    cpu = backend == 'cpu'
    if cpu and n >= BLOCK_MIN_POINTS:
        bounds = [0] + [n * b // NUM_BLOCKS // 128 * 128 for b in range(1, NUM_BLOCKS)] + [n]
        blocks = tuple(zip(bounds[:-1], bounds[1:], strict=True))
    else:
        blocks = ((0, n),)
    one_block = len(blocks) == 1
    masked_sums = not cpu and n >= REDUCE_MIN_POINTS
    count_in_scatter = one_block and (n < BLOCK_MIN_POINTS if cpu else n < COUNT_EXACT_POINTS)
    stacked = count_in_scatter and not weighted
    return SweepPlan(
        backend=backend,
        n=n,
        blocks=blocks,
        masked_sums=masked_sums,
        lanes=not (masked_sums or pallas),
        unbatched=cpu,
        count_in_scatter=count_in_scatter,
        stacked=stacked,
        count_by_block=len(blocks) <= 2,
        pad_columns=weighted and cpu,
        split_body=cpu and not sharded and n < SPLIT_MAX_POINTS,
        pair_loop=cpu and not sharded and one_block and stacked and num_trees % 2 == 0 and n >= PAIR_MIN_POINTS,
        pallas=pallas,
    )
