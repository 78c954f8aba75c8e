"""How well the chains mix: rank-normalised split R-hat and the effective
sample sizes (bulk, tail, of the mean), as Stan, the R package ``posterior``
and ArviZ compute them (Vehtari et al. 2021).

Chains are split in halves, draws rank-normalised (`bartz.diagnostics.ranks`),
autocovariances computed by FFT and summed with Geyer's initial monotone
sequence estimator. The building blocks take ``(elements, chains, draws)``
arrays and are vectorised over the elements.

References
----------
.. [1] Vehtari, A., Gelman, A., Simpson, D., Carpenter, B. and Bürkner, P.-C.
   (2021). "Rank-normalization, folding, and localization: an improved R-hat
   for assessing convergence of MCMC". *Bayesian Analysis* 16(2), 667-718.
   doi:10.1214/20-BA1221
.. [2] Geyer, C. J. (1992). "Practical Markov chain Monte Carlo". *Statistical
   Science* 7(4), 473-483.
"""

import numpy as np
from numpy.typing import ArrayLike

from bartz.diagnostics.chains import as_chains, in_batches, is_constant, split_chains, unflatten
from bartz.diagnostics.ranks import z_scale
from bartz.diagnostics.spectral import autocov

__all__ = ['ess', 'ess_bulk', 'ess_tail', 'geyer_ess', 'rhat', 'rhat_bulk_tail', 'tail_ess']


# ------------------------------------------------------------ building blocks


def _rhat_basic(x: np.ndarray) -> np.ndarray:
    """Classic R-hat of ``(elements, chains, draws)``, chains already split."""
    num_draws = x.shape[2]
    between = num_draws * np.var(np.mean(x, axis=2), axis=1, ddof=1)
    within = np.mean(np.var(x, axis=2, ddof=1), axis=1)
    with np.errstate(divide='ignore', invalid='ignore'):
        return np.sqrt((between / within + num_draws - 1) / num_draws)


def rhat_bulk_tail(split: np.ndarray, z_split: np.ndarray, median: np.ndarray | None = None) -> np.ndarray:
    """Bulk and tail R-hat of split chains.

    Bulk: the classic R-hat of the rank-normalised draws; tail: the same on
    the draws folded around their median, ``|x - median(x)|``.

    Parameters
    ----------
    split : numpy.ndarray
        ``(elements, chains, draws)``, chains already split (`split_chains`).
    z_split : numpy.ndarray
        ``z_scale(split)``, shared with the bulk ESS.
    median : numpy.ndarray, optional
        ``(elements,)``, the median of each element's draws (from
        ``z_scale(split, with_median=True)``); computed if not given.

    Returns
    -------
    numpy.ndarray
        ``(2, elements)``: bulk, tail. NaN for elements whose draws are all equal.
    """
    bulk = _rhat_basic(z_split)
    if median is None:
        median = np.median(split, axis=(1, 2))
    folded = np.abs(split - median[:, None, None])
    tail = _rhat_basic(z_scale(folded))
    out = np.stack([bulk, tail])
    out[:, is_constant(split)] = np.nan
    return out


def geyer_ess(x: np.ndarray) -> np.ndarray:
    """Effective sample size of each element, chains already split.

    A literal vectorisation of the loops of Stan / ArviZ ``_ess``:
    autocorrelations combined across chains, summed in pairs up to the first
    non-positive pair (Geyer's initial positive sequence), pairs made
    non-increasing (initial monotone sequence), tau capped below at
    ``1 / log10(total draws)``.

    Parameters
    ----------
    x : numpy.ndarray
        ``(elements, chains, draws)``, chains already split.

    Returns
    -------
    numpy.ndarray
        ``(elements,)``; NaN for elements whose draws are all equal.
    """
    num_elements, num_chains, num_draws = x.shape
    rho, var_plus = _combined_autocorrelation(x)
    tau = _geyer_tau(rho)
    total = num_chains * num_draws
    tau = np.maximum(tau, 1 / np.log10(total))
    ess_value = total / tau
    ess_value[~(var_plus > 0)] = np.nan  # constant elements (var_plus 0 or nan)
    return ess_value


def _combined_autocorrelation(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``rho_t = 1 - (W - mean_c acov_c(t)) / var_plus`` of ``(elements,
    chains, draws)``, ``(elements, draws)``, and ``var_plus``, ``(elements,)``."""
    num_draws = x.shape[2]
    acov = autocov(x)
    mean_var = np.mean(acov[:, :, 0], axis=1) * num_draws / (num_draws - 1)
    var_plus = mean_var * (num_draws - 1) / num_draws
    if x.shape[1] > 1:
        var_plus = var_plus + np.var(np.mean(x, axis=2), axis=1, ddof=1)
    with np.errstate(divide='ignore', invalid='ignore'):
        rho = 1 - (mean_var[:, None] - np.mean(acov, axis=1)) / var_plus[:, None]
    rho[:, 0] = 1
    return rho, var_plus


def _geyer_tau(rho: np.ndarray) -> np.ndarray:
    """``tau = -1 + 2 sum rho_t`` of autocorrelations ``(elements, draws)``,
    truncated and made monotone in pairs as Geyer's estimator."""
    num_elements, num_draws = rho.shape
    # pair k = (rho[2k], rho[2k+1]); Stan's loop evaluates pairs 1..max_pair
    # (the condition t < n - 3 in its loop), pair 0 is always there
    max_pair = max(0, -(-num_draws // 2) - 2)
    even = rho[:, 0 : 2 * max_pair + 2 : 2]
    pair_sums = even + rho[:, 1 : 2 * max_pair + 2 : 2]
    nonpositive = pair_sums <= 0
    first_nonpositive = np.where(np.any(nonpositive, axis=1), np.argmax(nonpositive, axis=1), max_pair)
    # the pair where the loop stopped: the pairs before it enter tau in full
    last = np.minimum(first_nonpositive, max_pair)
    rows = np.arange(num_elements)
    last_even = even[rows, last]
    # the even term of the last pair still counts if positive (or if the loop
    # stored it because the pair sum was non-negative)
    tail_term = np.where((last_even > 0) | (pair_sums[rows, last] >= 0), last_even, 0.0)
    monotone = np.minimum.accumulate(pair_sums, axis=1)
    used = np.arange(max_pair + 1) < last[:, None]
    return -1 + 2 * np.sum(np.where(used, monotone, 0.0), axis=1) + tail_term


def tail_ess(x: np.ndarray) -> np.ndarray:
    """Tail ESS of ``(elements, chains, draws)``, chains not split.

    The smaller of the ESS of the indicators ``x <= q_0.05`` and ``x <=
    q_0.95`` on split chains; an indicator that is constant (at least 5% of
    the draws tied at the maximum) has no ESS, and the other one is used, as
    ArviZ does. Returns ``(elements,)``.
    """
    num_elements, num_chains, num_draws = x.shape
    flat = x.reshape(num_elements, num_chains * num_draws)
    low, high = np.quantile(flat, [0.05, 0.95], axis=1)[:, :, None, None]
    ess_low = geyer_ess(split_chains((x <= low).astype(np.float64)))
    ess_high = geyer_ess(split_chains((x <= high).astype(np.float64)))
    return np.fmin(ess_low, ess_high)


def _rhat_batch(x: np.ndarray) -> np.ndarray:
    split = split_chains(x)
    return np.max(rhat_bulk_tail(split, *z_scale(split, with_median=True)), axis=0, keepdims=True)


def _ess_bulk_batch(x: np.ndarray) -> np.ndarray:
    return geyer_ess(z_scale(split_chains(x)))[None]


def _ess_tail_batch(x: np.ndarray) -> np.ndarray:
    return tail_ess(x)[None]


def _ess_batch(x: np.ndarray) -> np.ndarray:
    return geyer_ess(split_chains(x))[None]


# --------------------------------------------------------------- public API


def rhat(draws: ArrayLike, *, chain_axis: int | None = 0, draw_axis: int = 1) -> np.ndarray | np.float64:
    """Rank-normalised split R-hat (Vehtari et al. 2021).

    The maximum of the bulk R-hat (classic R-hat of the rank-normalised split
    chains) and the tail R-hat (the same on the draws folded around their
    median, ``|x - median(x)|``), computed independently for every element of
    the trailing axes. Values close to 1 indicate that the chains mix; Vehtari
    et al. recommend running more or longer chains when R-hat > 1.01.

    For each quantity, with the ``M`` split chains of ``N`` draws each
    (rank-normalised: ``z = Phi^-1((r - 3/8) / (M N + 1/4))`` with ``r`` the
    rank among all draws), ``W`` the mean of the within-chain variances and
    ``B = N var(chain means)``: ``R-hat = sqrt(((N - 1) / N W + B / N) / W)``.

    Parameters
    ----------
    draws : array_like
        MCMC draws, shaped ``(chains, draws, ...)`` with the default axes.
        Must be finite, with at least 4 draws per chain.
    chain_axis : int or None, default 0
        Axis of ``draws`` that indexes chains. ``None`` means that ``draws``
        holds a single chain (then usually ``draw_axis=0``).
    draw_axis : int, default 1
        Axis of ``draws`` that indexes the draws within a chain.

    Returns
    -------
    numpy.ndarray or numpy.float64
        R-hat, shaped like the trailing axes of ``draws`` (a scalar if there
        are none). NaN for elements whose draws are all equal. A single chain
        is allowed: its two halves are compared.

    Raises
    ------
    TypeError
        If ``draws`` is not numeric or is complex, or an axis is not an integer.
    ValueError
        If ``draws`` has NaN or infinite values, too few dimensions, fewer than
        4 draws per chain, or the axes are out of bounds or equal.

    See Also
    --------
    ess_bulk, ess_tail, summary

    References
    ----------
    .. [1] Vehtari, A., Gelman, A., Simpson, D., Carpenter, B. and Bürkner,
       P.-C. (2021). "Rank-normalization, folding, and localization: an
       improved R-hat for assessing convergence of MCMC". *Bayesian Analysis*
       16(2), 667-718.

    Examples
    --------
    >>> import numpy as np
    >>> from bartz.diagnostics import rhat
    >>> rng = np.random.default_rng(0)
    >>> draws = rng.standard_normal((4, 1000, 3))  # 4 chains, 3 parameters
    >>> rhat(draws).shape
    (3,)
    >>> print(np.all(rhat(draws) < 1.01))
    True

    Chains that sit at different places are flagged:

    >>> shifted = draws[..., 0] + np.arange(4)[:, None]
    >>> print(rhat(shifted) > 1.1)
    True
    """
    x, rest = as_chains(draws, chain_axis, draw_axis)
    return unflatten(in_batches(_rhat_batch, x), rest)


def ess_bulk(draws: ArrayLike, *, chain_axis: int | None = 0, draw_axis: int = 1) -> np.ndarray | np.float64:
    """Bulk effective sample size (Vehtari et al. 2021).

    The effective sample size of the rank-normalised split chains: a
    measure of how well the centre of the distribution (mean, median) is
    estimated that is robust to heavy tails. The autocorrelations at lag t
    are combined across chains as ``rho_t = 1 - (W - mean_c acov_c(t)) /
    var_plus`` (``W`` the mean within-chain variance, ``var_plus`` the
    pooled variance estimate), summed with Geyer's initial monotone sequence
    estimator into ``tau = -1 + 2 sum rho_t``, and ``ESS = M N / tau``,
    where ``M N`` is the total number of split-chain draws. As in Stan,
    ``tau`` is capped below at ``1 / log10(M N)``, so ESS can exceed the
    number of draws (antithetic chains) by at most a factor ``log10(M N)``.

    Parameters
    ----------
    draws : array_like
        MCMC draws, shaped ``(chains, draws, ...)`` with the default axes.
        Must be finite, with at least 4 draws per chain.
    chain_axis : int or None, default 0
        Axis of ``draws`` that indexes chains. ``None`` means that ``draws``
        holds a single chain (then usually ``draw_axis=0``).
    draw_axis : int, default 1
        Axis of ``draws`` that indexes the draws within a chain.

    Returns
    -------
    numpy.ndarray or numpy.float64
        Bulk ESS, shaped like the trailing axes of ``draws``. NaN for elements
        whose draws are all equal.

    Raises
    ------
    TypeError, ValueError
        For invalid ``draws`` or axes, as `rhat`.

    See Also
    --------
    ess, ess_tail, rhat

    References
    ----------
    .. [1] Vehtari, A., Gelman, A., Simpson, D., Carpenter, B. and Bürkner,
       P.-C. (2021). "Rank-normalization, folding, and localization: an
       improved R-hat for assessing convergence of MCMC". *Bayesian Analysis*
       16(2), 667-718.
    .. [2] Geyer, C. J. (1992). "Practical Markov chain Monte Carlo".
       *Statistical Science* 7(4), 473-483.

    Examples
    --------
    Independent draws have an ESS close to their number:

    >>> import numpy as np
    >>> from bartz.diagnostics import ess_bulk
    >>> rng = np.random.default_rng(0)
    >>> draws = rng.standard_normal((4, 1000))
    >>> print(3200 < ess_bulk(draws) < 4800)
    True

    One chain of an AR(1) process with coefficient 0.9 has an ESS of about
    ``n (1 - 0.9) / (1 + 0.9)``:

    >>> from scipy.signal import lfilter
    >>> chain = lfilter([1], [1, -0.9], rng.standard_normal(20_000))
    >>> print(round(ess_bulk(chain, chain_axis=None, draw_axis=0), -2))
    1000.0
    """
    x, rest = as_chains(draws, chain_axis, draw_axis)
    return unflatten(in_batches(_ess_bulk_batch, x), rest)


def ess_tail(draws: ArrayLike, *, chain_axis: int | None = 0, draw_axis: int = 1) -> np.ndarray | np.float64:
    """Tail effective sample size (Vehtari et al. 2021).

    The minimum of the effective sample sizes of the indicators
    ``x <= q_0.05`` and ``x <= q_0.95`` (``q_p`` the empirical quantile of all
    draws, linear interpolation), each computed on split chains as in
    `ess`. It measures how well the 5% and 95% quantiles, hence intervals,
    are estimated.

    Parameters
    ----------
    draws : array_like
        MCMC draws, shaped ``(chains, draws, ...)`` with the default axes.
        Must be finite, with at least 4 draws per chain.
    chain_axis : int or None, default 0
        Axis of ``draws`` that indexes chains. ``None`` means that ``draws``
        holds a single chain (then usually ``draw_axis=0``).
    draw_axis : int, default 1
        Axis of ``draws`` that indexes the draws within a chain.

    Returns
    -------
    numpy.ndarray or numpy.float64
        Tail ESS, shaped like the trailing axes of ``draws``. NaN for elements
        whose draws are all equal. If one of the two indicators is constant
        (for example at least 5% of the draws tied at the maximum), the ESS of
        the other one.

    Raises
    ------
    TypeError, ValueError
        For invalid ``draws`` or axes, as `rhat`.

    See Also
    --------
    ess_bulk, rhat

    References
    ----------
    .. [1] Vehtari, A., Gelman, A., Simpson, D., Carpenter, B. and Bürkner,
       P.-C. (2021). "Rank-normalization, folding, and localization: an
       improved R-hat for assessing convergence of MCMC". *Bayesian Analysis*
       16(2), 667-718.

    Examples
    --------
    >>> import numpy as np
    >>> from bartz.diagnostics import ess_tail
    >>> rng = np.random.default_rng(0)
    >>> draws = rng.standard_normal((4, 1000))
    >>> print(3000 < ess_tail(draws) < 5000)
    True
    """
    x, rest = as_chains(draws, chain_axis, draw_axis)
    return unflatten(in_batches(_ess_tail_batch, x), rest)


def ess(draws: ArrayLike, *, chain_axis: int | None = 0, draw_axis: int = 1) -> np.ndarray | np.float64:
    """Effective sample size of the mean, split chains, no rank normalisation.

    The classic estimator of Stan's ``ess_mean`` (Geyer's initial monotone
    sequence on FFT autocovariances of the split chains, see `ess_bulk`
    for the formula) applied to the draws themselves. It is the ESS that
    enters the Monte Carlo standard error of the posterior mean,
    ``sd / sqrt(ess)``, but unlike `ess_bulk` it is not robust to heavy
    tails.

    Parameters
    ----------
    draws : array_like
        MCMC draws, shaped ``(chains, draws, ...)`` with the default axes.
        Must be finite, with at least 4 draws per chain.
    chain_axis : int or None, default 0
        Axis of ``draws`` that indexes chains. ``None`` means that ``draws``
        holds a single chain (then usually ``draw_axis=0``).
    draw_axis : int, default 1
        Axis of ``draws`` that indexes the draws within a chain.

    Returns
    -------
    numpy.ndarray or numpy.float64
        ESS, shaped like the trailing axes of ``draws``. NaN for elements
        whose draws are all equal.

    Raises
    ------
    TypeError, ValueError
        For invalid ``draws`` or axes, as `rhat`.

    See Also
    --------
    ess_bulk, ess_tail

    References
    ----------
    .. [1] Geyer, C. J. (1992). "Practical Markov chain Monte Carlo".
       *Statistical Science* 7(4), 473-483.
    .. [2] Vehtari, A., Gelman, A., Simpson, D., Carpenter, B. and Bürkner,
       P.-C. (2021). "Rank-normalization, folding, and localization: an
       improved R-hat for assessing convergence of MCMC". *Bayesian Analysis*
       16(2), 667-718.

    Examples
    --------
    Monte Carlo standard error of a posterior mean:

    >>> import numpy as np
    >>> from bartz.diagnostics import ess
    >>> rng = np.random.default_rng(0)
    >>> draws = rng.standard_normal((4, 1000))
    >>> mcse = draws.std() / np.sqrt(ess(draws))
    >>> print(0.013 < mcse < 0.018)
    True
    """
    x, rest = as_chains(draws, chain_axis, draw_axis)
    return unflatten(in_batches(_ess_batch, x), rest)
