"""Pytest configuration: JAX settings for the test suite and random key fixtures."""

import os
import subprocess
import sys
import zlib
from pathlib import Path

# Before jax is imported: 4 virtual CPU devices for the sharding tests.
_DEVICE_FLAG = '--xla_force_host_platform_device_count=4'
if _DEVICE_FLAG not in os.environ.get('XLA_FLAGS', ''):
    os.environ['XLA_FLAGS'] = f'{os.environ.get("XLA_FLAGS", "")} {_DEVICE_FLAG}'.strip()

import jax  # noqa: E402
import pytest  # noqa: E402

_REPO_ROOT = Path(__file__).resolve().parent.parent

jax.config.update('jax_enable_x64', False)
# Raise on random keys used twice, also inside jit (it slows down dispatch of
# jitted functions that take keys, ~100 us per call, negligible for these tests).
jax.config.update('jax_debug_key_reuse', True)
# Persistent compilation cache, shared by the pytest-xdist workers.
jax.config.update('jax_compilation_cache_dir', str(_REPO_ROOT / '.jax_cache'))
jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.5)
jax.config.update('jax_persistent_cache_min_entry_size_bytes', 0)

# bartz keeps the programs it compiles in memory and on disk (under the cache
# above), in the tests as for users. The few tests that patch code traced
# inside those programs take the fixture `traced_code_patched`.
from bartz._compile import programs as _programs  # noqa: E402


@pytest.fixture
def traced_code_patched(monkeypatch):
    """For a test that patches code traced inside a program that bartz keeps
    (a fit's chunk, a prediction): the key of a kept program cannot see the
    patch, so while the test runs bartz's programs are compiled as jit does,
    neither loaded nor kept (`bartz._compile.programs.enabled`)."""
    monkeypatch.setattr(_programs, 'enabled', False)


def pytest_configure(config):
    config.addinivalue_line('markers', 'no_key_reuse_check: run the test with jax_debug_key_reuse disabled')


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched):
    """A pytest-xdist worker died while running `crashitem`: run that test
    once more, alone, in a new process, and count it as passed only if that
    run passes.

    Why: a worker that ran out of memory mappings crashed inside XLA's
    compiler (see `_free_compiled_programs`, which removes that cause); a
    crash of this kind depends on what the worker compiled before, not on
    the test. xdist then reports the test as failed, even though the worker
    that replaces the dead one runs the rest of its file again, crashed
    test included (``--dist loadfile`` cannot reschedule a single test, so
    pytest-rerunfailures would not help). A crash that our code causes deterministically
    crashes the rerun too and still fails; every rerun is listed in the
    summary (the rerun test may be counted twice among the passed).
    """
    _drop_completed_work(sched)
    root = Path(sched.config.rootpath)
    env = {k: v for k, v in os.environ.items() if not k.startswith('PYTEST_XDIST')}
    cmd = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-n', '0', crashitem]
    run = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, check=False)
    tail = '\n'.join((run.stdout + run.stderr).strip().splitlines()[-3:])
    _CRASH_RERUNS.append(f'{crashitem}: rerun in a new process {"passed" if run.returncode == 0 else "FAILED"} ({tail})')
    if run.returncode == 0:
        report.outcome = 'passed'
        report.when = 'call'
        report.longrepr = None


def _drop_completed_work(sched):
    """Work around a hang of pytest-xdist (3.8) after a crash with ``--dist
    loadfile``: the scheduler puts every file the dead worker had been given
    back in its queue, the finished ones too; the new worker is handed a
    finished file first, gets no test to run, so never asks for more, and
    the session waits forever with the crashed file still queued."""
    queue = getattr(sched, 'workqueue', None)
    if isinstance(queue, dict):
        for scope in [scope for scope, unit in queue.items() if all(unit.values())]:
            del queue[scope]


_CRASH_RERUNS = []


def pytest_terminal_summary(terminalreporter):
    if _CRASH_RERUNS:
        terminalreporter.section('tests rerun after a worker crash')
        for line in _CRASH_RERUNS:
            terminalreporter.write_line(line)


@pytest.fixture(autouse=True, scope='module')
def _free_compiled_programs():
    """Drop JAX's in-memory compiled programs after each test module.

    Every compiled XLA CPU program keeps about 6 memory mappings while it is
    cached, and a worker that runs a dozen test files compiles thousands of
    programs: it reached Linux's limit of 65,530 mappings per process
    (``vm.max_map_count``), and XLA's compiler then crashed with a
    segfault (3 full runs out of 3 with an empty cache, in
    `test_moves_fast`; ~31,000 mappings 8 minutes into the run and rising).
    ``jax.clear_caches()`` releases them (300 small programs: 2,291 -> 516
    mappings); later modules reload what they need from the persistent
    cache or compile it again.
    """
    yield
    jax.clear_caches()


@pytest.fixture(autouse=True)
def _key_reuse_check(request):
    """Let a test opt out of the key reuse checker with ``@pytest.mark.no_key_reuse_check``.

    The checker has false positives, e.g., ``random.fold_in(key, i)`` on a key
    closed over by a `lax.fori_loop` body counts as reusing the key.
    """
    if request.node.get_closest_marker('no_key_reuse_check') is None:
        yield
    else:
        with jax.debug_key_reuse(False):
            yield


def _seed(request):
    """A deterministic seed from the test id, different for each test."""
    return zlib.crc32(request.node.nodeid.encode())


@pytest.fixture
def key(request):
    """A random key, the same at every run of the test, different for each test."""
    return jax.random.key(_seed(request))


class Keys:
    """An endless supply of independent random keys from a seed.

    ``next(keys)``, ``keys.next()``, or iterating gives a fresh key each time.
    """

    def __init__(self, seed):
        self._key = jax.random.key(seed)

    def __next__(self):
        self._key, key = jax.random.split(self._key)
        return key

    next = __next__

    def __iter__(self):
        return self


@pytest.fixture
def keys(request):
    """A `Keys` seeded from the test id: deterministic, different for each test."""
    return Keys(_seed(request))
