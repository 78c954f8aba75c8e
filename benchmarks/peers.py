"""What users wait for in `bartz.gbart`, end to end, next to peer implementations.

Run from the repository root:

    .venv/bin/python benchmarks/peers.py                           # this repo's bartz only
    .venv/bin/python benchmarks/peers.py --peer-python /path/to/venv/bin/python
    .venv/bin/python benchmarks/peers.py --quick --peer-python /path/to/venv/bin/python
    .venv/bin/python benchmarks/peers.py --markdown --out-json out/peers.json
    .venv/bin/python benchmarks/peers.py --rounds 3 --peer-python /path/to/venv/bin/python
    .venv/bin/python benchmarks/peers.py --moves grow,prune --peer-python /path/to/venv/bin/python
    .venv/bin/python benchmarks/peers.py --base-path /tmp/base --rounds 3 --sizes 1000,10000,100000

``--moves grow,prune`` runs this repo's bartz with R's birth/death sampler,
the moves of bartz 0.13.0 (default: bartz's default moves, which add CHANGE
and SWAP).

``--base-path PATH`` (repeatable) adds the bartz of another source tree,
for example a git worktree of the commit before a change, as an
implementation "bartz at PATH": its workers are this script run by this
interpreter (the same virtual environment) with ``PYTHONPATH=PATH``, so
only the package differs, and they take turns with the others workload by
workload like a peer; the column ``bartz/bartz at PATH`` is then the time
of this tree over the base's (below 1: this tree is faster).

Every measurement runs in a fresh subprocess: this repo's bartz with the
interpreter running this script, each peer with the interpreter given by
``--peer-python`` (repeatable or comma separated). A probe subprocess finds
which peers an interpreter has (``--peers`` picks among them):

bartz 0.13.0 (PyPI)
    ``bartz.BART.gbart(x, y, ntree=200, keepevery=1, printevery=None)``. Its
    ``x_train`` is (n, p) like ours (it transposes to its internal (p, n));
    ``printevery=None`` silences it; ``gbart`` forces ``mc_cores=1``, one
    chain. Same import name as ours, so peer processes run with ``python -I``
    (no PYTHONPATH, no script directory on ``sys.path``) from a temporary
    working directory, and the probe checks that the bartz it imports lies
    outside this repository.
stochtree
    ``BARTModel().sample(num_gfr=0, num_burnin=nskip, num_mcmc=ndpost)``:
    MCMC only, no grow-from-root warm start; 200 trees in the mean forest
    with alpha 0.95, beta 2, at least 5 points per leaf, fixed leaf variance
    (as R's BART), one chain, ``num_threads=-1`` (all cores, as XLA uses for
    bartz). Its priors and tree depth limit are its own, not R's.

Workloads, on Friedman #1 data (x uniform on [0, 1]^10, y = 10 sin(pi x1 x2)
+ 20 (x3 - 0.5)^2 + 10 x4 + 5 x5 + N(0, 1), generated from the same seed in
every process), R's default priors, 200 trees, one chain, keepevery 1:

cold
    The first gbart call in a new process (n 1,000, nskip 100, ndpost 200),
    with an empty compilation cache: our bartz gets ``BARTZ_CACHE_DIR`` set to
    a fresh temporary directory (every other process gets its own fresh one).
    The time of ``import`` is a row of its own, and so is the
    wall time of the whole process, from its start to its exit (Python's
    start, imports, the fit, and what the process still does before it
    ends: ours waits there for a full program still compiling after a
    quick first one, see `bartz._compile.options.quick_options`).
cold, x_test
    `cold` with ``x_test`` (1,000 more rows of the same distribution), R's
    usual call: the fit also predicts at them (a second compiled program).
second process
    The same as `cold` in another new process, reusing the cache directory
    of `cold`. The peers get no cache of ours: for them this is `cold` again.
warm
    In one process, after a first fit of the same shapes, the best of
    ``--repeats`` further fits: n 1,000 and 10,000 with nskip 200, ndpost 500;
    n 100,000 with nskip 100, ndpost 200 (``--sizes`` picks the n).
new n
    In one process: fits at n 1,000 (the first compiles, the best of
    ``--repeats`` more is the warm time), then the first fit at n 1,013, as a
    cross-validation fold would; the note gives its ratio to the warm time.
new p
    The same with, last, a fit on 9 of the 10 columns (n 1,000): a model
    variant without one predictor, or a step of feature selection.

The implementations take turns workload by workload, so that the two
times of a ratio are taken minutes apart; ``--rounds R`` runs every
workload R times that way (cold and second process each time with a fresh
cache) and reports the best time of each, with the ratio of every round in
the note: on a machine whose speed drifts by tens of percent within an
hour (a shared VM), the spread of those ratios says how far one run can be
trusted.

A time is the wall time of the call plus ``jax.block_until_ready`` on the
arrays of the result (work still queued is work users wait for). "bartz
ms/iter" is that time over nskip + ndpost. Ratios are bartz / peer: below 1
means this repo's bartz is faster. ``JAX_COMPILATION_CACHE_DIR`` is removed
from every worker's environment and ``JAX_PLATFORMS`` is set from
``--platform`` (default cpu).
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OURS = 'ours'  # worker id of this repo's bartz; peers are 'bartz' and 'stochtree'
OURS_LABEL = 'bartz'
PEER_KINDS = ('bartz', 'stochtree')
MOVE_NAMES = ('grow', 'prune', 'change', 'swap')  # of bartz.gbart's moves (not imported: stdlib only here)
TIMEOUT_S = 3 * 3600
P = 10
DATA_SEED = 0
FIT_SEED = 99


# ---------------------------------------------------------------- worker side
# This part runs in the subprocesses, also under the peers' interpreters: it
# uses only the standard library at import time and Python 3.9 syntax.


def friedman1(n):
    import numpy as np  # noqa: PLC0415

    rng = np.random.default_rng(DATA_SEED)
    x = rng.uniform(size=(n, P))
    f = 10 * np.sin(np.pi * x[:, 0] * x[:, 1]) + 20 * (x[:, 2] - 0.5) ** 2 + 10 * x[:, 3] + 5 * x[:, 4]
    return x, f + rng.normal(size=n)


def import_fitter(lib, moves=None):
    """Import `lib` and return ``fit(x, y, nskip, ndpost, x_test=None)``,
    which blocks until done (`moves`: the tree moves of this repo's bartz,
    None for its default)."""
    if lib == 'stochtree':
        from stochtree import BARTModel  # noqa: PLC0415

        def fit(x, y, nskip, ndpost, x_test=None):
            model = BARTModel()
            model.sample(
                X_train=x,
                y_train=y,
                X_test=x_test,
                num_gfr=0,
                num_burnin=nskip,
                num_mcmc=ndpost,
                general_params=dict(random_seed=FIT_SEED, keep_every=1, num_threads=-1),
                mean_forest_params=dict(
                    num_trees=200, alpha=0.95, beta=2.0, min_samples_leaf=5, sample_sigma2_leaf=False
                ),
            )
            return model

        return fit

    import bartz  # noqa: PLC0415
    import jax  # noqa: PLC0415

    # ours is `bartz.gbart`; bartz 0.13.0 has it as a class in `bartz.BART`
    gbart = bartz.gbart if lib == OURS else bartz.BART.gbart

    extra = {} if moves is None else {'moves': tuple(moves)}

    def fit(x, y, nskip, ndpost, x_test=None):
        kwargs = extra if x_test is None else {**extra, 'x_test': x_test}
        result = gbart(x, y, nskip=nskip, ndpost=ndpost, ntree=200, keepevery=1, printevery=None, seed=FIT_SEED, **kwargs)
        # ours declares its attributes in __slots__ (no __dict__)
        slots = getattr(type(result), '__slots__', ())
        attrs = vars(result) if hasattr(result, '__dict__') else {k: getattr(result, k, None) for k in slots}
        jax.block_until_ready(attrs)
        return result

    return fit


def probe():
    """Versions of Python and of what this interpreter can import."""
    from importlib import metadata  # noqa: PLC0415

    info = {'python': platform.python_version(), 'executable': sys.executable}
    for dist in ('jax', 'jaxlib', 'stochtree'):
        try:
            info[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    try:
        import bartz  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001
        info['bartz_error'] = repr(exc)
    else:
        info['bartz'] = getattr(bartz, '__version__', '?')
        info['bartz_file'] = bartz.__file__
        info['bartz_has_BART_gbart'] = hasattr(getattr(bartz, 'BART', None), 'gbart')
    return info


def worker(spec):
    """Run the fits in `spec` in order and return their wall times."""
    if spec.get('probe'):
        return probe()
    t0 = time.perf_counter()
    fit = import_fitter(spec['lib'], spec.get('moves'))
    import_s = time.perf_counter() - t0
    out = {'import_s': import_s, 'fit_s': []}
    if spec['lib'] != 'stochtree':
        out['bartz_file'] = sys.modules['bartz'].__file__
    for n, nskip, ndpost, *more in spec['fits']:
        columns, n_test = (*more, None, None)[:2]
        x, y = friedman1(n)
        # rows after the training rows, from the same stream
        x_test = friedman1(n + n_test)[0][n:] if n_test else None
        if columns:  # the first columns only
            x = x[:, :columns]
            x_test = None if x_test is None else x_test[:, :columns]
        t0 = time.perf_counter()
        fit(x, y, nskip, ndpost, x_test)
        out['fit_s'].append(time.perf_counter() - t0)
    return out


# ---------------------------------------------------------------- parent side


def in_repo(path):
    return os.path.abspath(path).startswith(REPO + os.sep)


def imports_tree(bartz_file, tree):
    """Whether `bartz_file` (a ``bartz.__file__``) is the package of source tree `tree`."""
    return os.path.dirname(os.path.abspath(bartz_file)) == os.path.join(os.path.abspath(tree), 'bartz')


def run_worker(python, spec, env_extra=None, *, ours=False, script=None, tree=None, timeout=TIMEOUT_S):
    """Run `worker(spec)` in a new process of `python`; return its result or {'error': ...}.

    This repo's bartz (`ours`) runs from the source tree `tree` (default
    this repository) with it on PYTHONPATH. Peers run isolated (``-I``: no
    PYTHONPATH, no script directory on ``sys.path``) in a temporary
    directory, so ``import bartz`` finds theirs.
    `script` (default this file) is the script run as ``script --worker
    SPEC``; it prints its result as the last JSON line of its output
    (``benchmarks/mixing.py`` uses this machinery with its own worker).
    `timeout`: seconds before the process is killed (an error result).
    """
    script = os.path.abspath(script or __file__)
    dropped = ('PYTHONPATH', 'JAX_COMPILATION_CACHE_DIR', 'BARTZ_COMPILATION_CACHE')
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(env_extra or {})
    with tempfile.TemporaryDirectory(prefix='bartz-peers-') as tmp:
        if ours:
            cmd, cwd = [python, script], tree or REPO
            env['PYTHONPATH'] = tree or REPO
        else:
            cmd, cwd = [python, '-I', script], tmp
        cmd += ['--worker', json.dumps(spec)]
        started = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return {'error': repr(exc)}
        process_s = time.perf_counter() - started
    # peers may print progress: the result is the last line that is JSON
    for line in reversed(proc.stdout.splitlines()):
        try:
            result = json.loads(line)
        except ValueError:
            continue
        if isinstance(result, dict):
            result.setdefault('process_s', process_s)
        return result
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    return {'error': f'exit status {proc.returncode}: ' + ' | '.join(tail)}


def plan(args):
    """Workload name -> (settings (n, nskip, ndpost), fits run in one process)."""
    base = (200, 10, 20) if args.quick else (1000, 100, 200)
    n0, nskip0, ndpost0 = base
    n_test = 100 if args.quick else 1000
    work = {
        'cold': (base, [base]),
        'cold, x_test': (base, [(*base, None, n_test)]),
        'second process': (base, [base]),
    }
    for n in args.sizes:
        if args.quick:
            settings = (n, 20, 50)
        else:
            settings = (n, 200, 500) if n < 100_000 else (n, 100, 200)
        work[f'warm n={n:,}'] = (settings, [settings] * (1 + args.repeats))
    # a cross-validation fold: another n, on the same length of the size ladder
    new = (n0 + (5 if args.quick else 13), nskip0, ndpost0)
    work['new n'] = (new, [base] * (1 + args.repeats) + [new])
    # a model variant: one predictor fewer
    work['new p'] = (base, [base] * (1 + args.repeats) + [(*base, P - 1)])
    return work


def run_workload(label, python, lib, name, fits, env, moves=None, tree=None, timeout=TIMEOUT_S):
    """One workload in a fresh process: its result, with ``seconds``
    (`moves`: the tree moves of this repo's bartz, None for its default;
    `tree`: the source tree of this repo's bartz, None for this one;
    `timeout`: seconds before the process is killed)."""
    print(f'{label}: {name} ...', file=sys.stderr, flush=True)
    spec = {'lib': lib, 'fits': fits}
    if lib == OURS and moves:
        spec['moves'] = list(moves)
    out = run_worker(python, spec, env, ours=lib == OURS, tree=tree, timeout=timeout)
    if 'bartz_file' in out:
        right = imports_tree(out['bartz_file'], tree or REPO) if lib == OURS else not in_repo(out['bartz_file'])
        if not right:
            out = {'error': f'wrong bartz imported: {out["bartz_file"]}'}
    if 'error' in out:
        print(f'  failed: {out["error"]}', file=sys.stderr, flush=True)
    elif name in ('new n', 'new p'):
        out['warm_s'] = min(out['fit_s'][1:-1])
        out['seconds'] = out['fit_s'][-1]
    elif name.startswith('warm'):
        out['seconds'] = min(out['fit_s'][1:])
    else:
        out['seconds'] = out['fit_s'][0]
    return out


def combine(outs, settings):
    """The result of a workload over rounds: the best time of each kind
    (``seconds``, ``warm_s``, ``import_s``), and the rounds' times in
    ``rounds``; the first failure if any round failed."""
    failed = [out for out in outs if 'error' in out]
    if failed:
        return {**failed[0], 'settings': settings}
    result = dict(outs[0])
    result['rounds'] = {}
    for key in ('seconds', 'warm_s', 'import_s', 'process_s'):
        if key in result:
            result['rounds'][key] = [out[key] for out in outs]
            result[key] = min(result['rounds'][key])
    result['settings'] = settings
    return result


def measure_all(implementations, args):
    """Run every workload for every implementation ``(label, python, lib)``
    or ``(label, python, lib, tree)`` (`tree`: the source tree of this
    repo's bartz, for ``--base-path``); return {label: {workload: result}}.

    The implementations take turns workload by workload (and round by
    round, ``--rounds``), so that a ratio compares runs minutes apart, not
    the two ends of an hour on a machine whose speed drifts."""
    work = plan(args)
    implementations = [(*impl, None)[:4] for impl in implementations]
    platform_env = {'JAX_PLATFORMS': args.platform} if args.platform else {}
    caches = []

    def fresh_cache(lib):
        caches.append(tempfile.mkdtemp(prefix='bartz-cache-'))
        return {'BARTZ_CACHE_DIR': caches[-1]} if lib == OURS else {}

    outs = {label: {name: [] for name in work} for label, *_ in implementations}
    for r in range(args.rounds):
        cold_cache = {label: fresh_cache(lib) for label, _, lib, _ in implementations}
        for name, (_, fits) in work.items():
            for label, python, lib, tree in implementations:
                tag = label if args.rounds == 1 else f'{label} (round {r + 1} of {args.rounds})'
                cache = cold_cache[label] if name in ('cold', 'second process') else fresh_cache(lib)
                env = {**platform_env, **cache}
                out = run_workload(tag, python, lib, name, fits, env, getattr(args, 'moves', None), tree)
                outs[label][name].append(out)
    for cache in caches:
        shutil.rmtree(cache, ignore_errors=True)
    return {label: {name: combine(outs[label][name], work[name][0]) for name in work} for label in outs}


def find_peers(pythons, kinds):
    """Probe each interpreter; return [(label, python, lib, probe info)] and the probes."""
    peers, probes = [], {}
    for python in pythons:
        info = run_worker(python, {'probe': True})
        probes[python] = info
        if 'error' in info:
            print(f'{python}: probe failed: {info["error"]}', file=sys.stderr)
            continue
        bartz_file = info.get('bartz_file', '')
        if 'bartz' in kinds and bartz_file:
            if in_repo(bartz_file):
                print(f'{python}: imports this repo\'s bartz ({bartz_file}), skipped', file=sys.stderr)
            elif info.get('bartz_has_BART_gbart'):
                peers.append((f'bartz {info["bartz"]}', python, 'bartz', info))
        if 'stochtree' in kinds and 'stochtree' in info:
            peers.append((f'stochtree {info["stochtree"]}', python, 'stochtree', info))
        if not any(p[1] == python for p in peers):
            print(f'{python}: no peer found ({", ".join(kinds)})', file=sys.stderr)
    labels = [p[0] for p in peers]
    peers = [(lbl if labels.count(lbl) == 1 else f'{lbl} ({py})', py, lib, i) for lbl, py, lib, i in peers]
    return peers, probes


def find_bases(trees):
    """The ``--base-path`` source trees as implementations ``(label, python,
    OURS, tree)``, run by this interpreter, and their probes."""
    bases, probes = [], {}
    for tree in trees:
        label = f'bartz at {tree}'
        info = run_worker(sys.executable, {'probe': True}, ours=True, tree=tree)
        if not imports_tree(info.get('bartz_file', ''), tree):
            sys.exit(f'--base-path {tree}: its workers import {info.get("bartz_file") or info}, not its bartz')
        bases.append((label, sys.executable, OURS, tree))
        probes[label] = info
    return bases, probes


def cpu_model():
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or '?'


def fmt_seconds(out, key='seconds'):
    return 'failed' if 'error' in out else f'{out[key]:.3g}'


def fmt_ratio(ours, peer, key='seconds'):
    if 'error' in ours or 'error' in peer:
        return '-'
    return f'{ours[key] / peer[key]:.2f}'


def round_ratios(ours, peer, key):
    """The ratio in each round, as text ('' if a run failed)."""
    if 'error' in ours or 'error' in peer:
        return ''
    pairs = zip(ours['rounds'][key], peer['rounds'][key])
    return 'rounds ' + ' / '.join(f'{a / b:.2f}' for a, b in pairs)


def table(results, args):
    """Header row and rows of strings: one row per workload."""
    labels = list(results)[1:]
    header = ['workload', 'n / nskip / ndpost', 'bartz (s)', 'bartz ms/iter']
    header += [f'{lbl} (s)' for lbl in labels] + [f'bartz/{lbl}' for lbl in labels] + ['note']
    ours = results[OURS_LABEL]

    def row(name, settings, key='seconds', res_key=None, note=''):
        res_key = res_key or name
        mine = ours[res_key]
        if settings is None:
            cells = [name, '-', fmt_seconds(mine, key), '']
        else:
            n, nskip, ndpost = settings
            per_iter = '' if 'error' in mine else f'{1000 * mine[key] / (nskip + ndpost):.3g}'
            cells = [name, f'{n:,} / {nskip} / {ndpost}', fmt_seconds(mine, key), per_iter]
        cells += [fmt_seconds(results[lbl][res_key], key) for lbl in labels]
        cells += [fmt_ratio(mine, results[lbl][res_key], key) for lbl in labels]
        if args.rounds > 1:
            per_round = [round_ratios(mine, results[lbl][res_key], key) for lbl in labels]
            note = '; '.join(filter(None, [note, *(f'{lbl}: {r}' if len(labels) > 1 else r for lbl, r in zip(labels, per_round) if r)]))
        return [*cells, note]

    work = plan(args)
    rows = [row('import (cold process)', None, key='import_s', res_key='cold')]
    rows.append(row('cold', work['cold'][0]))
    rows.append(row('cold: the whole process, start to exit', None, key='process_s', res_key='cold'))
    if 'cold, x_test' in ours:
        n_test = work['cold, x_test'][1][0][-1]
        rows.append(row(f'cold, with {n_test:,} x_test rows', work['cold'][0], res_key='cold, x_test'))
    rows.append(row('second process', work['second process'][0]))
    for name, (settings, _) in work.items():
        if name.startswith('warm'):
            rows.append(row(f'warm (best of {args.repeats})', settings, res_key=name))
    base = work['cold'][0]
    rows.append(row(f'new n: warm at n={base[0]:,}', base, key='warm_s', res_key='new n'))

    def times_warm(name):
        """The note of a first fit: its time over the warm fit's, per implementation."""
        return ', '.join(
            f'{lbl} {out["seconds"] / out["warm_s"]:.1f}x warm'
            for lbl, out in ((lbl, results[lbl][name]) for lbl in results)
            if 'error' not in out
        )

    new = work['new n'][0]
    rows.append(row(f'new n: first fit at n={new[0]:,}', new, res_key='new n', note=times_warm('new n')))
    rows.append(row(f'new p: first fit with {P - 1} of the {P} columns', base, res_key='new p', note=times_warm('new p')))
    return header, rows


def render(header, rows, markdown):
    numeric = [False, False] + [True] * (len(header) - 3) + [False]
    if markdown:
        lines = ['| ' + ' | '.join(header) + ' |']
        lines.append('|' + '|'.join('---:' if num else '---' for num in numeric) + '|')
        lines += ['| ' + ' | '.join(r) + ' |' for r in rows]
        return '\n'.join(lines)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells):
        return '  '.join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric)).rstrip()

    return '\n'.join([line(header), line(['-' * w for w in widths]), *map(line, rows)])


def describe(label, info):
    if 'error' in info:
        return f'{label}: probe failed'
    libs = f'jax {info.get("jax", "-")} / jaxlib {info.get("jaxlib", "-")}'
    if label == OURS_LABEL or label.startswith('bartz'):
        libs += f', bartz {info.get("bartz", "?")} ({os.path.dirname(info.get("bartz_file", "?"))})'
    if label.startswith('stochtree'):
        libs += f', stochtree {info["stochtree"]}'
    return f'{label}: Python {info["python"]} ({info["executable"]}), {libs}'


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument(
        '--peer-python', action='append', default=[], help='interpreter of a peer (repeatable, or comma separated)'
    )
    parser.add_argument('--peers', default=','.join(PEER_KINDS), help='peers to run when found (default: %(default)s)')
    parser.add_argument('--sizes', help='n of the warm rows (default 1000,10000,100000)')
    parser.add_argument('--repeats', type=int, help='timed warm fits per process (default 3, 2 with --quick)')
    parser.add_argument(
        '--rounds', type=int, default=1, help='times every workload runs, the implementations taking turns (default 1)'
    )
    parser.add_argument(
        '--moves',
        help="tree moves of this repo's bartz, comma separated (grow,prune: R's birth/death sampler, as bartz "
        '0.13.0; default: its default moves)',
    )
    parser.add_argument(
        '--base-path',
        action='append',
        default=[],
        help="a bartz source tree (e.g. a git worktree of the commit before a change) run as one more "
        'implementation, with this interpreter and PYTHONPATH set to it (repeatable)',
    )
    parser.add_argument('--quick', action='store_true', help='tiny settings, a smoke test')
    parser.add_argument('--platform', default='cpu', help="JAX_PLATFORMS of the workers ('' lets JAX choose)")
    parser.add_argument('--markdown', action='store_true', help='print the table as markdown')
    parser.add_argument('--out-json', help='save the results to this file')
    parser.add_argument('--worker', help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    if args.rounds < 1:
        parser.error(f'--rounds must be at least 1, got {args.rounds}')
    if args.moves is not None:
        args.moves = [m for m in args.moves.split(',') if m]
        unknown = sorted(set(args.moves) - set(MOVE_NAMES))
        if unknown or not {'grow', 'prune'} <= set(args.moves):
            parser.error(f'--moves must include grow and prune, among {",".join(MOVE_NAMES)}; got {",".join(args.moves)}')
    default_sizes = '200' if args.quick else '1000,10000,100000'
    args.sizes = [int(s) for s in (args.sizes or default_sizes).split(',')]
    if args.repeats is None:
        args.repeats = 2 if args.quick else 3
    kinds = [k for k in args.peers.split(',') if k]
    pythons = [p for item in args.peer_python for p in item.split(',') if p]
    args.base_path = [os.path.abspath(tree) for tree in args.base_path]
    for tree in args.base_path:
        if not os.path.isfile(os.path.join(tree, 'bartz', '__init__.py')):
            parser.error(f'--base-path must be a source tree with a bartz package, got {tree}')

    probes = {OURS_LABEL: run_worker(sys.executable, {'probe': True}, ours=True)}
    bases, base_probes = find_bases(args.base_path)
    probes.update(base_probes)
    implementations = [(OURS_LABEL, sys.executable, OURS), *bases]
    peers, peer_probes = find_peers(pythons, kinds)
    probes.update({label: info for label, _, _, info in peers})
    implementations += [(label, python, lib) for label, python, lib, _ in peers]
    results = measure_all(implementations, args)

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    machine = {
        'cpu': cpu_model(),
        'cores': os.cpu_count(),
        'cores_usable': usable,
        'platform': platform.platform(),
        'jax_platforms': args.platform,
    }
    print(
        f'Machine: {machine["cpu"]}, {machine["cores"]} cores ({usable} usable), {machine["platform"]}, '
        f'JAX_PLATFORMS={args.platform!r}'
    )
    for label, info in probes.items():
        print(describe(label, info))
    if args.moves:
        print(f'{OURS_LABEL}: moves={tuple(args.moves)}')
    print()
    header, rows = table(results, args)
    print(render(header, rows, args.markdown))
    print()
    print(f'warm: best of {args.repeats} fits after a first fit in the same process')
    if args.rounds > 1:
        print(f'times: the best of {args.rounds} rounds (implementations taking turns); note: the ratio in each round')
    print('ratios: bartz / peer (< 1: bartz faster)')
    for tree in args.base_path:
        print(f'bartz/bartz at {tree}: this tree over that one (< 1: this tree faster)')
    if args.out_json:
        os.makedirs(os.path.dirname(os.path.abspath(args.out_json)), exist_ok=True)
        with open(args.out_json, 'w') as f:
            json.dump(
                {'machine': machine, 'args': vars(args), 'probes': {**peer_probes, **probes}, 'results': results},
                f,
                indent=1,
            )


if __name__ == '__main__':
    main()
