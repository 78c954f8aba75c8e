"""Prediction at any scale: posterior summaries at new points in bounded memory.

`predict_rows` evaluates a trace of forests (`bartz.grove.TreeHeaps`) at new
points and returns the draws or a summary of them, in memory that does not
grow with the number of rows times the number of draws:

- rows are read from the input (a numpy array, a numpy memmap, a DataFrame)
  a host chunk at a time, converted to float and binned chunk by chunk, so
  host memory holds one chunk of floats, never the whole input as float64;
- on the device, each host chunk is cut into batches of points sized to the
  CPU cache and to the memory budget (`bartz.jaxext.autobatch`); the draws
  of one batch are reduced to the summary inside the batch (mean, sd,
  quantiles), so they are never all materialised;
- the mean of a linear link is computed over a compressed trace, where a
  run of draws in which a tree keeps its structure costs one traversal
  (`bartz.grove.compress_trace`).

The front end (`bartz.BARTFit.predict`, `bartz.BARTFit.predict_chunks`)
validates the arguments and calls `predict_rows`; this module does no
validation of its own beyond what shapes require.
"""

import functools
import math
import mmap
import numbers
import weakref
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import jax
import numpy as np
import pandas as pd
import scipy.sparse
from jax import numpy as jnp
from jax import random
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from bartz._compile import programs as _programs
from bartz.prep import sizes as buckets
from bartz.forest import grove
from bartz.prep import cutpoints as prepcovars
from bartz.prep import priors
from bartz.run import sharding
from bartz.prep import encoding as encoding_mod
from bartz.jaxext import autobatch

__all__ = [
    'KINDS',
    'Binning',
    'Model',
    'check_kind',
    'check_w_new',
    'iter_row_chunks',
    'predict_rows',
    'quantile_plan',
    'summarize_draws',
    'to_data_units',
]

KINDS = ('draws', 'mean', 'sd', 'quantiles')

# Host memory for one chunk of rows (float64 copy, bins, output); larger
# chunks only cost memory: the device work is cut into cache-sized batches.
HOST_CHUNK_BYTES = 64 * 2**20


class Binning(NamedTuple):
    """How new rows are checked and binned like the training predictors."""

    p: int  # number of columns of x_train
    columns: list | None  # DataFrame column names of x_train, or None
    encoding: 'encoding_mod.Encoding'  # columns of x_train -> model columns (dummies, missing values)
    kept: np.ndarray  # (p_model,) bool: model columns kept by rm_const
    splits: np.ndarray  # (p_kept, max_K) float32 cut-points, padded with +inf


class Model(NamedTuple):
    """What prediction needs of a fit: the trees and how f maps to the output."""

    trace: grove.TreeHeaps  # (ndpost, m, ...) device arrays
    link: str  # 'affine' (continuous), 'probit' or 'logit' (binary)
    link_params: tuple  # (offset, scale) or (offset,)
    sigma: np.ndarray | None  # (ndpost,) error sd per draw (continuous), data units
    mesh: Mesh | None  # points are split over its devices if it has several


# ---------------------------------------------------------------- argument checks


def check_kind(kind, q):
    """Check `kind` and `q`; return ``(kind, q)`` with `q` a tuple of floats or None.

    A float `q` gives a 1-tuple; the result of ``kind='quantiles'`` has one
    row per entry of `q` either way.
    """
    if not isinstance(kind, str) or kind not in KINDS:
        msg = f'kind must be one of {KINDS}, got {kind!r}'
        raise ValueError(msg)
    if kind != 'quantiles':
        if q is not None:
            msg = f"q is for kind='quantiles' only, got q={q!r} with kind={kind!r}"
            raise ValueError(msg)
        return kind, None
    if q is None:
        msg = "kind='quantiles' needs q, a probability or a sequence of probabilities"
        raise ValueError(msg)
    values = [q] if isinstance(q, numbers.Real) or np.ndim(q) == 0 else list(np.asarray(q).ravel())
    if not values:
        msg = 'q must contain at least one probability, got an empty sequence'
        raise ValueError(msg)
    out = []
    for v in values:
        if isinstance(v, bool | np.bool_) or not isinstance(v, numbers.Real | np.integer | np.floating):
            msg = f'q must contain real numbers in [0, 1], got {v!r}'
            raise TypeError(msg)
        v = float(v)
        if not 0 <= v <= 1:  # also NaN
            msg = f'q must contain probabilities in [0, 1], got {v!r}'
            raise ValueError(msg)
        out.append(v)
    return kind, tuple(out)


def check_w_new(w_new, nrows):
    """Check the weights of new observations: None, a positive number, or ``(nrows,)`` positive."""
    if w_new is None:
        return None
    if isinstance(w_new, numbers.Real) and not isinstance(w_new, bool):
        w = np.full(nrows, float(w_new))
    else:
        if isinstance(w_new, pd.Series):
            w_new = w_new.to_numpy()
        try:
            w = np.asarray(w_new, dtype=np.float64)
        except (TypeError, ValueError) as e:
            msg = f'w_new must be numeric, got {w_new!r}'
            raise TypeError(msg) from e
        if w.shape != (nrows,):
            msg = f'w_new must have shape ({nrows},), one weight per row of x_new, got shape {w.shape}'
            raise ValueError(msg)
    if not np.all(np.isfinite(w) & (w > 0)):
        bad = w[~(np.isfinite(w) & (w > 0))][0]
        msg = f'w_new must be positive and finite, got {bad}'
        raise ValueError(msg)
    return w


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

    XLA's sort on CPU calls a comparator per comparison (about 100 ns per
    element here); the network is a fixed sequence of elementwise minima and
    maxima over the whole array, which vectorises. Draws are padded with
    ``+inf`` to a power of two, and points are sorted `_SORT_POINTS` at a time
    so that their draws stay in cache.
    """
    ndraws, n = draws.shape
    if ndraws <= 1 or n == 0:
        return draws
    size = 1 << (ndraws - 1).bit_length()
    chunk = min(n, _SORT_POINTS)
    npad = -(-n // chunk) * chunk
    x = jnp.pad(draws, ((0, size - ndraws), (0, npad - n)), constant_values=jnp.inf)
    x = x.reshape(size, npad // chunk, chunk).transpose(1, 0, 2)  # (chunks, size, chunk)

    def network(x):
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

    x = jax.lax.map(network, x)
    return x.transpose(1, 0, 2).reshape(size, npad)[:ndraws, :n]


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
        centred = draws - jnp.mean(draws, axis=0)
        return jnp.sqrt(jnp.sum(centred * centred, axis=0) / (ndraws - 1)) if ndraws > 1 else jnp.full(
            draws.shape[1:], jnp.nan, draws.dtype
        )
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


# ---------------------------------------------------------------- device kernel


class _Static(NamedTuple):
    """Options that shape the compiled program (hashable)."""

    kind: str
    q: tuple | None
    link: str
    ndraws: int  # draws of the fit (the compressed trace has fewer steps)
    compressed: bool  # the trace is compressed: the mean of a linear link
    predictive: bool
    max_memory: int


def _out_axis(static):
    return 1 if static.kind in ('draws', 'quantiles') else 0


# Batches of points are a multiple of this: an odd batch size leaves the
# vectorised loops with remainders, which costs 1.6 times per point.
_ALIGN = 64


def _batch_plan(static, p, itemsize, num_trees):
    """Points per device batch and bytes of inputs and outputs per point."""
    ndraws = static.ndraws
    if static.compressed:
        out_rows, draw_temp = 1, 0
    else:
        out_rows = {'draws': ndraws, 'quantiles': len(static.q or ())}.get(static.kind, 1)
        # the batch's draws, their noise and their sorted copy
        draw_temp = 4 * ndraws * (3 if static.predictive or static.kind == 'quantiles' else 1)
    io_per_point = p * itemsize + 8 * static.predictive + 4 * out_rows
    points = grove.batch_points(num_trees, io_per_point, draw_temp, static.max_memory)
    if points >= _ALIGN:
        points -= points % _ALIGN
    return points, io_per_point


def padded_points(length, batch, ndev):
    """Padded number of points of a host chunk of `length` (already on the
    size ladder): a multiple of `batch` per device, or of `_ALIGN` if one
    batch holds them all, so that every device batch has the same, aligned,
    size."""
    per_device = -(-length // ndev)
    unit = batch if per_device > batch else min(_ALIGN, batch)
    return ndev * (-(-per_device // unit) * unit)


def _device_kernel(X, rows, w, trace, link_params, sigma, key, static):
    """Summaries at the binned points `X` (``(p, n)``).

    With ``static.predictive``, `rows` (``(n,)`` uint32) numbers the points
    for the noise of new observations and `w` (``(n,)``, or None for all 1)
    are their weights; otherwise both are None. They come from the host, so
    that the only device arrays that grow with ``n`` are inputs and output.
    """
    p, n = X.shape
    num_trees = trace.leaf_tree.shape[1]
    ndraws = static.ndraws
    points, io_per_point = _batch_plan(static, p, X.dtype.itemsize, num_trees)

    def per_batch(X, rows, w, trace, link_params, sigma, key):
        if static.compressed:
            f = grove.trace_sums(X, trace, kind='sum') / ndraws
            offset, scale = link_params
            return offset + scale * f
        if static.kind == 'mean' and not static.predictive:
            # nonlinear link: sum of the draws in the scan carry, no (ndraws, batch) array
            s = grove.trace_sums(X, trace, kind='sum', link=static.link, link_params=link_params)
            return s / ndraws
        draws = grove.trace_sums(X, trace, kind='draws', link=static.link, link_params=link_params)
        if static.predictive:
            noise = jax.vmap(lambda r: random.normal(random.fold_in(key, r), (ndraws,)), out_axes=1)(rows)
            scale = sigma[:, None] if w is None else sigma[:, None] * w[None, :]
            draws = draws + scale * noise
        return summarize_draws(draws, static.kind, static.q)

    batched = autobatch(
        per_batch,
        max(1, points * io_per_point),
        in_axes=(1, 0, 0, None, None, None, None),
        out_axes=_out_axis(static),
        warn_on_overflow=False,
    )
    return batched(X, rows, w, trace, link_params, sigma, key)


@functools.cache
def _single_runner(static: _Static):
    """The one-device program for `static`, which a new process loads whole
    from the compilation cache (`bartz._compile.programs`) instead of tracing it."""
    return _programs.persistent_jit(_device_kernel, 'predict', static=static)


@functools.cache
def _sharded_runner(mesh: Mesh, static: _Static):
    """One jitted program per mesh and options: points split over all devices."""
    P = PartitionSpec
    axes = ('chains', 'data')
    out_spec = P(None, axes) if _out_axis(static) == 1 else P(axes)

    def kernel(X, rows, w, trace, link_params, sigma, key):
        return _device_kernel(X, rows, w, trace, link_params, sigma, key, static)

    f = jax.shard_map(
        kernel,
        mesh=mesh,
        in_specs=(P(None, axes), P(axes), P(axes), P(), P(), P(), P()),
        out_specs=out_spec,
        check_vma=False,
    )

    return jax.jit(f)


# A compressed trace is computed once per trace, and forgotten with it: the
# cache holds weak references to the trace's leaf array.
_COMPRESSED = []
_COMPRESSED_CACHE_SIZE = 4


def _compressed(trace):
    _COMPRESSED[:] = [(ref, c) for ref, c in _COMPRESSED if ref() is not None]
    for ref, compressed in _COMPRESSED:
        if ref() is trace.leaf_tree:
            return compressed
    compressed = jax.device_put(grove.compress_trace(trace))
    try:
        ref = weakref.ref(trace.leaf_tree)
    except TypeError:  # not weakly referenceable (e.g. numpy): no caching
        return compressed
    _COMPRESSED.insert(0, (ref, compressed))
    del _COMPRESSED[_COMPRESSED_CACHE_SIZE:]
    return compressed


# ---------------------------------------------------------------- host side


def _page_releaser(x):
    """For a numpy memmap opened on a whole file (``np.memmap``, ``np.load(...,
    mmap_mode='r')``), a function ``release(a, b)`` that tells the kernel that
    rows ``a:b`` are no longer needed: the pages leave the process's resident
    memory (they stay in the page cache), so that the RSS does not grow with
    the file. A no-op for anything else."""
    mm = getattr(x, '_mmap', None)
    if (
        not isinstance(x, np.memmap)
        or mm is None
        or not hasattr(mm, 'madvise')
        or not hasattr(mmap, 'MADV_DONTNEED')
        or not x.flags.c_contiguous
        or x.size == 0
    ):
        return lambda a, b: None
    # where x's data starts in the mapping (np.memmap maps from the allocation
    # granularity below its offset); only trust it if the sizes agree
    start = int(x.offset) % mmap.ALLOCATIONGRANULARITY
    if start + x.nbytes > len(mm):
        return lambda a, b: None
    row_bytes = x.nbytes // x.shape[0]
    page = mmap.PAGESIZE

    def release(a, b):
        lo = start + a * row_bytes
        hi = start + b * row_bytes
        lo -= lo % page
        try:
            mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
        except (OSError, ValueError):
            pass

    return release


def iter_row_chunks(name: str, x, binning: Binning, rows_per_chunk: int) -> Iterator[tuple[int, np.ndarray]]:
    """Check `x` and yield ``(first row, (r, p_model) float64 model columns)``
    chunks, encoded as ``x_train`` was (`bartz.encoding`: categorical
    dummies, missing values).

    `x` is an ``(n, p)`` numpy array (also a memmap: only the rows of the
    current chunk are read and converted), a DataFrame with the training
    columns (matched by name; categorical levels by value), a Series, or
    anything `numpy.asarray` takes (a masked array: masked entries are
    missing). The whole input is checked (type, columns) before the first
    chunk; values are checked chunk by chunk. A SciPy sparse matrix is made
    dense one chunk at a time.
    """
    if x is None:
        msg = f'{name} must be an array or DataFrame, got None'
        raise TypeError(msg)
    x = encoding_mod.row_as_frame(x, binning.encoding)
    if isinstance(x, pd.DataFrame | pd.Series):  # (a Series left: one column)
        # the columns and their kinds, checked on no rows before any work
        binning.encoding.transform(x.iloc[:0], name)

        def get(a, b):
            return x.iloc[a:b]

    elif scipy.sparse.issparse(x):
        # made dense chunk by chunk
        x = scipy.sparse.csr_array(x)
        if x.shape[1] != binning.p:
            msg = f'{name} must have {binning.p} columns like x_train, got {x.shape[1]}'
            raise ValueError(msg)
        if np.iscomplexobj(x.data) or not (np.issubdtype(x.dtype, np.number) or x.dtype == bool):
            msg = f'{name} must be real and numeric, got a sparse array of dtype {x.dtype}'
            raise TypeError(msg)

        def get(a, b):
            return x[a:b].toarray().astype(np.float64)

    else:
        if not isinstance(x, np.ndarray):
            try:
                x = np.asarray(x)
            except Exception as e:
                msg = f'{name} could not be converted to an array: {e}'
                raise TypeError(msg) from e
        x = encoding_mod.numbers_from_object(x)
        if x.dtype == object or not (np.issubdtype(x.dtype, np.number) or x.dtype == bool):
            msg = f'{name} must be numeric, got an array of dtype {x.dtype} (categorical columns need a DataFrame)'
            raise TypeError(msg)
        if np.iscomplexobj(x):
            msg = f'{name} must be real, got complex values'
            raise TypeError(msg)
        if x.ndim not in (1, 2):
            msg = f'{name} must be 2-dimensional (n, p), got shape {x.shape}'
            raise ValueError(msg)
        ncols = 1 if x.ndim == 1 else x.shape[1]
        if ncols != binning.p:
            raise ValueError(encoding_mod.columns_message(name, binning.p, ncols, x.ndim == 1))

        release = _page_releaser(x)

        def get(a, b):
            chunk = np.asarray(encoding_mod.masked_as_nan(x[a:b]), dtype=np.float64)
            release(a, b)
            return chunk[:, None] if chunk.ndim == 1 else chunk

    n = x.shape[0]
    for start in range(0, n, rows_per_chunk):
        label = name if start == 0 and n <= rows_per_chunk else f'{name} (rows from {start})'
        yield start, binning.encoding.transform(get(start, min(n, start + rows_per_chunk)), label)


def num_rows(x) -> int:
    """Number of rows of an input that `iter_row_chunks` accepts (0 if unknown)."""
    shape = getattr(x, 'shape', None)
    if shape is None:
        shape = np.shape(x) if x is not None else (0,)
    return int(shape[0]) if len(shape) else 0


def rows_per_chunk(p: int, out_bytes_per_row: int, host_bytes: int = HOST_CHUNK_BYTES) -> int:
    """Rows per host chunk: a length of the size ladder (`bartz.buckets`), so
    that all full chunks share one compiled program."""
    per_row = 8 * p + p + 8 + 2 * out_bytes_per_row  # float64 row, bins, index and weight, output (device + host)
    target = max(buckets.MIN_LENGTH, host_bytes // per_row)
    return buckets.ladder(target)[-1]


def _out_bytes_per_row(kind, q, ndraws):
    return 4 * {'draws': ndraws, 'quantiles': len(q or ())}.get(kind, 1)


def predict_rows(
    x,
    model: Model,
    binning: Binning,
    *,
    name: str = 'x_new',
    kind: str = 'draws',
    q: tuple | None = None,
    predictive: bool = False,
    w_new: np.ndarray | None = None,
    key: jax.Array | None = None,
    row_offset: int = 0,
    max_memory: int = grove.DEFAULT_MAX_MEMORY,
    host_bytes: int = HOST_CHUNK_BYTES,
) -> np.ndarray:
    """Evaluate the posterior at the rows of `x` and summarise it.

    Parameters
    ----------
    x
        ``(n, p)`` new predictors (see `iter_row_chunks`).
    model, binning
        The fit's trees and link, and how to bin new rows.
    name
        Name of `x` in error messages.
    kind, q
        As checked by `check_kind`.
    predictive
        Add to each draw ``d`` the noise ``N(0, sigma_d^2 w_i^2)`` of a new
        observation (``model.sigma`` must be given).
    w_new
        ``(n,)`` positive weights of the new observations, or None (all 1).
    key
        Random key of the noise; the noise of row ``i`` (counted from
        `row_offset`) is ``normal(fold_in(key, i), (ndraws,))``, the same
        whatever the chunking and the memory budget.
    row_offset
        Number of the first row of `x` (for the noise).
    max_memory
        Bytes of device temporaries of one batch of points (see
        `bartz.grove.evaluate_trace`).
    host_bytes
        Bytes of host memory for one chunk of rows.

    Returns
    -------
    numpy array: ``(ndraws, n)`` float32 for ``'draws'``; float64
    ``(len(q), n)`` for ``'quantiles'``, ``(n,)`` otherwise.
    """
    x = encoding_mod.row_as_frame(x, binning.encoding)  # (a row of a DataFrame)
    trace = model.trace
    ndraws = int(trace.leaf_tree.shape[0])
    compressed = kind == 'mean' and not predictive and model.link == 'affine' and ndraws > 1
    if compressed:
        trace = _compressed(trace)
    static = _Static(kind, q, model.link, ndraws, compressed, bool(predictive), int(max_memory))
    link_params = tuple(np.float32(v) for v in model.link_params)
    sigma = None if not predictive else np.asarray(model.sigma, np.float64)
    to_data = None
    if model.link == 'affine':
        # the device stays in the trees' standardised units (the same program:
        # the parameters are arguments); the host maps the results back, where
        # offset and scale near float32's limits neither underflow nor overflow
        offset, scale = (float(v) for v in model.link_params)
        to_data = functools.partial(to_data_units, offset=0.0 if kind == 'sd' else offset, scale=scale)
        link_params = (np.float32(0), np.float32(1))
        sigma = None if sigma is None else sigma / scale
    sigma = None if sigma is None else jnp.asarray(sigma.astype(np.float32))
    mesh = model.mesh if model.mesh is not None and model.mesh.devices.size > 1 else None
    ndev = 1 if mesh is None else mesh.devices.size

    n = num_rows(x)
    out_rows = {'draws': ndraws, 'quantiles': len(q or ())}.get(kind)
    # summaries over the draws in float64 (the draws stay float32: ndraws times n values)
    out = np.empty((n,) if out_rows is None else (out_rows, n), np.float32 if kind == 'draws' else np.float64)
    chunk_rows = rows_per_chunk(binning.encoding.num_model, _out_bytes_per_row(kind, q, ndraws), host_bytes)

    pending = None  # the previous chunk's result, fetched after the next chunk is binned
    for start, rows in iter_row_chunks(name, x, binning, chunk_rows):
        r = rows.shape[0]
        # (both axes padded to the size ladder: `bartz.buckets`)
        X = buckets.pad_predictors(prepcovars.bin_predictors_np(rows[:, binning.kept], binning.splits))
        del rows
        batch, _ = _batch_plan(static, X.shape[0], X.dtype.itemsize, int(trace.leaf_tree.shape[1]))
        length = padded_points(buckets.bucket_length(r, ndev), batch, ndev)
        X = np.pad(X, ((0, 0), (0, length - r)))
        rows_idx = w = None
        if predictive:
            rows_idx = np.arange(row_offset + start, row_offset + start + length, dtype=np.uint32)
            if w_new is not None:
                w = np.ones(length, np.float32)
                w[:r] = w_new[start : start + r]
        if mesh is None:
            put, put_points = jax.device_put, jax.device_put
        else:
            spec = NamedSharding(mesh, PartitionSpec(None, ('chains', 'data')))
            vspec = NamedSharding(mesh, PartitionSpec(('chains', 'data')))

            def put(a):
                return jax.device_put(a, spec)

            def put_points(a):
                return None if a is None else jax.device_put(a, vspec)

        args = (put(X), put_points(rows_idx), put_points(w), trace, link_params, sigma, key)
        result = _single_runner(static)(*args) if mesh is None else _sharded_runner(mesh, static)(*args)
        if pending is not None:
            _store(out, *pending, to_data)
        pending = (result, start, r)
    if pending is not None:
        _store(out, *pending, to_data)
    return out


def _store(out, result, start, r, to_data=None):
    part = out[..., start : start + r]
    part[...] = sharding.to_host(result)[..., :r]
    if to_data is not None:
        to_data(part)


def to_data_units(f: np.ndarray, offset: float, scale: float | None = None) -> np.ndarray:
    """``offset + scale * f`` (``offset + f`` without `scale`) in place in
    the host array `f`, in the arithmetic of its dtype; returns `f`.

    The trees work in standardised units; predictions come back to the
    data's units on the host, not on the device, where float32 offsets and
    scales below about 1e-38 may be flushed to zero, and where summaries
    could not be float64. Every result of a fit in the data's units goes
    through this function (`bartz.api.fit.package` too), so that the draws of
    ``yhat_test`` and of `bartz.BARTFit.predict` are the same bit for bit.
    """
    if scale is not None:
        np.multiply(f, scale, out=f)
    np.add(f, offset, out=f)
    return f


def predict_chunks(chunks: Iterable, model: Model, binning: Binning, **kwargs) -> Iterator[np.ndarray]:
    """`predict_rows` on each element of `chunks` in turn, one result per
    chunk; rows are numbered across chunks (for the noise), so the results
    are those of `predict_rows` on the concatenated chunks."""
    offset = kwargs.pop('row_offset', 0)
    w_chunks = kwargs.pop('w_chunks', None)
    w_iter = None if w_chunks is None else iter(w_chunks)
    for i, chunk in enumerate(chunks):
        chunk = encoding_mod.row_as_frame(chunk, binning.encoding)  # (counted as one row)
        w = None if w_iter is None else next(w_iter)
        yield predict_rows(chunk, model, binning, name=f'chunk {i}', row_offset=offset, w_new=w, **kwargs)
        offset += num_rows(chunk)


def from_fit(fit) -> tuple[Model, Binning]:
    """The `Model` and `Binning` of a `bartz.BARTFit`.

    The only place that reads the fit's attributes: ``type``, ``offset``,
    ``sigma_``, ``_scale``, ``_trace``, ``_mesh``, ``_p``, ``_columns``,
    ``_encoding``, ``_kept``, ``_splits``.
    """
    outcome = priors.OUTCOME_TYPES[fit.type]
    if outcome.binary:
        link, params, sigma = outcome.link, (fit.offset,), None
    else:
        link, params, sigma = outcome.link, (fit.offset, fit._scale), fit.sigma_  # noqa: SLF001
    model = Model(fit._trace, link, params, sigma, fit._mesh)  # noqa: SLF001
    binning = Binning(
        fit._p,  # noqa: SLF001
        fit._columns,  # noqa: SLF001
        fit._encoding,  # noqa: SLF001
        np.asarray(fit._kept),  # noqa: SLF001
        np.asarray(fit._splits.splits),  # noqa: SLF001
    )
    return model, binning
