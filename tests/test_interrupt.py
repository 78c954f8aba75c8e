"""Ctrl-C never loses finished draws, and the summaries of a fit are float64.

A Ctrl-C is simulated by a function that raises `KeyboardInterrupt` at one
point of `gbart` (monkeypatched), or, where only a real signal tests the
code (an update that must not stop half way), by ``signal.raise_signal``.
After the sampling, `gbart` returns the fit with what was done: the tests
compare it with an uninterrupted fit of the same seed.

The fits use the shapes of tests/test_BART.py and tests/test_predict.py
(n=100, p=3, 20 trees, 50 draws), so they share its compiled sampler.
"""

import copy
import re
import signal
import threading
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from bartz import BARTFit, diagnostics, gbart
from bartz.run import loop as mcmcloop
from bartz.api import fit as fit_mod
from bartz.api import packaging
from bartz.api import predict as predict_mod
from bartz.diagnostics import ConvergenceWarning

N, P, N_TEST = 100, 3, 30
SMALL = {'ntree': 20, 'ndpost': 50, 'nskip': 20, 'printevery': None, 'seed': 0}
# powers of two: y times one standardises to the same float32 data bit for
# bit, so the fit's draws in standardised units are those of y
BIG = 2.0**123  # about 1.06e37
TINY = 2.0**-130  # about 7.3e-40, below float32's smallest normal number (1.2e-38)


@pytest.fixture(scope='module')
def data():
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(N, P))
    y = np.sin(6 * x[:, 0]) + 2 * x[:, 1] + 0.1 * rng.normal(size=N)
    x_test = rng.uniform(size=(N_TEST, P))
    return x, y, x_test


@pytest.fixture(scope='module')
def reference(data):
    """The uninterrupted fit."""
    x, y, x_test = data
    return gbart(x, y, x_test=x_test, **SMALL)


@pytest.fixture
def python_sigint():
    """SIGINT raises KeyboardInterrupt, as in an interactive session (a
    process started in the background may inherit it ignored)."""
    assert threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def raise_interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def fit_keeping(*args, **kwargs):
    """`gbart`, with a KeyboardInterrupt that escapes it (the run lost) a
    test failure, not the end of the test session."""
    try:
        return gbart(*args, **kwargs)
    except KeyboardInterrupt:
        pytest.fail('KeyboardInterrupt escaped gbart: the run was lost')


def draws_in_message(err, phrase):
    """The draw count of the stderr line that contains `phrase`."""
    (line,) = [line for line in err.splitlines() if phrase in line]
    return int(re.search(r'(\d+) draws', line).group(1))


def assert_same_draws(fit, reference, names):
    for name in names:
        assert_array_equal(getattr(fit, name), getattr(reference, name), err_msg=name)


# ---------------------------------------------------------------- after the sampling


def test_interrupt_while_predicting_at_x_test(monkeypatch, capsys, data, reference):
    """The fit keeps its draws; yhat_test is None, and predict computes it."""
    x, y, x_test = data
    monkeypatch.setattr(packaging, 'evaluate_fit', raise_interrupt)
    fit = fit_keeping(x, y, x_test=x_test, **SMALL)
    monkeypatch.undo()
    assert isinstance(fit, BARTFit)
    assert fit.yhat_train.shape == (fit.ndpost, N) == (SMALL['ndpost'], N)
    assert_same_draws(fit, reference, ['yhat_train', 'yhat_train_mean', 'sigma', 'sigma_', 'varcount', 'varprob'])
    assert fit.yhat_test is None
    assert fit.yhat_test_mean is None
    info = fit.run_info
    assert info.interrupted
    assert info.interrupted_in == 'x_test'
    assert info.missing == ('yhat_test', 'yhat_test_mean')
    assert_array_equal(fit.predict(x_test), reference.yhat_test)
    err = capsys.readouterr().err
    assert 'without yhat_test, yhat_test_mean (left None; fit.predict(x_test) computes yhat_test)' in err
    assert draws_in_message(err, 'while predicting at x_test') == fit.ndpost


def test_interrupt_in_the_convergence_check(monkeypatch, capsys, data, reference):
    """The fit is complete, unchecked; no convergence warning."""
    x, y, x_test = data
    monkeypatch.setattr(diagnostics, 'convergence_problems', raise_interrupt)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        fit = fit_keeping(x, y, x_test=x_test, **SMALL)
    assert not [w for w in caught if issubclass(w.category, ConvergenceWarning)]
    assert_same_draws(fit, reference, ['yhat_train', 'yhat_test', 'yhat_test_mean', 'sigma', 'varcount'])
    assert fit.run_info.interrupted_in == 'convergence check'
    assert fit.run_info.missing == ()
    err = capsys.readouterr().err
    assert 'unchecked (fit.diagnostics() checks it)' in err
    assert draws_in_message(err, 'while checking convergence') == fit.ndpost


def test_interrupt_while_collecting_the_splits(monkeypatch, capsys, data, reference):
    """A Ctrl-C in an early stage: sigma is kept, the later stages are
    skipped (None), and the trees predict."""
    x, y, x_test = data
    monkeypatch.setattr(packaging, 'set_variable_use', raise_interrupt)
    fit = fit_keeping(x, y, x_test=x_test, **SMALL)
    assert_same_draws(fit, reference, ['sigma', 'sigma_', 'sigma_mean'])
    missing = ('varcount', 'varcount_mean', 'varprob', 'varprob_mean', 'rm_const')
    missing += ('yhat_train', 'yhat_train_mean', 'yhat_test', 'yhat_test_mean')
    assert fit.run_info.missing == missing
    assert fit.run_info.interrupted_in == 'variable use'
    for name in missing:
        assert getattr(fit, name) is None
    assert_array_equal(fit.predict(x_test), reference.yhat_test)
    assert_allclose(fit.predict(x), reference.yhat_train, rtol=1e-5, atol=1e-5)
    err = capsys.readouterr().err
    assert '(left None; fit.predict(x_train) computes yhat_train; fit.predict(x_test) computes yhat_test)' in err
    assert draws_in_message(err, 'while collecting the splits') == fit.ndpost


def test_ctrl_c_never_leaves_yhat_train_half_updated(monkeypatch, capsys, python_sigint, data, reference):
    """A real SIGINT while yhat_train is mapped to the data's units in
    place (the only copy of those draws) waits for the end of the update."""
    x, y, x_test = data
    original = predict_mod.to_data_units
    calls = []

    def signal_first(f, *args, **kwargs):
        calls.append(f.shape)
        if len(calls) == 1:
            signal.raise_signal(signal.SIGINT)
        return original(f, *args, **kwargs)

    monkeypatch.setattr(predict_mod, 'to_data_units', signal_first)
    fit = fit_keeping(x, y, x_test=x_test, **SMALL)
    assert calls[0] == (SMALL['ndpost'], N)
    assert_same_draws(fit, reference, ['yhat_train', 'yhat_train_mean'])
    assert fit.run_info.interrupted_in == 'yhat_train'
    assert fit.run_info.missing == ('yhat_test', 'yhat_test_mean')
    assert draws_in_message(capsys.readouterr().err, 'while computing yhat_train') == fit.ndpost


def test_interrupt_after_the_last_iteration(monkeypatch, capsys, data, reference):
    """A Ctrl-C while `run_mcmc` puts the draws of its chunks together
    returns them all."""
    x, y, x_test = data
    original = mcmcloop.collect_draws
    calls = []

    def interrupt_first(*args):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return original(*args)

    monkeypatch.setattr(mcmcloop, 'collect_draws', interrupt_first)
    fit = fit_keeping(x, y, x_test=x_test, **SMALL)
    assert_same_draws(fit, reference, ['yhat_train', 'yhat_test', 'sigma', 'varcount'])
    assert fit.run_info.interrupted
    assert fit.run_info.interrupted_in == 'sampling'
    assert fit.run_info.missing == ()
    assert draws_in_message(capsys.readouterr().err, 'after the last iteration') == fit.ndpost


def test_binary_fit_interrupted_at_x_test(monkeypatch, capsys, data):
    """Probit: prob_train is kept, the probabilities at x_test are None,
    and predict computes them; the means are float64."""
    x, y, x_test = data
    monkeypatch.setattr(packaging, 'evaluate_fit', raise_interrupt)
    fit = fit_keeping(x, (y > np.median(y)).astype(float), x_test=x_test, type='pbart', **SMALL)
    monkeypatch.undo()
    assert fit.prob_train.shape == (fit.ndpost, N)
    assert fit.prob_train_mean.dtype == fit.yhat_train_mean.dtype == np.float64
    assert fit.run_info.missing == ('yhat_test', 'yhat_test_mean', 'prob_test', 'prob_test_mean')
    assert_allclose(fit.predict(x), fit.prob_train, rtol=1e-5, atol=1e-6)
    assert fit.predict(x_test, kind='mean').dtype == np.float64
    assert 'fit.predict(x_test) computes prob_test' in capsys.readouterr().err


# ---------------------------------------------------------------- during the sampling


def test_two_chains_interrupted_twice_count_all_draws(monkeypatch, capsys, data):
    """With 2 chains, Ctrl-C during the sampling, then while predicting at
    x_test: both messages count the draws of both chains, as fit.ndpost."""
    x, y, x_test = data

    def update(self, figures):
        if figures['iteration'] >= SMALL['nskip'] + 10:
            raise KeyboardInterrupt

    monkeypatch.setattr(mcmcloop.Progress, 'update', update)
    monkeypatch.setattr(packaging, 'evaluate_fit', raise_interrupt)
    fit = fit_keeping(x, y, x_test=x_test, **{**SMALL, 'mc_cores': 2, 'printevery': 10})
    monkeypatch.undo()
    assert fit.ndpost == 2 * 10
    assert fit.yhat_train.shape == (fit.ndpost, N)
    assert fit.sigma_.shape == (fit.ndpost,)
    assert fit.yhat_test is None
    assert fit.run_info.interrupted_in == 'x_test'
    assert fit.predict(x_test).shape == (fit.ndpost, N_TEST)
    assert_allclose(fit.predict(x), fit.yhat_train, rtol=1e-5, atol=1e-5)
    err = capsys.readouterr().err
    assert draws_in_message(err, 'collected so far') == fit.ndpost
    assert draws_in_message(err, 'while predicting at x_test') == fit.ndpost


def test_nothing_to_return(monkeypatch, capsys, data):
    """A Ctrl-C before the first kept draw: the message says how far the
    run got, and the KeyboardInterrupt propagates."""
    x, y, _ = data
    monkeypatch.setattr(mcmcloop.Progress, 'update', lambda self, figures: raise_interrupt())
    with pytest.raises(KeyboardInterrupt):
        gbart(x, y, **{**SMALL, 'printevery': 10})
    total = SMALL['nskip'] + SMALL['ndpost']
    assert f'after 10 of {total} iterations, before any draw was kept; nothing to return' in capsys.readouterr().err


# ---------------------------------------------------------------- the convergence check never loses the run


def test_nonfinite_draws_warn_instead_of_raising(reference):
    bad = copy.copy(reference)
    bad.run_info = None
    bad.yhat_train = reference.yhat_train.copy()
    bad.yhat_train[:20, 0] = np.inf
    bad.sigma_ = reference.sigma_.copy()
    bad.sigma_[3] = np.nan
    with pytest.warns(RuntimeWarning, match=r'NaN or infinite values \(1 of sigma, 20 of f at 100 training points\)'):
        fit_mod.warn_convergence(bad)


def test_a_failing_convergence_check_warns(monkeypatch, reference):
    def fail(*args):
        msg = 'something unforeseen'
        raise ValueError(msg)

    monkeypatch.setattr(diagnostics, 'convergence_problems', fail)
    with pytest.warns(RuntimeWarning, match=r'convergence check failed \(ValueError: something unforeseen\)'):
        fit_mod.warn_convergence(reference)


# ---------------------------------------------------------------- float64 summaries


def test_result_dtypes(data, reference):
    _, _, x_test = data
    fit = reference
    float32 = ['yhat_train', 'yhat_test']
    float64 = ['yhat_train_mean', 'yhat_test_mean', 'sigma', 'sigma_', 'varprob', 'varprob_mean', 'varcount_mean']
    assert {name: getattr(fit, name).dtype for name in float32} == dict.fromkeys(float32, np.float32)
    assert {name: getattr(fit, name).dtype for name in float64} == dict.fromkeys(float64, np.float64)
    assert isinstance(fit.sigma_mean, float)
    assert fit.predict(x_test).dtype == np.float32
    for kind, q in (('mean', None), ('sd', None), ('quantiles', [0.1, 0.9])):
        assert fit.predict(x_test, kind=kind, q=q).dtype == np.float64


def test_y_near_1e37_gives_finite_means(data, reference):
    """The float32 draws of y times 1e37 fit, but their sum over 50 draws
    does not: the means are float64, from the standardised draws."""
    x, y, x_test = data
    fit = gbart(x, BIG * y, x_test=x_test, **SMALL)
    for name in ('yhat_train_mean', 'yhat_test_mean'):
        mean = getattr(fit, name)
        assert np.all(np.isfinite(mean)), name
        assert_allclose(mean / BIG, getattr(reference, name), rtol=1e-6, err_msg=name)
    assert_allclose(fit.predict(x_test, kind='mean') / BIG, reference.predict(x_test, kind='mean'), rtol=1e-6)
    assert_allclose(fit.sigma_mean / BIG, reference.sigma_mean, rtol=1e-6)


def test_y_below_1e38_predicts_nonzero(data, reference):
    """y times 1e-39, below float32's normal numbers: the offset and scale
    are applied on the host, the summaries in float64."""
    x, y, x_test = data
    fit = gbart(x, TINY * y, x_test=x_test, **SMALL)
    mean = fit.predict(x_test, kind='mean')
    assert np.all(mean != 0)
    assert_allclose(mean / TINY, reference.predict(x_test, kind='mean'), rtol=1e-6)
    assert_allclose(fit.predict(x_test, kind='sd') / TINY, reference.predict(x_test, kind='sd'), rtol=1e-6)
    assert_allclose(fit.yhat_train_mean / TINY, reference.yhat_train_mean, rtol=1e-6)
    assert_allclose(fit.yhat_test_mean / TINY, reference.yhat_test_mean, rtol=1e-6)
    # the draws are float32 subnormals: about 5 significant digits at this scale
    assert_allclose(fit.yhat_test / TINY, reference.yhat_test, rtol=0, atol=1e-4)
