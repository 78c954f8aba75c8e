"""Encoding of the predictor columns: numbers, categories and missing values.

`bartz.gbart` reads ``x_train`` once with `fit_encoding`, which decides how
each column becomes numeric model columns; the resulting `Encoding` is kept
in the fit and applied, unchanged, to ``x_test`` and to
`bartz.BARTFit.predict`'s ``x_new`` (`Encoding.transform`). It is plain data
(`Encoding.to_dict`), so a saved fit carries it (`bartz.io`).

Columns
-------
- Numeric and bool columns (bool as 0/1) are used as they are.
- Categorical columns -- pandas ``category``, ``object`` or ``string``
  columns of strings -- become indicator (dummy) columns, as R's
  ``bartModelMatrix`` does with factors: with two levels one dummy (the
  indicator of the second level, like ``True`` of a bool column), with
  ``q > 2`` levels ``q`` dummies, named ``f'{column}_{level}'`` (pandas's
  ``get_dummies`` convention; R names them ``column1, column2, ...``). The
  levels are the categories of a ``category`` column (in their order, used
  or not) or the sorted distinct values of a column of strings. At
  prediction, columns are matched by name (extra columns are ignored) and
  levels by value; a level not seen in ``x_train`` is a `ValueError` naming
  the column and the level.
- An ``object`` column of numbers (with ``None`` for missing values) is
  numeric; one of bools is bool.
- Datetime, timedelta, period, interval and complex columns, and ``object``
  columns that mix strings with numbers, are refused with a `TypeError`
  naming the column: convert them first.

The encoded columns (numeric columns and dummies, R's model matrix) are the
predictors of ``xinfo``, ``numcut``, ``varcount`` and ``varprob``.

Missing values
--------------
``NaN``, ``None``, ``pd.NA`` and ``NaT`` are missing values. ``x_train``
may have them in any column, except a column entirely missing (a
`ValueError`). They are handled by *missingness incorporated in attributes*
(Twala, Jones & Hand 2008; in BART, Kapelner & Bleich 2015), without any
change to the sampler:

- A numeric column with missing values in ``x_train`` becomes two model
  columns: a copy where missing values lie below every cut-point (any split
  on it sends them left) and a copy where they lie above (sent right). Each
  copy gets one extra cut-point that separates the missing values from the
  others, so "is missing" is itself a possible split. Each copy gets half
  the split probability of an ordinary predictor (``log_s = log 1/2`` in
  `bartz.mcmcstep.State`): the prior probability of splitting on the
  original column is unchanged, a split picks one of its ``K + 1``
  cut-points uniformly (the ``K`` of the observed values, plus "missing or
  not"), and where the missing values go is drawn with probability 1/2 as
  part of the rule. So the model can learn both from the value and from its
  missingness. With DART (``sparse=True``) the copies are one entry of
  the Dirichlet (their split counts summed), each copy with half its
  probability: the column has the prior weight of one predictor.
- A categorical column with missing values in ``x_train`` gets one more
  level, "missing", with its own dummy ``f'{column}_nan'`` (and the
  two-level rule counts it).
- A column that had no missing values in ``x_train`` cannot send missing
  values anywhere: at prediction they are imputed with its training median
  (numeric) or most frequent level (categorical), with a warning. This
  deviates from R, whose ``gbart`` imputes missing values of ``x_train``
  and ``x_test`` by drawing from the observed values.

References
----------
Twala, Jones & Hand (2008), Good methods for coping with missing data in
decision trees, Pattern Recognit. Lett. 29(7). Kapelner & Bleich (2015),
Prediction with missing data via Bayesian additive regression trees, Can.
J. Stat. 43(2).
"""

import warnings
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd
import scipy.sparse

from bartz import _warn
from bartz.prep import checks
from bartz.prep.columns import CATEGORICAL, NUMERIC, column_kind, to_codes, to_float, warn_imputed
from bartz.prep import cutpoints as prepcovars
from bartz.prep.checks import numbers_from_object  # noqa: F401, bartz.encoding.numbers_from_object

__all__ = ['ColumnSpec', 'Encoding', 'PositionalColumnsWarning', 'fit_encoding']

_FMAX = float(np.finfo(np.float32).max)


class ColumnSpec(NamedTuple):
    """How one column of ``x_train`` is encoded."""

    name: str | None  # DataFrame column name; None when x_train is an array
    kind: str  # 'numeric' or 'categorical'
    levels: tuple  # categorical: the levels (str, int, float or bool); () if numeric
    missing: bool  # x_train had missing values in it
    fill: float  # NaN in a column with no training missing values: median (numeric) or index of the mode (categorical)


class Encoding:
    """How the columns of ``x_train`` become model columns (see the module
    docstring). Built by `fit_encoding`; plain data.

    Three levels of columns: the original *columns* of ``x_train``; the
    *encoded* columns (numeric columns and dummies: R's model matrix); the
    *model* columns the sampler sees (an encoded column with missing values
    in two copies).

    Parameters
    ----------
    columns
        One `ColumnSpec` per column of ``x_train``.
    named
        Whether ``x_train`` was a DataFrame (columns matched by name).
    """

    def __init__(self, columns: Sequence[ColumnSpec], named: bool):
        self.columns = tuple(ColumnSpec(*c) for c in columns)
        self.named = bool(named)
        self.warned_by_position = False  # `PositionalColumnsWarning` given (once per fit)
        encoded_column, encoded_level, encoded_names = [], [], []
        for i, c in enumerate(self.columns):
            for level in _dummy_levels(c):
                encoded_column.append(i)
                encoded_level.append(level)
                if level < 0:
                    encoded_names.append(c.name)
                else:
                    label = 'nan' if level == len(c.levels) else c.levels[level]
                    encoded_names.append(f'{c.name}_{label}')
        self.encoded_column = np.array(encoded_column, np.intp)  # (p_enc,) column of each encoded column
        self._encoded_level = encoded_level  # level of each dummy; -1 for a numeric column
        self.encoded_names = encoded_names if self.named else None
        model_encoded, direction = [], []
        for e, (i, level) in enumerate(zip(encoded_column, encoded_level, strict=True)):
            if level < 0 and self.columns[i].missing:
                model_encoded += [e, e]
                direction += [-1, 1]
            else:
                model_encoded.append(e)
                direction.append(0)
        self.model_encoded = np.array(model_encoded, np.intp)  # (p_model,) encoded column of each model column
        self.direction = np.array(direction, np.int8)  # (p_model,) missing values go left (-1), right (1); 0: none

    # ------------------------------------------------------------ sizes and names

    @property
    def num_columns(self) -> int:
        """Number of columns of ``x_train``."""
        return len(self.columns)

    @property
    def num_encoded(self) -> int:
        """Number of encoded columns (R's model matrix)."""
        return self.encoded_column.size

    @property
    def num_model(self) -> int:
        """Number of model columns (the sampler's predictors)."""
        return self.model_encoded.size

    @property
    def column_names(self) -> list[str] | None:
        """Names of the columns of ``x_train``; None if it was an array."""
        return [c.name for c in self.columns] if self.named else None

    @property
    def augmented(self) -> bool:
        """Whether some column is in two copies for its missing values."""
        return bool(np.any(self.direction))

    def log_split_weights(self) -> np.ndarray:
        """``(p_model,)`` log prior weights of the model columns for the
        split variable: ``log(1/2)`` for each copy of a column with missing
        values, 0 otherwise."""
        return np.where(self.direction != 0, np.log(0.5), 0.0).astype(np.float32)

    def model_to_encoded(self, values: np.ndarray) -> np.ndarray:
        """Sum ``(..., p_model)`` per-model-column values into ``(...,
        p_enc)`` per encoded column (e.g. split counts)."""
        values = np.asarray(values)
        out = np.zeros((*values.shape[:-1], self.num_encoded), values.dtype)
        np.add.at(out, (..., self.model_encoded), values)
        return out

    def encoded_to_columns(self, values: np.ndarray) -> np.ndarray:
        """Sum ``(..., p_enc)`` per-encoded-column values into ``(..., p)``
        per column of ``x_train`` (e.g. dummies into their factor)."""
        values = np.asarray(values)
        out = np.zeros((*values.shape[:-1], self.num_columns), values.dtype)
        np.add.at(out, (..., self.encoded_column), values)
        return out

    # ------------------------------------------------------------ transforms

    def transform(self, x, name: str) -> np.ndarray:
        """Encode ``x`` into the ``(n, p_model)`` float64 model columns,
        ready for `bartz.prepcovars.bin_predictors_np` with the fit's
        cut-points (missing values at ``-inf``/``+inf`` in the copies of
        their column). ``name`` is the argument named in errors."""
        return self.expand(self.encode(x, name))

    def encode(self, x, name: str, train_name: str = 'x_train') -> np.ndarray:
        """Encode ``x`` into the ``(n, p_enc)`` float64 encoded columns (R's
        model matrix), NaN where a value is missing. ``train_name`` is the
        argument the encoding was fitted on, named in errors."""
        values = _column_values(x, name, self, train_name)
        n = values[0].shape[0] if values else checks.num_rows(x)
        out = np.empty((n, self.num_encoded))
        e = 0
        for j, (c, v) in enumerate(zip(self.columns, values, strict=True)):
            label = _label(name, c, j)
            if c.kind == NUMERIC:
                col = to_float(v, label)
                missing = np.isnan(col)
                if missing.any() and not c.missing:
                    warn_imputed(label, f'its training median {c.fill:.6g}')
                    col = np.where(missing, c.fill, col)
                out[:, e] = col
                e += 1
            else:
                codes = to_codes(v, c.levels, label)
                missing = codes < 0
                if missing.any():
                    if c.missing:
                        codes = np.where(missing, len(c.levels), codes)
                    else:
                        warn_imputed(label, f'its most frequent training level {c.levels[int(c.fill)]!r}')
                        codes = np.where(missing, int(c.fill), codes)
                for level in _dummy_levels(c):
                    out[:, e] = codes == level
                    e += 1
        return out

    def expand(self, encoded: np.ndarray) -> np.ndarray:
        """Encoded columns ``(n, p_enc)`` to model columns ``(n, p_model)``:
        each column with missing values in two copies, its missing values at
        ``-inf`` in the first and ``+inf`` in the second."""
        if not self.augmented:
            return encoded
        out = encoded[:, self.model_encoded]
        fill = np.where(self.direction < 0, -np.inf, np.inf)
        missing = np.isnan(out)
        return np.where(missing, fill, out)

    def cut_points(self, encoded: np.ndarray, *, numcut, usequants: bool, xinfo, cont: bool = False) -> prepcovars.Splits:
        """Cut-points of the model columns.

        Those of the observed values of each encoded column, by
        `bartz.prepcovars.compute_splits` (``numcut`` and ``xinfo`` are per
        encoded column; ``cont``: R's even grid for every column), plus, in the copies of a column with missing
        values, one cut-point below (first copy) or above (second copy)
        every finite float32, which separates the missing values.
        """
        # a missing value replaced by an observed one of its column leaves
        # the distinct values, and so the cut-points, unchanged
        missing = np.isnan(encoded)
        if missing.any():
            encoded = np.where(missing, np.nanmin(np.where(missing, np.inf, encoded), axis=0), encoded)
        splits = prepcovars.compute_splits(encoded, numcut=numcut, usequants=usequants, xinfo=xinfo, cont=cont)
        if not self.augmented:
            return splits
        rows = []
        for e, d in zip(self.model_encoded, self.direction, strict=True):
            cuts = splits.splits[e, : splits.max_split[e]]
            if d < 0:
                cuts = np.concatenate([np.float32([-_FMAX]), cuts])
            elif d > 0:
                cuts = np.concatenate([cuts, np.float32([_FMAX])])
            rows.append(cuts)
        max_split = np.array([r.size for r in rows], np.int32)
        out = np.full((len(rows), max(1, int(max_split.max(initial=0)))), np.inf, np.float32)
        for j, r in enumerate(rows):
            out[j, : r.size] = r
        return prepcovars.Splits(splits=out, max_split=max_split)

    # ------------------------------------------------------------ persistence

    def to_dict(self) -> dict:
        """A JSON-serialisable description; `from_dict` reads it back."""
        return {
            'named': self.named,
            'columns': [
                {'name': c.name, 'kind': c.kind, 'levels': list(c.levels), 'missing': c.missing, 'fill': c.fill}
                for c in self.columns
            ],
        }

    @classmethod
    def from_dict(cls, d: dict) -> 'Encoding':
        """The `Encoding` described by ``d`` (from `to_dict`)."""
        columns = [
            ColumnSpec(
                name=c['name'],
                kind=c['kind'],
                levels=tuple(c['levels']),
                missing=bool(c['missing']),
                fill=float(c['fill']),
            )
            for c in d['columns']
        ]
        for c in columns:
            if c.kind not in (NUMERIC, CATEGORICAL):
                msg = f'unknown column kind {c.kind!r}'
                raise ValueError(msg)
        return cls(columns, d['named'])

    def __eq__(self, other):
        return isinstance(other, Encoding) and self.to_dict() == other.to_dict()

    def __repr__(self):
        kinds = [c.kind for c in self.columns]
        return (
            f'Encoding({self.num_columns} columns: {kinds.count(NUMERIC)} numeric, '
            f'{kinds.count(CATEGORICAL)} categorical, {sum(c.missing for c in self.columns)} with missing values; '
            f'{self.num_encoded} encoded, {self.num_model} model columns)'
        )


def fit_encoding(x, name: str = 'x_train') -> Encoding:
    """Decide the encoding of each column of ``x`` (see the module docstring).

    Parameters
    ----------
    x
        ``(n, p)`` numpy array (numeric or bool, NaN for missing) or pandas
        DataFrame (any of the column types above), or a Series or 1-D array
        (one column).
    name
        Argument named in error messages.

    Returns
    -------
    Encoding
    """
    if x is None:
        msg = f'{name} must be an array or DataFrame, got None'
        raise TypeError(msg)
    if isinstance(x, pd.Series):
        x = x.to_frame()
    if not isinstance(x, pd.DataFrame):
        arr = _numeric_array(x, name)
        specs = []
        for j in range(arr.shape[1]):
            col = arr[:, j]
            checks.check_finite(f'{name} column {j}', col, allow_nan=True, at='row')
            specs.append(_numeric_spec(None, col, f'{name} column {j}'))
        return Encoding(specs, named=False)
    names = [str(c) for c in x.columns]
    if len(set(names)) < len(names):
        dup = sorted({c for c in names if names.count(c) > 1})
        msg = f'{name} has duplicate column names {dup}'
        raise ValueError(msg)
    specs = []
    for c, cname in zip(x.columns, names, strict=True):
        label = f'{name} column {cname!r}'
        kind, levels = column_kind(x[c], label)
        if kind == NUMERIC:
            col = to_float(x[c], label)
            specs.append(_numeric_spec(cname, col, label))
        else:
            codes = to_codes(x[c], levels, label)
            missing = codes < 0
            if missing.all() and codes.size:
                msg = f'{label} has no values, all are missing'
                raise ValueError(msg)
            counts = np.bincount(codes[~missing], minlength=len(levels))
            specs.append(ColumnSpec(cname, CATEGORICAL, tuple(levels), bool(missing.any()), float(np.argmax(counts))))
    return Encoding(specs, named=True)


# ---------------------------------------------------------------- helpers


def _dummy_levels(c: ColumnSpec) -> list[int]:
    """Levels with a dummy column (``len(levels)`` is "missing"); [-1] for a numeric column."""
    if c.kind == NUMERIC:
        return [-1]
    q = len(c.levels) + c.missing
    return [q - 1] if q == 2 else list(range(q))


def _label(name, c: ColumnSpec, j: int) -> str:
    return f'{name} column {c.name!r}' if c.name is not None else f'{name} column {j}'


def _numeric_spec(cname, col: np.ndarray, label: str) -> ColumnSpec:
    missing = np.isnan(col)
    if missing.all() and col.size:
        msg = f'{label} has no values, all are missing'
        raise ValueError(msg)
    fill = float(np.median(col[~missing])) if (~missing).any() else 0.0
    return ColumnSpec(cname, NUMERIC, (), bool(missing.any()), fill)


def masked_as_nan(x):
    """A NumPy masked array as float64 with NaN (missing) at its masked
    entries (``np.asarray`` alone would read the values under the mask);
    anything else as it is."""
    if isinstance(x, np.ma.MaskedArray):
        return np.ma.filled(np.ma.asarray(x, dtype=np.float64), np.nan)
    return x


def _numeric_array(x, name: str) -> np.ndarray:
    """A non-DataFrame ``x`` as an ``(n, p)`` float64 array (NaN for missing).
    A SciPy sparse matrix is made dense (the sampler bins every entry); the
    masked entries of a NumPy masked array are missing (``np.asarray``
    alone would read the values under the mask)."""
    if scipy.sparse.issparse(x):
        x = x.toarray()
    mask = np.ma.getmaskarray(x) if isinstance(x, np.ma.MaskedArray) else None
    try:
        arr = np.asarray(x)
    except Exception as e:
        msg = f'{name} could not be converted to an array: {e}'
        raise TypeError(msg) from e
    arr = checks.numbers_from_object(arr)
    checks.check_not_complex(name, arr)
    checks.check_numeric(name, arr, hint='; pass a pandas DataFrame for categorical columns')
    arr = arr.astype(np.float64)
    if mask is not None and mask.any():
        arr[mask] = np.nan
    if arr.ndim == 1:
        arr = arr[:, None]
    checks.check_ndim(name, arr, 2, '2-dimensional (n, p)')
    return arr


def _column_values(x, name: str, enc: Encoding, train_name: str = 'x_train') -> list:
    """The columns of ``x`` matching those of ``x_train``: by name for a
    DataFrame fitted on a DataFrame, by position otherwise."""
    if x is None:
        msg = f'{name} must be an array or DataFrame, got None'
        raise TypeError(msg)
    x = row_as_frame(x, enc)
    series = isinstance(x, pd.Series)
    if series:
        x = x.to_frame()
    values = _matched_columns(x, name, enc, series, train_name)
    if isinstance(x, pd.DataFrame) != enc.named and enc.num_columns > 1:
        _warn_by_position(enc, name, named_now=isinstance(x, pd.DataFrame))
    return values


def _matched_columns(x, name: str, enc: Encoding, series: bool, train_name: str) -> list:
    """`_column_values` of a DataFrame (or a Series made one, `series`) or array ``x``."""
    p = enc.num_columns
    if isinstance(x, pd.DataFrame):
        if enc.named:
            by_name = {}
            for c in x.columns:
                by_name.setdefault(str(c), c)
            missing = [c.name for c in enc.columns if c.name not in by_name]
            if missing:
                msg = f'{name} lacks the training columns {missing}'
                if series:
                    msg += ' (it is a Series, read as one column; for one row of a DataFrame pass df.iloc[[i]])'
                raise ValueError(msg)
            return [x[by_name[c.name]] for c in enc.columns]
        if x.shape[1] != p:
            msg = f'{name} must have {p} columns like {train_name}, got {x.shape[1]}'
            raise ValueError(msg)
        return [x.iloc[:, j] for j in range(p)]
    arr = _numeric_array(x, name)
    if arr.shape[1] != p:
        raise ValueError(columns_message(name, p, arr.shape[1], np.ndim(x) == 1, train_name))
    return [arr[:, j] for j in range(p)]


class PositionalColumnsWarning(UserWarning):
    """New data's columns are matched to ``x_train``'s by position, because
    one of the two is a DataFrame and the other is not."""


def _warn_by_position(enc: Encoding, name: str, *, named_now: bool) -> None:
    """Warn, once per fit, that the columns of ``name`` are taken by position."""
    if enc.warned_by_position:
        return
    enc.warned_by_position = True
    if named_now:
        what = f'{name} is a DataFrame but x_train was not'
    else:
        what = f'x_train was a DataFrame (columns {enc.column_names[:5]}{"..." if enc.num_columns > 5 else ""}) but {name} is not'
    msg = (
        f'{what}: its {enc.num_columns} columns are taken by position, in the order of x_train, '
        'whatever their names; pass both as DataFrames to match columns by name, or both as arrays'
    )
    warnings.warn(msg, PositionalColumnsWarning, stacklevel=_warn.user_stacklevel())


def row_as_frame(x, enc: Encoding):
    """A Series of new data that is a row of a DataFrame with the training
    columns (``df.iloc[0]``, ``df.loc[key]``: its index holds the names of
    all the columns of a DataFrame ``x_train`` of several columns, and is
    not a range, which a column's index usually is) as a one-row
    DataFrame; anything else as it is (a Series is one column, as a 1-d
    array)."""
    if (
        isinstance(x, pd.Series)
        and enc.named
        and enc.num_columns > 1
        and not isinstance(x.index, pd.RangeIndex)
        and {c.name for c in enc.columns} <= {str(label) for label in x.index}
    ):
        return x.to_frame().T
    return x


def columns_message(name: str, p: int, got: int, one_dimensional: bool, train_name: str = 'x_train') -> str:
    """The error for an array with the wrong number of columns; a 1-d
    array is read as one column, which a single row passed flat is not."""
    msg = f'{name} must have {p} columns like {train_name}, got {got}'
    if one_dimensional and p > 1:
        msg += f' (a 1-d array is one column; for a single row of {p} values pass it as shape (1, {p}), e.g. x[None, :])'
    return msg
