"""Covariate preparation: cut-points and binning of the predictors.

BART splits a node on predictor ``j`` at one of a finite set of cut-points
:math:`c_{j1} < \\dots < c_{jK_j}`. A split with index ``s`` (``1 <= s <= K_j``)
sends an observation to the left child iff :math:`x_j < c_{js}`. The sampler
never sees the raw predictors: each value is replaced once by its bin

.. math::

    b_j(x) = \\#\\{s : c_{js} \\le x\\} \\in \\{0, \\dots, K_j\\},

so that :math:`x < c_{js} \\iff b_j(x) < s`, and the data fits in one byte
per value when :math:`K_j \\le 255`.

Storage conventions used by the rest of the package:

- all cut-points live in one array ``splits`` of shape ``(p, max_K)``,
  float32, row ``j`` holding :math:`c_{j1}, \\dots, c_{jK_j}` followed by
  ``+inf`` padding; ``max_split[j] = K_j`` (int32). Because of the padding,
  ``searchsorted(splits[j], x, side='right')`` is :math:`b_j(x)` for any
  finite ``x``;
- binned predictors are stored transposed, ``(p, n)``, in the smallest
  unsigned integer dtype that holds ``max_K`` (see `binned_dtype`).

All comparisons are made in float32: the data are rounded to float32 before
the cut-points are computed and before binning, so the training set and new
data are binned consistently by the host (`bin_predictors_np`) and device
(`bin_predictors`) paths.

References
----------
Chipman, H. A., George, E. I. and McCulloch, R. E. (2010). BART: Bayesian
additive regression trees. *The Annals of Applied Statistics*, 4(1), 266-298.

Sparapani, R., Spanbauer, C. and McCulloch, R. (2021). Nonparametric machine
learning and efficient computation with Bayesian additive regression trees:
the BART R package. *Journal of Statistical Software*, 97(1), 1-66.
"""

from collections.abc import Sequence
from functools import partial
from typing import NamedTuple

import jax
import numpy as np
from jax import numpy as jnp

from bartz.prep import checks

__all__ = [
    'Splits',
    'bin_predictors',
    'bin_predictors_np',
    'binned_dtype',
    'compute_splits',
    'drop_predictors',
    'usable_predictors',
]


class Splits(NamedTuple):
    """Cut-points of all predictors, padded to a common length.

    Parameters
    ----------
    splits
        ``(p, max_K)`` float32: row ``j`` holds the ``K_j`` strictly increasing
        cut-points of predictor ``j``, then ``+inf`` padding.
    max_split
        ``(p,)`` int32: ``K_j``, the number of cut-points of predictor ``j``
        (0 for a predictor that cannot be split on).
    """

    splits: np.ndarray  # (p, max_K) float32, +inf padded
    max_split: np.ndarray  # (p,) int32, number of cut-points K_j


def binned_dtype(max_K: int) -> np.dtype:
    """Smallest unsigned integer dtype that holds the bins ``0..max_K``.

    Parameters
    ----------
    max_K
        Largest number of cut-points of any predictor.

    Returns
    -------
    dtype
        ``uint8`` if ``max_K <= 255``, ``uint16`` if ``max_K <= 65535``, else
        ``uint32``.

    Raises
    ------
    ValueError
        If ``max_K`` is negative or does not fit in 32 bits.

    Examples
    --------
    >>> binned_dtype(100), binned_dtype(1000)
    (dtype('uint8'), dtype('uint16'))
    """
    max_K = int(max_K)
    if max_K < 0:
        raise ValueError(f'max_K must be non-negative, got {max_K}')
    for dtype in (np.uint8, np.uint16, np.uint32):
        if max_K <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    raise ValueError(f'max_K={max_K} cut-points do not fit in uint32 bins')


def compute_splits(
    x: np.ndarray | None,
    numcut: int | Sequence[int] = 100,
    usequants: bool = False,
    xinfo: np.ndarray | Sequence[np.ndarray] | None = None,
    cont: bool = False,
) -> Splits:
    """Choose the cut-points of each predictor, as R's ``BART::bartModelMatrix``.

    For each column of ``x`` let :math:`u_1 < \\dots < u_k` be its distinct
    values (after rounding to float32) and ``q`` its ``numcut``:

    - ``k <= 1`` (constant column): no cut-point, ``K_j = 0``. Such
      predictors are the ones R's ``rm.const`` removes, see
      `usable_predictors`;
    - ``k <= q + 1`` (few distinct values, e.g. binary or categorical codes):
      the ``k - 1`` midpoints :math:`(u_i + u_{i+1})/2`, so every pair of
      distinct values can be separated, whatever ``usequants``;
    - ``usequants=True``: the interpolated quantiles of the distinct values
      at probabilities :math:`1/(q+1), \\dots, q/(q+1)` (R's ``quantile``
      type 7, numpy's ``'linear'``);
    - otherwise (R's default): ``q`` evenly spaced points strictly inside the
      range, R's ``seq(u_1, u_k, length.out=q+2)[-c(1, q+2)]``.

    The cut-points are then rounded to float32; cut-points that collide or
    that fall on the minimum (which would leave the left child empty) are
    dropped, so ``K_j <= q`` and the cut-points are strictly increasing.
    Midpoints are nudged up when rounding would put them on the lower value,
    so they always separate the two values.

    Parameters
    ----------
    x
        ``(n, p)`` finite real predictors, rows are observations (R's
        layout). Only its number of columns is used if ``xinfo`` is given, and
        it may then be None.
    numcut
        Maximum number of cut-points, a non-negative integer or a sequence of
        ``p`` of them (one per predictor). Ignored if ``xinfo`` is given.
    usequants
        Place cut-points at quantiles instead of evenly. Ignored if ``xinfo``
        is given.
    xinfo
        User-given cut-points, as R's ``xinfo``: either a ``(p, K)`` matrix
        (rows are predictors; shorter rows padded at the end with NaN or
        ``+inf``), or a sequence of ``p`` 1-D arrays. Each predictor's
        cut-points must be finite and strictly increasing; a row may be empty
        (the predictor is never split on).
    cont
        R's ``cont=TRUE`` (``wbart``, ``pbart``, ``lbart``): treat every
        column as continuous, ``q`` evenly spaced points strictly inside the
        range whatever its distinct values (no midpoints, no quantiles).
        Ignored if ``xinfo`` is given.

    Returns
    -------
    Splits
        ``splits`` ``(p, max_K)`` float32 padded with ``+inf``, with
        ``max_K = max(1, max_j K_j)`` (at least 1 to avoid zero-size arrays),
        and ``max_split`` ``(p,)`` int32 with the ``K_j``.

    Raises
    ------
    ValueError
        If an argument is impossible (wrong shape, non-finite ``x``, negative
        ``numcut``, unsorted ``xinfo``, ...); the message names the argument.

    Notes
    -----
    Differences from R's ``bartModelMatrix`` (BART 2.9), as far as we can
    tell from its source:

    - R switches to midpoints only when ``k < numcut``, and otherwise puts
      ``numcut`` evenly spaced (or quantile) points even when ``k`` is
      ``numcut`` or ``numcut + 1``; we use midpoints for all ``k <= numcut +
      1``, which separates every pair of distinct values with at most
      ``numcut`` cut-points. The cut-points differ from R's only for columns
      with exactly ``numcut`` or ``numcut + 1`` distinct values.
    - With ``usequants=TRUE`` R (we believe) takes the quantiles of the whole
      column, ties included, and may keep repeated cut-points; we take them
      over the distinct values and drop repeats. For columns without ties the
      two agree.
    - R computes in double precision; we round data and cut-points to
      float32, the precision the sampler works in.
    - R removes constant columns in ``bartModelMatrix`` itself when
      ``rm.const=TRUE``; here they get ``K_j = 0`` and the caller decides,
      with `usable_predictors` and `drop_predictors`.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0., 1., 5.], [1., 2., 5.], [0., 4., 5.], [1., 3., 5.]])
    >>> s = compute_splits(x, numcut=2)
    >>> s.max_split
    array([1, 2, 0], dtype=int32)
    >>> s.splits
    array([[0.5, inf],
           [2. , 3. ],
           [inf, inf]], dtype=float32)
    """
    if xinfo is not None:
        return _splits_from_xinfo(x, xinfo)

    if x is None:
        raise ValueError('x must be given when xinfo is None')
    x = np.asarray(x)
    checks.check_ndim('x', x, 2, 'a 2-D (n, p) array')
    checks.check_numeric('x', x, error=ValueError)
    n, p = x.shape
    with np.errstate(over='ignore'):  # overflow is reported just below
        x32 = x.astype(np.float32)
    checks.check_finite('x', x32, expected='finite (no NaN or inf) and within float32 range')

    numcut = _check_numcut(numcut, p)
    cuts = [
        _column_splits(x32[:, j], int(numcut[j]), bool(usequants), bool(cont)) for j in range(p)
    ]
    return _pad(cuts, p)


def _check_numcut(numcut, p: int) -> np.ndarray:
    """Validate `numcut` and broadcast it to one entry per predictor."""
    arr = np.asarray(numcut)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(
            f'numcut must be a non-negative integer or a sequence of them, got {numcut!r}'
        )
    if arr.ndim == 0:
        arr = np.full(p, arr)
    elif arr.shape != (p,):
        raise ValueError(
            f'numcut must be an integer or have one entry per predictor ({p}), '
            f'got shape {arr.shape}'
        )
    if np.any(arr < 0):
        raise ValueError(f'numcut must be non-negative, got {numcut!r}')
    return arr


def _column_splits(col: np.ndarray, numcut: int, usequants: bool, cont: bool = False) -> np.ndarray:
    """Cut-points of one float32 column, see `compute_splits`."""
    values = np.unique(col)  # sorted, float32
    k = values.size
    if k <= 1:
        return np.empty(0, np.float32)

    if cont:  # R's cont=TRUE: the even grid, whatever the distinct values
        usequants = False
    elif k <= numcut + 1:
        mid = 0.5 * (values[:-1].astype(np.float64) + values[1:])
        # float32 rounding may land on the lower value, which would not
        # separate it from the upper one; the next float32 up always does
        return np.maximum(mid.astype(np.float32), np.nextafter(values[:-1], np.inf))

    if usequants:
        probs = np.arange(1, numcut + 1) / (numcut + 1)
        cuts = np.quantile(values.astype(np.float64), probs, method='linear')
    else:
        lo, hi = float(values[0]), float(values[-1])
        cuts = np.linspace(lo, hi, numcut + 2)[1:-1]
    cuts = np.unique(cuts.astype(np.float32))
    return cuts[cuts > values[0]]


def _splits_from_xinfo(x, xinfo) -> Splits:
    """Validate user-given cut-points and pad them, see `compute_splits`."""
    if isinstance(xinfo, np.ndarray) or hasattr(xinfo, '__array__'):
        mat = np.asarray(xinfo)
        if mat.ndim != 2:
            raise ValueError(
                f'xinfo must be a 2-D (p, K) matrix or a list of p arrays, '
                f'got an array of shape {mat.shape}'
            )
        rows = list(mat)
    elif isinstance(xinfo, Sequence) and not isinstance(xinfo, str):
        rows = list(xinfo)
    else:
        raise ValueError(
            f'xinfo must be a 2-D (p, K) matrix or a list of p arrays, '
            f'got {type(xinfo).__name__}'
        )

    p = len(rows)
    if x is not None:
        x_shape = np.shape(x)
        checks.check_ndim('x', x, 2, 'a 2-D (n, p) array')
        if x_shape[1] != p:
            raise ValueError(
                f'xinfo must have one row per predictor: x has {x_shape[1]} '
                f'columns but xinfo has {p} rows'
            )

    cuts = [_check_xinfo_row(row, j) for j, row in enumerate(rows)]
    return _pad(cuts, p)


def _check_xinfo_row(row, j: int) -> np.ndarray:
    """Drop the trailing padding of one row of `xinfo` and validate it."""
    try:
        row = np.asarray(row, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f'xinfo row {j} must be numeric') from exc
    if row.ndim != 1:
        raise ValueError(f'xinfo row {j} must be 1-D, got shape {row.shape}')
    padding = np.isnan(row) | (row == np.inf)
    num_cuts = int(np.argmax(padding)) if padding.any() else row.size
    if padding[num_cuts:].size and not padding[num_cuts:].all():
        raise ValueError(
            f'xinfo row {j}: padding (NaN or +inf) must come after all cut-points'
        )
    cuts = row[:num_cuts]
    if not np.all(np.isfinite(cuts)):
        raise ValueError(f'xinfo row {j}: cut-points must be finite, got {cuts}')
    if np.any(np.diff(cuts) <= 0):
        raise ValueError(f'xinfo row {j}: cut-points must be strictly increasing')
    cuts32 = cuts.astype(np.float32)
    if not np.all(np.isfinite(cuts32)):
        raise ValueError(f'xinfo row {j}: cut-points overflow float32')
    if np.any(np.diff(cuts32) <= 0):
        raise ValueError(
            f'xinfo row {j}: cut-points are too close, some coincide in float32'
        )
    return cuts32


def _pad(cuts: list[np.ndarray], p: int) -> Splits:
    """Stack per-predictor cut-points into a `Splits`, padding with +inf."""
    max_split = np.array([c.size for c in cuts], dtype=np.int32).reshape(p)
    max_K = max(1, int(max_split.max(initial=0)))
    splits = np.full((p, max_K), np.inf, dtype=np.float32)
    for j, c in enumerate(cuts):
        splits[j, : c.size] = c
    return Splits(splits=splits, max_split=max_split)


@jax.jit
def bin_predictors(x: jax.Array, splits: jax.Array) -> jax.Array:
    """Replace each predictor value by its bin, on device.

    The bin of ``x`` for predictor ``j`` is the number of its cut-points
    ``<= x``, so a split with index ``s`` sends ``x`` left iff ``bin < s``.

    Parameters
    ----------
    x
        ``(p, n)`` predictors, already transposed (one row per predictor).
        Compared in the dtype of ``splits`` (float32).
    splits
        ``(p, max_K)`` cut-points padded with ``+inf``, the ``splits`` field
        of a `Splits`.

    Returns
    -------
    jax.Array
        ``(p, n)`` bins in ``0..K_j``, dtype ``binned_dtype(max_K)`` (decided
        from the static shape of ``splits``). Values above every cut-point,
        ``+inf`` included, get ``K_j``; NaN gets some bin in ``0..K_j``.

    Notes
    -----
    Jitted; a vmap over predictors of ``jnp.searchsorted(side='right')`` with
    ``method='scan_unrolled'``, the fastest on CPU among 'scan',
    'scan_unrolled', 'sort' and 'compare_all' for ``max_K`` of 100 to 1000
    (jax 0.10.2).

    Examples
    --------
    >>> import numpy as np
    >>> splits = np.array([[0.5, np.inf], [2., 3.]], np.float32)
    >>> bin_predictors(np.array([[0., 1., 0.], [1., 2., 3.5]]), splits)
    Array([[0, 1, 0],
           [0, 1, 2]], dtype=uint8)
    """
    splits = jnp.asarray(splits)
    x = jnp.asarray(x).astype(splits.dtype)
    if x.ndim != 2 or splits.ndim != 2 or x.shape[0] != splits.shape[0]:
        raise ValueError(
            f'x must be (p, n) and splits (p, max_K) with the same p, '
            f'got shapes {x.shape} and {splits.shape}'
        )
    dtype = binned_dtype(splits.shape[1])
    search = jax.vmap(partial(jnp.searchsorted, side='right', method='scan_unrolled'))
    bins = search(splits, x)
    # +inf data would also count the +inf padding
    num_cuts = jnp.sum(splits < jnp.inf, axis=1, dtype=bins.dtype)
    return jnp.minimum(bins, num_cuts[:, None]).astype(dtype)


def bin_predictors_np(x: np.ndarray, splits: np.ndarray) -> np.ndarray:
    """Replace each predictor value by its bin, on the host, with numpy.

    Same result as `bin_predictors` but takes ``x`` in R's layout.

    Parameters
    ----------
    x
        ``(n, p)`` predictors, rows are observations. Compared in float32.
    splits
        ``(p, max_K)`` cut-points padded with ``+inf``, the ``splits`` field
        of a `Splits`.

    Returns
    -------
    numpy.ndarray
        ``(p, n)`` bins (transposed w.r.t. ``x``), dtype
        ``binned_dtype(max_K)``.

    Examples
    --------
    >>> import numpy as np
    >>> splits = np.array([[0.5, np.inf], [2., 3.]], np.float32)
    >>> bin_predictors_np(np.array([[0., 1.], [1., 2.], [0., 3.5]]), splits)
    array([[0, 1, 0],
           [0, 1, 2]], dtype=uint8)
    """
    splits = np.asarray(splits)
    with np.errstate(over='ignore'):  # huge values become inf and get bin K_j
        x = np.asarray(x).astype(splits.dtype, copy=False)
    if x.ndim != 2 or splits.ndim != 2 or x.shape[1] != splits.shape[0]:
        raise ValueError(
            f'x must be (n, p) and splits (p, max_K) with the same p, '
            f'got shapes {x.shape} and {splits.shape}'
        )
    n, p = x.shape
    num_cuts = np.sum(splits < np.inf, axis=1)
    out = np.empty((p, n), dtype=binned_dtype(splits.shape[1]))
    # A branch-free binary search, one step for all points at a time: the
    # bin is the number of cut-points <= x, found bit by bit in a table
    # padded with +inf to a power of two: numpy's searchsorted branches per
    # step, which is slow on unsorted data. NaN compares false
    # and +inf counts the padding: both get bin K_j, as with searchsorted.
    size = 1 << splits.shape[1].bit_length()  # > max_K: the last entry is +inf
    table = np.full(size, np.inf, splits.dtype)
    idx, probe = np.empty(n, np.int32), np.empty(n, np.int32)
    below, values = np.empty(n, bool), np.empty(n, splits.dtype)
    for j in range(p):
        table[: num_cuts[j]] = splits[j, : num_cuts[j]]
        table[num_cuts[j] :] = np.inf
        col = np.ascontiguousarray(x[:, j])
        idx[:] = 0
        step = size // 2
        while step:
            np.add(idx, step - 1, out=probe)
            np.take(table, probe, out=values)
            np.less_equal(values, col, out=below)
            idx += below.view(np.uint8).astype(np.int32) << (step.bit_length() - 1)
            step //= 2
        np.minimum(idx, num_cuts[j], out=idx)
        idx[np.isnan(col)] = num_cuts[j]
        out[j] = idx
    return out


def usable_predictors(max_split):
    """Mask of the predictors that have at least one cut-point.

    Predictors with ``K_j = 0`` (constant in the training data, or given an
    empty ``xinfo`` row) can never be split on; R's ``rm.const=TRUE`` drops
    them.

    Parameters
    ----------
    max_split
        ``(p,)`` number of cut-points of each predictor.

    Returns
    -------
    array
        ``(p,)`` bool, True where ``K_j > 0``.
    """
    return max_split > 0


def drop_predictors(splits: Splits, mask) -> Splits:
    """Keep only the predictors selected by `mask`.

    Parameters
    ----------
    splits
        Cut-points of all ``p`` predictors.
    mask
        ``(p,)`` bool, True for the predictors to keep, e.g. the output of
        `usable_predictors`.

    Returns
    -------
    Splits
        The rows of the kept predictors, with the padding width recomputed
        (``max_K = max(1, max K_j)`` over the kept ones), so the binned dtype
        may become smaller.

    Examples
    --------
    >>> import numpy as np
    >>> s = compute_splits(np.array([[1., 0.], [1., 1.]]))
    >>> drop_predictors(s, usable_predictors(s.max_split)).max_split
    array([1], dtype=int32)
    """
    mask = np.asarray(mask)
    p = splits.max_split.shape[0]
    if mask.dtype != np.bool_ or mask.shape != (p,):
        raise ValueError(
            f'mask must be a boolean array of shape ({p},), '
            f'got dtype {mask.dtype} and shape {mask.shape}'
        )
    max_split = np.asarray(splits.max_split)[mask]
    max_K = max(1, int(max_split.max(initial=0)))
    return Splits(
        splits=np.asarray(splits.splits)[mask, :max_K], max_split=max_split
    )
