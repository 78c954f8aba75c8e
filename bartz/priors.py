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

from bartz import _checks

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
        default_tau_num=lambda y: float((y.max() - y.min()) / 2),
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
    y = _checks._as_vector('y_train', y_train, n)
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
    elif np.ptp(y) == 0:
        msg = f'y_train is constant ({y[0]}): there is nothing to fit'
        raise ValueError(msg)
    if w is not None:
        w = _checks._as_vector('w', w, n)
        if np.any(w <= 0):
            msg = f'w must be positive, got minimum {w.min()}'
            raise ValueError(msg)
    return y, w


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
      ``sigma^2 ~ sigdf lambda / chi2(sigdf)``.

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
    if offset is None:
        offset = outcome.default_offset(y)
    if tau_num is None:
        tau_num = outcome.default_tau_num(y)
    if outcome.binary:
        scale = 1.0
        y_core = y.astype(bool)
        sigest = lambda_ = sigma2_alpha = sigma2_beta = None
        sigma2_init = 1.0
    else:
        scale = float(np.std(y))
        y_core = ((y - offset) / scale).astype(np.float32)
        if sigest is None:
            sigest = _ols_sigest(x_ols, y) if x_ols.shape[1] else float(np.std(y, ddof=1))
        if lambda_ is None:
            qchi = 2 * special.gammaincinv(sigdf / 2, 1 - sigquant)  # scipy.stats.chi2.ppf(1 - sigquant, sigdf)
            lambda_ = sigest**2 * qchi / sigdf
        sigma2_alpha = sigdf / 2
        sigma2_beta = sigdf * lambda_ / 2 / scale**2
        sigma2_init = (sigest / scale) ** 2
    return Priors(
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


def _ols_sigest(x, y):
    """Residual sd of the OLS fit of y on x (R: summary(lm(y ~ x))$sigma).

    Solved by the normal equations of the centred, unit-norm columns (an
    eigendecomposition of their small Gram matrix), not by LAPACK's
    least squares on the ``(n, q)`` design, whose multithreaded BLAS took
    6 to 45 ms beside JAX's threads (0.5 ms here) and left its threads
    spinning for tens of milliseconds after the call, taking a core from
    the sampler that runs next. Columns whose singular value
    is below 1e-7 times the largest (R's ``lm`` tolerance) count as aliased
    and are left out of the rank, as ``lm`` does.
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
