"""Rank normalisation (Vehtari et al. 2021): the draws replaced by normal
scores of their ranks among all the draws of their element, so that R-hat
and ESS are defined for heavy tails and invariant to monotone transforms."""

import numpy as np
from scipy import special

__all__ = ['sorted_twice_ranks', 'z_scale']


def sorted_twice_ranks(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort each row, and rank the sorted values.

    The ranks are those of ``scipy.stats.rankdata(a, axis=1)`` (ties share
    the mean of their ranks), computed without its stable sort: tied values
    share a rank anyway.

    Parameters
    ----------
    a : numpy.ndarray
        Shape ``(m, n)``.

    Returns
    -------
    order : numpy.ndarray
        ``(m, n)`` integers, the order that sorts each row.
    ordered : numpy.ndarray
        ``(m, n)``, the sorted rows, ``take_along_axis(a, order, axis=1)``.
    twice : numpy.ndarray
        ``(m, n)`` integers, twice the rank (from 1) of each sorted value:
        an integer, because ranks are multiples of 1/2.
    """
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


def z_scale(x: np.ndarray, with_median: bool = False):
    """Rank-normalise, pooling chains and draws: ``Phi^-1((r - 3/8) / (S + 1/4))``.

    ``r`` is the rank of a draw among the ``S = chains * draws`` draws of
    its element. The ranks are multiples of 1/2 from 1 to S, so ``Phi^-1``
    is taken once per possible rank, from a table: the same numbers as per
    draw, with fewer evaluations.

    Parameters
    ----------
    x : numpy.ndarray
        Shape ``(elements, chains, draws)``.
    with_median : bool, default False
        Also return the median of each element's pooled draws (from the
        sorted draws: what `numpy.median` gives).

    Returns
    -------
    z : numpy.ndarray
        The normal scores, shaped like ``x``.
    median : numpy.ndarray
        ``(elements,)``, only if ``with_median``.
    """
    num_elements, num_chains, num_draws = x.shape
    size = num_chains * num_draws
    order, ordered, twice = sorted_twice_ranks(x.reshape(num_elements, size))
    table = special.ndtri((np.arange(2, 2 * size + 1) / 2 - 0.375) / (size + 0.25))
    z = np.empty((num_elements, size))
    np.put_along_axis(z, order, table[twice - 2], axis=1)
    z = z.reshape(x.shape)
    if not with_median:
        return z
    half = size // 2
    median = ordered[:, half] if size % 2 else np.mean(ordered[:, half - 1 : half + 1], axis=1)
    return z, median
