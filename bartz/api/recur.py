"""R's recurrent-events BART: `recur_pre_bart`, `recur_bart`, `mc_recur_bart`, R's predict.

The model (Sparapani, Rein, Tarima, Jackson & Meurer 2020) is in discrete
time, as survival BART (`bartz.api.survival`). On the grid ``t_1 < ... <
t_K`` of the distinct event and end-of-follow-up times, subject ``i`` is at
risk at every ``t_j`` up to the end of its follow-up, and a binary BART
(probit ``'pbart'``, the default, or logistic ``'lbart'``) of the event
indicators ``y_ij`` on ``(t_j, v_i(t_j), N_i(t_j-), x_i)`` gives

    p(t_j, x) = P(event at t_j | history, x) = F(offset + f(t_j, v, N, x)),

with ``v`` the time since the last event (or since 0) and ``N(t-)`` the
number of events before ``t_j``. As R, the hazard and the cumulative hazard
are

    h(t_j | x) = p(t_j, x) / (t_j - t_{j-1})   (t_0 = 0),
    Lambda(t_j | x) = sum_{l <= j} p(t_l, x),

the running sum taken along the rows of ``tx`` and restarted at each row at
the first grid time (R's rule: rows of one subject in time order).

`recur_bart` expands the data with `recur_pre_bart` and fits `bartz.gbart`
on it; the test grid is predicted a block of rows at a time (the device
memory is bounded by `bartz.BARTFit.predict`, the block bounds the host's
temporaries).
"""

import warnings
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

from bartz.api import familyio, rfamily, survival
from bartz.api.gbart import gbart
from bartz.api.survival_prep import check_covariates, check_like_train
from bartz.forest import grove
from bartz.prep import checks

__all__ = ['RecurBARTFit', 'RecurPre', 'RecurPrediction', 'mc_recur_bart', 'recur_bart', 'recur_pre_bart']

# host bytes per draw and row of a block: the float32 latent and hazard draws, the float64
# temporaries of the probability, hazard and cumulative hazard
_BYTES_PER_CELL = 3 * 4 + 3 * 8


@dataclass
class RecurPre:
    """What R's ``recur.pre.bart`` returns (R's names, ``.`` as ``_``); mutable, as R's list."""

    y_train: np.ndarray  # (m,) int64 0/1: an event at this row's time
    tx_train: np.ndarray | pd.DataFrame  # (m, p + 3): t, v (time since the last event), N (events before t), x
    tx_test: np.ndarray | pd.DataFrame  # (N K, p + 3): every subject at every grid time, same columns
    times: np.ndarray  # (K,) the time grid t_1 < ... < t_K
    K: int  # number of grid times


def recur_pre_bart(times, delta, x_train=None, tstop=None, last_value=True):
    """The counting-process data of recurrent-events BART, as R's ``BART::recur.pre.bart``.

    Parameters
    ----------
    times
        ``(N, J)`` times of the events of each subject, NaN where a
        subject has fewer than ``J`` (a vector is one column). The end of
        a subject's follow-up is the largest of its times (R's ``stop``
        column): the last time is a censoring time where its ``delta``
        is 0.
    delta
        ``(N, J)`` indicators: 1 an event at that time, 0 none; NaN
        where ``times`` is.
    x_train
        Optional ``(N, p)`` covariates (array or DataFrame), constant in
        time; None is R's Kaplan-Meier analogue.
    tstop
        Optional ``(N, J)`` ends of non-instantaneous events: between
        ``times[i, j]`` and ``tstop[i, j]`` the subject is not at risk
        (0 or NaN: no such interval); none before its ``times``. Their
        values join the grid, as R.
    last_value
        With False, the rows of ``tx_test`` after a subject's follow-up
        have ``v`` and ``N`` NaN (R's NA, R's rule at the last time); with
        True (the default) they carry on from the last follow-up time.

    Returns
    -------
    RecurPre
        ``y_train``, ``tx_train``, ``tx_test``, ``times`` (the grid) and
        ``K``. ``tx_train`` has one row per subject and grid time up to the
        end of its follow-up (rows in a ``tstop`` interval left out),
        subject after subject; ``tx_test`` has ``K`` rows per subject.
        Columns ``t, v, N`` then those of ``x_train``: float64 arrays, or
        DataFrames when ``x_train`` is one (R: ``x1, ...`` names for an
        unnamed matrix).

    Raises
    ------
    ValueError
        Shapes that differ, ``delta`` not 0/1, a subject without a time,
        a ``tstop`` before its time.

    Examples
    --------
    >>> pre = recur_pre_bart([[1.0, 3.0], [2.0, np.nan]], [[1, 0], [1, np.nan]])
    >>> pre.times
    array([1., 2., 3.])
    >>> pre.y_train
    array([1, 0, 0, 0, 1])
    >>> pre.tx_train
    array([[1., 1., 0.],
           [2., 1., 1.],
           [3., 2., 1.],
           [1., 1., 0.],
           [2., 2., 0.]])

    References
    ----------
    Sparapani, Rein, Tarima, Jackson & Meurer (2020), Non-parametric
    recurrent events analysis with BART and an application to the hospital
    admissions of patients with diabetes, Biostatistics 21(1).
    """
    times, delta, tstop = _check_recur(times, delta, tstop)
    x_train = check_covariates('x_train', x_train, times.shape[0])
    checks._check_bool('last_value', last_value)
    stop = np.nanmax(times, axis=1)
    grid = np.unique(np.concatenate([times[~np.isnan(times)], tstop[~np.isnan(tstop)]]))
    grid = grid[grid != 0]
    events = _event_counts(times, delta, grid)
    v, n_before = _history(events, grid)
    if not last_value:
        _blank_after_follow_up(v, n_before, times, delta, stop, grid)
    at_risk = grid[None, :] <= stop[:, None]
    at_risk &= ~_in_event_interval(times, tstop, grid)
    y_train = (events[at_risk] > 0).astype(np.int64)
    person, j = np.nonzero(at_risk)
    tx_train = _columns(grid[j], v[person, j], n_before[person, j], x_train, person)
    n_subjects = times.shape[0]
    tx_test = _columns(np.tile(grid, n_subjects), v.ravel(), n_before.ravel(), x_train,
                       np.repeat(np.arange(n_subjects), grid.size))
    return RecurPre(y_train, tx_train, tx_test, grid, int(grid.size))


def _check_recur(times, delta, tstop):
    """`times`, `delta` (and `tstop`, NaN without it) as ``(N, J)`` float64 matrices."""
    def matrix(name, value):
        value = np.asarray(value.to_numpy() if isinstance(value, pd.DataFrame | pd.Series) else value, np.float64)
        if value.ndim == 1:
            value = value[:, None]
        if value.ndim != 2 or value.shape[0] == 0:
            msg = f'{name} must be a non-empty (subjects, events) matrix, got shape {value.shape}'
            raise ValueError(msg)
        return value

    times, delta = matrix('times', times), matrix('delta', delta)
    if times.shape[0] != delta.shape[0]:
        msg = 'The number of rows in times and delta must be identical'
        raise ValueError(msg)
    if times.shape != delta.shape:
        msg = f'times and delta must have the same shape, got {times.shape} and {delta.shape}'
        raise ValueError(msg)
    valid = ~np.isnan(delta)
    if not np.isin(delta[valid], (0, 1)).all():
        msg = f'delta must be 0 (no event) or 1 (event) or NaN, got {delta[valid][~np.isin(delta[valid], (0, 1))][0]!r}'
        raise ValueError(msg)
    if np.isnan(times).all(axis=1).any() or np.any(times[~np.isnan(times)] < 0):
        msg = 'times must have, for each subject, at least one time, and no time below 0'
        raise ValueError(msg)
    if tstop is None:
        return times, delta, np.full_like(times, np.nan)
    tstop = matrix('tstop', tstop)
    if tstop.shape != times.shape:
        msg = f'tstop must have the shape of times, {times.shape}, got {tstop.shape}'
        raise ValueError(msg)
    stops = ~np.isnan(times) & ~np.isnan(tstop) & (tstop != 0)
    if np.any(stops & (tstop < times)):
        i, h = np.argwhere(stops & (tstop < times))[0]
        msg = (
            'tstop must be at or after times (the end of the interval an event starts), '
            f'got {float(tstop[i, h]):g} < {float(times[i, h]):g} at [{i}, {h}]'
        )
        raise ValueError(msg)
    return times, delta, tstop


def _event_counts(times, delta, grid) -> np.ndarray:
    """``(N, K)`` number of events of each subject at each grid time."""
    is_event = ~np.isnan(times) & (delta == 1)
    person, h = np.nonzero(is_event)
    counts = np.zeros((times.shape[0], grid.size), np.int64)
    np.add.at(counts, (person, np.searchsorted(grid, times[person, h])), 1)
    return counts


def _history(events, grid):
    """``v(t_j)``, the time since the last event before ``t_j`` (or since 0),
    and ``N(t_j-)``, the number of events before ``t_j``: ``(N, K)`` float64."""
    n_before = np.cumsum(events, axis=1) - events
    last = np.where(events > 0, grid[None, :], 0.0)
    last = np.maximum.accumulate(last, axis=1)
    last_before = np.concatenate([np.zeros((events.shape[0], 1)), last[:, :-1]], axis=1)
    return grid[None, :] - last_before, n_before.astype(np.float64)


def _blank_after_follow_up(v, n_before, times, delta, stop, grid):
    """R's ``last.value=FALSE``: at the last follow-up time each of the subject's
    time slots either counts its event or, if it has none there, sets the history to
    NA (NaN); the rows after that time carry the result."""
    for i in range(times.shape[0]):
        j = int(np.searchsorted(grid, stop[i]))
        if j + 1 >= grid.size:
            continue
        n, t0 = n_before[i, j], grid[j] - v[i, j]
        for h in range(times.shape[1]):
            if times[i, h] == grid[j] and delta[i, h] == 1:
                n, t0 = n + 1, grid[j]
            else:
                n, t0 = np.nan, np.nan
        n_before[i, j + 1:] = n
        v[i, j + 1:] = grid[j + 1:] - t0


def _in_event_interval(times, tstop, grid) -> np.ndarray:
    """``(N, K)`` True where ``times[i, h] < t_j <= tstop[i, h]`` for some event ``h``."""
    gap = ~np.isnan(times) & ~np.isnan(tstop) & (tstop != 0)
    inside = np.zeros((times.shape[0], grid.size), bool)
    for h in range(times.shape[1]):  # one event slot at a time: (N, K) temporaries, not (N, J, K)
        inside |= gap[:, h, None] & (times[:, h, None] < grid) & (grid <= tstop[:, h, None])
    return inside


def _columns(t, v, n_before, x, rows):
    """The columns ``t, v, N`` followed by the rows `rows` of `x`."""
    head = np.column_stack([t, v, n_before])
    if x is None:
        return head
    if isinstance(x, pd.DataFrame):
        clash = sorted({'t', 'v', 'N'} & set(x.columns))
        if clash:
            msg = f"x_train must not have columns named {clash}: recur_pre_bart names its columns 't', 'v', 'N'"
            raise ValueError(msg)
        body = x.iloc[rows].reset_index(drop=True)
        for position, name in enumerate('tvN'):
            body.insert(position, name, head[:, position])
        return body
    return np.column_stack([head, x[rows]])


# ---------------------------------------------------------------- the fit


class RecurPrediction(NamedTuple):
    """What R's ``predict.recurbart`` returns (R's names, ``.`` as ``_``)."""

    yhat_test: np.ndarray | None  # (ndpost, m) float32 latent draws, offset included; None with kind='mean'
    tx_test: np.ndarray | pd.DataFrame  # (m, p + 3) the rows predicted at (R's newdata)
    times: np.ndarray  # (K,) the distinct times of newdata's first column (R's rule)
    K: int  # number of those times
    prob_test: np.ndarray | None  # (ndpost, m) float32 draws of p(t, x); None with kind='mean'
    prob_test_mean: np.ndarray  # (m,) float64 posterior mean of p(t, x)
    haz_test: np.ndarray | None  # (ndpost, m) float32 draws of the hazard h(t | x); None with kind='mean'
    haz_test_mean: np.ndarray  # (m,) float64 posterior mean of h(t | x)
    cum_test: np.ndarray | None  # (ndpost, m) float32 draws of the cumulative hazard; None with kind='mean'
    cum_test_mean: np.ndarray  # (m,) float64 posterior mean of the cumulative hazard
    binary_offset: float  # R's binaryOffset: the fit's offset


class RecurBARTFit(familyio.Saveable):
    """The result of `recur_bart` and `mc_recur_bart`, R's ``recurbart`` list.

    The attributes R's ``recur.bart`` adds are declared in ``__slots__``; the
    rest of R's list (``yhat_train``, ``prob_train``, ``varcount``,
    ``varprob``, ``offset``, ``ndpost``, ``treedraws()``, ...) are those of
    the underlying `bartz.BARTFit`, ``fit``, read through.
    """

    __slots__ = {
        'fit': 'bartz.BARTFit: the binary BART of y_train on tx_train',
        'type': "'pbart' (probit) or 'lbart' (logistic)",
        'times': '(K,) the time grid t_1 < ... < t_K',
        'K': 'number of grid times',
        'tx_train': '(m, p + 3) the rows fitted: t, v, N, then the covariates',
        'haz_train': '(ndpost, m) float32 draws of the hazard at tx_train; None with keeptrainfits=False',
        'haz_train_mean': '(m,) their posterior mean',
        'cum_train': '(ndpost, m) float32 draws of the cumulative hazard at tx_train; None likewise',
        'cum_train_mean': '(m,) their posterior mean',
        'tx_test': '(m_test, p + 3) the test rows (R: every subject at every grid time); None without them',
        'yhat_test': '(ndpost, m_test) float32 latent draws at tx_test, offset included; None without them',
        'yhat_test_mean': '(m_test,) their posterior mean',
        'prob_test': '(ndpost, m_test) float32 draws of p(t, x) at tx_test; None without them',
        'prob_test_mean': '(m_test,) their posterior mean',
        'haz_test': '(ndpost, m_test) float32 draws of the hazard at tx_test; None with x_test_nogrid',
        'haz_test_mean': '(m_test,) their posterior mean',
        'cum_test': '(ndpost, m_test) float32 draws of the cumulative hazard at tx_test; None likewise',
        'cum_test_mean': '(m_test,) their posterior mean',
    }

    def __init__(self, **attributes):
        for name in self.__slots__:
            setattr(self, name, attributes.pop(name, None))
        if attributes:
            msg = f'RecurBARTFit has no attribute(s) {sorted(attributes)}'
            raise TypeError(msg)

    def __getattr__(self, name):
        # only reached for names that are not slots: R's other entries, on the BARTFit
        if name.startswith('_') or name == 'fit':
            raise AttributeError(name)
        return getattr(self.fit, name)

    def __repr__(self):
        m_test = 0 if self.tx_test is None else checks.num_rows(self.tx_test)
        return f'RecurBARTFit(type={self.type!r}, K={self.K}, m_test={m_test}, fit={self.fit!r})'

    def r_predict(self, newdata, *, max_memory=grove.DEFAULT_MAX_MEMORY, kind='draws') -> RecurPrediction:
        """R's ``predict(object, newdata)`` for recurrent-events BART (``predict.recurbart``).

        Parameters
        ----------
        newdata
            ``(m, p + 3)`` rows in R's ``tx_test`` layout (``t, v, N``,
            then the covariates), each subject's rows in time order from
            the first grid time (checked: the cumulative hazard is a
            running sum along the rows); the grid is the distinct values of
            the first column, as R.
        max_memory
            Bytes of temporary memory, on the device (as
            `bartz.BARTFit.predict`) and on the host for each block of rows.
        kind
            ``'draws'`` (R's result) or ``'mean'``: only the posterior
            means, in memory that does not grow with ``ndpost`` times ``m``.

        Returns
        -------
        RecurPrediction
        """
        max_memory = checks._check_int('max_memory', max_memory, 1)
        if kind not in ('draws', 'mean'):
            msg = f"kind must be 'draws' or 'mean', got {kind!r}"
            raise ValueError(msg)
        newdata = newdata if isinstance(newdata, pd.DataFrame) else np.asarray(newdata)
        if checks.num_rows(newdata) == 0 or np.ndim(newdata) != 2:
            msg = f'newdata must be 2-D rows in tx_test layout (t, v, N, covariates), got shape {np.shape(newdata)}'
            raise ValueError(msg)
        grid = np.unique(survival.first_column(newdata))
        out = _hazards(self.fit, newdata, grid, max_memory, keep_draws=kind == 'draws', with_grid=True,
                       name='newdata')
        return RecurPrediction(
            out['yhat_test'], newdata, grid, int(grid.size), out['prob_test'], out['prob_test_mean'],
            out['haz_test'], out['haz_test_mean'], out['cum_test'], out['cum_test_mean'], float(self.fit.offset),
        )


def recur_bart(
    x_train=None,
    y_train=None,
    times=None,
    delta=None,
    x_test=None,
    x_test_nogrid=False,
    *,
    sparse=False,
    theta=0,
    omega=1,
    a=0.5,
    b=1,
    augment=False,
    rho=None,
    xinfo=None,
    usequants=False,
    rm_const=True,
    type='pbart',  # noqa: A002
    k=2.0,
    power=2.0,
    base=0.95,
    offset=None,
    tau_num=None,
    ntree=50,
    numcut=100,
    ndpost=1000,
    nskip=250,
    keepevery=10,
    printevery=100,
    keeptrainfits=True,
    seed=99,
    nice=19,
    keep_test_draws=True,
    **options,
) -> RecurBARTFit:
    """Recurrent-events analysis with BART, as R's ``BART::recur.bart``.

    With ``y_train`` None, ``times`` and ``delta`` (``(N, J)`` matrices, and
    the covariates ``x_train``) are expanded by `recur_pre_bart`, and the
    test rows are R's: every training subject at every grid time (R's
    ``tx.test``; as R, ``x_test`` is then ignored, with a warning). With
    ``y_train`` given, ``x_train`` and ``x_test`` are taken as already
    expanded (columns ``t, v, N``, covariates) and the grid is the distinct
    times of ``x_train``'s first column. Then `bartz.gbart` runs the binary
    BART, and the hazard and cumulative hazard follow (module docstring).

    R's arguments and defaults (``.`` becomes ``_``): ``type='pbart'`` (or
    ``'lbart'``), 50 trees, ``ndpost=1000``, ``nskip=250``,
    ``keepevery=10``, ``tau_num`` 3 (pbart) or 6 (lbart), ``offset``
    ``F^-1(mean(y_train))``; ``rho`` defaults to the number of columns of
    ``x_train`` as given (R's rule); ``x_test_nogrid=True`` skips the
    hazards at the test rows (``yhat_test`` and ``prob_test`` only);
    ``keeptrainfits=False`` skips those at the training rows. ``nice`` is
    accepted and has no effect; ``mc_cores`` belongs to `mc_recur_bart`.
    See `bartz.gbart` for the rest.

    Parameters
    ----------
    seed
        bartz's seed (R's ``recur.bart`` uses R's random number state).
    keep_test_draws
        bartz only: False keeps only the posterior means at ``tx_test``
        (the ``(ndpost, m_test)`` draws are None).
    **options
        bartz's options of `gbart` (``maxdepth``, ``max_memory``, ...).

    Returns
    -------
    RecurBARTFit
        R's ``times``, ``K``, ``tx_train``, ``tx_test``, ``type``,
        ``haz_train``, ``cum_train``, ``yhat_test``, ``prob_test``,
        ``haz_test``, ``cum_test`` and their means (float32 draws,
        float64 means); R's ``yhat_train``, ``prob_train``, ``varcount``,
        ... are those of the `bartz.BARTFit` ``fit``.

    Examples
    --------
    >>> import numpy as np
    >>> times = np.array([[1.0, 2.0, 4.0], [3.0, 4.0, np.nan]])
    >>> delta = np.array([[1, 1, 0], [1, 0, np.nan]])
    >>> post = recur_bart(times=times, delta=delta, ndpost=20, nskip=10, keepevery=1, printevery=None)
    >>> post.K, post.cum_test.shape
    (4, (20, 8))

    References
    ----------
    Sparapani, Rein, Tarima, Jackson & Meurer (2020), Non-parametric
    recurrent events analysis with BART and an application to the hospital
    admissions of patients with diabetes, Biostatistics 21(1).
    """
    mc_cores = options.pop('_mc_cores', 1)
    if rho is None and x_train is not None and checks.num_rows(x_train):
        rho = int(np.shape(x_train)[1]) if np.ndim(x_train) == 2 else 1
    survival.check_options(options, type, 'recur_bart')
    checks._check_int('nice', nice, 0)
    for name, value in (('x_test_nogrid', x_test_nogrid), ('keeptrainfits', keeptrainfits),
                        ('keep_test_draws', keep_test_draws)):
        checks._check_bool(name, value)
    pre = _expand(x_train, y_train, times, delta, x_test)
    if pre.tx_test is not None:  # before the fit, not after
        check_test_rows(pre.tx_test, pre.times, 'x_test' if not x_test_nogrid else None)
    fit = gbart(
        pre.tx_train, pre.y_train, None, type=type, sparse=sparse, theta=theta, omega=omega, a=a, b=b,
        augment=augment, rho=rho, xinfo=xinfo, usequants=usequants, rm_const=rm_const, k=k, power=power,
        base=base, offset=offset, tau_num=tau_num, ntree=ntree, numcut=numcut, ndpost=ndpost, nskip=nskip,
        keepevery=keepevery, printevery=printevery, seed=seed, mc_cores=mc_cores, **options,
    )
    max_memory = options.get('max_memory', grove.DEFAULT_MAX_MEMORY)
    return _package(fit, pre, keeptrainfits, not x_test_nogrid, keep_test_draws, max_memory)


def mc_recur_bart(
    x_train=None, y_train=None, times=None, delta=None, x_test=None, x_test_nogrid=False, *, mc_cores=2,
    seed=99, **kwargs,
) -> RecurBARTFit:
    """`recur_bart` with ``mc_cores`` chains, as R's ``BART::mc.recur.bart``.

    ``ndpost`` is the total over the chains (each keeps ``ceil(ndpost /
    mc_cores)``), the draws come chain after chain, as R. As R, ``rho``
    defaults to the number of expanded columns (R's ``mc.recur.bart``
    expands the data before calling ``recur.bart``). bartz runs
    ``mc_cores`` chains whatever the number of cores; see `bartz.mc_gbart`.
    """
    if 'mc_cores' in kwargs or '_mc_cores' in kwargs:
        raise TypeError('mc_cores given twice')
    checks._check_int('mc_cores', mc_cores, 1)
    if kwargs.get('rho') is None:
        given = x_train is not None and checks.num_rows(x_train)
        columns = (int(np.shape(x_train)[1]) if np.ndim(x_train) == 2 else 1) if given else 0
        kwargs['rho'] = columns + 3 * (y_train is None) or None
    return recur_bart(x_train, y_train, times, delta, x_test, x_test_nogrid, seed=seed, **kwargs,
                      _mc_cores=mc_cores)


def _expand(x_train, y_train, times, delta, x_test) -> RecurPre:
    """The counting-process data: `recur_pre_bart`, or the rows given (R's two cases)."""
    if y_train is None:
        if times is None or delta is None:
            msg = 'recur_bart needs times and delta (or y_train with x_train already expanded), got None'
            raise ValueError(msg)
        if x_test is not None and checks.num_rows(x_test):
            warnings.warn('x_test is ignored when times and delta are given: as R, tx_test is every subject of '
                          'x_train at every grid time (pass y_train and expanded rows to choose them)', stacklevel=3)
        pre = recur_pre_bart(times, delta, x_train)
        survival.check_events(pre.y_train)
        return pre
    if x_train is None or np.ndim(x_train) != 2 or np.shape(x_train)[1] < 3:
        msg = f'with y_train given, x_train must be the expanded rows (t, v, N, covariates), got {x_train!r:.60}'
        raise ValueError(msg)
    y = checks.as_vector('y_train', y_train, checks.num_rows(x_train))
    if not np.isin(y, (0, 1)).all():
        msg = 'y_train must be 0/1 event indicators; make sure you specify times=times & delta=delta'
        raise ValueError(msg)
    grid = np.unique(survival.first_column(x_train))
    tx_test = x_test if x_test is not None and checks.num_rows(x_test) else None
    if tx_test is not None:
        check_like_train('x_test', tx_test, 'x_train', x_train)
    return RecurPre(y.astype(np.int64), x_train, tx_test, grid, int(grid.size))


def _package(fit, pre: RecurPre, keep_train, with_grid, keep_draws, max_memory) -> RecurBARTFit:
    """R's ``recurbart`` list: the fit, the grid, the hazards at the training and test rows."""
    train = {}
    if keep_train and getattr(fit, 'prob_train', None) is not None:
        prob = np.asarray(fit.prob_train, np.float64)
        t = survival.first_column(pre.tx_train)
        haz, cum = _hazard_and_cumulative(prob, t, pre.times, np.zeros(prob.shape[0]), 'tx_train')
        train = dict(haz_train=haz.astype(np.float32), haz_train_mean=haz.mean(axis=0),
                     cum_train=cum.astype(np.float32), cum_train_mean=cum.mean(axis=0))
    test = {}
    if pre.tx_test is not None:
        test = _hazards(fit, pre.tx_test, pre.times, max_memory, keep_draws=keep_draws, with_grid=with_grid)
    return RecurBARTFit(fit=fit, type=fit.type, times=pre.times, K=pre.K, tx_train=pre.tx_train,
                        tx_test=pre.tx_test, **train, **test)


def _hazards(fit, tx, grid, max_memory, *, keep_draws, with_grid, name='x_test') -> dict:
    """Draws (or only means) of the latent f, p, the hazard and the cumulative hazard
    at the rows `tx`, a block of rows at a time (the running sum carried across)."""
    rows, ndpost = checks.num_rows(tx), fit.ndpost
    names = ('yhat_test', 'prob_test') + (('haz_test', 'cum_test') if with_grid else ())
    t = survival.first_column(tx)
    check_test_rows(tx, grid, name if with_grid else None)
    block = max(1, max_memory // (_BYTES_PER_CELL * ndpost))
    out = {name: np.empty((ndpost, rows), np.float32) if keep_draws else None for name in names}
    means = {f'{name}_mean': np.empty(rows) for name in names}
    carry = np.zeros(ndpost)
    for start in range(0, rows, block):
        part = slice(start, min(rows, start + block))
        chunk = tx.iloc[part] if isinstance(tx, pd.DataFrame) else np.asarray(tx)[part]
        pred = rfamily.predict(fit, chunk, max_memory=max_memory)
        draws = {'yhat_test': pred.yhat_test, 'prob_test': pred.prob_test}
        if with_grid:
            prob = np.asarray(pred.prob_test, np.float64)
            draws['haz_test'], draws['cum_test'] = _hazard_and_cumulative(prob, t[part], grid, carry, name)
            carry = draws['cum_test'][:, -1]
        for name, value in draws.items():
            if keep_draws:
                out[name][:, part] = value
            means[f'{name}_mean'][part] = np.mean(value, axis=0, dtype=np.float64)
    return out | means


def check_test_rows(tx, grid, name):
    """Rows whose cumulative hazard can be read (when `name`): each time on
    the grid, increasing within a subject (a subject starts at the first grid
    time), as R's layout; the running sum along the rows means nothing otherwise."""
    if name is None:
        return
    j = _grid_index(survival.first_column(tx), grid, name)
    layout = f"{name} must have, for each subject, its rows in time order from the first grid time (R's tx.test layout)"
    if j[0] != 0:
        msg = f'{layout}, but its first row is at time {float(grid[j[0]]):g}, not {float(grid[0]):g}'
        raise ValueError(msg)
    back = np.flatnonzero((j[1:] != 0) & (j[1:] <= j[:-1]))
    if back.size:
        i = int(back[0]) + 1
        msg = f'{layout}, but row {i} (time {float(grid[j[i]]):g}) follows a row at time {float(grid[j[i - 1]]):g}'
        raise ValueError(msg)


def _grid_index(t, grid, name) -> np.ndarray:
    """The index in `grid` of each row's time, refused in words off the grid (when `name`)."""
    j = np.minimum(np.searchsorted(grid, t), grid.size - 1)
    if name is not None and not (grid[j] == t).all():
        bad = t[grid[j] != t][0]
        msg = f'{name} has a row at time {bad!r}, which is not on the time grid {grid.tolist()[:5]}...'
        raise ValueError(msg)
    return j


def _hazard_and_cumulative(prob, t, grid, carry, name):
    """R's hazard ``p / (t_j - t_{j-1})`` and cumulative hazard, the running sum of ``p``
    along the rows, restarted at each row at the first grid time.

    Parameters
    ----------
    prob
        ``(ndpost, m)`` float64 draws of p at consecutive rows.
    t
        ``(m,)`` the rows' times, on `grid`.
    grid
        ``(K,)`` the time grid.
    carry
        ``(ndpost,)`` the cumulative hazard of the row before the first.
    name
        The rows' argument, for the message of a time off the grid.

    Returns
    -------
    ``(ndpost, m)`` float64 draws of the hazard and of the cumulative hazard.
    """
    j = _grid_index(t, grid, name)
    width = np.diff(grid, prepend=0.0)
    restart = j == 0
    total = np.cumsum(prob, axis=1)
    starts = np.flatnonzero(restart)
    bases = np.concatenate([-carry[:, None], total[:, starts] - prob[:, starts]], axis=1)
    cum = total - bases[:, np.cumsum(restart)]
    return prob / width[j], cum
