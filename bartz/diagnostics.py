"""Convergence diagnostics for MCMC draws: R-hat, effective sample size, Geweke.

Pure numpy/scipy; these functions take draws already on the host (for example
the attributes of a `gbart` result, or any array of MCMC output) and never
touch JAX.

The R-hat and ESS estimators follow Vehtari, Gelman, Simpson, Carpenter &
Bürkner (2021) exactly as implemented in Stan, the R package ``posterior`` and
ArviZ: chains are split in halves, draws are rank-normalised, autocovariances
are computed by FFT and summed with Geyer's initial monotone sequence
estimator. `geweke` reproduces R's ``coda::geweke.diag`` and
``BART::gewekediag``.

Array convention
----------------
The R-hat / ESS functions take an array shaped ``(chains, draws, ...)`` by
default (move the axes with ``chain_axis`` and ``draw_axis``, or pass
``chain_axis=None`` for a single chain) and compute the diagnostic
independently for every element of the remaining trailing axes.

References
----------
.. [1] Vehtari, A., Gelman, A., Simpson, D., Carpenter, B. and Bürkner, P.-C.
   (2021). "Rank-normalization, folding, and localization: an improved R-hat
   for assessing convergence of MCMC". *Bayesian Analysis* 16(2), 667-718.
   doi:10.1214/20-BA1221
.. [2] Geyer, C. J. (1992). "Practical Markov chain Monte Carlo". *Statistical
   Science* 7(4), 473-483.
.. [3] Geweke, J. (1992). "Evaluating the accuracy of sampling-based approaches
   to calculating posterior moments". In *Bayesian Statistics 4*, Oxford
   University Press.
.. [4] Plummer, M., Best, N., Cowles, K. and Vines, K. (2006). "CODA:
   convergence diagnosis and output analysis for MCMC". *R News* 6(1), 7-11.
"""

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy import special

__all__ = [
    'ESS_MIN',
    'MIN_DRAWS',
    'RHAT_MAX',
    'ConvergenceWarning',
    'check_points',
    'convergence_problems',
    'ess',
    'ess_bulk',
    'ess_tail',
    'geweke',
    'rhat',
    'summary',
]

MIN_DRAWS = 4
# draws processed at once (chains x draws x elements): bounds the temporaries
# to a few tens of MB however many elements there are
_BATCH_SIZE = 2**20


# ---------------------------------------------------------------- validation


def _to_float_array(x: ArrayLike, name: str) -> np.ndarray:
    """Convert ``x`` to a float64 numpy array, or raise naming ``name``."""
    try:
        arr = np.asarray(x)
    except Exception as exc:  # ragged lists and the like
        msg = f'{name} must be convertible to a numeric array, got {type(x).__name__}'
        raise ValueError(msg) from exc
    if arr.dtype.kind == 'c':
        msg = f'{name} must be real, got complex dtype {arr.dtype}'
        raise ValueError(msg)
    if arr.dtype.kind not in 'biuf':
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError) as exc:
            msg = f'{name} must be a numeric array, got dtype {arr.dtype}'
            raise ValueError(msg) from exc
    arr = arr.astype(np.float64, copy=False)
    if not np.all(np.isfinite(arr)):
        n_bad = int(np.sum(~np.isfinite(arr)))
        msg = f'{name} contains {n_bad} NaN or infinite values; all draws must be finite'
        raise ValueError(msg)
    return arr


def _check_axis(axis: object, ndim: int, name: str) -> int:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        msg = f'{name} must be an integer, got {axis!r}'
        raise ValueError(msg)
    if not -ndim <= axis < ndim:
        msg = f'{name}={axis} is out of bounds for draws with {ndim} dimensions'
        raise ValueError(msg)
    return int(axis) % ndim


def _as_chains(
    draws: ArrayLike, chain_axis: int | None, draw_axis: int
) -> tuple[np.ndarray, tuple[int, ...]]:
    """Validate ``draws`` and reshape it to ``(elements, chains, draws)``.

    Returns the float64 array, C-contiguous and shaped ``(elements, chains,
    draws)``, and the shape of the trailing axes of ``draws``.
    """
    arr = _to_float_array(draws, 'draws')
    if chain_axis is None:
        if arr.ndim < 1:
            msg = 'draws must have at least 1 dimension (the draws), got a scalar'
            raise ValueError(msg)
        draw_axis = _check_axis(draw_axis, arr.ndim, 'draw_axis')
        arr = np.moveaxis(arr, draw_axis, 0)[None]
    else:
        if arr.ndim < 2:
            msg = (
                'draws must have at least 2 dimensions (chains, draws, ...), got '
                f'shape {arr.shape}; for a single chain pass chain_axis=None, '
                'draw_axis=0'
            )
            raise ValueError(msg)
        chain_axis = _check_axis(chain_axis, arr.ndim, 'chain_axis')
        draw_axis = _check_axis(draw_axis, arr.ndim, 'draw_axis')
        if chain_axis == draw_axis:
            msg = (
                'chain_axis and draw_axis must be different axes, got both '
                f'equal to {chain_axis}'
            )
            raise ValueError(msg)
        arr = np.moveaxis(arr, (chain_axis, draw_axis), (0, 1))
    num_chains, num_draws = arr.shape[:2]
    if num_chains < 1:
        msg = 'draws must have at least 1 chain along chain_axis, got 0'
        raise ValueError(msg)
    if num_draws < MIN_DRAWS:
        msg = (
            f'draws must have at least {MIN_DRAWS} draws per chain along '
            f'draw_axis, got {num_draws}'
        )
        raise ValueError(msg)
    rest = arr.shape[2:]
    # elements first and contiguous: sorting and FFTs then run along memory
    arr = arr.reshape(num_chains, num_draws, math.prod(rest))
    return np.ascontiguousarray(arr.transpose(2, 0, 1)), rest


def _unflatten(values: np.ndarray, rest: tuple[int, ...]) -> np.ndarray | np.float64:
    # a 0-d result comes back as a numpy scalar, like numpy reductions
    return values.reshape(rest)[()]


def _in_batches(func, x: np.ndarray) -> np.ndarray:
    """Apply ``func`` to slices of the elements axis of ``x``, concatenate.

    All diagnostics are independent across elements; slicing bounds the
    temporaries (ranks, FFTs, copies) to a few tens of MB whatever the number
    of elements. ``func`` maps ``(m, chains, draws)`` to ``(k, m)``.
    """
    num_elements, num_chains, num_draws = x.shape
    if num_elements == 0:  # run on a dummy element to get the number of rows
        return func(np.zeros((1, num_chains, num_draws)))[:, :0]
    step = max(1, _BATCH_SIZE // (num_chains * num_draws))
    if num_elements <= step:
        return func(x)
    return np.concatenate(
        [func(x[start : start + step]) for start in range(0, num_elements, step)], axis=1
    )


def _is_constant(x: np.ndarray) -> np.ndarray:
    """Elements of an ``(elements, chains, draws)`` array with a single value."""
    return np.all(x == x[:, :1, :1], axis=(1, 2))


# ------------------------------------------------------------ building blocks
# all take arrays shaped (elements, chains, draws)


def _split_chains(x: np.ndarray) -> np.ndarray:
    """Split each chain in halves, dropping the middle draw if odd (as Stan)."""
    num_draws = x.shape[2]
    half = num_draws // 2
    return np.concatenate([x[:, :, :half], x[:, :, num_draws - half :]], axis=1)


def _sorted_twice_ranks(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The order that sorts each row of a 2-d array, the sorted rows, and
    twice the rank from 1 of each sorted value (an integer: ties share the
    mean of their ranks, a multiple of 1/2).

    The ranks are those of ``scipy.stats.rankdata(a, axis=1)``, computed
    without its stable sort (tied values share a rank anyway)."""
    m, n = a.shape
    order = np.argsort(a, axis=1)
    ordered = np.take_along_axis(a, order, axis=1)
    new_group = np.empty((m, n), bool)
    new_group[:, 0] = True
    np.not_equal(ordered[:, 1:], ordered[:, :-1], out=new_group[:, 1:])
    if new_group.all():
        twice = np.broadcast_to(np.arange(2, 2 * n + 1, 2), (m, n))
    else:
        # groups of ties never cross rows, because each row starts a group
        flat = new_group.ravel()
        starts = np.flatnonzero(flat)
        counts = np.diff(starts, append=flat.size)
        group_twice = 2 * (starts % n) + counts + 1
        twice = group_twice[np.cumsum(flat) - 1].reshape(m, n)
    return order, ordered, twice


def _z_scale(x: np.ndarray, with_median: bool = False):
    """Rank-normalise pooling chains and draws: Phi^-1((r - 3/8) / (S + 1/4)).

    The ranks are multiples of 1/2 from 1 to S: Phi^-1 is taken once per
    possible rank, from a table (the same numbers as per draw, with fewer
    evaluations). With `with_median`,
    also the median of each element's pooled draws (from the sorted draws:
    what `np.median` gives)."""
    num_elements, num_chains, num_draws = x.shape
    size = num_chains * num_draws
    order, ordered, twice = _sorted_twice_ranks(x.reshape(num_elements, size))
    table = special.ndtri((np.arange(2, 2 * size + 1) / 2 - 0.375) / (size + 0.25))
    z = np.empty((num_elements, size))
    np.put_along_axis(z, order, table[twice - 2], axis=1)
    z = z.reshape(x.shape)
    if not with_median:
        return z
    half = size // 2
    median = ordered[:, half] if size % 2 else np.mean(ordered[:, half - 1 : half + 1], axis=1)
    return z, median


def _rhat_basic(x: np.ndarray) -> np.ndarray:
    """Classic R-hat, chains already split."""
    num_draws = x.shape[2]
    between = num_draws * np.var(np.mean(x, axis=2), axis=1, ddof=1)
    within = np.mean(np.var(x, axis=2, ddof=1), axis=1)
    with np.errstate(divide='ignore', invalid='ignore'):
        return np.sqrt((between / within + num_draws - 1) / num_draws)


def _rhat_bulk_tail(split: np.ndarray, z_split: np.ndarray, median: np.ndarray | None = None) -> np.ndarray:
    """Bulk and tail R-hat, shape ``(2, elements)``, from the split chains.

    ``z_split`` is ``_z_scale(split)``, shared with the bulk ESS;
    ``median``, if given, the median of each element's draws (from
    ``_z_scale(split, with_median=True)``).
    """
    bulk = _rhat_basic(z_split)
    if median is None:
        median = np.median(split, axis=(1, 2))
    folded = np.abs(split - median[:, None, None])
    tail = _rhat_basic(_z_scale(folded))
    out = np.stack([bulk, tail])
    out[:, _is_constant(split)] = np.nan
    return out


def _autocov(x: np.ndarray) -> np.ndarray:
    """Biased autocovariance along the last axis, all lags, by zero-padded FFT
    (NumPy's: importing `scipy.fft` would slow ``import bartz``)."""
    num_draws = x.shape[-1]
    nfft = _next_fast_len(2 * num_draws)
    centered = x - np.mean(x, axis=-1, keepdims=True)
    spectrum = np.fft.rfft(centered, n=nfft, axis=-1)
    power = spectrum.real**2 + spectrum.imag**2
    return np.fft.irfft(power, n=nfft, axis=-1)[..., :num_draws] / num_draws


def _next_fast_len(n: int) -> int:
    """The smallest ``2**a 3**b 5**c >= n`` (a fast length for the FFT)."""
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


def _ess_core(x: np.ndarray) -> np.ndarray:
    """ESS of each element, chains already split, vectorised over elements.

    Literal vectorisation of the loops of Stan / ArviZ ``_ess``: autocorrelations
    combined across chains, summed in pairs up to the first non-positive pair
    (Geyer's initial positive sequence), pairs made non-increasing (initial
    monotone sequence), tau capped below at 1 / log10(total draws).
    """
    num_elements, num_chains, num_draws = x.shape
    acov = _autocov(x)
    mean_var = np.mean(acov[:, :, 0], axis=1) * num_draws / (num_draws - 1)
    var_plus = mean_var * (num_draws - 1) / num_draws
    if num_chains > 1:
        var_plus = var_plus + np.var(np.mean(x, axis=2), axis=1, ddof=1)
    with np.errstate(divide='ignore', invalid='ignore'):
        rho = 1 - (mean_var[:, None] - np.mean(acov, axis=1)) / var_plus[:, None]
    rho[:, 0] = 1

    # pair k = (rho[2k], rho[2k+1]); Stan's loop evaluates pairs 1..max_pair
    # (the condition t < n - 3 in its loop), pair 0 is always there
    max_pair = max(0, -(-num_draws // 2) - 2)
    even = rho[:, 0 : 2 * max_pair + 2 : 2]
    pair_sums = even + rho[:, 1 : 2 * max_pair + 2 : 2]
    nonpositive = pair_sums <= 0
    first_nonpositive = np.where(
        np.any(nonpositive, axis=1), np.argmax(nonpositive, axis=1), max_pair
    )
    # the pair where the loop stopped: the pairs before it enter tau in full
    last = np.minimum(first_nonpositive, max_pair)
    rows = np.arange(num_elements)
    last_even = even[rows, last]
    # the even term of the last pair still counts if positive (or if the loop
    # stored it because the pair sum was non-negative)
    tail_term = np.where((last_even > 0) | (pair_sums[rows, last] >= 0), last_even, 0.0)
    monotone = np.minimum.accumulate(pair_sums, axis=1)
    used = np.arange(max_pair + 1) < last[:, None]
    tau = -1 + 2 * np.sum(np.where(used, monotone, 0.0), axis=1) + tail_term

    total = num_chains * num_draws
    tau = np.maximum(tau, 1 / np.log10(total))
    ess_value = total / tau
    ess_value[~(var_plus > 0)] = np.nan  # constant elements (var_plus 0 or nan)
    return ess_value


def _ess_tail_core(x: np.ndarray) -> np.ndarray:
    num_elements, num_chains, num_draws = x.shape
    flat = x.reshape(num_elements, num_chains * num_draws)
    low, high = np.quantile(flat, [0.05, 0.95], axis=1)[:, :, None, None]
    ess_low = _ess_core(_split_chains((x <= low).astype(np.float64)))
    ess_high = _ess_core(_split_chains((x <= high).astype(np.float64)))
    # a constant indicator (>= 5% of the draws tied at the maximum) has no
    # ESS: use the other one, as ArviZ does
    return np.fmin(ess_low, ess_high)


def _rhat_batch(x: np.ndarray) -> np.ndarray:
    split = _split_chains(x)
    return np.max(_rhat_bulk_tail(split, *_z_scale(split, with_median=True)), axis=0, keepdims=True)


def _ess_bulk_batch(x: np.ndarray) -> np.ndarray:
    return _ess_core(_z_scale(_split_chains(x)))[None]


def _ess_tail_batch(x: np.ndarray) -> np.ndarray:
    return _ess_tail_core(x)[None]


def _ess_batch(x: np.ndarray) -> np.ndarray:
    return _ess_core(_split_chains(x))[None]


def _summary_batch(x: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Rows: mean, sd, quantiles, rhat, ess_bulk, ess_tail."""
    num_elements, num_chains, num_draws = x.shape
    flat = x.reshape(num_elements, num_chains * num_draws)
    split = _split_chains(x)
    z_split, median = _z_scale(split, with_median=True)
    return np.concatenate([
        np.mean(flat, axis=1)[None],
        np.std(flat, axis=1, ddof=1)[None],
        np.quantile(flat, probs, axis=1).reshape(len(probs), num_elements),
        np.max(_rhat_bulk_tail(split, z_split, median), axis=0, keepdims=True),
        _ess_core(z_split)[None],
        _ess_tail_core(x)[None],
    ])


# --------------------------------------------------------------- public API


def rhat(
    draws: ArrayLike, *, chain_axis: int | None = 0, draw_axis: int = 1
) -> np.ndarray | np.float64:
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
    ValueError
        If ``draws`` has NaN or infinite values, too few dimensions, fewer than
        4 draws per chain, or the axes are invalid.

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
    x, rest = _as_chains(draws, chain_axis, draw_axis)
    return _unflatten(_in_batches(_rhat_batch, x), rest)


def ess_bulk(
    draws: ArrayLike, *, chain_axis: int | None = 0, draw_axis: int = 1
) -> np.ndarray | np.float64:
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
    ValueError
        If ``draws`` has NaN or infinite values, too few dimensions, fewer than
        4 draws per chain, or the axes are invalid.

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
    x, rest = _as_chains(draws, chain_axis, draw_axis)
    return _unflatten(_in_batches(_ess_bulk_batch, x), rest)


def ess_tail(
    draws: ArrayLike, *, chain_axis: int | None = 0, draw_axis: int = 1
) -> np.ndarray | np.float64:
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
    ValueError
        If ``draws`` has NaN or infinite values, too few dimensions, fewer than
        4 draws per chain, or the axes are invalid.

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
    x, rest = _as_chains(draws, chain_axis, draw_axis)
    return _unflatten(_in_batches(_ess_tail_batch, x), rest)


def ess(
    draws: ArrayLike, *, chain_axis: int | None = 0, draw_axis: int = 1
) -> np.ndarray | np.float64:
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
    ValueError
        If ``draws`` has NaN or infinite values, too few dimensions, fewer than
        4 draws per chain, or the axes are invalid.

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
    x, rest = _as_chains(draws, chain_axis, draw_axis)
    return _unflatten(_in_batches(_ess_batch, x), rest)


def summary(
    draws: ArrayLike,
    *,
    chain_axis: int | None = 0,
    draw_axis: int = 1,
    names: Sequence[str] | None = None,
    quantiles: Sequence[float] = (0.05, 0.5, 0.95),
) -> pd.DataFrame:
    """Posterior summary table with convergence diagnostics.

    One row per element of the trailing axes of ``draws``, with the mean and
    standard deviation of all draws pooled, the requested quantiles, `rhat`,
    `ess_bulk` and `ess_tail`.

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
    names : sequence of str, optional
        Row labels, one per element of the trailing axes (flattened in C
        order). By default the rows are labelled by their integer index (a
        tuple of indices if there are several trailing axes).
    quantiles : sequence of float, default (0.05, 0.5, 0.95)
        Probabilities, in [0, 1], of the quantile columns, which are named
        like ``'5%'``.

    Returns
    -------
    pandas.DataFrame
        Columns ``mean``, ``sd``, the quantiles, ``rhat``, ``ess_bulk``,
        ``ess_tail``.

    Raises
    ------
    ValueError
        If ``draws`` or the axes are invalid (see `rhat`), if ``names`` does
        not have one label per element, or if a quantile is outside [0, 1].

    See Also
    --------
    rhat, ess_bulk, ess_tail

    References
    ----------
    .. [1] Vehtari, A., Gelman, A., Simpson, D., Carpenter, B. and Bürkner,
       P.-C. (2021). "Rank-normalization, folding, and localization: an
       improved R-hat for assessing convergence of MCMC". *Bayesian Analysis*
       16(2), 667-718.

    Examples
    --------
    >>> import numpy as np
    >>> from bartz.diagnostics import summary
    >>> rng = np.random.default_rng(0)
    >>> draws = rng.standard_normal((4, 1000, 2)) + [0, 10]
    >>> table = summary(draws, names=['alpha', 'beta'])
    >>> list(table.columns)
    ['mean', 'sd', '5%', '50%', '95%', 'rhat', 'ess_bulk', 'ess_tail']
    >>> print(round(table.loc['beta', 'mean']), round(table.loc['beta', 'sd']))
    10 1
    >>> print(table['rhat'].max() < 1.01)
    True
    """
    x, rest = _as_chains(draws, chain_axis, draw_axis)
    num_elements = x.shape[0]
    probs = _check_quantiles(quantiles)

    if names is None:
        if len(rest) <= 1:
            index = pd.RangeIndex(num_elements)
        else:
            index = pd.MultiIndex.from_tuples(list(np.ndindex(*rest)))
    else:
        if isinstance(names, str):
            names = [names]
        names = list(names)
        if len(names) != num_elements:
            msg = (
                f'names must have one label per element of the trailing axes '
                f'of draws ({num_elements}), got {len(names)}'
            )
            raise ValueError(msg)
        index = pd.Index(names)

    table = _in_batches(lambda batch: _summary_batch(batch, probs), x)
    columns = ['mean', 'sd', *(f'{100 * p:g}%' for p in probs), 'rhat', 'ess_bulk', 'ess_tail']
    return pd.DataFrame(table.T, columns=columns, index=index)


def _check_quantiles(quantiles: Sequence[float]) -> np.ndarray:
    try:
        probs = np.asarray(quantiles, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        msg = f'quantiles must be a sequence of numbers in [0, 1], got {quantiles!r}'
        raise ValueError(msg) from exc
    if not np.all((probs >= 0) & (probs <= 1)):
        msg = f'quantiles must be in [0, 1], got {quantiles!r}'
        raise ValueError(msg)
    return probs


# ------------------------------------------------------------------- Geweke


def _spectrum0_ar(y: np.ndarray) -> np.ndarray:
    """Spectral density at frequency zero of each column by an AR fit.

    As ``coda::spectrum0.ar``: fit AR(p) by Yule-Walker (Levinson-Durbin on the
    biased autocovariances of the demeaned series), p in 0..min(n - 1,
    floor(10 log10 n)) chosen by AIC as R's ``ar()``, then
    ``S(0) = var_pred / (1 - sum(ar))^2`` with ``var_pred`` the innovation
    variance times n / (n - p - 1). Columns that are exactly a linear function
    of time get 0.

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

    # coda sets 0 when sd(residuals(lm(y ~ time))) is all.equal to 0, an
    # absolute tolerance of 1.5e-8; we use it relative to sd(y) so the result
    # does not depend on the units of y
    time = np.arange(n) - (n - 1) / 2
    slope = time @ centered / (time @ time)
    resid_sd = np.std(centered - np.outer(time, slope), axis=0, ddof=1)
    degenerate = resid_sd <= 1.5e-8 * np.std(y, axis=0, ddof=1)

    max_order = min(n - 1, math.floor(10 * math.log10(n)))
    acov = np.stack(
        [np.sum(centered[: n - h] * centered[h:], axis=0) / n for h in range(max_order + 1)]
    )

    # Levinson-Durbin recursion, vectorised over columns
    with np.errstate(divide='ignore', invalid='ignore'):
        coef = np.zeros((max_order, y.shape[1]))
        innov_var = [acov[0]]
        coef_sum = [np.zeros(y.shape[1])]
        for order in range(1, max_order + 1):
            prev = coef[: order - 1]
            reflection = (
                acov[order] - np.sum(prev * acov[order - 1 : 0 : -1], axis=0)
            ) / innov_var[-1]
            coef[: order - 1] = prev - reflection * prev[::-1]
            coef[order - 1] = reflection
            innov_var.append(innov_var[-1] * (1 - reflection**2))
            coef_sum.append(np.sum(coef[:order], axis=0))
        innov_var = np.stack(innov_var)
        coef_sum = np.stack(coef_sum)
        aic = n * np.log(innov_var) + 2 * np.arange(max_order + 1)[:, None]
        best = np.argmin(np.where(np.isnan(aic), np.inf, aic), axis=0)
        cols = np.arange(y.shape[1])
        var_pred = innov_var[best, cols] * n / (n - (best + 1))
        spec = var_pred / (1 - coef_sum[best, cols]) ** 2
    return np.where(degenerate, 0.0, spec)


def _check_frac(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        msg = f'{name} must be a number in (0, 1), got {value!r}'
        raise ValueError(msg)
    if not 0 < value < 1:
        msg = f'{name} must be in (0, 1), got {value!r}'
        raise ValueError(msg)
    return float(value)


def geweke(
    x: ArrayLike, frac1: float = 0.1, frac2: float = 0.5
) -> np.ndarray | np.float64:
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
    arr = _to_float_array(x, 'x')
    frac1 = _check_frac(frac1, 'frac1')
    frac2 = _check_frac(frac2, 'frac2')
    if frac1 + frac2 > 1:
        msg = (
            f'frac1 + frac2 must be at most 1 (the windows would overlap), got '
            f'{frac1} + {frac2}'
        )
        raise ValueError(msg)
    if arr.ndim < 1:
        msg = 'x must have at least 1 dimension (the draws), got a scalar'
        raise ValueError(msg)
    n = arr.shape[0]
    if n < MIN_DRAWS:
        msg = f'x must have at least {MIN_DRAWS} draws along axis 0, got {n}'
        raise ValueError(msg)

    # coda's windows, 1-based inclusive, with the same float arithmetic
    end_first = math.ceil(1 + frac1 * (n - 1))
    start_last = math.floor(n - frac2 * (n - 1))
    first = arr[:end_first]
    last = arr[start_last - 1 :]
    # frac1, frac2 > 0 guarantee at least 2 draws in each window

    rest = arr.shape[1:]
    first = first.reshape(len(first), -1)
    last = last.reshape(len(last), -1)
    var_first = _spectrum0_ar(first) / len(first)
    var_last = _spectrum0_ar(last) / len(last)
    with np.errstate(divide='ignore', invalid='ignore'):
        z = (np.mean(first, axis=0) - np.mean(last, axis=0)) / np.sqrt(var_first + var_last)
    return _unflatten(z, rest)


# ------------------------------------------------------- convergence warning

RHAT_MAX = 1.05
"""R-hat above which `convergence_problems` reports a statistic."""

ESS_MIN = 100
"""Bulk ESS of the error sd below which `convergence_problems` reports it."""

CHECK_POINTS = 100
"""Number of points at which `bartz.gbart` checks the R-hat of f."""


class ConvergenceWarning(UserWarning):
    """The MCMC draws show signs of not having converged or of mixing poorly.

    Warned by `bartz.gbart` after the run and by `bartz.BARTFit.diagnostics`
    (see `convergence_problems` for the criteria). Silence it with::

        import warnings
        import bartz
        warnings.filterwarnings('ignore', category=bartz.ConvergenceWarning)
    """


def check_points(n: int) -> np.ndarray:
    """The points at which the R-hat of f is checked: all of them up to
    `CHECK_POINTS` (100), else 100 indices evenly spaced over ``0 .. n - 1``
    (the same for every fit of ``n`` points: fixed, no random choice)."""
    if n <= CHECK_POINTS:
        return np.arange(n)
    return np.unique(np.round(np.linspace(0, n - 1, CHECK_POINTS)).astype(np.intp))


def convergence_problems(
    sigma: ArrayLike | None = None, f: ArrayLike | None = None
) -> list[tuple[str, float, str, float]]:
    """The convergence statistics of a BART fit that fail their threshold.

    Criteria (Vehtari et al. 2021 recommend 1.01 for a final analysis; 1.05
    and 100 are the looser levels at which Stan's tools warn):

    - R-hat (`rhat`: rank-normalised split R-hat, the maximum of bulk and
      tail) of the error sd above `RHAT_MAX` (1.05);
    - bulk ESS (`ess_bulk`) of the error sd below `ESS_MIN` (100);
    - the median over the given points of the R-hat of f above 1.05. The
      median, not the maximum: f at a point mixes slowly in BART (an
      effective sample size of tens per thousand draws is common), so the
      largest of a hundred R-hats exceeds 1.05 by chance even in long runs
      of chains that have converged, while the median is stable and still
      far above 1.05 when the chains have not left their start.

    With one chain, R-hat compares its two halves (split R-hat). Chains
    with fewer than 4 draws are not checked (R-hat is not defined).

    Parameters
    ----------
    sigma
        Draws of the error sd, ``(chains, draws)``, or None (binary
        outcomes have none).
    f
        Draws of f at some points, ``(chains, draws, points)``, or None.

    Returns
    -------
    list of tuple
        One ``(statistic, value, comparison, threshold)`` per failed check,
        e.g. ``('R-hat of sigma', 1.13, '>', 1.05)``; empty if all pass.

    Examples
    --------
    >>> import numpy as np
    >>> from bartz.diagnostics import convergence_problems
    >>> rng = np.random.default_rng(0)
    >>> convergence_problems(sigma=1 + 0.01 * rng.standard_normal((4, 500)))
    []
    >>> drifting = 1 + np.linspace(1, 0, 500) + 0.01 * rng.standard_normal((4, 500))
    >>> [problem[0] for problem in convergence_problems(sigma=drifting)]
    ['R-hat of sigma', 'ESS of sigma']
    """
    rhat_sigma = ess_sigma = rhat_f = None
    num_points = 0
    if sigma is not None:
        sigma = np.asarray(sigma)
        if sigma.shape[1] >= MIN_DRAWS:
            rhat_sigma = float(rhat(sigma))
            ess_sigma = float(ess_bulk(sigma))
    if f is not None:
        f = np.asarray(f)
        num_points = f.shape[2]
        if f.shape[1] >= MIN_DRAWS and num_points > 0:
            r = rhat(f)
            if not np.all(np.isnan(r)):  # all points constant: nothing to check
                rhat_f = float(np.nanmedian(r))
    return _threshold_problems(rhat_sigma, ess_sigma, rhat_f, num_points)


def _threshold_problems(rhat_sigma, ess_sigma, rhat_f, num_points):
    """The statistics (None: not computed) that fail their threshold."""
    problems = []
    if rhat_sigma is not None and rhat_sigma > RHAT_MAX:
        problems.append(('R-hat of sigma', rhat_sigma, '>', RHAT_MAX))
    if ess_sigma is not None and ess_sigma < ESS_MIN:
        problems.append(('ESS of sigma', ess_sigma, '<', ESS_MIN))
    if rhat_f is not None and rhat_f > RHAT_MAX:
        problems.append((f'median R-hat of f over {num_points} points', rhat_f, '>', RHAT_MAX))
    return problems


def _convergence_message(problems) -> str:
    """The text of the `ConvergenceWarning` for ``problems``."""
    stats = '; '.join(
        f'{name} is {value:.0f}' if name.startswith('ESS') else f'{name} is {value:.3f}'
        for name, value, _, _ in problems
    )
    limits = ', '.join(f'{name} {cmp} {threshold:g}' for name, _, cmp, threshold in problems)
    return (
        f'bartz: the MCMC chains may not have converged, or mix slowly: {stats} '
        f'(warned when {limits}). The draws may misrepresent the posterior: run a '
        'longer burn-in (nskip), more draws (ndpost), thin (keepevery) or run '
        'several chains (mc_cores); fit.diagnostics() shows the details. To silence: '
        "warnings.filterwarnings('ignore', category=bartz.ConvergenceWarning)."
    )
