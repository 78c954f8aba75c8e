"""Run every example script in notebooks/ and check that it succeeds.

Each script runs in a fresh Python process with ``BARTZ_QUICK=1``, which the
scripts read to use small data and few draws, and ``BARTZ_OUT`` pointing to
a temporary folder for their figures. The subprocess shares the persistent
JAX compilation cache of the test suite (see conftest.py), so reruns skip
most of the compilation.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

_REPO_ROOT = Path(__file__).resolve().parent.parent
_NOTEBOOKS = sorted((_REPO_ROOT / 'notebooks').glob('*.py'))
# generous: a run takes ~20-50 s on 2 CPU cores, mostly compilation
_TIMEOUT = 600


def test_there_are_notebooks():
    assert _NOTEBOOKS, 'no notebooks/*.py found'


@pytest.mark.slow  # (the demo's test runs the main job end to end in the default run)
@pytest.mark.parametrize('path', _NOTEBOOKS, ids=[p.name for p in _NOTEBOOKS])
def test_notebook_runs(path, tmp_path):
    env = dict(os.environ)
    env.update(
        BARTZ_QUICK='1',
        BARTZ_OUT=str(tmp_path / 'out'),
        MPLBACKEND='Agg',
        PYTHONPATH=os.pathsep.join(filter(None, [str(_REPO_ROOT), env.get('PYTHONPATH')])),
        JAX_COMPILATION_CACHE_DIR=str(_REPO_ROOT / '.jax_cache'),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS='0.5',
        JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES='0',
    )
    # the virtual devices of conftest.py are for the sharding tests, not for the examples
    flags = env.get('XLA_FLAGS', '').replace('--xla_force_host_platform_device_count=4', '').strip()
    if flags:
        env['XLA_FLAGS'] = flags
    else:
        env.pop('XLA_FLAGS', None)
    result = subprocess.run(
        [sys.executable, str(path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, (
        f'{path.name} exited with code {result.returncode}\n'
        f'--- stdout (tail) ---\n{result.stdout[-4000:]}\n--- stderr (tail) ---\n{result.stderr[-4000:]}'
    )
