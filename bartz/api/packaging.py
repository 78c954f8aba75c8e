"""Packaging a run into a `bartz.api.fit.BARTFit`: its stages and Ctrl-C.

`bartz.api.fit.package` sets a fit's settings and trees (`fit_attributes`),
then runs the stages of `STAGES` in order (`stages`, `finish`): the draws
kept nowhere else (sigma, the split counts and probabilities),
``yhat_train``, the predictions at ``x_test``. A Ctrl-C in a stage returns
the fit without the attributes not computed yet (None), says so on stderr
and records it in ``fit.run_info``. `warn_convergence` is the check
`bartz.gbart` runs last. The functions here take any fit with the
attributes of `bartz.api.fit.BARTFit` (this module sits below it).
"""

import contextlib
import functools
import signal
import sys
import threading
import warnings
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pandas as pd
import jax

from bartz import _warn, diagnostics
from bartz.api import predict as predict_mod
from bartz.forest import grove
from bartz.prep import cutpoints as prepcovars
from bartz.prep import sizes as buckets
from bartz.sampler.moves import MOVE_NAMES

__all__ = [
    'STAGES',
    'bin_matrix',
    'evaluate_fit',
    'finish',
    'fit_attributes',
    'link_params',
    'set_variable_use',
    'stages',
    'warn_convergence',
    'x_test_link',
]

STAGES = {
    'trees': 'moving the trees to the device',
    'sigma': 'collecting the draws of sigma',
    'variable use': 'collecting the splits per predictor',
    'yhat_train': 'computing yhat_train',
    'x_test': 'predicting at x_test',
    'convergence check': 'checking convergence',
}
"""The stages of `bartz.api.fit.package`, in the order they run, and the
convergence check (`warn_convergence`), with what the message of a Ctrl-C
in each says the fit was doing; ``fit.run_info.interrupted_in`` is one of
these names (or ``'sampling'``, `bartz.mcmcloop.run_mcmc`)."""


# ---------------------------------------------------------------- the fit's arrays


def fit_attributes(*, outcome, settings, prior, encoding, splits, kept, trace, info, n, mesh, has_test) -> dict:
    """The attributes of a fit set before its stages: what was fitted, the
    priors and settings, the run's figures and the trees (on the host,
    enough for predict, which copies them to the device, until the first
    stage), in the order `bartz.api.fit.package` sets them.

    Parameters
    ----------
    outcome, settings, prior, encoding, splits, kept, trace, info, n, mesh
        As in `bartz.api.fit.package`.
    has_test
        Whether the fit had ``x_test``; without it, its attributes are None.

    Returns
    -------
    dict
        Attribute name to value.
    """
    attributes = {
        'type': outcome.name,
        'ndpost': int(trace.leaf_tree.shape[0]),
        'ntree': settings.ntree,
        'chains': settings.mc_cores,
        'offset': float(prior.offset),
        'sigest': prior.sigest,
        'k': settings.k,
        'power': settings.power,
        'base': settings.base,
        'sigdf': settings.sigdf,
        'sigquant': settings.sigquant,
        'lambda_': prior.lambda_,
        'tau_num': prior.tau_num,
        'numcut': splits.max_split,
        'xinfo': splits.splits,
        '_scale': prior.scale,
        '_n': n,
        '_encoding': encoding,
        '_kept': kept,
        '_splits': splits,
        '_mesh': mesh,
        'nkeep': None,  # every kind of draw has ndpost rows (R's thinning: `bartz.wbart`)
        'run_info': info,
        'moves': 'R' if settings.r_birth else {m: round(float(q), 6) for m, q in zip(MOVE_NAMES, settings.move_probs, strict=True)},
        'accept_rate': {
            'grow': info.grow_accepted / max(info.grow_proposed, 1),
            'prune': info.prune_accepted / max(info.prune_proposed, 1),
            'change': info.change_accepted / max(info.change_proposed, 1),
            'swap': info.swap_accepted / max(info.swap_proposed, 1),
        },
        'elapsed': info.elapsed,
        '_trace': grove.TreeHeaps(trace.var_tree, trace.split_tree, trace.leaf_tree),
    }
    if not has_test:
        attributes['yhat_test'] = attributes['yhat_test_mean'] = None
        if outcome.binary:
            attributes['prob_test'] = attributes['prob_test_mean'] = None
    return attributes


def evaluate_fit(fit, X, m: int, kind: str, max_memory: int, link) -> np.ndarray:
    """The trees of `fit` at binned points (`bartz.api.predict.evaluate_binned`,
    the pipeline of ``predict``).

    Parameters
    ----------
    fit
        A `bartz.api.fit.BARTFit`.
    X
        ``(p, m_padded)`` binned points, padded (`bin_matrix`).
    m
        Number of real points: the first `m` columns of `X`.
    kind
        ``'draws'`` or ``'mean'``.
    max_memory
        Bytes of the temporaries of one batch of points.
    link
        A link of `bartz.grove.evaluate_trace` (None: the sum of trees in
        their standardised units).

    Returns
    -------
    numpy.ndarray
        ``(ndpost, m)`` draws, or ``(m,)`` their mean.
    """
    params = link_params(link, fit.offset, fit._scale)  # noqa: SLF001
    return predict_mod.evaluate_binned(
        X, m, fit._trace, kind=kind, link=link, link_params=params, max_memory=max_memory, mesh=fit._mesh  # noqa: SLF001
    )


def bin_matrix(arr, kept, splits):
    """Bin ``(m, p_model)`` model columns with the cut-points `splits` of
    the `kept` columns, padded on both axes (`bartz.buckets`)."""
    X = buckets.pad_predictors(prepcovars.bin_predictors_np(arr[:, kept], splits.splits))
    m = X.shape[1]
    return np.pad(X, ((0, 0), (0, buckets.bucket_length(m) - m)))


def link_params(link, offset, scale):
    """The parameters of `link` (`bartz.grove.evaluate_trace`) for a fit."""
    return {'probit': (offset,), 'logit': (offset,), 'affine': (offset, scale), None: ()}[link]


def x_test_link(binary: bool):  # noqa: ARG001
    """The link of the predictions at ``x_test`` (``yhat_test``): None, the
    sum of trees in their standardised units, for every outcome (`bartz.api.fit.package`
    adds the offset, and multiplies by the scale, on the host)."""
    return None


# ---------------------------------------------------------------- the stages


class _Stage(NamedTuple):
    """A stage of `bartz.api.fit.package`: its name (a key of `STAGES`), the
    attributes it sets, the function that sets them, and how to compute
    them otherwise."""

    name: str
    attributes: tuple
    compute: Callable[[], None]
    recover: str | None = None


def stages(fit, *, outcome, settings, prior, encoding, kept, trace, burn_sigma2, X, X_test, n, n_test) -> list:
    """The stages of `STAGES` that apply to `fit`, in order, for `finish`.

    Parameters
    ----------
    fit
        The `bartz.api.fit.BARTFit` with its `fit_attributes`.
    outcome, settings, prior, encoding, kept, trace, burn_sigma2, X, X_test, n, n_test
        As in `bartz.api.fit.package`.

    Returns
    -------
    list
        The stages: name, attributes set, the function that sets them, and
        how to compute them otherwise.
    """
    is_binary = outcome.binary
    # the draws in the data's units (binary: the latent offset + f)
    units = {'offset': prior.offset, 'data_scale': None if is_binary else prior.scale}
    probs = ('prob_train', 'prob_train_mean') if is_binary else ()
    test_probs = ('prob_test', 'prob_test_mean') if is_binary else ()
    predicted = 'prob' if is_binary else 'yhat'  # (what predict computes)
    out = [_Stage('trees', (), functools.partial(_to_device, fit))]
    if not is_binary:
        sigma = functools.partial(_set_sigma, fit, trace, burn_sigma2, prior.scale, settings.mc_cores)
        out.append(_Stage('sigma', ('sigma', 'sigma_', 'sigma_mean'), sigma))
    use = ('varcount', 'varcount_mean', 'varprob', 'varprob_mean', 'rm_const')
    out.append(_Stage('variable use', use, lambda: set_variable_use(fit, encoding, kept, trace)))
    train = functools.partial(_set_train, fit, outcome, settings, trace, X, n, **units)
    attributes = ('yhat_train', 'yhat_train_mean', *probs)
    out.append(_Stage('yhat_train', attributes, train, f'fit.predict(x_train) computes {predicted}_train'))
    if X_test is not None:
        test = functools.partial(_set_test, fit, outcome, settings, X_test, n_test, **units)
        attributes = ('yhat_test', 'yhat_test_mean', *test_probs)
        out.append(_Stage('x_test', attributes, test, f'fit.predict(x_test) computes {predicted}_test'))
    return out


def finish(fit, fit_stages: list) -> None:
    """Run the `stages` of `fit` in order (`fit_stages`); after a Ctrl-C,
    say on stderr what it left out and record it in ``fit.run_info``
    (`_run_stages`)."""
    stopped, missing, recover = _run_stages(fit, fit_stages)
    if stopped == 'trees':
        recover.insert(0, 'its trees stay in host memory: each predict copies them to the device')
    if stopped is not None:
        _record_interrupt(fit, stopped, missing, recover)


def _to_device(fit) -> None:
    """Stage 'trees': the trees to the device."""
    fit._trace = jax.device_put(fit._trace)  # noqa: SLF001


def _set_sigma(fit, trace, burn_sigma2, scale, mc_cores) -> None:
    """Stage 'sigma': the error sd with burn-in (R's ``sigma``), kept, mean."""
    ndraws = int(trace.leaf_tree.shape[0])
    sigma_kept = scale * np.sqrt(np.asarray(trace.sigma2, np.float64))  # chain after chain
    # (nskip, chains); reshaped because a run without burn-in gives a flat empty array
    sigma_burn = scale * np.sqrt(np.asarray(burn_sigma2, np.float64)).reshape(-1, mc_cores)
    if mc_cores == 1:
        fit.sigma = np.concatenate([sigma_burn[:, 0], sigma_kept])
    else:
        per_chain = ndraws // mc_cores
        fit.sigma = np.concatenate([sigma_burn, sigma_kept.reshape(mc_cores, per_chain).T])
    fit.sigma_ = sigma_kept
    fit.sigma_mean = float(sigma_kept.mean())


def _set_train(fit, outcome, settings, trace, X, n, *, offset, data_scale) -> None:
    """Stage 'yhat_train': the draws at the training points in the data's
    units, or, when they were not kept, their means from the trees."""
    if settings.save_yhat_train:
        # in place in the run's host copy of the draws where it is one
        # (`gbart`'s; then `yhat_train` is a view of it, without the
        # padding's columns): new arrays of ndpost x n values would come
        # from fresh pages, slow to touch
        fit_train = trace.fit_train
        in_place = isinstance(fit_train, np.ndarray) and fit_train.flags.writeable
        f = fit_train if in_place else np.array(fit_train)
        with _interrupts_deferred():  # (`f` may be the only copy of the draws: never half updated)
            mean = f.mean(axis=0, dtype=np.float64)
            fit.yhat_train = predict_mod.to_data_units(f, offset, data_scale)
            fit.yhat_train_mean = predict_mod.to_data_units(mean, offset, data_scale)
        if outcome.binary:
            fit.prob_train = outcome.prob(fit.yhat_train)
            fit.prob_train_mean = fit.prob_train.mean(axis=0, dtype=np.float64)
    else:
        # the draws were never kept: the means come from the trees, in bounded memory
        max_memory = settings.max_memory
        fit.yhat_train = None
        mean = evaluate_fit(fit, X, n, 'mean', max_memory, link=None).astype(np.float64)
        fit.yhat_train_mean = predict_mod.to_data_units(mean, offset, data_scale)
        if outcome.binary:
            fit.prob_train = None
            fit.prob_train_mean = evaluate_fit(fit, X, n, 'mean', max_memory, link=outcome.link).astype(np.float64)


def _set_test(fit, outcome, settings, X_test, n_test, *, offset, data_scale) -> None:
    """Stage 'x_test': the draws at ``x_test`` and their means."""
    # (a copy: the device's output is read-only on the host)
    link = x_test_link(outcome.binary)
    f = np.array(evaluate_fit(fit, X_test, n_test, 'draws', settings.max_memory, link=link))
    mean = f.mean(axis=0, dtype=np.float64)
    fit.yhat_test = predict_mod.to_data_units(f, offset, data_scale)
    fit.yhat_test_mean = predict_mod.to_data_units(mean, offset, data_scale)
    if outcome.binary:
        fit.prob_test = outcome.prob(fit.yhat_test)
        fit.prob_test_mean = fit.prob_test.mean(axis=0, dtype=np.float64)


def set_variable_use(fit, encoding, kept, trace) -> None:
    """Stage 'variable use': varcount and varprob per encoded column, from
    the kept model columns, and ``rm_const``.

    Parameters
    ----------
    fit
        The `bartz.api.fit.BARTFit` whose attributes are set.
    encoding
        The `bartz.encoding.Encoding` of ``x_train``.
    kept
        ``(p_model,)`` bool: the model columns kept by ``rm_const``.
    trace
        The run's trace: ``varcount`` and ``log_s`` of the kept columns.
    """
    ndraws = int(trace.leaf_tree.shape[0])
    p_model = kept.size
    varcount = np.zeros((ndraws, p_model), np.int64)
    varcount[:, kept] = trace.varcount
    varprob = np.zeros((ndraws, p_model))
    if trace.log_s is not None:
        varprob[:, kept] = np.exp(trace.log_s)
    elif encoding.augmented:
        # the uniform prior, weighted: half for each copy of a column with missing values
        weight = np.exp(encoding.log_split_weights().astype(np.float64)) * kept
        varprob[:] = weight / max(weight.sum(), 1e-300)
    else:
        varprob[:, kept] = 1.0 / max(kept.sum(), 1)
    if encoding.augmented:
        varcount = encoding.model_to_encoded(varcount)
        varprob = encoding.model_to_encoded(varprob)
    names = encoding.encoded_names
    if names is not None:
        fit.varcount = pd.DataFrame(varcount, columns=names)
        fit.varprob = pd.DataFrame(varprob, columns=names)
        fit.varcount_mean = fit.varcount.mean(axis=0)
        fit.varprob_mean = fit.varprob.mean(axis=0)
    else:
        fit.varcount = varcount
        fit.varprob = varprob
        fit.varcount_mean = varcount.mean(axis=0)
        fit.varprob_mean = varprob.mean(axis=0)
    kept_encoded = encoding.model_to_encoded(kept.astype(np.int64)) > 0
    fit.rm_const = np.flatnonzero(kept_encoded)


def _run_stages(fit, stages: list) -> tuple[str | None, list, list]:
    """Run the `_Stage` s in order, until a Ctrl-C.

    After a `KeyboardInterrupt` (in a stage or between two), the later
    stages do not run: their attributes, and those of the stage it stopped
    that were not set yet, are set to None. (Each attribute is set by one
    assignment of a finished value: one that is set is right.) Returns the
    stage stopped (None if none), the attributes left None and how to
    compute them."""
    done = 0
    try:
        for stage in stages:
            stage.compute()
            done += 1
    except KeyboardInterrupt:
        missing, recover = [], []
        for stage in stages[done:]:
            unset = [name for name in stage.attributes if not hasattr(fit, name)]
            for name in unset:
                setattr(fit, name, None)
            missing += unset
            if unset and stage.recover:
                recover.append(stage.recover)
        return stages[min(done, len(stages) - 1)].name, missing, recover
    return None, [], []


def _record_interrupt(fit, stage: str, missing, recover) -> None:
    """Say on stderr what a Ctrl-C in `stage` (of `STAGES`) left out of
    `fit`, and record it in ``fit.run_info``."""
    if fit.run_info is not None:
        fit.run_info = fit.run_info._replace(interrupted=True, interrupted_in=stage, missing=tuple(missing))
    msg = f'bartz: interrupted by Ctrl-C while {STAGES[stage]}; returning the fit with its {fit.ndpost} draws'
    if stage == 'convergence check':
        msg += ', unchecked'
    notes = list(recover)
    if missing:
        msg += f', without {", ".join(missing)}'
        notes.insert(0, 'left None')
    if notes:
        msg += f' ({"; ".join(notes)})'
    print(msg + '.', file=sys.stderr)


@contextlib.contextmanager
def _interrupts_deferred():
    """Hold a Ctrl-C (SIGINT) back until the end of the block, and raise it
    there: for a block that must not stop half way (an update in place of
    the run's only copy of the draws). Signals reach the main thread only;
    elsewhere, or where Python does not handle SIGINT, this does nothing."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield
        return
    received = []
    signal.signal(signal.SIGINT, lambda signum, frame: received.append((signum, frame)))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        previous(*received[0])


# ---------------------------------------------------------------- the convergence check


def warn_convergence(fit, X=None) -> None:
    """Warn a `bartz.diagnostics.ConvergenceWarning` if `fit` fails the
    checks of `bartz.diagnostics.convergence_problems`: the median R-hat of
    f at (at most) 100 fixed training points, a stuck chain. `X`: the
    binned training points, used when ``yhat_train`` was not saved.

    The check never loses the fit: draws with NaN or infinite values are
    warned as such (a `RuntimeWarning`: nothing computed from them can be
    trusted) instead of checked; a Ctrl-C skips the check, says so on
    stderr and records it in ``fit.run_info`` (as `package` does); any
    other failure is warned. After a Ctrl-C that stopped `package`, the
    check does not run."""
    info = fit.run_info
    if info is not None and info.interrupted_in in STAGES:  # the user asked to stop
        return
    try:
        sigma, f = fit._convergence_draws(X)  # noqa: SLF001
        message = _nonfinite_message(sigma, f)
        if message:
            warnings.warn(message, RuntimeWarning, stacklevel=_warn.user_stacklevel())
            return
        problems = diagnostics.convergence_problems(sigma, f, fit._trees_changed())  # noqa: SLF001
    except KeyboardInterrupt:
        _record_interrupt(fit, 'convergence check', (), ('fit.diagnostics() checks it',))
        return
    except Exception as exc:  # noqa: BLE001: a diagnostic must not lose the run
        msg = f'bartz: the convergence check failed ({type(exc).__name__}: {exc}); the fit is returned unchecked'
        warnings.warn(msg, RuntimeWarning, stacklevel=_warn.user_stacklevel())
        return
    if problems:
        msg = diagnostics.convergence_message(problems, fit.chains)
        warnings.warn(msg, diagnostics.ConvergenceWarning, stacklevel=_warn.user_stacklevel())


def _nonfinite_message(sigma, f) -> str | None:
    """The warning for the draws checked for convergence (`warn_convergence`)
    if some are NaN or infinite, else None."""
    counts = []
    if sigma is not None:
        counts.append(('sigma', np.size(sigma) - int(np.count_nonzero(np.isfinite(sigma)))))
    if f is not None:
        counts.append((f'f at {f.shape[-1]} training points', f.size - int(np.count_nonzero(np.isfinite(f)))))
    bad = [f'{count} of {name}' for name, count in counts if count]
    if not bad:
        return None
    return (
        f'bartz: the draws contain NaN or infinite values ({", ".join(bad)}): convergence was not checked, '
        'and any conclusion drawn from these draws is at risk. The float32 computations overflowed, in '
        'the sampler or in the draws: rescale y_train, or check the priors (k, tau_num, sigest, lambda_).'
    )

