"""Partial dependence of a BART fit on one or two predictors.

The partial dependence of ``f`` on predictor ``v`` at value ``a`` is the
average over the rows ``x_i`` of a data set of ``f(x_i with v set to a)``
(Friedman 2001). As R's ``pdbart`` (Chipman, George & McCulloch's
BayesTree, and dbarts), it is computed for every posterior draw of ``f``,
which gives its posterior: mean and credible band at each grid value.

Memory stays bounded: the rows are processed in batches (all grid values of
a batch in one prediction call when they fit), and only the per-draw sums
over rows are kept, never the ``(ndpost, rows * grid)`` predictions.

References
----------
Friedman (2001), "Greedy function approximation: a gradient boosting
machine", Ann. Stat. 29(5). Chipman, George & McCulloch (2010), BART:
Bayesian additive regression trees, Ann. Appl. Stat. 4(1), section 6.
"""

import itertools
import numbers

import numpy as np
import pandas as pd

from bartz.prep.checks import num_rows

__all__ = ['partial_dependence']

# R's pdbart: levquants = c(.05, (1:9)/10, .95), or the sorted unique values
# when there are fewer of them than quantiles
_LEVQUANTS = np.array([0.05, *(np.arange(1, 10) / 10), 0.95])
_KINDS = ('mean',)
_DEFAULT_MAX_MEMORY = 64 * 2**20


def default_grid(column) -> np.ndarray:
    """R's ``pdbart`` grid for one column: its sorted unique values if there
    are fewer than 11, else the unique quantiles at 5%, 10%, ..., 90%, 95%
    (R's default quantile, numpy's 'linear'). Non-numeric columns (e.g.
    categories): their unique values."""
    values = pd.Series(column).dropna()
    if isinstance(values.dtype, pd.CategoricalDtype):
        return np.asarray(values.cat.categories)
    if not pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
        return np.asarray(sorted(values.unique()))
    arr = values.to_numpy(dtype=np.float64)
    unique = np.unique(arr)
    if unique.size < _LEVQUANTS.size:
        return unique
    return np.unique(np.quantile(arr, _LEVQUANTS))


def partial_dependence(
    fit, x, var, grid=None, *, kind: str = 'mean', level: float = 0.95, max_memory: int = _DEFAULT_MAX_MEMORY
) -> pd.DataFrame:
    """Posterior of the partial dependence of a fit on one or two predictors.

    Parameters
    ----------
    fit
        A `bartz.BARTFit`.
    x
        ``(n, p)`` rows to average over (usually ``x_train``), array or
        DataFrame with the fit's columns.
    var
        The predictor: a column name (fits on DataFrames) or index, or a
        list of two of them for a joint, two-dimensional partial dependence.
    grid
        Values of ``var``: for one predictor, a 1-D array-like; for two, a
        pair of 1-D array-likes (the grid is their product) or a DataFrame
        with the two columns (explicit points). Default as R's ``pdbart``
        (`default_grid`) for each predictor, from the column of ``x``.
    kind
        ``'mean'``: the average over the rows of ``x`` of f with ``var``
        set to each grid value, as R's ``pdbart``; for binary fits, f is the
        probability ``P(y = 1 | x)`` (R's ``pdbart`` averages the latent
        scale instead).
    level
        Probability of the central credible band (R's plot uses 0.90).
    max_memory
        Bytes for the predictions of one batch of rows (``ndpost`` draws
        each, float32); the batches are sized to it.

    Returns
    -------
    DataFrame
        One row per grid point: the grid value(s), in columns named after
        the predictor(s), then ``mean``, ``sd``, ``median``, ``lower`` and
        ``upper`` (the band) of the posterior. ``.attrs`` holds ``draws``
        (``(ndpost, grid points)`` array), ``var`` (the names), ``kind``
        and ``level``.
    """
    if kind not in _KINDS:
        msg = f'kind must be one of {_KINDS}, got {kind!r}'
        raise ValueError(msg)
    if isinstance(level, bool) or not isinstance(level, numbers.Real) or not 0 < level < 1:
        msg = f'level must be a number in (0, 1), got {level!r}'
        raise ValueError(msg)
    if isinstance(max_memory, bool) or not isinstance(max_memory, numbers.Integral) or max_memory < 1:
        msg = f'max_memory must be a positive integer, got {max_memory!r}'
        raise ValueError(msg)
    x = _check_x(fit, x)
    columns, names = _resolve_var(fit, x, var)
    points = _grid_points(x, columns, names, grid)  # DataFrame, one column per predictor

    sums = _row_sums(fit, x, columns, points, max_memory)  # (ndpost, grid points)
    draws = sums / num_rows(x)
    tail = (1 - level) / 2
    table = points.reset_index(drop=True).copy()
    table['mean'] = draws.mean(axis=0)
    table['sd'] = draws.std(axis=0, ddof=1) if draws.shape[0] > 1 else np.nan
    table['median'] = np.median(draws, axis=0)
    table['lower'] = np.quantile(draws, tail, axis=0)
    table['upper'] = np.quantile(draws, 1 - tail, axis=0)
    table.attrs = {'draws': draws, 'var': list(names), 'kind': kind, 'level': float(level)}
    return table


def _check_x(fit, x):
    if x is None:
        msg = 'x must be the rows to average over (an array or DataFrame), got None'
        raise TypeError(msg)
    if isinstance(x, pd.DataFrame):
        if x.shape[0] == 0:
            msg = 'x must have at least one row'
            raise ValueError(msg)
        return x
    arr = np.asarray(x)
    if arr.ndim != 2:
        msg = f'x must be 2-dimensional (n, p), got shape {arr.shape}'
        raise ValueError(msg)
    if arr.shape[0] == 0:
        msg = 'x must have at least one row'
        raise ValueError(msg)
    if arr.shape[1] != fit._p:  # noqa: SLF001
        msg = f'x must have {fit._p} columns like x_train, got {arr.shape[1]}'  # noqa: SLF001
        raise ValueError(msg)
    return arr


def _resolve_var(fit, x, var):
    """Column positions in `x` and display names of the predictors."""
    many = isinstance(var, list | tuple)
    items = list(var) if many else [var]
    if not 1 <= len(items) <= 2:
        msg = f'var must be one predictor or a list of two, got {len(items)}'
        raise ValueError(msg)
    fit_columns = getattr(fit, '_columns', None)
    if isinstance(x, pd.DataFrame):
        labels = [str(c) for c in x.columns]
    else:
        labels = list(fit_columns) if fit_columns is not None else [f'x{j}' for j in range(x.shape[1])]
    positions = []
    for item in items:
        if isinstance(item, str):
            if item not in labels:
                msg = f'var {item!r} is not a column of x; columns are {labels[:10]}'
                raise ValueError(msg)
            positions.append(labels.index(item))
        elif isinstance(item, numbers.Integral) and not isinstance(item, bool):
            if not 0 <= item < len(labels):
                msg = f'var index {item} is out of range for {len(labels)} columns'
                raise ValueError(msg)
            positions.append(int(item))
        else:
            msg = f'var must be a column name or index (or a list of two), got {item!r}'
            raise TypeError(msg)
    if len(set(positions)) != len(positions):
        msg = f'var names the same predictor twice: {items}'
        raise ValueError(msg)
    return positions, [labels[j] for j in positions]


def _column(x, j):
    return x.iloc[:, j] if isinstance(x, pd.DataFrame) else x[:, j]


def _grid_points(x, columns, names, grid):
    if grid is None:
        axes = [default_grid(_column(x, j)) for j in columns]
        return _product(axes, names)
    if len(columns) == 1:
        if isinstance(grid, pd.DataFrame):
            grid = grid[names[0]] if names[0] in grid.columns else grid.iloc[:, 0]
        values = np.asarray(grid)
        if values.ndim != 1 or values.size == 0:
            msg = f'grid must be a non-empty 1-D array of values of {names[0]!r}, got shape {values.shape}'
            raise ValueError(msg)
        _check_values(values, 'grid')
        return pd.DataFrame({names[0]: values})
    if isinstance(grid, pd.DataFrame):
        missing = [n for n in names if n not in grid.columns]
        if missing:
            msg = f'grid lacks the columns {missing}'
            raise ValueError(msg)
        if grid.shape[0] == 0:
            msg = 'grid must have at least one row'
            raise ValueError(msg)
        for n in names:
            _check_values(grid[n].to_numpy(), f'grid[{n!r}]')
        return grid[names].reset_index(drop=True)
    if not isinstance(grid, list | tuple) or len(grid) != 2:
        msg = 'grid for two predictors must be a pair of 1-D arrays (their product) or a DataFrame of points'
        raise ValueError(msg)
    axes = []
    for name, values in zip(names, grid, strict=True):
        values = np.asarray(values)
        if values.ndim != 1 or values.size == 0:
            msg = f'grid values of {name!r} must be a non-empty 1-D array, got shape {values.shape}'
            raise ValueError(msg)
        _check_values(values, f'grid values of {name!r}')
        axes.append(values)
    return _product(axes, names)


def _check_values(values, what):
    if values.dtype.kind in 'fc' and not np.all(np.isfinite(values)):
        msg = f'{what} must be finite'
        raise ValueError(msg)


def _product(axes, names):
    rows = list(itertools.product(*axes))
    return pd.DataFrame(rows, columns=names)


def _set_columns(x_rows, columns, values):
    """`x_rows` repeated once per grid point, the predictors set to its values.

    ``values``: one tuple per grid point. Returns the stacked rows, grid
    point after grid point.
    """
    g = len(values)
    if isinstance(x_rows, pd.DataFrame):
        parts = []
        for point in values:
            part = x_rows.copy()
            for j, v in zip(columns, point, strict=True):
                col = x_rows.columns[j]
                dtype = x_rows[col].dtype
                if isinstance(dtype, pd.CategoricalDtype):
                    part[col] = pd.Categorical([v] * len(part), categories=dtype.categories, ordered=dtype.ordered)
                elif pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype):
                    part[col] = np.full(len(part), v, dtype=np.float64)
                else:
                    part[col] = pd.Series([v] * len(part), index=part.index, dtype=dtype)
            parts.append(part)
        return pd.concat(parts, ignore_index=True)
    stacked = np.repeat(np.asarray(x_rows, np.float64)[None], g, axis=0)
    for k, j in enumerate(columns):
        stacked[:, :, j] = np.asarray([point[k] for point in values], np.float64)[:, None]
    return stacked.reshape(-1, stacked.shape[-1])


def _row_sums(fit, x, columns, points, max_memory):
    """``(ndpost, grid points)`` sums over the rows of `x` of the predicted
    draws with the predictors set to each grid point, batch by batch."""
    n = num_rows(x)
    ndpost = fit.ndpost
    # rows of predictions per call: (ndpost, rows) float32 within max_memory
    per_call = max(1, max_memory // (4 * ndpost))
    row_batch = min(n, per_call)
    grid_batch = max(1, per_call // row_batch)
    values = list(points.itertuples(index=False, name=None))
    sums = np.zeros((ndpost, len(values)), np.float64)
    for start in range(0, n, row_batch):
        rows = x.iloc[start : start + row_batch] if isinstance(x, pd.DataFrame) else x[start : start + row_batch]
        r = num_rows(rows)
        for g0 in range(0, len(values), grid_batch):
            chunk = values[g0 : g0 + grid_batch]
            stacked = _set_columns(rows, columns, chunk)
            draws = np.asarray(fit.predict(stacked, kind='draws'), np.float64)  # (ndpost, len(chunk) * r)
            sums[:, g0 : g0 + len(chunk)] += draws.reshape(ndpost, len(chunk), r).sum(axis=2)
    return sums
