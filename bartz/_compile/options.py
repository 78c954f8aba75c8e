"""XLA option sets of the compiled MCMC chunk on CPU: the options of the
full program by the number of points (`chunk_options`), and of a quick
first program (`quick_options`). Measured with jaxlib 0.10.2; the figures
are in benchmarks/LOG.md."""

import jax

from bartz._compile import programs as _programs

LOW_OPT_MAX_POINTS = 2**15
"""Below this many points, the chunk compiles with LLVM's level 1 and
without the passes listed in `chunk_options`."""

ONE_TASK_MAX_POINTS = 2**12
"""Below this many points, the chunk compiles without the parallel task
assigner (`chunk_options`)."""


def chunk_options(n: int) -> tuple:
    """XLA options for the chunk of a fit on `n` (padded) points.

    On CPU (jaxlib 0.10.2):

    - below `LOW_OPT_MAX_POINTS` points, LLVM's optimisation level 1
      instead of 3 compiles the sweep faster and runs it faster too
      (per-kernel overheads dominate there); above, level 3 runs faster;
    - below `ONE_TASK_MAX_POINTS` points, no ``cpu-parallel-task-assigner``
      pass: it splits kernels over a value per tree (logs and divisions of
      the proposal) in tasks for the runtime's threads, where the hand-over
      costs more than the work; above, the split of the ``(trees, n)``
      kernels pays;
    - below `LOW_OPT_MAX_POINTS` points, no ``while-loop-invariant-code-motion``
      pass: it hoists what the loop computes from values that do not
      change (the hyperparameters' logs and reciprocals, the tables of the
      proposal, the scatter's lanes) out of the loop, each into a kernel
      of its own (XLA's CPU backend fuses no two outputs in one kernel),
      where inside the loop they fuse into the kernels that read them:
      fewer kernels to compile, and the loop is no slower;
    - below `LOW_OPT_MAX_POINTS` points, no ``tree_reduction_rewriter``
      pass: it splits every reduction of more than 32 values in two
      kernels (blocks, then their sums), for accuracy over long float
      sums; below 2**15 values a single float32 sum is accurate to about
      1e-5 (the squared residuals of the error variance's draw; the
      counts are integers), and fewer kernels run.

    Without the task split or the hoisting the draws are the same bit for
    bit; level 1 and single reductions change their float rounding only
    (`tests/test_mcmcstep.py`).

    Parameters
    ----------
    n
        The number of (padded) data points.

    Returns
    -------
    ``(name, value)`` pairs for ``jax.jit``'s ``compiler_options``; empty
    off CPU and from `LOW_OPT_MAX_POINTS` points.
    """
    if jax.default_backend() != 'cpu' or n >= LOW_OPT_MAX_POINTS:
        return ()
    options = (('xla_backend_optimization_level', 1),)
    passes = ('while-loop-invariant-code-motion', 'tree_reduction_rewriter')
    if n < ONE_TASK_MAX_POINTS:
        passes += ('cpu-parallel-task-assigner',)
    return (*options, ('xla_disable_hlo_passes', ','.join(passes)))


def quick_options(n: int, iterations: int, num_trees: int, runs: int, *, backend: str | None = None) -> dict | None:
    """XLA options for a quick first chunk program (`bartz._compile.programs.persistent`'s
    ``quick``), or None to compile the full program only.

    On CPU, XLA's older kernel emitters (``xla_cpu_use_fusion_emitters=False``)
    compile the chunk faster but run it slower; the draws are the same bit
    for bit (checked with jaxlib `bartz._compile.programs.QUICK_CHECKED_JAXLIB`).
    A first run that is short enough to finish sooner that way starts on the
    quick program, while the full one compiles on a thread and takes over
    between calls (and is the one stored for later processes). Short enough:
    the estimated extra run time, `QUICK_COST_PER_TREE` and
    `QUICK_COST_PER_POINT` per tree and iteration times `runs`, at most
    `QUICK_MAX_EXTRA_SECONDS`.

    Off unless the environment variable ``BARTZ_QUICK_COMPILE`` is ``1``
    (or ``true``, ``on``, ``yes``): on a 2-core machine the full program
    compiling on its thread slows what follows the first fit (a refit, a
    `predict`) about as much as the first fit gains, and a process
    that ends meanwhile waits for it, so it pays only where the first
    result matters most (a first look in a notebook).

    Parameters
    ----------
    n
        The number of (padded) data points.
    iterations
        The iterations of the run.
    num_trees
        The number of trees.
    runs
        Iterations in a row on one thread per iteration of the run (the
        chains per worker).
    backend
        The backend the program runs on; None for JAX's default.

    Returns
    -------
    The options of the quick program, or None (always off a CPU).
    """
    backend = jax.default_backend() if backend is None else backend
    if backend != 'cpu' or not _programs.quick_allowed():
        return None
    extra = iterations * runs * num_trees * (QUICK_COST_PER_TREE + QUICK_COST_PER_POINT * n)
    if extra > QUICK_MAX_EXTRA_SECONDS:
        return None
    return {'xla_cpu_use_fusion_emitters': False}


# seconds of extra run time of the quick program, per tree and iteration and
# per tree, iteration and point (jaxlib 0.10.2 on CPU; see benchmarks/LOG.md)
QUICK_COST_PER_TREE = 3.2e-6
QUICK_COST_PER_POINT = 2.5e-9
QUICK_MAX_EXTRA_SECONDS = 0.5
