"""R-style front end: `gbart`, a short composition of named steps.

Mirrors R's ``BART::gbart``: the same argument names (``.`` becomes ``_``,
``lambda`` becomes ``lambda_``), meanings and defaults, and a result with
the same attributes. `gbart` reads as its steps, each in its own module:

1. check and convert the arguments (`bartz.prep.checks`, and the outcome in
   `bartz.priors.check_outcome`);
2. encode the columns of ``x_train`` (`bartz.encoding`: numbers,
   categorical dummies, missing values), compute the cut-points and bin;
3. compute R's priors (`bartz.priors`);
4. run the chains (`bartz.mcmcstep`, `bartz.mcmcloop`);
5. package the result (`bartz.api.fit.BARTFit`).

Deviations from R, on purpose:

- ``x_train`` is ``(n, p)`` as in R's ``gbart`` (not ``(p, n)``); a pandas
  DataFrame keeps its column names (``varcount`` etc. become DataFrames).
- Categorical columns become dummies as in R's ``bartModelMatrix``, named
  ``column_level`` (R: ``column1, column2, ...``); a level unseen in
  ``x_train`` is an error at prediction.
- Missing predictors are handled by "missingness in attributes" (each split
  sends missing values left or right), not by R's imputation; see
  `bartz.encoding`.
- ``varcount`` and ``varprob`` have one column per encoded predictor (as R's
  model matrix); predictors dropped by ``rm_const`` get zeros (R drops the
  columns). `BARTFit.variable_importance` sums the dummies of a column.
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
- A fit is saved with `BARTFit.save` and read with `bartz.load` (R saves
  the whole R object with ``saveRDS``).

(`gbart` is over 60 lines because of its docstring, which documents R's
arguments, and its call of `bartz.prep.checks.check_settings`, which passes
each of them by name.)

Its private argument ``_censored`` (an ``(n,)`` bool mask of right-censored
points of a continuous ``y``) is `bartz.abart`'s path into the sampler; R's
``gbart`` has no censoring.
"""

import functools
import warnings
from typing import NamedTuple

import numpy as np

from bartz.prep import checks as _checks
from bartz._compile import programs as _programs
from bartz.prep import encoding
from bartz.forest import grove
from bartz.prep import cutpoints as prepcovars
from bartz.prep import priors
from bartz.prep.checks import (  # noqa: F401  (kept importable from here)
    _check_bool,
    _check_devices,
    _check_int,
    _check_real,
    as_vector,
    make_key,
)
from bartz.api import packaging, sampling
from bartz.api.fit import BARTFit, package, warn_convergence
from bartz.prep.priors import ols_sigest  # noqa: F401

__all__ = ['BARTFit', 'gbart', 'mc_gbart']


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
    cont=False,
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
    moves=None,
    save_yhat_train=True,
    max_memory=grove.DEFAULT_MAX_MEMORY,
    devices=None,
    num_chain_devices=None,
    num_data_devices=None,
    warmstart=0,
    _censored=None,
) -> BARTFit:
    """Fit BART by MCMC, as R's ``BART::gbart``.

    ``y = f(x) + eps``, ``eps ~ N(0, sigma^2 w^2)`` (``type='wbart'``), or
    ``P(y = 1 | x) = Phi(f(x))`` (``type='pbart'``), or ``P(y = 1 | x) = 1 /
    (1 + exp(-f(x)))`` (``type='lbart'``), with ``f`` a sum of ``ntree``
    regression trees plus ``offset``.

    Parameters
    ----------
    x_train
        ``(n, p)`` predictors: numpy array (numbers or bools) or pandas
        DataFrame (numeric, bool and categorical columns: ``category``,
        or strings). A 1-D array is one predictor. Categorical columns
        become dummies, as R's ``bartModelMatrix`` does; missing values
        (``NaN``, ``None``, ``pd.NA``) are allowed and the model learns from
        them (see `bartz.encoding`).
    y_train
        ``(n,)`` outcome: numbers; 0/1 (or bool) for ``type='pbart'`` and
        ``'lbart'``.
    x_test
        Optional ``(n_test, p)`` predictors to predict at: the columns of
        ``x_train`` (matched by name for a DataFrame), encoded the same way.
    type
        ``'wbart'`` (continuous, default), ``'pbart'`` (binary probit) or
        ``'lbart'`` (binary logistic). R's ``lbart`` draws the logistic
        model with Holmes & Held's scale mixture of normals; bartz with
        Polya-Gamma augmentation (Polson, Scott & Windle 2013, see
        `bartz.polyagamma`): an exact Gibbs update too, of the same
        posterior.
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
        DART's data augmentation (Linero 2018), as R's ``augment``;
        ignored without ``sparse``, as R (but with ``moves='R'`` it also
        makes a birth draw its variable among the usable predictors, as
        R). It makes the update of the split
        probabilities exact where some predictors have no usable cut-point
        at a split node: bartz draws the latent rejected variable draws
        from their conditional law, where R adds deterministic counts
        truncated to integers (`bartz.sampler.conditionals.draw_dart`).
    rho
        Default: the number of predictors (after ``rm_const``; the two
        copies of a column with missing values count once).
    xinfo
        User cut-points: ``(p, K)`` matrix (NaN-padded) or list of arrays,
        one row per encoded column (after dummies, as R).
    usequants
        Cut-points at quantiles of the unique values instead of evenly
        spaced in the range.
    cont
        Treat every column as continuous: ``numcut`` evenly spaced
        cut-points even where a column has few distinct values (which
        otherwise get the midpoints between them). R's ``wbart``,
        ``pbart`` and ``lbart`` have it; R's ``gbart`` does not (its
        ``cont`` is always FALSE).
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
        Default ``(max y - min y) / 2`` (wbart), 3 (pbart) or 6 (lbart), as R.
    offset
        Default ``mean(y)`` (wbart), ``Phi^-1(mean(y))`` (pbart) or
        ``logit(mean(y))`` (lbart).
    w
        ``(n,)`` positive multipliers of the error sd (wbart only).
    ntree
        Number of trees; default 200 (wbart) or 50 (pbart, lbart).
    numcut
        Number of cut-points per predictor (int or one per encoded
        column). A column with missing values gets one more, which
        separates them.
    ndpost, nskip, keepevery
        Kept draws, burn-in iterations, iterations per kept draw (default
        1 for wbart, 10 for pbart and lbart). The chain runs ``nskip + ndpost *
        keepevery`` iterations.
    printevery
        Progress every this many iterations; None for silence.
    seed
        Integer seed, or a JAX random key.
    mc_cores
        Number of independent chains (R: parallel processes of
        ``mc.gbart``). On one CPU device each chain runs its own calls of
        one compiled program, on as many threads as there are cores; on a
        GPU they run side by side in one program (``vmap``); with several
        devices they are spread over them. ``ndpost`` is the total over
        chains: each chain keeps ``ceil(ndpost / mc_cores)`` draws, and the
        draws of ``yhat_train`` etc. come chain after chain as in R. bartz
        runs ``mc_cores`` chains whatever the number of cores (R's
        ``mc.gbart`` caps ``mc.cores`` at the cores it detects).
    maxdepth
        Levels of the tree arrays (bartz only), 2 to 8.
    min_points_per_leaf
        A split must leave at least this many points in each child (R: 5).
    moves
        The tree moves of the sampler and their probabilities (bartz only;
        see `bartz.sampler.moves`): None for the default ``{'grow': 0.25, 'prune':
        0.25, 'change': 0.4, 'swap': 0.1}`` (the mix of BayesTree and
        dbarts), a sequence of names (their default probabilities renormalised;
        ``('grow', 'prune')`` is the classical grow/prune sampler, R's), or a
        dict ``{name: probability}``. 'grow' and 'prune' are required. Only
        the moves of positive probability are compiled: ``('grow',
        'prune')`` compiles and runs faster. Deviation from R: R's BART has
        birth and death steps only, so the default (with CHANGE and SWAP)
        is not R's sampler; ``('grow', 'prune')`` has R's steps with the
        stated prior. ``'R'`` is R BART 2.9.9's sampler as it is, its two
        departures from the stated tree prior included (a birth's split
        variable drawn among all predictors unless `augment`, a draw with
        no usable cut-point refused; a birth from a two-leaf tree at half
        its ratio; `bartz.sampler.moves`): to reproduce R's results within
        Monte Carlo error, not the stated prior's.
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
    warmstart
        Number of grow-from-root sweeps (XBART, He, Yalov & Hahn 2019) that
        make each chain's starting state before the MCMC (bartz only; see
        `bartz.run.warmstart`). Each chain gets its own warm start from its own
        key, so the chains start apart and R-hat can see a transient. The
        MCMC that follows is unchanged and exact; ``nskip`` still counts
        its burn-in iterations. Default 0: every tree starts as a leaf of
        value 0, as R (see the user guide for the trade-off). Not
        supported with the data split over devices.

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
    # 1. check and convert the arguments, before anything touches JAX (each by name)
    outcome = priors.outcome_type(type)
    settings = _checks.check_settings(
        outcome,
        sparse=sparse,
        theta=theta,
        omega=omega,
        a=a,
        b=b,
        augment=augment,
        rho=rho,
        mc_cores=mc_cores,
        ndpost=ndpost,
        nskip=nskip,
        keepevery=keepevery,
        ntree=ntree,
        printevery=printevery,
        maxdepth=maxdepth,
        min_points_per_leaf=min_points_per_leaf,
        max_memory=max_memory,
        k=k,
        power=power,
        base=base,
        sigdf=sigdf,
        sigquant=sigquant,
        lambda_=lambda_,
        sigest=sigest,
        tau_num=tau_num,
        offset=offset,
        usequants=usequants,
        rm_const=rm_const,
        save_yhat_train=save_yhat_train,
        warmstart=warmstart,
        moves=moves,
    )
    mesh = _checks.make_mesh(devices, num_chain_devices, num_data_devices, settings.mc_cores)
    _checks.check_warmstart(settings.warmstart, mesh)
    _programs.watch_maps()  # before anything compiles: a long session stays below Linux's limit of mappings

    # 2. encode the columns, cut-points, binning
    _checks._check_bool('cont', cont)
    data, key = _encode(x_train, y_train, x_test, w, seed, (numcut, xinfo, bool(cont)), outcome, settings)

    # 3. R's priors
    prior = _r_priors(outcome, data, settings)

    # 4. run
    X, X_test, trace, burn_sigma2, info = _sample(key, data, prior, outcome, settings, mesh, _censored)

    # 5. package, and warn if the chains do not look converged; after the
    # sampling, a Ctrl-C returns the fit with what is done (`bartz.api.fit.package`)
    fit = package(
        outcome=outcome,
        settings=settings,
        prior=prior,
        encoding=data.enc,
        splits=data.splits,
        kept=data.kept,
        trace=trace,
        burn_sigma2=burn_sigma2,
        info=info,
        n=data.n,
        X=X,
        X_test=X_test,
        n_test=0 if data.x_test is None else len(data.x_test),
        mesh=mesh,
    )
    warn_convergence(fit, X)
    return fit


class _Data(NamedTuple):
    """The training data of a fit, checked and encoded (`_encode`)."""

    enc: encoding.Encoding  # columns of x_train to model columns
    x: np.ndarray  # (n, p_enc) float64 encoded x_train, NaN where missing
    y: np.ndarray  # (n,) float64 y_train
    w: np.ndarray | None  # (n,) float64 error sd multipliers, or None
    x_test: np.ndarray | None  # (n_test, p_model) model columns of x_test, or None
    splits: prepcovars.Splits  # cut-points of the kept model columns
    kept: np.ndarray  # (p_model,) bool: model columns kept by rm_const
    X: np.ndarray  # (p_kept, n) bins of the kept training columns

    @property
    def n(self) -> int:
        return self.x.shape[0]


def _encode(x_train, y_train, x_test, w, seed, cuts, outcome, settings):
    """Check and encode the data, find the cut-points (`cuts`: ``numcut``,
    ``xinfo``, ``cont``) and bin x_train; return the `_Data` and the key of
    `seed` (checked after the data, so that the errors come in the order of
    the arguments)."""
    enc = encoding.fit_encoding(x_train, 'x_train')
    x = enc.encode(x_train, 'x_train')
    n = x.shape[0]
    if n == 0:
        msg = 'x_train must have at least one row, got 0'
        raise ValueError(msg)
    y, w = priors.check_outcome(outcome, y_train, w, n)
    x_test_model = None if x_test is None else enc.transform(x_test, 'x_test')
    _checks.check_kept_memory(settings, n, 0 if x_test_model is None else len(x_test_model), x.shape[1])
    key = _checks.make_key(seed)
    splits, kept = _cut_points(enc, x, *cuts, settings)
    X = _bins(enc, x, splits, kept)
    return _Data(enc, x, y, w, x_test_model, splits, kept, X), key


def _r_priors(outcome, data: _Data, settings) -> priors.Priors:
    """R's default priors (`bartz.priors.r_priors`) on the kept columns."""
    kept_encoded = data.enc.model_to_encoded(data.kept.astype(np.int64)) > 0
    prior = priors.r_priors(
        outcome,
        data.y,
        data.x[:, kept_encoded],
        offset=settings.offset,
        tau_num=settings.tau_num,
        sigest=settings.sigest,
        lambda_=settings.lambda_,
        sigdf=settings.sigdf,
        sigquant=settings.sigquant,
        k=settings.k,
        ntree=settings.ntree,
    )
    _warn_float32_offset(outcome, prior)
    return prior


def _sample(key, data: _Data, prior, outcome, settings, mesh, censored=None):
    """Run the chains on the binned data (`bartz.api.sampling.run_chains`),
    with the predictions at x_test compiled meanwhile; return the padded
    bins, the bins of x_test (None without it) and what `run_chains` returns.
    `censored`: the right-censored points of a continuous y, from
    `bartz.api.abart` (R's gbart has no censoring; private)."""
    enc, kept = data.enc, data.kept
    log_s = enc.log_split_weights()[kept] if enc.augmented else None
    # DART: the two copies of a column with missing values are one predictor
    group = np.unique(enc.model_encoded[kept], return_inverse=True)[1].astype(np.int32) if enc.augmented else None
    X_test = None if data.x_test is None else packaging.bin_matrix(data.x_test, kept, data.splits)
    on_start = None
    if X_test is not None and mesh is None:
        on_start = functools.partial(sampling.compile_test_predictions, X_test, settings, outcome, prior)
    X, trace, burn_sigma2, info = sampling.run_chains(
        key, data.X, data.splits, log_s, prior, data.w, outcome, settings, mesh, group, on_start, censored
    )
    return X, X_test, trace, burn_sigma2, info


def mc_gbart(x_train, y_train, x_test=None, *, mc_cores=2, **kwargs) -> BARTFit:
    """`gbart` with several chains, as R's ``BART::mc.gbart`` (default 2 chains).

    Takes the same arguments as `gbart`; ``ndpost`` is the total over chains.
    bartz runs ``mc_cores`` chains whatever the number of cores: R's
    ``mc.gbart`` caps ``mc.cores`` at the cores it detects (so on a 2-core
    machine ``mc.cores=8`` gives R 2 chains of ``ndpost / 2`` draws, bartz 8
    chains of ``ndpost / 8``); each choice keeps ``ndpost`` draws in total.
    """
    return gbart(x_train, y_train, x_test, mc_cores=mc_cores, **kwargs)


def _cut_points(enc, x, numcut, xinfo, cont, settings):
    """Cut-points of the model columns, and the mask of those kept by rm_const."""
    try:
        splits = enc.cut_points(x, numcut=numcut, usequants=settings.usequants, xinfo=xinfo, cont=cont)
    except ValueError as e:
        raise ValueError(str(e)) from None
    collapsed = _float32_collapsed(enc, x) if xinfo is None else []
    advice = (
        f'; x_train column(s) {collapsed} vary only below float32 precision (bartz compares predictors in '
        "float32): subtract a constant, such as the column's minimum, before fitting"
        if collapsed
        else ''
    )
    if not np.any(np.asarray(splits.max_split) > 0):
        what = (
            'x_train has no columns'
            if enc.num_model == 0
            else 'no column of x_train has a usable cut-point (each is constant, or numcut or xinfo gives it none)'
        )
        msg = f'{what}: the trees have nothing to split on; pass at least one column that varies{advice}'
        raise ValueError(msg)
    if collapsed:
        warnings.warn(f'the trees cannot split on some columns{advice}', UserWarning, stacklevel=3)
    kept = np.ones(enc.num_model, bool)
    if settings.rm_const:
        kept = np.asarray(prepcovars.usable_predictors(splits.max_split))
        if not kept.all():
            names = enc.encoded_names
            dropped = [names[e] if names else int(e) for e in dict.fromkeys(enc.model_encoded[~kept])]
            if settings.printevery is not None:
                print(f'bartz: rm_const dropped {len(dropped)} predictor(s) with no usable cut-point: {dropped}')
            splits = prepcovars.drop_predictors(splits, kept)
    return splits, kept


def _warn_float32_offset(outcome, prior):
    """Warn when y_train is far from zero relative to its spread: the
    offset (predictions add it in float32) or y_train minus the offset (the
    sampler works on it, standardised, in float32) beyond
    `_OFFSET_WARN_RATIO` standard deviations, where float32's spacing
    exceeds about 1% of one."""
    if outcome.binary or prior.scale <= 0:
        return
    ratio = max(abs(prior.offset) / prior.scale, float(np.max(np.abs(prior.y_core), initial=0.0)))
    if ratio > _OFFSET_WARN_RATIO:
        spacing = float(np.spacing(np.float32(ratio)))
        msg = (
            f'y_train is far from zero relative to its spread: the offset ({prior.offset:.6g}) or y_train '
            f'minus it reaches {ratio:.3g} standard deviations of y_train, and bartz computes in float32, '
            f'which rounds there to {spacing:.2g} standard deviations; subtract a constant from y_train '
            '(and add it back to the predictions)'
        )
        warnings.warn(msg, UserWarning, stacklevel=3)


_OFFSET_WARN_RATIO = 1e5  # float32 spacing at offset = 1e5 sd is about 0.008 sd


def _float32_collapsed(enc, x):
    """Names (or indices) of the encoded columns of `x` that vary, but not
    once rounded to float32."""
    out = []
    for e in range(x.shape[1]):
        col = x[:, e]
        col = col[~np.isnan(col)]
        if col.size and col.min() < col.max() and np.float32(col.min()) == np.float32(col.max()):
            out.append(enc.encoded_names[e] if enc.encoded_names else e)
    return out


def _bins(enc, x, splits, kept):
    """The ``(p_kept, n)`` bins of the encoded training columns ``x``."""
    return prepcovars.bin_predictors_np(enc.expand(x)[:, kept], splits.splits)
