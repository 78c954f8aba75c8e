"""Draws laid out as ``(elements, chains, draws)``: checks, split chains, batches.

Every R-hat and ESS of `bartz.diagnostics` starts with `as_chains`, which
checks the user's draws (with `bartz.prep.checks`, before any computation)
and puts the elements first and contiguous, so that sorting and FFTs run
along memory. The building blocks of the other modules all take arrays
shaped ``(elements, chains, draws)``.
"""

import math

import numpy as np
from numpy.typing import ArrayLike

from bartz.prep import checks

__all__ = ['BATCH_SIZE', 'MIN_DRAWS', 'as_chains', 'in_batches', 'is_constant', 'split_chains', 'unflatten']

MIN_DRAWS = 4
"""Fewest draws per chain the diagnostics accept (each half of a split
chain needs two for a variance)."""

BATCH_SIZE = 2**20
"""Draws (chains x draws x elements) that `in_batches` processes at once: it
bounds the temporaries to a few tens of MB however many elements there are."""


def as_chains(
    draws: ArrayLike, chain_axis: int | None, draw_axis: int
) -> tuple[np.ndarray, tuple[int, ...]]:
    """Check ``draws`` and lay it out as ``(elements, chains, draws)``.

    Parameters
    ----------
    draws : array_like
        MCMC draws, with a chain axis and a draw axis, or only a draw axis.
    chain_axis : int or None
        Axis of ``draws`` that indexes chains; None for a single chain.
    draw_axis : int
        Axis of ``draws`` that indexes the draws within a chain.

    Returns
    -------
    x : numpy.ndarray
        The draws as float64, C-contiguous, shaped ``(elements, chains,
        draws)``, the elements being the trailing axes of ``draws`` flattened.
    rest : tuple of int
        The shape of the trailing axes of ``draws``.

    Raises
    ------
    TypeError
        If ``draws`` is not numeric or is complex, or an axis is not an integer.
    ValueError
        If ``draws`` is not finite, has too few dimensions, no chain, fewer
        than `MIN_DRAWS` draws per chain, or the axes are out of bounds or equal.
    """
    arr = checks.as_finite_array('draws', draws)
    if chain_axis is None:
        arr = _one_chain(arr, draw_axis)
    else:
        arr = _several_chains(arr, chain_axis, draw_axis)
    num_chains, num_draws = arr.shape[:2]
    if num_chains < 1:
        msg = 'draws must have at least 1 chain along chain_axis, got 0'
        raise ValueError(msg)
    if num_draws < MIN_DRAWS:
        msg = f'draws must have at least {MIN_DRAWS} draws per chain along draw_axis, got {num_draws}'
        raise ValueError(msg)
    rest = arr.shape[2:]
    arr = arr.reshape(num_chains, num_draws, math.prod(rest))
    return np.ascontiguousarray(arr.transpose(2, 0, 1)), rest


def _one_chain(arr: np.ndarray, draw_axis: int) -> np.ndarray:
    """``arr`` with the draw axis first and a chain axis of length 1 before it."""
    if arr.ndim < 1:
        msg = 'draws must have at least 1 dimension (the draws), got a scalar'
        raise ValueError(msg)
    draw_axis = checks.check_axis('draw_axis', draw_axis, arr.ndim, 'draws')
    return np.moveaxis(arr, draw_axis, 0)[None]


def _several_chains(arr: np.ndarray, chain_axis: int, draw_axis: int) -> np.ndarray:
    """``arr`` with the chain and draw axes first."""
    if arr.ndim < 2:
        msg = (
            f'draws must have at least 2 dimensions (chains, draws, ...), got shape {arr.shape}; '
            'for a single chain pass chain_axis=None, draw_axis=0'
        )
        raise ValueError(msg)
    chain_axis = checks.check_axis('chain_axis', chain_axis, arr.ndim, 'draws')
    draw_axis = checks.check_axis('draw_axis', draw_axis, arr.ndim, 'draws')
    if chain_axis == draw_axis:
        msg = f'chain_axis and draw_axis must be different axes, got both equal to {chain_axis}'
        raise ValueError(msg)
    return np.moveaxis(arr, (chain_axis, draw_axis), (0, 1))


def unflatten(values: np.ndarray, rest: tuple[int, ...]) -> np.ndarray | np.float64:
    """One value per element, ``(elements,)``, shaped as the trailing axes
    ``rest`` of the user's draws; a numpy scalar if there are none, like
    numpy's reductions."""
    return values.reshape(rest)[()]


def in_batches(func, x: np.ndarray, batch_size: int = BATCH_SIZE) -> np.ndarray:
    """Apply ``func`` to slices of the elements axis of ``x``, concatenate.

    All diagnostics are independent across elements; slicing bounds the
    temporaries (ranks, FFTs, copies) whatever the number of elements.

    Parameters
    ----------
    func : callable
        Maps an array ``(m, chains, draws)`` to ``(k, m)``: k statistics of
        each element.
    x : numpy.ndarray
        Shape ``(elements, chains, draws)``.
    batch_size : int, default BATCH_SIZE
        Draws per slice (``m * chains * draws``); at least one element.

    Returns
    -------
    numpy.ndarray
        Shape ``(k, elements)``.
    """
    num_elements, num_chains, num_draws = x.shape
    if num_elements == 0:  # run on a dummy element to get the number of rows
        return func(np.zeros((1, num_chains, num_draws)))[:, :0]
    step = max(1, batch_size // (num_chains * num_draws))
    if num_elements <= step:
        return func(x)
    return np.concatenate([func(x[start : start + step]) for start in range(0, num_elements, step)], axis=1)


def is_constant(x: np.ndarray) -> np.ndarray:
    """The elements of an ``(elements, chains, draws)`` array whose draws
    are all equal, ``(elements,)`` bool."""
    return np.all(x == x[:, :1, :1], axis=(1, 2))


def split_chains(x: np.ndarray) -> np.ndarray:
    """Each chain of ``(elements, chains, draws)`` cut in halves, as Stan.

    Returns ``(elements, 2 chains, draws // 2)``: the first halves, then the
    second halves; with an odd number of draws the middle one is dropped.
    """
    num_draws = x.shape[2]
    half = num_draws // 2
    return np.concatenate([x[:, :, :half], x[:, :, num_draws - half :]], axis=1)
