"""The prediction pipeline, device side: a trace of forests at binned points.

Every prediction of bartz runs through this module: ``x_test`` during
`bartz.gbart` (``yhat_test``; ``yhat_train_mean`` without saved draws),
`bartz.BARTFit.predict` and ``predict_chunks``, partial dependence and the
array-level `bartz.grove.evaluate_trace`. One frozen `Plan` says what to
compute; the program is the same on one device and, per device, on a mesh:

- points are cut into batches (`bartz.jaxext.autobatch`) of `batch_plan`
  points, the one alignment rule: within the memory budget and the CPU
  cache, a multiple of `ALIGN`; `padded_length` pads a set of points to
  whole batches on every device;
- within a batch, `bartz.forest.trace.trace_sums` scans the draws, and the
  draws are reduced to the summary (mean, sd, quantiles) inside the batch,
  so they are never all materialised; predictive draws add the noise of a
  new observation first;
- the mean of a linear link is computed over the compressed trace
  (`compressed_trace`), where a run of draws in which a tree keeps its
  structure costs one traversal.

The host side (reading and binning new rows, the data's units, the output
arrays) is `bartz.api.predict`.
"""

import functools
import math
import weakref
from typing import NamedTuple

import jax
import numpy as np
from jax import numpy as jnp
from jax import random
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from bartz._compile import programs as _programs
from bartz.forest import trace as traces
from bartz.forest.heaps import TreeHeaps
from bartz.jaxext import autobatch

__all__ = [
    'ALIGN',
    'KINDS',
    'Plan',
    'batch_plan',
    'compressed_trace',
    'make_plan',
    'padded_length',
    'padded_points',
    'quantile_plan',
    'run',
    'run_padded',
    'runner',
    'sort_draws',
    'summarize_draws',
]

KINDS = ('draws', 'mean', 'sd', 'quantiles')

# Batches of points are a multiple of this: an odd batch size leaves XLA's
# vectorised loops with scalar remainders, slower per point (jaxlib 0.10.2, CPU).
ALIGN = 64

# the mesh axes the points are split over (`bartz.sharding`)
_POINT_AXES = ('chains', 'data')


class Plan(NamedTuple):
    """What a prediction computes: the options that shape its program (hashable)."""

    kind: str  # one of KINDS
    q: tuple | None  # probabilities of kind='quantiles'
    link: str | None  # of `bartz.forest.trace.apply_link`, applied to each draw
    ndraws: int  # draws of the fit (a compressed trace has fewer steps)
    compressed: bool  # the trace is compressed: the mean of a linear link
    predictive: bool  # draws of a new observation: f plus its noise
    max_memory: int  # bytes of device temporaries of one batch of points


def make_plan(kind, *, link, ndraws, q=None, predictive=False, max_memory=traces.DEFAULT_MAX_MEMORY, concrete=True):
    """The `Plan` of a prediction; the mean of a linear link of a `concrete`
    trace (not traced) of several draws is computed over the compressed trace."""
    compressed = kind == 'mean' and not predictive and link in traces.LINEAR_LINKS and ndraws > 1 and concrete
    return Plan(kind, q, link, int(ndraws), compressed, bool(predictive), int(max_memory))


# ---------------------------------------------------------------- summaries


def quantile_plan(q: tuple, ndraws: int) -> tuple:
    """For each probability, ``(lo, hi, t)``: the quantile is the linear
    interpolation of the sorted draws ``lo`` and ``hi`` at ``t``, as
    ``numpy.quantile``'s default ('linear', R's type 7)."""
    plan = []
    for v in q:
        h = (ndraws - 1) * v
        lo = math.floor(h)
        plan.append((lo, min(lo + 1, ndraws - 1), h - lo))
    return tuple(plan)


# Points sorted at once by the sorting network: their draws stay in cache.
_SORT_POINTS = 64


def sort_draws(draws):
    """Sort ``(ndraws, n)`` draws along the draws, with a bitonic sorting network.

    XLA's sort on CPU calls a comparator per comparison (jaxlib 0.10.2);
    the network is a fixed sequence of elementwise minima and maxima over
    the whole array, which vectorises. Draws are padded with ``+inf`` to a power of two, and
    points are sorted `_SORT_POINTS` at a time so that their draws stay in
    cache.
    """
    ndraws, n = draws.shape
    if ndraws <= 1 or n == 0:
        return draws
    size = 1 << (ndraws - 1).bit_length()
    chunk = min(n, _SORT_POINTS)
    npad = -(-n // chunk) * chunk
    x = jnp.pad(draws, ((0, size - ndraws), (0, npad - n)), constant_values=jnp.inf)
    x = x.reshape(size, npad // chunk, chunk).transpose(1, 0, 2)  # (chunks, size, chunk)
    x = jax.lax.map(functools.partial(_bitonic_network, size=size, chunk=chunk), x)
    return x.transpose(1, 0, 2).reshape(size, npad)[:ndraws, :n]


def _bitonic_network(x, *, size, chunk):
    """Sort the ``(size, chunk)`` block `x` along its first axis."""
    k = 2
    while k <= size:
        j = k // 2
        while j >= 1:
            blocks = x.reshape(size // (2 * j), 2, j, chunk)
            a, b = blocks[:, 0], blocks[:, 1]
            lo, hi = jnp.minimum(a, b), jnp.maximum(a, b)
            # ascending where bit k of the element index is 0 (constant over a block of 2j)
            ascending = ((np.arange(size // (2 * j)) * 2 * j) & k) == 0
            ascending = ascending[:, None, None]
            first = jnp.where(ascending, lo, hi)
            second = jnp.where(ascending, hi, lo)
            x = jnp.stack([first, second], axis=1).reshape(size, chunk)
            j //= 2
        k *= 2
    return x


def summarize_draws(draws, kind, q=None):
    """Reduce ``(ndraws, n)`` draws along the draws to ``kind``.

    ``'draws'``: unchanged; ``'mean'``: ``(n,)``; ``'sd'``: ``(n,)``, with
    ``ddof=1`` as R's ``sd`` (NaN with one draw); ``'quantiles'``:
    ``(len(q), n)``, equal to ``numpy.quantile(draws, q, axis=0)`` up to
    float rounding (same interpolation, same formula).
    """
    ndraws = draws.shape[0]
    if kind == 'draws':
        return draws
    if kind == 'mean':
        return jnp.mean(draws, axis=0)
    if kind == 'sd':
        if ndraws <= 1:
            return jnp.full(draws.shape[1:], jnp.nan, draws.dtype)
        centred = draws - jnp.mean(draws, axis=0)
        return jnp.sqrt(jnp.sum(centred * centred, axis=0) / (ndraws - 1))
    if kind == 'quantiles':
        ordered = sort_draws(draws)
        rows = []
        for lo, hi, t in quantile_plan(q, ndraws):
            a, b = ordered[lo], ordered[hi]
            diff = b - a
            # numpy's _lerp: from the nearer end, so that t = 1 gives b exactly
            rows.append(a + diff * t if t < 0.5 else b - diff * (1 - t))
        return jnp.stack(rows)
    msg = f'unknown kind {kind!r}'
    raise ValueError(msg)


# ---------------------------------------------------------------- batches


def out_axis(plan: Plan) -> int:
    """The points axis of the result of `plan`."""
    return 1 if plan.kind in ('draws', 'quantiles') else 0


def out_rows(plan: Plan) -> int | None:
    """Rows of the result of `plan` per point (None: one value per point)."""
    return {'draws': plan.ndraws, 'quantiles': len(plan.q or ())}.get(plan.kind)


def batch_plan(plan: Plan, p: int, itemsize: int, num_trees: int) -> tuple[int, int]:
    """Points per device batch and bytes of inputs and outputs per point.

    As many points as the memory budget and the CPU cache allow
    (`bartz.forest.trace.batch_points`), rounded down to a multiple of
    `ALIGN` when there are at least that many.
    """
    ndraws = plan.ndraws
    if plan.compressed:
        rows, draw_temp = 1, 0
    else:
        rows = out_rows(plan) or 1
        # the batch's draws, their noise and their sorted copy
        draw_temp = 4 * ndraws * (3 if plan.predictive or plan.kind == 'quantiles' else 1)
    io_per_point = p * itemsize + 8 * plan.predictive + 4 * rows
    points = traces.batch_points(num_trees, io_per_point, draw_temp, plan.max_memory)
    if points >= ALIGN:
        points -= points % ALIGN
    return points, io_per_point


def padded_points(length: int, batch: int, ndev: int) -> int:
    """Padded number of `length` points: a multiple of `batch` per device,
    or of `ALIGN` if one batch holds them all, so that every device batch
    has the same, aligned, size."""
    per_device = -(-length // ndev)
    unit = batch if per_device > batch else min(ALIGN, batch)
    return ndev * (-(-per_device // unit) * unit)


def padded_length(plan: Plan, X_shape, itemsize: int, num_trees: int, ndev: int = 1) -> int:
    """`padded_points` of the binned points of shape `X_shape` (``(p, n)``) under `plan`."""
    batch, _ = batch_plan(plan, X_shape[0], itemsize, num_trees)
    return padded_points(X_shape[1], batch, ndev)


# ---------------------------------------------------------------- the program


def _device_kernel(X, rows, w, trace, link_params, sigma, key, plan):
    """The result of `plan` at the binned points `X` (``(p, n)``).

    With ``plan.predictive``, `rows` (``(n,)`` uint32) numbers the points
    for the noise of new observations, `w` (``(n,)``, or None for all 1)
    are their weights and `sigma` ``(ndraws,)`` the error sd in the trees'
    units; otherwise all three are None. They come from the host, so that
    the only device arrays that grow with ``n`` are inputs and output.
    """
    p, _ = X.shape
    num_trees = trace.leaf_tree.shape[1]
    points, io_per_point = batch_plan(plan, p, X.dtype.itemsize, num_trees)
    batched = autobatch(
        functools.partial(_per_batch, plan=plan),
        max(1, points * io_per_point),
        in_axes=(1, 0, 0, None, None, None, None),
        out_axes=out_axis(plan),
        warn_on_overflow=False,
    )
    return batched(X, rows, w, trace, link_params, sigma, key)


def _per_batch(X, rows, w, trace, link_params, sigma, key, *, plan):
    """`_device_kernel` on one batch of points."""
    ndraws = plan.ndraws
    if plan.compressed:
        f = traces.trace_sums(X, trace, kind='sum') / ndraws
        return traces.apply_link(f, plan.link, link_params)
    if plan.kind == 'mean' and not plan.predictive:
        # nonlinear link: sum of the draws in the scan carry, no (ndraws, batch) array
        s = traces.trace_sums(X, trace, kind='sum', link=plan.link, link_params=link_params)
        return s / ndraws
    draws = traces.trace_sums(X, trace, kind='draws', link=plan.link, link_params=link_params)
    if plan.predictive:
        noise = jax.vmap(lambda r: random.normal(random.fold_in(key, r), (ndraws,)), out_axes=1)(rows)
        scale = sigma[:, None] if w is None else sigma[:, None] * w[None, :]
        draws = draws + scale * noise
    return summarize_draws(draws, plan.kind, plan.q)


@functools.cache
def _single_runner(plan: Plan):
    """The one-device program of `plan`, which a new process loads whole
    from the compilation cache (`bartz._compile.programs`) instead of
    tracing it; traced inputs go to the plain jit."""
    return _programs.persistent_jit(_device_kernel, 'predict', plan=plan)


@functools.cache
def _mesh_runner(mesh: Mesh, plan: Plan):
    """The program of `plan` with the points split over all devices of
    `mesh`: each device runs the one-device kernel on its points, the trees
    replicated."""
    P = PartitionSpec
    out_spec = P(None, _POINT_AXES) if out_axis(plan) == 1 else P(_POINT_AXES)
    f = jax.shard_map(
        functools.partial(_device_kernel, plan=plan),
        mesh=mesh,
        in_specs=(P(None, _POINT_AXES), P(_POINT_AXES), P(_POINT_AXES), P(), P(), P(), P()),
        out_specs=out_spec,
        check_vma=False,
    )
    return jax.jit(f)


def _multi(mesh: Mesh | None) -> Mesh | None:
    return mesh if mesh is not None and mesh.devices.size > 1 else None


def runner(plan: Plan, mesh: Mesh | None = None):
    """The program of `plan`: ``f(X, rows, w, trace, link_params, sigma, key)``
    (see `_device_kernel`), on one device or, with a mesh of several devices,
    split over them (then the number of points must be a multiple of the
    number of devices)."""
    mesh = _multi(mesh)
    return _single_runner(plan) if mesh is None else _mesh_runner(mesh, plan)


def run(X, trace: TreeHeaps, plan: Plan, link_params=(), *, rows=None, w=None, sigma=None, key=None, mesh=None):
    """Start the program of `plan` at the binned points `X` (``(p, n)``, a
    host array, ``n`` from `padded_length`); returns the device result,
    without waiting for it.

    `trace` is the fit's (compressed here if the plan says so); `rows`, `w`,
    `sigma`, `key` as in `_device_kernel`; on a `mesh` of several devices
    the points and their `rows` and `w` are split over them.
    """
    mesh = _multi(mesh)
    if plan.compressed:
        trace = compressed_trace(trace)
    if mesh is None:
        put = put_points = jax.device_put
    else:
        points = NamedSharding(mesh, PartitionSpec(_POINT_AXES))

        def put(a):
            return jax.device_put(a, NamedSharding(mesh, PartitionSpec(None, _POINT_AXES)))

        def put_points(a):
            return None if a is None else jax.device_put(a, points)

    return runner(plan, mesh)(put(X), put_points(rows), put_points(w), trace, link_params, sigma, key)


def run_padded(X, trace: TreeHeaps, plan: Plan, link_params=(), *, mesh=None):
    """`run` at the binned points `X` (``(p, n)`` host array, any ``n``),
    padded here to `padded_length` for the devices of `mesh`; the first
    ``n`` points of the device result are those of `X`."""
    X = np.asarray(X)
    ndev = 1 if _multi(mesh) is None else mesh.devices.size
    length = padded_length(plan, X.shape, X.dtype.itemsize, trace.leaf_tree.shape[1], ndev)
    X = np.pad(X, ((0, 0), (0, length - X.shape[1])))
    return run(X, trace, plan, link_params, mesh=mesh)


# A compressed trace is computed once per trace, and forgotten with it: the
# cache holds weak references to the trace's leaf array.
_COMPRESSED = []
_COMPRESSED_CACHE_SIZE = 4


def compressed_trace(trace: TreeHeaps) -> TreeHeaps:
    """`bartz.forest.trace.compress_trace` of `trace` on the device, kept
    while `trace` lives (the last few traces)."""
    _COMPRESSED[:] = [(ref, c) for ref, c in _COMPRESSED if ref() is not None]
    for ref, compressed in _COMPRESSED:
        if ref() is trace.leaf_tree:
            return compressed
    compressed = jax.device_put(traces.compress_trace(trace))
    try:
        ref = weakref.ref(trace.leaf_tree)
    except TypeError:  # not weakly referenceable: no caching
        return compressed
    _COMPRESSED.insert(0, (ref, compressed))
    del _COMPRESSED[_COMPRESSED_CACHE_SIZE:]
    return compressed
