"""One run on a GPU machine, one table: issue 56's figures of bartz on an accelerator.

Run from the repository root on the machine with the GPU (one command,
under five minutes with the default ``--budget-s``):

    python3 benchmarks/gpu.py --peer-python /tmp/pv/bin/python --out-json out/gpu.json
    python3 benchmarks/gpu.py --sections steps,big                 # a part of the table
    .venv/bin/python benchmarks/gpu.py --quick --platform cpu      # the smoke test on a CPU (about 2 min)

Every measurement runs in a fresh subprocess, with `benchmarks/peers.py`'s
machinery (the fits are its workers, the rest those of
`benchmarks/gpu_workers.py`; Friedman #1 data with p = 10, 200 trees, R's
default priors, its seeds; ``--platform`` sets ``JAX_PLATFORMS``, ``''``
lets JAX choose the GPU). The sections (``--sections``), in the order
they run:

fits
    Warm and cold `gbart` at n = 1,000 / 10,000 / 100,000 (then, after
    `steps`, 1,000,000): in one process per n and implementation, a first
    fit with an empty compilation cache (cold), then the best of
    ``--repeats`` more (warm), with nskip / ndpost as `peers.py` (200 / 500
    below 100,000 points, 100 / 200 from there), beside bartz 0.13.0 when
    ``--peer-python`` gives its interpreter (ratio column: below 1 bartz is
    faster). At the smallest n the process also fits with a tenth of the
    iterations: the fixed cost per fit is the warm time extrapolated to
    zero iterations from the two.
steps
    The MCMC step through the low-level API, at n = 10,000,000 / 1,000,000 /
    100,000 / 10,000 / 1,000 (largest first: the 10M row matters most):
    `bartz.mcmcstep.init` as `gbart` builds it (`benchmarks/speed.py`), the
    plan of `plan_sweep` for the device and its variants (``masked_sums``
    flipped; ``pallas=True`` where the plan has that field), each compiled
    as a jitted ``lax.fori_loop`` of `bartz.mcmcstep.step` (all variants of
    an n compiled at once on the host's cores), then timed in turn on one
    chain: ms per iteration, the compiled program's device memory from
    ``memory_analysis()`` (temp + argument + output bytes, and per point),
    and the kernels of its loop over trees counted in the compiled HLO
    (fusions, custom calls and the other instructions that run on the
    device; every branch of a conditional counted). At the largest n:
    iterations per second and the memory-bandwidth bound of an iteration,
    ``--bytes-per-point-tree`` bytes for each point and tree (the leaf
    index read and written, 2; the split predictor's bin, 1; the residual
    read and written, 8) over ``--bandwidth-gbs`` (an H200's 4.8 TB/s),
    and the measured time over it.
fixed
    The fixed cost of a warm fit at the smallest n, in one process that
    reuses the cold fit's compilation cache: its first fit (programs
    loaded from disk) against a warm one; the warm fit's wall time split
    into host preparation, state to device and program lookup, the
    sampling loop (``run_info.elapsed``) and host post-processing, by the
    shares of `gbart`'s stages in a ``cProfile`` of one more fit; and the
    device run: on a GPU the device's busy time in a ``jax.profiler``
    trace of one more fit (with its kernels per tree and top kernels, as
    `benchmarks/profile/device_profile.py`), on a CPU the iterations times
    the step's time from `steps`.
predict
    ``fit.predict(x, kind='mean')`` at 10,000,000 rows from a fit at the
    smallest n: first call (compiling) and second, and the peak device
    memory where ``jax.devices()[0].memory_stats()`` has it.
big
    `gbart` at 10,000,000 points with 5 + 5 iterations, first fit in its
    process: wall time, the sampling loop, its compile estimate and the
    peak device memory.

``--quick``: n = 1,000 / 2,000 for the fits, steps at 100,000 and 1,000 (the
variants at 1,000 only, without Pallas, which a CPU interprets), 100,000 in
place of 10M (and no 1M), a tenth of the iterations. ``--budget-s``
(default 270 s) bounds the whole run: a worker is killed when it runs
out, and the rows not measured say so in their note.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import gpu_workers  # the workers, beside this script
import peers  # benchmarks/ is the script directory, on sys.path

SECTIONS = ('fits', 'steps', 'fixed', 'predict', 'big')
WORKERS = os.path.abspath(gpu_workers.__file__)
NTREE = gpu_workers.NTREE
MIN_ROW_S = 5.0  # a row is not started with less budget left


# ---------------------------------------------------------------- parent side


class Budget:
    """The seconds left of ``--budget-s``."""

    def __init__(self, seconds):
        self.seconds, self.start = seconds, time.perf_counter()

    def left(self):
        return self.seconds - (time.perf_counter() - self.start)


def run_ours(kind, spec, env, budget):
    """Worker `kind` of this script in a fresh process of this repository's
    bartz, killed when the budget runs out; its result, or ``{'skipped': why}``."""
    left = budget.left()
    if left < MIN_ROW_S:
        return {'skipped': 'budget ran out'}
    print(f'bartz: {kind} ...', file=sys.stderr, flush=True)
    spec = {**spec, 'kind': kind, 'deadline': time.time() + left}
    out = peers.run_worker(sys.executable, spec, env, ours=True, script=WORKERS, timeout=left)
    return _budget_note(out)


def _budget_note(out):
    if 'TimeoutExpired' in out.get('error', ''):
        return {'skipped': 'budget ran out during the row'}
    if 'error' in out:
        print(f'  failed: {out["error"]}', file=sys.stderr, flush=True)
    return out


def fit_settings(n, quick):
    """(n, nskip, ndpost) of a warm fit, as `peers.py`."""
    if quick:
        return (n, 20, 50)
    return (n, 200, 500) if n < 100_000 else (n, 100, 200)


def short_settings(settings):
    """A tenth of the iterations of `settings`."""
    n, nskip, ndpost = settings
    return (n, max(1, nskip // 10), max(1, ndpost // 10))


def measure_fits(n, impls, args, budget, caches):
    """Warm and cold fits at `n` for each implementation ``(label, python,
    lib)``, taking turns; ``{label: result}`` with ``cold_s``, ``warm_s``
    and at the smallest n ``short_s``. Our cache directory is kept in
    `caches` for the workers after."""
    settings = fit_settings(n, args.quick)
    smallest = n == min(args.sizes)
    fits = [settings]
    for _ in range(args.repeats):
        fits += [settings, short_settings(settings)] if smallest else [settings]
    out = {}
    for label, python, lib in impls:
        left = budget.left()
        if left < MIN_ROW_S:
            out[label] = {'skipped': 'budget ran out'}
            continue
        env = {'JAX_PLATFORMS': args.platform}
        if lib == peers.OURS:
            caches[n] = tempfile.mkdtemp(prefix='bartz-gpu-cache-')
            env['BARTZ_CACHE_DIR'] = caches[n]
        result = _budget_note(peers.run_workload(label, python, lib, f'warm n={n:,}', fits, env, timeout=left))
        if 'fit_s' in result:
            times = result['fit_s']
            result['cold_s'] = times[0]
            result['warm_s'] = min(t for t, s in zip(times[1:], fits[1:]) if s == settings)
            short = [t for t, s in zip(times[1:], fits[1:]) if s != settings]
            result['short_s'] = min(short) if short else None
        out[label] = result
    return {'settings': settings, 'short': short_settings(settings) if smallest else None, 'results': out}


def fixed_cost(result, settings, short):
    """The warm time extrapolated to zero iterations and the time per
    iteration, from a result's long and short warm fits; None without them."""
    if result.get('short_s') is None:
        return None
    long_iters, short_iters = sum(settings[1:]), sum(short[1:])
    per_iter = (result['warm_s'] - result['short_s']) / (long_iters - short_iters)
    return result['short_s'] - short_iters * per_iter, per_iter


def measure_all(args, impls):
    """Run the sections in order; ``{section: results}``."""
    budget = Budget(args.budget_s)
    env = {'JAX_PLATFORMS': args.platform}
    caches, results = {}, {'probe': run_ours('probe', {}, env, Budget(max(args.budget_s, 60)))}
    small = [n for n in args.sizes if n < 1_000_000]
    large = [n for n in args.sizes if n >= 1_000_000]
    want = set(args.sections)
    fits = results['fits'] = {}
    for n in small if 'fits' in want else []:
        fits[n] = measure_fits(n, impls, args, budget, caches)
    if 'steps' in want:
        # (the quick run, for a CPU, compiles the variants at its smallest n only, and
        # not the Pallas kernel's: interpreted there, it compiles and runs for minutes)
        variants_at = [min(args.step_sizes)] if args.quick else args.step_sizes
        spec = {'sizes': args.step_sizes, 'variants_at': variants_at, 'pallas': not args.quick}
        spec.update(burn=3 if args.quick else 10, target_s=0.3, max_iters=200)
        results['steps'] = run_ours('steps', spec, env, budget)
    for n in large if 'fits' in want else []:
        fits[n] = measure_fits(n, impls, args, budget, caches)
    n0 = min(args.sizes)
    cached = {**env, 'BARTZ_CACHE_DIR': caches[n0]} if n0 in caches else env
    short = short_settings(fit_settings(n0, args.quick))
    if 'fixed' in want:
        results['fixed'] = run_ours('fixed', {'n': n0, 'settings': short[1:], 'top': args.top}, cached, budget)
    if 'predict' in want:
        spec = {'n': n0, 'settings': short[1:], 'rows': args.predict_rows}
        results['predict'] = run_ours('predict', spec, cached, budget)
    if 'big' in want:
        results['big'] = run_ours('big', {'n': args.big_n, 'settings': (5, 5)}, env, budget)
    for cache in caches.values():
        shutil.rmtree(cache, ignore_errors=True)
    return results


# ---------------------------------------------------------------- the table


def fmt(value):
    if value is None:
        return ''
    return value if isinstance(value, str) else f'{value:.3g}'


def mb(nbytes):
    """Bytes in kB, MB or GB (powers of 1024), three significant digits."""
    for unit, size in (('GB', 2**30), ('MB', 2**20)):
        if nbytes >= size:
            return f'{nbytes / size:.3g} {unit}'
    return f'{nbytes / 2**10:.3g} kB'


class Table:
    """Rows of (what, n, bartz, {peer label: value}, note); a peer's ratio is bartz / peer."""

    def __init__(self, peer_labels):
        self.peer_labels, self.rows = peer_labels, []

    def add(self, what, n, ours, peer=None, note=''):
        self.rows.append({'what': what, 'n': n, 'bartz': ours, 'peers': peer or {}, 'note': note})

    def skipped(self, what, n, out):
        """A row that was not measured, `out` saying why (a skip or an error)."""
        why = out.get('skipped') or f'failed: {str(out.get("error"))[:200]}'
        self.add(what, n, 'skipped' if 'skipped' in out else 'failed', note=why)

    def render(self):
        labels = self.peer_labels
        header = ['what', 'n', peers.OURS_LABEL, *labels, *(f'bartz/{lbl}' for lbl in labels), 'note']
        lines = []
        for row in self.rows:
            values = [row['peers'].get(lbl) for lbl in labels]
            ratios = [
                fmt(row['bartz'] / v) if isinstance(row['bartz'], float) and isinstance(v, float) and v > 0 else ''
                for v in values
            ]
            lines.append([row['what'], row['n'], fmt(row['bartz']), *map(fmt, values), *ratios, row['note']])
        return peers.render(header, lines, markdown=True)


def _value(out, key):
    """`out[key]` of a worker's result, or 'skipped' / 'failed'."""
    if 'skipped' in out:
        return 'skipped'
    return 'failed' if 'error' in out else out.get(key)


def fit_rows(table, n, fits, args):
    """The warm, cold and (smallest n) fixed-cost rows of the fits at `n`."""
    settings, short, res = fits['settings'], fits['short'], fits['results']
    ours = res.get(peers.OURS_LABEL, {'skipped': 'not run'})
    cell = f'{n:,} / {settings[1]} / {settings[2]}'
    others = {lbl: res[lbl] for lbl in table.peer_labels if lbl in res}
    iters = sum(settings[1:])
    measured = {lbl: out for lbl, out in res.items() if 'warm_s' in out}
    per_iter = '; '.join(f'{lbl} {1e3 * out["warm_s"] / iters:.3g} ms/iter' for lbl, out in measured.items())
    why = '; '.join(
        f'{lbl}: {out.get("skipped") or out.get("error", "")[:150]}' for lbl, out in res.items() if lbl not in measured
    )
    note = '; '.join(filter(None, [per_iter, why]))
    peer = {lbl: _value(out, 'warm_s') for lbl, out in others.items()}
    table.add(f'warm gbart, best of {args.repeats} (s)', cell, _value(ours, 'warm_s'), peer, note)
    compile_note = f'bartz cold - warm {ours["cold_s"] - ours["warm_s"]:.3g} s' if 'cold_s' in ours else why
    peer = {lbl: _value(out, 'cold_s') for lbl, out in others.items()}
    table.add('cold gbart: first fit of a process, empty cache (s)', cell, _value(ours, 'cold_s'), peer, compile_note)
    if short is None:
        return
    what = 'fixed cost per fit: warm time extrapolated to 0 iterations (s)'
    cell = f'{n:,}: {sum(short[1:])} and {iters} iterations'
    costs = {lbl: fixed_cost(out, settings, short) for lbl, out in res.items() if 'warm_s' in out}
    note = '; '.join([*(f'{lbl} {1e3 * c[1]:.3g} ms/iter' for lbl, c in costs.items() if c), *filter(None, [why])])
    value = {lbl: (costs[lbl][0] if costs.get(lbl) else _value(out, 'x')) for lbl, out in others.items()}
    table.add(what, cell, costs[peers.OURS_LABEL][0] if costs.get(peers.OURS_LABEL) else _value(ours, 'x'), value, note)


def _kernels_note(row):
    k = row.get('kernels') or {}
    parts = []
    if k:
        kinds = f'{k["fusion"]} fusions, {k["custom-call"]} custom calls, {k["other"]} other'
        parts.append(f'kernels per tree {sum(k.values())} ({kinds})')
    if row.get('compile_s') is not None:
        parts.append(f'compile {row["compile_s"]:.3g} s')
    mem = row.get('memory')
    if mem:
        parts.append(f'device memory {mb(mem["temp"] + mem["argument"] + mem["output"])}')
    return '; '.join(filter(None, [*parts, row.get('note', '')]))


def step_rows(table, steps, args):
    """The kernel variants at each n, the device memory at the two largest
    n, the iterations per second and the bandwidth bound at the largest."""
    if 'rows' not in steps:
        table.skipped('MCMC step, all variants (ms/iter)', '', steps)
        return
    for row in steps['rows']:
        if 'skipped' in row:
            table.skipped('MCMC step, all variants (ms/iter)', f'{row["n"]:,}', row)
        elif 'error' in row:
            table.skipped(f'MCMC step, {row["variant"]} (ms/iter)', f'{row["n"]:,}', row)
        else:
            value = row['ms_per_iter'] if row['ms_per_iter'] is not None else 'skipped'
            table.add(f'MCMC step, {row["variant"]} (ms/iter)', f'{row["n"]:,}', value, note=_kernels_note(row))
    timed = [row for row in steps['rows'] if row.get('default') and row.get('memory')]
    for row in sorted(timed, key=lambda r: -r['n'])[:2]:
        mem = row['memory']
        total = mem['temp'] + mem['argument'] + mem['output']
        note = f'{total / row["n"]:.1f} bytes per point; temp {mb(mem["temp"])}, argument {mb(mem["argument"])}, '
        note += f'output {mb(mem["output"])} (aliased {mb(mem["alias"])})'
        what = "compiled step's device memory, temp + argument + output (MB)"
        table.add(what, f'{row["n"]:,}', total / 2**20, note=note)
    largest = [row for row in steps['rows'] if row['n'] == max(args.step_sizes)]
    default = next((row for row in largest if row.get('default') and row.get('ms_per_iter')), None)
    n = max(args.step_sizes)
    if default is None:
        table.skipped('iterations per second (default plan)', f'{n:,}', largest[0] if largest else steps)
        return
    table.add('iterations per second (default plan)', f'{n:,}', 1e3 / default['ms_per_iter'])
    bound_ms = 1e3 * args.bytes_per_point_tree * n * NTREE / (args.bandwidth_gbs * 1e9)
    note = f'measured / bound {default["ms_per_iter"] / bound_ms:.3g}; {args.bytes_per_point_tree:g} B per point '
    note += f'per tree, {NTREE} trees, at {args.bandwidth_gbs:g} GB/s'
    table.add('memory-bandwidth bound per iteration (ms)', f'{n:,}', bound_ms, note=note)


def fixed_rows(table, fixed, steps, args):
    """Where the fixed cost of a warm fit at the smallest n goes."""
    n0 = min(args.sizes)
    short = short_settings(fit_settings(n0, args.quick))
    cell = f'{n0:,} / {short[1]} / {short[2]}'
    if 'stages' not in fixed:
        table.skipped('fixed cost: the stages of a warm fit (s)', cell, fixed)
        return
    note = f'first fit {fixed["first_s"]:.3g} s, warm {fixed["warm_s"]:.3g} s'
    what = 'program load: first fit of a new process with the cache - warm (s)'
    table.add(what, cell, fixed['first_s'] - fixed['warm_s'], note=note)
    for stage, seconds in fixed['stages'].items():
        how = 'run_info.elapsed' if stage == 'sampling loop' else 'cProfile shares of the time outside the loop'
        table.add(f'fixed cost: {stage} (s)', cell, seconds, note=how)
    trace = fixed.get('trace')
    if trace:
        note = 'jax.profiler trace of one more fit'
        table.add('fixed cost: device busy, of the sampling loop (s)', cell, trace['busy_s'], note=note)
        note = 'top kernels (total ms | count | mean us | per iter | kernel): ' + ' / '.join(trace['report'])
        table.add('device profile: device events per tree', cell, trace['events_per_iter'] / NTREE, note=note)
        return
    rows = [r for r in steps.get('rows', []) if r.get('default') and r['n'] == n0 and r.get('ms_per_iter')]
    iters = sum(short[1:])
    if rows:
        note = f'{iters} iterations x the step at n = {n0:,} (no device events on this backend)'
        device_s = iters * rows[0]['ms_per_iter'] / 1e3
        table.add('fixed cost: device run, of the sampling loop (s)', cell, device_s, note=note)
    table.add('device profile: device events per tree', cell, 'n/a', note='no device events in a trace on this backend')


def predict_rows(table, out, args):
    cell = f'{args.predict_rows:,} rows'
    if 'first_s' not in out:
        table.skipped("predict, kind='mean' (s)", cell, out)
        return
    note = f'second call {out["second_s"]:.3g} s; finite: {out["finite"]}'
    if out.get('peak_bytes'):
        note += f'; peak device memory of the process {mb(out["peak_bytes"])}'
    table.add("predict, kind='mean', first call (s)", cell, out['first_s'], note=note)
    table.add("predict, kind='mean', second call (s)", cell, out['second_s'])


def big_row(table, out, args):
    what, cell = 'gbart, 5 + 5 iterations, first fit of a process (s)', f'{args.big_n:,} / 5 / 5'
    if 'wall_s' not in out:
        table.skipped(what, cell, out)
        return
    note = f'sampling loop {out["elapsed_s"]:.3g} s; JAX compiling {out["compile_s"]:.3g} s in the fit'
    if out.get('peak_bytes'):
        note += f'; peak device memory {mb(out["peak_bytes"])}'
    table.add(what, cell, out['wall_s'], note=note)


def build_table(results, args, peer_labels):
    table = Table(peer_labels)
    for n, fits in results.get('fits', {}).items():
        fit_rows(table, n, fits, args)
    steps = results.get('steps', {'skipped': 'section not run'})
    if 'steps' in results:
        step_rows(table, steps, args)
    if 'fixed' in results:
        fixed_rows(table, results['fixed'], steps, args)
    if 'predict' in results:
        predict_rows(table, results['predict'], args)
    if 'big' in results:
        big_row(table, results['big'], args)
    return table


def commit():
    """This repository's commit (with ``+changes`` when its tree differs), or '?'."""
    try:
        git = {'cwd': peers.REPO, 'capture_output': True, 'text': True, 'check': True}
        head = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], **git)
        dirty = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=no'], **git)
    except (OSError, subprocess.CalledProcessError):
        return '?'
    return head.stdout.strip() + (' +changes' if dirty.stdout.strip() else '')


def machine_lines(probe, peer_probes, args):
    date = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    if 'error' in probe or 'skipped' in probe:
        lines = [f'Machine: probe failed ({probe})']
    else:
        lines = [
            f'Machine: {probe["devices"]} ({probe["device_kind"]}, backend {probe["backend"]}); '
            f'host {peers.cpu_model()}, {os.cpu_count()} cores, {platform.platform()}',
            f'bartz {probe.get("bartz", "?")} at {commit()}, jax {probe.get("jax")} / jaxlib {probe.get("jaxlib")}, '
            f'Python {probe["python"]}; {date}; JAX_PLATFORMS={args.platform!r}',
        ]
    lines += [peers.describe(label, info) for label, info in peer_probes.items()]
    return lines


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--peer-python', action='append', default=[], help='interpreter with bartz 0.13.0 (repeatable)')
    parser.add_argument('--platform', default='', help="JAX_PLATFORMS of the workers (default '': JAX chooses)")
    parser.add_argument('--quick', action='store_true', help='tiny sizes, a smoke test on a CPU')
    parser.add_argument('--sections', default=','.join(SECTIONS), help='sections to run (default: %(default)s)')
    parser.add_argument('--sizes', help='n of the fits (default 1000,10000,100000,1000000; quick 1000,2000)')
    parser.add_argument(
        '--step-sizes', help='n of the steps (default 10000000,1000000,100000,10000,1000; quick 100000,1000)'
    )
    parser.add_argument('--big-n', type=int, help='points of the big gbart fit (default 10000000; quick 100000)')
    parser.add_argument('--predict-rows', type=int, help='rows predicted (default 10000000; quick 100000)')
    parser.add_argument('--repeats', type=int, help='warm fits per process (default 2, quick 1)')
    parser.add_argument('--budget-s', type=float, default=270.0, help='seconds for the whole run (default %(default)s)')
    parser.add_argument(
        '--bandwidth-gbs', type=float, default=4800.0, help="device memory bandwidth, GB/s (default %(default)s: an H200)"
    )
    parser.add_argument(
        '--bytes-per-point-tree', type=float, default=11.0, help='bytes a sweep moves per point and tree (%(default)s)'
    )
    parser.add_argument('--top', type=int, default=8, help='kernels of the device profile listed (default %(default)s)')
    parser.add_argument('--out-json', help='save the results to this file')
    args = parser.parse_args(argv)
    args.sections = [s for s in args.sections.split(',') if s]
    if not args.sections or not set(args.sections) <= set(SECTIONS):
        parser.error(f'--sections must be among {",".join(SECTIONS)}, got {",".join(args.sections)}')
    q = args.quick
    args.sizes = _ints(parser, '--sizes', args.sizes or ('1000,2000' if q else '1000,10000,100000,1000000'))
    default_steps = '100000,1000' if q else '10000000,1000000,100000,10000,1000'
    args.step_sizes = _ints(parser, '--step-sizes', args.step_sizes or default_steps)
    args.big_n = args.big_n if args.big_n is not None else 100_000 if q else 10_000_000
    args.predict_rows = args.predict_rows if args.predict_rows is not None else 100_000 if q else 10_000_000
    args.repeats = args.repeats if args.repeats is not None else 1 if q else 2
    for name in ('big_n', 'predict_rows', 'repeats', 'top', 'budget_s', 'bandwidth_gbs', 'bytes_per_point_tree'):
        if not getattr(args, name) > 0:
            parser.error(f'--{name.replace("_", "-")} must be positive, got {getattr(args, name)}')
    return args


def _ints(parser, option, text):
    try:
        values = [int(v) for v in text.split(',') if v]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        parser.error(f'{option} must be positive integers separated by commas, got {text!r}')
    return values


def main(argv=None):
    args = parse_args(argv)
    pythons = [p for item in args.peer_python for p in item.split(',') if p]
    found, _ = peers.find_peers(pythons, ['bartz'])
    peer_probes = {label: info for label, _, _, info in found}
    impls = [(peers.OURS_LABEL, sys.executable, peers.OURS)] + [(label, python, lib) for label, python, lib, _ in found]
    results = measure_all(args, impls)
    table = build_table(results, args, [label for label, *_ in impls[1:]])
    print('\n'.join(machine_lines(results['probe'], peer_probes, args)))
    print()
    print(table.render())
    print()
    print(f'budget {args.budget_s:g} s; ratios: bartz / peer (< 1: bartz faster)')
    if args.out_json:
        os.makedirs(os.path.dirname(os.path.abspath(args.out_json)), exist_ok=True)
        with open(args.out_json, 'w') as f:
            probes = {'bartz': results['probe'], **peer_probes}
            saved = {'args': vars(args), 'probes': probes, 'results': results, 'rows': table.rows}
            json.dump(saved, f, indent=1, default=str)


if __name__ == '__main__':
    main()
