"""Tests of `bartz.jaxext.autobatch`: same results as the unbatched function, bounded memory."""

import doctest
import importlib
import math
import warnings

import jax
import numpy as np
import pytest
from jax import numpy as jnp
from jax import random
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from numpy.testing import assert_allclose, assert_array_equal

from bartz.jaxext import autobatch


def assert_trees_equal(actual, desired):
    assert jax.tree.structure(actual) == jax.tree.structure(desired)
    for a, d in zip(jax.tree.leaves(actual), jax.tree.leaves(desired), strict=True):
        assert a.shape == d.shape
        assert a.dtype == d.dtype
        assert_array_equal(a, d)


def nbatches_of(batched_func, *args):
    """Number of batches that `batched_func` (with return_nbatches=True) uses, without compiling."""
    result = []
    jax.eval_shape(lambda *args: result.append(batched_func(*args)[1]), *args)
    return result[0]


def func_pytree(args, scale):
    """Batchable along axis 0 of x, axis 1 of y, axis -1 (2) of z; `scale` is not batched."""
    x, y = args['x'], args['y']
    z = args['z']
    u = jnp.sin(x) * scale + jnp.sum(y, axis=0)[:, None]
    v = {'a': jnp.cos(z) + x[None, None, :, 0], 'b': (y * 2).astype(jnp.int32)}
    return u, v


IN_AXES = ({'x': 0, 'y': 1, 'z': -1}, None)
OUT_AXES = (0, {'a': 2, 'b': -1})


def random_args(keys, n):
    return (
        {
            'x': random.normal(next(keys), (n, 3)),
            'y': random.randint(next(keys), (2, n), -100, 100, jnp.int8),
            'z': random.normal(next(keys), (4, 2, n)),
        },
        random.normal(next(keys), (3,)),
    )


@pytest.mark.parametrize('n', [1, 30, 31])
@pytest.mark.parametrize('max_io_nbytes', [1, 100, 200, 10_000])
def test_pytree_matches_unbatched(keys, n, max_io_nbytes):
    """Random pytrees, axes 0, 1 and -1, None in in_axes, pytree out_axes."""
    args = random_args(keys, n)
    batched = autobatch(
        func_pytree, max_io_nbytes, IN_AXES, OUT_AXES, return_nbatches=True, warn_on_overflow=False
    )
    result, nbatches = batched(*args)
    assert_trees_equal(result, jax.jit(func_pytree)(*args))

    # per element: x 12 + y 2 + z 32 + u 12 + a 32 + b 8 = 98 bytes
    max_batch = max(1, max_io_nbytes // 98)
    assert nbatches == math.ceil(n / max_batch)


@pytest.mark.parametrize('in_axes', [0, 1, -1])
def test_axes(keys, in_axes):
    x = random.normal(next(keys), (5, 6, 7))

    def func(x):
        return jnp.exp(x) - x

    batched = autobatch(func, 5 * 7 * 4 * 2 * 2, in_axes, in_axes, return_nbatches=True)
    result, nbatches = batched(x)
    assert_trees_equal(result, jax.jit(func)(x))
    assert nbatches > 1


def test_reduce_add(keys):
    x = random.normal(next(keys), (1001, 3))
    w = random.normal(next(keys), (3,))

    def func(x, w):
        return jnp.sin(x) * w

    batched = autobatch(func, 1000, (0, None), reduce_ufunc=jnp.add, return_nbatches=True)
    result, nbatches = batched(x, w)
    assert nbatches > 10
    expected = jnp.sum(func(x, w), axis=0)
    assert result.dtype == expected.dtype
    assert_allclose(result, expected, rtol=1e-5, atol=1e-5)


def test_reduce_max_pytree_out_axes(keys):
    x = random.normal(next(keys), (4, 103))
    i = random.randint(next(keys), (103,), -1000, 1000)

    def func(x, i):
        return {'x': x, 'i': i * 2}

    batched = autobatch(func, 80, (1, 0), {'x': 1, 'i': 0}, reduce_ufunc=jnp.maximum, return_nbatches=True)
    result, nbatches = batched(x, i)
    assert nbatches == 103 // 2 + 1
    assert_trees_equal(result, {'x': jnp.max(x, axis=1), 'i': jnp.max(i * 2)})


def test_reduce_int8_accumulation_dtype():
    """Many int8 100s are summed in the dtype of jnp.sum (int32), without overflow."""
    x = jnp.full((1000, 2), 100, jnp.int8)
    batched = autobatch(lambda x: x, 64, reduce_ufunc=jnp.add, return_nbatches=True)
    result, nbatches = batched(x)
    assert nbatches > 1
    assert result.dtype == jnp.sum(x, axis=0).dtype == jnp.int32
    assert_array_equal(result, [100_000, 100_000])


@pytest.mark.parametrize(
    ('ufunc', 'identity'),
    [
        (jnp.add, 0),
        (jnp.multiply, 1),
        (jnp.maximum, -jnp.inf),
        (jnp.minimum, jnp.inf),
        (jnp.logical_and, True),
        (jnp.logical_or, False),
    ],
)
def test_reduce_empty_axis(ufunc, identity):
    x = jnp.zeros((3, 0))
    batched = autobatch(lambda x: x, 100, 1, 1, reduce_ufunc=ufunc, return_nbatches=True)
    result, nbatches = batched(x)
    assert nbatches == 0
    assert result.shape == (3,)
    assert_array_equal(result, jnp.full(3, identity))


def test_reduce_empty_axis_int_max():
    batched = autobatch(lambda x: x, 100, reduce_ufunc=jnp.maximum)
    result = batched(jnp.zeros((0, 2), jnp.int16))
    assert result.dtype == jnp.int16
    assert_array_equal(result, [jnp.iinfo(jnp.int16).min] * 2)


def test_map_empty_axis(keys):
    args = random_args(keys, 0)
    batched = autobatch(func_pytree, 100, IN_AXES, OUT_AXES, return_nbatches=True)
    result, nbatches = batched(*args)
    assert nbatches == 0
    assert_trees_equal(result, jax.jit(func_pytree)(*args))


def test_prime_length(keys):
    """A prime length does not degenerate into one element per batch."""
    n = 10_007
    x = random.normal(next(keys), (n,))
    max_io_nbytes = 8 * 1000
    batched = autobatch(jnp.sin, max_io_nbytes, return_nbatches=True)
    result, nbatches = batched(x)
    assert nbatches == 11
    assert_trees_equal(result, jnp.sin(x))

    batched = autobatch(jnp.sin, max_io_nbytes, reduce_ufunc=jnp.add, return_nbatches=True)
    result, nbatches = batched(x)
    assert nbatches == 11
    assert_allclose(result, jnp.sum(jnp.sin(x)), rtol=1e-5)


def test_overflow_warns(keys):
    x = random.normal(next(keys), (7, 10))
    batched = autobatch(jnp.cos, 10, return_nbatches=True)
    with pytest.warns(UserWarning, match='max_io_nbytes'):
        result, nbatches = batched(x)
    assert nbatches == 7
    assert_trees_equal(result, jnp.cos(x))

    quiet = autobatch(jnp.cos, 10, warn_on_overflow=False)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert_trees_equal(quiet(x), jnp.cos(x))


def test_nbatches_is_minimal():
    """Over a grid of budgets, nbatches is the least number of batches that fits."""
    elem_nbytes = 2 * 3 * 4  # input and output of 3 float32 per element

    for n in [1, 2, 7, 64, 97]:
        x = jax.ShapeDtypeStruct((n, 3), jnp.float32)
        for max_io_nbytes in sorted({1, 23, 24, 25, 47, 48, 100, 24 * n - 1, 24 * n, 10**6}):
            batched = autobatch(jnp.negative, max_io_nbytes, return_nbatches=True, warn_on_overflow=False)
            nbatches = nbatches_of(batched, x)
            max_batch = max_io_nbytes // elem_nbytes
            if max_batch == 0:
                assert nbatches == n
                continue
            # batches of ceil(n / nbatches) elements respect the budget...
            assert math.ceil(n / nbatches) * elem_nbytes <= max_io_nbytes
            # ...and fewer batches would not
            if nbatches > 1:
                assert math.ceil(n / (nbatches - 1)) * elem_nbytes > max_io_nbytes


def test_result_shape_dtype_skips_trace(keys):
    x = random.normal(next(keys), (100,))
    traces = []

    def func(x):
        traces.append(x.shape)
        return jnp.sin(x)

    plain = autobatch(func, 80)
    assert_trees_equal(plain(x), jnp.sin(x))
    assert len(traces) == 3  # eval_shape, empty call, loop body
    assert_trees_equal(plain(x), jnp.sin(x))
    assert len(traces) == 3  # no retracing at the second call

    traces.clear()
    given = autobatch(func, 80, result_shape_dtype=jax.ShapeDtypeStruct((100,), jnp.float32))
    assert_trees_equal(given(x), jnp.sin(x))
    assert len(traces) == 2


def test_random_keys(keys):
    """An array of keys can be batched; the key reuse checker does not complain."""
    point_keys = random.split(next(keys), 100)
    expected = jax.vmap(random.normal)(random.clone(point_keys))
    batched = autobatch(jax.vmap(random.normal), 100, return_nbatches=True)
    result, nbatches = batched(point_keys)
    assert nbatches > 1
    assert_trees_equal(result, expected)


@pytest.mark.parametrize(
    ('kwargs', 'match'),
    [
        ({'max_io_nbytes': 0}, 'max_io_nbytes'),
        ({'reduce_ufunc': jnp.subtract}, 'reduce_ufunc'),
        ({'in_axes': None}, 'at least one'),
        ({'in_axes': 2}, 'out of range'),
        ({'in_axes': (0,)}, 'entries'),
        ({'in_axes': ({'a': 0}, 0)}, 'prefix'),
        ({'in_axes': 1.0}, 'ints or None'),
    ],
)
def test_invalid_arguments(kwargs, match):
    kwargs = {'max_io_nbytes': 100, **kwargs}
    with pytest.raises(ValueError, match=match):
        batched = autobatch(lambda x, y: x + y, **kwargs)
        batched(jnp.zeros((3, 2)), jnp.zeros((3, 2)))


def test_different_lengths():
    batched = autobatch(lambda x, y: x + y[:3], 100)
    with pytest.raises(ValueError, match='different lengths'):
        batched(jnp.zeros(3), jnp.zeros(4))


def test_output_not_batched():
    batched = autobatch(lambda x: jnp.sum(x), 100)
    with pytest.raises(ValueError, match='out of range'):
        batched(jnp.zeros(3))
    batched = autobatch(lambda x: x[:2], 100)
    with pytest.raises(ValueError, match='length 2'):
        batched(jnp.zeros(3))


def temp_nbytes(func, *args):
    return jax.jit(func).lower(*args).compile().memory_analysis().temp_size_in_bytes


def test_memory_bounded_reduction():
    """An outer product per element, then a sum: temporaries scale with the batch, not the data."""
    w = jnp.linspace(0, 1, 1000)

    def func(x, w):
        return jnp.sum(jnp.sin(x[:, None] * w[None, :]), axis=1)

    max_io_nbytes = 8 * 500  # 4 bytes in + 4 out per element: 500 elements per batch
    batch_temp = 500 * w.size * 4  # the (batch, 1000) float32 intermediate
    batched = autobatch(func, max_io_nbytes, (0, None), reduce_ufunc=jnp.add)

    sizes = [10_000, 40_000]
    plain = [temp_nbytes(func, jnp.zeros(n), w) for n in sizes]
    bounded = [temp_nbytes(batched, jnp.zeros(n), w) for n in sizes]
    assert plain[1] >= 3.5 * plain[0]
    assert plain[0] >= sizes[0] * w.size * 4
    for temp in bounded:
        assert temp <= 1.1 * batch_temp


def test_memory_bounded_map(keys):
    """A prediction-like function: temporaries stay within a small multiple of the budget."""
    w1 = random.normal(next(keys), (64, 64))
    w2 = random.normal(next(keys), (64, 64))

    def func(x, w1, w2):
        return jnp.tanh(jnp.sin(x) @ w1) @ w2

    max_io_nbytes = 64 * 1024  # 512 bytes per row: 128 rows per batch
    batched = autobatch(func, max_io_nbytes, (0, None, None))
    summed = autobatch(func, max_io_nbytes, (0, None, None), reduce_ufunc=jnp.add)

    sizes = [5_000, 20_003]
    plain = [temp_nbytes(func, jnp.zeros((n, 64)), w1, w2) for n in sizes]
    assert plain[1] >= 3.5 * plain[0]
    for n in sizes:
        x = jnp.zeros((n, 64))
        assert temp_nbytes(batched, x, w1, w2) <= 2 * max_io_nbytes
        assert temp_nbytes(summed, x, w1, w2) <= 2 * max_io_nbytes


def test_nested(keys):
    """Nested autobatch over two axes with the same budget loops only where needed."""
    x = random.normal(next(keys), (100, 101))
    inner_nbatches = {}

    def inner(x):
        batched = autobatch(jnp.sin, max_io_nbytes, 1, 1, return_nbatches=True, warn_on_overflow=False)
        out, nbatches = batched(x)
        inner_nbatches[x.shape] = nbatches
        return out

    # rows of 808 bytes: 5 rows per batch, which fit the inner budget whole
    max_io_nbytes = 4096
    result, nbatches = autobatch(inner, max_io_nbytes, return_nbatches=True)(x)
    assert_trees_equal(result, jnp.sin(x))
    assert nbatches == 20
    assert inner_nbatches[5, 101] == 1

    # a budget smaller than one row: both levels loop
    max_io_nbytes = 400
    result, nbatches = autobatch(inner, max_io_nbytes, return_nbatches=True, warn_on_overflow=False)(x)
    assert_trees_equal(result, jnp.sin(x))
    assert nbatches == 100
    assert inner_nbatches[1, 101] == 3


def test_under_jit(keys):
    x = random.normal(next(keys), (1000,))
    y = random.normal(next(keys), (1000,))
    batched = autobatch(jnp.multiply, 800)
    summed = autobatch(jnp.multiply, 800, reduce_ufunc=jnp.add)
    assert_trees_equal(jax.jit(batched)(x, y), x * y)
    assert_allclose(jax.jit(summed)(x, y), jnp.dot(x, y), rtol=1e-5)


def test_under_vmap(keys):
    x = random.normal(next(keys), (3, 1000))
    w = random.normal(next(keys), (3,))
    batched = autobatch(jnp.multiply, 800, (0, None))
    summed = autobatch(jnp.multiply, 800, (0, None), reduce_ufunc=jnp.add)
    assert_trees_equal(jax.vmap(batched)(x, w), x * w[:, None])
    assert_allclose(jax.vmap(summed)(x, w), jnp.sum(x * w[:, None], axis=1), rtol=1e-5)


def test_inside_shard_map(keys):
    """Each device batches its shard; reductions are then summed across devices."""
    assert jax.device_count() == 4
    mesh = jax.make_mesh((4,), ('data',))
    x = random.normal(next(keys), (4 * 251, 2))
    x = jax.device_put(x, NamedSharding(mesh, P('data')))

    batched = autobatch(jnp.sin, 400)
    summed = autobatch(jnp.sin, 400, reduce_ufunc=jnp.add)

    @jax.jit
    @jax.shard_map(mesh=mesh, in_specs=P('data'), out_specs=(P('data'), P()))
    def sharded(x):
        return batched(x), jax.lax.psum(summed(x), 'data')

    mapped, total = sharded(x)
    assert_trees_equal(mapped, jnp.sin(x))
    assert_allclose(total, jnp.sum(jnp.sin(x), axis=0), rtol=1e-5, atol=1e-5)


def test_docstring_examples():
    # the module, shadowed in bartz.jaxext by the function of the same name
    module = importlib.import_module('bartz.jaxext.autobatch')
    results = doctest.testmod(module, raise_on_error=True)
    assert results.attempted > 0


def _flatten_rows(x):
    """Fails on an empty slice: ``reshape(0, -1)`` cannot infer the -1."""
    return jnp.sin(x.reshape(x.shape[0], -1))


def _per_batch_mean(x):
    """Fails on an empty slice (ZeroDivisionError while tracing)."""
    return x * (1.0 / x.shape[0]) * x.shape[0]


@pytest.mark.parametrize('reduce_ufunc', [None, jnp.add])
@pytest.mark.parametrize('func', [_flatten_rows, _per_batch_mean])
@pytest.mark.parametrize('n', [1, 2, 97, 1009])
def test_never_called_on_empty_slice(keys, func, reduce_ufunc, n):
    """func sees only non-empty slices: reshape with -1 and division by the batch length work."""
    x = random.normal(next(keys), (n, 3, 2))
    seen = []

    def recording(x):
        seen.append(x.shape[0])
        return func(x)

    batched = autobatch(recording, 48 * 10, reduce_ufunc=reduce_ufunc, return_nbatches=True)  # 24 in + 24 out
    result, nbatches = batched(x)
    expected = func(x)
    if reduce_ufunc is not None:
        expected = jnp.sum(expected, axis=0)
    assert_allclose(result, expected, rtol=1e-5, atol=1e-5)
    assert nbatches == math.ceil(n / 10)
    assert seen
    assert min(seen) > 0


@pytest.mark.parametrize('reduce_ufunc', [None, jnp.add])
def test_empty_axis_never_traces_empty(reduce_ufunc):
    """An empty axis gives an empty result (or the identity) without tracing func on it."""
    seen = []

    def recording(x):
        seen.append(x.shape[0])
        return _flatten_rows(x)

    result = autobatch(recording, 100, reduce_ufunc=reduce_ufunc)(jnp.zeros((0, 3, 2)))
    assert result.shape == ((0, 6) if reduce_ufunc is None else (6,))
    assert min(seen) > 0


@pytest.mark.parametrize('reduce_ufunc', [None, jnp.add])
def test_shard_map_checked_types(keys, reduce_ufunc):
    """Inside shard_map with check_vma on, the carry gets the varying type of func's outputs."""
    mesh = jax.make_mesh((4,), ('data',))
    x = random.normal(next(keys), (4 * 101, 3, 2))
    x = jax.device_put(x, NamedSharding(mesh, P('data')))
    batched = autobatch(_flatten_rows, 48 * 7, reduce_ufunc=reduce_ufunc, return_nbatches=True)
    nb = []

    def per_device(x):
        out, n = batched(x)
        nb.append(n)
        return out if reduce_ufunc is None else jax.lax.psum(out, 'data')

    spec = P('data') if reduce_ufunc is None else P()
    f = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P('data'), out_specs=spec, check_vma=True))
    result = f(x)
    expected = _flatten_rows(x)
    if reduce_ufunc is not None:
        expected = jnp.sum(expected, axis=0)
    assert_allclose(result, expected, rtol=1e-5, atol=1e-5)
    assert nb == [15]  # 101 rows per device, 7 per batch


def test_random_pytrees_axes_budgets():
    """Random axes and budgets on random shapes, map and reduce, against the unbatched function."""
    rng = np.random.default_rng(20260101)
    for _ in range(8):
        n = int(rng.integers(1, 60))
        nd_a, nd_b = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        ax_a, ax_b = int(rng.integers(0, nd_a)), int(rng.integers(-nd_b, 0))
        shape_a = [int(v) for v in rng.integers(1, 4, nd_a)]
        shape_b = [int(v) for v in rng.integers(1, 4, nd_b)]
        shape_a[ax_a] = n
        shape_b[ax_b] = n
        a = jnp.asarray(rng.normal(size=shape_a), jnp.float32)
        b = jnp.asarray(rng.integers(-5, 5, shape_b), jnp.int32)

        def func(args, ax_a=ax_a, ax_b=ax_b):
            a, b = args['a'], args['b']
            ma = jnp.moveaxis(a, ax_a, 0).reshape(a.shape[ax_a], -1)
            mb = jnp.moveaxis(b, ax_b, 0).reshape(b.shape[ax_b], -1)
            return {'s': jnp.sum(ma, axis=1) + jnp.sum(mb, axis=1), 'c': jnp.cos(ma)}

        budget = int(rng.integers(1, 400))
        args = ({'a': a, 'b': b},)
        in_axes = ({'a': ax_a, 'b': ax_b},)
        mapped = autobatch(func, budget, in_axes, warn_on_overflow=False)(*args)
        summed = autobatch(func, budget, in_axes, reduce_ufunc=jnp.add, warn_on_overflow=False)(*args)
        expected = func(*args)
        for key in ('s', 'c'):
            assert_allclose(mapped[key], expected[key], rtol=1e-6)
            assert_allclose(summed[key], jnp.sum(expected[key], axis=0), rtol=1e-5, atol=1e-5)
