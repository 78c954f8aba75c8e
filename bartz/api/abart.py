"""R's accelerated failure time BART: `abart`, `mc_abart`.

The model (Sparapani, Spanbauer & McCulloch 2021, the section on
``abart``) is the log-normal accelerated failure time model

    log(t_i) = f(x_i) + eps_i,   eps_i ~ N(0, sigma^2 w_i^2),

with ``f`` BART (``offset`` plus a sum of trees) and right-censored times
(``delta_i = 0``: the event is only known to come after ``t_i``). A censored
log time is missing data: every iteration of the Gibbs sampler draws it from
``N(f(x_i), sigma^2 w_i^2)`` truncated to lie above ``log(t_i)``
(`bartz.sampler.conditionals.draw_censored`), between the sweep over the
trees and the draw of ``sigma``, and the trees and ``sigma`` are then drawn
as in `bartz.gbart` with those draws in place of the censored log times.

`abart` is `bartz.gbart` (``type='wbart'``) on ``y = log(times)``, R's
priors computed from it (``offset = mean(log(times))``, ``tau_num = (max -
min) / 2``, ``sigest`` by least squares, censored times included as they
are, as R), with the censored points passed to the sampler by a private
argument of `bartz.gbart` (R's ``gbart`` has no censoring, so neither has
bartz's public ``gbart``). With every ``delta = 1`` it is `bartz.wbart` on
``log(times)``: the same draws.

The survival function of a draw at ``x`` is ``S(t | x) = 1 - Phi((log t -
f(x)) / sigma)``; ``surv_train`` and ``surv_test`` give it at the ``K``
times of R's grid, in R's layout (for each point, its ``K`` times).

Deviations from R (BART 2.9.9):

- R's ``cabart`` draws ``sigma`` from the squared residuals of the censoring
  times themselves at the censored points, not of their draws, which is not
  the conditional law of ``sigma`` given the imputed times; bartz uses the
  draws (the exact Gibbs step).
- R's ``transposed`` and ``nice`` are not arguments (``nice`` is accepted and
  ignored, as in `bartz.gbart`'s ``omega``); ``type`` and ``ntype`` accept
  only ``'abart'`` and 1, as R.
- R has no ``predict`` for ``abart`` fits; bartz's ``predict`` (that of the
  underlying `bartz.BARTFit`) gives draws of ``f`` (the log time scale).
- The data are not split over devices yet with censoring
  (``num_data_devices=1``; the chains may be spread over devices).
"""

import numpy as np
from scipy import special

from bartz.api import familyio
from bartz.api.fit import BARTFit
from bartz.api.gbart import gbart
from bartz.forest import grove
from bartz.prep import checks

__all__ = ['AFTFit', 'abart', 'mc_abart']


class AFTFit(familyio.Saveable):
    """The result of `abart` and `mc_abart`, R's ``abart`` list.

    The attributes R's ``abart`` adds to a continuous fit are declared in
    ``__slots__``; the rest of R's list (``yhat_train``, ``yhat_test``,
    ``sigma``, ``varcount``, ``varprob``, ``offset``, ``ndpost``, ...) and
    ``predict`` are those of the underlying `bartz.BARTFit` of the log
    times, ``fit``, read through.
    """

    __slots__ = {
        'fit': 'bartz.BARTFit: BART of log(times), the censored ones drawn',
        'type': "'abart'",
        'times': '(K,) the grid: the distinct times, or K of their quantiles when there are more',
        'K': 'number of grid times',
        'surv_train': '(ndpost, n K) draws of S(t | x) at x_train, for each point its K grid times',
        'surv_train_mean': '(n K,) their posterior mean',
        'surv_test': '(ndpost, n_test K) draws of S(t | x) at x_test; None without x_test',
        'surv_test_mean': '(n_test K,) their posterior mean; None without x_test',
    }

    def __init__(self, **attributes):
        for name in self.__slots__:
            setattr(self, name, attributes.pop(name, None))
        if attributes:
            msg = f'AFTFit has no attribute(s) {sorted(attributes)}'
            raise TypeError(msg)

    def __getattr__(self, name):
        # only reached for names that are not slots: R's other entries, on the BARTFit
        if name.startswith('_') or name == 'fit':
            raise AttributeError(name)
        return getattr(self.fit, name)

    def __repr__(self):
        return f'AFTFit(K={self.K}, fit={self.fit!r})'

    def r_predict(self, newdata, *, max_memory=grove.DEFAULT_MAX_MEMORY) -> np.ndarray:
        """R's ``predict(object, newdata)`` of an ``abart`` fit (R's
        ``predict.wbart``): the ``(ndpost, m)`` draws of the mean log time
        ``f(x)`` at ``newdata``, offset included."""
        return self.fit.predict(newdata, max_memory=max_memory)


def abart(
    x_train,
    times,
    delta,
    x_test=None,
    *,
    K=100,
    type='abart',  # noqa: A002
    ntype=1,
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
    sigest=None,
    sigdf=3,
    sigquant=0.9,
    k=2.0,
    power=2.0,
    base=0.95,
    lambda_=None,
    tau_num=None,
    offset=None,
    w=None,
    ntree=200,
    numcut=100,
    ndpost=1000,
    nskip=100,
    keepevery=1,
    printevery=100,
    mc_cores=1,
    nice=19,  # noqa: ARG001
    seed=99,
    maxdepth=6,
    min_points_per_leaf=5,
    moves=None,
    max_memory=grove.DEFAULT_MAX_MEMORY,
    devices=None,
    warmstart=0,
) -> AFTFit:
    """Accelerated failure time BART with right censoring, as R's ``BART::abart``.

    ``log(times) = f(x) + eps``, ``eps ~ N(0, sigma^2 w^2)``; a time with
    ``delta = 0`` is right-censored, and its log time is drawn every
    iteration from the normal truncated above it (see `bartz.api.abart`).

    Parameters
    ----------
    x_train
        ``(n, p)`` predictors, as `bartz.gbart`'s.
    times
        ``(n,)`` positive event or censoring times.
    delta
        ``(n,)`` event indicators: 1 (or True) for an event at ``times``, 0
        for right censoring at ``times``.
    x_test
        Optional ``(n_test, p)`` predictors for ``yhat_test`` and ``surv_test``.
    K
        Size of the time grid of ``surv_train`` and ``surv_test``: the
        distinct ``times`` if at most ``K``, else the distinct ones of their
        quantiles ``1/K, 2/K, ..., 1`` (as R).
    type, ntype
        Only ``'abart'`` and 1, as R.
    sparse, theta, omega, a, b, augment, rho, xinfo, usequants, rm_const
        As `bartz.gbart`.
    sigest, sigdf, sigquant, k, power, base, lambda_, tau_num, offset
        As `bartz.gbart` for ``y = log(times)`` (the censored times as they
        are): ``offset = mean(log(times))``, ``tau_num = (max - min) / 2`` of
        the log times, ``sigest`` by least squares on them (R's defaults).
    w
        ``(n,)`` positive multipliers of the error sd (R: ``rep(1, n)``).
    ntree, numcut, ndpost, nskip, keepevery, printevery, mc_cores, seed
        As `bartz.gbart` (R's ``abart`` defaults: 200 trees, every draw kept).
    nice
        Accepted for compatibility with R; not used.
    maxdepth, min_points_per_leaf, moves, max_memory, devices, warmstart
        bartz's options of `bartz.gbart` (the chains may be spread over
        several devices, the data not yet).

    Returns
    -------
    AFTFit

    Examples
    --------
    >>> import numpy as np
    >>> from bartz import abart
    >>> rng = np.random.default_rng(0)
    >>> x = rng.uniform(size=(100, 2))
    >>> t = np.exp(x[:, 0] + 0.3 * rng.normal(size=100))
    >>> c = rng.exponential(4.0, size=100)
    >>> fit = abart(x, np.minimum(t, c), t <= c, ndpost=50, nskip=50, ntree=20, K=10, printevery=None)
    >>> fit.surv_train.shape
    (50, 1000)

    References
    ----------
    Sparapani, Spanbauer & McCulloch (2021), Nonparametric machine learning
    and efficient computation with Bayesian additive regression trees: the
    BART R package, J. Stat. Softw. 97(1).
    """
    y, censored, K = _check_survival(x_train, times, delta, K, type, ntype)
    fit = gbart(
        x_train, y, x_test, type='wbart', sparse=sparse, theta=theta, omega=omega, a=a, b=b, augment=augment,
        rho=rho, xinfo=xinfo, usequants=usequants, rm_const=rm_const, sigest=sigest, sigdf=sigdf,
        sigquant=sigquant, k=k, power=power, base=base, lambda_=lambda_, tau_num=tau_num, offset=offset, w=w,
        ntree=ntree, numcut=numcut, ndpost=ndpost, nskip=nskip, keepevery=keepevery, printevery=printevery,
        seed=seed, mc_cores=mc_cores, maxdepth=maxdepth, min_points_per_leaf=min_points_per_leaf, moves=moves,
        max_memory=max_memory, devices=devices, warmstart=warmstart,
        # (no censored point: nothing to draw, wbart's program and draws)
        _censored=censored if censored.any() else None,
    )
    grid = time_grid(np.exp(y), K)
    surv_train = survival(fit.yhat_train, fit.sigma_, grid)
    surv_test = None if fit.yhat_test is None else survival(fit.yhat_test, fit.sigma_, grid)
    return AFTFit(
        fit=fit, type='abart', times=grid, K=grid.size, surv_train=surv_train,
        surv_train_mean=np.mean(surv_train, axis=0, dtype=np.float64),
        surv_test=surv_test, surv_test_mean=None if surv_test is None else np.mean(surv_test, axis=0, dtype=np.float64),
    )


def mc_abart(x_train, times, delta, x_test=None, *, mc_cores=2, seed=99, **kwargs) -> AFTFit:
    """`abart` with several chains, as R's ``BART::mc.abart`` (default 2
    chains; ``ndpost`` is the total over them, see `bartz.mc_gbart`).
    Takes the same arguments as `abart`."""
    return abart(x_train, times, delta, x_test, mc_cores=mc_cores, seed=seed, **kwargs)


def _check_survival(x_train, times, delta, K, type_, ntype):
    """Check R's survival arguments; return the log times, the censored
    mask and ``K``."""
    if type_ != 'abart':
        msg = f"type must be 'abart', got {type_!r}"
        raise ValueError(msg)
    if isinstance(ntype, bool) or ntype != 1:
        msg = f'ntype must be 1, got {ntype!r}'
        raise ValueError(msg)
    n = checks.num_rows(x_train)
    t = checks.as_vector('times', times, n)
    if not np.all(t > 0):
        msg = f'times must be positive (they are logged), got minimum {t.min()}'
        raise ValueError(msg)
    if n > 1 and np.all(t == t[0]):
        msg = f'times are all equal ({float(t[0]):g}): there is nothing to fit'
        raise ValueError(msg)
    d = checks.as_vector('delta', delta, n)
    values = np.unique(d)
    if not np.all(np.isin(values, (0.0, 1.0))):
        msg = f'delta must be 0 (censored) or 1 (event), got values {values[:5].tolist()}'
        raise ValueError(msg)
    K = checks._check_int('K', K, 1)
    return np.log(t), d == 0, K


def time_grid(times, K: int) -> np.ndarray:
    """R's grid of `abart`: the distinct `times` in order, or, when there
    are more than ``K``, the distinct ones of their quantiles ``1/K, ...,
    1`` (R's default quantile, numpy's ``'linear'``)."""
    events = np.unique(times)
    if events.size > K:
        events = np.unique(np.quantile(times, np.arange(1, K + 1) / K))
    return events


def survival(yhat, sigma, grid) -> np.ndarray:
    """Draws of ``S(t | x) = 1 - Phi((log t - f(x)) / sigma)`` at the `grid`
    times, ``(ndpost, m K)`` float32, for each of the ``m`` columns of
    `yhat` (draws of ``f``, ``(ndpost, m)``) its ``K`` times, with the
    matching draws of `sigma` (``(ndpost,)``)."""
    log_grid = np.log(grid).astype(np.float32)
    z = (log_grid[None, None, :] - np.asarray(yhat, np.float32)[:, :, None]) / np.asarray(sigma, np.float32)[:, None, None]
    return special.ndtr(-z).astype(np.float32).reshape(z.shape[0], -1)
