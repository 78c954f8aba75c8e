"""Tests of the limits on the compiled programs a process keeps in memory
(`bartz.compile_cache.set_limits`, "Compiled programs in memory" in its
docstring): a long session that fits many settings must not reach Linux's
limit of memory mappings (``vm.max_map_count``), where XLA's compiler
aborts the process.

The fits run in fresh Python processes: the test session's ``conftest.py``
clears JAX's caches after each module and switches bartz's own programs
off (``bartz._compile.programs.enabled``), either of which would hide what a user's
session does.
"""

import doctest
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bartz._compile import cache as compile_cache

ON_LINUX = Path('/proc/self/maps').exists() and Path('/proc/sys/vm/max_map_count').exists()

PRELUDE = """
import json, warnings
import numpy as np
import jax
import bartz
from bartz._compile import cache as compile_cache
warnings.simplefilter('ignore', bartz.ConvergenceWarning)

def maps():  # the memory mappings of this process (Linux)
    with open('/proc/self/maps', 'rb') as file:
        return file.read().count(b'\\n')

compiles = []  # XLA compilations, by JAX's public monitoring events
jax.monitoring.register_event_duration_secs_listener(
    lambda event, duration, **kw: compiles.append(event) if event.endswith('backend_compile_duration') else None
)

rng = np.random.default_rng(0)
x = rng.uniform(size=(30, 2))
y = x[:, 0] + 0.1 * rng.normal(size=30)

def fit(ntree, seed=1):
    # the smallest fits: the time goes to compiling a sampler for each ntree
    return bartz.gbart(x, y, ntree=ntree, maxdepth=2, moves=('grow', 'prune'), ndpost=5, nskip=5,
                       printevery=None, seed=seed)
"""


def run_child(code, tmp_path, timeout, **env):
    """Run `code` after `PRELUDE` in a fresh Python; return the JSON lines it prints."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(('JAX_', 'BARTZ_', 'XLA_'))}
    clean |= {'JAX_PLATFORMS': 'cpu', 'XDG_CACHE_HOME': str(tmp_path / 'xdg'), 'HOME': str(tmp_path / 'home')}
    clean |= env
    result = subprocess.run(
        [sys.executable, '-c', PRELUDE + textwrap.dedent(code)],
        env=clean,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{')]


def test_set_limits_checks_and_restores():
    """`set_limits` names the bad argument, changes only what it is given,
    and returns the limits before, which put back restore them."""
    before = compile_cache.limits()
    assert before == compile_cache.Limits(max_programs=32, maps_fraction=0.5)  # the documented defaults
    for bad, error in [(0, ValueError), (-1, ValueError), (2.0, TypeError), (True, TypeError), ('8', TypeError)]:
        with pytest.raises(error, match=r'max_programs must be a positive integer or None, got'):
            compile_cache.set_limits(max_programs=bad)
    for bad, error in [(0, ValueError), (1.5, ValueError), (-0.1, ValueError), ('0.5', TypeError), (True, TypeError)]:
        with pytest.raises(error, match=r'maps_fraction must be'):
            compile_cache.set_limits(maps_fraction=bad)
    assert compile_cache.limits() == before  # nothing changed by a refused call
    old = compile_cache.set_limits(max_programs=3)
    try:
        assert old == before
        assert compile_cache.limits() == before._replace(max_programs=3)
        compile_cache.set_limits(maps_fraction=None)
        assert compile_cache.limits() == compile_cache.Limits(max_programs=3, maps_fraction=None)
        compile_cache.set_limits(max_programs=None, maps_fraction=1)
        assert compile_cache.limits() == compile_cache.Limits(max_programs=None, maps_fraction=1.0)
    finally:
        compile_cache.set_limits(**old._asdict())
    assert compile_cache.limits() == before


def test_set_limits_example_runs():
    """The example in `set_limits`'s docstring runs, and leaves the limits as they were."""
    before = compile_cache.limits()
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner()
    for test in finder.find(compile_cache.set_limits, 'set_limits', globs={}):
        runner.run(test)
    assert runner.summarize(verbose=False) == (0, 4)
    assert compile_cache.limits() == before


@pytest.mark.skipif(not ON_LINUX, reason='counts memory mappings in /proc/self/maps')
def test_kept_programs_bounded_and_dropped_setting_fits_again(tmp_path):
    """With at most 2 programs kept, a third setting drops the least
    recently used one, with its memory mappings; that setting compiles
    again when it is fitted again, with the same draws. The cache is off,
    so the programs live only in memory."""
    code = """
    compile_cache.set_limits(max_programs=2)
    out = {'kept': [], 'maps': [], 'compiles': []}
    def record():
        out['kept'].append(compile_cache.programs_in_memory())
        out['maps'].append(maps())
        out['compiles'].append(len(compiles))
    first = fit(1).yhat_train.tolist(); record()
    fit(2); record()
    fit(3); record()  # drops ntree=1's program
    fit(2); record()  # still kept: compiles nothing
    again = fit(1).yhat_train.tolist(); record()  # compiled again, drops ntree=3's
    out['same_draws'] = again == first
    compile_cache.set_limits(max_programs=1)  # dropped at once
    out['after_lowering'] = compile_cache.programs_in_memory()
    print(json.dumps(out))
    """
    (out,) = run_child(code, tmp_path, timeout=300, BARTZ_COMPILATION_CACHE='0')
    assert out['kept'] == [1, 2, 2, 2, 2]
    # one compilation per new setting; none for the kept one; one for the dropped one
    assert [b - a for a, b in zip([0, *out['compiles']], out['compiles'])][1:] == [1, 1, 0, 1]
    assert out['same_draws']
    # a fit adds a few hundred mappings for its program, and dropping one gives them back
    first, second = out['maps'][:2]
    assert second - first > 100
    assert max(out['maps'][2:]) < second + 100, out['maps']
    assert out['after_lowering'] == 1


@pytest.mark.skipif(not ON_LINUX, reason='counts memory mappings in /proc/self/maps')
def test_maps_watch_clears_caches_and_warns_once(tmp_path):
    """Above `maps_fraction` of ``vm.max_map_count`` at the start of a fit,
    bartz clears JAX's compiled programs (the same setting compiles again,
    to the same draws) and warns once; `maps_fraction=None` switches it off.
    The share is set just below the process's current count, through the
    documented knob."""
    code = """
    limit = int(open('/proc/sys/vm/max_map_count').read())
    compile_cache.set_limits(maps_fraction=None)
    first = fit(3).yhat_train.tolist()
    fit(3)
    out = {'off_compiles': len(compiles)}  # no watch: the second fit compiled nothing
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        out['fractions'] = []
        for _ in range(2):
            fraction = (maps() - 50) / limit
            out['fractions'].append(fraction)
            compile_cache.set_limits(maps_fraction=fraction)
            again = fit(3).yhat_train.tolist()
            out.setdefault('compiles', []).append(len(compiles))
            out.setdefault('same_draws', []).append(again == first)
    out['warnings'] = [(w.category.__name__, str(w.message), os.path.basename(w.filename))
                       for w in caught if issubclass(w.category, compile_cache.MemoryMapsWarning)]
    print(json.dumps(out))
    """
    (out,) = run_child('import os\n' + textwrap.dedent(code), tmp_path, timeout=300, BARTZ_COMPILATION_CACHE='0')
    assert out['off_compiles'] == 1
    assert out['compiles'] == [2, 3]  # cleared before each fit: compiled again
    assert out['same_draws'] == [True, True]
    assert len(out['warnings']) == 1, out['warnings']
    ((category, message, filename),) = out['warnings']
    assert category == 'MemoryMapsWarning'
    assert 'vm.max_map_count' in message
    assert 'jax.clear_caches()' in message
    assert 'compile their programs again' in message
    assert 'set_limits(maps_fraction=' in message
    assert filename == '<string>'  # points at the user's call of gbart


@pytest.mark.slow
@pytest.mark.skipif(not ON_LINUX, reason='counts memory mappings in /proc/self/maps')
def test_long_session_stays_below_the_mapping_limit(tmp_path):
    """80 fits in one process, with the default limits, never come near
    ``vm.max_map_count``: the mappings stop growing once the 32 kept
    programs are reached, far below the watch's threshold (half the limit),
    which never has to fire.

    Without the limits every new setting keeps its sampler, about 300
    mappings more per fit (300 distinct settings would reach the limit
    near fit 200 and abort the process); here the count would still grow
    after fit 35, and `programs_in_memory` would reach 40. To fit the CI's
    budget (a new setting compiles for seconds), 40 distinct settings
    (ntree 1..40) are fitted, then fitted again in the same order: each
    was dropped by then (40 > 32) and is loaded again from the persistent
    cache (a temporary directory), which maps its program again.
    """
    code = """
    import sys, time
    limit = int(open('/proc/sys/vm/max_map_count').read())
    print(json.dumps({'start': maps(), 'limit': limit}), flush=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always', compile_cache.MemoryMapsWarning)
        for i in range(80):
            t = time.perf_counter()
            fit(1 + i % 40, seed=i)
            print(json.dumps({'fit': i, 'maps': maps(), 'kept': compile_cache.programs_in_memory(),
                              'compiles': len(compiles), 'seconds': time.perf_counter() - t}), flush=True)
    print(json.dumps({'warnings': [str(w.message) for w in caught]}))
    """
    start = time.perf_counter()
    lines = run_child(code, tmp_path, timeout=1800, BARTZ_CACHE_DIR=str(tmp_path / 'cache'))
    elapsed = time.perf_counter() - start
    head, *fits, tail = lines
    assert len(fits) == 80
    bound = compile_cache.limits().maps_fraction * head['limit']
    counts = [f['maps'] for f in fits]
    assert max(counts) < bound, counts
    # the mappings stop growing once 32 programs are kept
    assert max(counts[40:]) < counts[35] + 1000, counts
    assert [f['kept'] for f in fits][31:] == [32] * (80 - 31)
    assert fits[-1]['compiles'] == 40  # the others were loaded from the cache
    assert tail['warnings'] == []
    print(f'80 fits in {elapsed:.0f} s; mappings {head["start"]} at start, {max(counts)} at most')
