"""The host-side keys of `bartz._random` are JAX's, bit for bit."""

import jax
import numpy as np
import pytest
from jax import random

from bartz import _random

SEEDS = [0, 1, 99, 2**31, 2**32 - 1]
DATA = [0, 1, 12345, 2**31 + 7, 2**32 - 1]


@pytest.mark.parametrize('seed', SEEDS)
def test_key_on_host_is_jax_key(seed):
    ours = _random.key_on_host(seed)
    assert ours.dtype == random.key(0).dtype
    np.testing.assert_array_equal(random.key_data(ours), random.key_data(random.key(seed)))


@pytest.mark.parametrize('seed', SEEDS[:3])
@pytest.mark.parametrize('data', DATA)
def test_fold_in_on_host_is_jax_fold_in(seed, data):
    key = random.key(seed)
    expected = random.key_data(random.fold_in(key, np.uint32(data)))
    np.testing.assert_array_equal(random.key_data(_random.fold_in_on_host(key, data)), expected)
    np.testing.assert_array_equal(random.key_data(_random.fold_in(key, np.uint32(data))), expected)


def test_other_generators_go_to_jax():
    """With another PRNG implementation the host functions defer to JAX."""
    with jax.default_prng_impl('rbg'):
        key = _random.key_on_host(3)
        np.testing.assert_array_equal(random.key_data(key), random.key_data(random.key(3)))
        np.testing.assert_array_equal(
            random.key_data(_random.fold_in_on_host(key, 5)), random.key_data(random.fold_in(random.key(3), 5))
        )
