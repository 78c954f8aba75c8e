"""Tests for several chains on one CPU device: separate calls on threads.

On one CPU device `bartz.mcmcloop.run_mcmc` runs the chains of a vmapped
state as separate calls of a one-chain program (`bartz.run.chains.SplitChains`),
on up to as many threads as cores, instead of one vmapped program. The
draws must be those of the vmapped program (same keys per chain, same
arithmetic, up to float rounding) for every kind of model, and must not
depend on the number of threads. The test session has 4 virtual CPU
devices (conftest.py), so `gbart` spreads 2 or 4 chains over devices; 3
chains (coprime with 4) stay on one device and take this path.
"""

import signal
import threading

import jax
import numpy as np
import pytest
from jax import random

from bartz import gbart
from bartz.run import chains
from bartz.run import loop as mcmcloop
from bartz.sampler import step as mcmcstep
from tests.coupling import assert_same_fit
from tests.test_mcmcstep import data_state

CHAINS = 3
N = 120
SETTINGS = {'ntree': 20, 'nskip': 15, 'ndpost': CHAINS * 10, 'mc_cores': CHAINS, 'printevery': None, 'seed': 11}
VMAPPED = lambda num_chains, mesh: 0  # noqa: E731 (the vmapped program, as on a GPU)


def _data(kind):
    rng = np.random.default_rng(5)
    x = rng.uniform(size=(N, 4))
    y = np.sin(4 * x[:, 0]) + x[:, 1] + 0.3 * rng.normal(size=N)
    kwargs = {}
    if kind in ('pbart', 'lbart'):
        y = (y > np.median(y)).astype(float)
        kwargs['type'] = kind
    elif kind == 'weights':
        kwargs['w'] = rng.uniform(0.5, 2.0, N)
    elif kind == 'dart':
        kwargs['sparse'] = True
    elif kind == 'warmstart':
        kwargs['warmstart'] = 1
    return x, y, kwargs


def _fit(kind, monkeypatch, workers=None):
    x, y, kwargs = _data(kind)
    with monkeypatch.context() as m:
        if workers is not None:
            m.setattr(mcmcloop, 'chain_workers', workers)
        return gbart(x, y, x[:7], **SETTINGS, **kwargs)


def _assert_same_draws(a, b, exact):
    """Bit for bit, or (two programs) up to float rounding until a decision
    that rounding flips (see `coupling`)."""
    if not exact:
        assert_same_fit(a, b)
        return
    np.testing.assert_array_equal(a.varcount, b.varcount)
    np.testing.assert_array_equal(a.yhat_train, b.yhat_train)
    np.testing.assert_array_equal(a.yhat_test, b.yhat_test)
    if getattr(a, 'sigma', None) is not None:
        np.testing.assert_array_equal(a.sigma, b.sigma)


def test_split_is_the_default_path(monkeypatch):
    used = []
    original = mcmcloop.SplitChains

    def spy(*args, **kwargs):
        used.append(args[2])
        return original(*args, **kwargs)

    monkeypatch.setattr(mcmcloop, 'SplitChains', spy)
    fit = _fit('wbart', monkeypatch)
    assert used == [CHAINS]
    assert fit.chains == CHAINS
    assert fit.yhat_train.shape == (SETTINGS['ndpost'], N)


# pbart, lbart and dart compile programs of their own (16-27 s each): with the slow tests
_KINDS = ['wbart', 'pbart', 'lbart', 'weights', 'dart', 'warmstart']
_SLOW_KINDS = {'pbart', 'lbart', 'dart'}


@pytest.mark.parametrize('kind', [pytest.param(k, marks=pytest.mark.slow) if k in _SLOW_KINDS else k for k in _KINDS])
def test_same_draws_as_vmapped(kind, monkeypatch):
    split = _fit(kind, monkeypatch)
    vmapped = _fit(kind, monkeypatch, workers=VMAPPED)
    _assert_same_draws(split, vmapped, exact=False)


def test_draws_do_not_depend_on_threads(monkeypatch):
    """Each chain is its own call of the same program: any number of
    threads gives the same draws bit for bit."""
    one = _fit('wbart', monkeypatch, workers=lambda num_chains, mesh: 1)
    three = _fit('wbart', monkeypatch, workers=lambda num_chains, mesh: num_chains)
    _assert_same_draws(one, three, exact=True)


@pytest.mark.no_key_reuse_check  # the same key split on purpose, again and again
def test_keys_independent_of_chain_count():
    """The key of chain c is ``split(key, chains)[c]`` for every number of
    chains: with JAX's partitionable threefry that is ``fold_in(key, c)``,
    so one compiled runner serves any ``mc_cores``."""
    assert chains.keys_by_fold_in()
    key = random.key(3)
    for num_chains in (2, 3, 8):
        keys = random.split(key, num_chains)
        for c in range(num_chains):
            want = random.key_data(keys[c])
            np.testing.assert_array_equal(random.key_data(chains.chain_key(key, c, 0)), want)
            np.testing.assert_array_equal(random.key_data(chains.chain_key(key, c, num_chains)), want)


@pytest.mark.parametrize('chain_major', [False, True])
def test_run_mcmc_final_state(monkeypatch, chain_major):
    """`run_mcmc` returns the chains' final states stacked as the vmapped
    run's, and its traces in the layout asked, ``(draws, chains, ...)`` or
    ``(chains, draws, ...)``."""
    state = mcmcstep.init_chains(data_state(0), CHAINS)
    n_save = 4
    kwargs = {'n_burn': 3, 'n_save': n_save, 'printevery': None, 'num_chains': CHAINS, 'chain_major': chain_major}
    copy = jax.tree.map(np.array, state)
    split_state, split_trace, _ = mcmcloop.run_mcmc(random.key(1), state, **kwargs)
    monkeypatch.setattr(mcmcloop, 'chain_workers', VMAPPED)
    vmapped_state, vmapped_trace, _ = mcmcloop.run_mcmc(random.key(1), jax.tree.map(jax.device_put, copy), **kwargs)
    for a, b in zip(jax.tree.leaves(split_state), jax.tree.leaves(vmapped_state), strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), rtol=1e-5, atol=1e-5)
    lead = (CHAINS, n_save) if chain_major else (n_save, CHAINS)
    for a, b in zip(jax.tree.leaves(split_trace), jax.tree.leaves(vmapped_trace), strict=True):
        assert a.shape[:2] == b.shape[:2] == lead
        np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), rtol=1e-5, atol=1e-5)


def test_interrupt_returns_draws(monkeypatch):
    """Ctrl-C while the chain threads run stops cleanly at a chunk's end
    with the draws collected so far."""
    x, y, _ = _data('wbart')
    chunks = []

    def interrupt_after_two(figures):
        chunks.append(figures['iteration'])
        if len(chunks) == 2:
            signal.raise_signal(signal.SIGINT)

    original = mcmcloop.run_mcmc

    def with_callback(*args, **kwargs):
        return original(*args, **kwargs, callback=interrupt_after_two)

    assert threading.current_thread() is threading.main_thread()
    monkeypatch.setattr(mcmcloop, 'run_mcmc', with_callback)
    settings = {**SETTINGS, 'printevery': 10, 'nskip': 10, 'ndpost': CHAINS * 30}
    # A process started in the background without job control (`cmd &` in a
    # script) inherits SIGINT ignored, and Python keeps it so: install the
    # handler of an interactive session, which raises KeyboardInterrupt.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        fit = gbart(x, y, **settings)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert fit.run_info.interrupted
    assert fit.ndpost == CHAINS * 10
    assert np.all(np.isfinite(fit.yhat_train))
