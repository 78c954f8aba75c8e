"""The size ladder: data axes padded to a few lengths, so compiled code is reused.

A compiled XLA program is specific to the shapes of its arrays. If the
sampler and the prediction were compiled for the exact number of points,
every cross-validation fold, subset or new test set would compile them again
(seconds each). Instead, the data axis is padded up to the next length of a
geometric ladder: ``k * 2**e`` with ``k`` in 8..15, at least `MIN_LENGTH`.
Consecutive lengths differ by at most 1/8, so the padding is at most 12.5%
of the points (none when ``n`` is on the ladder), and all ``n`` from 1,000
to 1,024 share one compiled program, as do all ``n`` from 9,217 to 10,240.

Padded points never enter a sum: the sampler gives them no leaf (see
`bartz.mcmcstep.init`'s ``valid``), and predictions at them are dropped. The
draws do not depend on the padding, up to float rounding.

The predictor axis is padded too (`predictor_length`), to a multiple of 8,
and of ``2**e`` in the octave ``[8 * 2**e, 16 * 2**e)``: a model with a
column more or less (a variant, a step of feature selection) reuses the
compiled sampler and prediction. A padded predictor has no cut-point, as a
constant column kept with ``rm_const=False``: the trees never split on it,
DART gives it no probability, and the outputs drop it.
"""

import numpy as np

__all__ = ['MIN_LENGTH', 'bucket_length', 'ladder', 'pad_predictors', 'predictor_length']

MIN_LENGTH = 128
_STEPS_PER_OCTAVE = 8


def bucket_length(n: int, multiple: int = 1) -> int:
    """The smallest length of the ladder that is at least `n`, rounded up
    to a multiple of `multiple` (the number of devices the axis is split
    over).

    >>> [bucket_length(n) for n in (1, 128, 129, 1000, 1013, 1025, 10_000)]
    [128, 128, 144, 1024, 1024, 1152, 10240]
    """
    n = max(int(n), 1)
    length = MIN_LENGTH
    if n > MIN_LENGTH:
        step = _octave_step(n)
        length = -(-n // step) * step
    return -(-length // multiple) * multiple


def _octave_step(n: int) -> int:
    """The ladder's step ``2**e`` in the octave ``[8 * 2**e, 16 * 2**e)``
    holding `n` (1 below 16)."""
    return 2 ** max(0, (n - 1).bit_length() - _STEPS_PER_OCTAVE.bit_length())


def ladder(up_to: int) -> list[int]:
    """The lengths of the ladder up to `up_to` (for documentation and tests)."""
    out = []
    n = 1
    while True:
        length = bucket_length(n)
        if length > up_to:
            return out
        out.append(length)
        n = length + 1


def predictor_length(p: int) -> int:
    """The padded number of predictors: `p` rounded up to a multiple of 8,
    and for ``p > 64`` of ``2**e`` in the octave of `p` (at most 12.5%
    more).

    >>> [predictor_length(p) for p in (1, 8, 9, 10, 64, 65, 129, 1000)]
    [8, 8, 16, 16, 64, 72, 144, 1024]
    """
    p = max(int(p), 1)
    step = max(_MIN_PREDICTOR_STEP, _octave_step(p))
    return -(-p // step) * step


_MIN_PREDICTOR_STEP = 8


def pad_predictors(X: np.ndarray) -> np.ndarray:
    """The binned predictors ``(p, n)`` with zero rows appended up to
    `predictor_length` (a padded predictor is never split on)."""
    p = X.shape[0]
    return np.pad(X, ((0, predictor_length(p) - p), (0, 0)))
