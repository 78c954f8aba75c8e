"""`benchmarks/gpu.py`, the one prepared GPU run, works on a CPU: a GPU's
time is too scarce to find there that a row crashes or is missing.

It runs in subprocesses, as it will on the GPU machine (`--quick`, with
`--platform cpu`)."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join('benchmarks', 'gpu.py')


def _run(*args, timeout=900):
    env = {k: v for k, v in os.environ.items() if k not in ('XLA_FLAGS', 'JAX_COMPILATION_CACHE_DIR')}
    return subprocess.run(
        [sys.executable, SCRIPT, '--platform', 'cpu', *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _rows(stdout):
    """The markdown table's rows: ``[(what, n, bartz, note)]`` (no peer columns)."""
    lines = [line for line in stdout.splitlines() if line.startswith('| ')]
    assert lines[0].split('|')[1:-1] == [' what ', ' n ', ' bartz ', ' note '], stdout
    return [tuple(cell.strip() for cell in line.split('|')[1:-1]) for line in lines[1:]]


def _script():
    """``benchmarks/gpu.py`` as a module (its table code, no subprocess),
    with `benchmarks/` on ``sys.path`` only while it imports its neighbours."""
    folder = os.path.join(REPO, 'benchmarks')
    sys.path.insert(0, folder)
    try:
        spec = importlib.util.spec_from_file_location('gpu_script', os.path.join(REPO, SCRIPT))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(folder)
    return module


# every row of a --quick run, by (what, n)
QUICK_ROWS = [
    ('warm gbart, best of 1 (s)', '1,000 / 20 / 50'),
    ('cold gbart: first fit of a process, empty cache (s)', '1,000 / 20 / 50'),
    ('fixed cost per fit: warm time extrapolated to 0 iterations (s)', '1,000: 7 and 70 iterations'),
    ('warm gbart, best of 1 (s)', '2,000 / 20 / 50'),
    ('cold gbart: first fit of a process, empty cache (s)', '2,000 / 20 / 50'),
    ('MCMC step, plan_sweep (masked_sums=False) (ms/iter)', '100,000'),
    ('MCMC step, plan_sweep (masked_sums=False) (ms/iter)', '1,000'),
    ('MCMC step, masked_sums=True (ms/iter)', '1,000'),
    ("compiled step's device memory, temp + argument + output (MB)", '100,000'),
    ("compiled step's device memory, temp + argument + output (MB)", '1,000'),
    ('iterations per second (default plan)', '100,000'),
    ('memory-bandwidth bound per iteration (ms)', '100,000'),
    ('program load: first fit of a new process with the cache - warm (s)', '1,000 / 2 / 5'),
    ('fixed cost: host preparation (s)', '1,000 / 2 / 5'),
    ('fixed cost: state to device, program lookup (s)', '1,000 / 2 / 5'),
    ('fixed cost: sampling loop (s)', '1,000 / 2 / 5'),
    ('fixed cost: host post-processing (s)', '1,000 / 2 / 5'),
    ('fixed cost: device run, of the sampling loop (s)', '1,000 / 2 / 5'),
    ('device profile: device events per tree', '1,000 / 2 / 5'),
    ("predict, kind='mean', first call (s)", '100,000 rows'),
    ("predict, kind='mean', second call (s)", '100,000 rows'),
    ('gbart, 5 + 5 iterations, first fit of a process (s)', '100,000 / 5 / 5'),
]


@pytest.mark.slow
def test_quick_run_prints_every_row(tmp_path):
    """A --quick run on the CPU has every row with a sane number (the
    budget large enough that none is skipped), and its JSON the same rows."""
    out = tmp_path / 'gpu.json'
    proc = _run('--quick', '--budget-s', '1500', '--out-json', str(out), timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'Machine: [CpuDevice(id=0)] (cpu, backend cpu)' in proc.stdout
    rows = _rows(proc.stdout)
    assert [(what, n) for what, n, _, _ in rows] == QUICK_ROWS, proc.stdout
    values = {(what, n): (value, note) for what, n, value, note in rows}
    for key, (value, note) in values.items():
        if key[0] != 'device profile: device events per tree':
            assert float(value) >= 0, (key, value, note)
    assert values[QUICK_ROWS[-4]] == ('n/a', 'no device events in a trace on this backend')
    warm, cold = (float(values[QUICK_ROWS[i]][0]) for i in (0, 1))
    assert 0 < warm < cold
    # the bandwidth bound: 11 bytes per point and tree, 200 trees, 100,000 points, 4.8 TB/s
    assert float(values[QUICK_ROWS[11]][0]) == pytest.approx(11 * 200 * 100_000 / 4.8e12 * 1e3, rel=1e-2)
    step_ms = float(values[QUICK_ROWS[5]][0])
    assert float(values[QUICK_ROWS[10]][0]) == pytest.approx(1e3 / step_ms, rel=1e-2)
    # a point's leaf index in each of the 200 trees, its bins: at least 210 bytes
    assert float(values[QUICK_ROWS[8]][1].split(' bytes per point')[0]) >= 210
    assert 'kernels per tree' in values[QUICK_ROWS[5]][1]
    # the stages of the warm fit add up to its wall time
    saved = json.loads(out.read_text())
    fixed = saved['results']['fixed']
    assert sum(fixed['stages'].values()) == pytest.approx(fixed['warm_s'], rel=1e-6)
    assert [(row['what'], row['n']) for row in saved['rows']] == QUICK_ROWS


def test_rows_past_the_budget_say_so():
    """With no budget left, every section prints its rows as skipped, with the reason."""
    proc = _run('--quick', '--budget-s', '0.01', timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _rows(proc.stdout)
    assert {what for what, *_ in rows} >= {
        'warm gbart, best of 1 (s)',
        'MCMC step, all variants (ms/iter)',
        'fixed cost: the stages of a warm fit (s)',
        "predict, kind='mean' (s)",
        'gbart, 5 + 5 iterations, first fit of a process (s)',
    }
    for what, _, value, note in rows:
        assert value == 'skipped' and 'budget ran out' in note, (what, value, note)


@pytest.mark.parametrize(
    ('args', 'message'),
    [
        (('--sections', 'fits,foo'), '--sections must be among fits,steps,fixed,predict,big, got fits,foo'),
        (('--sizes', '1000,0'), "--sizes must be positive integers separated by commas, got '1000,0'"),
        (('--bandwidth-gbs', '0'), '--bandwidth-gbs must be positive, got 0.0'),
    ],
)
def test_rejects_bad_options(args, message):
    proc = _run(*args, timeout=120)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_bandwidth_row_is_the_measured_time_over_the_bound():
    """The bound of an iteration is bytes per point and tree times points
    and trees over the bandwidth; the note gives the measured time over it."""
    gpu = _script()
    args = gpu.parse_args(['--bandwidth-gbs', '1000', '--bytes-per-point-tree', '10', '--step-sizes', '1000000'])
    memory = {'temp': 2**20, 'argument': 2**21, 'output': 2**21, 'alias': 2**21}
    row = {'n': 1_000_000, 'variant': 'plan', 'default': True, 'ms_per_iter': 8.0, 'memory': memory, 'note': ''}
    row['kernels'] = {'fusion': 9, 'custom-call': 1, 'other': 2}
    table = gpu.Table([])
    gpu.step_rows(table, {'rows': [row]}, args)
    rows = {r['what']: r for r in table.rows}
    # 10 B x 1e6 points x 200 trees / 1e12 B/s = 2 ms
    bound = rows['memory-bandwidth bound per iteration (ms)']
    assert bound['bartz'] == pytest.approx(2.0)
    assert bound['note'].startswith('measured / bound 4;')
    assert rows['iterations per second (default plan)']['bartz'] == pytest.approx(125.0)
    assert 'kernels per tree 12 (9 fusions, 1 custom calls, 2 other)' in rows['MCMC step, plan (ms/iter)']['note']
    memory_row = rows["compiled step's device memory, temp + argument + output (MB)"]
    assert memory_row['bartz'] == pytest.approx(5.0)
    assert memory_row['note'].startswith(f'{5 * 2**20 / 1e6:.1f} bytes per point')


def test_fixed_cost_is_the_warm_time_at_zero_iterations():
    """From a warm fit of 700 iterations and one of 70, the time per
    iteration and the time left at none."""
    gpu = _script()
    # 0.1 s + 2 ms per iteration
    result = {'warm_s': 0.1 + 700 * 0.002, 'short_s': 0.1 + 70 * 0.002}
    fixed, per_iter = gpu.fixed_cost(result, (1000, 200, 500), (1000, 20, 50))
    assert fixed == pytest.approx(0.1) and per_iter == pytest.approx(0.002)
    assert gpu.fixed_cost({'warm_s': 1.0, 'short_s': None}, (1000, 200, 500), (1000, 20, 50)) is None


@pytest.mark.parametrize(('n', 'backend'), [(1000, 'cpu'), (4096, 'gpu')])
def test_kernel_variants_flip_the_plan(n, backend):
    """The step's variants: `plan_sweep`'s plan first, then the per-leaf
    sums the other way (masked reduction or laned scatter), then the
    Pallas kernel's where the plan has it; never lanes with a masked sum."""
    gpu_workers = _script().gpu_workers
    variants = gpu_workers.plan_variants(n, backend)
    names = list(variants)
    default = variants[names[0]]
    assert names[0] == f'plan_sweep (masked_sums={default.masked_sums})'
    assert default.masked_sums == (backend == 'gpu')
    flipped = variants[f'masked_sums={not default.masked_sums}']
    assert flipped.masked_sums != default.masked_sums and flipped.lanes == default.masked_sums
    assert flipped.replace(masked_sums=default.masked_sums, lanes=default.lanes) == default
    if hasattr(default, 'pallas'):
        assert names[2:] == ['pallas=True'] and variants['pallas=True'].pallas and not variants['pallas=True'].lanes
    else:
        assert names[2:] == []
    assert list(gpu_workers.plan_variants(n, backend, variants=False)) == names[:1]
    assert 'pallas=True' not in gpu_workers.plan_variants(n, backend, pallas=False)
