"""Matplotlib figures of a `gbart` fit: predictions against truth, sigma trace,
partial dependence.

The functions draw on an `~matplotlib.axes.Axes` (a new figure when ``ax`` is
None) and return it; they never call ``plt.show``. If no display is
available and no backend was chosen (no ``MPLBACKEND``, pyplot not yet
imported), matplotlib is switched to the non-interactive 'Agg' backend, so
the figures can be saved with ``ax.figure.savefig(...)`` on headless
machines.
"""

import os
import sys

import matplotlib
import numpy as np
import pandas as pd


def _headless() -> bool:
    if sys.platform.startswith(('win', 'darwin')):
        return False
    return not (os.environ.get('DISPLAY') or os.environ.get('WAYLAND_DISPLAY'))


if 'matplotlib.pyplot' not in sys.modules and not os.environ.get('MPLBACKEND') and _headless():
    matplotlib.use('Agg')

from matplotlib import pyplot as plt  # noqa: E402

__all__ = ['partial_dependence', 'plot_fit', 'plot_sigma']


def _draws_from(fit_or_draws, n: int, which: str | None) -> np.ndarray:
    """The ``(ndpost, n)`` draws to plot from a fit or an array."""
    if not hasattr(fit_or_draws, 'yhat_train'):
        draws = np.asarray(fit_or_draws, dtype=np.float64)
        if draws.ndim != 2:
            msg = f'fit_or_draws must be a BARTFit or a (ndpost, n) array, got shape {draws.shape}'
            raise ValueError(msg)
        if which is not None:
            msg = 'which applies only when fit_or_draws is a BARTFit'
            raise ValueError(msg)
        return draws
    fit = fit_or_draws
    prefix = 'prob' if getattr(fit, 'type', 'wbart') in ('pbart', 'lbart') else 'yhat'
    if which not in (None, 'train', 'test'):
        msg = f"which must be None, 'train' or 'test', got {which!r}"
        raise ValueError(msg)
    candidates = [which] if which is not None else ['test', 'train']
    for name in candidates:
        draws = getattr(fit, f'{prefix}_{name}', None)
        if draws is not None and np.shape(draws)[1] == n:
            return np.asarray(draws, dtype=np.float64)
    shapes = {
        name: None if getattr(fit, f'{prefix}_{name}', None) is None else np.shape(getattr(fit, f'{prefix}_{name}'))
        for name in candidates
    }
    msg = f'no draws of the fit match the {n} true values: {prefix}_<{"|".join(candidates)}> shapes are {shapes}'
    raise ValueError(msg)


def plot_fit(
    y_true_or_f,
    fit_or_draws,
    ax=None,
    *,
    which: str | None = None,
    level: float = 0.95,
    max_points: int | None = 1000,
    seed: int = 0,
):
    """Plot posterior predictions against the true values, with intervals.

    Each point is one observation: the posterior mean on the vertical axis
    against the true value on the horizontal one, with a vertical error bar
    spanning the central ``level`` posterior interval; the diagonal is drawn
    for reference. The title reports the RMSE of the posterior mean and the
    fraction of intervals that contain the true value.

    Parameters
    ----------
    y_true_or_f : array_like
        ``(n,)`` true values: the true regression function when known
        (simulations), or the observed outcome.
    fit_or_draws : BARTFit or array_like
        A `bartz.gbart` result, or ``(ndpost, n)`` posterior draws. From a
        fit, the test draws (``yhat_test``; ``prob_test`` for binary
        outcomes) are used if they have ``n`` columns, else the training
        draws.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure is made if None.
    which : {'train', 'test'}, optional
        Pick the training or test draws of a fit explicitly.
    level : float, default 0.95
        Probability of the central posterior interval.
    max_points : int or None, default 1000
        Plot at most this many points, chosen at random (the summary in the
        title uses all of them); None plots all.
    seed : int, default 0
        Seed of the random choice of points.

    Returns
    -------
    matplotlib.axes.Axes

    Examples
    --------
    >>> import numpy as np
    >>> from bartz.plot import plot_fit
    >>> rng = np.random.default_rng(0)
    >>> f = rng.normal(size=50)
    >>> draws = f + 0.1 * rng.normal(size=(200, 50))
    >>> ax = plot_fit(f, draws)
    >>> ax.get_xlabel()
    'true value'
    """
    if hasattr(y_true_or_f, 'yhat_train'):
        msg = 'plot_fit takes the true values first and the fit second: plot_fit(y, fit), got a fit first'
        raise TypeError(msg)
    try:
        truth = np.asarray(y_true_or_f, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as e:
        msg = f'y_true_or_f must be an array of numbers, got {type(y_true_or_f).__name__} ({e})'
        raise TypeError(msg) from e
    draws = _draws_from(fit_or_draws, truth.size, which)
    if draws.shape[1] != truth.size:
        msg = f'the draws have {draws.shape[1]} columns but there are {truth.size} true values'
        raise ValueError(msg)
    if not 0 < level < 1:
        msg = f'level must be in (0, 1), got {level!r}'
        raise ValueError(msg)
    if max_points is not None and (isinstance(max_points, bool) or int(max_points) < 1):
        msg = f'max_points must be a positive integer or None, got {max_points!r}'
        raise ValueError(msg)

    alpha = (1 - level) / 2
    mean = draws.mean(axis=0)
    low, high = np.quantile(draws, [alpha, 1 - alpha], axis=0)
    rmse = float(np.sqrt(np.mean((mean - truth) ** 2)))
    coverage = float(np.mean((low <= truth) & (truth <= high)))

    shown = np.arange(truth.size)
    if max_points is not None and truth.size > max_points:
        shown = np.sort(np.random.default_rng(seed).choice(truth.size, int(max_points), replace=False))

    if ax is None:
        _, ax = plt.subplots(figsize=(5, 5))
    yerr = np.stack([mean[shown] - low[shown], high[shown] - mean[shown]])
    ax.errorbar(
        truth[shown],
        mean[shown],
        yerr=yerr,
        fmt='.',
        ms=3,
        color='C0',
        elinewidth=0.6,
        alpha=0.6,
        label=f'posterior mean, {level:.0%} interval',
    )
    lo = min(truth[shown].min(), low[shown].min())
    hi = max(truth[shown].max(), high[shown].max())
    ax.plot([lo, hi], [lo, hi], color='k', lw=1, ls='--', label='y = x')
    ax.set_xlabel('true value')
    ax.set_ylabel('predicted')
    ax.set_title(f'RMSE {rmse:.3g}, {level:.0%} coverage {coverage:.1%} (n={truth.size})')
    ax.legend(loc='upper left', fontsize='small')
    return ax


def plot_sigma(fit, ax=None):
    """Plot the trace of the error standard deviation, burn-in shaded.

    Parameters
    ----------
    fit : BARTFit
        A continuous-outcome `bartz.gbart` result: ``fit.sigma`` holds the
        ``nskip`` burn-in values followed by the kept ones, as in R; with
        several chains it is ``(nskip + ndpost / chains, chains)``, one
        column per chain (R's ``mc.gbart``), and each chain is one line.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure is made if None.

    Returns
    -------
    matplotlib.axes.Axes

    Notes
    -----
    The horizontal axis counts the values of ``fit.sigma``: one per
    iteration during burn-in, one per kept draw after it (every
    ``keepevery`` iterations), as in R's ``fit$sigma``.
    """
    sigma = getattr(fit, 'sigma', None)
    if sigma is None:
        msg = "fit has no sigma: plot_sigma needs a continuous-outcome fit (type='wbart')"
        raise ValueError(msg)
    sigma = np.asarray(sigma, dtype=np.float64)
    if sigma.ndim == 1:
        sigma = sigma[:, None]
    if sigma.ndim != 2:
        msg = f'fit.sigma must be 1-D or (iterations, chains), got shape {sigma.shape}'
        raise ValueError(msg)
    num_chains = sigma.shape[1]
    kept_per_chain = int(fit.ndpost) // num_chains
    nburn = sigma.shape[0] - kept_per_chain
    if nburn < 0:
        msg = f'fit.sigma has {sigma.shape[0]} rows, fewer than the {kept_per_chain} kept draws per chain'
        raise ValueError(msg)

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    index = np.arange(1, sigma.shape[0] + 1)
    if nburn:
        ax.axvspan(0.5, nburn + 0.5, color='0.85', label=f'burn-in ({nburn})')
    for c in range(num_chains):
        label = 'sigma' if num_chains == 1 else f'sigma, chain {c + 1}'
        ax.plot(index, sigma[:, c], color=f'C{(c + 1) % 10}', lw=0.8, label=label)
    kept = sigma[nburn:]
    if kept.size:
        ax.axhline(kept.mean(), color='k', lw=1, ls='--', label=f'posterior mean {kept.mean():.3g}')
    ax.set_xlim(0.5, sigma.shape[0] + 0.5)
    ax.set_xlabel('iteration (burn-in), then kept draw')
    ax.set_ylabel('sigma')
    ax.set_title('error standard deviation')
    ax.legend(loc='upper right', fontsize='small')
    return ax


def partial_dependence(pd_or_fit, x=None, var=None, grid=None, ax=None, *, level: float = 0.95, **kwargs):
    """Plot the posterior partial dependence on one or two predictors.

    One predictor: the posterior mean against the grid with the central
    credible band shaded (numeric grids), or with error bars (categories).
    Two predictors: the posterior mean as a heat map over the grid product,
    with contour lines.

    Parameters
    ----------
    pd_or_fit : DataFrame or BARTFit
        The result of `bartz.BARTFit.partial_dependence`, or a fit, in
        which case it is computed here from `x`, `var`, `grid`, `level` and
        the keyword arguments.
    x, var, grid
        Passed to `bartz.BARTFit.partial_dependence` when `pd_or_fit` is a
        fit; must be left out otherwise.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure is made if None.
    level : float, default 0.95
        Band level when computing from a fit (a table keeps its own).

    Returns
    -------
    matplotlib.axes.Axes
    """
    if isinstance(pd_or_fit, pd.DataFrame):
        if x is not None or var is not None or grid is not None or kwargs:
            msg = 'x, var, grid and other options apply only when pd_or_fit is a BARTFit'
            raise ValueError(msg)
        table = pd_or_fit
    elif hasattr(pd_or_fit, 'partial_dependence'):
        if x is None or var is None:
            msg = 'x and var are needed to compute the partial dependence from a fit'
            raise ValueError(msg)
        table = pd_or_fit.partial_dependence(x, var, grid, level=level, **kwargs)
    else:
        msg = f'pd_or_fit must be a partial-dependence DataFrame or a BARTFit, got {type(pd_or_fit).__name__}'
        raise TypeError(msg)
    names = table.attrs.get('var')
    needed = {'mean', 'lower', 'upper'}
    if not names or not needed <= set(table.columns) or not set(names) <= set(table.columns):
        msg = 'pd_or_fit is not a table from BARTFit.partial_dependence (attrs["var"] and mean/lower/upper columns)'
        raise ValueError(msg)
    band = table.attrs.get('level', level)

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4) if len(names) == 1 else (6, 5))
    if len(names) == 1:
        name = names[0]
        grid_values = table[name].to_numpy()
        mean = table['mean'].to_numpy(dtype=np.float64)
        low = table['lower'].to_numpy(dtype=np.float64)
        high = table['upper'].to_numpy(dtype=np.float64)
        if np.issubdtype(grid_values.dtype, np.number):
            ax.fill_between(grid_values, low, high, color='C0', alpha=0.25, lw=0, label=f'{band:.0%} band')
            ax.plot(grid_values, mean, 'o-', color='C0', ms=3, label='posterior mean')
        else:
            pos = np.arange(len(grid_values))
            ax.errorbar(pos, mean, yerr=[mean - low, high - mean], fmt='o', color='C0', capsize=3,
                        label=f'posterior mean, {band:.0%} band')
            ax.set_xticks(pos, [str(v) for v in grid_values])
        ax.set_xlabel(str(name))
        ax.set_ylabel('partial dependence')
        ax.legend(loc='best', fontsize='small')
    else:
        a, b = names
        wide = table.pivot_table(index=b, columns=a, values='mean', sort=True)
        xa, xb = wide.columns.to_numpy(), wide.index.to_numpy()
        if not (np.issubdtype(xa.dtype, np.number) and np.issubdtype(xb.dtype, np.number)):
            msg = 'two-predictor plots need numeric grids'
            raise ValueError(msg)
        values = wide.to_numpy(dtype=np.float64)
        mesh = ax.pcolormesh(xa, xb, values, shading='nearest', cmap='viridis')
        if min(values.shape) >= 2 and np.isfinite(values).all():
            contours = ax.contour(xa, xb, values, colors='w', linewidths=0.7)
            ax.clabel(contours, fontsize='x-small')
        ax.figure.colorbar(mesh, ax=ax, label='partial dependence (posterior mean)')
        ax.set_xlabel(str(a))
        ax.set_ylabel(str(b))
    ax.set_title('partial dependence')
    return ax
