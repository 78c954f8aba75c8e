"""Tests of `bartz.compile_cache`, the persistent compilation cache set up at import.

The test session configures its own cache in ``conftest.py`` before importing
bartz, so what happens at ``import bartz`` is tested in fresh Python
processes. The tests that run here in-process leave JAX's configuration as
they found it.
"""

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import jax
import jaxlib
import pytest

from bartz._compile import cache as compile_cache
from bartz._compile import keys, memory, settings
from bartz._compile import programs as _programs

JAX_DIR = f'jax-{jax.__version__}'

# Counts JAX's events about its persistent cache (jax 0.10.2,
# `jax._src.compiler.compile_or_get_cached`): 'cache_hits' is a program
# loaded from the cache, 'cache_misses' a program written to it.
PRELUDE = """
import json, os, warnings
import jax, jax.numpy as jnp
from jax import monitoring
events = []
monitoring.register_event_listener(lambda event, **kw: events.append(event))
def count(name):
    return events.count('/jax/compilation_cache/' + name)
def thresholds():
    return [jax.config.jax_persistent_cache_min_compile_time_secs,
            jax.config.jax_persistent_cache_min_entry_size_bytes]
"""


def run_python(code, tmp_path, **env):
    """Run `code` in a fresh Python with a clean environment; return the JSON it prints last."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(('JAX_', 'BARTZ_', 'XLA_'))
    }
    # Never touch the user's real cache directory.
    clean |= {'JAX_PLATFORMS': 'cpu', 'XDG_CACHE_HOME': str(tmp_path / 'xdg'), 'HOME': str(tmp_path / 'home')}
    clean |= env
    result = subprocess.run(
        [sys.executable, '-c', PRELUDE + textwrap.dedent(code)],
        env=clean,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def cached_names(path):
    """Names of the programs in a cache directory."""
    return sorted(p.name.split('-')[0] for p in Path(path).glob('*-cache'))


def test_new_process_loads_from_cache(tmp_path):
    """A program compiled in one process is loaded from disk by the next.

    The program compiles fast, below JAX's default threshold of 1 s, so it is
    kept only because bartz lowers it. Something is compiled before bartz is
    imported, to check that the cache is set up anyway.
    """
    code = """
    jax.jit(lambda x: x - 1)(jnp.arange(3.0)).block_until_ready()
    import bartz
    def double_plus_one(x):
        return 2 * x + 1
    assert jax.jit(double_plus_one)(jnp.arange(3.0)).tolist() == [1, 3, 5]
    print(json.dumps({'dir': bartz.compile_cache.cache_dir(), 'thresholds': thresholds(),
                      'hits': count('cache_hits'), 'writes': count('cache_misses')}))
    """
    cache = tmp_path / 'cache'
    first = run_python(code, tmp_path, BARTZ_CACHE_DIR=str(cache))
    assert first['dir'] == str(cache)
    assert first['thresholds'] == [0, -1]
    assert first['hits'] == 0
    assert first['writes'] >= 1
    assert 'jit_double_plus_one' in cached_names(cache)
    assert not (tmp_path / 'xdg').exists()

    second = run_python(code, tmp_path, BARTZ_CACHE_DIR=str(cache))
    assert second['hits'] >= 1
    assert second['writes'] == 0


def test_switched_off_then_enabled_moved_and_disabled_at_run_time(tmp_path):
    """``BARTZ_COMPILATION_CACHE=off`` leaves JAX alone; enable/disable work at run time."""
    other = tmp_path / 'other'
    code = f"""
    import bartz
    from bartz._compile import cache as compile_cache
    out = {{'import': [compile_cache.cache_dir(), jax.config.jax_compilation_cache_dir, thresholds()]}}
    def plus_one(x):
        return x + 1
    def plus_two(x):
        return x + 2
    def plus_three(x):
        return x + 3
    out['default'] = compile_cache.enable()
    out['thresholds'] = thresholds()
    jax.jit(plus_one)(1.0).block_until_ready()
    out['other'] = compile_cache.enable({str(other)!r})
    jax.jit(plus_two)(1.0).block_until_ready()
    compile_cache.disable()
    out['disabled'] = [compile_cache.cache_dir(), thresholds()]
    jax.jit(plus_three)(1.0).block_until_ready()
    print(json.dumps(out))
    """
    out = run_python(code, tmp_path, BARTZ_COMPILATION_CACHE='Off')
    assert out['import'] == [None, None, [1, 0]]
    default = tmp_path / 'xdg' / 'bartz' / JAX_DIR
    assert out['default'] == str(default)
    assert out['thresholds'] == [0, -1]
    assert out['other'] == str(other)
    assert out['disabled'] == [None, [1, 0]]
    # each program went to the directory in use when it was compiled
    assert 'jit_plus_one' in cached_names(default)
    assert 'jit_plus_two' not in cached_names(default)
    assert 'jit_plus_two' in cached_names(other)
    assert 'jit_plus_one' not in cached_names(other)
    assert 'jit_plus_three' not in cached_names(default) + cached_names(other)


@pytest.mark.parametrize('how', ['env', 'config'])
def test_user_configuration_is_respected(tmp_path, how):
    """A JAX cache configured before importing bartz is left as it is."""
    user = tmp_path / 'user'
    if how == 'env':
        env = {'JAX_COMPILATION_CACHE_DIR': str(user)}
        configure = ''
        expected = [1, 0]
    else:
        env = {}
        configure = f"""
        jax.config.update('jax_compilation_cache_dir', {str(user)!r})
        jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.25)
        """
        expected = [0.25, 0]
    code = textwrap.dedent(configure) + textwrap.dedent("""
        import bartz
        jax.jit(lambda x: x + 1)(1.0).block_until_ready()
        print(json.dumps({'dir': bartz.compile_cache.cache_dir(), 'thresholds': thresholds()}))
    """)
    out = run_python(code, tmp_path, **env)
    assert out == {'dir': str(user), 'thresholds': expected}
    assert not (tmp_path / 'xdg').exists()


def test_unwritable_cache_warns_once_and_fits(tmp_path):
    """A cache directory that cannot be created warns once and breaks nothing.

    Also checks what JAX does when writing an entry fails after the set-up
    (the module docstring relies on it): it warns and compiles anyway.
    """
    blocker = tmp_path / 'file'
    blocker.write_text('not a directory')
    bad = blocker / 'sub'  # cannot be created, even by root
    good = tmp_path / 'good'
    code = f"""
    import numpy as np
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        import bartz
        out = {{'dir': bartz.compile_cache.cache_dir()}}
        out['again'] = bartz.compile_cache.enable()
        out['explicit'] = bartz.compile_cache.enable({str(bad)!r})
        assert jax.jit(lambda x: 2 * x)(jnp.arange(3.0)).tolist() == [0, 2, 4]
        rng = np.random.default_rng(0)
        x = rng.normal(size=(50, 2))
        fit = bartz.gbart(x, x[:, 0], ntree=5, nskip=5, ndpost=5, printevery=None)
        out['finite'] = bool(np.all(np.isfinite(fit.yhat_train_mean)))
    out['warnings'] = [str(w.message) for w in caught if 'compilation cache' in str(w.message)]

    # the cache breaks after it was set up: JAX warns and compiles anyway
    bartz.compile_cache.enable({str(good)!r})
    jax.jit(lambda x: x + 1)(1.0).block_until_ready()
    import shutil
    shutil.rmtree({str(good)!r})
    open({str(good)!r}, 'w').close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        out['later'] = float(jax.jit(lambda x: x + 2)(1.0))
    out['later_warnings'] = [str(w.message) for w in caught]
    print(json.dumps(out))
    """
    out = run_python(code, tmp_path, BARTZ_CACHE_DIR=str(bad))
    assert out['dir'] is None
    assert out['again'] is None
    assert out['explicit'] is None
    assert out['finite']
    assert len(out['warnings']) == 1, out['warnings']
    (message,) = out['warnings']
    assert str(bad) in message
    assert 'NotADirectoryError' in message
    assert 'BARTZ_CACHE_DIR' in message
    assert 'BARTZ_COMPILATION_CACHE=0' in message

    assert out['later'] == 3
    assert any('Error writing persistent compilation cache' in m for m in out['later_warnings'])


def test_enable_unwritable_in_process(tmp_path):
    """`enable` on a bad directory warns once and leaves the configuration alone."""
    before = compile_cache.cache_dir()
    (tmp_path / 'file').write_text('')
    bad = tmp_path / 'file' / 'sub'
    with pytest.warns(UserWarning, match='cannot use') as record:
        assert compile_cache.enable(bad) == before
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert compile_cache.enable(bad) == before
    assert len(record) == 1
    assert str(bad) in str(record[0].message)
    assert compile_cache.cache_dir() == before
    assert not (tmp_path / 'xdg').exists()


@pytest.mark.parametrize('value', ['0', 'false', 'OFF', ' no '])
def test_switch_off_values(monkeypatch, value):
    monkeypatch.setenv('BARTZ_COMPILATION_CACHE', value)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert compile_cache.switched_off()


@pytest.mark.parametrize('value', ['', '1', 'True', 'on', 'yes'])
def test_switch_on_values(monkeypatch, value):
    monkeypatch.setenv('BARTZ_COMPILATION_CACHE', value)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert not compile_cache.switched_off()


def test_switch_not_understood(monkeypatch):
    monkeypatch.setenv('BARTZ_COMPILATION_CACHE', 'maybe')
    with pytest.warns(UserWarning, match="'maybe' is not understood"):
        assert not compile_cache.switched_off()


@pytest.mark.parametrize(
    ('platform', 'env', 'expected'),
    [
        ('linux', {'XDG_CACHE_HOME': '/xdg'}, '/xdg/bartz'),
        ('linux', {}, '/home/u/.cache/bartz'),
        ('linux', {'XDG_CACHE_HOME': 'relative'}, '/home/u/.cache/bartz'),
        ('darwin', {'XDG_CACHE_HOME': '/xdg'}, '/home/u/Library/Caches/bartz'),
        ('win32', {'LOCALAPPDATA': '/local'}, '/local/bartz'),
        ('win32', {}, '/home/u/AppData/Local/bartz'),
    ],
)
def test_default_dir(monkeypatch, platform, env, expected):
    for name in ('BARTZ_CACHE_DIR', 'XDG_CACHE_HOME', 'LOCALAPPDATA'):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv('HOME', '/home/u')
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert compile_cache.default_dir(platform) == str(Path(expected) / JAX_DIR)


def test_default_dir_from_env(monkeypatch):
    monkeypatch.setenv('HOME', '/home/u')
    monkeypatch.setenv('BARTZ_CACHE_DIR', '~/somewhere')
    assert compile_cache.default_dir() == '/home/u/somewhere'


def test_exported():
    import bartz  # noqa: PLC0415

    assert 'compile_cache' in bartz.__all__
    assert sorted(compile_cache.__all__) == [
        'Limits',
        'MemoryMapsWarning',
        'cache_dir',
        'disable',
        'enable',
        'limits',
        'programs_in_memory',
        'set_limits',
    ]
    assert all(hasattr(compile_cache, name) for name in compile_cache.__all__)


def test_enable_rejects_a_path_that_is_not_a_path():
    with pytest.raises(TypeError, match='path must be a directory path'):
        compile_cache.enable(123)


# --- whole compiled MCMC programs kept on disk (bartz._compile.programs) ---

FIT_CODE = """
import glob
import numpy as np
import bartz
from bartz.forest import grove
from bartz.sampler import step as mcmcstep
from bartz.forest import predict as pipeline
traced = []
def counting(module, name):  # the functions run only while a program is traced
    original = getattr(module, name)
    def wrapper(*args, **kwargs):
        traced.append(name)
        return original(*args, **kwargs)
    setattr(module, name, wrapper)
counting(mcmcstep, 'step')  # the MCMC loop
counting(pipeline, '_device_kernel')  # every prediction: x_test in gbart, fit.predict
rng = np.random.default_rng(0)
x = rng.uniform(size=(60, 3))
y = np.sin(4 * x[:, 0]) + 0.1 * rng.normal(size=60)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    fit = bartz.gbart(x, y, x_test=x[:9], ntree=5, nskip=5, ndpost=20, mc_cores=2, printevery=None, seed=1)
    again = bartz.gbart(x, y, x_test=x[:9], ntree=5, nskip=5, ndpost=20, mc_cores=2, printevery=None, seed=2)
    predicted = fit.predict(x[:7])
directory = os.path.join(bartz.compile_cache.cache_dir(), 'bartz-programs')
print(json.dumps({
    'traced': sorted(set(traced)),
    'draws': [np.asarray(fit.yhat_train).tolist(), np.asarray(fit.yhat_test).tolist(), np.asarray(predicted).tolist()],
    'files': sorted(os.path.basename(p) for p in glob.glob(os.path.join(directory, '*'))),
    'warnings': [str(w.message) for w in caught if 'cache' in str(w.message)],
}))
"""


def test_programs_new_process_skips_tracing(tmp_path):
    """A new process loads the compiled MCMC loop from disk: it does not
    trace the step, and its draws are those of the process that compiled
    it. A damaged file is ignored and written again."""
    cache = tmp_path / 'cache'
    first = run_python(FIT_CODE, tmp_path, BARTZ_CACHE_DIR=str(cache))
    assert first['traced'] == ['_device_kernel', 'step']  # compiled here
    assert first['warnings'] == []
    # x_test's program (the draws before any link) and fit.predict's (the affine link)
    assert [name.split('-')[0] for name in first['files']] == ['mcmc_chunk', 'predict', 'predict']
    assert all(name.endswith('.bartz-program') for name in first['files'])

    second = run_python(FIT_CODE, tmp_path, BARTZ_CACHE_DIR=str(cache))
    assert second['traced'] == []
    assert second['draws'] == first['draws']
    assert second['files'] == first['files']

    path = cache / 'bartz-programs' / first['files'][0]
    path.write_bytes(b'not a program')
    third = run_python(FIT_CODE, tmp_path, BARTZ_CACHE_DIR=str(cache))
    assert third['traced'] == ['step']
    assert third['draws'] == first['draws']
    assert third['files'] == first['files']
    assert third['warnings'] == []
    assert path.stat().st_size > 1000  # written again


def test_programs_off_with_the_cache(tmp_path):
    """``BARTZ_COMPILATION_CACHE=0`` switches the stored programs off too."""
    out = run_python(
        FIT_CODE.replace("os.path.join(bartz.compile_cache.cache_dir(), 'bartz-programs')", repr(str(tmp_path))),
        tmp_path,
        BARTZ_COMPILATION_CACHE='0',
    )
    assert out['traced'] == ['_device_kernel', 'step']
    assert out['files'] == []
    assert not (tmp_path / 'xdg').exists()


@pytest.fixture
def programs_in(monkeypatch, tmp_path):
    """Switch the stored programs on, in a folder of `tmp_path`, for one test.

    The folder follows JAX's cache directory setting; JAX itself keeps
    using the cache it opened (jax 0.10.2 reads the setting once, until
    ``reset_cache``)."""
    from bartz.run import loop as mcmcloop

    before = jax.config.jax_compilation_cache_dir
    jax.config.update('jax_compilation_cache_dir', str(tmp_path))
    mcmcloop.chunk_runner.cache_clear()
    memory.clear_programs()
    try:
        yield tmp_path / 'bartz-programs'
    finally:
        jax.config.update('jax_compilation_cache_dir', before)
        mcmcloop.chunk_runner.cache_clear()
        memory.clear_programs()


def _small_fit(seed=1):
    import numpy as np  # noqa: PLC0415

    from bartz import gbart  # noqa: PLC0415

    rng = np.random.default_rng(0)
    x = rng.uniform(size=(60, 3))
    y = np.sin(4 * x[:, 0]) + 0.1 * rng.normal(size=60)
    return gbart(x, y, ntree=5, nskip=5, ndpost=20, printevery=None, seed=seed)


def test_programs_unwritable_warns_once(programs_in):
    """A programs folder that cannot be created warns once, naming it, and
    the fits go on."""
    programs_in.write_text('a file where the folder goes')
    with pytest.warns(UserWarning, match='bartz-programs') as record:
        fit = _small_fit()
    with warnings.catch_warnings():
        warnings.filterwarnings('error', message='.*compilation cache')
        _small_fit(seed=2)  # compiled in memory: nothing to write, no warning

        memory.clear_programs()
        _small_fit(seed=3)  # compiled again, the write fails again: no second warning
    assert len([w for w in record if 'compilation cache' in str(w.message)]) == 1
    assert fit.yhat_train.shape == (20, 60)


def test_programs_cleared_by_jax_clear_caches(programs_in):
    """`jax.clear_caches` releases the programs loaded in this process, as
    it does JAX's own, and the next fit loads them from disk."""

    fit = _small_fit()
    assert len(list(programs_in.glob('*.bartz-program'))) == 1
    assert compile_cache.programs_in_memory() == 1
    jax.clear_caches()
    assert compile_cache.programs_in_memory() == 0
    again = _small_fit()
    assert compile_cache.programs_in_memory() == 1
    assert again.yhat_train.tolist() == fit.yhat_train.tolist()


def test_x_test_predictions_compiled_ahead(programs_in, monkeypatch):
    """gbart compiles its predictions at ``x_test`` on a thread of its own
    while the sampler runs, under the key of the call after the run (which
    then compiles nothing): one program per device (the draws of f before
    any link: wbart and pbart share it), the same predictions. (Not on a mesh: with this session's 4 CPU devices,
    ``mc_cores=2`` would run on one, and predict with the sharded
    evaluator.)"""
    import threading  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    from bartz import gbart  # noqa: PLC0415

    compiled = []
    original = _programs.compile_fresh

    def recording(lowered):
        compiled.append(threading.current_thread().name)
        return original(lowered)

    monkeypatch.setattr(_programs, 'compile_fresh', recording)
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(60, 3))
    y = np.sin(4 * x[:, 0]) + 0.1 * rng.normal(size=60)
    kwargs = {'x_test': x[:9], 'ntree': 5, 'nskip': 5, 'ndpost': 20, 'printevery': None}
    fits = [gbart(x, y, seed=1, **kwargs), gbart(x, y, seed=2, **kwargs)]  # (the second compiles nothing)
    binary = gbart(x, (y > 0).astype(float), type='pbart', seed=3, **kwargs)
    with jax.default_device(jax.devices()[-1]):  # compiled for the device the arrays go to
        elsewhere = gbart(x, y, seed=1, **kwargs)
    # the sampler on the main thread, the predictions on the other (wbart's,
    # which probit reuses, and the other device's)
    assert sorted(compiled) == ['MainThread'] * 3 + ['bartz-compile-x_test'] * 2
    names = sorted(path.name.split('-')[0] for path in programs_in.glob('*.bartz-program'))
    assert names == ['mcmc_chunk'] * 3 + ['predict'] * 2
    for fit in fits:
        assert fit.yhat_test.shape == (20, 9)
        np.testing.assert_allclose(fit.yhat_test, fit.predict(x[:9]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(binary.prob_test, binary.predict(x[:9]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(elsewhere.yhat_test, fits[0].yhat_test, rtol=1e-5, atol=1e-6)


def test_programs_key():
    """The key changes with the name, the static settings, the shapes, the
    dtypes and JAX's settings, and is None for what is not an array."""
    import numpy as np  # noqa: PLC0415

    args = (np.zeros(3, np.float32), {'a': jax.numpy.ones((2, 2))})
    key = keys.program_key('p', (1,), args)
    assert key == keys.program_key('p', (1,), (np.ones(3, np.float32), {'a': jax.numpy.zeros((2, 2))}))
    assert key.startswith('p-')
    others = [
        keys.program_key('q', (1,), args),
        keys.program_key('p', (2,), args),
        keys.program_key('p', (1,), (np.zeros(4, np.float32), args[1])),
        keys.program_key('p', (1,), (np.zeros(3, np.int32), args[1])),
        keys.program_key('p', (1,), (args[1], args[0])),
    ]
    with jax.threefry_partitionable(not jax.config.jax_threefry_partitionable):
        others.append(keys.program_key('p', (1,), args))
    assert len({key, *others}) == 1 + len(others)
    assert keys.program_key('p', (1,), (1.0,)) is None
    jax.jit(lambda x: keys.program_key('p', (1,), (x,)) is None or 1 / 0)(1.0)


def test_programs_off_without_cache_or_jit(monkeypatch):
    """The programs' folder is in the cache directory, none without the
    cache or on a remote filesystem; the layer is off with jit disabled or
    its switch off."""
    assert _programs.programs_folder('/somewhere') == Path('/somewhere/bartz-programs')
    assert _programs.programs_folder('gs://bucket/cache') is None
    assert _programs.programs_folder(None) is None
    assert _programs.tracked()
    session = compile_cache.cache_dir()  # the session's cache (conftest.py)
    assert _programs.directory() == Path(session) / 'bartz-programs'
    with jax.disable_jit():
        assert not _programs.tracked()
        assert _programs.directory() is None
    monkeypatch.setattr(_programs, 'enabled', False)
    assert _programs.directory() is None


def test_programs_store_only_fresh_compilations():
    """An executable that JAX loaded from its persistent cache serialises
    incompletely, so `compile_fresh` compiles under a key that plain jit
    does not use, and says when JAX's cache answered anyway (then the
    program is not stored)."""
    import uuid  # noqa: PLC0415

    from jax._src import config as jax_config  # noqa: PLC0415

    assert compile_cache.cache_dir() is not None  # the session's cache (conftest.py)
    constant = uuid.uuid4().int % 1000 / 7  # a program no earlier run compiled

    def f(x):
        return x * constant + 1

    def lowered():
        return jax.jit(f).lower(jax.numpy.arange(3.0))

    with jax_config.persistent_cache_min_compile_time_secs(0):
        jax.jit(f)(jax.numpy.arange(3.0)).block_until_ready()  # in JAX's cache under plain jit's key
    jax.clear_caches()
    program, fresh = _programs.compile_fresh(lowered())
    assert fresh  # not answered by plain jit's entry
    assert program(jax.numpy.arange(3.0)).tolist() == jax.jit(f)(jax.numpy.arange(3.0)).tolist()

    # let JAX write the entry of `compile_fresh`'s key, then ask again (the
    # key holds the source locations of the trace: the same line both times)
    answers = []
    for no_write_below in (0.0, float('inf')):  # (inf: the default, no entry written)
        jax.clear_caches()
        answers.append(_programs.compile_fresh(lowered(), no_write_below_secs=no_write_below)[1])
    assert answers == [True, False]


def test_programs_need_the_source(tmp_path):
    """Without bartz's source to hash (a bytecode-only install), no key:
    nothing is stored or loaded, jit decides."""
    import numpy as np  # noqa: PLC0415

    (tmp_path / '_programs.pyc').write_bytes(b'')
    assert keys.fingerprint(tmp_path) is None
    assert keys.program_key('p', (), (np.zeros(3),), package=tmp_path) is None
    assert keys.fingerprint() is not None
    assert keys.program_key('p', (), (np.zeros(3),)) is not None


def test_programs_only_where_checked(monkeypatch):
    """Stored programs are used only on platforms where they were checked
    to run (CPU, GPU): elsewhere, or for arrays on another platform, jit
    decides."""
    import numpy as np  # noqa: PLC0415

    array = jax.numpy.zeros(3)
    assert keys.PLATFORMS == ('cpu', 'gpu')
    assert _programs.tracked()
    assert keys.program_key('p', (), (array,)) is not None
    assert not _programs.tracked(platforms=('gpu',))
    assert keys.program_key('p', (), (array,), platforms=('gpu',)) is None
    # runs where the default device is
    assert keys.program_key('p', (), (np.zeros(3),), platforms=('gpu',)) is not None


def test_programs_stored_after_the_run_is_dispatched(programs_in, monkeypatch):
    """A program compiled afresh by a call is stored after it is dispatched
    (the write overlaps its run); by `prepare`, at once (nothing runs)."""
    import numpy as np  # noqa: PLC0415

    events = []
    compile_fresh, store = _programs.compile_fresh, _programs.store

    def recording_compile(lowered):
        program, fresh = compile_fresh(lowered)

        def run(*args):
            events.append('run')
            return program(*args)

        return run, fresh

    monkeypatch.setattr(_programs, 'compile_fresh', recording_compile)
    monkeypatch.setattr(_programs, 'store', lambda *args: (events.append('store'), store(*args)))
    shift = np.random.default_rng().uniform()  # a program no earlier run compiled
    f = _programs.persistent_jit(lambda x, shift: x + shift, 'test-order', shift=shift)
    g = _programs.persistent_jit(lambda x, shift: x * shift, 'test-order-prepared', shift=shift)
    np.testing.assert_allclose(f(np.arange(3.0)), np.arange(3.0) + shift, rtol=1e-6)
    assert events == ['run', 'store']
    events.clear()
    assert g.prepare(np.arange(3.0))
    assert events == ['store']


# --- a quick first program while the full one compiles (bartz._compile.programs._compile_quick_first) ---


QUICK_FIT_CASES = {
    'wbart': {},
    # (on one device: with the 4 of the test session the chains would go on a mesh)
    'dart, 2 chains': {'sparse': True, 'mc_cores': 2, 'devices': 'one'},
    'pbart': pytest.param({'type': 'pbart'}, marks=pytest.mark.slow),
    'lbart': pytest.param({'type': 'lbart'}, marks=pytest.mark.slow),
    'weights': pytest.param({'w': 'w'}, marks=pytest.mark.slow),
}


@pytest.mark.parametrize('case', QUICK_FIT_CASES.values(), ids=QUICK_FIT_CASES.keys())
def test_quick_program_then_full_gives_the_draws_of_the_full(programs_in, monkeypatch, case):
    """A short first fit runs its first call on the quick program, the
    others on the full one (made to finish compiling in between), and its
    draws are those of a fit that ran on the full program only, bit for
    bit; the full program is the one stored. With one chain the first
    call's outputs are read before the second call is dispatched (which
    would wait for the full program): its progress is not held back."""
    import numpy as np  # noqa: PLC0415

    from bartz import gbart  # noqa: PLC0415
    from bartz.run import sharding

    monkeypatch.setenv('BARTZ_QUICK_COMPILE', '1')
    calls = []
    compile_fresh = _programs.compile_fresh

    class Recorded:  # the program, its runs recorded (and it can be stored)
        def __init__(self, program, name):
            self.program, self.name = program, name

        def __call__(self, *args):
            calls.append(self.name)
            events.append(self.name)
            out = self.program(*args)
            if self.name == 'quick':  # the full program takes over from the next call
                assert _programs.wait_for_background(timeout=120)
            return out

        def __getattr__(self, attr):
            return getattr(self.program, attr)

    def recording(lowered, options=None):
        program, fresh = compile_fresh(lowered, options)
        return Recorded(program, 'full' if options is None else 'quick'), fresh

    monkeypatch.setattr(_programs, 'compile_fresh', recording)
    events = []
    to_host = sharding.to_host

    def reading(x):
        if not events or events[-1] != 'read':
            events.append('read')
        return to_host(x)

    monkeypatch.setattr(sharding, 'to_host', reading)
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(200, 4))
    f = np.sin(4 * x[:, 0]) + x[:, 1]
    kwargs = dict(case)
    y = (f > np.median(f)).astype(float) if kwargs.get('type') in {'pbart', 'lbart'} else f + 0.1 * rng.normal(size=200)
    if kwargs.get('devices') == 'one':
        kwargs['devices'] = jax.devices()[:1]
    if kwargs.get('w') == 'w':
        kwargs['w'] = np.linspace(0.5, 2.0, 200)
    kwargs |= {'ntree': 20, 'nskip': 10, 'ndpost': 30, 'keepevery': 1, 'printevery': 10, 'seed': 4}
    first = gbart(x, y, **kwargs)
    chains = kwargs.get('mc_cores', 1)
    assert calls[:chains] == ['quick'] * chains
    assert calls[chains:] == ['full'] * (len(calls) - chains)
    assert len(calls) == chains * -(-(10 + 30 // chains) // 10)  # ndpost is split among the chains; 10 per call
    if chains == 1:
        # (first read: the initial trees, for the progress's leaves per tree)
        assert events[:4] == ['read', 'quick', 'read', 'full']
    assert len(list(programs_in.glob('mcmc_chunk-*.bartz-program'))) == 1
    memory.clear_programs()
    calls.clear()
    again = gbart(x, y, **kwargs)  # the stored full program
    assert calls == []  # loaded, not compiled
    for name in ('yhat_train', 'sigma', 'varcount', 'prob_train'):
        value = getattr(first, name, None)
        if value is not None:
            assert np.array_equal(np.asarray(value), np.asarray(getattr(again, name))), name


def test_quick_options_policy(monkeypatch):
    """Quick first programs, when switched on, for short runs on CPU with a
    checked jaxlib."""
    from bartz._compile import options as xla_options  # noqa: PLC0415

    monkeypatch.delenv('BARTZ_QUICK_COMPILE', raising=False)
    assert xla_options.quick_options(1024, 300, 200, 1) is None  # off by default
    monkeypatch.setenv('BARTZ_QUICK_COMPILE', 'on')
    quick = {'xla_cpu_use_fusion_emitters': False}
    assert xla_options.quick_options(1024, 300, 200, 1) == quick  # gbart(nskip=100, ndpost=200) at n = 1,000
    assert xla_options.quick_options(1024, 1100, 200, 1) is None  # R's default length
    assert xla_options.quick_options(1024, 300, 200, 4) is None  # 4 chains on one thread
    assert xla_options.quick_options(16384, 300, 200, 1) is None
    assert xla_options.quick_options(1024, 1100, 20, 1) == quick
    for value in ('0', 'false', 'OFF', ' no ', ''):
        monkeypatch.setenv('BARTZ_QUICK_COMPILE', value)
        assert xla_options.quick_options(1024, 300, 200, 1) is None
    # a value that is not understood: off, with a warning that names it
    monkeypatch.setenv('BARTZ_QUICK_COMPILE', 'maybe')
    with pytest.warns(UserWarning, match="BARTZ_QUICK_COMPILE='maybe' is not understood"):
        assert xla_options.quick_options(1024, 300, 200, 1) is None
    for value in ('1', 'TRUE', ' yes '):
        monkeypatch.setenv('BARTZ_QUICK_COMPILE', value)
        assert xla_options.quick_options(1024, 300, 200, 1) == quick
    assert not _programs.quick_allowed(checked_jaxlib=())
    assert _programs.quick_allowed(checked_jaxlib=(jaxlib.__version__,))
    assert xla_options.quick_options(1024, 300, 200, 1, backend='gpu') is None


def test_quick_option_unknown_to_xla_compiles_as_usual(programs_in):
    """Options that XLA rejects for the quick program: the full program is
    compiled at once, as without them, and stored."""
    import numpy as np  # noqa: PLC0415

    shift = np.random.default_rng().uniform()  # a program no earlier run compiled
    f = _programs.persistent_jit(lambda x, shift: x + shift, 'test-quick-unknown', shift=shift)
    out = f(np.arange(3.0), quick={'xla_no_such_option': True})
    np.testing.assert_allclose(out, np.arange(3.0) + shift, rtol=1e-6)
    assert not any(t.is_alive() for t in _programs.background_compilations())
    assert len(list(programs_in.glob('test-quick-unknown-*'))) == 1


QUICK_PROCESS_CODE = """
import numpy as np
import bartz
from bartz.sampler import step as mcmcstep
traced = []
original = mcmcstep.step
def step(*args, **kwargs):
    traced.append('step')
    return original(*args, **kwargs)
mcmcstep.step = step
rng = np.random.default_rng(0)
x = rng.uniform(size=(60, 3))
y = np.sin(4 * x[:, 0]) + 0.1 * rng.normal(size=60)
with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    fit = bartz.gbart(x, y, ntree=5, nskip=5, ndpost=20, printevery=None, seed=1)
from bartz._compile import programs as _programs
quick = any(t.name.startswith('bartz-compile-mcmc_chunk') for t in _programs.background_compilations())
print(json.dumps({'traced': sorted(set(traced)), 'draws': np.asarray(fit.yhat_train).tolist(), 'quick': quick}))
"""


def test_quick_first_process_stores_the_full_program_before_it_ends(tmp_path):
    """A process whose short fit ran on a quick program waits, as it ends,
    for the full one and stores it; the next process loads it, traces
    nothing and gives the same draws."""
    cache = tmp_path / 'cache'
    first = run_python(QUICK_PROCESS_CODE, tmp_path, BARTZ_CACHE_DIR=str(cache), BARTZ_QUICK_COMPILE='1')
    assert first['traced'] == ['step']
    assert first['quick']
    assert len(list((cache / 'bartz-programs').glob('mcmc_chunk-*.bartz-program'))) == 1
    second = run_python(QUICK_PROCESS_CODE, tmp_path, BARTZ_CACHE_DIR=str(cache), BARTZ_QUICK_COMPILE='1')
    assert second['traced'] == []
    assert second['draws'] == first['draws']


# --- what the cache trusts (the module docstring's rule) ---


def _directory(path, mode):
    """`path` created with `mode` (set after creation: mkdir's is masked by the umask)."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode)
    return path


def test_cache_dir_that_others_can_write_is_refused_at_import(tmp_path):
    """``BARTZ_CACHE_DIR`` writable by all users: a warning that names it and
    says why, and the cache stays off (JAX's too: bartz sets nothing), as
    for a directory that cannot be written. Nothing is written there."""
    open_dir = _directory(tmp_path / 'open', 0o777)
    code = """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        import bartz
    jax.jit(lambda x: x + 1)(1.0).block_until_ready()
    print(json.dumps({'dir': bartz.compile_cache.cache_dir(), 'jax_dir': jax.config.jax_compilation_cache_dir,
                      'thresholds': thresholds(), 'warnings': [str(w.message) for w in caught]}))
    """
    out = run_python(code, tmp_path, BARTZ_CACHE_DIR=str(open_dir))
    assert out['dir'] is None
    assert out['jax_dir'] is None
    assert out['thresholds'] == [1, 0]
    (message,) = [m for m in out['warnings'] if 'compilation cache' in m]
    assert str(open_dir) in message
    assert 'can be written by its group and all users (mode 0o777)' in message
    assert 'owned by you and writable by you alone' in message
    assert list(open_dir.iterdir()) == []


def test_private_cache_dir_is_used(tmp_path):
    """A directory of the user's with mode 0o700 (or 0o755: others may read)
    is used, also inside a directory that all users can write but with the
    sticky bit (as ``/tmp``); owned by the user: ``os.getuid()``."""
    private = _directory(tmp_path / 'private', 0o700)
    sticky = _directory(tmp_path / 'sticky', 0o1777)
    readable = _directory(sticky / 'readable', 0o755)
    assert private.stat().st_uid == os.getuid()
    code = f"""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        import bartz
        out = {{'dir': bartz.compile_cache.cache_dir()}}
        out['readable'] = bartz.compile_cache.enable({str(readable)!r})
    out['warnings'] = [str(w.message) for w in caught]
    print(json.dumps(out))
    """
    out = run_python(code, tmp_path, BARTZ_CACHE_DIR=str(private))
    assert out == {'dir': str(private), 'readable': str(readable), 'warnings': []}


@pytest.mark.parametrize(
    ('layout', 'fault'),
    [
        ({'cache': 0o777}, "'cache' can be written by its group and all users (mode 0o777)"),
        ({'cache': 0o770}, "'cache' can be written by its group (mode 0o770)"),
        ({'cache': 0o722}, "'cache' can be written by its group and all users (mode 0o722)"),
        ({'cache': 0o700, 'cache/bartz-programs': 0o757}, "'bartz-programs' can be written by all users"),
        ({'shared': 0o777, 'shared/cache': 0o700}, "'shared', above it, can be written by its group and all users"),
        ({'shared': 0o1777, 'shared/cache': 0o777}, "'cache' can be written by its group and all users"),
    ],
    ids=['world', 'group', 'write-only', 'programs-folder', 'parent', 'sticky-parent-open-dir'],
)
def test_enable_refuses_what_others_can_write(tmp_path, layout, fault):
    """`enable` refuses, with a warning naming the directory at fault, a
    cache directory (or its ``bartz-programs`` folder) that group or others
    can write, or one inside a directory they can write without the sticky
    bit; the configuration stays as it was. (The test runs as root, who
    owns everything: the owner's half of the rule, ``os.getuid()``, holds
    for all of these.)"""
    for name, mode in layout.items():
        _directory(tmp_path / name, mode)
    cache = tmp_path / ('shared/cache' if 'shared' in layout else 'cache')
    before = compile_cache.cache_dir()
    with pytest.warns(UserWarning, match='cannot use') as record:
        assert compile_cache.enable(cache) == before
    assert compile_cache.cache_dir() == before
    (message,) = [str(w.message) for w in record]
    assert fault.replace("'", '') in message.replace("'", '').replace(str(tmp_path) + '/', '')
    assert not any(p.name.startswith('.bartz-write-test-') for p in cache.iterdir())


def test_untrusted_rule_on_ownership(tmp_path):
    """The owner's half of the rule: a directory must belong to the user,
    and those above it to the user or root. Checked against the real
    owner of `tmp_path`, so that it holds whoever runs the tests (as
    root, root owns everything)."""
    path = _directory(tmp_path / 'mine', 0o700)
    assert settings.untrusted(path) is None
    assert path.stat().st_uid == os.getuid()
    if os.getuid() != 0:  # a directory of root's (the filesystem's root) is not the user's
        assert 'belongs to another user' in settings.untrusted('/')


PLANT_CODE = """
import numpy as np
import bartz
from bartz.sampler import step as mcmcstep
traced = []
original = mcmcstep.step
def step(*args, **kwargs):
    traced.append('step')
    return original(*args, **kwargs)
mcmcstep.step = step
rng = np.random.default_rng(0)
x = rng.uniform(size=(30, 2))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    fit = bartz.gbart(x, x[:, 0], ntree=1, maxdepth=2, moves=('grow', 'prune'), nskip=5, ndpost=5, printevery=None)
print(json.dumps({'traced': traced != [], 'dir': bartz.compile_cache.cache_dir(),
                  'warnings': [str(w.message) for w in caught if 'compilation cache' in str(w.message)]}))
"""


def test_programs_folder_others_can_write_is_not_read(tmp_path):
    """In a JAX cache that the user configured (bartz changes nothing there),
    bartz neither loads nor writes its whole programs in a ``bartz-programs``
    folder that others can write: a file planted there, which would run
    code when loaded, is left unread, with a warning. Put back to 0o700, the
    same planted file is loaded and its code runs (the reason for the rule)."""
    import pickle  # noqa: PLC0415
    import zlib  # noqa: PLC0415

    cache = _directory(tmp_path / 'jax-cache', 0o700)
    first = run_python(PLANT_CODE, tmp_path, JAX_COMPILATION_CACHE_DIR=str(cache))
    assert first['dir'] == str(cache)
    assert first['traced']
    assert first['warnings'] == []
    folder = cache / 'bartz-programs'
    (stored,) = folder.glob('mcmc_chunk-*.bartz-program')

    marker = tmp_path / 'planted-code-ran'

    class Planted:
        def __reduce__(self):
            return (open, (str(marker), 'w'))

    stored.write_bytes(zlib.compress(pickle.dumps(Planted())))
    folder.chmod(0o777)
    second = run_python(PLANT_CODE, tmp_path, JAX_COMPILATION_CACHE_DIR=str(cache))
    assert not marker.exists()
    assert second['traced']  # compiled in memory instead
    assert second['dir'] == str(cache)  # JAX's own cache: the user's to choose
    (message,) = second['warnings']
    assert str(folder) in message
    assert 'can be written by its group and all users (mode 0o777)' in message
    assert sorted(folder.iterdir()) == [stored]  # nothing written there either

    folder.chmod(0o700)
    third = run_python(PLANT_CODE, tmp_path, JAX_COMPILATION_CACHE_DIR=str(cache))
    assert marker.exists()  # the planted file was loaded: this is what the rule prevents
    assert third['traced']  # (it was no program: deleted, and the loop compiled)
    assert third['warnings'] == []
