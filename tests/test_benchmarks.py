"""The benchmark scripts run: a script that crashes measures nothing.

They run in subprocesses, as users run them (`benchmarks/speed.py --quick`
is the smoke test its docstring advertises)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the modules of the tree moves, to which the profilers attribute the proposal's kernels
MOVES = {name for name in os.listdir(os.path.join(REPO, 'bartz', 'sampler')) if 'move' in name and name.endswith('.py')}


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
    assert set(latency) == {'cold', 'cold, x_test', 'second process', 'warm n=200', 'new n', 'new p'}
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


def test_peers_rejects_a_base_path_without_bartz(tmp_path):
    expected = f'--base-path must be a source tree with a bartz package, got {tmp_path}'
    assert expected in _peers_usage_error('--base-path', str(tmp_path))


@pytest.mark.slow
def test_peers_times_a_base_tree_beside_this_one(tmp_path):
    """`peers.py --base-path` runs the bartz of another source tree (here a
    copy of this one) through the same workloads, its workers importing
    that tree's package, and prints the ratio of this tree over it."""
    base = tmp_path / 'base'
    shutil.copytree(os.path.join(REPO, 'bartz'), base / 'bartz', ignore=shutil.ignore_patterns('__pycache__'))
    out = tmp_path / 'peers.json'
    args = ('benchmarks/peers.py', '--quick', '--repeats', '1', '--base-path', str(base), '--out-json', str(out))
    proc = _run_script(*args, drop_env=('XLA_FLAGS', 'JAX_COMPILATION_CACHE_DIR'))
    assert proc.returncode == 0, proc.stderr[-3000:]
    label = f'bartz at {base}'
    assert f'bartz/{label}' in proc.stdout
    results = json.loads(out.read_text())['results']
    assert list(results) == ['bartz', label]
    for name, result in results[label].items():
        assert 'error' not in result, (name, result)
        assert result['seconds'] > 0, name
        assert result['bartz_file'] == str(base / 'bartz' / '__init__.py'), name
    assert results['bartz']['cold']['bartz_file'] == os.path.join(REPO, 'bartz', '__init__.py')


@pytest.mark.slow
def test_kernels_attributes_the_loop_to_its_source():
    """`kernels.py` compiles a small fit, counts its LLVM modules, and finds
    the loop over trees (a loop body inside the loop over iterations, with
    its two conditionals, each run in order) and bartz's source lines; with ``--ir`` the
    program's LLVM IR by source file (the proposal's among them), and with
    ``--compile-times`` XLA's compile phases and its emission time per
    kernel by source file."""
    args = ('benchmarks/profile/kernels.py', '--n', '200', '--nskip', '1', '--ndpost', '1', '--lines', '5')
    args += ('--ir', '--compile-times')
    proc = _run_script(*args, drop_env=('XLA_FLAGS',))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    total = int(out.split(' kernels in ')[0].rsplit('\n', 1)[-1])
    # the LLVM modules compiled: at least one, fewer than the kernels with their copies
    compiled = int(out.split(' LLVM modules compiled')[0].rsplit('; ', 1)[-1])
    assert 0 < compiled < total, out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ['kernels', 'copies'])
    end = lines.index('', header)
    rows = [line.split() for line in lines[header + 1 : end]]
    assert sum(int(r[0]) for r in rows) == total
    assert {r[2] for r in rows} <= {'in-order', 'concurrent'}, out
    assert any(r[3:5] == ['body', '2'] for r in rows), out
    # on CPU at small n, the loop over trees and the two conditionals in
    # its body run their kernels in order (`bartz.sampler.sweep`)
    loop_over_trees = [r for r in rows if r[3:5] == ['body', '2'] and r[2] == 'in-order']
    branches = [r for r in rows if r[3:5] == ['branch', '3'] and r[2] == 'in-order']
    assert loop_over_trees and len(branches) >= 2, out
    assert 'sweep.py:' in out and any(f'{name}:' in out for name in MOVES), out
    ir = out.split('\noptimised LLVM IR: ', 1)[1].splitlines()
    kilobytes, modules = ir[0].split(' kB in ')
    assert float(kilobytes.replace(',', '')) > 0 and int(modules.split()[0]) > 0, out
    shares = dict(item.rsplit(' ', 1) for item in ir[1].removeprefix('by file: ').split(', '))
    assert 'sweep.py' in shares and MOVES & set(shares), out
    assert 95 <= sum(int(share.rstrip('%')) for share in shares.values()) <= 105, out  # (rounded shares)
    # --compile-times: XLA's phases and the emission time per kernel, by file
    phases = out.split('\nXLA compile phases (wall, profiled fit, no dump): compile ', 1)[1].splitlines()[0]
    assert float(phases.split(' s;', 1)[0]) > 0 and 'LLVM (both cores)' in phases, out
    emission = out.split('\nkernel emission (FusionCompiler, thread time): ', 1)[1].splitlines()
    milliseconds, modules = emission[0].split(' ms in ')
    assert float(milliseconds.replace(',', '')) > 0 and int(modules.split()[0]) > 0, out
    shares = dict(item.rsplit(' ', 1) for item in emission[1].removeprefix('by file: ').split(', '))
    assert 'sweep.py' in shares and MOVES & set(shares), out
    # and LLVM's time per kernel module, from XLA's log
    llvm = out.split('\nLLVM code generation (thread time): ', 1)[1].splitlines()
    milliseconds, modules = llvm[0].split(' ms in ')
    assert float(milliseconds.replace(',', '')) > 0 and int(modules.split()[0]) > 0, out
    assert any(name in llvm[1] for name in MOVES), out


def test_kernels_reads_llvm_times_of_a_log():
    """`kernels.py --compile-times` sums XLA's logged LLVM time per kernel
    module (in s, ms or us; module names as XLA writes them); other lines
    do not count."""
    kernels_py = _script_module('profile/kernels')
    log = '''I1129 01:36:34.423670   17658 ir_compiler.cc:293] Compiled LLVM module: __compute_module_select_reduce_fusion.5_kernel_module time: 35.5 ms (35488 us) (cumulative: 35.5 ms, max: 35.5 ms, #called: 1)
I1129 01:36:34.440583   17658 ir_compiler.cc:293] Compiled LLVM module: __compute_module___compute_module_compare_select_fusion time: 645 us (645 us) (cumulative: 36.1 ms, max: 35.5 ms, #called: 2)
I1129 01:36:34.522946   17657 ir_compiler.cc:293] Compiled LLVM module: __compute_module_select_select_fusion.3_kernel_module time: 1.25 s (1250000 us) (cumulative: 1.29 s, max: 1.25 s, #called: 3)
I1129 01:36:34.529588   17657 ir_compiler.cc:293] Compiled LLVM module: __compute_module_select_reduce_fusion.5_kernel_module time: 4.5 ms (4500 us) (cumulative: 1.29 s, max: 1.25 s, #called: 4)
I1129 01:36:43.072848   19501 cpu_compiler.cc:1215] CpuCompiler - Running LLVM verifier time: 35 us (35 us) (cumulative: 35 us, max: 35 us, #called: 1)
'''
    times = kernels_py._llvm_times(log)
    expected = {'select_reduce_fusion.5': 0.040, 'compare_select_fusion': 645e-6, 'select_select_fusion.3': 1.25}
    assert times == pytest.approx(expected)
    assert kernels_py._llvm_times('') == {}


def test_kernels_reads_compile_times_of_a_trace(tmp_path):
    """`kernels.py --compile-times` sums the emission events per kernel
    (module names as XLA writes them) and the phases' wall times; other
    events and metadata do not count."""
    import gzip  # noqa: PLC0415

    kernels_py = _script_module('profile/kernels')
    events = [
        {'ph': 'M', 'name': 'process_name', 'pid': 1, 'args': {'name': '/host:CPU'}},
        {'ph': 'X', 'name': 'FusionCompiler::Compile', 'dur': 3000, 'args': {'module': 'add_fusion.2_kernel_module'}},
        {'ph': 'X', 'name': 'FusionCompiler::Compile', 'dur': 1000, 'args': {'module': 'add_fusion.2_kernel_module'}},
        {'ph': 'X', 'name': 'FusionCompiler::Compile', 'dur': 500, 'args': {'module': '__compute_module_wrapped_log'}},
        {'ph': 'X', 'name': 'Codegen', 'dur': 2_000_000},
        {'ph': 'X', 'name': 'ThunkEmitter::EmitEntryComputation', 'dur': 300_000},
        {'ph': 'X', 'name': 'ThunkEmitter::ConsumeKernels', 'dur': 200_000},
        {'ph': 'X', 'name': 'InlinerPass', 'dur': 7000},
    ]
    folder = tmp_path / 'plugins' / 'profile' / 'run'
    folder.mkdir(parents=True)
    with gzip.open(folder / 'host.trace.json.gz', 'wt') as f:
        json.dump({'traceEvents': events}, f)
    kernels, phases = kernels_py._compile_times(tmp_path)
    assert kernels == pytest.approx({'add_fusion.2': 0.004, 'wrapped_log': 0.0005})
    assert phases == pytest.approx({'LLVM (both cores)': 2.0, 'kernel emission (both cores)': 0.5})
    assert kernels_py._compile_times(tmp_path / 'empty') == ({}, {})


def _script_module(name):
    """``benchmarks/{name}.py`` as a module (a script, not a package)."""
    import importlib.util  # noqa: PLC0415

    path = os.path.join(REPO, 'benchmarks', f'{name}.py')
    spec = importlib.util.spec_from_file_location(os.path.basename(name), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _device_profile():
    """`benchmarks/profile/device_profile.py` as a module."""
    return _script_module('profile/device_profile')


def test_device_profile_reads_device_streams_of_a_perfetto_trace(tmp_path):
    """Only the device processes' complete events count, per stream and
    per kernel, per iteration; host events and metadata do not."""
    import gzip  # noqa: PLC0415

    meta = [
        {'ph': 'M', 'name': 'process_name', 'pid': 1, 'args': {'name': '/device:GPU:0'}},
        {'ph': 'M', 'name': 'process_name', 'pid': 2, 'args': {'name': '/host:CPU'}},
        {'ph': 'M', 'name': 'thread_name', 'pid': 1, 'tid': 7, 'args': {'name': 'Stream #14(Compute)'}},
        {'ph': 'M', 'name': 'thread_name', 'pid': 1, 'tid': 8, 'args': {'name': 'Stream #15(MemcpyH2D)'}},
    ]
    kernels = [('fusion_a', 7, 3.0), ('fusion_b', 7, 1.0), ('fusion_a', 7, 5.0), ('MemcpyH2D', 8, 2.0)]
    events = [
        {'ph': 'X', 'pid': 1, 'tid': tid, 'name': name, 'dur': dur, 'ts': 10.0 * i}
        for i, (name, tid, dur) in enumerate(kernels)
    ]
    events.append({'ph': 'X', 'pid': 2, 'tid': 1, 'name': 'host_work', 'dur': 1000.0, 'ts': 0.0})
    folder = tmp_path / 'plugins' / 'profile' / 'run'
    folder.mkdir(parents=True)
    with gzip.open(folder / 'perfetto_trace.json.gz', 'wt') as f:
        json.dump({'traceEvents': meta + events}, f)

    module = _device_profile()
    found = module.device_events(tmp_path)
    assert sorted(found) == sorted(
        [('Stream #14(Compute)', name, dur, 10.0 * i) for i, (name, tid, dur) in enumerate(kernels) if tid == 7]
        + [('Stream #15(MemcpyH2D)', 'MemcpyH2D', 2.0, 30.0)]
    )
    lines = module.report(found, iterations=2, top=2)
    # streams by busy time: 9 us over 2 iterations, spanning 0-21 us
    assert lines[1] == 'Stream #14(Compute) | 1.5 | 0.0 (4) | 0.0'
    assert lines[2].startswith('Stream #15(MemcpyH2D) | 0.5 |')
    # kernels by total time, the top 2
    assert lines[-2:] == ['0.0 | 2 | 4.00 | 1.0 | fusion_a', '0.0 | 1 | 2.00 | 0.5 | MemcpyH2D']


@pytest.mark.parametrize(
    ('script', 'option'),
    [
        ('profile/kernels.py', '--n'),
        ('profile/device_profile.py', '--ndpost'),
        ('variants.py', '--n'),
        ('profile/perf_kernels.py', '--n'),
    ],
)
def test_scripts_reject_sizes_below_one(script, option):
    proc = _run_script(f'benchmarks/{script}', option, '0', timeout=120)
    assert proc.returncode == 2
    assert f'{option} must be at least 1, got 0' in proc.stderr


@pytest.mark.slow
def test_variants_prints_every_variant():
    """`variants.py` fits every variant in one process: the warm fit and a
    new seed compile nothing, a new number of trees compiles."""
    args = ('benchmarks/variants.py', '--n', '100', '--n-test', '10', '--nskip', '5', '--ndpost', '10', '--markdown')
    proc = _run_script(*args, drop_env=('XLA_FLAGS', 'JAX_COMPILATION_CACHE_DIR'))
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = [line.strip('|').split('|') for line in proc.stdout.splitlines() if line.startswith('| ')]
    rows = {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in table[1:]}
    assert len(rows) == 12, proc.stdout
    # columns: seconds, XLA compiles, compile seconds, x warm
    assert rows['warm (same settings)'][1] == '0', proc.stdout
    assert rows['seed=5'][1] == '0', proc.stdout
    assert int(rows['ntree=50'][1]) >= 1, proc.stdout


@pytest.mark.slow
@pytest.mark.skipif(shutil.which('perf') is None or shutil.which('gdb') is None, reason='needs perf and gdb')
def test_perf_kernels_names_the_sweep_kernels():
    """`perf_kernels.py` names the samples in XLA's code by kernel: at n =
    1,000 the scatter of the per-leaf sums is among them, and the
    cumulative shares grow to at most 100%."""
    args = ('--n', '1000', '--nskip', '10', '--ndpost', '10', '--seconds', '1', '--top', '100')
    proc = _run_script('benchmarks/profile/perf_kernels.py', *args, timeout=300)
    if proc.returncode and 'perf failed' in proc.stderr:
        pytest.skip(f'perf cannot sample here: {proc.stderr[-200:]}')
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith('| ') and '%' in line]
    cumulative = [float(row.split('|')[2].strip().rstrip('%')) for row in rows]
    assert any('kernel wrapped_scatter' in row for row in rows), proc.stdout
    assert cumulative == sorted(cumulative) and 50 < cumulative[-1] <= 100


@pytest.mark.slow
def test_survival_prints_both_workloads():
    """`survival.py --quick` times R's lung demo and a simulated study: both rows have figures."""
    proc = _run_script('benchmarks/survival.py', '--quick', '--people', '2000', '--ndpost', '20')
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith(('| lung', '| simulated'))]
    assert len(rows) == 2, proc.stdout
    assert not any('failed' in row for row in rows), proc.stdout
    assert 'ms/iter' in rows[1]
