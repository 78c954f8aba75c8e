"""Chains and data points over a device mesh (`bartz.sharding`).

The test suite runs with 4 virtual CPU devices (see ``conftest.py``).
Compilation dominates the time of these tests, so the fits share one data
set and one set of shapes, are cached per module, and the slower variants
(more meshes) are marked slow. The fits are short (30 or 50 iterations): the
sharded and unsharded chains take the same accept/reject decisions only as
long as float rounding does not flip one, and the chance of a flip grows
with the length of the run.
"""

import functools
import os
from types import SimpleNamespace

import jax
import numpy as np
import pandas as pd
import pytest
from jax import random
from jax.sharding import NamedSharding, PartitionSpec

from bartz import diagnostics, gbart, mc_gbart
from bartz.api import predict as predict_mod
from bartz.forest import grove
from bartz.run import loop as mcmcloop
from bartz.sampler import step as mcmcstep
from bartz.prep import cutpoints as prepcovars
from bartz.run import sharding, steps
from tests.coupling import assert_coupled, assert_same_fit

P = PartitionSpec
slow = pytest.mark.slow

N, N_TEST = 301, 50  # 301 = 7 * 43: padded on 2, 3 and 4 data devices; 50 test points too
NTREE = 20
NSKIP, DRAWS_PER_CHAIN, CHAINS = 10, 20, 2
SETTINGS = {
    'ntree': NTREE,
    'nskip': NSKIP,
    'ndpost': CHAINS * DRAWS_PER_CHAIN,
    'printevery': None,
    'seed': 20240501,
}
TYPE_SETTINGS = {'wbart': {}, 'pbart': {'keepevery': 2}}


def test_four_devices():
    assert jax.device_count() == 4, 'conftest.py should give 4 virtual CPU devices'


@pytest.fixture(scope='module')
def data():
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(N, 3))
    f = np.sin(2 * np.pi * x[:, 0]) + x[:, 1]
    return SimpleNamespace(
        x=x,
        y={'wbart': f + 0.2 * rng.normal(size=N), 'pbart': (f - 0.5 + rng.normal(size=N) > 0).astype(float)},
        x_test=rng.uniform(size=(N_TEST, 3)),
    )


@pytest.fixture(scope='module')
def fits(data):
    """``fits(type, num_chain_devices, num_data_devices)``: cached fits of `data`.

    ``fits(type)`` is the reference: the same chains on one device, no mesh.
    """

    @functools.cache
    def get(type_, num_chain_devices=None, num_data_devices=None):
        if num_chain_devices is None and num_data_devices is None:
            devices = {'devices': jax.devices()[:1]}
        else:
            devices = {'num_chain_devices': num_chain_devices, 'num_data_devices': num_data_devices}
        return gbart(
            data.x,
            data.y[type_],
            data.x_test,
            type=type_,
            mc_cores=CHAINS,
            **SETTINGS,
            **TYPE_SETTINGS[type_],
            **devices,
        )

    return get


@pytest.fixture(scope='module')
def reference_predict(fits, data):
    return functools.cache(lambda type_: fits(type_).predict(data.x_test))


MESHES = [
    pytest.param('wbart', 2, 1, id='wbart-chains2', marks=slow),  # (chains2xdata2 has chains)
    pytest.param('wbart', 1, 3, id='wbart-data3-padded'),
    pytest.param('wbart', 2, 2, id='wbart-chains2xdata2'),
    pytest.param('wbart', 1, 2, id='wbart-data2-padded', marks=slow),
    pytest.param('wbart', 1, 4, id='wbart-data4-padded', marks=slow),
    pytest.param('pbart', 1, 3, id='pbart-data3-padded', marks=slow),  # (wbart-data3-padded is the default run's)
    pytest.param('pbart', 2, 1, id='pbart-chains2', marks=slow),
    pytest.param('pbart', 1, 2, id='pbart-data2-padded', marks=slow),
    pytest.param('pbart', 1, 4, id='pbart-data4-padded', marks=slow),
    pytest.param('pbart', 2, 2, id='pbart-chains2xdata2', marks=slow),
]


@pytest.mark.parametrize(('type_', 'num_chain_devices', 'num_data_devices'), MESHES)
def test_same_draws_on_any_mesh(fits, reference_predict, data, type_, num_chain_devices, num_data_devices):
    """Same seed, same draws, whatever the mesh; n = 301 is padded to a
    multiple of the data devices, and so are the test points for predict."""
    fit = fits(type_, num_chain_devices, num_data_devices)
    ref = fits(type_)
    assert fit._mesh.shape == {'chains': num_chain_devices, 'data': num_data_devices}
    assert ref._mesh is None or ref._mesh.devices.size == 1
    assert fit.yhat_train.shape == ref.yhat_train.shape == (CHAINS * DRAWS_PER_CHAIN, N)
    assert_same_fit(fit, ref)
    np.testing.assert_allclose(fit.predict(data.x_test), reference_predict(type_), rtol=1e-5, atol=1e-5)


def test_predict_mean_on_mesh(fits, data):
    fit, ref = fits('wbart', 2, 2), fits('wbart')
    np.testing.assert_allclose(
        fit.predict(data.x_test, kind='mean'), ref.predict(data.x_test, kind='mean'), rtol=1e-5, atol=1e-5
    )


def test_mesh_runs_the_one_device_program(fits, data):
    """On a mesh each device runs the one-device program of the prediction
    pipeline on its points (padded to whole batches): the draws and the mean
    (over the compressed trace, on a mesh too) equal those on one device bit
    for bit."""
    fit = fits('wbart', 2, 2)
    model, binning = predict_mod.from_fit(fit)
    _, rows = next(predict_mod.iter_row_chunks('x', data.x_test, binning, 1000))
    X = prepcovars.bin_predictors_np(rows[:, binning.kept], binning.splits)
    for kind in ('draws', 'mean'):
        on_mesh = sharding.evaluate_trace_sharded(X, fit._trace, fit._mesh, kind=kind)  # noqa: SLF001
        one = np.asarray(grove.evaluate_trace(X, fit._trace, kind=kind))  # noqa: SLF001
        np.testing.assert_array_equal(on_mesh, one)


def test_predict_summaries_on_mesh(fits, data):
    """sd, quantiles and predictive draws (noise by row number) do not depend on the mesh."""
    fit, ref = fits('wbart', 1, 3), fits('wbart')
    close = functools.partial(np.testing.assert_allclose, rtol=1e-5, atol=1e-5)
    close(fit.predict(data.x_test, kind='sd'), ref.predict(data.x_test, kind='sd'))
    q = [0.1, 0.5, 0.9]
    close(fit.predict(data.x_test, kind='quantiles', q=q), ref.predict(data.x_test, kind='quantiles', q=q))
    close(
        fit.predict(data.x_test, kind='quantiles', q=q, predictive=True, seed=5),
        ref.predict(data.x_test, kind='quantiles', q=q, predictive=True, seed=5),
    )


def test_sharded_predict_does_not_retrace(fits, data):
    fit = fits('wbart', 2, 2)
    fit.predict(data.x_test)
    traces = []

    def listener(event, duration, **_):
        if event == '/jax/core/compile/jaxpr_trace_duration':
            traces.append(duration)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        fit.predict(data.x_test)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert not traces


def test_single_device_is_used(fits, data, monkeypatch):
    device = jax.devices()[3]
    where = []
    run_mcmc = mcmcloop.run_mcmc

    def spy(*args, **kwargs):
        out = run_mcmc(*args, **kwargs)
        where.append(out[0].resid.devices())
        return out

    monkeypatch.setattr(mcmcloop, 'run_mcmc', spy)
    fit = gbart(data.x, data.y['wbart'], data.x_test, mc_cores=CHAINS, devices=[device], **SETTINGS)
    assert_same_fit(fit, fits('wbart'))
    assert where == [{device}]


# ---------------------------------------------------------------- several processes

_PROCESS_SCRIPT = """
import os, sys
os.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=2'
import jax
import numpy as np
jax.config.update('jax_cpu_collectives_implementation', 'gloo')
process_id, port, folder = int(sys.argv[1]), sys.argv[2], sys.argv[3]
num_chain_devices, num_data_devices = int(sys.argv[4]), int(sys.argv[5])
jax.distributed.initialize(f'localhost:{port}', num_processes=2, process_id=process_id)
assert jax.device_count() == 4 and jax.local_device_count() == 2
from bartz import gbart
data = np.load(os.path.join(folder, 'data.npz'))
try:
    fit = gbart(data['x'], data['y'], data['x_test'], mc_cores=2, devices=jax.devices(),
                num_chain_devices=num_chain_devices, num_data_devices=num_data_devices, **SETTINGS)
except RuntimeError as e:  # a failure of bartz, not of the test set-up
    print('GBART FAILED:', e)
    sys.exit(0)
np.savez(os.path.join(folder, f'out{process_id}.npz'), yhat_train=fit.yhat_train, sigma=fit.sigma,
         yhat_test=fit.yhat_test, sigma_=fit.sigma_, varcount=fit.varcount, varprob=fit.varprob)
"""


@slow
@pytest.mark.parametrize(
    ('num_chain_devices', 'num_data_devices'),
    [pytest.param(2, 2, id='chains-across-processes'), pytest.param(1, 4, id='data-across-processes')],
)
def test_several_processes(fits, data, tmp_path, num_chain_devices, num_data_devices):
    """Two processes on this machine, 2 virtual CPU devices each, joined by
    `jax.distributed.initialize` (CPU collectives by gloo): a stand-in for
    several hosts. Each process runs the same gbart call on the same data."""
    import socket  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    np.savez(tmp_path / 'data.npz', x=data.x, y=data.y['wbart'], x_test=data.x_test)
    script = tmp_path / 'child.py'
    script.write_text(_PROCESS_SCRIPT.replace('**SETTINGS', '**' + repr(SETTINGS)))
    with socket.socket() as sock:
        sock.bind(('localhost', 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != 'XLA_FLAGS'}
    args = [str(port), str(tmp_path), str(num_chain_devices), str(num_data_devices)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(i), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [proc.communicate(timeout=300)[0] for proc in procs]
    for proc, out in zip(procs, outputs, strict=True):
        if proc.returncode:
            msg = f'process failed (set-up, not bartz?):\n{out[-3000:]}'
            raise RuntimeError(msg)
    failures = [line for out in outputs for line in out.splitlines() if line.startswith('GBART FAILED')]
    assert not failures
    ref = fits('wbart')
    for i in range(2):
        out = dict(np.load(tmp_path / f'out{i}.npz'))
        assert_same_fit(SimpleNamespace(**out), ref)


# ---------------------------------------------------------------- mc_gbart


def test_mc_gbart_defaults(fits, data):
    """Two chains by default, spread over 2 of the 4 devices; ndpost is the
    total; draws come chain after chain, as R's mc.gbart."""
    fit = mc_gbart(data.x, data.y['wbart'], data.x_test, **SETTINGS)
    assert fit.chains == 2
    assert fit._mesh.shape == {'chains': 2, 'data': 1}
    assert fit.ndpost == CHAINS * DRAWS_PER_CHAIN
    assert fit.yhat_train.shape == (CHAINS * DRAWS_PER_CHAIN, N)
    assert fit.yhat_test.shape == (CHAINS * DRAWS_PER_CHAIN, N_TEST)
    assert fit.sigma_.shape == (CHAINS * DRAWS_PER_CHAIN,)
    assert fit.sigma.shape == (NSKIP + DRAWS_PER_CHAIN, CHAINS)
    assert fit.by_chain('yhat_train').shape == (CHAINS, DRAWS_PER_CHAIN, N)
    assert fit.by_chain('yhat_test').shape == (CHAINS, DRAWS_PER_CHAIN, N_TEST)
    assert fit.by_chain('sigma_').shape == (CHAINS, DRAWS_PER_CHAIN)
    np.testing.assert_array_equal(fit.by_chain('sigma_'), fit.sigma[NSKIP:].T)
    np.testing.assert_array_equal(fit.by_chain('yhat_train')[1], fit.yhat_train[DRAWS_PER_CHAIN:])
    # the chains differ
    assert not np.allclose(fit.sigma[:, 0], fit.sigma[:, 1])
    # the automatic mesh is num_chain_devices=2: the same program, the same draws
    np.testing.assert_array_equal(fit.yhat_train, fits('wbart', 2, 1).yhat_train)
    np.testing.assert_array_equal(fit.sigma, fits('wbart', 2, 1).sigma)

    table = fit.diagnostics()
    assert isinstance(table, pd.DataFrame)
    assert {'rhat', 'ess_bulk', 'ess_tail'} <= set(table.columns)
    assert 'sigma' in table.index
    assert np.all(np.isfinite(table[['rhat', 'ess_bulk', 'ess_tail']].to_numpy()))


@pytest.fixture(scope='module')
def rhat_fits():
    """Four chains (one per device) on an easy and on a hard problem of the same shape.

    Easy: a smooth function of 200 points with noise sd 0.3. With 50 trees,
    200 burn-in iterations and 300 draws per chain, the error sd has a bulk
    ESS of about 200-260 over the 4 chains and R-hat 1.005-1.03 (seeds 0-5);
    the test asserts < 1.1. Hard: a wiggly interaction with noise sd 0.05:
    the OLS guess of sigma is ~30 times the truth, and sigma falls for tens of
    iterations after the start. Both fits have the same shapes and chunk
    sizes, so they compile once.
    """
    rng = np.random.default_rng(1)
    n = 200
    x = rng.uniform(size=(n, 2))
    easy = np.sin(2 * np.pi * x[:, 0]) + 0.5 * x[:, 1] + 0.3 * rng.normal(size=n)
    hard = 3 * np.sin(6 * np.pi * x[:, 0]) * (x[:, 1] > 0.5) + 0.05 * rng.normal(size=n)
    kw = {'mc_cores': 4, 'ntree': 50, 'nskip': 200, 'ndpost': 4 * 300, 'printevery': None, 'seed': 3}
    return SimpleNamespace(easy=mc_gbart(x, easy, **kw), hard=mc_gbart(x, hard, **kw))


def test_rhat_well_mixed(rhat_fits):
    fit = rhat_fits.easy
    assert fit.chains == 4
    assert fit._mesh.shape == {'chains': 4, 'data': 1}
    table = fit.diagnostics()
    assert table.loc['sigma', 'rhat'] < 1.1
    assert table.loc['sigma', 'ess_bulk'] > 50


def test_rhat_not_converged(rhat_fits):
    """Chains from a common start with nskip=0 and 20 draws.

    They are the first 20 iterations of the burn-in (``fit.sigma`` keeps the
    burn-in, as R): iteration i uses ``fold_in(key, i)`` whatever nskip, so
    they are exactly the draws of a fit with ``nskip=0, ndpost=4 * 20``.
    Every chain trends down, so split R-hat is well above 1 (1.36-1.71 for
    seeds 0-5); assert only that it exceeds 1.1 and the well-mixed value.
    """
    early = rhat_fits.hard.sigma[:20].T  # (chains, draws)
    rhat = float(diagnostics.rhat(early))
    assert rhat > 1.1
    assert rhat > rhat_fits.easy.diagnostics().loc['sigma', 'rhat']


# ---------------------------------------------------------------- core API


def test_run_mcmc_on_mesh(data):
    """`run_mcmc` with a mesh from `make_mesh` reproduces the vmapped chains.

    The data are padded to a multiple of the data devices with
    `init`'s ``valid``; the padding gets a zero sum of trees. The shapes are
    those of the gbart fits above, so the compiled programs are reused.
    """
    n = N
    splits = prepcovars.compute_splits(data.x, numcut=100)
    X = prepcovars.bin_predictors_np(data.x, splits.splits)
    y = data.y['wbart']
    y = ((y - y.mean()) / y.std()).astype(np.float32)

    def make_state(npad):
        state = mcmcstep.init(
            X=np.pad(X, ((0, 0), (0, npad - n))),
            max_split=splits.max_split,
            y=np.pad(y, (0, npad - n)),
            num_trees=NTREE,
            leaf_prior_var=1 / (4 * NTREE),
            sigma2_alpha=1.5,
            sigma2_beta=0.05,
            valid=np.arange(npad) < n,
        )
        return mcmcstep.init_chains(state, CHAINS)

    run = functools.partial(
        mcmcloop.run_mcmc, n_burn=NSKIP, n_save=DRAWS_PER_CHAIN, printevery=None, num_chains=CHAINS
    )
    _, ref, ref_info = run(random.key(7), make_state(n))
    mesh = sharding.make_mesh(2, 2)
    npad = sharding.padded_length(n, 2)
    assert npad == 302
    state, trace, info = run(random.key(7), make_state(npad), mesh=mesh)

    # the final state lives on the mesh as `state_specs` says
    specs = mcmcloop.state_specs(state)
    for x, spec in zip(jax.tree.leaves(state), jax.tree.leaves(specs), strict=True):
        assert x.sharding.is_equivalent_to(NamedSharding(mesh, spec), x.ndim)
    assert state.X.addressable_shards[0].data.shape == (3, npad // 2)
    assert state.forest.leaf_indices.addressable_shards[0].data.shape == (1, NTREE, npad // 2)

    def by_chain(x):  # the trace's (draws, chains, ...) as (chains, draws, ...)
        return np.swapaxes(np.asarray(x), 0, 1)

    first = assert_coupled(
        {name: (by_chain(getattr(trace, name)), by_chain(getattr(ref, name))) for name in ('var_tree', 'split_tree')},
        {
            'leaf_tree': (by_chain(trace.leaf_tree), by_chain(ref.leaf_tree)),
            'sigma2': (by_chain(trace.sigma2), by_chain(ref.sigma2)),
            'fit_train': (by_chain(trace.fit_train[..., :n]), by_chain(ref.fit_train)),
        },
    )
    np.testing.assert_array_equal(trace.fit_train[..., n:], 0)
    whole = first == DRAWS_PER_CHAIN  # the chains that never part
    burn, ref_burn = np.asarray(info.burn_sigma2), np.asarray(ref_info.burn_sigma2)  # (iterations, chains)
    np.testing.assert_allclose(burn[:, whole], ref_burn[:, whole], rtol=1e-5, atol=1e-5)
    if whole.all():  # (the counts are totals over the chains)
        assert (info.grow_accepted, info.prune_accepted) == (ref_info.grow_accepted, ref_info.prune_accepted)


def test_make_mesh():
    mesh = sharding.make_mesh(2, 2)
    assert mesh.axis_names == ('chains', 'data')
    assert mesh.devices.tolist() == [jax.devices()[:2], jax.devices()[2:]]
    assert sharding.make_mesh(1, 3, jax.devices()[1:]).devices.tolist() == [jax.devices()[1:]]
    assert sharding.auto_mesh(6).shape == {'chains': 2, 'data': 1}
    assert sharding.auto_mesh(3) is None
    assert sharding.auto_mesh(4, jax.devices()[:1]) is None
    assert [sharding.padded_length(301, k) for k in (1, 2, 3, 4)] == [301, 302, 303, 304]


def test_errors(data):
    x, y = data.x, data.y['wbart']
    with pytest.raises(ValueError, match=r'only 4 are available'):
        sharding.make_mesh(3, 2)
    with pytest.raises(ValueError, match=r'mc_cores \(3\) must be a multiple of num_chain_devices \(2\)'):
        gbart(x, y, mc_cores=3, num_chain_devices=2)
    with pytest.raises(ValueError, match=r'= 8 devices requested, 4 available'):
        gbart(x, y, mc_cores=2, num_chain_devices=2, num_data_devices=4)
    with pytest.raises(ValueError, match=r'= 3 devices requested, 2 available'):
        gbart(x, y, devices=jax.devices()[:2], num_data_devices=3)
    with pytest.raises(ValueError, match=r'num_data_devices must be a positive integer, got 0'):
        gbart(x, y, num_data_devices=0)
    with pytest.raises(TypeError, match=r'devices must be a non-empty sequence of JAX devices'):
        gbart(x, y, devices=[])
    with pytest.raises(TypeError, match=r'devices must be a non-empty sequence of JAX devices'):
        gbart(x, y, devices=['cpu:0'])
    state = mcmcstep.init(X=np.zeros((1, 4), np.uint8), max_split=[1], y=np.zeros(4), num_trees=1,
                          leaf_prior_var=1.0, sigma2_alpha=1.0, sigma2_beta=1.0)  # fmt: skip
    with pytest.raises(ValueError, match=r'a mesh needs num_chains'):
        mcmcloop.run_mcmc(random.key(0), state, n_burn=1, n_save=1, mesh=sharding.make_mesh(1, 2))


# ---------------------------------------------------------------- memory

# (every k below runs the same kernels: the local n stays below
# kernels._BLOCK_MIN_POINTS, where the sweep carries the residuals beside
# a column of ones, about 3-7 more bytes of temporaries per point than the
# blocked path above it)
MEM_N, MEM_P, MEM_TREES = 24_000, 10, 5


def _mem_state(type_, num_data_devices):
    """A one-chain state of `MEM_N` points placed on a ``(1, k)`` mesh."""
    rng = np.random.default_rng(2)
    y = rng.normal(size=MEM_N).astype(np.float32)
    state = mcmcstep.init(
        X=rng.integers(0, 100, size=(MEM_P, MEM_N), dtype=np.uint8),
        max_split=np.full(MEM_P, 100),
        y=y > 0 if type_ == 'pbart' else y,
        num_trees=MEM_TREES,
        leaf_prior_var=0.1,
        sigma2_alpha=1.5,
        sigma2_beta=0.1,
    )
    state = mcmcstep.init_chains(state, 1)
    mesh = sharding.make_mesh(1, num_data_devices)
    specs = mcmcloop.state_specs(state)
    state = jax.tree.map(
        lambda s, x: jax.device_put(x, NamedSharding(mesh, s)), specs, state, is_leaf=lambda s: isinstance(s, P)
    )
    return state, specs, mesh


def _bytes(state, specs):
    """Total and per-device (first device) bytes of the data-sized and of the other arrays."""
    out = {'data': [0, 0], 'other': [0, 0]}
    for x, spec in zip(jax.tree.leaves(state), jax.tree.leaves(specs), strict=True):
        kind = 'data' if 'data' in spec else 'other'
        out[kind][0] += x.nbytes
        out[kind][1] += x.addressable_shards[0].data.nbytes
    return out


@pytest.mark.parametrize('type_', ['wbart', 'pbart'])
@pytest.mark.parametrize('num_data_devices', [1, 2, 4])
def test_state_bytes_per_device(type_, num_data_devices):
    """Per device: (p + C m + 4 C + 4) n / k bytes of data-sized arrays
    (binned X, leaf indices, residuals, y; plus 4 C n / k for the probit
    latents, with a 1-byte y), the rest replicated."""
    k = num_data_devices
    state, specs, _ = _mem_state(type_, k)
    b = _bytes(state, specs)
    chains = 1
    per_point = MEM_P + chains * MEM_TREES + 4 * chains + (4 * chains + 1 if type_ == 'pbart' else 4)
    assert b['data'][0] == per_point * MEM_N
    assert b['data'][1] == per_point * MEM_N // k
    assert b['other'][1] == b['other'][0] < 0.01 * b['data'][0]
    assert all(s.data.nbytes * k == state.X.nbytes for s in state.X.addressable_shards)


@functools.cache
def _compiled_step_memory(type_, num_data_devices):
    state, specs, mesh = _mem_state(type_, num_data_devices)
    # (keep_unused: the sweep may not read every field, e.g. the carried
    # leaf counts at small n; the test is about how the state is sharded)
    step = jax.jit(steps.make_step(1, mesh), keep_unused=True)
    analysis = step.lower(random.key(0), state).compile().memory_analysis()
    return analysis, _bytes(state, specs)


@pytest.mark.parametrize(
    'type_',
    [
        'wbart',
        'pbart',
    ],
)
def test_compiled_step_memory(type_):
    """The compiled sharded step: per-device arguments are the state's
    per-device bytes, and the temporaries also shrink as 1/k."""
    one, _ = _compiled_step_memory(type_, 1)
    for k in (4, 2) if type_ == 'wbart' else (4,):
        analysis, b = _compiled_step_memory(type_, k)
        state_bytes = b['data'][1] + b['other'][1]
        assert abs(analysis.argument_size_in_bytes - state_bytes) <= 64  # + the key
        assert analysis.argument_size_in_bytes < 1.01 * one.argument_size_in_bytes / k + 4096
        assert analysis.temp_size_in_bytes < 1.25 * one.temp_size_in_bytes / k + 16384


@functools.cache
def _vmapped_step_temp(num_chains):
    rng = np.random.default_rng(3)
    n, ntree = 4_000, 50
    state = mcmcstep.init(
        X=rng.integers(0, 100, size=(MEM_P, n), dtype=np.uint8),
        max_split=np.full(MEM_P, 100),
        y=rng.normal(size=n).astype(np.float32),
        num_trees=ntree,
        leaf_prior_var=0.1,
        sigma2_alpha=1.5,
        sigma2_beta=0.1,
    )
    state = mcmcstep.init_chains(state, num_chains)
    step = jax.jit(steps.make_step(num_chains))
    return step.lower(random.key(0), state).compile().memory_analysis().temp_size_in_bytes


def test_vmapped_chains_memory():
    """Chains side by side on one device need about C times the temporaries of one."""
    one, two = _vmapped_step_temp(1), _vmapped_step_temp(2)
    assert two < 2.5 * one
