"""R's survival BART: `surv_bart`, `mc_surv_bart` and R's ``predict`` for them.

The model (Sparapani, Logan, McCulloch & Laud 2016) is discrete-time
survival: on the grid ``t_1 < ... < t_K`` of `bartz.api.survival_prep`, a
binary BART (probit ``'pbart'``, the default, or logistic ``'lbart'``) of the
person-period events ``y`` on ``(t, x)`` gives the discrete hazard

    p(t_j, x) = P(event at t_j | no event before t_j, x) = F(offset + f(t_j, x)),

and the survival function is

    S(t_j | x) = prod_{l <= j} (1 - p(t_l, x)).

`surv_bart` expands the data with `surv_pre_bart` and fits `bartz.gbart`
on it: one implementation of the sampler. A test grid (``tx_test``, ``K``
rows per setting of x, times increasing) gives ``prob_test``, the hazards,
and ``surv_test``, their running products within each block of ``K``.

Memory: a test grid has ``n_test K`` rows, so its draws are computed a
block of settings at a time (`bartz.BARTFit.predict` already bounds the
device memory; the block bounds the host's temporaries); only the requested
``(ndpost, n_test K)`` arrays are held, and ``keep_test_draws=False`` /
``kind='mean'`` keeps only their posterior means.
"""

from typing import NamedTuple

import numpy as np
import pandas as pd

from bartz.api import familyio, rfamily
from bartz.api.fit import BARTFit
from bartz.api.gbart import gbart
from bartz.api.survival_prep import SurvPre, check_like_train, surv_pre_bart
from bartz.forest import grove
from bartz.prep import checks

__all__ = [
    'SurvBARTFit',
    'SurvPre',
    'SurvPrediction',
    'mc_surv_bart',
    'surv_bart',
    'surv_pre_bart',
    'survival_from_hazard',
]

# host bytes per draw and row of a block: the float32 latent draw, and the float64 hazard,
# survival and the temporary of 1 - hazard
_BYTES_PER_CELL = 4 + 3 * 8


class SurvPrediction(NamedTuple):
    """What R's ``predict.survbart`` returns (R's names, ``.`` as ``_``)."""

    yhat_test: np.ndarray | None  # (ndpost, m) float32 latent draws, offset included; None with kind='mean'
    tx_test: np.ndarray | pd.DataFrame  # (m, p + 1) the rows predicted at (R's newdata)
    times: np.ndarray  # (K,) the time grid, the distinct values of the first column
    K: int  # number of grid times
    prob_test: np.ndarray | None  # (ndpost, m) float32 draws of the hazard p(t, x); None with kind='mean'
    surv_test: np.ndarray | None  # (ndpost, m) float32 draws of S(t | x); None with kind='mean'
    surv_test_mean: np.ndarray  # (m,) float64 posterior mean of S(t | x)
    binary_offset: float  # R's binaryOffset: the fit's offset


class SurvBARTFit(familyio.Saveable):
    """The result of `surv_bart` and `mc_surv_bart`, R's ``survbart`` list.

    The attributes R's ``surv.bart`` adds are declared in ``__slots__``; the
    rest of R's list (``yhat_train``, ``prob_train``, ``prob_train_mean``,
    ``varcount``, ``varprob``, ``offset``, ``ndpost``, ``treedraws()``, ...)
    are those of the underlying `bartz.BARTFit`, ``fit``, read through.
    """

    __slots__ = {
        'fit': 'bartz.BARTFit: the binary BART of y_train on tx_train',
        'type': "'pbart' (probit) or 'lbart' (logistic)",
        'times': '(K,) the time grid t_1 < ... < t_K',
        'K': 'number of grid times',
        'id': "R's id: any label given to surv_bart, else None",
        'tx_train': '(m, p + 1) the person-period rows fitted: the time, then the covariates',
        'tx_test': '(n_test K, p + 1) the test grid; None without one',
        'yhat_test': '(ndpost, n_test K) float32 latent draws at tx_test, offset included; None without them',
        'yhat_test_mean': '(n_test K,) their posterior mean; None without tx_test',
        'prob_test': '(ndpost, n_test K) float32 draws of the hazard p(t, x); None without them',
        'prob_test_mean': '(n_test K,) their posterior mean; None without tx_test',
        'surv_test': '(ndpost, n_test K) float32 draws of the survival S(t | x); None without them',
        'surv_test_mean': '(n_test K,) their posterior mean; None without tx_test',
    }

    def __init__(self, **attributes):
        for name in self.__slots__:
            setattr(self, name, attributes.pop(name, None))
        if attributes:
            msg = f'SurvBARTFit has no attribute(s) {sorted(attributes)}'
            raise TypeError(msg)

    def __getattr__(self, name):
        # only reached for names that are not slots: R's other entries, on the BARTFit
        if name.startswith('_') or name == 'fit':
            raise AttributeError(name)
        return getattr(self.fit, name)

    def __repr__(self):
        n_test = 0 if self.tx_test is None else checks.num_rows(self.tx_test) // self.K
        return f'SurvBARTFit(type={self.type!r}, K={self.K}, n_test={n_test}, fit={self.fit!r})'

    def r_predict(self, newdata, *, max_memory=grove.DEFAULT_MAX_MEMORY, kind='draws') -> SurvPrediction:
        """R's ``predict(object, newdata)`` for survival BART (``predict.survbart``).

        Parameters
        ----------
        newdata
            ``(H K, p + 1)`` rows in R's ``tx_test`` layout: for each of
            ``H`` settings of the covariates, ``K`` rows with the grid times
            ``t_1, ..., t_K`` in order in the first column (see
            `surv_pre_bart`).
        max_memory
            Bytes of temporary memory, on the device (as
            `bartz.BARTFit.predict`) and on the host for each block of
            settings.
        kind
            ``'draws'`` (R's result) or ``'mean'``: only
            ``surv_test_mean``, in memory that does not grow with
            ``ndpost`` times ``H K`` (the draws are None).

        Returns
        -------
        SurvPrediction
        """
        max_memory = checks._check_int('max_memory', max_memory, 1)
        if kind not in ('draws', 'mean'):
            msg = f"kind must be 'draws' or 'mean', got {kind!r}"
            raise ValueError(msg)
        newdata = newdata if isinstance(newdata, pd.DataFrame) else np.asarray(newdata)
        check_width('newdata', newdata, self.fit)
        grid = check_grid('newdata', newdata)
        out = _survival(self.fit, newdata, grid, max_memory, keep_draws=kind == 'draws')
        return SurvPrediction(
            out['yhat_test'], newdata, grid, int(grid.size), out['prob_test'], out['surv_test'],
            out['surv_test_mean'], float(self.fit.offset),
        )


def surv_bart(
    x_train=None,
    y_train=None,
    times=None,
    delta=None,
    x_test=None,
    K=None,
    events=None,
    ztimes=None,
    zdelta=None,
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
    id=None,  # noqa: A002
    seed=99,
    nice=19,
    keep_test_draws=True,
    **options,
) -> SurvBARTFit:
    """Survival analysis with BART, as R's ``BART::surv.bart``.

    Discrete-time survival (see the module's docstring): with ``y_train``
    None, ``times`` and ``delta`` (and the covariates ``x_train``,
    ``x_test``) are expanded by `surv_pre_bart` (``K``, ``events``,
    ``ztimes``, ``zdelta`` as there); with ``y_train`` given, ``x_train``
    and ``x_test`` are taken as already expanded (``tx_train``,
    ``tx_test``: the time first) and the grid is the distinct times of
    ``x_train``'s first column. Then `bartz.gbart` runs the binary BART.

    R's arguments and defaults (``.`` becomes ``_``): ``type='pbart'`` (or
    ``'lbart'``; ``'wbart'`` is refused as R), 50 trees, ``ndpost=1000``,
    ``nskip=250``, ``keepevery=10``, ``tau_num`` 3 (pbart) or 6 (lbart),
    ``offset`` ``F^-1(mean(y_train))``; see `bartz.gbart` for the rest.
    ``rho`` defaults to the number of columns of ``x_train`` as given (R's
    rule: the covariates, or the expanded columns when ``y_train`` is
    given). R's ``ntype`` follows from ``type``; ``nice`` (process
    priority of R's forks) is accepted and has no effect; R's
    ``mc.cores`` belongs to `mc_surv_bart`.

    Parameters
    ----------
    seed
        bartz's seed (R's ``surv.bart`` uses R's random number state).
    keep_test_draws
        bartz only: False keeps the posterior means at ``tx_test``
        (``surv_test_mean``, ``prob_test_mean``, ``yhat_test_mean``) and
        not the ``(ndpost, n_test K)`` draws, which then are None.
    **options
        bartz's options of `gbart` (``maxdepth``, ``moves``,
        ``max_memory``, ...).

    Returns
    -------
    SurvBARTFit
        R's attributes: ``times``, ``K``, ``tx_train``, ``tx_test``,
        ``type``, ``id``, ``yhat_test``, ``prob_test`` (the hazards),
        ``surv_test``, ``surv_test_mean`` (and ``prob_test_mean``,
        ``yhat_test_mean``); R's ``yhat_train``, ``prob_train``,
        ``varcount``, ... are those of the `bartz.BARTFit` ``fit``. The
        test draws are float32.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> x = rng.integers(0, 2, size=(100, 1)).astype(float)
    >>> t = np.ceil(rng.exponential(1 / (1 + x[:, 0])) * 4).clip(max=8)
    >>> post = surv_bart(x, times=t, delta=(t < 8).astype(int), x_test=np.array([[0.0], [1.0]]),
    ...                  ndpost=100, nskip=50, keepevery=1, printevery=None)
    >>> post.surv_test.shape == (100, 2 * post.K)
    True

    References
    ----------
    Sparapani, Logan, McCulloch & Laud (2016), Nonparametric survival
    analysis using Bayesian Additive Regression Trees (BART), Stat. Med.
    35(16).
    """
    mc_cores = options.pop('_mc_cores', 1)
    if rho is None and x_train is not None and checks.num_rows(x_train):
        rho = int(np.shape(x_train)[1]) if np.ndim(x_train) == 2 else 1
    check_options(options, type)
    checks._check_int('nice', nice, 0)
    checks._check_bool('keep_test_draws', keep_test_draws)
    pre = _expand(x_train, y_train, times, delta, x_test, K, events, ztimes, zdelta)
    if pre.tx_test is not None:  # before the fit, not after
        given = ' (with y_train given, x_train and x_test are expanded rows; or pass times= and delta=)'
        check_grid('x_test', pre.tx_test, pre.times, hint=given if y_train is not None else '')
    fit = gbart(
        pre.tx_train, pre.y_train, None, type=type, sparse=sparse, theta=theta, omega=omega, a=a, b=b,
        augment=augment, rho=rho, xinfo=xinfo, usequants=usequants, rm_const=rm_const, k=k, power=power,
        base=base, offset=offset, tau_num=tau_num, ntree=ntree, numcut=numcut, ndpost=ndpost, nskip=nskip,
        keepevery=keepevery, printevery=printevery, seed=seed, mc_cores=mc_cores, **options,
    )
    return _package(fit, pre, id, keep_test_draws, options.get('max_memory', grove.DEFAULT_MAX_MEMORY))


def mc_surv_bart(
    x_train=None, y_train=None, times=None, delta=None, x_test=None, *, mc_cores=2, seed=99, **kwargs
) -> SurvBARTFit:
    """`surv_bart` with ``mc_cores`` chains, as R's ``BART::mc.surv.bart``.

    ``ndpost`` is the total over the chains (each keeps ``ceil(ndpost /
    mc_cores)``), the draws come chain after chain, as R. As R, ``rho``
    defaults to the number of expanded columns (R's ``mc.surv.bart``
    expands the data before calling ``surv.bart``). bartz runs
    ``mc_cores`` chains whatever the number of cores (R caps them at the
    cores it detects); see `bartz.mc_gbart`.
    """
    if 'mc_cores' in kwargs or '_mc_cores' in kwargs:
        raise TypeError('mc_cores given twice')
    checks._check_int('mc_cores', mc_cores, 1)
    if kwargs.get('rho') is None and x_train is not None and checks.num_rows(x_train):
        kwargs['rho'] = (int(np.shape(x_train)[1]) if np.ndim(x_train) == 2 else 1) + (y_train is None)
    return surv_bart(x_train, y_train, times, delta, x_test, seed=seed, **kwargs, _mc_cores=mc_cores)


def check_options(options, type_, name='surv_bart'):
    """R's model types and bartz's options of `gbart`, refused in words
    otherwise; `name` is the function called."""
    if type_ not in ('pbart', 'lbart'):
        msg = f"type argument must be set to either 'pbart' or 'lbart', got {type_!r}"
        raise ValueError(msg)
    unknown = sorted(set(options) - rfamily.BARTZ_OPTIONS)
    if unknown:
        msg = (
            f"{name}() got unexpected keyword argument(s) {unknown}: R's {name.replace('_', '.')} does not have them"
            f' (bartz options accepted: {sorted(rfamily.BARTZ_OPTIONS)})'
        )
        raise TypeError(msg)


def _expand(x_train, y_train, times, delta, x_test, K, events, ztimes, zdelta) -> SurvPre:
    """The person-period data: `surv_pre_bart`, or the rows given (R's two cases)."""
    if y_train is None:
        if times is None or delta is None:
            msg = 'surv_bart needs times and delta (or y_train with x_train already expanded), got None'
            raise ValueError(msg)
        pre = surv_pre_bart(times, delta, x_train, x_test, K=K, events=events, ztimes=ztimes, zdelta=zdelta)
        check_events(pre.y_train)
        return pre
    if x_train is None:
        msg = 'with y_train given, x_train must be the expanded rows (time first), got None'
        raise ValueError(msg)
    y = checks.as_vector('y_train', y_train, checks.num_rows(x_train))
    if np.unique(y).size > 2:
        msg = 'y.train has >2 values; make sure you specify times=times & delta=delta'
        raise ValueError(msg)
    grid = np.unique(first_column(x_train))
    tx_test = x_test if x_test is not None and checks.num_rows(x_test) else None
    if tx_test is not None:
        check_like_train('x_test', tx_test, 'x_train', x_train)
    return SurvPre(y, x_train, tx_test, grid, int(grid.size))


def check_events(y_train):
    """Refuse person-period rows the binary fit cannot learn from, in the
    terms of ``times`` and ``delta`` (the user never passed ``y_train``)."""
    if not y_train.any():
        msg = 'delta has no events (every delta is 0, or no event time is on the grid): there is nothing to fit'
        raise ValueError(msg)
    if y_train.all():
        msg = (
            f'every one of the {y_train.size} person-period rows is an event (each person has an event at the '
            'first grid time): the binary fit needs rows without one'
        )
        raise ValueError(msg)


def _package(fit: BARTFit, pre: SurvPre, id_, keep_draws, max_memory) -> SurvBARTFit:
    """R's ``survbart`` list: the fit, the grid and what the test grid gives."""
    test = dict.fromkeys(
        ('yhat_test', 'yhat_test_mean', 'prob_test', 'prob_test_mean', 'surv_test', 'surv_test_mean')
    )
    if pre.tx_test is not None:
        test = _survival(fit, pre.tx_test, pre.times, max_memory, keep_draws=keep_draws, all_means=True)
    return SurvBARTFit(
        fit=fit, type=fit.type, times=pre.times, K=pre.K, id=id_, tx_train=pre.tx_train, tx_test=pre.tx_test,
        **test,
    )


def first_column(tx) -> np.ndarray:
    """The time column of rows in R's ``tx`` layout."""
    column = tx.iloc[:, 0] if isinstance(tx, pd.DataFrame) else np.asarray(tx)[:, 0]
    return checks.as_vector('the time column (the first) of tx', column, checks.num_rows(tx))


def check_width(name, tx, fit: BARTFit, train_name='tx_train'):
    """An array of rows in ``tx`` layout has the columns of the rows `fit` was
    fitted on (a DataFrame's are matched by name when it predicts)."""
    if not isinstance(tx, pd.DataFrame) and np.ndim(tx) == 2 and np.shape(tx)[1] != fit._p:  # noqa: SLF001
        msg = (
            f'{name} must have {fit._p} columns like {train_name} (the time first, then the covariates), '  # noqa: SLF001
            f'got {np.shape(tx)[1]}'
        )
        raise ValueError(msg)


def check_grid(name, tx, grid=None, hint='') -> np.ndarray:
    """The time grid of `tx`, checked to be R's layout: blocks of the ``K`` grid times in order."""
    if checks.num_rows(tx) == 0 or np.ndim(tx) != 2:
        msg = f'{name} must be 2-D rows in tx_test layout (the time first), got shape {np.shape(tx)}'
        raise ValueError(msg)
    t = first_column(tx)
    grid = np.unique(t) if grid is None else np.asarray(grid)
    if t.size % grid.size or not (t.reshape(-1, grid.size) == grid).all():
        msg = (
            f'{name} must have, for each setting of the covariates, {grid.size} rows with the grid times '
            f'{grid.tolist()[:5]}{"..." if grid.size > 5 else ""} in order in its first column (see surv_pre_bart){hint}'
        )
        raise ValueError(msg)
    return grid


def _survival(fit, tx, grid, max_memory, *, keep_draws, all_means=False) -> dict:
    """Draws (or only means) of the latent f, the hazard and the survival at `tx`,
    a block of settings at a time."""
    K, rows = grid.size, checks.num_rows(tx)
    ndpost = fit.ndpost
    block = max(1, max_memory // (_BYTES_PER_CELL * ndpost * K)) * K
    out = {name: np.empty((ndpost, rows), np.float32) if keep_draws else None
           for name in ('yhat_test', 'prob_test', 'surv_test')}
    means = {name: np.empty(rows) for name in ('yhat_test_mean', 'prob_test_mean', 'surv_test_mean')}
    for start in range(0, rows, block):
        part = slice(start, min(rows, start + block))
        chunk = tx.iloc[part] if isinstance(tx, pd.DataFrame) else np.asarray(tx)[part]
        pred = rfamily.predict(fit, chunk, max_memory=max_memory)
        surv = survival_from_hazard(pred.prob_test, K)
        for name, draws in (('yhat_test', pred.yhat_test), ('prob_test', pred.prob_test), ('surv_test', surv)):
            if keep_draws:
                out[name][:, part] = draws
            means[f'{name}_mean'][part] = np.mean(draws, axis=0, dtype=np.float64)
    if not all_means:
        del means['yhat_test_mean'], means['prob_test_mean']
    return out | means


def survival_from_hazard(hazard, K):
    """``S(t_j | x) = prod_{l <= j} (1 - p(t_l, x))`` within each block of `K` columns.

    Parameters
    ----------
    hazard
        ``(ndpost, H K)`` draws of the discrete hazards, ``K`` grid times
        per setting of the covariates.
    K
        Number of grid times.

    Returns
    -------
    ``(ndpost, H K)`` float64 draws of the survival function.
    """
    hazard = np.asarray(hazard, np.float64)
    blocks = hazard.reshape(hazard.shape[0], -1, K)
    return np.cumprod(1 - blocks, axis=2).reshape(hazard.shape)
