"""Trees as fixed-size heap arrays: the public face of the forest layer.

`bartz.grove` gathers the forest layer's names: the heap layout, traversal
and structure statistics (`bartz.forest.heaps`, which describes the
layout), the evaluation of a trace of forests (`bartz.forest.trace`), and
`evaluate_trace`, the array-level entry of the prediction pipeline
(`bartz.forest.predict`).
"""

import jax
import numpy as np
from jax import numpy as jnp

from bartz.forest import predict as _pipeline
from bartz.forest.heaps import (
    MAX_SUPPORTED_DEPTH,
    TreeHeaps,
    evaluate_forest,
    forest_depth,
    forest_num_leaves,
    heap_depth,
    is_internal,
    is_leaf,
    is_nog,
    node_depths,
    traverse_forest,
    var_count,
    var_count_scatter,
)
from bartz.forest.trace import (
    DEFAULT_MAX_MEMORY,
    LINEAR_LINKS,
    LINKS,
    batch_points,
    compress_trace,
    trace_sums,
)

__all__ = [
    'DEFAULT_MAX_MEMORY',
    'LINEAR_LINKS',
    'MAX_SUPPORTED_DEPTH',
    'TreeHeaps',
    'batch_points',
    'compress_trace',
    'evaluate_forest',
    'evaluate_trace',
    'forest_depth',
    'forest_num_leaves',
    'heap_depth',
    'is_internal',
    'is_leaf',
    'is_nog',
    'node_depths',
    'prepare_evaluate_trace',
    'trace_sums',
    'traverse_forest',
    'var_count',
    'var_count_scatter',
]


def evaluate_trace(
    X: jax.Array,
    trace: TreeHeaps,
    *,
    kind: str = 'draws',
    max_memory: int = DEFAULT_MAX_MEMORY,
    link: str | None = None,
    link_params: tuple = (),
) -> jax.Array:
    """Evaluate every saved forest of a trace at every point.

    Consecutive posterior draws share most tree structures (only the leaf
    values change at every draw), so the leaf of each point in each tree is
    carried from one draw to the next and only updated where the tree
    changed: one comparison per point for a single grow or prune, a fresh
    traversal otherwise. For the mean with a linear link (None or
    ``'affine'``) of a concrete trace, a run of draws in which a tree keeps
    its structure costs one step instead of one per draw (see
    `compress_trace`). This is the array-level entry of the prediction
    pipeline, `bartz.forest.predict`, on one device.

    Parameters
    ----------
    X
        Binned predictors, shape ``(p, n)``.
    trace
        Forests with a leading draws axis: ``var_tree (ndraws, m, H/2)``, ...
    kind
        ``'draws'``: return ``(ndraws, n)``; ``'mean'``: return the mean
        over draws, ``(n,)``, without materialising the draws.
    max_memory
        Approximate bound in bytes on the memory used at once by the batched
        inputs, outputs and temporaries (not counting `X` and the trace
        themselves, nor the full output). Points are processed in batches
        that respect it, through `bartz.jaxext.autobatch` (and of at most
        about 4 MiB of traversal temporaries, which keeps them in cache;
        see `bartz.forest.predict.batch_plan`).
    link
        Applied to each draw's sum of trees ``f`` before it is returned or
        averaged: None (identity), ``'affine'`` (``offset + scale * f``, with
        ``link_params = (offset, scale)``), or ``'probit'`` (``Phi(offset +
        f)``, with ``link_params = (offset,)``), or ``'logit'`` (``1 / (1 +
        exp(-offset - f))``, with ``link_params = (offset,)``).
    link_params
        Parameters of the link, as arrays or floats.

    Returns
    -------
    ``(ndraws, n)`` or ``(n,)`` float32.
    """
    if kind not in ('draws', 'mean'):
        msg = f"kind must be 'draws' or 'mean', got {kind!r}"
        raise ValueError(msg)
    if link not in LINKS:
        msg = f'link must be one of {LINKS}, got {link!r}'
        raise ValueError(msg)
    concrete = not any(isinstance(a, jax.core.Tracer) for a in trace)
    plan = _pipeline.make_plan(
        kind, link=link, ndraws=trace.leaf_tree.shape[0], max_memory=max_memory, concrete=concrete
    )
    n = X.shape[1]
    length = _pipeline.padded_length(plan, X.shape, X.dtype.itemsize, trace.leaf_tree.shape[1])
    if length > n:  # whole aligned batches (`bartz.forest.predict.padded_points`)
        pad = ((0, 0), (0, length - n))
        X = np.pad(X, pad) if isinstance(X, np.ndarray) else jnp.pad(X, pad)
    if plan.compressed:
        trace = _pipeline.compressed_trace(trace)
    out = _pipeline.runner(plan)(X, None, None, trace, _float32_params(link_params), None, None)
    return out if length == n else out[..., :n]


def _float32_params(link_params) -> tuple:
    # numpy scalars, not eager jnp conversions (each would compile a program)
    return tuple(v.astype(jnp.float32) if isinstance(v, jax.Array) else np.float32(v) for v in link_params)


def prepare_evaluate_trace(
    X, trace: TreeHeaps, *, max_memory: int = DEFAULT_MAX_MEMORY, link=None, link_params=()
) -> bool:
    """Load or compile the program of ``evaluate_trace(X, trace, kind='draws',
    ...)`` without running it, where `X` and the fields of `trace` may be
    `jax.ShapeDtypeStruct` (with the shardings the arrays will have), so
    that it can be compiled on another thread while the sampler runs
    (`bartz.gbart` does it for ``x_test``, which `bartz.api.predict`
    evaluates with the same program). Returns whether the program is
    ready (False when the compiled programs are not kept,
    `bartz._compile.programs`: then the call compiles as usual)."""
    plan = _pipeline.make_plan('draws', link=link, ndraws=trace.leaf_tree.shape[0], max_memory=max_memory)
    length = _pipeline.padded_length(plan, X.shape, X.dtype.itemsize, trace.leaf_tree.shape[1])
    X = jax.ShapeDtypeStruct((X.shape[0], length), X.dtype, sharding=getattr(X, 'sharding', None))
    return _pipeline.runner(plan).prepare(X, None, None, trace, _float32_params(link_params), None, None)
