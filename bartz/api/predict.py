"""Prediction at any scale, host side: new rows in, results in the data's units.

`predict_rows` evaluates a fit's trace of forests (`bartz.grove.TreeHeaps`)
at new points and returns the draws or a summary of them, in memory that
does not grow with the number of rows times the number of draws:

- rows are read from the input (a numpy array, a numpy memmap, a DataFrame)
  a host chunk at a time, converted to float and binned chunk by chunk, so
  host memory holds one chunk of floats, never the whole input as float64;
- each binned chunk goes to the prediction pipeline, `bartz.forest.predict`
  (batches of points sized to the CPU cache and to the memory budget, the
  draws of a batch reduced to the summary inside it, one device or a mesh);
- results come back to the host, where `to_data_units` maps the trees'
  standardised units to the data's.

`evaluate_binned` is the same pipeline at points binned already (``x_test``
during `bartz.gbart`, ``yhat_train_mean`` without saved draws). The front
end (`bartz.BARTFit.predict`, `bartz.BARTFit.predict_chunks`) validates the
arguments; this module does no validation of its own beyond what shapes
require.
"""

import functools
import mmap
import numbers
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import jax
import numpy as np
import pandas as pd
import scipy.sparse
from jax import numpy as jnp
from jax.sharding import Mesh

from bartz.forest import grove
from bartz.forest import predict as pipeline
from bartz.forest.predict import KINDS, quantile_plan, sort_draws, summarize_draws
from bartz.prep import cutpoints as prepcovars
from bartz.prep.checks import num_rows
from bartz.prep import encoding as encoding_mod
from bartz.prep import priors
from bartz.prep import sizes as buckets
from bartz.run import sharding

__all__ = [
    'KINDS',
    'Binning',
    'Model',
    'check_kind',
    'check_w_new',
    'evaluate_binned',
    'iter_row_chunks',
    'predict_rows',
    'quantile_plan',
    'sort_draws',
    'summarize_draws',
    'to_data_units',
]

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
        x, get = _sparse_rows(name, x, binning)
    else:
        x, get = _array_rows(name, x, binning)
    n = x.shape[0]
    for start in range(0, n, rows_per_chunk):
        label = name if start == 0 and n <= rows_per_chunk else f'{name} (rows from {start})'
        yield start, binning.encoding.transform(get(start, min(n, start + rows_per_chunk)), label)


def _sparse_rows(name, x, binning):
    """`x` checked as a SciPy sparse matrix, and ``get(a, b)``: rows ``a:b`` dense."""
    x = scipy.sparse.csr_array(x)
    if x.shape[1] != binning.p:
        msg = f'{name} must have {binning.p} columns like x_train, got {x.shape[1]}'
        raise ValueError(msg)
    if np.iscomplexobj(x.data) or not (np.issubdtype(x.dtype, np.number) or x.dtype == bool):
        msg = f'{name} must be real and numeric, got a sparse array of dtype {x.dtype}'
        raise TypeError(msg)

    def get(a, b):
        return x[a:b].toarray().astype(np.float64)

    return x, get


def _array_rows(name, x, binning):
    """`x` checked as an array, and ``get(a, b)``: rows ``a:b`` as float64
    ``(b - a, p)`` (the pages of a memmap released once read)."""
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

    return x, get


def rows_per_chunk(p: int, out_bytes_per_row: int, host_bytes: int = HOST_CHUNK_BYTES) -> int:
    """Rows per host chunk: a length of the size ladder (`bartz.buckets`), so
    that all full chunks share one compiled program."""
    per_row = 8 * p + p + 8 + 2 * out_bytes_per_row  # float64 row, bins, index and weight, output (device + host)
    target = max(buckets.MIN_LENGTH, host_bytes // per_row)
    return buckets.ladder(target)[-1]


class _Units(NamedTuple):
    """How the pipeline's results of a `Model` come back to the data's units."""

    plan: pipeline.Plan
    link_params: tuple  # float32 parameters of plan.link, on the device
    sigma: jax.Array | None  # (ndraws,) float32 error sd in the trees' units (predictive)
    to_data: functools.partial | None  # in place on the host result (continuous fits)


def _units(model: Model, kind, q, predictive, max_memory) -> _Units:
    """The plan of a prediction of `model`, and its units.

    A continuous fit stays in the trees' standardised units on the device
    (the same program for every fit: the parameters are arguments); the host
    maps the results back, where offsets and scales near float32's limits
    neither underflow nor overflow. The noise of a predictive draw is in
    standardised units too.
    """
    ndraws = int(model.trace.leaf_tree.shape[0])
    plan = pipeline.make_plan(
        kind, q=q, link=model.link, ndraws=ndraws, predictive=predictive, max_memory=max_memory
    )
    link_params = tuple(np.float32(v) for v in model.link_params)
    sigma = None if not predictive else np.asarray(model.sigma, np.float64)
    to_data = None
    if model.link == 'affine':
        offset, scale = (float(v) for v in model.link_params)
        to_data = functools.partial(to_data_units, offset=0.0 if kind == 'sd' else offset, scale=scale)
        link_params = (np.float32(0), np.float32(1))
        sigma = None if sigma is None else sigma / scale
    sigma = None if sigma is None else jnp.asarray(sigma.astype(np.float32))
    return _Units(plan, link_params, sigma, to_data)


def _num_devices(mesh: Mesh | None) -> int:
    return 1 if mesh is None else mesh.devices.size


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
    units = _units(model, kind, q, predictive, max_memory)
    rows = pipeline.out_rows(units.plan)
    n = num_rows(x)
    # summaries over the draws in float64 (the draws stay float32: ndraws times n values)
    out = np.empty((n,) if rows is None else (rows, n), np.float32 if kind == 'draws' else np.float64)
    chunk_rows = rows_per_chunk(binning.encoding.num_model, 4 * (rows or 1), host_bytes)
    pending = None  # the previous chunk's result, fetched after the next chunk is binned
    for start, chunk in iter_row_chunks(name, x, binning, chunk_rows):
        r = chunk.shape[0]
        X = buckets.pad_predictors(prepcovars.bin_predictors_np(chunk[:, binning.kept], binning.splits))
        del chunk
        result = _start(X, model, units, w_new, key, row_offset + start, start)
        if pending is not None:
            _store(out, *pending, units.to_data)
        pending = (result, start, r)
    if pending is not None:
        _store(out, *pending, units.to_data)
    return out


def _start(X, model: Model, units: _Units, w_new, key, first_row, start):
    """Start the pipeline on a chunk of binned rows `X` (``(p, r)``), the
    rows `start` on of `w_new`, numbered from `first_row` for the noise;
    returns the device result, padded."""
    trace = model.trace
    p, r = X.shape
    ndev = _num_devices(model.mesh)
    # the size ladder (`bartz.buckets`), then whole aligned batches
    ladder = (p, buckets.bucket_length(r, ndev))
    length = pipeline.padded_length(units.plan, ladder, X.dtype.itemsize, trace.leaf_tree.shape[1], ndev)
    X = np.pad(X, ((0, 0), (0, length - r)))
    rows = w = None
    if units.plan.predictive:
        rows = np.arange(first_row, first_row + length, dtype=np.uint32)
        if w_new is not None:
            w = np.ones(length, np.float32)
            w[:r] = w_new[start : start + r]
    return pipeline.run(
        X, trace, units.plan, units.link_params, rows=rows, w=w, sigma=units.sigma, key=key, mesh=model.mesh
    )


def _store(out, result, start, r, to_data=None):
    part = out[..., start : start + r]
    part[...] = sharding.to_host(result)[..., :r]
    if to_data is not None:
        to_data(part)


def evaluate_binned(X, n: int, trace, *, kind, link, link_params=(), max_memory=grove.DEFAULT_MAX_MEMORY, mesh=None):
    """``link(f)`` at the first `n` of the binned points `X` (``(p, L)`` host
    array, padded), each draw (``kind='draws'``, ``(ndraws, n)``) or their
    mean (``'mean'``, ``(n,)``), float32 in the trees' units for link None.

    The pipeline of `predict_rows` at points binned already: ``x_test``
    during the fit, whose program `bartz.grove.prepare_evaluate_trace`
    compiles while the sampler runs, and ``yhat_train_mean`` without saved
    draws. On a `mesh` of several devices the points are split over them.
    """
    ndraws = int(trace.leaf_tree.shape[0])
    plan = pipeline.make_plan(kind, link=link, ndraws=ndraws, max_memory=max_memory)
    params = tuple(np.float32(v) for v in link_params)
    return sharding.to_host(pipeline.run_padded(X, trace, plan, params, mesh=mesh))[..., :n]


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
