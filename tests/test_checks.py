"""Checks of the front end's arguments (`bartz.prep.checks`): seeds, the tree
prior, numbers beyond float64."""

import jax
import numpy as np
import pandas as pd
import pytest
from jax import random
from numpy.testing import assert_array_equal

from bartz import BARTRegressor, gbart
from bartz.prep import checks as _checks
from bartz.sampler import step as mcmcstep

SMALL = {'ntree': 5, 'ndpost': 10, 'nskip': 5, 'printevery': None}


@pytest.fixture(scope='module')
def data():
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(60, 2))
    y = np.sin(6 * x[:, 0]) + 0.1 * rng.normal(size=60)
    return x, y


@pytest.fixture
def no_sampler(monkeypatch):
    """Make a call that reaches the sampler fail the test: the checks must
    refuse before anything is compiled."""

    def init(**kwargs):
        pytest.fail('the sampler was set up: the argument was not refused up front')

    monkeypatch.setattr(mcmcstep, 'init', init)


# ---------------------------------------------------------------- seeds


def test_seeds_below_2_64_have_their_own_keys():
    seeds = [0, 5, 2**32 - 1, 2**32, 2**32 + 5, 2**40 + 3, 2**63, 2**64 - 1]
    words = [tuple(np.asarray(random.key_data(_checks.make_key(s))).tolist()) for s in seeds]
    assert len(set(words)) == len(seeds)
    for s, w in zip(seeds, words, strict=True):
        assert w == (s >> 32, s & 0xFFFFFFFF)  # as jax.random.key of a 64-bit integer


def test_seeds_below_2_32_keep_jax_key():
    for s in (0, 99, 2**32 - 1):
        assert_array_equal(random.key_data(_checks.make_key(s)), random.key_data(random.key(s)))


def test_seed_2_32_is_not_seed_0(data):
    x, y = data
    a = gbart(x, y, seed=0, **SMALL)
    b = gbart(x, y, seed=2**32, **SMALL)
    assert not np.array_equal(a.yhat_train, b.yhat_train)


def test_random_state_2_32_is_not_0(data):
    x, y = data
    kw = {'ntree': 5, 'ndpost': 10, 'nskip': 5}
    a = BARTRegressor(random_state=0, **kw).fit(x, y)
    b = BARTRegressor(random_state=2**32, **kw).fit(x, y)
    assert not np.array_equal(a.fit_.yhat_train, b.fit_.yhat_train)


@pytest.mark.parametrize('seed', [2**64, -1, 10**30])
def test_seed_out_of_range_refused(data, seed, no_sampler):
    x, y = data
    with pytest.raises(ValueError, match=r'seed must be a non-negative integer below 2\*\*64'):
        gbart(x, y, seed=seed, **SMALL)


def test_random_state_out_of_range_refused(data):
    x, y = data
    with pytest.raises(ValueError, match=r'random_state must be .* below 2\*\*64'):
        BARTRegressor(random_state=2**64, ntree=5, ndpost=10, nskip=5).fit(x, y)


@pytest.mark.parametrize('keys', [random.split(random.key(0), 2), random.split(random.PRNGKey(0), 3)])
def test_batch_of_keys_refused(data, keys, no_sampler):
    x, y = data
    with pytest.raises(ValueError, match='seed must be a single JAX random key, got a batch'):
        gbart(x, y, seed=keys, **SMALL)


def test_legacy_prng_key_is_its_seed(data):
    x, y = data
    a = gbart(x, y, seed=random.PRNGKey(7), **SMALL)
    b = gbart(x, y, seed=7, **SMALL)
    assert_array_equal(a.yhat_train, b.yhat_train)


@pytest.mark.parametrize('seed', [1.5, True, 'abc', np.zeros(3)])
def test_seed_of_the_wrong_type_refused(data, seed, no_sampler):
    x, y = data
    with pytest.raises(TypeError, match='seed must be a non-negative integer or a JAX random key'):
        gbart(x, y, seed=seed, **SMALL)


# ---------------------------------------------------------------- tree prior, huge numbers


def test_tree_prior_that_never_stops_refused(data, no_sampler):
    x, y = data
    with pytest.raises(ValueError, match='base=1 with power=0 .* never stops growing'):
        gbart(x, y, base=1, power=0, **SMALL)


def test_tree_prior_with_base_1_and_power_accepted(data):
    x, y = data
    fit = gbart(x, y, base=1, power=2, **SMALL)
    assert np.all(np.isfinite(fit.yhat_train))


@pytest.mark.parametrize('name', ['k', 'sigdf', 'tau_num', 'offset'])
def test_integer_beyond_float64_names_the_argument(data, name, no_sampler):
    x, y = data
    with pytest.raises(ValueError, match=f'^{name} must be a finite real number, got an integer of 401 digits'):
        gbart(x, y, **{name: 10**400}, **SMALL)


def test_integer_beyond_float64_in_a_column_names_it(data, no_sampler):
    x, y = data
    col = np.array([10**400] + [1] * (len(y) - 1), dtype=object)
    with pytest.raises(ValueError, match="x_train column 'a' has an integer too large for a float64"):
        gbart(pd.DataFrame({'a': col, 'b': x[:, 1]}), y, **SMALL)


def test_integer_beyond_float64_in_x_test_names_it(data):
    x, y = data
    fit = gbart(pd.DataFrame({'a': x[:, 0], 'b': x[:, 1]}), y, **SMALL)
    new = pd.DataFrame({'a': np.array([10**400, 1], dtype=object), 'b': [0.5, 0.5]})
    with pytest.raises(ValueError, match="x_new column 'a' has an integer too large"):
        fit.predict(new)


def test_jax_integer_seed_accepted(data):
    x, y = data
    a = gbart(x, y, seed=jax.numpy.array(3), **SMALL)
    b = gbart(x, y, seed=np.int64(3), **SMALL)
    assert_array_equal(a.yhat_train, b.yhat_train)
