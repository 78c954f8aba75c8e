"""R's BART function family: `wbart`, `pbart`, `lbart`, their ``mc_``
versions, and R's `predict`.

R's ``BART`` package fits each outcome type with its own function, each
with its own defaults (R's ``pbart`` keeps every draw and has 50 trees,
``gbart(type='pbart')`` thins by 10; R's ``lbart`` has 200 trees). These
functions take R's arguments, with R's defaults, and run `bartz.gbart`: one
implementation, so a port of an R script that calls ``pbart(...)`` runs
the same chain R's would (up to the random numbers). Arguments R's function
lacks are refused with a `TypeError`, as R refuses them; bartz's own
options of `gbart` (``maxdepth``, ``moves``, ``warmstart``, ...) are
accepted as keywords.

What R stores and how often (``nkeeptrain``, ``nkeeptest``,
``nkeeptestmean``, ``nkeeptreedraws``) follows R's rule: with ``d = ndpost``
kept draws (every ``keepevery``-th iteration after the burn-in), a count
``k`` keeps the draws ``s, 2s, ..., d`` with ``s = d / k``; a count that does
not divide ``ndpost`` is set to ``ndpost`` with R's message; 0 keeps none
(the attribute is None). With several chains the rule applies to each
chain's draws, with ``ceil(k / chains)`` per chain. bartz keeps all ``ndpost``
draws while it runs and thins when the run is done: the counts shape the
result, not the memory of the run (``nkeeptrain=0`` does save the training
draws' memory).

`predict` is R's ``predict(object, newdata, mc.cores=1)``: for a
continuous fit the ``(ndpost, m)`` draws of f, for a binary one an object
with R's ``yhat_test``, ``prob_test`` and ``prob_test_mean``.
"""

from typing import NamedTuple

import jax
import numpy as np
from scipy import special

from bartz.api import familyio
from bartz.api import predict as predict_mod
from bartz.api.fit import BARTFit
from bartz.api.gbart import gbart
from bartz.api.treedraws import TreeDrawsFit
from bartz.forest import grove
from bartz.prep import checks
from bartz.prep import encoding as encoding_mod

__all__ = ['BinaryPrediction', 'lbart', 'mc_lbart', 'mc_pbart', 'mc_wbart', 'pbart', 'predict', 'wbart']

# bartz's options of `gbart` that R's functions lack, accepted by them as keywords
BARTZ_OPTIONS = frozenset({
    'maxdepth',
    'min_points_per_leaf',
    'moves',
    'save_yhat_train',
    'max_memory',
    'devices',
    'num_chain_devices',
    'num_data_devices',
    'warmstart',
})


def wbart(
    x_train,
    y_train,
    x_test=None,
    *,
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
    sigmaf=None,
    lambda_=None,
    fmean=None,
    w=None,
    ntree=200,
    numcut=100,
    ndpost=1000,
    nskip=100,
    keepevery=1,
    nkeeptrain=None,
    nkeeptest=None,
    nkeeptestmean=None,
    nkeeptreedraws=None,
    printevery=100,
    seed=99,
    **options,
) -> BARTFit:
    """BART for a continuous outcome, as R's ``BART::wbart``.

    R's arguments and defaults (``.`` becomes ``_``, ``lambda`` becomes
    ``lambda_``); see `bartz.gbart` for the ones they share. Those of
    ``wbart`` only:

    Parameters
    ----------
    cont
        Every column continuous: ``numcut`` evenly spaced cut-points.
    sigmaf
        The prior sd of f: the leaf prior sd is ``sigmaf / sqrt(ntree)``
        (default: ``(max y - min y) / (2 k sqrt(ntree))``, as `gbart`).
    fmean
        The constant the trees are added to (R: ``mean(y.train)``, the
        default); the fit's ``offset``.
    lambda_
        As `gbart`; ``lambda_=0``: sigma known, fixed at ``sigest`` (R's
        ``wbart`` returns NaN there).
    nkeeptrain, nkeeptest, nkeeptestmean, nkeeptreedraws
        How many draws of ``yhat_train``, ``yhat_test``, of those averaged
        in ``yhat_test_mean``, and of the trees (what `predict` uses,
        ``varcount`` and ``varprob``) are kept; default ``ndpost`` (see the
        module's docstring for R's rule).
    seed
        bartz's seed (R's ``wbart`` uses R's random number state).
    **options
        bartz's options of `gbart` (``maxdepth``, ``moves``, ...).

    Returns
    -------
    A `bartz.BARTFit`, with R's ``wbart`` layout of ``sigma``: the error sd
    of every iteration, ``nskip + ndpost * keepevery`` of them (``(...,
    chains)`` with several chains); ``sigma_`` holds those of the kept tree
    draws. ``yhat_train_mean`` is the mean of the kept draws (R's averages
    every iteration after the burn-in: the same within Monte Carlo error).
    """
    tau_num = None if sigmaf is None else k * checks._check_real('sigmaf', sigmaf, low=0)
    fit = _r_fit(
        'wbart', x_train, y_train, x_test, options, seed=seed, mc_cores=1,
        gbart_args=dict(
            sparse=sparse, theta=theta, omega=omega, a=a, b=b, augment=augment, rho=rho, xinfo=xinfo,
            usequants=usequants, cont=cont, rm_const=rm_const, sigest=sigest, sigdf=sigdf, sigquant=sigquant,
            k=k, power=power, base=base, lambda_=lambda_, tau_num=tau_num, offset=fmean, w=w, ntree=ntree,
            numcut=numcut, ndpost=ndpost, nskip=nskip, keepevery=keepevery, printevery=printevery,
        ),
        nkeep=dict(train=nkeeptrain, test=nkeeptest, testmean=nkeeptestmean, treedraws=nkeeptreedraws),
    )
    _every_sigma(fit)
    return fit


def pbart(
    x_train,
    y_train,
    x_test=None,
    *,
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
    k=2.0,
    power=2.0,
    base=0.95,
    binary_offset=None,
    ntree=50,
    numcut=100,
    ndpost=1000,
    nskip=100,
    keepevery=1,
    nkeeptrain=None,
    nkeeptest=None,
    nkeeptreedraws=None,
    printevery=100,
    seed=99,
    **options,
) -> BARTFit:
    """BART for a binary outcome with the probit link, as R's ``BART::pbart``.

    R's arguments and defaults: 50 trees, every draw kept
    (``keepevery=1``: `gbart` with ``type='pbart'`` thins by 10). R's
    ``binaryOffset`` is ``binary_offset`` (default ``qnorm(mean(y))``), the
    fit's ``offset``; the leaf prior sd is ``3 / (k sqrt(ntree))``. See
    `wbart` for ``cont``, the ``nkeep`` counts, ``seed`` and ``options``.
    """
    return _r_fit(
        'pbart', x_train, y_train, x_test, options, seed=seed, mc_cores=1,
        gbart_args=dict(
            sparse=sparse, theta=theta, omega=omega, a=a, b=b, augment=augment, rho=rho, xinfo=xinfo,
            usequants=usequants, cont=cont, rm_const=rm_const, k=k, power=power, base=base,
            offset=binary_offset, ntree=ntree, numcut=numcut, ndpost=ndpost, nskip=nskip, keepevery=keepevery,
            printevery=printevery,
        ),
        nkeep=dict(train=nkeeptrain, test=nkeeptest, treedraws=nkeeptreedraws),
    )


def lbart(
    x_train,
    y_train,
    x_test=None,
    *,
    sparse=False,
    a=0.5,
    b=1,
    augment=False,
    rho=None,
    xinfo=None,
    usequants=False,
    cont=False,
    rm_const=True,
    tau_interval=0.95,
    k=2.0,
    power=2.0,
    base=0.95,
    binary_offset=None,
    ntree=200,
    numcut=100,
    ndpost=1000,
    nskip=100,
    keepevery=1,
    nkeeptrain=None,
    nkeeptest=None,
    nkeeptreedraws=None,
    printevery=100,
    seed=99,
    **options,
) -> BARTFit:
    """BART for a binary outcome with the logistic link, as R's ``BART::lbart``.

    R's arguments and defaults: 200 trees, every draw kept, no ``theta`` or
    ``omega`` (DART's theta is random). The leaf prior sd is ``qlogis(1 -
    t / 2) / (k sqrt(ntree))`` with ``t = 1 - tau_interval`` (``tau_interval``
    above 0.5 is read as its complement, as R). The latent update is
    bartz's Polya-Gamma one (see `bartz.gbart`'s ``type``). See `pbart` for
    ``binary_offset`` and `wbart` for the rest.
    """
    interval = checks._check_real('tau_interval', tau_interval, low=0, high=1)
    if interval > 0.5:
        interval = 1 - interval
    return _r_fit(
        'lbart', x_train, y_train, x_test, options, seed=seed, mc_cores=1,
        gbart_args=dict(
            sparse=sparse, a=a, b=b, augment=augment, rho=rho, xinfo=xinfo, usequants=usequants, cont=cont,
            rm_const=rm_const, k=k, power=power, base=base, tau_num=float(special.logit(1 - interval / 2)),
            offset=binary_offset, ntree=ntree, numcut=numcut, ndpost=ndpost, nskip=nskip, keepevery=keepevery,
            printevery=printevery,
        ),
        nkeep=dict(train=nkeeptrain, test=nkeeptest, treedraws=nkeeptreedraws),
    )


def mc_wbart(x_train, y_train, x_test=None, *, mc_cores=2, seed=99, **kwargs) -> BARTFit:
    """`wbart` with ``mc_cores`` chains, as R's ``BART::mc.wbart``.

    ``ndpost`` (and each ``nkeep`` count) is the total over the chains.
    bartz runs ``mc_cores`` chains whatever the number of cores: R's
    ``mc.wbart`` caps ``mc.cores`` at the cores it detects (so on a
    2-core machine ``mc.cores=8`` gives R 2 chains of ``ndpost / 2``
    draws, bartz 8 chains of ``ndpost / 8``).
    """
    return _mc(wbart, x_train, y_train, x_test, mc_cores, seed, kwargs)


def mc_pbart(x_train, y_train, x_test=None, *, mc_cores=2, seed=99, **kwargs) -> BARTFit:
    """`pbart` with ``mc_cores`` chains, as R's ``BART::mc.pbart`` (see `mc_wbart`)."""
    return _mc(pbart, x_train, y_train, x_test, mc_cores, seed, kwargs)


def mc_lbart(x_train, y_train, x_test=None, *, mc_cores=2, seed=99, **kwargs) -> BARTFit:
    """`lbart` with ``mc_cores`` chains, as R's ``BART::mc.lbart`` (see `mc_wbart`)."""
    return _mc(lbart, x_train, y_train, x_test, mc_cores, seed, kwargs)


def _mc(function, x_train, y_train, x_test, mc_cores, seed, kwargs):
    """`function` with its chains: R's ``mc.`` functions take the same arguments."""
    if 'mc_cores' in kwargs:  # (a keyword of this function already)
        raise TypeError("mc_cores given twice")
    return function(x_train, y_train, x_test, seed=seed, **kwargs, _mc_cores=mc_cores)


def _r_fit(type_, x_train, y_train, x_test, options, *, seed, mc_cores, gbart_args, nkeep) -> BARTFit:
    """`gbart` with R's function's arguments, then R's thinning of what is kept."""
    mc_cores = options.pop('_mc_cores', mc_cores)
    unknown = sorted(set(options) - BARTZ_OPTIONS)
    if unknown:
        msg = (
            f'{type_}() got unexpected keyword argument(s) {unknown}: R\'s {type_} does not have them'
            f' (bartz options accepted: {sorted(BARTZ_OPTIONS)})'
        )
        raise TypeError(msg)
    counts = {what: _check_count(f'nkeep{what}', value) for what, value in nkeep.items()}
    if counts.get('train') == 0:
        options = {**options, 'save_yhat_train': False}
    fit = gbart(x_train, y_train, x_test, type=type_, seed=seed, mc_cores=mc_cores, **gbart_args, **options)
    _thin(fit, counts, gbart_args['ndpost'], gbart_args.get('printevery'))
    return fit


def _check_count(name, value):
    return None if value is None else checks._check_int(name, value, 0)


def _kept_rows(what, count, ndpost, chains, per_chain, printevery):
    """Rows (chain after chain) R's rule keeps of `per_chain` draws per
    chain for a count `count` over `ndpost` draws (None: all)."""
    if count is None:
        return None
    count = -(-count // chains)
    if count and per_chain % count:
        if printevery is not None:
            print(f'*****nkeep{what} set to ndpost')
        return None
    if count == 0:
        return np.zeros(0, np.int64)
    step = per_chain // count
    one = np.arange(step - 1, per_chain, step)
    return (one[None, :] + per_chain * np.arange(chains)[:, None]).reshape(-1)


def _thin(fit: BARTFit, counts: dict, ndpost: int, printevery) -> None:
    """Keep the rows of each kind of draw that R's counts keep."""
    chains = fit.chains
    per_chain = fit.ndpost // chains
    rows = {what: _kept_rows(what, c, ndpost, chains, per_chain, printevery) for what, c in counts.items()}

    def take(name, kept):
        value = getattr(fit, name, None)
        if kept is None or value is None:
            return
        setattr(fit, name, None if kept.size == 0 else _take_rows(value, kept))

    for name in ('yhat_train', 'prob_train'):
        take(name, rows.get('train'))
    if getattr(fit, 'prob_train', None) is not None and rows.get('train') is not None:  # R's mean of the kept draws
        fit.prob_train_mean = np.asarray(fit.prob_train).mean(axis=0)
    testmean = rows.get('testmean')
    if testmean is not None and getattr(fit, 'yhat_test', None) is not None:
        fit.yhat_test_mean = None if testmean.size == 0 else np.asarray(fit.yhat_test)[testmean].mean(axis=0)
    for name in ('yhat_test', 'prob_test'):
        take(name, rows.get('test'))
    if getattr(fit, 'prob_test', None) is not None and rows.get('test') is not None:
        fit.prob_test_mean = np.asarray(fit.prob_test).mean(axis=0)
    trees = rows.get('treedraws')
    if trees is not None:
        for name in ('varcount', 'varprob', 'sigma_'):
            value = getattr(fit, name, None)
            if value is not None:  # (none kept: 0 rows, as the trees)
                setattr(fit, name, _take_rows(value, trees))
        fit._trace = jax.tree.map(lambda a: a[trees], fit._trace)  # noqa: SLF001
    kept = {what: int(r.size) for what, r in rows.items() if r is not None and what != 'testmean'}
    fit.nkeep = kept or None


def _take_rows(value, rows):
    """Rows `rows` of an array or DataFrame."""
    return value.iloc[rows] if hasattr(value, 'iloc') else np.asarray(value)[rows]


def _every_sigma(fit: BARTFit) -> None:
    """R's ``wbart`` layout of ``sigma``: every iteration's error sd."""
    info = fit.run_info
    if info is None or info.sigma2 is None:
        return
    sigma = fit._scale * np.sqrt(np.asarray(info.sigma2, np.float64))  # noqa: SLF001
    fit.sigma = sigma.reshape(sigma.shape[0], -1)[:, 0] if fit.chains == 1 else sigma.reshape(sigma.shape[0], -1)


# ---------------------------------------------------------------- R's predict


class BinaryPrediction(NamedTuple):
    """What R's ``predict.pbart`` / ``predict.lbart`` return (R's names, ``.`` as ``_``)."""

    yhat_test: np.ndarray  # (ndpost, m) draws of f plus the offset (probit or logit scale)
    prob_test: np.ndarray  # (ndpost, m) draws of P(y = 1 | x)
    prob_test_mean: np.ndarray  # (m,) their mean
    binary_offset: float  # R's binaryOffset: the fit's offset


def predict(fit, newdata, mc_cores=1, *, newdata2=None, max_memory=grove.DEFAULT_MAX_MEMORY):
    """R's ``predict(object, newdata, mc.cores=1)`` for a fit of `gbart`,
    `wbart`, `pbart`, `lbart` or their ``mc_`` versions, and of R's other
    model families.

    Parameters
    ----------
    fit
        A `bartz.BARTFit`, trees read from R (`bartz.from_treedraws`), or
        the fit of another of R's model families: any object whose class
        has an ``r_predict(newdata, *, max_memory)`` method, which returns
        what R's predict method of that family returns.
    newdata
        ``(m, p)`` rows with the columns of ``x_train`` (an array or a
        DataFrame, as `bartz.BARTFit.predict`; R's ``newdata`` is the
        model matrix, which is ``x_train``'s columns for numeric data).
    mc_cores
        Accepted for R's scripts and checked (a positive integer); bartz's
        prediction already runs on every core of the device (XLA's
        threads), so it changes nothing. For a competing risks fit, an
        array here is R's positional ``newdata2``.
    newdata2
        Competing risks fits only (R's ``predict.criskbart``): the rows of
        the second model, if they differ from ``newdata``'s.
    max_memory
        As `bartz.BARTFit.predict`.

    Returns
    -------
    Continuous fits: the ``(ndpost, m)`` float32 draws of f (R's
    ``predict.wbart``). Binary fits: a `BinaryPrediction` with
    ``yhat_test`` (the latent draws, offset included), ``prob_test`` and
    ``prob_test_mean`` (R's ``predict.pbart`` and ``predict.lbart``).
    """
    if isinstance(fit, TreeDrawsFit):
        checks._check_int('mc_cores', mc_cores, 1)
        return _predict_treedraws(fit, newdata, max_memory)
    two_models = 'fit2' in familyio.slots(type(fit))  # crisk_bart, crisk2_bart
    if two_models and newdata2 is None and not isinstance(mc_cores, int | np.integer):
        newdata2, mc_cores = mc_cores, 1  # R's predict(post, newdata, newdata2)
    if newdata2 is not None and not two_models:
        msg = f'newdata2 is for competing risks fits (crisk_bart, crisk2_bart), not a {type(fit).__name__}'
        raise TypeError(msg)
    if hasattr(type(fit), 'r_predict'):  # R's other model families (survival, multinomial, ...)
        checks._check_int('mc_cores', mc_cores, 1)
        if two_models:
            return fit.r_predict(newdata, newdata2, max_memory=max_memory)
        return fit.r_predict(newdata, max_memory=max_memory)
    if not isinstance(fit, BARTFit):
        msg = (
            'fit must be a bartz.BARTFit (from gbart, wbart, pbart, lbart, ...) or the TreeDrawsFit of '
            f'bartz.from_treedraws, got {type(fit).__name__}'
        )
        raise TypeError(msg)
    checks._check_int('mc_cores', mc_cores, 1)
    if fit._trace.leaf_tree.shape[0] == 0:  # noqa: SLF001
        msg = 'this fit kept no tree draws (nkeeptreedraws=0): it cannot predict'
        raise ValueError(msg)
    if fit.type == 'wbart':
        return fit.predict(newdata, max_memory=max_memory)
    max_memory = checks._check_int('max_memory', max_memory, 1)
    model, binning = predict_mod.from_fit(fit)
    model = model._replace(link='affine', link_params=(fit.offset, 1.0))  # the latent scale
    rows = encoding_mod.row_as_frame(newdata, binning.encoding)
    latent = predict_mod.predict_rows(rows, model, binning, name='newdata', kind='draws', max_memory=max_memory)
    return _binary_prediction(fit.type, latent, fit.offset)


def _binary_prediction(type_, latent, offset) -> BinaryPrediction:
    link = special.ndtr if type_ == 'pbart' else special.expit
    prob = link(np.asarray(latent, np.float64))
    return BinaryPrediction(latent, prob, prob.mean(axis=0), float(offset))


def _predict_treedraws(fit: TreeDrawsFit, newdata, max_memory):
    """`predict` for trees read from R: the latent draws are those of the
    same trees read as a continuous fit with the same offset."""
    if fit.type == 'wbart':
        return fit.predict(newdata, max_memory=max_memory)
    latent_fit = TreeDrawsFit('wbart', fit.offset, fit.cutpoints, fit._var, fit._split, fit._theta)  # noqa: SLF001
    return _binary_prediction(fit.type, latent_fit.predict(newdata, max_memory=max_memory), fit.offset)
