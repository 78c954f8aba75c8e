"""One column of a DataFrame predictor: its kind, and its values as numbers
or as the codes of its levels (`bartz.encoding` puts the columns together).
"""

import numbers
import warnings

import numpy as np
import pandas as pd

from bartz.prep import checks

__all__ = ['CATEGORICAL', 'NUMERIC', 'column_kind', 'to_codes', 'to_float', 'warn_imputed']

NUMERIC = 'numeric'
CATEGORICAL = 'categorical'


def column_kind(series: pd.Series, label: str) -> tuple[str, list | None]:
    """'numeric' or 'categorical' (with the levels) for a DataFrame column."""
    dtype = series.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        levels = dtype.categories.tolist()
        for level in levels:
            if not isinstance(level, str | numbers.Real) or (isinstance(level, float) and not np.isfinite(level)):
                msg = f'{label}: categorical levels must be strings or finite numbers, got {level!r}'
                raise TypeError(msg)
        return CATEGORICAL, levels
    if pd.api.types.is_bool_dtype(dtype):
        return NUMERIC, None
    if pd.api.types.is_complex_dtype(dtype):
        msg = f'{label} has complex values; bartz needs real numbers'
        raise TypeError(msg)
    if pd.api.types.is_numeric_dtype(dtype):
        return NUMERIC, None
    if dtype == object or pd.api.types.is_string_dtype(dtype):
        present = [v for v in series.tolist() if not checks.is_missing(v)]
        if not present:
            msg = f'{label} has no values, all are missing'
            raise ValueError(msg)
        if all(isinstance(v, str) for v in present):
            return CATEGORICAL, sorted(set(present))
        if all(isinstance(v, bool | np.bool_) for v in present) or all(
            checks.is_number(v) and not isinstance(v, bool | np.bool_) for v in present
        ):
            return NUMERIC, None
        kinds = sorted({type(v).__name__ for v in present})
        what = f'mixes values of types {kinds}' if len(kinds) > 1 else f'has values of type {kinds[0]}'
        msg = f'{label} {what}; make it all numbers, or all strings (categories), e.g. with .astype(str)'
        raise TypeError(msg)
    msg = (
        f'{label} has dtype {dtype}, which bartz cannot use as a predictor; '
        'convert it to numbers (e.g. days since a date) or to a category first'
    )
    raise TypeError(msg)


def to_float(values, label: str) -> np.ndarray:
    """One column as float64, NaN where missing; inf is refused."""
    try:
        if isinstance(values, pd.Series):
            if isinstance(values.dtype, pd.CategoricalDtype):
                values = values.astype(object)
            col = values.to_numpy(dtype=np.float64, na_value=np.nan)
        else:
            col = np.asarray(values, dtype=np.float64)
    except OverflowError:
        msg = f'{label} has an integer too large for a float64 number; rescale it'
        raise ValueError(msg) from None
    except (TypeError, ValueError) as e:
        msg = f'{label} could not be converted to numbers ({e}); it was numeric in x_train'
        raise TypeError(msg) from e
    checks.check_finite(label, col, allow_nan=True, at='row')
    return col


def to_codes(values, levels, label: str) -> np.ndarray:
    """Index of each value in ``levels`` (matched by value), -1 where missing;
    a value not in ``levels`` is a `ValueError` naming it."""
    series = values if isinstance(values, pd.Series) else pd.Series(values)
    if isinstance(series.dtype, pd.CategoricalDtype):
        series = series.astype(object)
    missing = series.isna().to_numpy()
    codes = np.full(len(series), -1, np.intp)
    present = series[~missing]
    if len(present):
        index = pd.Index(list(levels), dtype=object)
        try:
            found = index.get_indexer(pd.Index(present.tolist(), dtype=object))
        except TypeError as e:  # unhashable values
            msg = f'{label} has values that cannot be matched to its levels: {e}'
            raise TypeError(msg) from e
        if np.any(found < 0):
            unseen = present.iloc[int(np.flatnonzero(found < 0)[0])]
            msg = f'{label} has the level {unseen!r}, not seen in x_train (levels: {list(levels)})'
            raise ValueError(msg)
        codes[~missing] = found
    return codes


def warn_imputed(label: str, what: str) -> None:
    """Warn that the missing values of `label`, which had none in x_train, are imputed with `what`."""
    msg = f'{label} has missing values but had none in x_train; they are imputed with {what}'
    warnings.warn(msg, stacklevel=4)
