"""The posterior summary table: mean, sd, quantiles, R-hat and ESS per element."""

from collections.abc import Sequence

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from bartz.diagnostics.chains import as_chains, in_batches, split_chains
from bartz.diagnostics.mixing import geyer_ess, rhat_bulk_tail, tail_ess
from bartz.diagnostics.ranks import z_scale
from bartz.prep import checks

__all__ = ['summary']


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
    TypeError, ValueError
        If ``draws`` or the axes are invalid (see `rhat`), if ``names`` does
        not have one label per element, or if the quantiles are not numbers
        in [0, 1].

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
    x, rest = as_chains(draws, chain_axis, draw_axis)
    probs = _check_quantiles(quantiles)
    index = _row_index(names, rest, x.shape[0])
    table = in_batches(lambda batch: _summary_batch(batch, probs), x)
    columns = ['mean', 'sd', *(f'{100 * p:g}%' for p in probs), 'rhat', 'ess_bulk', 'ess_tail']
    return pd.DataFrame(table.T, columns=columns, index=index)


def _summary_batch(x: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Rows: mean, sd, quantiles, rhat, ess_bulk, ess_tail."""
    num_elements, num_chains, num_draws = x.shape
    flat = x.reshape(num_elements, num_chains * num_draws)
    split = split_chains(x)
    z_split, median = z_scale(split, with_median=True)
    return np.concatenate([
        np.mean(flat, axis=1)[None],
        np.std(flat, axis=1, ddof=1)[None],
        np.quantile(flat, probs, axis=1).reshape(len(probs), num_elements),
        np.max(rhat_bulk_tail(split, z_split, median), axis=0, keepdims=True),
        geyer_ess(z_split)[None],
        tail_ess(x)[None],
    ])


def _check_quantiles(quantiles: Sequence[float]) -> np.ndarray:
    """The quantiles as a float64 vector, each in [0, 1]."""
    probs = checks.as_finite_array('quantiles', quantiles).reshape(-1)
    if not np.all((probs >= 0) & (probs <= 1)):
        msg = f'quantiles must be in [0, 1], got {quantiles!r}'
        raise ValueError(msg)
    return probs


def _row_index(names: Sequence[str] | None, rest: tuple[int, ...], num_elements: int) -> pd.Index:
    """The row labels: ``names``, checked, or the indices of the trailing axes."""
    if names is None:
        if len(rest) <= 1:
            return pd.RangeIndex(num_elements)
        return pd.MultiIndex.from_tuples(list(np.ndindex(*rest)))
    names = [names] if isinstance(names, str) else list(names)
    if len(names) != num_elements:
        msg = (
            f'names must have one label per element of the trailing axes of draws ({num_elements}), '
            f'got {len(names)}'
        )
        raise ValueError(msg)
    return pd.Index(names)
