"""bartz's Pallas kernels (`bartz.kernels.pallas`) against XLA's scatter, on
CPU in Pallas' interpret mode; and their lowering with Triton, the GPU's."""

import jax
import numpy as np
import pytest
from jax import numpy as jnp

from bartz import kernels
from bartz.kernels import pallas


def scatter(indices, values, size):
    """The reference: XLA's scatter-add (drops bins out of range)."""
    return jnp.zeros((size, *values.shape[1:]), values.dtype).at[indices].add(values)


def dyadic(rng, shape):
    """Small integers times powers of two: every order of summation gives the same float32 sum."""
    return jnp.asarray(rng.integers(-8, 9, shape) * 2.0 ** rng.integers(-3, 4, shape), jnp.float32)


def pallas_sums(size):
    return jax.jit(lambda i, v: pallas.leaf_sums(i, v, size, interpret=True))


# (n, k, size): n not a multiple of the block, below it, a single point;
# k None is a column ``(n,)``; sizes not powers of two have their bins rounded up
CASES = [(1, None, 2), (1, 3, 64), (5, 1, 3), (700, 2, 64), (1000, None, 7), (1000, 3, 16), (4097, 2, 64), (1536, 3, 64)]
CASES += [(3000, 1, 256)]


@pytest.mark.parametrize(('n', 'k', 'size'), CASES)
def test_leaf_sums_exact(n, k, size):
    """On dyadic values the kernel's sums equal the scatter's bit for bit,
    padding points and the bins above `size` adding nothing."""
    rng = np.random.default_rng(n + size)
    indices = jnp.asarray(rng.integers(0, size, n), jnp.uint8)
    values = dyadic(rng, (n,) if k is None else (n, k))
    sums = pallas_sums(size)(indices, values)
    assert sums.shape == scatter(indices, values, size).shape and sums.dtype == jnp.float32
    np.testing.assert_array_equal(sums, scatter(indices, values, size))
    assert n < 10 or np.count_nonzero(sums) > size // 2


def test_leaf_sums_drop_bins_out_of_range():
    """A bin at or above `size` (inside or beyond the bins rounded up to a power of two) adds nowhere."""
    indices = jnp.asarray([0, 2, 3, 4, 255, 1, 2], jnp.uint8)
    values = jnp.arange(1.0, 8.0, dtype=jnp.float32)
    np.testing.assert_array_equal(pallas_sums(3)(indices, values), [1.0, 6.0, 9.0])


def test_leaf_sums_random_values():
    """On random values, the scatter's sums within float32 rounding."""
    rng = np.random.default_rng(1)
    n, size = 4500, 32
    indices = jnp.asarray(rng.integers(0, size, n), jnp.uint8)
    values = jnp.asarray(rng.normal(size=(n, 3)), jnp.float32)
    exact = np.zeros((size, 3))
    np.add.at(exact, np.asarray(indices), np.asarray(values, np.float64))
    scale = np.zeros((size, 3))
    np.add.at(scale, np.asarray(indices), np.abs(np.asarray(values, np.float64)))
    sums = np.asarray(pallas_sums(size)(indices, values), np.float64)
    assert not np.array_equal(sums, exact)  # (not exact: the tolerance below is what is tested)
    assert np.all(np.abs(sums - exact) <= 4 * np.finfo(np.float32).eps * scale)


def test_leaf_sums_under_vmap():
    """Under vmap (chains on a GPU), each batch element's sums, with
    indices and values batched or one of them shared."""
    rng = np.random.default_rng(2)
    chains, n, size = 3, 1500, 16
    indices = jnp.asarray(rng.integers(0, size, (chains, n)), jnp.uint8)
    values = dyadic(rng, (chains, n, 2))
    fun = pallas_sums(size)
    expected = jax.vmap(scatter, (0, 0, None))(indices, values, size)
    np.testing.assert_array_equal(jax.jit(jax.vmap(fun))(indices, values), expected)
    shared = jax.jit(jax.vmap(fun, (None, 0)))(indices[0], values)
    np.testing.assert_array_equal(shared, jax.vmap(scatter, (None, 0, None))(indices[0], values, size))


@pytest.mark.parametrize(('k', 'size'), [(None, 2), (3, 64), (4, 256)])
def test_leaf_sums_lower_with_triton(k, size):
    """Without interpret mode the kernel lowers with Pallas' Triton lowering
    (on a machine without a GPU, for the minimum compute capability it
    supports): it uses only operations that lowering knows."""
    n = 3000
    indices = jax.ShapeDtypeStruct((n,), jnp.uint8)
    values = jax.ShapeDtypeStruct((n,) if k is None else (n, k), jnp.float32)
    fun = jax.jit(lambda i, v: pallas.leaf_sums(i, v, size, interpret=False))
    text = fun.trace(indices, values).lower(lowering_platforms=('cuda',)).as_text()
    assert 'triton' in text


def test_plan_selects_pallas():
    """The plan uses the kernel only when asked (then without lanes), on
    CPU interpreted: the sums of the default plan, laned or not; a backend
    without a Pallas lowering is refused by name."""
    n, size = 2000, 64
    for backend in ('cpu', 'gpu'):
        assert not kernels.plan_sweep(n, backend=backend).pallas
        assert not kernels.plan_sweep(2**20, backend=backend).pallas
    plan = kernels.plan_sweep(n, backend='cpu', pallas=True)
    assert plan.pallas and not plan.lanes
    rng = np.random.default_rng(3)
    indices = jnp.asarray(rng.integers(0, size, n), jnp.uint8)
    values = dyadic(rng, (n, 3))
    default = kernels.plan_sweep(n, backend='cpu')
    expected = kernels.leaf_sums(indices, values, size, plan=default)
    np.testing.assert_array_equal(jax.jit(lambda i, v: kernels.leaf_sums(i, v, size, plan=plan))(indices, values), expected)
    # laned indices of a plan with lanes (as the sweep carries them) read back to their bins
    laned_plan = default.replace(pallas=True)
    laned = kernels.lane_indices(indices, size, plan=laned_plan)
    got = jax.jit(lambda i, v: kernels.leaf_sums(i, v, size, laned=True, plan=laned_plan))(laned, values)
    np.testing.assert_array_equal(got, expected)
    with pytest.raises(ValueError, match=r"pallas=True needs a backend in .*got 'tpu'"):
        kernels.plan_sweep(n, backend='tpu', pallas=True)


def final_rule(cells, params):
    """A tree's final leaves as the sweep gives them to `data_pass`: two cells remapped to two leaves."""
    return kernels.replace_indices(cells, params[:2], params[2:])


def weighted_columns(resid, weights):
    return [resid[0] * weights, weights, jnp.ones_like(weights)]


def pass_inputs(rng, n, size, weighted):
    """`data_pass`'s inputs (dyadic values) and, by XLA, what it returns."""
    prev, cells = (jnp.asarray(rng.integers(0, size, n), jnp.uint8) for _ in range(2))
    delta = dyadic(rng, (size,))
    params = jnp.asarray([3, 5, 7, 1], jnp.int32)
    if weighted:
        resid, weights = dyadic(rng, (n,)), jnp.asarray(2.0 ** rng.integers(-2, 3, n), jnp.float32)
        new_resid = resid + delta[prev]
        summed = jnp.stack(weighted_columns([new_resid], weights), axis=1)
    else:  # (stacked: the residuals beside a column of ones, summed as they are)
        resid, weights = jnp.stack([dyadic(rng, (n,)), jnp.ones(n, jnp.float32)], axis=1), None
        new_resid = resid.at[:, 0].add(delta[prev])
        summed = new_resid
    expected = new_resid, final_rule(prev, params), scatter(cells, summed, size)
    return (prev, cells, resid, weights, delta, params), expected


def fused_pass(weighted, interpret=True):
    columns = weighted_columns if weighted else (lambda resid, weights: resid)
    return jax.jit(lambda *args: pallas.data_pass(*args, final=final_rule, columns=columns, interpret=interpret))


PASS_CASES = [(1, 2, False), (200, 64, False), (384, 64, False), (1000, 64, True), (3001, 256, True)]


@pytest.mark.parametrize(('n', 'size', 'weighted'), PASS_CASES)
def test_data_pass_exact(n, size, weighted):
    """The fused pass gives XLA's residual update, final leaves and sums
    bit for bit on dyadic values; padding points enter no sum (their
    columns, formed in the kernel, are masked out)."""
    args, expected = pass_inputs(np.random.default_rng(n), n, size, weighted)
    out = fused_pass(weighted)(*args)
    for got, want in zip(out, expected, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_data_pass_under_vmap():
    """Under vmap (chains), each chain's pass, padding points masked in every chain."""
    rng = np.random.default_rng(7)
    inputs = [pass_inputs(rng, 300, 16, True) for _ in range(3)]
    stack = lambda trees: jax.tree.map(lambda *a: jnp.stack(a), *trees)  # noqa: E731
    args, expected = stack([a for a, _ in inputs]), stack([e for _, e in inputs])
    out = jax.jit(jax.vmap(fused_pass(True)))(*args)
    for got, want in zip(out, expected, strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize('weighted', [False, True])
def test_data_pass_lowers_with_triton(weighted):
    """Without interpret mode the fused pass lowers with Pallas' Triton
    lowering (as `leaf_sums`), also under vmap (the chains on a GPU)."""
    args, _ = pass_inputs(np.random.default_rng(0), 3000, 64, weighted)
    fun = fused_pass(weighted, interpret=False)
    batched = jax.tree.map(lambda a: jnp.stack([a, a]), args)
    for f, a in ((fun, args), (jax.jit(jax.vmap(fun)), batched)):
        assert 'triton' in f.trace(*a).lower(lowering_platforms=('cuda',)).as_text()
