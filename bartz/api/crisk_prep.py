"""R's ``crisk.pre.bart``: the person-period data of competing-risks BART,
and the rows of the two binary fits of `crisk_bart` and `crisk2_bart`.

With ``delta`` 0 (censored), 1 (cause 1) or 2 (cause 2), the rows are those
of `bartz.surv_pre_bart` (person after person, times increasing, the time
the first column): ``y_train`` flags a cause-1 event at the row's time,
``y_train2`` a cause-2 event, and ``cond`` (0-based; R: 1-based) the rows
with no cause-1 event, those at risk of cause 2. `crisk2_bart`'s layout
(R builds it inline): any event vs none on every row, then cause 1 vs
cause 2 on the rows with an event.
"""

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

from bartz.api import survival
from bartz.api.survival_prep import check_covariates, check_like_train, surv_pre_bart
from bartz.prep import checks

__all__ = ['CriskPre', 'crisk_pre_bart']


@dataclass
class CriskPre:
    """What R's ``crisk.pre.bart`` returns (R's names, ``.`` as ``_``)."""

    y_train: np.ndarray  # (m,) int64 0/1: a cause-1 event at this row's time
    y_train2: np.ndarray  # (m,) int64 0/1: a cause-2 event at this row's time
    tx_train: np.ndarray | pd.DataFrame  # (m, p + 1) the time, then the covariates of cause 1
    tx_train2: np.ndarray | pd.DataFrame  # (m, p2 + 1) the time, then the covariates of cause 2
    tx_test: np.ndarray | pd.DataFrame | None  # (n_test K, p + 1); None without x_test
    tx_test2: np.ndarray | pd.DataFrame | None  # (n_test K, p2 + 1); None without x_test2
    times: np.ndarray  # (K,) the time grid
    K: int  # number of grid times
    cond: np.ndarray  # 0-based indices of the rows with y_train == 0 (at risk of cause 2)


def crisk_pre_bart(times, delta, x_train=None, x_test=None, x_train2=None, x_test2=None, K=None) -> CriskPre:
    """The person-period data of competing-risks BART, as R's ``BART::crisk.pre.bart``.

    `bartz.surv_pre_bart` of the cause-1 events (``delta == 1``) with
    ``x_train``, ``x_test``, and of the cause-2 events (``delta == 2``)
    with ``x_train2``, ``x_test2``, on the same grid.

    Parameters
    ----------
    times
        ``(N,)`` positive times of event or right-censoring.
    delta
        ``(N,)`` 0 (censored), 1 (cause 1) or 2 (cause 2); both causes
        must occur, as R.
    x_train, x_test
        Covariates of cause 1 (``(N, p)``, ``(n_test, p)``), as
        `bartz.surv_pre_bart`.
    x_train2, x_test2
        Covariates of cause 2; None: those of cause 1 (R's default).
    K
        If given, the grid is ``K`` quantiles of ``times`` (as
        `bartz.surv_pre_bart`).

    Returns
    -------
    CriskPre

    Raises
    ------
    ValueError
        ``delta`` not coded 0/1/2 with both causes (R's message), row
        counts that differ, and what `bartz.surv_pre_bart` refuses.

    Examples
    --------
    >>> pre = crisk_pre_bart([2.0, 1.0, 3.0], [1, 0, 2])
    >>> pre.y_train, pre.y_train2
    (array([0, 1, 0, 0, 0, 0]), array([0, 0, 0, 0, 0, 1]))
    >>> pre.cond
    array([0, 2, 3, 4, 5])
    """
    delta = _check_delta(times, delta)
    x_train2, x_test2 = _cause2_covariates(x_train, x_test, x_train2, x_test2)
    pre = surv_pre_bart(times, (delta == 1).astype(np.int64), x_train, x_test, K=K)
    pre2 = surv_pre_bart(times, (delta == 2).astype(np.int64), x_train2, x_test2, K=K)
    return CriskPre(
        pre.y_train, pre2.y_train, pre.tx_train, pre2.tx_train, pre.tx_test, pre2.tx_test, pre.times, pre.K,
        np.flatnonzero(pre.y_train == 0),
    )


def _check_delta(times, delta) -> np.ndarray:
    """R's coding of ``delta``: 0, 1, 2 with both causes present."""
    if checks.num_rows(delta) != checks.num_rows(times):
        msg = 'The length of times and delta must be identical'
        raise ValueError(msg)
    delta = checks.as_vector('delta', delta, checks.num_rows(times))
    codes = set(np.unique(delta).tolist())
    if not codes <= {0, 1, 2} or not {1, 2} <= codes:
        msg = f'delta must be coded as: 0(censored), 1(cause 1) or 2(cause 2), both causes present; got {sorted(codes)}'
        raise ValueError(msg)
    return delta


def _cause2_covariates(x_train, x_test, x_train2, x_test2):
    """The covariates of cause 2 (those of cause 1 where not given, as R),
    checked against cause 1's rows and, for the test rows, against the
    columns of ``x_train2`` before any fit."""
    name2 = 'x_train2' if x_train2 is not None else 'x_train2 (x_train, its default)'
    test_name2 = 'x_test2' if x_test2 is not None else 'x_test2 (x_test, its default)'
    x_train2 = x_train if x_train2 is None else x_train2
    x_test2 = x_test if x_test2 is None else x_test2
    _check_same_rows('x_train', x_train, 'x_train2', x_train2)
    _check_same_rows('x_test', x_test, 'x_test2', x_test2)
    test2 = None if x_train2 is None else check_covariates(test_name2, x_test2, None)
    if test2 is not None:
        check_like_train(test_name2, test2, name2, check_covariates(name2, x_train2, None))
    return x_train2, x_test2


def _check_same_rows(name, x, name2, x2):
    if x is not None and x2 is not None and checks.num_rows(x) != checks.num_rows(x2):
        msg = f'number of rows in {name} and {name2} must be equal, got {checks.num_rows(x)} and {checks.num_rows(x2)}'
        raise ValueError(msg)



class Layout(NamedTuple):
    """The rows of the two binary fits and of the test grids."""

    tx_train: np.ndarray | pd.DataFrame  # rows of the first fit
    y_train: np.ndarray  # its 0/1 outcome
    tx_train2: np.ndarray | pd.DataFrame  # rows given for the second fit
    y_train2: np.ndarray  # their 0/1 outcome
    cond: np.ndarray | None  # the rows of tx_train2 the second fit runs on; None: all
    tx_test: np.ndarray | pd.DataFrame | None
    tx_test2: np.ndarray | pd.DataFrame | None
    times: np.ndarray
    K: int



def take_rows(x, rows):
    """Rows of an array or a DataFrame (by position)."""
    return x.iloc[rows] if isinstance(x, pd.DataFrame) else np.asarray(x)[rows]



def crisk_layout(x_train, y_train, x_train2, y_train2, times, delta, K, x_test, x_test2, cond) -> Layout:
    """`crisk_bart`'s rows: `crisk_pre_bart`, or the expanded rows given (R's two cases)."""
    if y_train is None:
        _need_times(times, delta, 'crisk_bart')
        pre = crisk_pre_bart(times, delta, x_train, x_test, x_train2, x_test2, K=K)
        cond = pre.cond if cond is None else _check_cond(cond, pre.y_train.size)
        return Layout(pre.tx_train, pre.y_train, pre.tx_train2, pre.y_train2, cond, pre.tx_test, pre.tx_test2,
                      pre.times, pre.K)  # fmt: skip
    tx, y, tx2, y2, tx_test, tx_test2, grid = _given_rows(x_train, y_train, x_train2, y_train2, x_test, x_test2)
    _check_same_rows('x_train', tx, 'x_train2', tx2)
    cond = np.flatnonzero(y == 0) if cond is None else _check_cond(cond, y.size)
    return Layout(tx, y, tx2, y2, cond, tx_test, tx_test2, grid, int(grid.size))


def crisk2_layout(x_train, y_train, x_train2, y_train2, times, delta, K, x_test, x_test2, cond=None) -> Layout:
    """`crisk2_bart`'s rows: any event vs none on every row, then cause 1 vs 2
    on the rows with an event (R's ``crisk2.bart``), or the expanded rows given."""
    if y_train is None:
        _need_times(times, delta, 'crisk2_bart')
        delta = _check_delta(times, delta)
        x_train2, x_test2 = _cause2_covariates(x_train, x_test, x_train2, x_test2)
        pre = surv_pre_bart(times, (delta > 0).astype(np.int64), x_train, x_test, K=K)
        pre2 = surv_pre_bart(times, (delta == 1).astype(np.int64), x_train2, x_test2, K=K)
        event = np.flatnonzero(pre.y_train == 1)
        return Layout(pre.tx_train, pre.y_train, take_rows(pre2.tx_train, event), pre2.y_train[event], None,
                      pre.tx_test, pre2.tx_test, pre.times, pre.K)  # fmt: skip
    tx, y, tx2, y2, tx_test, tx_test2, grid = _given_rows(x_train, y_train, x_train2, y_train2, x_test, x_test2)
    return Layout(tx, y, tx2, y2, None, tx_test, tx_test2, grid, int(grid.size))


def _need_times(times, delta, name):
    if times is None or delta is None:
        msg = f'{name} needs times and delta (or y_train with x_train already expanded), got None'
        raise ValueError(msg)


def _given_rows(x_train, y_train, x_train2, y_train2, x_test, x_test2):
    """Expanded rows given by the user (the time first), checked."""
    if x_train is None:
        msg = 'with y_train given, x_train must be the expanded rows (time first), got None'
        raise ValueError(msg)
    if y_train2 is None:
        msg = 'with y_train given, y_train2 must be given too (the outcome of the second fit), got None'
        raise ValueError(msg)
    x_train2 = x_train if x_train2 is None else x_train2
    x_test2 = x_test if x_test2 is None else x_test2
    y = _binary('y_train', y_train, checks.num_rows(x_train))
    y2 = _binary('y_train2', y_train2, checks.num_rows(x_train2))
    grid = np.unique(survival.first_column(x_train))
    _check_same_rows('x_test', x_test, 'x_test2', x_test2)
    if x_test is not None and checks.num_rows(x_test):
        check_like_train('x_test', x_test, 'x_train', x_train)
        check_like_train('x_test2', x_test2, 'x_train2', x_train2)
    return x_train, y, x_train2, y2, x_test, x_test2, grid


def _binary(name, y, n) -> np.ndarray:
    y = checks.as_vector(name, y, n)
    if not np.isin(y, (0, 1)).all():
        msg = f'{name} must be 0/1 (make sure you specify times=times & delta=delta), got {np.unique(y)[:5].tolist()}'
        raise ValueError(msg)
    return y.astype(np.int64)


def _check_cond(cond, n) -> np.ndarray:
    """``cond`` as 0-based row indices within ``0, ..., n - 1``."""
    cond = np.asarray(cond)
    if cond.ndim != 1 or not np.issubdtype(cond.dtype, np.integer) or cond.size == 0:
        msg = f'cond must be a non-empty 1-D array of 0-based row indices, got {cond!r}'
        raise ValueError(msg)
    if cond.min() < 0 or cond.max() >= n:
        msg = f'cond must hold row indices in [0, {n}), got values from {cond.min()} to {cond.max()}'
        raise ValueError(msg)
    return cond
