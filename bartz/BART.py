"""R-style front end: `gbart` and its result object.

Mirrors R's ``BART::gbart``: the same argument names (``.`` becomes ``_``,
``lambda`` becomes ``lambda_``), meanings and defaults, and a result with
the same attributes. The front end converts and validates the input before
anything is traced, calls the numerical core (`bartz.mcmcstep`,
`bartz.mcmcloop`) and packages the draws; it does no modelling itself.

Deviations from R, on purpose:

- ``x_train`` is ``(n, p)`` as in R's ``gbart`` (not ``(p, n)``); a pandas
  DataFrame keeps its column names (``varcount`` etc. become DataFrames).
  Non-numeric columns are refused: one-hot encode them first
  (``pandas.get_dummies``), which is what R's ``bartModelMatrix`` does.
- ``varcount`` and ``varprob`` have one column per original predictor;
  predictors dropped by ``rm_const`` get zeros (R drops the columns).
- ``seed`` defaults to 99 as in R; the same seed gives the same draws.
- The data are standardised internally (``(y - offset) / sd(y)``) for
  float32 accuracy; priors are transformed accordingly, so the model is the
  same as R's.
- Trees have at most ``maxdepth`` levels (default 6, i.e. up to 32 leaves);
  R's trees are unbounded but rarely deeper in practice.
- Like R, a split is only accepted if each child keeps at least 5 points
  (``min_points_per_leaf``); in bartz the rule is part of the target
  distribution, so the Metropolis-Hastings ratio stays exact.
- ``sigest`` by OLS ignores ``w``.
- ``predict`` returns draws of the probability for binary outcomes.
"""

import math
import numbers
from collections.abc import Iterable

import jax
import numpy as np
import pandas as pd
from jax import numpy as jnp
from scipy import stats

from bartz import buckets, grove, mcmcloop, mcmcstep, prepcovars, sharding
from bartz import predict as predict_mod

__all__ = ['BARTFit', 'gbart', 'mc_gbart']

_TYPES = ('wbart', 'pbart')


# ---------------------------------------------------------------- validation


def _check_int(name, value, minimum, *, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral | float | np.floating):
        msg = f'{name} must be an integer >= {minimum}, got {value!r}'
        raise TypeError(msg)
    if isinstance(value, float | np.floating) and (not math.isfinite(value) or value != int(value)):
        msg = f'{name} must be an integer >= {minimum}, got {value!r}'
        raise ValueError(msg)
    if value < minimum:
        what = 'a positive integer' if minimum == 1 else f'an integer >= {minimum}'
        msg = f'{name} must be {what}, got {value!r}'
        raise ValueError(msg)
    return int(value)


def _check_bool(name, value):
    if not isinstance(value, bool | np.bool_):
        msg = f'{name} must be True or False, got {value!r}'
        raise TypeError(msg)


def _check_real(name, value, *, low=None, high=None, low_open=True, high_open=True, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        msg = f'{name} must be a real number, got {value!r}'
        raise TypeError(msg)
    value = float(value)
    bad = not math.isfinite(value)
    if low is not None:
        bad |= value <= low if low_open else value < low
    if high is not None:
        bad |= value >= high if high_open else value > high
    if bad:
        lo = '' if low is None else (f'> {low}' if low_open else f'>= {low}')
        hi = '' if high is None else (f'< {high}' if high_open else f'<= {high}')
        cond = ' and '.join(s for s in (lo, hi) if s) or 'finite'
        msg = f'{name} must be {cond}, got {value!r}'
        raise ValueError(msg)
    return value


def _as_matrix(name, x, *, columns=None):
    """Convert x to a float (n, p) numpy array; return it and column names."""
    if x is None:
        msg = f'{name} must be an array or DataFrame, got None'
        raise TypeError(msg)
    names = None
    if isinstance(x, pd.Series):
        x = x.to_frame()
    if isinstance(x, pd.DataFrame):
        bad = [c for c in x.columns if not (pd.api.types.is_numeric_dtype(x[c]) or pd.api.types.is_bool_dtype(x[c]))]
        if bad:
            msg = (
                f'{name} has non-numeric columns {bad}; encode them as numbers first, '
                'e.g. with pandas.get_dummies'
            )
            raise TypeError(msg)
        names = [str(c) for c in x.columns]
        if columns is not None and names != list(columns):
            missing = [c for c in columns if c not in names]
            if missing:
                msg = f'{name} lacks the training columns {missing}'
                raise ValueError(msg)
            by_name = {str(c): c for c in x.columns}
            x = x.loc[:, [by_name[c] for c in columns]]
            names = list(columns)
        try:
            arr = x.to_numpy(dtype=np.float64, na_value=np.nan)
        except (TypeError, ValueError) as e:
            msg = f'{name} could not be converted to numbers: {e}'
            raise TypeError(msg) from e
    else:
        try:
            arr = np.asarray(x)
        except Exception as e:
            msg = f'{name} could not be converted to an array: {e}'
            raise TypeError(msg) from e
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
            msg = f'{name} must be numeric, got an array of dtype {arr.dtype}'
            raise TypeError(msg)
        if np.iscomplexobj(arr):
            msg = f'{name} must be real, got complex values'
            raise TypeError(msg)
        arr = arr.astype(np.float64)
        if arr.ndim == 1:
            arr = arr[:, None]
        if arr.ndim != 2:
            msg = f'{name} must be 2-dimensional (n, p), got shape {arr.shape}'
            raise ValueError(msg)
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        msg = f'{name} must be finite (no NaN or inf); found {arr[tuple(bad)]} at row {bad[0]}, column {bad[1]}'
        raise ValueError(msg)
    return arr, names


def _as_vector(name, y, n):
    if y is None:
        msg = f'{name} must be an array, got None'
        raise TypeError(msg)
    if isinstance(y, pd.DataFrame):
        if y.shape[1] != 1:
            msg = f'{name} must be one column, got a DataFrame with {y.shape[1]} columns'
            raise ValueError(msg)
        y = y.iloc[:, 0]
    if isinstance(y, pd.Series):
        if not (pd.api.types.is_numeric_dtype(y) or pd.api.types.is_bool_dtype(y)):
            msg = f'{name} must be numeric, got a Series of dtype {y.dtype}'
            raise TypeError(msg)
        y = y.to_numpy(dtype=np.float64, na_value=np.nan)
    arr = np.asarray(y)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        msg = f'{name} must be numeric, got an array of dtype {arr.dtype}'
        raise TypeError(msg)
    if np.iscomplexobj(arr):
        msg = f'{name} must be real, got complex values'
        raise TypeError(msg)
    arr = arr.astype(np.float64)
    if arr.ndim == 2 and 1 in arr.shape:
        arr = arr.reshape(-1)
    if arr.ndim != 1:
        msg = f'{name} must be 1-dimensional, got shape {arr.shape}'
        raise ValueError(msg)
    if arr.shape[0] != n:
        msg = f'{name} must have one value per row of x_train ({n}), got {arr.shape[0]}'
        raise ValueError(msg)
    if not np.all(np.isfinite(arr)):
        i = int(np.argwhere(~np.isfinite(arr))[0, 0])
        msg = f'{name} must be finite (no NaN or inf); found {arr[i]} at position {i}'
        raise ValueError(msg)
    return arr


# ---------------------------------------------------------------- priors


def _ols_sigest(x, y):
    """Residual sd of the OLS fit of y on x (R: summary(lm(y ~ x))$sigma)."""
    n, p = x.shape
    if p >= n - 1:
        return float(np.std(y, ddof=1))
    design = np.column_stack([np.ones(n), x])
    coef, _, rank, _ = np.linalg.lstsq(design, y, rcond=None)
    resid = y - design @ coef
    dof = n - rank
    if dof <= 0:
        return float(np.std(y, ddof=1))
    return float(np.sqrt(np.sum(resid**2) / dof))


# ---------------------------------------------------------------- result


class BARTFit:
    """The result of `gbart`, with R's attribute names.

    Attributes
    ----------
    yhat_train : (ndpost, n) array
        Draws of f at the training points (latent scale for probit).
    yhat_train_mean : (n,) array
        Their posterior mean.
    yhat_test, yhat_test_mean
        The same at ``x_test`` (None if not given).
    prob_train, prob_train_mean, prob_test, prob_test_mean
        Probit only: draws and mean of ``P(y = 1 | x) = Phi(yhat)``.
    sigma : (nskip + ndpost,) array
        Continuous only: error sd, burn-in included, as R.
    sigma_ : (ndpost,) array
        The kept draws of the error sd; ``sigma_mean`` their mean.
    varcount : (ndpost, p) array or DataFrame
        Number of splits on each predictor in each draw; ``varcount_mean``
        the mean over draws.
    varprob : (ndpost, p) array or DataFrame
        Probability of choosing each predictor for a split (uniform over
        the usable predictors without DART); ``varprob_mean`` the mean.
    offset : float
        The constant added to the sum of trees.
    sigest : float
        Prior guess of the error sd (continuous only).
    ndpost : int
        Number of kept draws.
    accept_rate : dict
        Acceptance rates of grow and prune moves.
    """

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __repr__(self):
        kind = 'probit' if self.type == 'pbart' else 'continuous'
        extra = '' if self.type == 'pbart' else f', sigma_mean={self.sigma_mean:.4g}'
        return (
            f'BARTFit(type={self.type!r} ({kind}), n={self._n}, p={self._p}, ntree={self.ntree}, '
            f'ndpost={self.ndpost}{extra})'
        )

    def predict(
        self,
        x_new,
        *,
        kind='draws',
        q=None,
        predictive=False,
        w_new=None,
        seed=0,
        max_memory=grove.DEFAULT_MAX_MEMORY,
    ):
        """Posterior predictions, or their summaries, at new points.

        Parameters
        ----------
        x_new
            ``(m, p)`` numpy array (also a ``numpy.memmap``: rows are read
            and binned a chunk at a time, never all converted to float64
            at once) or DataFrame with the training columns.
        kind
            ``'draws'``: the ``(ndpost, m)`` draws of f (for probit, of the
            probability ``Phi(f)``). ``'mean'``, ``'sd'``: their posterior
            mean and standard deviation (``ddof=1``, as R's ``sd``),
            ``(m,)``. ``'quantiles'``: ``(len(q), m)``, equal to
            ``numpy.quantile(draws, q, axis=0)`` up to float rounding. All
            but ``'draws'`` reduce the draws of each batch of points inside
            the batch: memory does not grow with ``ndpost`` times ``m``.
        q
            For ``kind='quantiles'``: a probability or a sequence of
            probabilities in [0, 1].
        predictive
            Continuous outcomes only: summarise a new observation ``y``
            instead of ``f``, i.e., add to each draw ``d`` its own noise
            ``N(0, sigma_d^2 w^2)`` (``sigma_d`` from ``sigma_``).
        w_new
            With ``predictive=True``: the weights ``w`` of the new
            observations, a positive number or one per row (default 1).
        seed
            Integer or JAX key of the noise with ``predictive=True``; the
            same seed gives the same result, whatever ``max_memory``.
        max_memory
            Approximate bound in bytes on the temporary device memory of
            one batch of points (see `bartz.grove.evaluate_trace`).

        Returns
        -------
        A float32 numpy array.
        """
        options = self._predict_options(kind, q, predictive, seed, max_memory)
        if w_new is not None and not options['predictive']:
            msg = 'w_new is used only with predictive=True'
            raise ValueError(msg)
        w_new = predict_mod.check_w_new(w_new, predict_mod.num_rows(x_new)) if w_new is not None else None
        model, binning = predict_mod.from_fit(self)
        return predict_mod.predict_rows(x_new, model, binning, name='x_new', w_new=w_new, **options)

    def predict_chunks(
        self, chunks, *, kind='mean', q=None, predictive=False, seed=0, max_memory=grove.DEFAULT_MAX_MEMORY
    ):
        """`predict` on an iterable of row chunks, one result per chunk.

        Parameters
        ----------
        chunks
            An iterable of ``(m_i, p)`` arrays or DataFrames, for example
            ``pandas.read_csv(path, chunksize=100_000)``: only one chunk is
            held at a time.
        kind, q, predictive, seed, max_memory
            As in `predict`. Rows are numbered across chunks, so the
            results are those of `predict` on the concatenated chunks
            (also the noise with ``predictive=True``).

        Yields
        ------
        The result of `predict` on each chunk, in order.
        """
        options = self._predict_options(kind, q, predictive, seed, max_memory)
        if isinstance(chunks, np.ndarray | pd.DataFrame | pd.Series) or not isinstance(chunks, Iterable):
            msg = (
                'chunks must be an iterable of arrays or DataFrames (e.g. pandas.read_csv(..., chunksize=...)), '
                f'got {type(chunks).__name__}; use predict for a single array'
            )
            raise TypeError(msg)
        model, binning = predict_mod.from_fit(self)
        return predict_mod.predict_chunks(chunks, model, binning, **options)

    def _predict_options(self, kind, q, predictive, seed, max_memory):
        """Check the options of `predict` and `predict_chunks`."""
        kind, q = predict_mod.check_kind(kind, q)
        _check_bool('predictive', predictive)
        if predictive and self.type == 'pbart':
            msg = "predictive=True is for continuous outcomes (type='wbart'); for probit the draws are probabilities"
            raise ValueError(msg)
        max_memory = _check_int('max_memory', max_memory, 1)
        key = _make_key(seed)
        key = key if predictive else None
        return {'kind': kind, 'q': q, 'predictive': bool(predictive), 'key': key, 'max_memory': max_memory}

    def _bin_matrix(self, arr):
        X = prepcovars.bin_predictors_np(arr[:, self._kept], self._splits.splits)
        m = X.shape[1]
        return np.pad(X, ((0, 0), (0, buckets.bucket_length(m) - m)))

    def _evaluate(self, X, m, kind, max_memory, link):
        """Evaluate the trace at the binned points `X` (padded), keep the first `m`."""
        params = {'probit': (self.offset,), 'affine': (self.offset, self._scale), None: ()}[link]
        kwargs = {'kind': kind, 'max_memory': max_memory, 'link': link, 'link_params': params}
        if self._mesh is not None and self._mesh.devices.size > 1:
            f = sharding.evaluate_trace_sharded(X, self._trace, self._mesh, **kwargs)
        else:
            f = grove.evaluate_trace(jax.device_put(X), self._trace, **kwargs)
        return np.asarray(f)[..., :m]

    def variable_importance(self) -> pd.DataFrame:
        """Posterior variable usage, one row per predictor, most used first.

        Columns: ``inclusion_prob`` (fraction of draws in which the forest
        splits on the predictor at least once: the posterior inclusion
        proportion), ``varcount_mean`` (mean number of splits) and
        ``varprob_mean`` (mean split probability; DART's ``s`` with
        ``sparse=True``, uniform otherwise). Rows are named by the
        DataFrame columns of ``x_train``, or ``x0, x1, ...``.
        """
        varcount = np.asarray(self.varcount)
        names = self._columns if self._columns is not None else [f'x{j}' for j in range(self._p)]
        table = pd.DataFrame(
            {
                'inclusion_prob': (varcount > 0).mean(axis=0),
                'varcount_mean': varcount.mean(axis=0),
                'varprob_mean': np.asarray(self.varprob).mean(axis=0),
            },
            index=pd.Index(names, name='predictor'),
        )
        return table.sort_values(['inclusion_prob', 'varcount_mean'], ascending=False)

    def by_chain(self, name):
        """Draws of attribute `name` (e.g. ``'yhat_train'``, ``'sigma_'``)
        shaped ``(chains, draws per chain, ...)``."""
        value = getattr(self, name)
        if value is None:
            msg = f'{name} is not available in this fit'
            raise ValueError(msg)
        value = np.asarray(value)
        if value.shape[0] != self.ndpost:
            msg = f'{name} does not have one row per draw'
            raise ValueError(msg)
        return value.reshape(self.chains, self.ndpost // self.chains, *value.shape[1:])

    def diagnostics(self):
        """Convergence summary of the error sd and of the predictions.

        Returns a DataFrame: for ``sigma`` (continuous), its R-hat and
        bulk/tail ESS (`bartz.diagnostics`), and Geweke's z of the first
        chain; for ``yhat_train`` (the draws at the training points), the
        worst (max) and median R-hat and the worst (min) and median ESS over
        points. R-hat needs draws; with one chain it compares its halves.
        """
        from bartz import diagnostics  # noqa: PLC0415

        rows = {}
        if self.type != 'pbart':
            s = self.by_chain('sigma_')
            rows['sigma'] = {
                'rhat': float(diagnostics.rhat(s)),
                'ess_bulk': float(diagnostics.ess_bulk(s)),
                'ess_tail': float(diagnostics.ess_tail(s)),
                'geweke_z': float(diagnostics.geweke(s[0])),
            }
        if self.yhat_train is not None:
            yh = self.by_chain('yhat_train')
            r = diagnostics.rhat(yh)
            eb = diagnostics.ess_bulk(yh)
            et = diagnostics.ess_tail(yh)
            rows['yhat_train (worst point)'] = {
                'rhat': float(np.nanmax(r)),
                'ess_bulk': float(np.nanmin(eb)),
                'ess_tail': float(np.nanmin(et)),
            }
            rows['yhat_train (median point)'] = {
                'rhat': float(np.nanmedian(r)),
                'ess_bulk': float(np.nanmedian(eb)),
                'ess_tail': float(np.nanmedian(et)),
            }
        return pd.DataFrame(rows).T


# ---------------------------------------------------------------- gbart


def gbart(
    x_train,
    y_train,
    x_test=None,
    *,
    type='wbart',  # noqa: A002
    sparse=False,
    theta=0,
    omega=1,
    a=0.5,
    b=1,
    augment=False,
    rho=None,
    xinfo=None,
    usequants=False,
    rm_const=True,
    sigest=None,
    sigdf=3,
    sigquant=0.9,
    k=2.0,
    power=2.0,
    base=0.95,
    lambda_=None,
    tau_num=None,
    offset=None,
    w=None,
    ntree=None,
    numcut=100,
    ndpost=1000,
    nskip=100,
    keepevery=None,
    printevery=100,
    seed=99,
    mc_cores=1,
    maxdepth=6,
    min_points_per_leaf=5,
    save_yhat_train=True,
    max_memory=grove.DEFAULT_MAX_MEMORY,
    devices=None,
    num_chain_devices=None,
    num_data_devices=None,
) -> BARTFit:
    """Fit BART by MCMC, as R's ``BART::gbart``.

    ``y = f(x) + eps``, ``eps ~ N(0, sigma^2 w^2)`` (``type='wbart'``), or
    ``P(y = 1 | x) = Phi(f(x))`` (``type='pbart'``), with ``f`` a sum of
    ``ntree`` regression trees plus ``offset``.

    Parameters
    ----------
    x_train
        ``(n, p)`` predictors: numpy array or pandas DataFrame (numeric or
        bool columns). A 1-D array is one predictor.
    y_train
        ``(n,)`` outcome: numbers; 0/1 (or bool) for ``type='pbart'``.
    x_test
        Optional ``(n_test, p)`` predictors to predict at.
    type
        ``'wbart'`` (continuous, default) or ``'pbart'`` (binary probit).
    sparse
        DART variable selection (Linero 2018): split probabilities ``s ~
        Dirichlet(theta/p, ..., theta/p)`` drawn from their posterior, switched
        on after half the burn-in as in R.
    theta
        Dirichlet concentration; 0 (default) means random, with
        ``theta / (theta + rho) ~ Beta(a, b)`` (griddy Gibbs, as R).
    omega
        Accepted for compatibility with R's signature; not used.
    a, b
        Beta prior parameters of ``theta / (theta + rho)``; smaller ``a``
        means more sparsity.
    augment
        R's data augmentation for DART; not implemented
        (`NotImplementedError`).
    rho
        Default: the number of predictors (after ``rm_const``).
    xinfo
        User cut-points: ``(p, K)`` matrix (NaN-padded) or list of arrays.
    usequants
        Cut-points at quantiles of the unique values instead of evenly
        spaced in the range.
    rm_const
        Drop predictors with no usable cut-point (a message says which).
    sigest
        Prior guess of the error sd; default the residual sd of a linear
        regression of y on x (sd(y) if ``p >= n - 1``).
    sigdf, sigquant, lambda_
        Error variance prior ``sigma^2 ~ sigdf * lambda_ / chi2(sigdf)``,
        with ``lambda_`` by default such that ``P(sigma < sigest) =
        sigquant``.
    k
        Leaf prior sd is ``tau_num / (k sqrt(ntree))``.
    power, base
        Tree prior: a node at depth d splits with probability
        ``base / (1 + d)**power``.
    tau_num
        Default ``(max y - min y) / 2`` (wbart) or 3 (pbart).
    offset
        Default ``mean(y)`` (wbart) or ``Phi^-1(mean(y))`` (pbart).
    w
        ``(n,)`` positive multipliers of the error sd (wbart only).
    ntree
        Number of trees; default 200 (wbart) or 50 (pbart).
    numcut
        Number of cut-points per predictor (int or one per predictor).
    ndpost, nskip, keepevery
        Kept draws, burn-in iterations, iterations per kept draw (default
        1 for wbart, 10 for pbart). The chain runs ``nskip + ndpost *
        keepevery`` iterations.
    printevery
        Progress every this many iterations; None for silence.
    seed
        Integer seed, or a JAX random key.
    mc_cores
        Number of independent chains (R: parallel processes of
        ``mc.gbart``). bartz runs them in one compiled program (``vmap``),
        spread over devices when there are several. ``ndpost`` is the total
        over chains: each chain keeps ``ceil(ndpost / mc_cores)`` draws, and
        the draws of ``yhat_train`` etc. come chain after chain as in R.
    maxdepth
        Levels of the tree arrays (bartz only), 2 to 8.
    min_points_per_leaf
        A split must leave at least this many points in each child (R: 5).
    save_yhat_train
        Keep the ``(ndpost, n)`` training draws (R always does); set False
        on huge n to save memory (``yhat_train_mean`` is still computed).
    max_memory
        Bytes of temporary memory for the prediction kernels.
    devices
        Devices to run on (default ``jax.devices()``).
    num_chain_devices, num_data_devices
        Mesh shape: chains are split over ``num_chain_devices`` devices and
        data points over ``num_data_devices`` (see `bartz.sharding`); ``n``
        need not be divisible (the data are padded with points that enter
        no sum). Default: with several devices, chains over as many devices
        as divide ``mc_cores``, data not split; with one device, no mesh.

    Returns
    -------
    BARTFit

    Examples
    --------
    >>> import numpy as np
    >>> from bartz import gbart
    >>> rng = np.random.default_rng(0)
    >>> x = rng.uniform(size=(200, 3))
    >>> y = np.sin(6 * x[:, 0]) + 0.1 * rng.normal(size=200)
    >>> fit = gbart(x, y, ndpost=100, nskip=50, ntree=20, printevery=None)
    >>> fit.yhat_train.shape
    (100, 200)

    References
    ----------
    Chipman, George & McCulloch (2010), BART: Bayesian additive regression
    trees, Ann. Appl. Stat. 4(1). Sparapani, Spanbauer & McCulloch (2021),
    The BART R package, J. Stat. Softw. 97(1).
    """
    # ---- argument checks, before anything touches JAX
    if type not in _TYPES:
        msg = f"type must be 'wbart' or 'pbart', got {type!r}"
        raise ValueError(msg)
    is_binary = type == 'pbart'
    _check_bool('sparse', sparse)
    _check_bool('augment', augment)
    if augment:
        msg = "augment=True (R's data augmentation for DART) is not implemented in bartz"
        raise NotImplementedError(msg)
    theta = _check_real('theta', theta, low=0, low_open=False)
    _check_real('omega', omega)
    a = _check_real('a', a, low=0)
    b = _check_real('b', b, low=0)
    rho = _check_real('rho', rho, low=0, allow_none=True)
    mc_cores = _check_int('mc_cores', mc_cores, 1)
    mesh = _check_devices(devices, num_chain_devices, num_data_devices, mc_cores)
    if devices is not None:
        devices = list(devices)
    ndpost = _check_int('ndpost', ndpost, 1)
    nskip = _check_int('nskip', nskip, 0)
    keepevery = _check_int('keepevery', keepevery if keepevery is not None else (10 if is_binary else 1), 1)
    ntree = _check_int('ntree', ntree if ntree is not None else (50 if is_binary else 200), 1)
    printevery = _check_int('printevery', printevery, 1, allow_none=True)
    maxdepth = _check_int('maxdepth', maxdepth, 2)
    if maxdepth > grove.MAX_SUPPORTED_DEPTH:
        msg = f'maxdepth must be at most {grove.MAX_SUPPORTED_DEPTH}, got {maxdepth}'
        raise ValueError(msg)
    min_points_per_leaf = _check_int('min_points_per_leaf', min_points_per_leaf, 0)
    max_memory = _check_int('max_memory', max_memory, 1)
    k = _check_real('k', k, low=0)
    power = _check_real('power', power, low=0, low_open=False)
    base = _check_real('base', base, low=0, high=1, high_open=False)
    sigdf = _check_real('sigdf', sigdf, low=0)
    sigquant = _check_real('sigquant', sigquant, low=0, high=1)
    lambda_ = _check_real('lambda_', lambda_, low=0, allow_none=True)
    sigest = _check_real('sigest', sigest, low=0, allow_none=True)
    tau_num = _check_real('tau_num', tau_num, low=0, allow_none=True)
    offset = _check_real('offset', offset, allow_none=True)
    _check_bool('usequants', usequants)
    _check_bool('rm_const', rm_const)
    _check_bool('save_yhat_train', save_yhat_train)

    x, columns = _as_matrix('x_train', x_train)
    n, p = x.shape
    if n == 0:
        msg = 'x_train must have at least one row, got 0'
        raise ValueError(msg)
    y = _as_vector('y_train', y_train, n)
    if is_binary:
        values = np.unique(y)
        if not np.all(np.isin(values, (0.0, 1.0))):
            msg = f"y_train must be 0/1 for type='pbart', got values {values[:5].tolist()}"
            raise ValueError(msg)
        if values.size < 2:
            msg = f"y_train must contain both 0 and 1 for type='pbart', got only {values.tolist()}"
            raise ValueError(msg)
        if w is not None:
            msg = "w is for type='wbart' only"
            raise ValueError(msg)
    elif np.ptp(y) == 0:
        msg = f'y_train is constant ({y[0]}): there is nothing to fit'
        raise ValueError(msg)
    if w is not None:
        w = _as_vector('w', w, n)
        if np.any(w <= 0):
            msg = f'w must be positive, got minimum {w.min()}'
            raise ValueError(msg)
    if x_test is not None:
        xt, _ = _as_matrix('x_test', x_test, columns=columns)
        if xt.shape[1] != p:
            msg = f'x_test must have {p} columns like x_train, got {xt.shape[1]}'
            raise ValueError(msg)
    else:
        xt = None
    key = _make_key(seed)

    # ---- cut-points and binning
    try:
        splits = prepcovars.compute_splits(
            x, numcut=numcut, usequants=bool(usequants), xinfo=None if xinfo is None else xinfo
        )
    except ValueError as e:
        raise ValueError(str(e)) from None
    kept = np.ones(p, bool)
    if rm_const:
        kept = np.asarray(prepcovars.usable_predictors(splits.max_split))
        if not kept.all():
            dropped = [columns[j] if columns else int(j) for j in np.flatnonzero(~kept)]
            if printevery is not None:
                print(f'bartz: rm_const dropped {len(dropped)} predictor(s) with no usable cut-point: {dropped}')
            splits = prepcovars.drop_predictors(splits, kept)
    X = prepcovars.bin_predictors_np(x[:, kept], splits.splits)

    # ---- priors, in the internal standardised units
    if is_binary:
        mean_y = y.mean()
        if offset is None:
            offset = float(stats.norm.ppf(mean_y))
        if tau_num is None:
            tau_num = 3.0
        scale = 1.0
        y_core = y.astype(bool)
        sigest_value = None
        sigma2_alpha = sigma2_beta = None
        sigma2_init = 1.0
    else:
        if offset is None:
            offset = float(y.mean())
        if tau_num is None:
            tau_num = float((y.max() - y.min()) / 2)
        scale = float(np.std(y))
        y_core = ((y - offset) / scale).astype(np.float32)
        if sigest is None:
            x_kept = x[:, kept]
            sigest = _ols_sigest(x_kept, y) if x_kept.shape[1] else float(np.std(y, ddof=1))
        sigest_value = sigest
        if lambda_ is None:
            qchi = stats.chi2.ppf(1 - sigquant, sigdf)
            lambda_ = sigest**2 * qchi / sigdf
        sigma2_alpha = sigdf / 2
        sigma2_beta = sigdf * lambda_ / 2 / scale**2
        sigma2_init = (sigest / scale) ** 2
    tau = tau_num / (k * math.sqrt(ntree)) / scale

    # ---- devices: chains and/or data points over a mesh
    if mesh is None:
        if devices is not None and len(devices) == 1:
            mesh = sharding.make_mesh(1, 1, devices)
        else:
            mesh = sharding.auto_mesh(mc_cores, devices)
    num_data_devices = mesh.shape['data'] if mesh is not None else 1
    if mesh is not None and mc_cores % mesh.shape['chains']:
        msg = f"mc_cores={mc_cores} must be a multiple of the number of chain devices ({mesh.shape['chains']})"
        raise ValueError(msg)
    # the data axis padded to the size ladder, so that a new n reuses the compiled sampler
    npad = buckets.bucket_length(n, num_data_devices)
    valid = np.arange(npad) < n
    X = np.pad(X, ((0, 0), (0, npad - n)))
    y_core = np.pad(y_core, (0, npad - n))
    prec_weights = None if w is None else np.pad((1.0 / w**2).astype(np.float32), (0, npad - n))

    draws_per_chain = -(-ndpost // mc_cores)
    state = mcmcstep.init(
        X=X,
        max_split=splits.max_split,
        y=y_core,
        num_trees=ntree,
        max_depth=maxdepth,
        leaf_prior_var=tau**2,
        sigma2_alpha=sigma2_alpha,
        sigma2_beta=sigma2_beta,
        sigma2_init=sigma2_init,
        base=base,
        power=power,
        prec_weights=prec_weights,
        min_points_per_leaf=min_points_per_leaf,
        probit_threshold=-offset if is_binary else None,
        valid=valid,
        dart={'theta': theta, 'a': a, 'b': b, 'rho': rho} if sparse else None,
    )
    # one chain on one device runs the plain sweep (no chain axis to vmap over)
    num_chains = None if mesh is None and mc_cores == 1 else mc_cores
    if num_chains is not None:
        state = mcmcstep.init_chains(state, mc_cores)
    _, trace, info = mcmcloop.run_mcmc(
        key,
        state,
        n_burn=nskip,
        n_save=draws_per_chain,
        n_skip=keepevery,
        printevery=printevery,
        save_train=bool(save_yhat_train),
        sigma_scale=scale,
        num_chains=num_chains,
        mesh=mesh,
    )
    del state
    # (draws, chains, ...) -> chain after chain, as R's mc.gbart
    if num_chains is None:
        trace = jax.tree.map(lambda a: a[:, None], trace)
        burn_sigma2 = None if info.burn_sigma2 is None else info.burn_sigma2[:, None]
    else:
        burn_sigma2 = info.burn_sigma2
    per_chain = int(trace.leaf_tree.shape[0])
    trace = jax.tree.map(lambda a: np.swapaxes(a, 0, 1).reshape(-1, *a.shape[2:]), trace)
    if trace.fit_train is not None:
        trace = trace._replace(fit_train=trace.fit_train[:, :n])
    ndraws = int(trace.leaf_tree.shape[0])

    # ---- package
    fit = BARTFit(
        type=type,
        ndpost=ndraws,
        ntree=ntree,
        chains=mc_cores,
        offset=float(offset),
        sigest=sigest_value,
        _scale=scale,
        _n=n,
        _p=p,
        _columns=columns,
        _kept=kept,
        _splits=splits,
        _trace=jax.device_put(grove.TreeHeaps(trace.var_tree, trace.split_tree, trace.leaf_tree)),
        _mesh=mesh,
        run_info=info,
        accept_rate={
            'grow': info.grow_accepted / max(info.grow_proposed, 1),
            'prune': info.prune_accepted / max(info.prune_proposed, 1),
        },
        k=k,
        power=power,
        base=base,
        sigdf=sigdf,
        sigquant=sigquant,
        lambda_=lambda_,
        tau_num=tau_num,
        numcut=splits.max_split,
        xinfo=splits.splits,
        elapsed=info.elapsed,
    )
    if save_yhat_train:
        fit_train = trace.fit_train
        if is_binary:
            yhat_train = offset + fit_train
            fit.prob_train = stats.norm.cdf(yhat_train)
            fit.prob_train_mean = fit.prob_train.mean(axis=0)
        else:
            yhat_train = offset + scale * fit_train
        fit.yhat_train = yhat_train
        fit.yhat_train_mean = yhat_train.mean(axis=0)
        del fit_train, yhat_train
    else:
        # the draws were never kept: the means come from the trees, in bounded memory
        fit.yhat_train = None
        if is_binary:
            fit.yhat_train_mean = offset + fit._evaluate(X, n, 'mean', max_memory, link=None)
            fit.prob_train = None
            fit.prob_train_mean = fit._evaluate(X, n, 'mean', max_memory, link='probit')
        else:
            fit.yhat_train_mean = fit._evaluate(X, n, 'mean', max_memory, link='affine')
    if xt is not None:
        Xt = fit._bin_matrix(xt)
        if is_binary:
            fit.yhat_test = offset + fit._evaluate(Xt, xt.shape[0], 'draws', max_memory, link=None)
            fit.prob_test = stats.norm.cdf(fit.yhat_test)
            fit.prob_test_mean = fit.prob_test.mean(axis=0)
        else:
            # the link of `predict`, so that a later predict reuses the compiled program
            fit.yhat_test = fit._evaluate(Xt, xt.shape[0], 'draws', max_memory, link='affine')
        fit.yhat_test_mean = fit.yhat_test.mean(axis=0)
    else:
        fit.yhat_test = fit.yhat_test_mean = None
        if is_binary:
            fit.prob_test = fit.prob_test_mean = None
    if not is_binary:
        sigma_kept = scale * np.sqrt(np.asarray(trace.sigma2, np.float64))  # chain after chain
        sigma_burn = scale * np.sqrt(np.asarray(burn_sigma2, np.float64))  # (nskip, chains)
        if mc_cores == 1:
            fit.sigma = np.concatenate([sigma_burn[:, 0], sigma_kept])
        else:
            fit.sigma = np.concatenate([sigma_burn, sigma_kept.reshape(mc_cores, per_chain).T])
        fit.sigma_ = sigma_kept
        fit.sigma_mean = float(sigma_kept.mean())
    varcount = np.zeros((ndraws, p), np.int64)
    varcount[:, kept] = trace.varcount
    varprob = np.zeros((ndraws, p))
    if trace.log_s is not None:
        varprob[:, kept] = np.exp(trace.log_s)
    else:
        varprob[:, kept] = 1.0 / max(kept.sum(), 1)
    if columns is not None:
        fit.varcount = pd.DataFrame(varcount, columns=columns)
        fit.varprob = pd.DataFrame(varprob, columns=columns)
        fit.varcount_mean = fit.varcount.mean(axis=0)
        fit.varprob_mean = fit.varprob.mean(axis=0)
    else:
        fit.varcount = varcount
        fit.varprob = varprob
        fit.varcount_mean = varcount.mean(axis=0)
        fit.varprob_mean = varprob.mean(axis=0)
    fit.rm_const = np.flatnonzero(kept)
    return fit


def mc_gbart(x_train, y_train, x_test=None, *, mc_cores=2, **kwargs) -> BARTFit:
    """`gbart` with several chains, as R's ``BART::mc.gbart`` (default 2 chains).

    Takes the same arguments as `gbart`; ``ndpost`` is the total over chains.
    """
    return gbart(x_train, y_train, x_test, mc_cores=mc_cores, **kwargs)


def _check_devices(devices, num_chain_devices, num_data_devices, mc_cores):
    """Validate the device arguments; return an explicit mesh or None (automatic)."""
    if devices is not None:
        try:
            devices = list(devices)
        except TypeError:
            msg = f'devices must be a sequence of JAX devices, got {devices!r}'
            raise TypeError(msg) from None
        if not devices or not all(isinstance(d, jax.Device) for d in devices):
            msg = f'devices must be a non-empty sequence of JAX devices, got {devices!r}'
            raise TypeError(msg)
    if num_chain_devices is None and num_data_devices is None:
        return None
    cd = _check_int('num_chain_devices', 1 if num_chain_devices is None else num_chain_devices, 1)
    dd = _check_int('num_data_devices', 1 if num_data_devices is None else num_data_devices, 1)
    if mc_cores % cd:
        msg = f'mc_cores ({mc_cores}) must be a multiple of num_chain_devices ({cd})'
        raise ValueError(msg)
    available = len(devices) if devices is not None else jax.device_count()
    if cd * dd > available:
        msg = f'num_chain_devices * num_data_devices = {cd * dd} devices requested, {available} available'
        raise ValueError(msg)
    return sharding.make_mesh(cd, dd, devices)


def _make_key(seed):
    if isinstance(seed, jax.Array) and jnp.issubdtype(seed.dtype, jax.dtypes.prng_key):
        return seed
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        msg = f'seed must be an integer or a JAX random key, got {seed!r}'
        raise TypeError(msg)
    if not 0 <= seed < 2**63:
        msg = f'seed must be a non-negative integer, got {seed}'
        raise ValueError(msg)
    return jax.random.key(int(seed) % (2**32))

