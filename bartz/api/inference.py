"""A fit's draws for ArviZ: `to_inference_data` (``fit.to_inference_data()``).

ArviZ is an optional extra (``pip install 'bartz[arviz]'``), imported only
here, when called. The groups follow ArviZ's conventions: draws shaped
``(chain, draw, ...)``, named dimensions with coordinates.

- ``posterior``: ``sigma`` (continuous outcomes); ``f`` (continuous: R's
  ``yhat``) or ``prob`` (binary: ``P(y = 1 | x)``) at a set of points,
  dimension ``point``; with DART (``sparse=True``) the split probabilities
  ``varprob``, dimension ``predictor`` (the encoded columns).
- ``sample_stats``: per draw, ``leaves`` (mean leaves per tree),
  ``trees_changed`` (trees whose structure changed since the chain's
  previous kept draw: its accepted grow, prune, change and swap moves; NaN
  at the first draw) and ``varcount`` (splits per predictor). The run's
  acceptance rate of each move is in the group's ``attrs``
  (``accept_rate_grow``, ...): bartz counts acceptances per run, not per
  draw.
- ``observed_data``: ``y``, when the training outcomes are passed (a fit
  does not keep them, as R's does not).
"""

import warnings

import numpy as np
import pandas as pd

from bartz.diagnostics import check_points
from bartz.prep import checks, priors

__all__ = ['to_inference_data']


def to_inference_data(fit, x=None, *, points=None, y=None):
    """The draws of ``fit`` as ArviZ data (see the module's docstring).

    Parameters
    ----------
    fit : bartz.BARTFit
        A fit of `bartz.gbart`.
    x : array or DataFrame, optional
        Points at which to give f: ``fit.predict(x)``'s draws. By default f
        is given at ``x_test`` (``yhat_test``) if the fit has it, else at
        the training points of ``points``.
    points : sequence of int, optional
        Training points (row indices of ``x_train``) at which to give f,
        from ``yhat_train``; default: the 100 (at most) points of the
        convergence check, `bartz.diagnostics.check_points`.
    y : array, optional
        The training outcomes, stored as ``observed_data['y']``.

    Returns
    -------
    arviz.InferenceData or xarray.DataTree
        What ``arviz.from_dict`` returns: an ``InferenceData`` with ArviZ
        0.x, a ``DataTree`` with ArviZ 1.x. ``arviz.summary``,
        ``arviz.rhat``, ``arviz.ess`` and ``arviz.plot_trace`` take it.

    Raises
    ------
    ImportError
        If ArviZ is not installed.
    ValueError
        If ``x`` and ``points`` are both given, ``points`` are not rows of
        ``x_train``, the fit has no draws at the training points, or ``y``
        has not one value per training point.
    """
    thinned = {kind: rows for kind, rows in (fit.nkeep or {}).items() if rows is not None and rows != fit.ndpost}
    if thinned:
        msg = f"to_inference_data needs every kind of draw at every kept draw; this fit thinned some (R's nkeep: {thinned})"
        raise ValueError(msg)
    binary = priors.OUTCOME_TYPES[fit.type].binary
    source, values, coords = _f_draws(fit, x, points, binary)
    y = None if y is None else checks.as_vector('y', y, fit._n)  # noqa: SLF001
    az = _import_arviz()
    chains, per_chain = fit.chains, fit.ndpost // fit.chains
    name = 'prob' if binary else 'f'
    posterior = {name: values.reshape(chains, per_chain, -1)}
    dims = {name: ['point']}
    all_coords = {'point': coords}
    if not binary:
        posterior['sigma'] = fit.by_chain('sigma_')
    predictors = _predictor_names(fit)
    varprob = np.asarray(fit.varprob, dtype=np.float64)
    if not np.all(varprob == varprob[:1]):  # DART: s is drawn; else the prior, a constant
        posterior['varprob'] = varprob.reshape(chains, per_chain, -1)
        dims['varprob'] = ['predictor']
    sample_stats = _sample_stats(fit, chains, per_chain)
    dims['varcount'] = ['predictor']
    all_coords['predictor'] = predictors
    groups = {'posterior': posterior, 'sample_stats': sample_stats}
    if y is not None:
        groups['observed_data'] = {'y': y}
        dims['y'] = ['obs']
        all_coords['obs'] = np.arange(y.size)
    data = _from_dict(az, groups, all_coords, dims)
    attrs = {'inference_library': 'bartz', 'type': fit.type, 'ntree': fit.ntree, 'point_source': source}
    data['posterior'].attrs.update(attrs)
    data['sample_stats'].attrs.update({f'accept_rate_{move}': rate for move, rate in fit.accept_rate.items()})
    return data


def _f_draws(fit, x, points, binary):
    """Where f is given (a description), its draws ``(ndpost, m)`` and the
    coordinates of the ``m`` points; checks the arguments first."""
    if x is not None and points is not None:
        msg = 'pass x (new points) or points (rows of x_train), not both'
        raise ValueError(msg)
    if x is not None:
        draws = fit.predict(x)  # (probabilities for binary outcomes)
        index = x.index.to_numpy() if isinstance(x, pd.DataFrame) else np.arange(draws.shape[1])
        return 'x', np.asarray(draws, np.float64), index
    if points is None and fit.yhat_test is not None:
        draws = fit.prob_test if binary and fit.prob_test is not None else fit.yhat_test
        if binary and fit.prob_test is None:
            draws = priors.OUTCOME_TYPES[fit.type].prob(np.asarray(draws, np.float64))
        return 'x_test', np.asarray(draws, np.float64), np.arange(np.shape(draws)[1])
    n = fit._n  # noqa: SLF001
    rows = check_points(n) if points is None else _check_points(points, n)
    if fit.yhat_train is None:
        msg = 'this fit has no draws at the training points (save_yhat_train=False): pass x to give f at points'
        raise ValueError(msg)
    draws = np.asarray(fit.yhat_train, np.float64)[:, rows]
    if binary:
        draws = priors.OUTCOME_TYPES[fit.type].prob(draws)
    return 'x_train rows', draws, rows


def _check_points(points, n) -> np.ndarray:
    """``points`` as distinct row indices of ``x_train`` (``n`` rows)."""
    rows = np.asarray(points)
    if rows.ndim != 1 or rows.size == 0 or not np.issubdtype(rows.dtype, np.integer):
        msg = f'points must be a non-empty sequence of integer row indices of x_train, got {points!r:.80}'
        raise ValueError(msg)
    bad = rows[(rows < 0) | (rows >= n)]
    if bad.size:
        msg = f'points must be rows of x_train (0 to {n - 1}), got {bad[0]}'
        raise ValueError(msg)
    return rows


def _predictor_names(fit) -> list:
    """The encoded columns' names (``varcount``'s), or ``x0, x1, ...``."""
    names = fit._encoding.encoded_names  # noqa: SLF001
    p = np.shape(fit.varcount)[1]
    return list(names) if names is not None else [f'x{j}' for j in range(p)]


def _sample_stats(fit, chains, per_chain) -> dict:
    """The per-draw statistics of the forests: leaves, trees changed, splits."""
    trace = fit._trace  # noqa: SLF001
    split_tree = np.asarray(trace.split_tree)
    internal = np.count_nonzero(split_tree, axis=(1, 2))  # (a node splits iff its index is nonzero)
    stats = {'leaves': (1 + internal / fit.ntree).reshape(chains, per_chain)}
    changed = np.full((chains, per_chain), np.nan)
    changed[:, 1:] = fit._trees_changed()  # noqa: SLF001
    stats['trees_changed'] = changed
    stats['varcount'] = np.asarray(fit.varcount).reshape(chains, per_chain, -1)
    return stats


def _import_arviz():
    try:
        with warnings.catch_warnings():
            # (arviz 0.23 announces its own refactor at import: not about this call)
            warnings.simplefilter('ignore', FutureWarning)
            import arviz  # noqa: PLC0415: an optional extra, imported only here
    except ImportError as exc:
        msg = "fit.to_inference_data() needs ArviZ: pip install 'bartz[arviz]' (or pip install arviz)"
        raise ImportError(msg) from exc
    return arviz


def _from_dict(az, groups, coords, dims):
    """``arviz.from_dict`` of both major versions: 0.x takes the groups as
    keywords, 1.x as one dict."""
    if int(az.__version__.split('.')[0]) >= 1:
        return az.from_dict(groups, coords=coords, dims=dims)
    return az.from_dict(**groups, coords=coords, dims=dims)
