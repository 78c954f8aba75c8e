"""R's ``surv.pre.bart``: the person-period data of discrete-time survival BART.

Sparapani, Logan, McCulloch & Laud (2016) model survival in discrete time.
With ``t_1 < ... < t_K`` the distinct observation times (or ``K``
quantiles of them), person ``i`` observed up to ``t_{n_i} = times[i]``
contributes one row per time ``t_j <= times[i]``, with the binary outcome
``y_ij = delta_i I[times[i] = t_j]``; the covariates of the row are
``(t_j, x_i)``, the time FIRST. A binary BART of ``y`` on ``(t, x)`` gives
the discrete hazards ``p(t_j, x)`` and the survival function ``S(t_j | x) =
prod_{l <= j} (1 - p(t_l, x))`` (`bartz.api.survival`).

`surv_pre_bart` builds that layout as R does, row for row: person after
person, times increasing within each person; ``tx_test`` is every row of
``x_test`` at every one of the ``K`` times (``K`` rows per person).
"""

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bartz import _warn
from bartz.prep import checks
from bartz.prep import encoding as encoding_mod

__all__ = ['SurvPre', 'surv_pre_bart']


@dataclass
class SurvPre:
    """What R's ``surv.pre.bart`` returns (R's names, ``.`` as ``_``).

    A mutable dataclass, as R's list, so that a script can edit
    ``tx_test`` (R's demos do) before predicting.
    """

    y_train: np.ndarray  # (m,) int64 0/1: an event at this row's time
    tx_train: np.ndarray | pd.DataFrame  # (m, p + 1): the time t_j, then the covariates of the person
    tx_test: np.ndarray | pd.DataFrame | None  # (n_test K, p + 1); None where R's is a 0 x 0 matrix
    times: np.ndarray  # (K,) the time grid t_1 < ... < t_K
    K: int  # number of grid times


def surv_pre_bart(times, delta, x_train=None, x_test=None, K=None, events=None, ztimes=None, zdelta=None):
    """The person-period data of survival BART, as R's ``BART::surv.pre.bart``.

    Parameters
    ----------
    times
        ``(N,)`` positive times of event or right-censoring.
    delta
        ``(N,)`` event indicators: 1 an event, 0 censored.
    x_train
        Optional ``(N, p)`` covariates (array or DataFrame); None is R's
        Kaplan-Meier analogue (time the only column).
    x_test
        Optional ``(n_test, p)`` covariates of the rows of ``tx_test``.
    K
        If given, the time grid is the ``K`` quantiles of ``times`` at
        ``1/K, ..., K/K`` (R's default quantile, repeats dropped) and each
        time is moved up to the first grid time at or after it.
    events
        If given (and ``K`` is not), the time grid (positive, increasing).
        A time not on the grid gives its person no event row, as R (with a
        warning saying how many events are lost).
    ztimes, zdelta
        Columns of ``x_train`` (0-based indices, or names of a DataFrame's
        columns; R: 1-based numbers) of time-dependent covariate pairs: the
        time ``z`` the covariate changes and its indicator ``d``. Each row
        gets ``d' = d I[t >= z]`` and the sojourn time ``t - d' z``, as R.

    Returns
    -------
    SurvPre
        ``y_train``, ``tx_train``, ``tx_test``, ``times`` (the grid) and
        ``K``. ``tx_train`` and ``tx_test`` are float64 arrays, or
        DataFrames when ``x_train`` is one, with columns ``'t'`` and then
        those of ``x_train`` (R: ``'t', 'x1', ...`` for an unnamed matrix).
        Without ``x_train``, ``tx_test`` is the ``K`` grid times (as R,
        ``x_test`` is ignored, with a warning); with ``x_train`` and no ``x_test`` it is None.

    Raises
    ------
    ValueError
        Lengths that differ (R's messages), no times, a time or grid
        point at or below zero (R's message), ``delta`` not 0/1, ``events``
        not increasing, an ``x_test`` whose columns (or levels) a fit on
        ``x_train`` could not predict at.

    Examples
    --------
    >>> pre = surv_pre_bart([2.0, 1.0, 2.0], [1, 0, 0])
    >>> pre.y_train
    array([0, 1, 0, 0, 0])
    >>> pre.tx_train[:, 0]
    array([1., 2., 1., 1., 2.])

    References
    ----------
    Sparapani, Logan, McCulloch & Laud (2016), Nonparametric survival
    analysis using Bayesian Additive Regression Trees (BART), Stat. Med.
    35(16).
    """
    times, delta = _check_times(times, delta)
    x_train = check_covariates('x_train', x_train, times.size)
    if x_train is None and x_test is not None and checks.num_rows(x_test):
        warnings.warn('x_test is ignored without x_train: as R, tx_test is then the grid times alone',
                      stacklevel=_warn.user_stacklevel())  # fmt: skip
    x_test = None if x_train is None else check_covariates('x_test', x_test, None)
    if x_test is not None:
        check_like_train('x_test', x_test, 'x_train', x_train)
    pairs = _check_pairs(ztimes, zdelta, x_train)
    times, grid = _time_grid(times, K, events)
    person, j = _person_periods(times, grid)
    y_train = (delta[person] * (times[person] == grid[j])).astype(np.int64)
    dropped = int(delta.sum() - y_train.sum())
    if dropped:
        warnings.warn(f'{dropped} of the {int(delta.sum())} events are at times not on the events grid and get '
                      'no event row (as R): give a grid that holds every event time, or K', stacklevel=_warn.user_stacklevel())
    tx_train = _with_time(grid[j], x_train, person)
    if x_train is None:
        tx_test = _with_time(grid, None, None)
    elif x_test is not None:
        n_test = checks.num_rows(x_test)
        tx_test = _with_time(np.tile(grid, n_test), x_test, np.repeat(np.arange(n_test), grid.size))
    else:
        tx_test = None
    for z, d in pairs:
        tx_train = _time_dependent(tx_train, z, d)
        if x_test is not None:
            tx_test = _time_dependent(tx_test, z, d)
    return SurvPre(y_train, tx_train, tx_test, grid, int(grid.size))


def _check_times(times, delta):
    """`times` and `delta` as float64 vectors, with R's checks."""
    times = checks.as_vector('times', times, checks.num_rows(times))
    if times.size == 0:
        msg = 'times must have at least one value (one per person), got none'
        raise ValueError(msg)
    if checks.num_rows(delta) != times.size:
        msg = 'The length of times and delta must be identical'
        raise ValueError(msg)
    delta = checks.as_vector('delta', delta, times.size)
    if not np.isin(delta, (0, 1)).all():
        bad = delta[~np.isin(delta, (0, 1))][0]
        msg = f'delta must be 0 (censored) or 1 (event), got {bad!r}'
        raise ValueError(msg)
    return times, delta


def check_covariates(name, x, n):
    """`x` as a 2-D float64 array or a DataFrame (None stays None)."""
    if x is None:
        return None
    if isinstance(x, pd.Series):
        x = x.to_frame()
    if not isinstance(x, pd.DataFrame):
        x = np.asarray(x)
        if x.ndim == 1:
            x = x[:, None]
        checks.check_ndim(name, x, 2, 'a 2-D (rows, columns) array')
        checks.check_numeric(name, x, hint=' (pass a DataFrame for categorical columns)')
        x = x.astype(np.float64)
    if x.shape[1] == 0 or x.shape[0] == 0:
        return None
    if n is not None and x.shape[0] != n:
        msg = 'The length of times and the number of rows in x.train, if any, must be identical'
        raise ValueError(msg)
    return x


def check_like_train(name, x, train_name, x_train):
    """Refuse covariates `x` that a fit on `x_train` could not predict at
    (other columns, a level it never saw), before the fit rather than after it."""
    with warnings.catch_warnings():
        # imputation and column-order warnings come again, once, when the fit predicts
        warnings.simplefilter('ignore')
        encoding_mod.fit_encoding(x_train, train_name).encode(x, name, train_name)


def _check_pairs(ztimes, zdelta, x_train):
    """The (time, indicator) column pairs as column positions in ``tx``."""
    ztimes = [] if ztimes is None else list(np.atleast_1d(ztimes))
    zdelta = [] if zdelta is None else list(np.atleast_1d(zdelta))
    if len(ztimes) != len(zdelta):
        msg = 'The length of ztimes and zdelta, if any, must be identical'
        raise ValueError(msg)
    if ztimes and x_train is None:
        msg = 'ztimes and zdelta name columns of x_train, but x_train is None'
        raise ValueError(msg)
    columns = list(x_train.columns) if isinstance(x_train, pd.DataFrame) else None

    def position(name, c):
        if columns is not None and c in columns:
            return columns.index(c) + 1
        if isinstance(c, int | np.integer) and 0 <= c < x_train.shape[1]:
            return int(c) + 1
        msg = f'{name} must hold columns of x_train (0-based indices or names), got {c!r}'
        raise ValueError(msg)

    return [(position('ztimes', z), position('zdelta', d)) for z, d in zip(ztimes, zdelta, strict=True)]


def _time_grid(times, K, events):
    """R's grid: ``K`` quantiles (times moved up onto it), ``events``, or the distinct times."""
    if K is not None:
        K = checks._check_int('K', K, 1)
        # R's quantile() default (type 7) is numpy's 'linear'
        grid = np.unique(np.quantile(times, np.arange(1, K + 1) / K))
        times = grid[np.searchsorted(grid, times, side='left')]
    elif events is not None:
        grid = checks.as_vector('events', events, checks.num_rows(events))
        if grid.size == 0 or np.any(np.diff(grid) <= 0):
            msg = f'events must be a non-empty increasing sequence of times, got {grid!r}'
            raise ValueError(msg)
    else:
        grid = np.unique(times)
    if grid[0] <= 0:
        msg = 'Time points exist less than or equal to time zero.'
        raise ValueError(msg)
    return times, grid


def _person_periods(times, grid):
    """For each person-period row, the person and the index of its grid time."""
    counts = np.searchsorted(grid, times, side='right')  # grid times <= each person's time
    person = np.repeat(np.arange(times.size), counts)
    first = np.cumsum(counts) - counts
    j = np.arange(person.size) - first[person]
    return person, j


def _with_time(t, x, rows):
    """The time column ``t`` followed by the rows `rows` of `x`."""
    if x is None:
        return np.asarray(t, np.float64)[:, None]
    if isinstance(x, pd.DataFrame):
        if 't' in x.columns:
            msg = "x_train must not have a column named 't': surv_pre_bart names the time column 't'"
            raise ValueError(msg)
        body = x.iloc[rows].reset_index(drop=True)
        body.insert(0, 't', np.asarray(t, np.float64))
        return body
    return np.column_stack([t, x[rows]])


def _time_dependent(tx, z, d):
    """R's time-dependent covariate pair: the indicator becomes ``d I[t >= z]``,
    then the time ``t - d z`` (with the new ``d``)."""
    frame = isinstance(tx, pd.DataFrame)
    t, zt, dt = (np.asarray(tx.iloc[:, c] if frame else tx[:, c], np.float64) for c in (0, z, d))
    new_d = dt * (t >= zt)
    new_z = t - new_d * zt
    if frame:
        tx = tx.copy()
        tx.iloc[:, d], tx.iloc[:, z] = new_d, new_z
        return tx
    tx = tx.copy()
    tx[:, d], tx[:, z] = new_d, new_z
    return tx
