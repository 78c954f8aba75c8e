"""The convergence check of a BART fit: the criteria, the points at which f
is checked, and the warning `bartz.gbart` and `bartz.BARTFit.diagnostics`
give when a criterion fails."""

import numpy as np
from numpy.typing import ArrayLike

from bartz.diagnostics.chains import MIN_DRAWS
from bartz.diagnostics.mixing import ess_bulk, rhat

__all__ = [
    'CHECK_POINTS',
    'ESS_MIN',
    'RHAT_MAX',
    'ConvergenceWarning',
    'check_points',
    'convergence_message',
    'convergence_problems',
    'threshold_problems',
]

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
    return threshold_problems(rhat_sigma, ess_sigma, rhat_f, num_points)


def threshold_problems(
    rhat_sigma: float | None, ess_sigma: float | None, rhat_f: float | None, num_points: int
) -> list[tuple[str, float, str, float]]:
    """The statistics that fail their threshold, as `convergence_problems`.

    Parameters
    ----------
    rhat_sigma, ess_sigma : float or None
        R-hat and bulk ESS of the error sd; None if not computed.
    rhat_f : float or None
        The median R-hat of f over the checked points; None if not computed.
    num_points : int
        The number of points of ``rhat_f``, named in its statistic.

    Returns
    -------
    list of tuple
        ``(statistic, value, comparison, threshold)`` per failed check.
    """
    problems = []
    if rhat_sigma is not None and rhat_sigma > RHAT_MAX:
        problems.append(('R-hat of sigma', rhat_sigma, '>', RHAT_MAX))
    if ess_sigma is not None and ess_sigma < ESS_MIN:
        problems.append(('ESS of sigma', ess_sigma, '<', ESS_MIN))
    if rhat_f is not None and rhat_f > RHAT_MAX:
        problems.append((f'median R-hat of f over {num_points} points', rhat_f, '>', RHAT_MAX))
    return problems


def convergence_message(problems: list[tuple[str, float, str, float]]) -> str:
    """The text of the `ConvergenceWarning` for ``problems``.

    Parameters
    ----------
    problems : list of tuple
        ``(statistic, value, comparison, threshold)``, as returned by
        `convergence_problems`; not empty.

    Returns
    -------
    str
        The statistics and their values, the thresholds, what to do, and
        how to silence the warning.
    """
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
