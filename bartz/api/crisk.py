"""R's competing-risks BART: `crisk_pre_bart`, `crisk_bart`, `crisk2_bart`,
their ``mc_`` versions and R's ``predict`` for them.

The model (Sparapani, Logan, Maiers, Laud & McCulloch 2020) is discrete-time
survival with two causes, on the person-period rows of
`bartz.api.survival_prep` (grid ``t_1 < ... < t_K``). Two binary BARTs
(probit or logistic, ``F``) give, at each grid time, the cause-specific
discrete hazards ``h_1(t_j, x)``, ``h_2(t_j, x)`` (the probability of an
event of that cause at ``t_j``, given no event before ``t_j``):

- `crisk_bart`: ``p_1 = F(f_1)``, cause 1 vs not, on every row at risk, and
  ``p_2 = F(f_2)``, cause 2 vs not, on the rows with no cause-1 event
  (R's ``cond``); ``h_1 = p_1``, ``h_2 = (1 - p_1) p_2``.
- `crisk2_bart`: ``p = F(f)``, any event vs none, on every row at risk, and
  ``p_2 = F(f_2)``, cause 1 vs cause 2, on the rows with an event;
  ``h_1 = p p_2``, ``h_2 = p (1 - p_2)``.

Then, draw by draw,

    S(t_j | x) = prod_{l <= j} (1 - h_1(t_l, x) - h_2(t_l, x)),
    CIF_c(t_j | x) = sum_{l <= j} S(t_{l-1} | x) h_c(t_l, x),

so ``CIF_1 + CIF_2 + S = 1`` at every time. The likelihood factorises into
the two binary models and their priors are independent, so each is an
ordinary `bartz.gbart` fit.

Deviations from R, on purpose: each binary fit computes its cut-points
from its own rows (R forces the time cut-points of the second fit to those
of the first: the same whenever the grid times with a row in the second
fit's data span the grid); the second fit runs on ``seed`` folded with 1,
the first on ``seed`` folded with 0 (R's fits continue one stream); ``cond``
holds 0-based row indices (R: 1-based).
"""

from typing import NamedTuple

import numpy as np
import pandas as pd

from bartz.api import familyio, rfamily, survival
from bartz.api.fit import BARTFit
from bartz.api.gbart import gbart
from bartz.api.crisk_prep import CriskPre, Layout, crisk2_layout, crisk_layout, crisk_pre_bart, take_rows
from bartz.forest import grove
from bartz.kernels import rng
from bartz.prep import checks

__all__ = [
    'Crisk2BARTFit',
    'CriskBARTFit',
    'CriskPre',
    'CriskPrediction',
    'crisk2_bart',
    'crisk_bart',
    'crisk_pre_bart',
    'mc_crisk2_bart',
    'mc_crisk_bart',
]

# host bytes per draw and row of a block: two float32 latent draws, the seven
# float64 temporaries (two probabilities, three hazards, two CIFs) and seven float32 outputs
_BYTES_PER_CELL = 2 * 4 + 7 * 8 + 7 * 4
_TEST_DRAWS = ('yhat_test', 'yhat_test2', 'prob_test', 'prob_test2', 'surv_test', 'cif_test', 'cif_test2')


class CriskPrediction(NamedTuple):
    """What R's ``predict.criskbart`` and ``predict.crisk2bart`` return (R's names, ``.`` as ``_``)."""

    binary_offset: float  # R's binaryOffset: the offset of the first fit
    binary_offset2: float  # R's binaryOffset2: the offset of the second fit
    tx_test: np.ndarray | pd.DataFrame  # (H K, p + 1) the rows of the first fit (R's newdata)
    tx_test2: np.ndarray | pd.DataFrame  # (H K, p2 + 1) the rows of the second fit (R's newdata2)
    times: np.ndarray  # (K,) the time grid
    K: int  # number of grid times
    yhat_test: np.ndarray  # (ndpost, H K) float32 latent draws of the first fit, offset included
    yhat_test2: np.ndarray  # (ndpost, H K) float32 latent draws of the second fit, offset included
    prob_test: np.ndarray  # (ndpost, H K) float32 p_1 (crisk) or p (crisk2)
    prob_test2: np.ndarray  # (ndpost, H K) float32 h_2 = (1 - p_1) p_2 (crisk, as R) or p_2 (crisk2)
    surv_test: np.ndarray  # (ndpost, H K) float32 draws of S(t | x)
    cif_test: np.ndarray  # (ndpost, H K) float32 draws of the cumulative incidence of cause 1
    cif_test2: np.ndarray  # (ndpost, H K) float32 draws of the cumulative incidence of cause 2
    surv_test_mean: np.ndarray  # (H K,) float64 posterior means
    cif_test_mean: np.ndarray  # (H K,)
    cif_test2_mean: np.ndarray  # (H K,)


_SLOTS = {
    'fit': 'bartz.BARTFit: the first binary BART (cause 1 vs not; crisk2: any event vs none)',
    'fit2': 'bartz.BARTFit: the second (cause 2 vs not given no cause 1; crisk2: cause 1 vs 2 given an event)',
    'type': "'pbart' (probit) or 'lbart' (logistic)",
    'times': '(K,) the time grid t_1 < ... < t_K',
    'K': 'number of grid times',
    'id': "R's id: any label given, else None",
    'cond': "0-based rows of tx_train2 the second fit ran on (crisk_bart); None for crisk2_bart",
    'tx_train': '(m, p + 1) the rows of the first fit: the time, then the covariates',
    'tx_train2': '(m2, p2 + 1) the rows given for the second fit (crisk: before cond; crisk2: the event rows)',
    'tx_test': '(n_test K, p + 1) the test grid of the first fit; None without one',
    'tx_test2': '(n_test K, p2 + 1) the test grid of the second fit; None without one',
    'offset2': 'the offset of the second fit',
    **{name: f'(ndpost, n_test K) float32 draws of {name} (see CriskPrediction); None without tx_test'
       for name in _TEST_DRAWS},
    **{f'{name}_mean': f'(n_test K,) float64 posterior mean of {name}; None without tx_test'
       for name in _TEST_DRAWS},
}  # fmt: skip


class CriskBARTFit(familyio.Saveable):
    """The result of `crisk_bart` and `mc_crisk_bart`, R's ``criskbart`` list.

    The attributes R's ``crisk.bart`` adds are declared in ``__slots__``;
    ``varcount2``, ``varprob2`` (and their ``_mean``), ``rm_const2`` are
    those of ``fit2``; the rest of R's list (``offset``, ``varcount``,
    ``ndpost``, ``treedraws()``, ...) those of the first fit, ``fit``, read
    through.
    """

    __slots__ = _SLOTS

    def __init__(self, **attributes):
        for name in _SLOTS:
            setattr(self, name, attributes.pop(name, None))
        if attributes:
            msg = f'{type(self).__name__} has no attribute(s) {sorted(attributes)}'
            raise TypeError(msg)

    def __getattr__(self, name):
        # only reached for names that are not slots: R's other entries, on the first fit
        if name.startswith('_') or name in ('fit', 'fit2'):
            raise AttributeError(name)
        return getattr(self.fit, name)

    def __repr__(self):
        n_test = 0 if self.tx_test is None else checks.num_rows(self.tx_test) // self.K
        return f'{type(self).__name__}(type={self.type!r}, K={self.K}, n_test={n_test}, ndpost={self.fit.ndpost})'

    varcount2 = property(lambda self: self.fit2.varcount, doc="(ndpost, p2) the second fit's split counts")
    varcount2_mean = property(lambda self: self.fit2.varcount_mean, doc='their mean')
    varprob2 = property(lambda self: self.fit2.varprob, doc="(ndpost, p2) the second fit's split probabilities")
    varprob2_mean = property(lambda self: self.fit2.varprob_mean, doc='their mean')
    rm_const2 = property(lambda self: self.fit2.rm_const, doc='the columns the second fit kept')

    @staticmethod
    def hazards(prob, prob2):
        """The cause-specific discrete hazards and the probability of no event.

        Parameters
        ----------
        prob, prob2
            Draws of ``p_1 = F(f_1)`` and ``p_2 = F(f_2)``.

        Returns
        -------
        ``h_1 = p_1``, ``h_2 = (1 - p_1) p_2``, ``(1 - p_1)(1 - p_2)``.
        """
        return prob, (1 - prob) * prob2, (1 - prob) * (1 - prob2)

    @staticmethod
    def reported_prob2(prob2, hazard2):
        """R's ``prob_test2`` of a ``criskbart``: the hazard ``h_2``."""
        return hazard2

    def r_predict(self, newdata, newdata2=None, *, max_memory=grove.DEFAULT_MAX_MEMORY) -> CriskPrediction:
        """R's ``predict(object, newdata, newdata2)`` (``predict.criskbart``, ``predict.crisk2bart``).

        Parameters
        ----------
        newdata
            ``(H K, p + 1)`` rows of the first fit in R's ``tx_test``
            layout: for each of ``H`` settings, ``K`` rows with the grid
            times in order in the first column (see `bartz.surv_pre_bart`).
        newdata2
            The rows of the second fit, same layout and number of rows;
            None (bartz only): ``newdata`` (R requires it;
            ``bartz.predict(post, newdata)`` passes none).
        max_memory
            Bytes of temporary memory, on the device (as
            `bartz.BARTFit.predict`) and on the host for each block of
            settings.

        Returns
        -------
        CriskPrediction
        """
        max_memory = checks._check_int('max_memory', max_memory, 1)
        name2 = 'newdata2' if newdata2 is not None else 'newdata2 (newdata, its default)'
        newdata, newdata2 = _check_test_pair(newdata, newdata if newdata2 is None else newdata2, 'newdata')
        survival.check_width('newdata', newdata, self.fit)
        survival.check_width(name2, newdata2, self.fit2, 'tx_train2')
        grid = survival.check_grid('newdata', newdata)
        survival.check_grid('newdata2', newdata2, grid)
        out = _test_draws(self, newdata, newdata2, grid, max_memory)
        return CriskPrediction(
            float(self.fit.offset), float(self.fit2.offset), newdata, newdata2, grid, int(grid.size),
            **{name: out[name] for name in _TEST_DRAWS},
            surv_test_mean=out['surv_test_mean'], cif_test_mean=out['cif_test_mean'],
            cif_test2_mean=out['cif_test2_mean'],
        )  # fmt: skip


class Crisk2BARTFit(CriskBARTFit):
    """The result of `crisk2_bart` and `mc_crisk2_bart`, R's ``crisk2bart`` list
    (attributes as `CriskBARTFit`; ``cond`` is None)."""

    __slots__ = ()

    @staticmethod
    def hazards(prob, prob2):
        """The cause-specific discrete hazards and the probability of no event.

        Parameters
        ----------
        prob, prob2
            Draws of ``p = F(f)`` (any event) and ``p_2 = F(f_2)`` (cause 1
            given an event).

        Returns
        -------
        ``h_1 = p p_2``, ``h_2 = p (1 - p_2)``, ``1 - p``.
        """
        return prob * prob2, prob * (1 - prob2), 1 - prob

    @staticmethod
    def reported_prob2(prob2, hazard2):
        """R's ``prob_test2`` of a ``crisk2bart``: ``p_2`` itself."""
        return prob2


def cumulative_incidence(hazard, hazard2, stay, K):
    """``S`` and the two cumulative incidence functions within each block of `K` columns.

    ``S(t_j) = prod_{l <= j} stay_l`` and ``CIF_c(t_j) = sum_{l <= j}
    S(t_{l-1}) h_c(t_l)``, with ``S(t_0) = 1``.

    Parameters
    ----------
    hazard, hazard2
        ``(ndpost, H K)`` draws of the discrete hazards of causes 1 and 2,
        ``K`` grid times per setting.
    stay
        ``(ndpost, H K)`` the probability of no event at each time given
        none before, ``1 - h_1 - h_2``.
    K
        Number of grid times.

    Returns
    -------
    cif, cif2, surv
        ``(ndpost, H K)`` float64 draws.
    """
    hazard, hazard2, stay = (np.asarray(a, np.float64) for a in (hazard, hazard2, stay))
    shape = hazard.shape
    surv = np.cumprod(stay.reshape(shape[0], -1, K), axis=2)
    before = np.concatenate([np.ones_like(surv[..., :1]), surv[..., :-1]], axis=2)
    cifs = [np.cumsum(before * h.reshape(before.shape), axis=2).reshape(shape) for h in (hazard, hazard2)]
    return cifs[0], cifs[1], surv.reshape(shape)


def _test_draws(post, tx, tx2, grid, max_memory) -> dict:
    """R's test draws and their means at `tx`, `tx2`, a block of settings at a time."""
    K, rows, ndpost = grid.size, checks.num_rows(tx), post.fit.ndpost
    block = max(1, max_memory // (_BYTES_PER_CELL * ndpost * K)) * K
    out = {name: np.empty((ndpost, rows), np.float32) for name in _TEST_DRAWS}
    out |= {f'{name}_mean': np.empty(rows) for name in _TEST_DRAWS}
    for start in range(0, rows, block):
        part = slice(start, min(rows, start + block))
        pred = rfamily.predict(post.fit, take_rows(tx, part), max_memory=max_memory)
        pred2 = rfamily.predict(post.fit2, take_rows(tx2, part), max_memory=max_memory)
        prob, prob2 = (np.asarray(p.prob_test, np.float64) for p in (pred, pred2))
        hazard, hazard2, stay = post.hazards(prob, prob2)
        cif, cif2, surv = cumulative_incidence(hazard, hazard2, stay, K)
        draws = dict(
            yhat_test=pred.yhat_test, yhat_test2=pred2.yhat_test, prob_test=prob,
            prob_test2=post.reported_prob2(prob2, hazard2), surv_test=surv, cif_test=cif, cif_test2=cif2,
        )  # fmt: skip
        for name, value in draws.items():
            out[name][:, part] = value
            out[f'{name}_mean'][part] = np.mean(value, axis=0, dtype=np.float64)
    return out


def _check_test_pair(tx, tx2, name):
    """Two test grids as arrays or DataFrames, with the same number of rows."""
    tx, tx2 = (x if isinstance(x, pd.DataFrame) else np.asarray(x, np.float64) for x in (tx, tx2))
    if checks.num_rows(tx) != checks.num_rows(tx2):
        msg = f'{name} and {name}2 must have the same number of rows, got {checks.num_rows(tx)} and {checks.num_rows(tx2)}'
        raise ValueError(msg)
    return tx, tx2


def crisk_bart(
    x_train=None, y_train=None, x_train2=None, y_train2=None, times=None, delta=None, K=None,
    x_test=None, x_test2=None, cond=None, *,
    sparse=False, theta=0, omega=1, a=0.5, b=1, augment=False, rho=None, rho2=None, xinfo=None, xinfo2=None,
    usequants=False, rm_const=True, type='pbart', k=2.0, power=2.0, base=0.95,  # noqa: A002
    offset=None, offset2=None, tau_num=None, ntree=50, numcut=100, ndpost=1000, nskip=250, keepevery=10,
    printevery=100, id=None, seed=99, nice=19, **options,  # noqa: A002
) -> CriskBARTFit:  # fmt: skip
    """Competing-risks BART, as R's ``BART::crisk.bart``.

    Two binary BARTs (see `bartz.api.crisk`): cause 1 vs not on every
    person-period row, cause 2 vs not on the rows ``cond`` with no cause-1
    event. With ``y_train`` None, ``times``, ``delta`` and the covariates
    are expanded by `crisk_pre_bart` (``K`` as there); with ``y_train``
    given, ``x_train``, ``x_train2`` (default ``x_train``), ``x_test``,
    ``x_test2`` are the expanded rows (the time first), ``y_train2`` the
    cause-2 outcome of every row and ``cond`` (default: the rows with
    ``y_train == 0``) the rows of the second fit.

    R's arguments and defaults (``.`` becomes ``_``); see `bartz.gbart` for
    their meaning. ``rho``, ``xinfo``, ``offset`` are those of the first
    fit, ``rho2``, ``xinfo2``, ``offset2`` of the second; ``rho`` and
    ``rho2`` default to the number of columns of ``x_train`` and
    ``x_train2`` as given (R's rule). ``nice`` is accepted and has no
    effect; ``mc_cores`` belongs to `mc_crisk_bart`.

    Parameters
    ----------
    seed
        bartz's seed: the first fit runs on it folded with 0, the second
        folded with 1.
    **options
        bartz's options of `gbart` (``maxdepth``, ``max_memory``, ...);
        ``save_yhat_train`` defaults to False (R drops ``yhat_train``).

    Returns
    -------
    CriskBARTFit
        R's ``times``, ``K``, ``cond``, ``tx_train``, ``tx_train2``,
        ``tx_test``, ``tx_test2``, ``offset2``, ``id``, ``type``, and at
        the test grid the float32 draws ``yhat_test``, ``yhat_test2``,
        ``prob_test`` (``p_1``), ``prob_test2`` (``(1 - p_1) p_2``, as R),
        ``surv_test``, ``cif_test``, ``cif_test2`` with their ``_mean``.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> t = rng.integers(1, 6, 80).astype(float)
    >>> post = crisk_bart(times=t, delta=rng.integers(0, 3, 80), ndpost=50, nskip=20, keepevery=1,
    ...                   printevery=None)
    >>> np.allclose(post.cif_test + post.cif_test2 + post.surv_test, 1, atol=1e-5)
    True

    References
    ----------
    Sparapani, Logan, Maiers, Laud & McCulloch (2020), Nonparametric
    competing risks analysis using Bayesian Additive Regression Trees,
    Stat. Methods Med. Res. 29(1).
    """
    data = (x_train, y_train, x_train2, y_train2, times, delta, K, x_test, x_test2, cond)
    gbart_args = dict(
        sparse=sparse, theta=theta, omega=omega, a=a, b=b, augment=augment, usequants=usequants,
        rm_const=rm_const, k=k, power=power, base=base, tau_num=tau_num, ntree=ntree, numcut=numcut,
        ndpost=ndpost, nskip=nskip, keepevery=keepevery, printevery=printevery,
    )  # fmt: skip
    pair = dict(rho=_default_rho(rho, rho2, x_train, x_train2), xinfo=(xinfo, xinfo2), offset=(offset, offset2))
    return _fit_model(CriskBARTFit, data, pair, type, id, seed, nice, gbart_args, options)


def crisk2_bart(
    x_train=None, y_train=None, x_train2=None, y_train2=None, times=None, delta=None, K=None,
    x_test=None, x_test2=None, *,
    sparse=False, theta=0, omega=1, a=0.5, b=1, augment=False, rho=None, rho2=None, xinfo=None, xinfo2=None,
    usequants=False, rm_const=True, type='pbart', k=2.0, power=2.0, base=0.95,  # noqa: A002
    offset=None, offset2=None, tau_num=None, ntree=50, numcut=100, ndpost=1000, nskip=250, keepevery=10,
    printevery=100, id=None, seed=99, nice=19, **options,  # noqa: A002
) -> Crisk2BARTFit:  # fmt: skip
    """Competing-risks BART with the causes modelled the other way, as R's ``BART::crisk2.bart``.

    Two binary BARTs (see `bartz.api.crisk`): any event vs none on every
    person-period row, then cause 1 vs cause 2 on the rows with an event.
    With ``y_train`` None, ``times``, ``delta`` (0, 1, 2, both causes
    present) and the covariates are expanded as `bartz.surv_pre_bart` does
    (``K`` as there); with ``y_train`` given (any event, 0/1), ``x_train``
    and ``x_test``, ``x_test2`` are the expanded rows, ``x_train2`` the
    expanded rows with an event and ``y_train2`` their cause-1 indicator.

    Arguments as `crisk_bart` (no ``cond``). The result's ``prob_test`` is
    ``p`` (any event), ``prob_test2`` is ``p_2`` (cause 1 given an event),
    as R's.

    Returns
    -------
    Crisk2BARTFit

    References
    ----------
    Sparapani, Logan, Maiers, Laud & McCulloch (2020), Nonparametric
    competing risks analysis using Bayesian Additive Regression Trees,
    Stat. Methods Med. Res. 29(1).
    """
    data = (x_train, y_train, x_train2, y_train2, times, delta, K, x_test, x_test2, None)
    gbart_args = dict(
        sparse=sparse, theta=theta, omega=omega, a=a, b=b, augment=augment, usequants=usequants,
        rm_const=rm_const, k=k, power=power, base=base, tau_num=tau_num, ntree=ntree, numcut=numcut,
        ndpost=ndpost, nskip=nskip, keepevery=keepevery, printevery=printevery,
    )  # fmt: skip
    pair = dict(rho=_default_rho(rho, rho2, x_train, x_train2), xinfo=(xinfo, xinfo2), offset=(offset, offset2))
    return _fit_model(Crisk2BARTFit, data, pair, type, id, seed, nice, gbart_args, options)


def mc_crisk_bart(*args, mc_cores=2, seed=99, **kwargs) -> CriskBARTFit:
    """`crisk_bart` with ``mc_cores`` chains in each fit, as R's ``BART::mc.crisk.bart``.

    ``ndpost`` is the total over the chains (each keeps ``ceil(ndpost /
    mc_cores)``), the draws come chain after chain, as R; bartz runs
    ``mc_cores`` chains whatever the number of cores. As R, ``rho`` and
    ``rho2`` default to the number of expanded columns (R's
    ``mc.crisk.bart`` expands the data before calling ``crisk.bart``).
    """
    return _mc(crisk_bart, args, mc_cores, seed, kwargs)


def mc_crisk2_bart(*args, mc_cores=2, seed=99, **kwargs) -> Crisk2BARTFit:
    """`crisk2_bart` with ``mc_cores`` chains in each fit, as R's
    ``BART::mc.crisk2.bart`` (see `mc_crisk_bart`)."""
    return _mc(crisk2_bart, args, mc_cores, seed, kwargs)


def _mc(func, args, mc_cores, seed, kwargs):
    if '_mc_cores' in kwargs:
        raise TypeError('mc_cores given twice')
    checks._check_int('mc_cores', mc_cores, 1)
    names = ('x_train', 'y_train', 'x_train2')
    given = dict(zip(names, args, strict=False)) | {n: kwargs[n] for n in names if n in kwargs}
    expanded = given.get('y_train') is None
    for name, x in (('rho', given.get('x_train')), ('rho2', given.get('x_train2', given.get('x_train')))):
        if kwargs.get(name) is None and _num_columns(x):
            kwargs[name] = _num_columns(x) + expanded
    return func(*args, seed=seed, **kwargs, _mc_cores=mc_cores)


def _num_columns(x) -> int:
    """The columns of covariates as given (0 for none)."""
    if x is None or checks.num_rows(x) == 0:
        return 0
    return int(np.shape(x)[1]) if np.ndim(x) == 2 else 1


def _default_rho(rho, rho2, x_train, x_train2):
    """R's rule: the columns of ``x_train`` and ``x_train2`` as given (None: gbart's default)."""
    x_train2 = x_train if x_train2 is None else x_train2
    return tuple(r if r is not None or not _num_columns(x) else _num_columns(x)
                 for r, x in ((rho, x_train), (rho2, x_train2)))  # fmt: skip


def _fit_model(cls, data, pair, type_, id_, seed, nice, gbart_args, options):
    """Check, lay out the rows, run the two binary fits, package (R's ``crisk.bart``)."""
    mc_cores = options.pop('_mc_cores', 1)
    _check_options(cls, options, type_)
    checks._check_int('nice', nice, 0)
    options.setdefault('save_yhat_train', False)
    key = checks.make_key(seed)
    layout = (crisk_layout if cls is CriskBARTFit else crisk2_layout)(*data)
    tests = None if layout.tx_test is None else _checked_tests(layout)  # before the fits, not after
    rows2 = slice(None) if layout.cond is None else layout.cond
    fits = [
        gbart(
            tx, y, None, type=type_, rho=pair['rho'][i], xinfo=pair['xinfo'][i], offset=pair['offset'][i],
            seed=rng.fold_in_on_host(key, i), mc_cores=mc_cores, **gbart_args, **options,
        )
        for i, (tx, y) in enumerate(
            [(layout.tx_train, layout.y_train), (take_rows(layout.tx_train2, rows2), layout.y_train2[rows2])]
        )
    ]  # fmt: skip
    return _package(cls, fits, layout, tests, id_, options.get('max_memory', grove.DEFAULT_MAX_MEMORY))


def _checked_tests(layout: Layout):
    """The test rows of both fits, checked to be R's layout on the fit's grid."""
    tx, tx2 = _check_test_pair(layout.tx_test, layout.tx_test2, 'x_test')
    survival.check_grid('x_test', tx, layout.times)
    survival.check_grid('x_test2', tx2, layout.times)
    return tx, tx2


def _check_options(cls, options, type_):
    """R's model types and bartz's options of `gbart`, refused in words otherwise."""
    if type_ not in ('pbart', 'lbart'):
        msg = f"type argument must be set to either 'pbart' or 'lbart', got {type_!r}"
        raise ValueError(msg)
    unknown = sorted(set(options) - rfamily.BARTZ_OPTIONS)
    if unknown:
        name = 'crisk_bart' if cls is CriskBARTFit else 'crisk2_bart'
        msg = (
            f'{name}() got unexpected keyword argument(s) {unknown}: R\'s {name.replace("_", ".")} does not'
            f' have them (bartz options accepted: {sorted(rfamily.BARTZ_OPTIONS)})'
        )
        raise TypeError(msg)


def _package(cls, fits: list[BARTFit], layout: Layout, tests, id_, max_memory):
    """R's ``criskbart`` (or ``crisk2bart``) list: the fits, the grid and the test draws."""
    post = cls(
        fit=fits[0], fit2=fits[1], type=fits[0].type, times=layout.times, K=layout.K, id=id_,
        cond=layout.cond, tx_train=layout.tx_train, tx_train2=layout.tx_train2, offset2=float(fits[1].offset),
    )  # fmt: skip
    if tests is not None:
        tx, tx2 = tests
        post.tx_test, post.tx_test2 = tx, tx2
        for name, value in _test_draws(post, tx, tx2, layout.times, max_memory).items():
            setattr(post, name, value)
    return post
