"""The result of `bartz.gbart`: `BARTFit`, its attributes declared in one place.

`BARTFit` has R's attribute names (``yhat_train``, ``sigma``, ``varcount``,
...). Every attribute is declared, with a one-line description, in
``BARTFit.__slots__``; `package` (with its stages, `bartz.api.packaging`)
is the only code that sets them after a run, and `bartz.io.load` after
reading a file. Attributes that do not apply
to the outcome type are left unset, as R's result lacks them (e.g.
``sigma`` of a probit fit): reading one is an `AttributeError`. Attributes
that a Ctrl-C left uncomputed are None (listed in ``run_info.missing``,
see `package`).
"""

import sys
import warnings
from collections.abc import Iterable

import numpy as np
import pandas as pd

from bartz import diagnostics
from bartz._compile import programs as _programs
from bartz.api import _fitfile, inference, packaging, partial
from bartz.api import predict as predict_mod
from bartz.api import treedraws as treedraws_mod
from bartz.api.packaging import STAGES, bin_matrix, link_params, warn_convergence, x_test_link  # noqa: F401
from bartz.forest import grove
from bartz.prep import encoding as encoding_mod
from bartz.prep import priors
from bartz.prep import sizes as buckets
from bartz.prep.checks import _check_bool, _check_int, make_key

__all__ = ['STAGES', 'BARTFit', 'package', 'warn_convergence']


class BARTFit:
    """The result of `bartz.gbart`, with R's attribute names.

    The attributes, declared in ``__slots__`` with their description, are
    listed below (``help(BARTFit.yhat_train)`` shows one). Shapes: ``ndpost``
    draws, ``n`` training points, ``p`` predictors (the encoded columns, see
    `bartz.encoding`: numeric columns and dummies of categorical ones, as
    R's model matrix).

    Attributes
    ----------
    yhat_train, yhat_train_mean, yhat_test, yhat_test_mean
        Draws ``(ndpost, n)`` of f and their mean (latent scale for binary outcomes).
    prob_train, prob_train_mean, prob_test, prob_test_mean
        Probit only: draws and mean of ``P(y = 1 | x) = Phi(yhat)``.
    sigma, sigma_, sigma_mean
        Continuous only: error sd with burn-in (as R), kept draws, mean.
    varcount, varcount_mean, varprob, varprob_mean
        Splits on, and split probability of, each encoded column, per draw.
    offset, sigest, ndpost, ntree, chains, moves, accept_rate
        See the descriptions of the slots.
    """

    __slots__ = {
        # ---- what was fitted
        'type': "outcome type: 'wbart' (continuous), 'pbart' (binary probit) or 'lbart' (binary logistic)",
        'ndpost': 'number of kept draws (over all chains)',
        'ntree': 'number of trees',
        'chains': 'number of chains (mc_cores)',
        # ---- priors and settings (R's names)
        'offset': 'constant added to the sum of trees',
        'sigest': 'prior guess of the error sd (continuous; None for binary)',
        'k': 'leaf prior: sd tau_num / (k sqrt(ntree))',
        'power': 'tree prior: P(split at depth d) = base / (1 + d)**power',
        'base': 'tree prior, see power',
        'sigdf': 'error variance prior degrees of freedom',
        'sigquant': 'error variance prior quantile',
        'lambda_': 'error variance prior scale (continuous; None for binary)',
        'tau_num': 'leaf prior numerator, see k',
        'numcut': '(p_model,) int32: number of cut-points of each kept model column',
        'xinfo': '(p_model, max_K) float32: cut-points of each kept model column, +inf padded',
        'rm_const': '(p_kept,) indices of the encoded columns kept by rm_const',
        # ---- draws
        'yhat_train': '(ndpost, n) draws of f at x_train, chain after chain; None if save_yhat_train=False',
        'yhat_train_mean': '(n,) posterior mean of f at x_train',
        'yhat_test': '(ndpost, n_test) draws of f at x_test; None without x_test',
        'yhat_test_mean': '(n_test,) posterior mean of f at x_test; None without x_test',
        'prob_train': 'binary: (ndpost, n) draws of P(y = 1 | x) at x_train; None if save_yhat_train=False',
        'prob_train_mean': 'binary: (n,) posterior mean of P(y = 1 | x) at x_train',
        'prob_test': 'binary: (ndpost, n_test) draws of P(y = 1 | x) at x_test; None without x_test',
        'prob_test_mean': 'binary: (n_test,) posterior mean of P(y = 1 | x) at x_test; None without x_test',
        'sigma': 'continuous: error sd, burn-in included: (nskip + ndpost,), or (nskip + ndpost/chains, chains)',
        'sigma_': 'continuous: (ndpost,) kept draws of the error sd, chain after chain',
        'sigma_mean': 'continuous: posterior mean of the error sd',
        'varcount': '(ndpost, p) splits on each encoded column per draw (DataFrame if x_train was one)',
        'varcount_mean': '(p,) mean of varcount over draws',
        'varprob': '(ndpost, p) split probability of each encoded column (DART s, or the uniform prior)',
        'varprob_mean': '(p,) mean of varprob over draws',
        'nkeep': (
            "R's thinning (bartz.wbart, pbart, lbart): rows kept of each kind of draw, "
            "{'train': yhat_train/prob_train, 'test': yhat_test/prob_test, 'treedraws': the trees, varcount, "
            "varprob, ``sigma_``}; a kind not named (or None) has ndpost rows"
        ),
        # ---- the run
        'moves': "the sampler's tree moves: {'grow': p, 'prune': p, 'change': p, 'swap': p}, or 'R' (R BART's sampler)",
        'accept_rate': "dict: acceptance rates of the 'grow', 'prune', 'change' and 'swap' moves",
        'elapsed': 'seconds of the MCMC run, compilation included',
        'run_info': 'bartz.mcmcloop.RunInfo of the run (None for a loaded fit)',
        # ---- what prediction needs (private)
        '_encoding': 'bartz.encoding.Encoding: columns of x_train to model columns',
        '_kept': '(p_model,) bool: model columns kept by rm_const',
        '_splits': 'bartz.prepcovars.Splits of the kept model columns',
        '_scale': 'sd(y) (continuous) or 1: the trees are in units of scale',
        '_n': 'number of training points',
        '_trace': 'bartz.grove.TreeHeaps: the saved forests, (ndpost, ntree, ...)',
        '_mesh': 'jax.sharding.Mesh of the fit, or None',
    }

    def __init__(self, **attributes):
        for name, value in attributes.items():
            if name not in self.__slots__:
                msg = f'BARTFit has no attribute {name!r}'
                raise TypeError(msg)
            setattr(self, name, value)

    def __repr__(self):
        outcome = priors.OUTCOME_TYPES[self.type]
        kind = {'probit': 'probit', 'logit': 'logistic'}[outcome.link] if outcome.binary else 'continuous'
        extra = f', sigma_mean={self.sigma_mean:.4g}' if getattr(self, 'sigma_mean', None) is not None else ''
        return (
            f'BARTFit(type={self.type!r} ({kind}), n={self._n}, p={self._p}, ntree={self.ntree}, '
            f'ndpost={self.ndpost}{extra})'
        )

    @property
    def _p(self) -> int:
        """Number of columns of x_train."""
        return self._encoding.num_columns

    @property
    def _columns(self) -> list[str] | None:
        """Names of the columns of x_train (None if it was an array)."""
        return self._encoding.column_names

    def save(self, path) -> None:
        """Save the fit to ``path`` (see `bartz.io.save`); `bartz.load` reads it back."""
        _fitfile.write(self, path)

    # ------------------------------------------------------------ prediction

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
            at once) or DataFrame with the training columns (matched by
            name; categorical levels by value). Missing values are handled
            as in training (see `bartz.encoding`).
        kind
            ``'draws'``: the ``(ndpost, m)`` draws of f (for binary
            outcomes, of the probability). ``'mean'``, ``'sd'``: their posterior
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
        A numpy array: float32 for ``'draws'``, float64 for the summaries.
        """
        options = self._predict_options(kind, q, predictive, seed, max_memory)
        if w_new is not None and not options['predictive']:
            msg = 'w_new is used only with predictive=True'
            raise ValueError(msg)
        _programs.watch_maps()  # before anything compiles (see gbart)
        model, binning = predict_mod.from_fit(self)
        x_new = encoding_mod.row_as_frame(x_new, binning.encoding)  # (a row of a DataFrame)
        w_new = predict_mod.check_w_new(w_new, predict_mod.num_rows(x_new)) if w_new is not None else None
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
        if isinstance(chunks, np.ndarray | pd.DataFrame | pd.Series | str | bytes) or not isinstance(chunks, Iterable):
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
        if predictive and priors.OUTCOME_TYPES[self.type].binary:
            msg = (
                f"predictive=True is for continuous outcomes (type='wbart'); for type={self.type!r} "
                'the draws are probabilities'
            )
            raise ValueError(msg)
        max_memory = _check_int('max_memory', max_memory, 1)
        if self._trace.leaf_tree.shape[0] == 0:
            msg = 'this fit kept no tree draws (nkeeptreedraws=0): it cannot predict'
            raise ValueError(msg)
        key = make_key(seed)
        key = key if predictive else None
        return {'kind': kind, 'q': q, 'predictive': bool(predictive), 'key': key, 'max_memory': max_memory}

    def partial_dependence(self, x, var, grid=None, *, kind='mean', level=0.95, max_memory=64 * 2**20):
        """Posterior of the partial dependence on one or two predictors, as
        R's ``pdbart``: the average over the rows of `x` of f with `var`
        set to each grid value, for every draw. See
        `bartz.partial.partial_dependence` (the arguments) and
        `bartz.plot.partial_dependence` (the figure).

        Returns a DataFrame: the grid, then ``mean``, ``sd``, ``median``,
        ``lower``, ``upper``; binary fits on the probability scale.
        """
        return partial.partial_dependence(self, x, var, grid, kind=kind, level=level, max_memory=max_memory)

    def treedraws(self) -> dict:
        """The trees in R BART's ``post$treedraws`` form, ``{'cutpoints':
        [array per predictor], 'trees': str}``, which R's ``predict`` reads;
        the offset (R's ``mu`` or ``binaryOffset``) is ``offset``. A method:
        it builds the whole text. `bartz.api.treedraws` has the format, the
        R lines that load it, and ``write_treedraws``, which streams it to files."""
        return treedraws_mod.fit_treedraws(self)

    # ------------------------------------------------------------ summaries

    def variable_importance(self, by: str = 'column') -> pd.DataFrame:
        """Posterior variable usage, one row per predictor, most used first.

        Parameters
        ----------
        by
            ``'column'`` (default): one row per column of ``x_train``, the
            dummies of a categorical column summed; ``'encoded'``: one row
            per encoded column (R's model matrix, as ``varcount``).

        Returns
        -------
        DataFrame
            Columns: ``inclusion_prob`` (fraction of draws in which the
            forest splits on the predictor at least once: the posterior
            inclusion proportion), ``varcount_mean`` (mean number of splits)
            and ``varprob_mean`` (mean split probability; DART's ``s`` with
            ``sparse=True``, the prior otherwise). Rows are named by the
            columns of ``x_train`` (or the dummies), or ``x0, x1, ...``.
        """
        if by not in ('column', 'encoded'):
            msg = f"by must be 'column' or 'encoded', got {by!r}"
            raise ValueError(msg)
        varcount = np.asarray(self.varcount)
        varprob = np.asarray(self.varprob)
        enc = self._encoding
        if by == 'column':
            varcount = enc.encoded_to_columns(varcount)
            varprob = enc.encoded_to_columns(varprob)
            names = enc.column_names
        else:
            names = enc.encoded_names
        if names is None:
            names = [f'x{j}' for j in range(varcount.shape[1])]
        table = pd.DataFrame(
            {
                'inclusion_prob': (varcount > 0).mean(axis=0),
                'varcount_mean': varcount.mean(axis=0),
                'varprob_mean': varprob.mean(axis=0),
            },
            index=pd.Index(names, name='predictor'),
        )
        return table.sort_values(['inclusion_prob', 'varcount_mean'], ascending=False)

    def to_inference_data(self, x=None, *, points=None, y=None):
        """The draws for ArviZ (an optional extra): ``posterior`` (sigma, f
        or the probability at points, DART's split probabilities),
        ``sample_stats`` (leaves, trees changed, splits per draw),
        ``observed_data`` (``y``, if given). See
        `bartz.api.inference.to_inference_data` for the arguments.

        Examples
        --------
        >>> import arviz as az  # doctest: +SKIP
        >>> data = fit.to_inference_data(y=y_train)  # doctest: +SKIP
        >>> az.summary(data, var_names=['sigma'])  # doctest: +SKIP
        """
        return inference.to_inference_data(self, x, points=points, y=y)

    def by_chain(self, name):
        """Draws of attribute `name` (e.g. ``'yhat_train'``, ``'sigma_'``)
        shaped ``(chains, draws per chain, ...)``."""
        value = getattr(self, name, None)
        if value is None:
            msg = f'{name} is not available in this fit'
            raise ValueError(msg)
        value = np.asarray(value)
        # R's nkeep counts (`bartz.wbart`) keep fewer rows, as many of each chain
        thinned = name != 'sigma' and value.shape[0] < self.ndpost and value.shape[0] % self.chains == 0
        if value.shape[0] != self.ndpost and not thinned:
            msg = f'{name} does not have one row per kept draw ({self.ndpost}), its shape is {value.shape}'
            if name == 'sigma':
                msg += "; sigma includes the burn-in, as in R: by_chain('sigma_') gives the kept draws"
            raise ValueError(msg)
        return value.reshape(self.chains, value.shape[0] // self.chains, *value.shape[1:])

    def diagnostics(self, x_train=None):
        """Convergence summary of the error sd and of the predictions.

        Returns a DataFrame: for ``sigma`` (continuous), its R-hat and
        bulk/tail ESS (`bartz.diagnostics`), and Geweke's z of the first
        chain; for ``yhat_train`` (the draws at the training points), the
        worst (max) and median R-hat and the worst (min) and median ESS over
        points. R-hat needs draws; with one chain it compares its halves.
        The findings of the check are in the table's ``attrs``:
        ``'problems'`` (warned) and ``'notes'`` (reported, with what to do
        in ``'advice'``); `summary` prints them.

        A fit made with ``save_yhat_train=False`` has no draws at the
        training points: pass `x_train` (the training predictors, or any
        points) and the rows ``yhat_train`` are computed from
        ``predict(x_train)`` instead (for a binary outcome the
        probabilities: R-hat and ESS are rank-based, so the scale does not
        matter). Without them, a binary fit has no row.

        Warns a `bartz.diagnostics.ConvergenceWarning` when the median
        R-hat of f over the training points (all of them here, not the 100
        that `gbart` checks) exceeds 1.1, or a chain is stuck; a slowly
        mixing sigma is reported, not warned (see
        `bartz.diagnostics.convergence_problems`).
        """
        table = self._diagnostics(x_train)
        problems = table.attrs['problems']
        if problems:
            msg = diagnostics.convergence_message(problems, self.chains)
            warnings.warn(msg, diagnostics.ConvergenceWarning, stacklevel=2)
        return table

    def summary(self, x_train=None) -> str:
        """A printable summary of the fit: the model, the run, and the
        convergence check with what to do (`diagnostics` computes it; nothing
        is warned here, the findings are in the text).

        Returns a `str` that displays as text in a notebook; `x_train` as
        in `diagnostics`.
        """
        table = self._diagnostics(x_train)
        problems, notes = table.attrs['problems'], table.attrs['notes']
        lines = [repr(self), f'{self.chains} chain{"s" if self.chains > 1 else ""}, {self.ndpost} kept draws']
        if self.accept_rate:
            sampler = " (R BART's sampler, moves='R')" if getattr(self, 'moves', None) == 'R' else ''
            rates = ', '.join(f'{move} {rate:.1%}' for move, rate in self.accept_rate.items())
            lines.append(f'acceptance{sampler}: {rates}')
        stats = []
        if 'sigma' in table.index:
            row = table.loc['sigma']
            stats.append(f'sigma: R-hat {row["rhat"]:.3f}, bulk ESS {row["ess_bulk"]:.0f}')
        if 'yhat_train (median point)' in table.index:
            median, worst = table.loc['yhat_train (median point)'], table.loc['yhat_train (worst point)']
            stats.append(f'f at the training points: median R-hat {median["rhat"]:.3f} (worst {worst["rhat"]:.3f})')
        lines.extend(stats)
        if problems:
            lines.append('convergence: WARNING. ' + diagnostics.convergence_message(problems, self.chains))
        elif stats:
            lines.append('convergence: no evidence of a problem (chains agree on f, none stuck).')
        if notes:
            lines.append(diagnostics.notes_message(notes))
        return _Text('\n'.join(lines))

    def _diagnostics(self, x_train):
        """The table of `diagnostics`, with the check's findings in its ``attrs``."""
        per_chain = self.ndpost // self.chains
        if per_chain < diagnostics.MIN_DRAWS:
            msg = (
                f'diagnostics() needs at least {diagnostics.MIN_DRAWS} kept draws '
                f'per chain, this fit has {per_chain} (ndpost={self.ndpost} over '
                f'{self.chains} chain{"s" if self.chains > 1 else ""}): refit with a larger ndpost'
            )
            raise ValueError(msg)
        rows = {}
        if not priors.OUTCOME_TYPES[self.type].binary:
            s = self.by_chain('sigma_')
            rows['sigma'] = {
                'rhat': float(diagnostics.rhat(s)),
                'ess_bulk': float(diagnostics.ess_bulk(s)),
                'ess_tail': float(diagnostics.ess_tail(s)),
                'geweke_z': float(diagnostics.geweke(s[0])),
            }
        stats = num_points = None
        if self.yhat_train is not None:
            yh = self.by_chain('yhat_train')
            stats = diagnostics.rhat(yh), diagnostics.ess_bulk(yh), diagnostics.ess_tail(yh)
            num_points = self._n
        elif x_train is not None:
            stats, num_points = self._point_stats(x_train)
        if stats is not None:
            r, eb, et = stats
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
        sigma_row = rows.get('sigma', {})
        median = rows.get('yhat_train (median point)', {})
        changed = self._trees_changed()
        stuck = () if changed is None else diagnostics.stuck_chains(changed)
        problems, notes = diagnostics.assess(
            diagnostics.ConvergenceStatistics(
                sigma_row.get('rhat'), sigma_row.get('ess_bulk'), median.get('rhat'), num_points or 0, stuck, self.chains
            )
        )
        table = pd.DataFrame(rows).T
        table.attrs.update(problems=problems, notes=notes, advice=diagnostics.notes_message(notes))
        return table

    def _trees_changed(self):
        """`bartz.diagnostics.trees_changed` of the kept forests, or None
        when the fit keeps no forest per draw of each chain."""
        trace = self._trace
        if trace is None or trace.var_tree.shape[0] != self.ndpost:
            return None
        return diagnostics.trees_changed(trace.var_tree, trace.split_tree, self.chains)

    def _point_stats(self, x, chunk_bytes=64 * 2**20):
        """R-hat, bulk and tail ESS of f at each row of `x` (``predict``
        draws), a chunk of rows at a time: never all ``ndpost`` times rows
        draws at once."""
        model, binning = predict_mod.from_fit(self)
        options = self._predict_options('draws', None, False, 0, grove.DEFAULT_MAX_MEMORY)
        m = predict_mod.num_rows(x)
        if m == 0:  # (not rows: predict's checks say what x_train must be)
            predict_mod.predict_rows(x, model, binning, name='x_train', **options)
            msg = f'x_train must have at least one row, got {m}'
            raise ValueError(msg)
        step = max(1, chunk_bytes // (4 * self.ndpost))
        out = [[], [], []]
        for start in range(0, m, step):
            rows = x.iloc[start : start + step] if hasattr(x, 'iloc') else x[start : start + step]
            draws = predict_mod.predict_rows(rows, model, binning, name='x_train', **options)
            yh = draws.reshape(self.chains, self.ndpost // self.chains, -1)
            for acc, stat in zip(out, (diagnostics.rhat, diagnostics.ess_bulk, diagnostics.ess_tail), strict=True):
                acc.append(np.asarray(stat(yh)))
        return tuple(np.concatenate(acc) for acc in out), m

    def _convergence_draws(self, X=None):
        """Draws checked for convergence: sigma ``(chains, draws)`` (None for
        binary outcomes) and f ``(chains, draws, points)`` at the training
        points of `bartz.diagnostics.check_points`, from ``yhat_train``, or,
        when it was not saved, from the trees at the binned training points
        `X` (None without `X`)."""
        sigma = None if priors.OUTCOME_TYPES[self.type].binary else self.by_chain('sigma_')
        points = diagnostics.check_points(self._n)
        if self.yhat_train is not None:
            f = np.asarray(self.yhat_train)[:, points]
        elif X is not None:
            m = points.size
            Xc = np.pad(np.asarray(X)[:, points], ((0, 0), (0, buckets.bucket_length(m) - m)))
            f = packaging.evaluate_fit(self, Xc, m, 'draws', grove.DEFAULT_MAX_MEMORY, link=None)
        else:
            return sigma, None
        return sigma, f.reshape(self.chains, self.ndpost // self.chains, -1)


class _Text(str):
    """Text that a notebook and the REPL display as such, not as a quoted string."""

    __slots__ = ()

    def __repr__(self):
        return str(self)


def package(
    *,
    outcome,
    settings,
    prior,
    encoding,
    splits,
    kept,
    trace,
    burn_sigma2,
    info,
    n,
    X,
    X_test,
    n_test,
    mesh,
) -> BARTFit:
    """Make the `BARTFit` of a run: the R-style attributes from the trace.

    ``trace`` has the draws chain after chain, its ``fit_train`` cut to the
    ``n`` real points; ``burn_sigma2`` is ``(nskip, chains)``; ``X`` the
    binned (padded) training predictors, ``X_test`` the `bin_matrix` of the
    ``n_test`` rows of ``x_test`` (or None).

    The fit's settings and trees come first; then the stages of `STAGES`,
    in order: the draws kept nowhere else (sigma, the split counts and
    probabilities), ``yhat_train``, the predictions at ``x_test``. A Ctrl-C
    in a stage returns the fit without the attributes not computed yet
    (None), says so on stderr, and records the stage and the attributes in
    ``fit.run_info.interrupted_in`` and ``.missing``; a Ctrl-C before the
    trees are kept raises `KeyboardInterrupt` (after a message).

    The summaries (``yhat_train_mean``, ...) are float64, from the float32
    draws in the trees' standardised units, mapped to the data's units on
    the host (`bartz.api.predict.to_data_units`): right also where float32
    cannot hold ``offset + scale * f`` or its sum over draws (y near 1e38
    or below 1e-38). The draws stay float32.
    """
    try:
        fit = BARTFit(
            **packaging.fit_attributes(
                outcome=outcome,
                settings=settings,
                prior=prior,
                encoding=encoding,
                splits=splits,
                kept=kept,
                trace=trace,
                info=info,
                n=n,
                mesh=mesh,
                has_test=X_test is not None,
            )
        )
    except KeyboardInterrupt:
        print('bartz: interrupted by Ctrl-C before the trees were kept; nothing to return.', file=sys.stderr)
        raise
    stages = packaging.stages(
        fit,
        outcome=outcome,
        settings=settings,
        prior=prior,
        encoding=encoding,
        kept=kept,
        trace=trace,
        burn_sigma2=burn_sigma2,
        X=X,
        X_test=X_test,
        n=n,
        n_test=n_test,
    )
    packaging.finish(fit, stages)
    return fit
