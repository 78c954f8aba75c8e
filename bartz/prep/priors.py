"""R-style outcome types and priors of `bartz.gbart`.

Two things live here:

- `OUTCOME_TYPES`, the table of the outcome types (R's ``type`` argument):
  what each one accepts as ``y``, its defaults (``ntree``, ``keepevery``,
  ``tau_num``, ``offset``) and the link from the sum of trees to the
  prediction. Adding a type is adding a row here (and its latent update in
  the sampler).
- `r_priors`, R's defaults of the priors computed from the data: ``offset``,
  ``tau_num``, ``sigest`` (by OLS), ``lambda`` (from ``sigquant``), all
  expressed in the standardised units the sampler works in.

References
----------
Chipman, George & McCulloch (2010), BART: Bayesian additive regression
trees, Ann. Appl. Stat. 4(1). Sparapani, Spanbauer & McCulloch (2021), The
BART R package, J. Stat. Softw. 97(1).
"""

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from scipy import special

from bartz.prep import checks as _checks

__all__ = ['OUTCOME_TYPES', 'OutcomeType', 'Priors', 'check_outcome', 'outcome_type', 'r_priors']


class OutcomeType(NamedTuple):
    """One outcome type of `bartz.gbart` (R's ``type``)."""

    name: str  # R's name: 'wbart', 'pbart', 'lbart'
    binary: bool  # y is 0/1 and the trees model a latent
    ntree: int  # default number of trees (R)
    keepevery: int  # default thinning (R)
    default_tau_num: Callable[[np.ndarray], float]  # y -> tau_num (R)
    default_offset: Callable[[np.ndarray], float]  # y -> offset (R)
    link: str  # link of `bartz.grove.evaluate_trace` for `BARTFit.predict`
    prob: Callable[[np.ndarray], np.ndarray] | None  # binary: latent f -> P(y = 1 | x); else None


OUTCOME_TYPES = {
    'wbart': OutcomeType(
        name='wbart',
        binary=False,
        ntree=200,
        keepevery=1,
        default_tau_num=lambda y: float(y.max() / 2 - y.min() / 2),  # (max - min) / 2 without overflow
        default_offset=lambda y: float(y.mean()),
        link='affine',
        prob=None,
    ),
    'pbart': OutcomeType(
        name='pbart',
        binary=True,
        ntree=50,
        keepevery=10,
        default_tau_num=lambda y: 3.0,
        default_offset=lambda y: float(special.ndtri(y.mean())),  # scipy.stats.norm.ppf
        link='probit',
        prob=special.ndtr,  # scipy.stats.norm.cdf
    ),
    # R's lbart draws the logistic model with Holmes & Held's scale mixture of
    # normals; bartz with Polya-Gamma augmentation (bartz.polyagamma): another
    # exact Gibbs update of the same posterior.
    'lbart': OutcomeType(
        name='lbart',
        binary=True,
        ntree=50,
        keepevery=10,
        default_tau_num=lambda y: 6.0,
        default_offset=lambda y: float(special.logit(y.mean())),
        link='logit',
        prob=special.expit,
    ),
}
"""The outcome types, by R's name."""


def outcome_type(type: str) -> OutcomeType:  # noqa: A002
    """The `OutcomeType` named `type`, or a `ValueError` naming the argument."""
    if not isinstance(type, str) or type not in OUTCOME_TYPES:
        names = ' or '.join(repr(t) for t in OUTCOME_TYPES)
        msg = f'type must be {names}, got {type!r}'
        raise ValueError(msg)
    return OUTCOME_TYPES[type]


def check_outcome(outcome: OutcomeType, y_train, w, n: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Check and convert ``y_train`` and ``w`` for the outcome type; return
    them as float64 arrays (``w`` may be None)."""
    y = _checks.as_vector('y_train', y_train, n)
    if outcome.binary:
        values = np.unique(y)
        if not np.all(np.isin(values, (0.0, 1.0))):
            msg = f"y_train must be 0/1 for type='{outcome.name}', got values {values[:5].tolist()}"
            raise ValueError(msg)
        if values.size < 2:
            msg = f"y_train must contain both 0 and 1 for type='{outcome.name}', got only {values.tolist()}"
            raise ValueError(msg)
        if w is not None:
            msg = "w is for type='wbart' only"
            raise ValueError(msg)
    elif y.max() == y.min():
        msg = f'y_train is constant ({y[0]}): there is nothing to fit'
        raise ValueError(msg)
    if w is not None:
        w = _checks.as_vector('w', w, n)
        if np.any(w <= 0):
            msg = f'w must be positive, got minimum {w.min()}'
            raise ValueError(msg)
        _check_weights(w)
    return y, w


def _check_weights(w) -> None:
    """The sampler weighs each point by ``1 / w**2`` in float32 and sums
    the weights over the data: each must be a normal float32 number and
    their sum well below float32's largest."""
    with np.errstate(over='ignore'):
        prec = 1 / w**2
        total = float(np.sum(prec))
    if prec.min() < _F32.tiny or not total <= _MAX_PRECISION_SUM:
        bad = float(w.max() if prec.min() < _F32.tiny else w.min())
        msg = (
            f'w has a value {bad:.6g} that the sampler cannot use: it weighs each point by 1 / w**2 in float32, '
            f'which must be at least {_F32.tiny:.3g}, and their sum at most {_MAX_PRECISION_SUM:.3g} (got '
            f'{total:.3g}); rescale w (multiplying w by c divides sigma by c, the same model)'
        )
        raise ValueError(msg)


_MAX_PRECISION_SUM = 1e35  # sums of 1 / w**2 with float32 headroom for the leaves' statistics


class Priors(NamedTuple):
    """R's priors, and the outcome in the sampler's standardised units."""

    offset: float  # constant added to the sum of trees
    scale: float  # sd(y) for continuous outcomes, 1 for binary: internal units
    tau_num: float  # leaf prior sd is tau_num / (k sqrt(ntree)) (original units)
    leaf_sd: float  # the same in internal units
    sigest: float | None  # prior guess of the error sd (continuous)
    lambda_: float | None  # error variance prior scale (continuous)
    sigma2_alpha: float | None  # sigdf / 2, inverse gamma shape; None for binary
    sigma2_beta: float | None  # sigdf lambda / 2, in internal units; None for binary
    sigma2_init: float  # starting error variance, internal units
    y_core: np.ndarray  # (n,) float32 (y - offset) / scale, or bool for binary


def r_priors(
    outcome: OutcomeType,
    y: np.ndarray,
    x_ols: np.ndarray,
    *,
    offset: float | None,
    tau_num: float | None,
    sigest: float | None,
    lambda_: float | None,
    sigdf: float,
    sigquant: float,
    k: float,
    ntree: int,
) -> Priors:
    """R's default priors, as ``BART::gbart`` computes them.

    - ``offset``: ``mean(y)`` (continuous), ``Phi^-1(mean(y))`` (probit),
      ``logit(mean(y))`` (logistic);
    - ``tau_num``: ``(max y - min y) / 2`` (continuous), 3 (probit), 6
      (logistic); the
      leaf prior sd is ``tau_num / (k sqrt(ntree))``;
    - ``sigest``: residual sd of the OLS fit of ``y`` on ``x_ols`` (``sd(y)``
      with no predictors or ``p >= n - 1``); missing values in ``x_ols``
      are replaced by the column mean and an indicator column is added;
    - ``lambda_``: such that ``P(sigma < sigest) = sigquant`` under
      ``sigma^2 ~ sigdf lambda / chi2(sigdf)``; ``lambda_=0`` is R's
      known error sd: sigma stays at ``sigest`` (``sigma2_alpha`` and
      ``sigma2_beta`` None).

    The continuous outcome is standardised to ``(y - offset) / sd(y)`` for
    float32 accuracy, and the priors are transformed with it, so the model
    is R's.

    Parameters
    ----------
    outcome
        The outcome type.
    y
        ``(n,)`` outcome, checked (`check_outcome`).
    x_ols
        ``(n, q)`` numeric predictors for ``sigest``, NaN where missing.
    offset, tau_num, sigest, lambda_
        User values, or None for R's defaults.
    sigdf, sigquant, k, ntree
        As in `bartz.gbart`.
    """
    given = {'offset': offset is not None, 'tau_num': tau_num is not None, 'sigest': sigest is not None}
    given['lambda_'] = lambda_ is not None
    given['k'], given['ntree'] = k, ntree  # named in messages
    scale = 1.0 if outcome.binary else _check_scale(y)
    if offset is None:
        offset = outcome.default_offset(y)
    if tau_num is None:
        tau_num = outcome.default_tau_num(y)
    if outcome.binary:
        y_core = y.astype(bool)
        sigest = lambda_ = sigma2_alpha = sigma2_beta = None
        sigma2_init = 1.0
    else:
        # in units of sd(y): y of any magnitude float64 holds gives the same numbers
        with np.errstate(over='ignore', under='ignore'):
            y_std = y / scale
            if sigest is None:
                sigest_std = ols_sigest(x_ols, y_std) if x_ols.shape[1] else float(np.std(y_std, ddof=1))
                sigest = sigest_std * scale
            else:
                sigest_std = sigest / scale
            if lambda_ is None:
                qchi = 2 * special.gammaincinv(sigdf / 2, 1 - sigquant)  # scipy.stats.chi2.ppf(1 - sigquant, sigdf)
                lambda_std = sigest_std**2 * qchi / sigdf
                lambda_ = lambda_std * scale**2
            else:
                lambda_std = lambda_ / scale / scale
            y_core = ((y - offset) / scale).astype(np.float32)
        # R's "sigma fixed and known at sigest": only the user's 0, not a default that underflowed
        if given['lambda_'] and lambda_ == 0:
            sigma2_alpha = sigma2_beta = None
        else:
            sigma2_alpha = sigdf / 2
            sigma2_beta = sigdf * lambda_std / 2
        sigma2_init = sigest_std**2
    prior = Priors(
        offset=float(offset),
        scale=scale,
        tau_num=tau_num,
        leaf_sd=tau_num / (k * math.sqrt(ntree)) / scale,
        sigest=sigest,
        lambda_=lambda_,
        sigma2_alpha=sigma2_alpha,
        sigma2_beta=sigma2_beta,
        sigma2_init=sigma2_init,
        y_core=y_core,
    )
    _check_float32(outcome, prior, given)
    return prior


def _check_scale(y) -> float:
    """``sd(y)``, the unit of the sampler; refused where float64 cannot hold it."""
    with np.errstate(over='ignore', under='ignore', invalid='ignore'):
        scale = float(np.std(y))
        if 0 <= scale < _TINY_SD:  # the squares underflowed: the sd of y / max|y|, scaled back
            big = float(np.max(np.abs(y)))
            scale = big * float(np.std(y / big))
    if not math.isfinite(scale) or scale == 0:
        big = float(np.max(np.abs(y)))
        msg = (
            f'y_train has values up to {big:.3g} in magnitude, whose standard deviation float64 '
            f'cannot hold ({scale}); rescale y_train (e.g. divide it by {big:.0e}) and scale the results back'
        )
        raise ValueError(msg)
    return scale


_TINY_SD = 1e-140  # below this, squares of the deviations underflow in float64
_F32 = np.finfo(np.float32)
_F32_MAX, _F32_TINY = float(_F32.max), float(_F32.tiny)
# |y - offset| / sd(y) beyond this rounds to more than one sd in float32
_MAX_STANDARDISED = float(2**24)


def _check_float32(outcome: OutcomeType, prior: Priors, given: dict) -> None:
    """Refuse, before anything is compiled, priors the float32 sampler
    cannot hold: each of the numbers it receives must be finite, and the
    positive ones normal (not 0 or subnormal) in float32. Errors name the
    argument that made the number, or say which default did."""

    def origin(name, default):
        return name if given.get(name) else f'{name} (by default {default})'

    def check(value, what, culprit, *, positive=True):
        ok = math.isfinite(value) and abs(value) <= _F32_MAX and (not positive or value >= _F32_TINY)
        if not ok:
            bound = f'between {_F32.tiny:.3g} and {_F32.max:.3g}' if positive else f'at most {_F32.max:.3g} in magnitude'
            msg = (
                f'{culprit} gives {what} = {value:.6g}, which the sampler cannot use: it computes in float32, '
                f'where this number must be {bound}'
            )
            raise ValueError(msg)

    if not math.isfinite(prior.offset):  # the default, mean(y), can overflow
        msg = f'{origin("offset", "mean(y_train)")} is {prior.offset}: rescale y_train'
        raise ValueError(msg)
    if outcome.binary:  # the sampler's latent threshold (a continuous offset is added on the host)
        check(prior.offset, 'the offset', origin('offset', 'from the mean of y_train'), positive=False)
    leaf_culprit = (
        f"k={given['k']:g} with tau_num={prior.tau_num:g}{'' if given['tau_num'] else ' (the default)'} "
        f"and ntree={given['ntree']}"
    )
    with np.errstate(over='ignore', under='ignore'):
        leaf_var = float(np.float64(prior.leaf_sd) ** 2)
    check(leaf_var, 'the leaf prior variance (tau_num / (k sqrt(ntree)))**2 in units of var(y_train)', leaf_culprit)
    check(1 / leaf_var, 'the leaf prior precision', leaf_culprit)
    if outcome.binary:
        return
    sigest_culprit = origin('sigest', 'the residual sd of a linear regression of y_train on x_train')
    if prior.sigma2_alpha is None:  # lambda_=0: sigma known, fixed at sigest
        check(prior.sigma2_init, 'the known error variance (sigest / sd(y_train))**2 (lambda_=0)', sigest_culprit)
        _check_y_reach(prior, given)
        return
    check(prior.sigma2_alpha, "the error variance prior's shape sigdf / 2", 'sigdf')
    check(prior.sigma2_init, 'the starting error variance (sigest / sd(y_train))**2', sigest_culprit)
    lambda_culprit = 'lambda_' if given['lambda_'] else f'lambda_ (by default from sigdf, sigquant and {sigest_culprit})'
    check(prior.sigma2_beta, "the error variance prior's scale sigdf * lambda_ / 2 in units of var(y_train)", lambda_culprit)
    _check_y_reach(prior, given)


def _check_y_reach(prior: Priors, given: dict) -> None:
    """Refuse an offset that leaves y_train too many sds away for float32."""
    reach = float(np.max(np.abs(prior.y_core), initial=0.0))
    if not reach <= _MAX_STANDARDISED:
        origin = 'offset' if given.get('offset') else 'offset (by default mean(y_train))'
        msg = (
            f'{origin} leaves y_train minus the offset reaching {reach:.3g} standard '
            f'deviations of y_train: in float32, which the sampler computes in, that rounds to more than one '
            f'standard deviation (the limit is {_MAX_STANDARDISED:.3g}); pass an offset within the range of '
            'y_train, or subtract a constant from y_train'
        )
        raise ValueError(msg)


def ols_sigest(x, y):
    """Residual sd of the OLS fit of y on x (R: summary(lm(y ~ x))$sigma).

    Solved by the normal equations of the centred, unit-norm columns (an
    eigendecomposition of their small Gram matrix), not by LAPACK's
    least squares on the ``(n, q)`` design, whose multithreaded BLAS is slow
    beside JAX's threads and leaves its threads spinning after the call,
    taking a core from the sampler that runs next. Columns whose singular value
    is below 1e-7 times the largest (R's ``lm`` tolerance) count as aliased
    and are left out of the rank, as ``lm`` does.

    Parameters
    ----------
    x
        ``(n, p)`` float64 predictors, NaN where missing (mean-imputed, with
        an indicator column per incomplete column).
    y
        ``(n,)`` float64 outcome.

    Returns
    -------
    float
        The residual sd; ``sd(y)`` when ``p >= n - 1``, or no degree of
        freedom is left.
    """
    missing = np.isnan(x)
    if missing.any():
        # mean imputation plus an indicator per incomplete column
        cols = missing.any(axis=0)
        x = np.where(missing, np.nanmean(x, axis=0), x)
        x = np.column_stack([x, missing[:, cols].astype(float)])
    n, p = x.shape
    if p >= n - 1:
        return float(np.std(y, ddof=1))
    # the intercept is the centring; columns constant to rounding (centred
    # norm below the tolerance times their norm) are aliased with it
    xc = x - x.mean(axis=0)
    yc = y - y.mean()
    norms = np.sqrt(np.sum(xc * xc, axis=0))
    varying = norms > _OLS_TOL * np.sqrt(np.sum(x * x, axis=0))
    xc = xc[:, varying] / norms[varying]
    if not xc.shape[1]:
        return float(np.std(y, ddof=1))
    eigval, eigvec = np.linalg.eigh(xc.T @ xc)
    kept = eigval > _OLS_TOL**2 * max(eigval.max(initial=0.0), 1.0)
    basis = xc @ eigvec[:, kept]  # orthogonal columns, squared norms eigval[kept]
    resid = yc - basis @ (basis.T @ yc / eigval[kept])
    dof = n - 1 - int(kept.sum())
    if dof <= 0:
        return float(np.std(y, ddof=1))
    return float(np.sqrt(np.sum(resid**2) / dof))


_OLS_TOL = 1e-7
