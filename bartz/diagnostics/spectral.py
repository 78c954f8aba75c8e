"""Spectral estimates of MCMC output: autocovariances by FFT (for the ESS),
the spectral density at frequency zero by an AR fit, and Geweke's z, as R's
``coda::geweke.diag`` and ``BART::gewekediag``.

References
----------
.. [1] Geweke, J. (1992). "Evaluating the accuracy of sampling-based
   approaches to calculating posterior moments". In *Bayesian Statistics 4*,
   Oxford University Press.
.. [2] Plummer, M., Best, N., Cowles, K. and Vines, K. (2006). "CODA:
   convergence diagnosis and output analysis for MCMC". *R News* 6(1), 7-11.
"""

import math

import numpy as np
from numpy.typing import ArrayLike

from bartz.diagnostics.chains import MIN_DRAWS, unflatten
from bartz.prep import checks

__all__ = ['autocov', 'geweke', 'next_fast_len', 'spectrum0_ar']


def next_fast_len(n: int) -> int:
    """The smallest ``2**a 3**b 5**c >= n``: a fast length for the FFT.

    What ``scipy.fft.next_fast_len(n, real=True)`` gives, without importing
    `scipy.fft` (which would slow ``import bartz``).

    Parameters
    ----------
    n : int
        A length, at least 0.

    Returns
    -------
    int
        The 5-smooth length (1 for ``n <= 1``).
    """
    best = 2 ** max(n - 1, 0).bit_length()
    power5 = 1
    while power5 < best:
        power35 = power5
        while power35 < best:
            # the smallest power of two that brings power35 to n or above
            candidate = power35 * 2 ** max(math.ceil(n / power35) - 1, 0).bit_length()
            best = min(best, candidate)
            power35 *= 3
        power5 *= 5
    return best


def autocov(x: np.ndarray) -> np.ndarray:
    """Biased autocovariance along the last axis, at all lags.

    ``acov(t) = sum_i (x_i - mean)(x_{i+t} - mean) / n``, by a zero-padded
    FFT (NumPy's: importing `scipy.fft` would slow ``import bartz``).

    Parameters
    ----------
    x : numpy.ndarray
        Series along the last axis, ``(..., n)``.

    Returns
    -------
    numpy.ndarray
        Shaped like ``x``: lags 0 to n - 1.
    """
    num_draws = x.shape[-1]
    nfft = next_fast_len(2 * num_draws)
    centered = x - np.mean(x, axis=-1, keepdims=True)
    spectrum = np.fft.rfft(centered, n=nfft, axis=-1)
    power = spectrum.real**2 + spectrum.imag**2
    return np.fft.irfft(power, n=nfft, axis=-1)[..., :num_draws] / num_draws


def spectrum0_ar(y: np.ndarray) -> np.ndarray:
    """Spectral density at frequency zero of each column, by an AR fit.

    As ``coda::spectrum0.ar``: fit AR(p) by Yule-Walker (Levinson-Durbin on
    the biased autocovariances of the demeaned series), p in 0..min(n - 1,
    floor(10 log10 n)) chosen by AIC as R's ``ar()``, then ``S(0) =
    var_pred / (1 - sum(ar))^2`` with ``var_pred`` the innovation variance
    times n / (n - p - 1). Columns that are exactly a linear function of time
    get 0.

    Parameters
    ----------
    y : numpy.ndarray
        Shape ``(n, k)``, float64.

    Returns
    -------
    numpy.ndarray
        Shape ``(k,)``.
    """
    n = y.shape[0]
    centered = y - np.mean(y, axis=0)
    max_order = min(n - 1, math.floor(10 * math.log10(n)))
    acov = np.stack([np.sum(centered[: n - h] * centered[h:], axis=0) / n for h in range(max_order + 1)])
    with np.errstate(divide='ignore', invalid='ignore'):
        innov_var, coef_sum = _levinson_durbin(acov)
        aic = n * np.log(innov_var) + 2 * np.arange(max_order + 1)[:, None]
        best = np.argmin(np.where(np.isnan(aic), np.inf, aic), axis=0)
        cols = np.arange(y.shape[1])
        var_pred = innov_var[best, cols] * n / (n - (best + 1))
        spec = var_pred / (1 - coef_sum[best, cols]) ** 2
    return np.where(_linear_in_time(y, centered), 0.0, spec)


def _linear_in_time(y: np.ndarray, centered: np.ndarray) -> np.ndarray:
    """The columns of ``y`` (``centered``: demeaned) that are a linear
    function of time.

    coda sets 0 when sd(residuals(lm(y ~ time))) is all.equal to 0, an
    absolute tolerance of 1.5e-8; we use it relative to sd(y) so the result
    does not depend on the units of y.
    """
    n = y.shape[0]
    time = np.arange(n) - (n - 1) / 2
    slope = time @ centered / (time @ time)
    resid_sd = np.std(centered - np.outer(time, slope), axis=0, ddof=1)
    return resid_sd <= 1.5e-8 * np.std(y, axis=0, ddof=1)


def _levinson_durbin(acov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Yule-Walker fits of every order from 0 to ``len(acov) - 1``.

    ``acov`` is ``(orders, k)``: the autocovariances of k series at lags 0,
    1, ... Returns, per order and series, ``(orders, k)``, the innovation
    variance and the sum of the AR coefficients.
    """
    max_order = acov.shape[0] - 1
    coef = np.zeros((max_order, acov.shape[1]))
    innov_var = [acov[0]]
    coef_sum = [np.zeros(acov.shape[1])]
    for order in range(1, max_order + 1):
        prev = coef[: order - 1]
        reflection = (acov[order] - np.sum(prev * acov[order - 1 : 0 : -1], axis=0)) / innov_var[-1]
        coef[: order - 1] = prev - reflection * prev[::-1]
        coef[order - 1] = reflection
        innov_var.append(innov_var[-1] * (1 - reflection**2))
        coef_sum.append(np.sum(coef[:order], axis=0))
    return np.stack(innov_var), np.stack(coef_sum)


def geweke(x: ArrayLike, frac1: float = 0.1, frac2: float = 0.5) -> np.ndarray | np.float64:
    """Geweke's convergence diagnostic, as R's ``coda::geweke.diag``.

    Compares the mean of the first ``frac1`` of the draws with the mean of the
    last ``frac2``: ``z = (mean_A - mean_B) / sqrt(S_A(0) / n_A + S_B(0) /
    n_B)``, where ``S(0)`` is the spectral density at frequency zero of each
    window estimated by an autoregressive fit (coda's ``spectrum0.ar``:
    Yule-Walker, order chosen by AIC among 0..min(n - 1, 10 log10 n),
    ``S(0) = var_innovations / (1 - sum(ar coefficients))^2``). If the chain is
    stationary, z is approximately standard normal; large ``|z|`` means the
    beginning of the chain is not from the same distribution as the end
    (burn-in too short).

    The windows are those of coda for a chain of ``n`` draws (1-based,
    inclusive): ``1..ceil(1 + frac1 (n - 1))`` and ``floor(n - frac2 (n -
    1))..n``. This is also ``BART::gewekediag``, which R's BART applies to the
    columns of ``yhat_train``.

    Parameters
    ----------
    x : array_like
        Draws of one chain, shaped ``(draws,)`` or ``(draws, k, ...)``; each
        column (element of the trailing axes) is treated independently. Must
        be finite, with at least 4 draws.
    frac1 : float, default 0.1
        Fraction of the draws in the first window, in (0, 1).
    frac2 : float, default 0.5
        Fraction of the draws in the last window, in (0, 1), with
        ``frac1 + frac2 <= 1``.

    Returns
    -------
    numpy.ndarray or numpy.float64
        The z scores, shaped like the trailing axes of ``x`` (a scalar for a
        1-d ``x``). As in coda, a column that is exactly a linear function of
        time in both windows has zero estimated variance, so its z is
        infinite (or NaN if the means coincide).

    Raises
    ------
    TypeError
        If ``x`` is not numeric or is complex, or ``frac1`` or ``frac2`` is
        not a real number.
    ValueError
        If ``x`` is not finite, is a scalar, or has fewer than 4 draws; if
        ``frac1`` or ``frac2`` is not in (0, 1) or their sum exceeds 1.

    Notes
    -----
    Deviation from coda: a window is treated as exactly linear in time when
    the residual sd of a linear fit is at most 1.5e-8 times the sd of the
    window, instead of at most 1.5e-8 in absolute terms.

    References
    ----------
    .. [1] Geweke, J. (1992). "Evaluating the accuracy of sampling-based
       approaches to calculating posterior moments". In *Bayesian Statistics
       4* (eds. J. M. Bernardo, J. O. Berger, A. P. Dawid and A. F. M. Smith),
       Oxford University Press.
    .. [2] Plummer, M., Best, N., Cowles, K. and Vines, K. (2006). "CODA:
       convergence diagnosis and output analysis for MCMC". *R News* 6(1),
       7-11.

    Examples
    --------
    >>> import numpy as np
    >>> from bartz.diagnostics import geweke
    >>> rng = np.random.default_rng(0)
    >>> draws = rng.standard_normal((1000, 3))
    >>> z = geweke(draws)
    >>> z.shape
    (3,)
    >>> print(np.all(np.abs(z) < 4))
    True

    A chain that starts far from where it ends:

    >>> chain = rng.standard_normal(1000)
    >>> chain[:100] += 3
    >>> print(abs(geweke(chain)) > 10)
    True
    """
    arr, frac1, frac2 = _check_geweke(x, frac1, frac2)
    n = arr.shape[0]
    # coda's windows, 1-based inclusive, with the same float arithmetic;
    # frac1, frac2 > 0 guarantee at least 2 draws in each
    first = arr[: math.ceil(1 + frac1 * (n - 1))]
    last = arr[math.floor(n - frac2 * (n - 1)) - 1 :]
    rest = arr.shape[1:]
    first = first.reshape(len(first), -1)
    last = last.reshape(len(last), -1)
    var_first = spectrum0_ar(first) / len(first)
    var_last = spectrum0_ar(last) / len(last)
    with np.errstate(divide='ignore', invalid='ignore'):
        z = (np.mean(first, axis=0) - np.mean(last, axis=0)) / np.sqrt(var_first + var_last)
    return unflatten(z, rest)


def _check_geweke(x: ArrayLike, frac1: float, frac2: float) -> tuple[np.ndarray, float, float]:
    """The arguments of `geweke` checked: ``x`` as a float64 array, the fractions as floats."""
    arr = checks.as_finite_array('x', x)
    frac1 = checks.check_fraction('frac1', frac1)
    frac2 = checks.check_fraction('frac2', frac2)
    if frac1 + frac2 > 1:
        msg = f'frac1 + frac2 must be at most 1 (the windows would overlap), got {frac1} + {frac2}'
        raise ValueError(msg)
    if arr.ndim < 1:
        msg = 'x must have at least 1 dimension (the draws), got a scalar'
        raise ValueError(msg)
    if arr.shape[0] < MIN_DRAWS:
        msg = f'x must have at least {MIN_DRAWS} draws along axis 0, got {arr.shape[0]}'
        raise ValueError(msg)
    return arr, frac1, frac2
