"""Numerics over long runs: `bartz.mcmcstep.refresh` and its use in `run_mcmc`.

The sweep updates the carried residuals incrementally (``r += old - new`` per
tree), and with weights the per-leaf precision sums by partial sums, in
float32: each update rounds, so over a long run the carried values drift
from those the trees imply like a random walk of ``iterations * trees``
roundings. `run_mcmc` recomputes them from the trees every
`bartz.mcmcloop.REFRESH_EVERY` iterations (its ``refresh_every``). These tests compare the carried
values after 20,000 sweeps with an exact float64 recomputation from the
trees, with and without the refresh.
"""

import jax
import numpy as np
import pytest
from jax import random

from bartz.forest import grove
from bartz.run import loop as mcmcloop
from bartz.run import steps
from bartz.sampler import step as mcmcstep

U = 2.0**-24  # float32 unit roundoff
DRIFT_ITERS = 20_037  # 37 iterations after the last refresh
DRIFT_TREES = 5
REFRESH_EVERY = mcmcloop.REFRESH_EVERY  # the default


def small_state(weighted, *, seed=0, n=64, binary=False, valid=None):
    rng = np.random.default_rng(seed)
    max_split = np.array([7, 7, 3])
    X = np.stack([rng.integers(0, k + 1, size=n) for k in max_split]).astype(np.uint8)
    y = 3 * np.sin(X[0]) + X[1] * (X[2] > 1) + rng.normal(size=n)
    kw = {}
    if binary:
        y = y > np.median(y)
        kw['probit_threshold'] = 0.2
    else:
        y = (y - y.mean()).astype(np.float32)
        kw.update(sigma2_alpha=1.5, sigma2_beta=0.5)
    if valid is not None:
        y = np.where(valid, y, np.zeros_like(y))
    w = rng.uniform(0.25, 4, size=n).astype(np.float32) if weighted else None
    return mcmcstep.init(
        X=X,
        max_split=max_split,
        y=y,
        num_trees=DRIFT_TREES,
        max_depth=4,
        leaf_prior_var=1.0,
        prec_weights=w,
        min_points_per_leaf=1,
        valid=valid,
        **kw,
    )


def exact_caches(state):
    """Residuals, leaf counts and precision sums from the trees, in float64."""
    f = state.forest
    real = np.asarray(f.leaf_indices[0]) != 0
    idx = np.asarray(grove.traverse_forest(state.X, f.var_tree, f.split_tree)).astype(np.int64)
    idx = np.where(real, idx, 0)
    leaf = np.asarray(f.leaf_tree, np.float64)
    fx = np.take_along_axis(leaf, idx, axis=1)
    target = np.asarray(state.y if state.z is None else state.z, np.float64)
    resid = np.where(real, target - fx.sum(axis=0), 0.0)
    heap_size = leaf.shape[1]
    counts = np.stack([np.bincount(row[real], minlength=heap_size) for row in idx])
    prec = None
    if f.leaf_prec is not None:
        w = np.asarray(state.prec_weights, np.float64)[real]
        prec = np.stack([np.bincount(row[real], weights=w, minlength=heap_size) for row in idx])
    return idx, resid, counts, prec, fx


def run_long(weighted, refresh_every):
    state, _, info = mcmcloop.run_mcmc(
        random.key(1),
        small_state(weighted),
        n_burn=DRIFT_ITERS,
        n_save=0,
        save_train=False,
        printevery=None,
        refresh_every=refresh_every,
    )
    assert info.grow_accepted > 1000  # the trees kept changing
    return jax.device_get(state)


@pytest.fixture(scope='module')
def long_runs():
    """Final states of 20,037 sweeps, with and without the refresh, per weighting."""
    runs = {}
    for weighted in (False, True):
        for every in (REFRESH_EVERY, 10**9):
            runs[weighted, every] = run_long(weighted, every)
    return runs


@pytest.mark.slow  # the four runs: 40 s with their compilation
@pytest.mark.parametrize('weighted', [False, True])
def test_caches_exact_after_20000_sweeps(long_runs, weighted):
    """After 20,037 sweeps (37 after the last refresh), the carried residuals
    are within float32 rounding of the exact float64 ones.

    Bound: since the last refresh, each point's residual went through ``K =
    m * (1 + 37)`` float32 operations (the refresh's sum over the ``m``
    trees, then one ``r + (old - new)`` per tree and sweep), each rounding
    by at most ``u S`` (``u = 2**-24``, ``S = max|y| + max_i sum_j
    |leaf_j(x_i)|`` bounds every operand), with independent, mean-zero
    errors: a random walk of sd at most ``u S sqrt(K / 3)``; the bound is 4
    times ``u S sqrt(K)``, about 7 sd. Leaf counts are integers and must be
    exact; precision sums (sums of at most ``n`` weights, then one
    update per sweep) within ``u W (n + 4 * 37)``, ``W`` the total weight.
    """
    state = long_runs[weighted, REFRESH_EVERY]
    idx, exact, counts, prec, fx = exact_caches(state)
    np.testing.assert_array_equal(np.asarray(state.forest.leaf_indices), idx)
    np.testing.assert_array_equal(np.asarray(state.forest.leaf_count), counts)
    since_refresh = DRIFT_ITERS % REFRESH_EVERY
    num_ops = DRIFT_TREES * (1 + since_refresh)
    scale = np.max(np.abs(np.asarray(state.y))) + np.max(np.abs(fx).sum(axis=0))
    err = np.abs(np.asarray(state.resid, np.float64) - exact)
    assert np.max(err) <= 4 * U * scale * np.sqrt(num_ops), (np.max(err), U * scale)
    if weighted:
        total = np.sum(np.asarray(state.prec_weights, np.float64))
        n = state.y.shape[0]
        prec_err = np.abs(np.asarray(state.forest.leaf_prec, np.float64) - prec)
        assert np.max(prec_err) <= U * total * (n + 4 * since_refresh)
    else:
        assert state.forest.leaf_prec is None


@pytest.mark.slow  # the four long runs of `long_runs` (a minute with their compilation)
@pytest.mark.parametrize('weighted', [False, True])
def test_drift_grows_without_refresh(long_runs, weighted):
    """Without the refresh, the residual error is a random walk over all
    ``20,037 * 5`` updates instead of the last ``37 * 5``: its rms grows by
    about ``sqrt(20,037 / 38) = 23`` (measured: from about 1 ulp of
    ``max |y|`` to about 15-20 ulps, 5e-7 to 8e-6 here: small, but without
    bound in the length of the run). Asserted: more than 4 times larger."""
    rms = {}
    for every in (REFRESH_EVERY, 10**9):
        state = long_runs[weighted, every]
        _, exact, _, _, _ = exact_caches(state)
        rms[every] = np.sqrt(np.mean((np.asarray(state.resid, np.float64) - exact) ** 2))
    assert rms[10**9] > 4 * rms[REFRESH_EVERY], rms


@jax.jit
def _run_steps(key, state):
    return jax.lax.fori_loop(0, 30, lambda i, s: mcmcstep.step(random.fold_in(key, i), s)[0], state)


def run_steps(key, state):
    """30 sweeps, to grow some trees."""
    with jax.debug_key_reuse(False):  # fold_in of a key closed over by the loop (false positive)
        return _run_steps(key, state)


def drift(state, key, scale):
    """`state` with its caches perturbed, as if by a long drift (leaf counts
    are exact in the sampler and stay untouched)."""
    key_r, key_p = random.split(key)
    real = state.forest.leaf_indices[0] != 0
    resid = state.resid + jax.numpy.where(real, scale * random.normal(key_r, state.resid.shape), 0.0)
    forest = state.forest
    if forest.leaf_prec is not None:
        forest = forest._replace(leaf_prec=forest.leaf_prec * (1 + scale * random.normal(key_p, forest.leaf_prec.shape)))
    return state._replace(resid=resid, forest=forest)


@pytest.mark.parametrize(('weighted', 'binary', 'padded'), [(False, False, True), (True, False, True), (False, True, False)])
def test_refresh_restores_the_caches(weighted, binary, padded, keys):
    """`refresh` recomputes residuals (from ``y``, or the probit latents) and
    precision sums from the trees; padding points keep residual 0 and
    enter no sum; everything else is untouched."""
    n = 64
    valid = np.arange(n) % 9 != 4 if padded else None
    state = small_state(weighted, binary=binary, valid=valid, n=n)
    state = run_steps(next(keys), state)
    drifted = drift(state, next(keys), 1e-2)
    fresh = jax.jit(mcmcstep.refresh)(drifted)
    _, exact, _, prec, fx = exact_caches(state)
    assert np.max(np.abs(np.asarray(drifted.resid) - exact)) > 1e-3
    scale = np.max(np.abs(exact)) + np.max(np.abs(fx).sum(axis=0))
    np.testing.assert_allclose(fresh.resid, exact, rtol=0, atol=2 * DRIFT_TREES * U * scale)
    if padded:
        assert np.all(np.asarray(fresh.resid)[~valid] == 0)
    if weighted:
        w = np.asarray(state.prec_weights, np.float64)
        np.testing.assert_allclose(fresh.forest.leaf_prec, prec, rtol=0, atol=n * U * w.sum())
    same = fresh._replace(resid=drifted.resid, forest=fresh.forest._replace(leaf_prec=drifted.forest.leaf_prec))
    jax.tree.map(np.testing.assert_array_equal, same, drifted)


@pytest.mark.no_key_reuse_check
def test_run_mcmc_refreshes_every_chain(keys):
    """With several chains, `run_mcmc` refreshes each (the vmapped refresh):
    the residuals after a refresh iteration are those of `refresh` itself
    for each chain, and the chain's draws do not depend on the chunking."""
    num_chains = 3
    state = mcmcstep.init_chains(small_state(True), num_chains)
    key = next(keys)
    iters = mcmcloop.REFRESH_EVERY

    def run(chunk_size):
        copy = jax.tree.map(jax.numpy.copy, state)  # run_mcmc donates its state
        out, trace, _ = mcmcloop.run_mcmc(
            key, copy, n_burn=iters - 3, n_save=3, num_chains=num_chains, chunk_size=chunk_size, printevery=None
        )
        return jax.device_get(out), trace

    out, trace = run(None)
    other, other_trace = run(7)
    jax.tree.map(np.testing.assert_array_equal, out, other)
    np.testing.assert_array_equal(trace.fit_train, other_trace.fit_train)
    axes = mcmcstep.chain_axes(out)
    again = jax.jit(jax.vmap(mcmcstep.refresh, in_axes=(axes,), out_axes=axes))(out)
    # the last iteration ended a refresh period: refreshing again changes nothing
    np.testing.assert_array_equal(again.resid, out.resid)
    np.testing.assert_array_equal(again.forest.leaf_prec, out.forest.leaf_prec)
    for c in range(num_chains):
        single = mcmcstep.State(*(x if a is None else jax.tree.map(lambda v, c=c: v[c], x) for x, a in zip(out, axes)))
        _, exact, _, prec, _ = exact_caches(single)
        np.testing.assert_allclose(single.resid, exact, atol=1e-5)
        np.testing.assert_allclose(single.forest.leaf_prec, prec, rtol=1e-5)


@pytest.mark.parametrize('weighted', [False, True])
def test_refresh_on_a_mesh(weighted, keys):
    """Data sharded over devices: residuals are refreshed per shard, the
    precision sums are summed over the shards (``psum``); the result equals
    the unsharded refresh up to float rounding."""
    from jax.sharding import NamedSharding, PartitionSpec

    from bartz.run import sharding

    num_chains, n = 2, 64
    valid = np.arange(n) % 9 != 4  # padding (inside the shards, to test the masks)
    state = run_steps(next(keys), small_state(weighted, valid=valid, n=n))
    assert np.any(np.asarray(state.forest.split_tree) != 0)
    state = mcmcstep.init_chains(state, num_chains)
    axes = mcmcstep.chain_axes(state)
    drifts = jax.vmap(drift, in_axes=(axes, 0, None), out_axes=axes)
    state = drifts(state, random.split(next(keys), num_chains), 1e-2)  # a different drift per chain
    mesh = sharding.make_mesh(2, 2)
    specs = mcmcloop.state_specs(state)
    on_mesh = jax.tree.map(
        lambda s, x: jax.device_put(x, NamedSharding(mesh, s)),
        specs,
        state,
        is_leaf=lambda s: isinstance(s, PartitionSpec),
    )
    sharded = jax.jit(steps.make_refresh(num_chains, mesh))(on_mesh)
    plain = jax.jit(steps.make_refresh(num_chains))(state)
    np.testing.assert_allclose(sharded.resid, plain.resid, rtol=0, atol=1e-6)
    assert np.all(np.asarray(sharded.resid)[:, ~valid] == 0)
    if weighted:
        np.testing.assert_allclose(sharded.forest.leaf_prec, plain.forest.leaf_prec, rtol=1e-6)
        assert not np.allclose(plain.forest.leaf_prec, state.forest.leaf_prec, rtol=1e-4)


@pytest.mark.parametrize(
    ('name', 'value'), [('refresh_every', 0), ('refresh_every', 2.5), ('refresh_every', True), ('calls_ahead', -1)]
)
def test_run_mcmc_refuses_bad_counts(name, value):
    """A refresh period below 1, or a negative number of calls ahead, is
    refused by name before anything is traced."""
    with pytest.raises(ValueError, match=f'{name} must be an integer >= {1 if name == "refresh_every" else 0}, got'):
        mcmcloop.run_mcmc(random.key(0), small_state(False), n_burn=1, n_save=1, printevery=None, **{name: value})
