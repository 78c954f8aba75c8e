"""R's multinomial BART: `mbart` and `mc_mbart` (a sequence of binary
models), `mbart2` and `mc_mbart2` (one binary model per category), and R's
``predict.mbart`` / ``predict.mbart2``.

For an outcome with categories ``1, ..., K`` (R's ``sort(unique(y))``),
R's ``BART::mbart`` fits ``K - 1`` binary BART models one after the other,
each on the rows still at risk:

.. math::

    p_h(x) = P(y = h \\mid y \\ge h, x) = F(f_h(x)), \\qquad h = 1, \\dots, K - 1,

with ``F`` the normal (``type='pbart'``) or logistic (``'lbart'``) CDF, the
model of step ``h`` fitted to the rows with ``y >= h`` and the outcome
``y == h``. The category probabilities are the products

.. math::

    P(y = h \\mid x) = p_h(x) \\prod_{j < h} (1 - p_j(x)), \\qquad
    P(y = K \\mid x) = \\prod_{j < K} (1 - p_j(x)),

draw by draw, so each draw's ``K`` probabilities sum to 1. The likelihood
factorises over the steps and their priors are independent, so the ``K -
1`` posteriors are independent and each step is an ordinary binary fit
(`bartz.gbart`).

R's ``mbart2`` fits instead one binary model per category, ``y == h``
against the rest on all rows (logistic by default), and normalises the
latent draws: ``P(y = h | x) = exp(f_h(x)) / sum_j exp(f_j(x))`` (with the
offsets in the ``f_j``), R's multinomial logit; the training points get
the same (``yhat_train``, ``prob_train``, ``prob_train_mean``).

Layout, as R: ``prob_test`` is ``(ndpost, m * K)`` with the categories
fastest (column ``i * K + h`` is point ``i``, category ``h``, counting from
0); ``yhat_test`` is the latent ``f_h + offset_h`` in the same layout
(`mbart`: NaN in the columns of category ``K``, R's NA).

Deviations from R, on purpose:

- The cut-points come, as R's, from the whole of ``x_train`` (R's
  ``bartModelMatrix`` once, then ``xinfo`` to every step); the columns are
  encoded once (dummies of categorical columns, as R's model matrix) and
  the steps fit the encoded columns.
- R's steps (both functions) compare ``y`` with the step's number (``y == h``), which is
  right only for the codes ``1, ..., K``; bartz compares with the ``h``-th
  category, so any codes, strings or a categorical ``y`` work (the
  categories sorted as R's factor levels).
- Each step has its own random stream, ``seed`` folded with the step's
  number (R's steps continue one stream).
- R's `predict` recomputes the probabilities from the trees; bartz does
  the same, so ``predict(fit, x_test)`` gives the fit's own ``prob_test``
  up to float32 rounding.
"""

import numbers
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import special

from bartz.api import familyio, rfamily
from bartz.api.fit import BARTFit
from bartz.api.gbart import gbart
from bartz.forest import grove
from bartz.kernels import rng
from bartz.prep import checks
from bartz.prep import cutpoints as prepcovars
from bartz.prep import encoding as encoding_mod

__all__ = ['MBARTFit', 'MBARTPrediction', 'mbart', 'mbart2', 'mc_mbart', 'mc_mbart2']


class MBARTPrediction(NamedTuple):
    """What R's ``predict.mbart`` and ``predict.mbart2`` return (R's names, ``.`` as ``_``)."""

    yhat_test: np.ndarray  # (ndpost, m * K) latent f_h + offset_h, categories fastest; mbart: NaN for category K
    prob_test: np.ndarray  # (ndpost, m * K) draws of P(y = h | x), categories fastest
    prob_test_mean: np.ndarray  # (m * K,) their mean
    K: int  # number of categories
    offset: np.ndarray  # (K - 1,) or (K,) the offsets of the binary steps


class MBARTFit(familyio.Saveable):
    """The result of `mbart`, `mbart2` and their ``mc_`` versions, with R's
    attribute names (``model`` says which: R's class).

    Attributes
    ----------
    K, cats
        The number of categories and the categories (sorted as R).
    yhat_test, prob_test, prob_test_mean
        At ``x_test`` (None without it): ``(ndpost, m * K)`` draws,
        categories fastest (see `bartz.api.multinomial`), and the mean.
    yhat_train, prob_train, prob_train_mean
        `mbart2` only (None for `mbart`, as R): the same at ``x_train``.
    varcount, varprob
        Lists of the steps' ``(ndpost, p)`` draws (``K - 1`` steps for
        `mbart`, ``K`` for `mbart2`).
    varcount_mean, varprob_mean
        ``(steps, p)``: their means, one row per step.
    offset
        ``(steps,)``: the offset of each step.
    fits
        The binary fits (`bartz.BARTFit`), step after step.
    """

    __slots__ = {
        'model': "R's class: 'mbart' (binary steps in sequence) or 'mbart2' (one binary fit per category)",
        'type': "link of the binary steps: 'pbart' (probit) or 'lbart' (logistic)",
        'K': 'number of categories',
        'cats': '(K,) the categories, sorted as R',
        'ndpost': 'number of kept draws (over all chains)',
        'ntree': 'number of trees of each step',
        'chains': 'number of chains of each step (mc_cores)',
        'offset': '(steps,) offset of each binary step',
        'yhat_train': 'mbart2: (ndpost, n * K) latent draws at x_train, categories fastest; None for mbart',
        'prob_train': 'mbart2: (ndpost, n * K) draws of P(y = h | x) at x_train; None for mbart',
        'prob_train_mean': 'mbart2: (n * K,) their mean; None for mbart',
        'yhat_test': '(ndpost, m * K) latent draws at x_test, categories fastest (mbart: NaN for category K); or None',
        'prob_test': '(ndpost, m * K) draws of P(y = h | x) at x_test, categories fastest; or None',
        'prob_test_mean': '(m * K,) posterior mean of P(y = h | x) at x_test; or None',
        'varcount': "list of the steps' (ndpost, p) split counts of each encoded column",
        'varcount_mean': '(steps, p) mean split counts, one row per step',
        'varprob': "list of the steps' (ndpost, p) split probabilities",
        'varprob_mean': '(steps, p) mean split probabilities, one row per step',
        'rm_const': 'indices of the encoded columns kept by rm_const',
        'fits': 'the binary fits (bartz.BARTFit), step after step',
        '_encoding': 'bartz.encoding.Encoding of x_train: its columns to the encoded columns the steps fit',
    }

    def __init__(self, **attributes):
        for name, value in attributes.items():
            setattr(self, name, value)

    def __repr__(self):
        return f'MBARTFit(model={self.model!r}, type={self.type!r}, K={self.K}, ntree={self.ntree}, ndpost={self.ndpost})'

    def r_predict(self, newdata, *, max_memory=grove.DEFAULT_MAX_MEMORY) -> MBARTPrediction:
        """R's ``predict.mbart`` (``predict.mbart2``): the draws at the rows of ``newdata``.

        Parameters
        ----------
        newdata
            ``(m, p)`` rows with the columns of ``x_train`` (array or
            DataFrame, as ``x_train``).
        max_memory
            As `bartz.BARTFit.predict`.

        Returns
        -------
        MBARTPrediction
        """
        x_new = _encoded(self._encoding, newdata, 'newdata')
        steps = [rfamily.predict(fit, x_new, max_memory=max_memory) for fit in self.fits]
        return _prediction(self.model, [s.yhat_test for s in steps], [s.prob_test for s in steps], self.offset)

    def predict(self, x_new, *, max_memory=grove.DEFAULT_MAX_MEMORY) -> np.ndarray:
        """The ``(ndpost, m * K)`` draws of ``P(y = h | x)`` at the rows of
        ``x_new``, categories fastest (``r_predict``'s ``prob_test``)."""
        return self.r_predict(x_new, max_memory=max_memory).prob_test


def mbart(
    x_train,
    y_train,
    x_test=None,
    *,
    type='pbart',  # noqa: A002
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
    k=2.0,
    power=2.0,
    base=0.95,
    tau_num=None,
    offset=None,
    ntree=50,
    numcut=100,
    ndpost=1000,
    nskip=100,
    keepevery=10,
    printevery=100,
    seed=99,
    **options,
) -> MBARTFit:
    """Multinomial BART as R's ``BART::mbart``: ``K - 1`` binary fits in
    sequence, ``P(y = h | y >= h, x)`` each (see `bartz.api.multinomial`).

    R's arguments and defaults (``.`` becomes ``_``); see `bartz.gbart` for
    their meaning. Those of ``mbart``:

    Parameters
    ----------
    x_train
        ``(n, p)`` predictors, as `bartz.gbart`.
    y_train
        ``(n,)`` categories: numbers, strings or a categorical (pandas);
        at least two distinct values, none missing. The categories are
        sorted as R's ``sort(unique(y))`` (a pandas categorical: in the
        order of its categories).
    x_test
        Optional ``(m, p)`` predictors where ``prob_test`` is computed.
    type
        ``'pbart'`` (probit, default) or ``'lbart'`` (logistic) for every step.
    tau_num
        Leaf prior numerator, default 3 (pbart) or 6 (lbart), as R.
    offset
        None, or ``K`` numbers: the offset of step ``h`` is ``offset[h]``
        (R's rule: length K, the last unused); default ``F^-1`` of the
        step's mean outcome.
    ntree, keepevery
        50 trees and every 10th iteration kept, as R's ``mbart``.
    seed
        Integer seed (or JAX key); step ``h`` runs on it folded with ``h``.
    **options
        bartz's options of `gbart` (``maxdepth``, ``moves``, ...);
        ``save_yhat_train`` defaults to False (R's ``mbart`` keeps no
        training draws).

    Returns
    -------
    MBARTFit
    """
    gbart_args = dict(
        sparse=sparse, theta=theta, omega=omega, a=a, b=b, augment=augment, rho=rho, usequants=usequants,
        rm_const=rm_const, k=k, power=power, base=base, tau_num=tau_num, ntree=ntree, ndpost=ndpost,
        nskip=nskip, keepevery=keepevery, printevery=printevery,
    )  # fmt: skip
    return _fit('mbart', x_train, y_train, x_test, type, offset, (numcut, xinfo), seed, gbart_args, options)


def mbart2(
    x_train,
    y_train,
    x_test=None,
    *,
    type='lbart',  # noqa: A002
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
    k=2.0,
    power=2.0,
    base=0.95,
    tau_num=None,
    offset=None,
    ntree=50,
    numcut=100,
    ndpost=1000,
    nskip=100,
    keepevery=10,
    printevery=100,
    seed=99,
    **options,
) -> MBARTFit:
    """Multinomial BART as R's ``BART::mbart2``: one binary fit per category
    (``y == h`` against the rest, on all rows), the probabilities
    ``exp(f_h) / sum_j exp(f_j)`` of the latent draws (see
    `bartz.api.multinomial`).

    R's arguments and defaults, as `mbart` but ``type='lbart'`` (logistic
    steps, ``tau_num`` 6); ``offset`` is None or ``K`` numbers, one per
    category. The result has R's ``yhat_train``, ``prob_train`` and
    ``prob_train_mean`` too (``save_yhat_train=False`` leaves them None).

    Returns
    -------
    MBARTFit
    """
    gbart_args = dict(
        sparse=sparse, theta=theta, omega=omega, a=a, b=b, augment=augment, rho=rho, usequants=usequants,
        rm_const=rm_const, k=k, power=power, base=base, tau_num=tau_num, ntree=ntree, ndpost=ndpost,
        nskip=nskip, keepevery=keepevery, printevery=printevery,
    )  # fmt: skip
    return _fit('mbart2', x_train, y_train, x_test, type, offset, (numcut, xinfo), seed, gbart_args, options)


def mc_mbart2(x_train, y_train, x_test=None, *, mc_cores=2, seed=99, **kwargs) -> MBARTFit:
    """`mbart2` with ``mc_cores`` chains in each step, as R's
    ``BART::mc.mbart2`` (see `mc_mbart`)."""
    if 'mc_cores' in kwargs:
        raise TypeError('mc_cores given twice')
    return mbart2(x_train, y_train, x_test, seed=seed, **kwargs, _mc_cores=mc_cores)


def mc_mbart(x_train, y_train, x_test=None, *, mc_cores=2, seed=99, **kwargs) -> MBARTFit:
    """`mbart` with ``mc_cores`` chains in each step, as R's ``BART::mc.mbart``.

    ``ndpost`` is the total over the chains (each keeps ``ceil(ndpost /
    mc_cores)``), as R; bartz runs ``mc_cores`` chains whatever the number
    of cores (R caps ``mc.cores`` at the cores it detects). ``mc_cores=1``
    is `mbart`.
    """
    if 'mc_cores' in kwargs:
        raise TypeError('mc_cores given twice')
    return mbart(x_train, y_train, x_test, seed=seed, **kwargs, _mc_cores=mc_cores)


def _fit(model, x_train, y_train, x_test, type_, offset, cuts, seed, gbart_args, options) -> MBARTFit:
    """Check, encode once, fit the steps, package (R's ``mbart`` or ``mbart2``)."""
    if type_ not in ('pbart', 'lbart'):
        msg = f"type must be 'pbart' or 'lbart' (R's {model} has no continuous steps), got {type_!r}"
        raise ValueError(msg)
    mc_cores = options.pop('_mc_cores', 1)
    unknown = sorted(set(options) - rfamily.BARTZ_OPTIONS)
    if unknown:
        msg = f"{model}() got unexpected keyword argument(s) {unknown}: R's {model} does not have them"
        raise TypeError(msg)
    options.setdefault('save_yhat_train', model == 'mbart2')  # R's mbart keeps no training draws
    codes, cats = _categories(y_train)
    offsets = _check_offset(offset, cats.size)
    key = checks.make_key(seed)
    enc = encoding_mod.fit_encoding(x_train, 'x_train')
    x = enc.encode(x_train, 'x_train')
    if len(x) != codes.size:
        msg = f'y_train must have one category per row of x_train ({len(x)} rows), got {codes.size}'
        raise ValueError(msg)
    xinfo = _whole_data_xinfo(x, *cuts, gbart_args['usequants'])
    x_test = None if x_test is None else _encoded(enc, x_test, 'x_test')
    fits = []
    for h in range(cats.size - 1 if model == 'mbart' else cats.size):
        at_risk = codes >= h if model == 'mbart' else np.ones(codes.size, bool)
        fits.append(gbart(
            _as_columns(enc, x[at_risk]), (codes[at_risk] == h).astype(np.int32), x_test, type=type_,
            offset=offsets[h], xinfo=xinfo, numcut=cuts[0], seed=rng.fold_in_on_host(key, h),
            mc_cores=mc_cores, **gbart_args, **options,
        ))  # fmt: skip
    return _package(model, fits, type_, cats, enc)


def _categories(y_train) -> tuple[np.ndarray, np.ndarray]:
    """The 0-based category of each row and the sorted categories."""
    if isinstance(y_train, pd.DataFrame) or np.ndim(y_train) != 1:
        msg = f'y_train must be one-dimensional (one category per row), got shape {np.shape(y_train)}'
        raise ValueError(msg)
    series = pd.Series(y_train) if not isinstance(y_train, pd.Series) else y_train
    if series.isna().any():
        msg = f'y_train must have no missing values, got {int(series.isna().sum())}'
        raise ValueError(msg)
    if isinstance(series.dtype, pd.CategoricalDtype):
        present = set(series)
        cats = np.array([c for c in series.cat.categories if c in present], dtype=object)
        values = series.astype(object).to_numpy()
    else:
        values = series.to_numpy()
        try:
            cats = np.unique(values)
        except TypeError:
            msg = 'y_train must have values of one sortable kind (numbers or strings), got mixed types'
            raise TypeError(msg) from None
    if cats.size < 2:
        msg = f'y_train must have at least 2 categories, got {cats.size}'
        raise ValueError(msg)
    codes = np.array([{c: i for i, c in enumerate(cats)}[v] for v in values], np.int64)
    return codes, cats


def _check_offset(offset, num_categories) -> list:
    """R's rule: no offset, or one per category (the last unused)."""
    if offset is None:
        return [None] * num_categories
    values = np.atleast_1d(np.asarray(offset, dtype=object))
    if values.ndim != 1 or values.size != num_categories:
        msg = f'offset must be None or {num_categories} numbers (one per category), got {offset!r}'
        raise ValueError(msg)
    if not all(isinstance(v, numbers.Real) and np.isfinite(v) for v in values):
        msg = f'offset must be finite numbers, got {offset!r}'
        raise ValueError(msg)
    return [float(v) for v in values]


def _whole_data_xinfo(x, numcut, xinfo, usequants) -> list[np.ndarray]:
    """The cut-points of each encoded column, from the whole of ``x_train``
    (R computes them once and passes them to every step)."""
    if xinfo is not None:
        return xinfo
    missing = np.isnan(x)
    if missing.any():  # a missing value replaced by an observed one leaves the distinct values unchanged
        x = np.where(missing, np.nanmin(np.where(missing, np.inf, x), axis=0), x)
    splits = prepcovars.compute_splits(x, numcut=numcut, usequants=usequants)
    return [splits.splits[j, : splits.max_split[j]] for j in range(x.shape[1])]


def _encoded(enc, x, name):
    """``x`` as the encoded columns the steps fit (named if ``x_train`` was)."""
    return _as_columns(enc, enc.encode(x, name))


def _as_columns(enc, x):
    return x if enc.encoded_names is None else pd.DataFrame(x, columns=enc.encoded_names)


def _prediction(model, latent: list, probs: list, offset) -> MBARTPrediction:
    """R's layout of the steps' draws, categories fastest: `mbart`'s
    products of the conditional probabilities, or `mbart2`'s normalised
    exponentials of the latent draws."""
    yhat = np.stack([np.asarray(y, np.float64) for y in latent], axis=-1)  # (ndpost, m, steps)
    if model == 'mbart':
        prob = _sequential_probabilities(np.stack([np.asarray(p, np.float64) for p in probs], axis=-1))
        yhat = np.concatenate([yhat, np.full((*yhat.shape[:-1], 1), np.nan)], axis=-1)
    else:
        prob = special.softmax(yhat, axis=-1)  # exp(f_h) / sum_j exp(f_j)
    ndpost, m, num_categories = prob.shape
    prob = prob.reshape(ndpost, m * num_categories)
    return MBARTPrediction(yhat.reshape(prob.shape), prob, prob.mean(axis=0), num_categories, np.asarray(offset))


def _sequential_probabilities(cond):
    """``P(y = h) = p_h prod_{j < h} (1 - p_j)`` and ``P(y = K) = prod_{j < K}
    (1 - p_j)`` from the ``(..., K - 1)`` conditional ``p_h = P(y = h | y >= h)``."""
    still = np.cumprod(1 - cond, axis=-1)  # P(y > h | x)
    return np.concatenate([cond[..., :1], still[..., :-1] * cond[..., 1:], still[..., -1:]], axis=-1)


def _package(model, fits: list[BARTFit], type_, cats, enc) -> MBARTFit:
    offset = np.array([f.offset for f in fits], np.float64)
    test = train = None
    if fits[0].prob_test is not None:
        test = _prediction(model, [f.yhat_test for f in fits], [f.prob_test for f in fits], offset)
    if model == 'mbart2' and fits[0].yhat_train is not None:
        train = _prediction(model, [f.yhat_train for f in fits], [f.prob_train for f in fits], offset)
    return MBARTFit(
        model=model, type=type_, K=cats.size, cats=cats, ndpost=fits[0].ndpost, ntree=fits[0].ntree,
        chains=fits[0].chains, offset=offset, yhat_train=None if train is None else train.yhat_test,
        prob_train=None if train is None else train.prob_test,
        prob_train_mean=None if train is None else train.prob_test_mean,
        yhat_test=None if test is None else test.yhat_test,
        prob_test=None if test is None else test.prob_test,
        prob_test_mean=None if test is None else test.prob_test_mean,
        varcount=[f.varcount for f in fits], varprob=[f.varprob for f in fits],
        varcount_mean=np.stack([np.asarray(f.varcount_mean) for f in fits]),
        varprob_mean=np.stack([np.asarray(f.varprob_mean) for f in fits]),
        rm_const=fits[0].rm_const, fits=fits, _encoding=enc,
    )  # fmt: skip
