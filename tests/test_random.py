"""The host-side keys of `bartz.kernels.rng` are JAX's, bit for bit."""

import jax
import numpy as np
import pytest
from jax import random
from scipy import stats

from bartz.kernels import rng as _random

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


GAMMA_SHAPES = [0.3, 1.0, 2.5, 40.0, 600.0]  # (the error variance's shape is (nu + n) / 2)


@pytest.mark.parametrize('seed', [0, 1])
def test_gamma_draws_follow_the_gamma_law(seed):
    """`_random.gamma` (Marsaglia & Tsang with the normals of
    `normal_from_words`, and the boost below shape 1) draws Gamma(shape, 1):
    a Kolmogorov-Smirnov test against SciPy's law for shapes from 0.3 to
    600, 20,000 draws each, at a threshold of 1e-4 per test (Bonferroni
    over the shapes and seeds: a correct sampler fails it with probability
    about 1e-3)."""
    draw = jax.jit(jax.vmap(_random.gamma, in_axes=(0, None)))
    keys = random.split(random.key(seed), 20_000)
    for shape in GAMMA_SHAPES:
        x = np.asarray(draw(keys, np.float32(shape)), np.float64)
        assert np.all(x > 0)
        pvalue = stats.kstest(x, stats.gamma(shape).cdf).pvalue
        assert pvalue > 1e-4, (shape, pvalue)
