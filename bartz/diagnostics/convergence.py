"""The convergence check of a BART fit: the criteria, the points at which f
is checked, and the warning `bartz.gbart` and `bartz.BARTFit.diagnostics`
give when a criterion fails.

The rule: warn (`ConvergenceWarning`) only on evidence that conclusions
drawn from the draws are at risk, and report the rest. Warned: the chains,
or the two halves of one chain, disagree on f at a typical point (median
R-hat of f above `RHAT_WARN`); a chain whose trees never changed while
another chain's did (it is stuck). Draws with NaN are warned by the fit
itself (a `RuntimeWarning`). Reported only (`convergence_notes`, in
``fit.diagnostics()`` and ``fit.summary()``): a slowly mixing error sd (its
R-hat above `RHAT_MAX` or its bulk ESS below `ESS_MIN`), which is the
common case of BART on large data and changes little of f, and a median
R-hat of f between `RHAT_MAX` and `RHAT_WARN`.
"""

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from bartz.diagnostics.chains import MIN_DRAWS
from bartz.diagnostics.mixing import ess_bulk, rhat

__all__ = [
    'CHECK_POINTS',
    'ESS_MIN',
    'RHAT_MAX',
    'RHAT_WARN',
    'ConvergenceStatistics',
    'ConvergenceWarning',
    'assess',
    'check_points',
    'convergence_message',
    'convergence_notes',
    'convergence_problems',
    'convergence_statistics',
    'notes_message',
    'stuck_chains',
    'trees_changed',
]

RHAT_MAX = 1.05
"""R-hat above which a statistic is reported (`convergence_notes`): the
looser level at which Stan's tools flag a parameter."""

RHAT_WARN = 1.1
"""Median R-hat of f above which `convergence_problems` warns: Gelman and
Rubin's classic level. At 1.1 the chains' means of f at a typical point sit
about half a posterior sd apart, more than slow mixing alone gives."""

ESS_MIN = 100
"""Bulk ESS of the error sd below which it is reported (`convergence_notes`)."""

CHECK_POINTS = 100
"""Number of points at which `bartz.gbart` checks the R-hat of f."""


class ConvergenceWarning(UserWarning):
    """The MCMC draws show evidence that conclusions drawn from them are at risk.

    Warned by `bartz.gbart` after the run and by `bartz.BARTFit.diagnostics`
    when the chains disagree on f or a chain is stuck (see
    `convergence_problems` for the rule). Silence it with::

        import warnings
        import bartz
        warnings.filterwarnings('ignore', category=bartz.ConvergenceWarning)
    """


class ConvergenceStatistics(NamedTuple):
    """The statistics the rule looks at (None: not computed)."""

    rhat_sigma: float | None
    """R-hat of the error sd."""
    ess_sigma: float | None
    """Bulk ESS of the error sd."""
    rhat_f: float | None
    """Median over the checked points of the R-hat of f."""
    num_points: int
    """Number of points of ``rhat_f``."""
    stuck: tuple[int, ...] = ()
    """Chains whose trees never changed during their kept draws while another chain's did."""
    num_chains: int = 1
    """Number of chains."""


def check_points(n: int) -> np.ndarray:
    """The points at which the R-hat of f is checked: all of them up to
    `CHECK_POINTS` (100), else 100 indices evenly spaced over ``0, ..., n - 1``
    (the same for every fit of ``n`` points: fixed, no random choice)."""
    if n <= CHECK_POINTS:
        return np.arange(n)
    return np.unique(np.round(np.linspace(0, n - 1, CHECK_POINTS)).astype(np.intp))


def trees_changed(var_tree: ArrayLike, split_tree: ArrayLike, num_chains: int) -> np.ndarray:
    """The number of trees whose structure changed from each kept draw to the next.

    Parameters
    ----------
    var_tree, split_tree : array_like
        The kept forests' split variables and split indices, ``(draws,
        trees, nodes)``, chain after chain.
    num_chains : int
        Number of chains.

    Returns
    -------
    numpy.ndarray
        ``(chains, draws per chain - 1)`` int: trees whose split variables
        or split indices differ from the previous kept draw of the chain
        (an accepted grow, prune, change or swap; leaf values are redrawn
        every iteration and do not count).
    """
    var_tree = np.asarray(var_tree)
    split_tree = np.asarray(split_tree)
    per_chain = var_tree.shape[0] // num_chains
    out = np.zeros((num_chains, max(per_chain - 1, 0)), np.int64)
    for chain in range(num_chains):  # a chain at a time bounds the temporaries
        rows = slice(chain * per_chain, (chain + 1) * per_chain)
        var, split = var_tree[rows], split_tree[rows]
        changed = np.any(var[1:] != var[:-1], axis=-1) | np.any(split[1:] != split[:-1], axis=-1)
        out[chain] = np.count_nonzero(changed, axis=-1)
    return out


def convergence_statistics(
    sigma: ArrayLike | None = None, f: ArrayLike | None = None, changed: ArrayLike | None = None
) -> ConvergenceStatistics:
    """The statistics of the rule from the draws (see `convergence_problems`)."""
    rhat_sigma = ess_sigma = rhat_f = None
    num_points = 0
    num_chains = 1
    if sigma is not None:
        sigma = np.asarray(sigma)
        num_chains = sigma.shape[0]
        if sigma.shape[1] >= MIN_DRAWS:
            rhat_sigma = float(rhat(sigma))
            ess_sigma = float(ess_bulk(sigma))
    if f is not None:
        f = np.asarray(f)
        num_chains = f.shape[0]
        num_points = f.shape[2]
        if f.shape[1] >= MIN_DRAWS and num_points > 0:
            r = rhat(f)
            if not np.all(np.isnan(r)):  # all points constant: nothing to check
                rhat_f = float(np.nanmedian(r))
    stuck = ()
    if changed is not None:
        num_chains = np.shape(changed)[0]
        stuck = stuck_chains(changed)
    return ConvergenceStatistics(rhat_sigma, ess_sigma, rhat_f, num_points, stuck, num_chains)


def stuck_chains(changed: ArrayLike) -> tuple[int, ...]:
    """The chains whose trees never changed during their kept draws while
    another chain's did.

    Parameters
    ----------
    changed : array_like
        Trees changed from draw to draw, ``(chains, draws - 1)``
        (`trees_changed`).

    Returns
    -------
    tuple of int
        The stuck chains' indices; empty with fewer than 4 draws per chain,
        or when no chain moved (the data may admit no split).
    """
    changed = np.asarray(changed)
    if changed.shape[1] < MIN_DRAWS - 1:
        return ()
    moves = changed.sum(axis=1)
    if not np.any(moves > 0):
        return ()
    return tuple(int(c) for c in np.flatnonzero(moves == 0))


def assess(stats: ConvergenceStatistics) -> tuple[list, list]:
    """The rule on statistics already computed.

    Parameters
    ----------
    stats : ConvergenceStatistics
        The statistics; None fields are not checked.

    Returns
    -------
    problems : list of tuple
        The warned findings, ``(statistic, value, comparison, threshold)``
        each, as `convergence_problems`.
    notes : list of tuple
        The reported findings, as `convergence_notes`.
    """
    problems, notes = [], []
    if stats.rhat_f is not None:
        name = f'median R-hat of f over {stats.num_points} points'
        if stats.rhat_f > RHAT_WARN:
            problems.append((name, stats.rhat_f, '>', RHAT_WARN))
        elif stats.rhat_f > RHAT_MAX:
            notes.append((name, stats.rhat_f, '>', RHAT_MAX))
    if stats.stuck:
        name = f'stuck chains (of {stats.num_chains}: trees never changed, chain {", ".join(map(str, stats.stuck))})'
        problems.append((name, len(stats.stuck), '>', 0))
    if stats.rhat_sigma is not None and stats.rhat_sigma > RHAT_MAX:
        notes.append(('R-hat of sigma', stats.rhat_sigma, '>', RHAT_MAX))
    if stats.ess_sigma is not None and stats.ess_sigma < ESS_MIN:
        notes.append(('ESS of sigma', stats.ess_sigma, '<', ESS_MIN))
    return problems, notes


def convergence_problems(
    sigma: ArrayLike | None = None, f: ArrayLike | None = None, changed: ArrayLike | None = None
) -> list[tuple[str, float, str, float]]:
    """The findings of the convergence check that are warned.

    Warned, as evidence that conclusions drawn from the draws are at risk:

    - the median over the given points of the R-hat of f above `RHAT_WARN`
      (1.1): the chains (with one chain, its two halves) disagree on f at a
      typical point. The median, not the maximum: f at a point mixes slowly
      in BART (an effective sample size of tens per thousand draws is
      common), so the largest of a hundred R-hats is high by chance even
      in long runs of chains that have converged, while the median is
      stable and far above 1.1 when the chains have not left their start;
    - a stuck chain: one whose trees never changed during its kept draws
      (``changed``, see `trees_changed`) while another chain's did. With
      one chain a frozen forest is not warned: it cannot be told from
      data that admit no split.

    The error sd is only reported (`convergence_notes`): at large n it
    mixes slowly even when f is well estimated (ESS of a few per thousand
    draws at n = 10,000 with R's defaults), and warning on it would warn on
    nearly every fit.

    R-hat is `rhat` (rank-normalised split R-hat, the maximum of bulk and
    tail). Chains with fewer than 4 draws are not checked.

    Parameters
    ----------
    sigma
        Draws of the error sd, ``(chains, draws)``, or None (binary
        outcomes have none).
    f
        Draws of f at some points, ``(chains, draws, points)``, or None.
    changed
        Trees changed from draw to draw, ``(chains, draws - 1)``
        (`trees_changed`), or None.

    Returns
    -------
    list of tuple
        One ``(statistic, value, comparison, threshold)`` per failed check,
        e.g. ``('median R-hat of f over 100 points', 1.31, '>', 1.1)``;
        empty if all pass.

    Examples
    --------
    >>> import numpy as np
    >>> from bartz.diagnostics import convergence_problems
    >>> rng = np.random.default_rng(0)
    >>> f = rng.standard_normal((4, 500, 10))
    >>> convergence_problems(f=f)
    []
    >>> f[3] += 2  # one chain far from the others
    >>> [problem[0] for problem in convergence_problems(f=f)]
    ['median R-hat of f over 10 points']
    """
    return assess(convergence_statistics(sigma, f, changed))[0]


def convergence_notes(sigma: ArrayLike | None = None, f: ArrayLike | None = None) -> list[tuple[str, float, str, float]]:
    """The findings of the convergence check that are reported, not warned.

    - R-hat of the error sd above `RHAT_MAX` (1.05);
    - bulk ESS of the error sd below `ESS_MIN` (100);
    - the median R-hat of f between `RHAT_MAX` and `RHAT_WARN`.

    Parameters and returns as `convergence_problems`.

    Examples
    --------
    >>> import numpy as np
    >>> from bartz.diagnostics import convergence_notes
    >>> rng = np.random.default_rng(0)
    >>> drifting = 1 + np.linspace(1, 0, 500) + 0.01 * rng.standard_normal((4, 500))
    >>> [note[0] for note in convergence_notes(sigma=drifting)]
    ['R-hat of sigma', 'ESS of sigma']
    """
    return assess(convergence_statistics(sigma, f))[1]


def _statistics_text(findings) -> tuple[str, str]:
    """The findings' values, and their thresholds, as text."""
    stats = '; '.join(
        f'{name} is {value:.0f}' if name.startswith(('ESS', 'stuck')) else f'{name} is {value:.3f}'
        for name, value, _, _ in findings
    )
    limits = ', '.join(f'{name} {cmp} {threshold:g}' for name, _, cmp, threshold in findings)
    return stats, limits


def convergence_message(problems: list[tuple[str, float, str, float]], num_chains: int = 1) -> str:
    """The text of the `ConvergenceWarning` for ``problems``.

    Parameters
    ----------
    problems : list of tuple
        ``(statistic, value, comparison, threshold)``, as returned by
        `convergence_problems`; not empty.
    num_chains : int, default 1
        The fit's chains: with one, the advice includes running several.

    Returns
    -------
    str
        The statistics and their values, the thresholds, what to do, and
        how to silence the warning.
    """
    stats, limits = _statistics_text(problems)
    several = ' or run several chains (mc_cores)' if num_chains == 1 else ''
    return (
        f'bartz: the MCMC chains disagree or are stuck: {stats} (warned when {limits}). Estimates of f '
        'from these draws may be off by more than their intervals say: run a longer burn-in '
        f'(nskip), more draws (ndpost), thin (keepevery){several}; '
        'fit.diagnostics() shows the details. To silence: '
        "warnings.filterwarnings('ignore', category=bartz.ConvergenceWarning)."
    )


def notes_message(notes: list[tuple[str, float, str, float]]) -> str:
    """What the reported findings ``notes`` (`convergence_notes`) mean and
    what to do; the empty string without notes."""
    if not notes:
        return ''
    stats, limits = _statistics_text(notes)
    lines = [f'Reported, not warned: {stats} ({limits}).']
    if any('sigma' in name for name, _, _, _ in notes):
        lines.append(
            'The error sd mixes slowly, as is common for BART on large data: estimates of f change '
            'little, but the draws of sigma (and predictive intervals, which use them) are few in '
            'effect. For them run more draws (ndpost), thin (keepevery) or run several chains (mc_cores).'
        )
    if any(name.startswith('median R-hat of f') for name, _, _, _ in notes):
        lines.append(
            'The chains (or the halves of one) agree on f only roughly: a longer burn-in (nskip) '
            'or more draws (ndpost) make the intervals of f more reliable.'
        )
    return ' '.join(lines)
