"""The benchmark scripts run: a script that crashes measures nothing.

They run in subprocesses, as users run them (`benchmarks/speed.py --quick`
is the smoke test its docstring advertises)."""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run_script(*args, drop_env=(), timeout=600):
    """Run ``benchmarks/<args>`` with this Python from the repository root,
    without the environment variables `drop_env`."""
    env = {k: v for k, v in os.environ.items() if k not in drop_env}
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.slow
def test_speed_gbart_section_in_fresh_processes(tmp_path):
    """`speed.py --sections gbart` times gbart in-process and, through
    `peers.py`'s harness, in fresh processes: every workload has a time."""
    out = tmp_path / 'speed.json'
    args = ('benchmarks/speed.py', '--quick', '--sections', 'gbart', '--out-json', str(out))
    proc = _run_script(*args, drop_env=('XLA_FLAGS', 'JAX_COMPILATION_CACHE_DIR'))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'gbart end to end in fresh processes' in proc.stdout
    results = json.loads(out.read_text())
    assert [row['call'] for row in results['gbart']] == [1, 2]
    latency = results['gbart_latency']
    assert set(latency) == {'cold', 'second process', 'warm n=200', 'new n', 'new p'}
    for name, result in latency.items():
        assert 'error' not in result, (name, result)
        assert result['seconds'] > 0, name
    assert latency['new n']['warm_s'] > 0 and latency['new p']['warm_s'] > 0


def _peers_usage_error(*args):
    """The stderr of `peers.py` with `args`, which must exit with a usage error."""
    proc = _run_script('benchmarks/peers.py', *args, timeout=120)
    assert proc.returncode == 2
    return proc.stderr


def test_peers_rejects_rounds_below_one():
    assert '--rounds must be at least 1, got 0' in _peers_usage_error('--rounds', '0')


@pytest.mark.parametrize('moves', ['grow,foo', 'grow,change'])
def test_peers_rejects_bad_moves(moves):
    expected = f'--moves must include grow and prune, among grow,prune,change,swap; got {moves}'
    assert expected in _peers_usage_error('--moves', moves)


def test_kernels_rejects_bad_sizes():
    proc = _run_script('benchmarks/kernels.py', '--n', '0', timeout=120)
    assert proc.returncode == 2
    assert '--n must be at least 1, got 0' in proc.stderr


@pytest.mark.slow
def test_kernels_attributes_the_loop_to_its_source():
    """`kernels.py` compiles a small fit and finds the loop over trees (a
    loop body inside the loop over iterations) and bartz's source lines."""
    args = ('benchmarks/kernels.py', '--n', '200', '--nskip', '1', '--ndpost', '1', '--lines', '5')
    proc = _run_script(*args, drop_env=('XLA_FLAGS',))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    total = int(out.split(' kernels in ')[0].rsplit('\n', 1)[-1])
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ['kernels', 'copies'])
    end = lines.index('', header)
    rows = [line.split() for line in lines[header + 1 : end]]
    assert sum(int(r[0]) for r in rows) == total
    assert any(r[2:4] == ['body', '2'] for r in rows), out
    assert 'mcmcstep.py:' in out and 'moves.py:' in out
