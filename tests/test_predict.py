"""Tests of `bartz.api.predict` through `BARTFit.predict` and `BARTFit.predict_chunks`:
summaries equal to those of the draws, predictive noise, chunked and memory-mapped
input, bounded memory.

The fits use the shapes of tests/test_BART.py (n=100, p=3, 20 trees, 50 draws),
so they share its compiled sampler.
"""

import tracemalloc

import jax
import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy import stats

from bartz import gbart
from bartz.prep import encoding
from bartz.forest import grove
from bartz.api import fit as fit_mod
from bartz.api import predict as predict_mod
from bartz.forest import predict as pipeline
from bartz.forest import trace as traces

N, P, N_TEST = 100, 3, 30
SMALL = {'ntree': 20, 'ndpost': 50, 'nskip': 20, 'printevery': None}
QS = [0.0, 0.025, 0.1, 0.5, 0.77, 0.975, 1.0]


@pytest.fixture(scope='module')
def data():
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(N, P))
    y = np.sin(6 * x[:, 0]) + 2 * x[:, 1] + 0.1 * rng.normal(size=N)
    x_test = rng.uniform(size=(N_TEST, P))
    return x, y, x_test


@pytest.fixture(scope='module')
def fit(data):
    x, y, x_test = data
    return gbart(x, y, x_test=x_test, seed=0, **SMALL)


@pytest.fixture(scope='module')
def pfit(data):
    x, _, x_test = data
    y = (np.random.default_rng(1).uniform(size=N) < stats.norm.cdf(2 * (x[:, 0] - 0.5))).astype(float)
    return gbart(x, y, x_test=x_test, type='pbart', seed=0, **SMALL)


def summary(draws, kind, q=None):
    if kind == 'mean':
        return draws.mean(axis=0)
    if kind == 'sd':
        return draws.std(axis=0, ddof=1)
    return np.quantile(draws, q, axis=0)


# ---------------------------------------------------------------- kinds


@pytest.mark.parametrize('which', ['fit', 'pfit'])
@pytest.mark.parametrize(('kind', 'q'), [('mean', None), ('sd', None), ('quantiles', QS), ('quantiles', 0.3)])
def test_summaries_equal_those_of_the_draws(request, data, which, kind, q):
    """Mean, sd (ddof=1) and quantiles (numpy's 'linear') of the draws; for probit, of the probability."""
    f = request.getfixturevalue(which)
    x_test = data[2]
    draws = f.predict(x_test).astype(np.float64)
    if which == 'pfit':
        assert_allclose(draws, f.prob_test, rtol=1e-5, atol=1e-6)
    out = f.predict(x_test, kind=kind, q=q)
    expected = summary(draws, kind, q)
    if kind == 'quantiles':
        expected = np.atleast_2d(expected)
        assert out.shape == (np.size(q), N_TEST)
    else:
        assert out.shape == (N_TEST,)
    scale = np.abs(draws).max()
    assert_allclose(out, expected, rtol=0, atol=4e-7 * scale)


@pytest.mark.parametrize('budget', [grove.DEFAULT_MAX_MEMORY, 20_000])
def test_x_test_and_predict_are_one_pipeline(fit, data, budget):
    """x_test during the fit (points binned before the run,
    `bartz.api.predict.evaluate_binned`) and ``fit.predict`` run the same
    pipeline: the same draws and means bit for bit, also over many batches
    (the small budget). The sum over trees of a batch rounds differently
    with the batch's size, so the two would differ if they cut the points
    differently."""
    x, _, x_test = data
    if budget == grove.DEFAULT_MAX_MEMORY:
        assert_array_equal(fit.yhat_test, fit.predict(x_test))
    model, binning = predict_mod.from_fit(fit)
    _, rows = next(predict_mod.iter_row_chunks('x', x, binning, 1000))
    X = fit_mod.bin_matrix(rows, binning.kept, fit._splits)  # noqa: SLF001 (as gbart bins x_test)
    for kind, dtype in (('draws', np.float32), ('mean', np.float64)):
        f = predict_mod.evaluate_binned(X, N, fit._trace, kind=kind, link=None, max_memory=budget)  # noqa: SLF001
        expected = predict_mod.to_data_units(f.astype(dtype), fit.offset, fit._scale)  # noqa: SLF001
        assert_array_equal(expected, fit.predict(x, kind=kind, max_memory=budget))


def test_quantiles_match_numpy_on_ties_and_extremes():
    """The interpolation itself, on draws with ties, against numpy for many q and lengths."""
    rng = np.random.default_rng(5)
    for ndraws in (1, 2, 3, 10, 101):
        draws = np.round(rng.normal(size=(ndraws, 40)), 1).astype(np.float32)
        q = tuple(np.concatenate([[0, 1, 0.5], rng.uniform(size=20)]).tolist())
        out = np.asarray(jax.jit(lambda d, q=q: predict_mod.summarize_draws(d, 'quantiles', q))(draws))
        expected = np.quantile(draws.astype(np.float64), q, axis=0)
        assert_allclose(out, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize('kind', ['mean', 'sd', 'quantiles'])
def test_summaries_independent_of_memory_budget(fit, data, kind):
    x_test = data[2]
    q = QS if kind == 'quantiles' else None
    default = fit.predict(x_test, kind=kind, q=q)
    for budget in (1, 20_000):
        assert_allclose(fit.predict(x_test, kind=kind, q=q, max_memory=budget), default, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- predictive


def test_predictive_summaries_equal_those_of_the_noisy_draws(fit, data):
    x_test = data[2]
    noisy = fit.predict(x_test, predictive=True, seed=7).astype(np.float64)
    scale = np.abs(noisy).max()
    for kind, q in (('mean', None), ('sd', None), ('quantiles', QS)):
        out = fit.predict(x_test, kind=kind, q=q, predictive=True, seed=7)
        assert_allclose(out, summary(noisy, kind, q), rtol=0, atol=4e-7 * scale)


def test_predictive_noise_is_normal_with_sigma(fit, data):
    """(noisy - f) / sigma_d over draws and points: mean 0, variance 1 within Monte Carlo error."""
    x_test = data[2]
    f = fit.predict(x_test)
    noisy = fit.predict(x_test, predictive=True, seed=1)
    z = ((noisy - f) / fit.sigma_[:, None]).ravel()
    count = z.size
    assert abs(z.mean()) < 4 / np.sqrt(count)
    assert abs(z.var() - 1) < 4 * np.sqrt(2 / count)
    assert stats.kstest(z, 'norm').pvalue > 1e-4


def test_predictive_reproducible_and_chunking_invariant(fit, data):
    x_test = data[2]
    a = fit.predict(x_test, predictive=True, seed=3)
    assert_array_equal(fit.predict(x_test, predictive=True, seed=3), a)
    assert not np.array_equal(fit.predict(x_test, predictive=True, seed=4), a)
    assert_allclose(fit.predict(x_test, predictive=True, seed=3, max_memory=1), a, rtol=1e-6, atol=1e-6)
    parts = list(fit.predict_chunks([x_test[:7], x_test[7:]], kind='draws', predictive=True, seed=3))
    assert_allclose(np.concatenate(parts, axis=1), a, rtol=1e-6, atol=1e-6)
    # the noise of row i does not depend on the number of rows after it
    assert_allclose(fit.predict(x_test[:9], predictive=True, seed=3), a[:, :9], rtol=1e-6, atol=1e-6)


def test_predictive_weights_scale_the_noise(fit, data):
    x_test = data[2]
    f = fit.predict(x_test)
    plain = fit.predict(x_test, predictive=True, seed=2)
    w = np.linspace(0.5, 3, N_TEST)
    weighted = fit.predict(x_test, predictive=True, seed=2, w_new=w)
    assert_allclose(weighted - f, (plain - f) * w, rtol=1e-4, atol=1e-5)
    assert_allclose(fit.predict(x_test, predictive=True, seed=2, w_new=2.0) - f, 2 * (plain - f), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- inputs


def test_memmap_matches_array(fit, data, tmp_path):
    rng = np.random.default_rng(8)
    x = rng.uniform(size=(1000, P)).astype(np.float32)
    path = tmp_path / 'x.f32'
    mm = np.memmap(path, dtype=np.float32, mode='w+', shape=x.shape)
    mm[:] = x
    mm.flush()
    mm = np.memmap(path, dtype=np.float32, mode='r', shape=x.shape)
    for kind in ('mean', 'quantiles'):
        q = QS if kind == 'quantiles' else None
        assert_allclose(fit.predict(mm, kind=kind, q=q), fit.predict(x, kind=kind, q=q), rtol=1e-6, atol=1e-6)


def test_host_chunks_match_one_chunk(fit):
    """Several host chunks (several compiled lengths) give the result of one."""
    rng = np.random.default_rng(9)
    x = rng.uniform(size=(1000, P))
    model, binning = predict_mod.from_fit(fit)
    one = predict_mod.predict_rows(x, model, binning, kind='sd')
    many = predict_mod.predict_rows(x, model, binning, kind='sd', host_bytes=30_000)
    assert predict_mod.rows_per_chunk(P, 4, 30_000) < 1000
    assert_allclose(many, one, rtol=1e-6, atol=1e-6)


def test_memmap_host_memory_bounded(fit, tmp_path):
    """Predicting on a memmap allocates far less than a float64 copy of it."""
    n = 1_000_000
    path = tmp_path / 'big.f32'
    mm = np.memmap(path, dtype=np.float32, mode='w+', shape=(n, P))
    for start in range(0, n, 100_000):
        mm[start : start + 100_000] = np.random.default_rng(start).uniform(size=(100_000, P))
    mm.flush()
    mm = np.memmap(path, dtype=np.float32, mode='r', shape=(n, P))
    model, binning = predict_mod.from_fit(fit)
    host_bytes = 2**20
    # compile every chunk shape first: loading a program from the persistent
    # compilation cache allocates its bytes in Python, which tracemalloc counts
    predict_mod.predict_rows(mm, model, binning, kind='mean', host_bytes=host_bytes)
    tracemalloc.start()
    try:
        out = predict_mod.predict_rows(mm, model, binning, kind='mean', host_bytes=host_bytes)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    float64_copy = n * P * 8
    assert peak < 4 * host_bytes + out.nbytes
    assert peak - out.nbytes < float64_copy / 3  # (the output: float64 means)
    assert_allclose(out[:1000], fit.predict(np.asarray(mm[:1000]), kind='mean'), rtol=1e-6, atol=1e-6)


def test_predict_chunks_from_csv(fit, tmp_path):
    rng = np.random.default_rng(10)
    x = rng.uniform(size=(250, P))
    df = pd.DataFrame(x, columns=['x0', 'x1', 'x2'])
    path = tmp_path / 'x.csv'
    df.to_csv(path, index=False)
    parts = list(fit.predict_chunks(pd.read_csv(path, chunksize=100), kind='quantiles', q=[0.1, 0.9]))
    assert [p.shape for p in parts] == [(2, 100), (2, 100), (2, 50)]
    whole = fit.predict(pd.read_csv(path), kind='quantiles', q=[0.1, 0.9])
    assert_allclose(np.concatenate(parts, axis=1), whole, rtol=1e-6, atol=1e-6)
    parts = list(fit.predict_chunks((x[i : i + 60] for i in range(0, 250, 60)), kind='mean'))
    assert_allclose(np.concatenate(parts), fit.predict(x, kind='mean'), rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- memory


def test_device_memory_does_not_grow_with_rows(fit):
    """Compiled temporaries of the summaries do not grow with the number of points
    (beyond at most one float per point), also not with the number of draws."""
    model, _ = predict_mod.from_fit(fit)
    link_params = tuple(np.float32(v) for v in model.link_params)
    ndraws = int(model.trace.leaf_tree.shape[0])
    sigma = jax.numpy.asarray(model.sigma, jax.numpy.float32)
    key = jax.random.key(0)
    budget = 2**20
    compressed = jax.device_put(grove.compress_trace(model.trace))
    cases = [
        ('quantiles', (0.1, 0.5), True, False),
        ('sd', None, False, False),
        ('mean', None, False, False),
        ('mean', None, False, True),
        ('draws', None, False, False),
    ]
    for kind, q, predictive, is_compressed in cases:
        plan = pipeline.Plan(kind, q, 'affine', ndraws, is_compressed, predictive, budget)
        trace = compressed if is_compressed else model.trace
        temps = []
        for n in (2**13, 2**16):
            X = jax.ShapeDtypeStruct((P, n), np.uint8)
            rows = jax.ShapeDtypeStruct((n,), np.uint32) if predictive else None
            jitted = pipeline.runner(plan).__wrapped__
            lowered = jitted.lower(X, rows, None, trace, link_params, sigma, key)
            temps.append(lowered.compile().memory_analysis().temp_size_in_bytes)
        # at most one float per point beyond a constant (XLA may keep a copy of an (n,) output)
        assert temps[1] - temps[0] <= 4.5 * (2**16 - 2**13), (kind, is_compressed, temps)
        assert temps[1] <= 4 * budget, (kind, temps)


# ---------------------------------------------------------------- validation


def test_bad_arguments(fit, pfit, data):
    x_test = data[2]
    with pytest.raises(ValueError, match='kind'):
        fit.predict(x_test, kind='median')
    with pytest.raises(ValueError, match='q'):
        fit.predict(x_test, kind='quantiles')
    with pytest.raises(ValueError, match='q'):
        fit.predict(x_test, kind='quantiles', q=[0.5, 1.5])
    with pytest.raises(ValueError, match='q'):
        fit.predict(x_test, kind='quantiles', q=np.nan)
    with pytest.raises(ValueError, match='q'):
        fit.predict(x_test, kind='quantiles', q=[])
    with pytest.raises(TypeError, match='q'):
        fit.predict(x_test, kind='quantiles', q=['a'])
    with pytest.raises(ValueError, match='q'):
        fit.predict(x_test, kind='mean', q=0.5)
    with pytest.raises(TypeError, match='predictive'):
        fit.predict(x_test, predictive=1)
    with pytest.raises(ValueError, match='predictive'):
        pfit.predict(x_test, predictive=True)
    with pytest.raises(ValueError, match='w_new'):
        fit.predict(x_test, predictive=True, w_new=np.ones(N_TEST + 1))
    with pytest.raises(ValueError, match='w_new'):
        fit.predict(x_test, predictive=True, w_new=-np.ones(N_TEST))
    with pytest.raises(ValueError, match='w_new'):
        fit.predict(x_test, predictive=True, w_new=0.0)
    with pytest.raises(ValueError, match='w_new'):
        fit.predict(x_test, w_new=np.ones(N_TEST))
    with pytest.raises(TypeError, match='seed'):
        fit.predict(x_test, predictive=True, seed='a')
    with pytest.raises(ValueError, match='seed'):
        fit.predict(x_test, predictive=True, seed=-1)
    with pytest.raises(TypeError, match='chunks'):
        fit.predict_chunks(x_test)
    with pytest.raises(TypeError, match='chunks'):
        fit.predict_chunks(3)
    with pytest.raises(ValueError, match='x_new'):
        fit.predict(np.zeros((5, P + 1)), kind='sd')
    # a single row passed flat: told how to pass it
    with pytest.raises(ValueError, match=rf'x_new must have {P} columns.*got 1 \(a 1-d array is one column.*\(1, {P}\)'):
        fit.predict(x_test[0])
    with pytest.raises(ValueError, match=r'x_new must have .* got 1 \(a 1-d'):
        fit.predict(list(x_test[0]))
    bad = x_test.copy()
    bad[3, 1] = np.inf
    with pytest.raises(ValueError, match='column 1 .*row 3'):
        fit.predict(bad, kind='quantiles', q=0.5)
    with pytest.raises(ValueError, match='chunk 1'):
        list(fit.predict_chunks([x_test, bad]))
    with pytest.raises(TypeError, match='chunk 1'):
        list(fit.predict_chunks([x_test, x_test.astype(str)]))
    with pytest.raises(TypeError, match='chunk 0'):
        list(fit.predict_chunks([None]))


def test_compress_trace_sums(fit):
    """The compressed trace has fewer steps, and the same sums of leaves per tree structure."""
    trace = fit._trace  # noqa: SLF001
    compressed = grove.compress_trace(trace)
    ndraws = trace.leaf_tree.shape[0]
    assert 1 <= compressed.leaf_tree.shape[0] < ndraws
    # every draw is in exactly one run: the leaf sums per tree and slot agree
    assert_allclose(
        np.asarray(compressed.leaf_tree, np.float64).sum(axis=0),
        np.asarray(trace.leaf_tree, np.float64).sum(axis=0),
        rtol=1e-5,
        atol=1e-5,
    )
    rng = np.random.default_rng(0)
    X = jax.numpy.asarray(rng.integers(0, 50, size=(P, 64)).astype(np.uint8))
    total = np.asarray(grove.trace_sums(X, jax.device_put(compressed), kind='sum'))
    expected = np.asarray(grove.trace_sums(X, trace, kind='sum'))
    assert_allclose(total, expected, rtol=1e-5, atol=1e-4)


def test_compressed_steps_rounded_with_empty_padding(fit):
    """The compressed trace's steps are the most runs of a tree rounded up by
    `compressed_steps` (so that fits share a program), and the steps past a
    tree's last run add nothing: zero leaves, its last structure."""
    trace = fit._trace  # noqa: SLF001
    split = np.asarray(trace.split_tree)
    var = np.where(split != 0, np.asarray(trace.var_tree), 0)
    ndraws = split.shape[0]
    changed = np.any((split[1:] != split[:-1]) | (var[1:] != var[:-1]), axis=2)
    runs = 1 + changed.sum(axis=0)
    compressed = grove.compress_trace(trace)
    steps = compressed.leaf_tree.shape[0]
    assert steps == traces.compressed_steps(int(runs.max()), ndraws)
    assert steps % -(-ndraws // 16) == 0 or steps == ndraws
    for j, r in enumerate(runs):
        assert not np.any(np.asarray(compressed.leaf_tree)[r:, j])
        padding = np.asarray(compressed.split_tree)[r:, j]
        assert_array_equal(padding, np.broadcast_to(split[-1, j], padding.shape))


def _rss_bytes():
    with open('/proc/self/status') as fh:
        for line in fh:
            if line.startswith('VmRSS:'):
                return int(line.split()[1]) * 1024
    return 0


@pytest.mark.skipif(not hasattr(__import__('mmap'), 'MADV_DONTNEED'), reason='needs madvise')
def test_memmap_pages_leave_rss(tmp_path):
    """Reading a memmapped file chunk by chunk does not keep its pages resident."""
    rows, p = 2_000_000, 5  # 40 MB of float32
    path = tmp_path / 'x.npy'
    with open(path, 'wb') as fh:
        np.lib.format.write_array_header_1_0(fh, {'descr': '<f4', 'fortran_order': False, 'shape': (rows, p)})
        for _ in range(4):
            fh.write(np.ones((rows // 4, p), np.float32).tobytes())
    x = np.load(path, mmap_mode='r')
    enc = encoding.fit_encoding(np.ones((2, p)), 'x')
    binning = predict_mod.Binning(p, None, enc, np.ones(p, bool), np.zeros((p, 1), np.float32))
    before = _rss_bytes()
    total = 0.0
    # small chunks: the float64 temporaries of encoding a chunk stay well below the bound
    for _, chunk in predict_mod.iter_row_chunks('x', x, binning, 20_000):
        total += chunk.sum()
        del chunk
    grown = _rss_bytes() - before
    assert total == rows * p
    assert grown < x.nbytes / 4, grown


def test_chunks_careless_input(fit):
    """A string is not an iterable of chunks, and a scalar chunk is not rows."""
    with pytest.raises(TypeError, match='chunks'):
        list(fit.predict_chunks('abc'))
    with pytest.raises(ValueError, match='chunk 0 .*2-dimensional'):
        list(fit.predict_chunks([3.0]))
