"""Speed and memory benchmark of bartz: MCMC step, gbart end to end, prediction.

Run from the repository root:

    .venv/bin/python benchmarks/speed.py                 # full benchmark (minutes)
    .venv/bin/python benchmarks/speed.py --quick         # smoke test (< 2 min)
    .venv/bin/python benchmarks/speed.py --markdown --out-json out/bench.json

Sections (select with ``--sections``):

mcmc
    For each n: a jitted function running K iterations of
    `bartz.mcmcstep.step` in a `lax.fori_loop` (key of iteration i:
    ``fold_in(key, i)`` by `bartz.mcmcstep.fold_in`, as `bartz.mcmcloop.run_mcmc`) on Friedman #1 data,
    with the state built as `bartz.gbart` builds it (default priors). We
    report the compile time (``jit(...).lower(...).compile()``), then run a
    burn-in (which is also the warm-up call), choose K so that one repeat lasts
    about ``--repeat-seconds`` and report the best (and median) of
    ``--repeats`` repeats, in seconds per iteration.
gbart
    `bartz.gbart` end to end (n = ``--gbart-n``, nskip/ndpost = 100/100),
    called twice: the first call compiles, the second reuses the compiled
    chunk runner. Shows the front-end overhead (wall time minus the MCMC
    time in ``fit.run_info.elapsed``).
predict (large test sets)
    Then ``fit.predict(x_test, kind=...)`` (``--large-kinds``, default mean and
    quantiles 5/50/95%) on test sets of ``--large-cases`` ROWSxDRAWS
    (default 1M and 10M rows, 1,000 draws) written to a float32 memmap on
    disk first, so that the input itself does not count in the RSS. One
    call per case (they are long): it reports wall seconds, the compile
    seconds inside it (`jax.monitoring`), ns per tree-row-draw excluding
    them, CPU ns and the process's peak RSS. The
    default cases take tens of minutes on a small CPU; ``--large-cases
    none`` skips them.
predict
    ``fit.predict(x_test)`` (draws) and ``fit.predict(x_test, kind='mean')``
    from a trace of a fit on Friedman #1 (n = 1000, 500 draws), at 10,000
    test points with 500 draws and at 100,000 test points with the first 200
    draws. First call (compilation included) and second call; the seconds
    JAX spent compiling during each call are measured separately with
    `jax.monitoring` (they also show whether a call recompiled).

After each section the peak resident memory of the process
(``getrusage(RUSAGE_SELF).ru_maxrss``) is printed; it is a running maximum
over the whole process, so run one section at a time for per-section peaks.
"""

import argparse
import copy
import json
import math
import os
import platform
import resource
import statistics
import sys
import time

# compile times are measured, not loaded from bartz's persistent cache
# (the fresh-process gbart rows of benchmarks/peers.py set up their own caches)
os.environ.setdefault('BARTZ_COMPILATION_CACHE', '0')

import jax  # noqa: E402
import numpy as np
from jax import lax, random
from jax import numpy as jnp
from scipy import stats

import bartz
from bartz import grove, mcmcstep, prepcovars
from bartz._compile import options as xla_options
from peers import cpu_model  # benchmarks/ is the script directory, on sys.path

SECTIONS = ('mcmc', 'gbart', 'predict')


# ---------------------------------------------------------------- helpers


def friedman1(n, p, rng, noise_sd=1.0):
    """Friedman #1: 10 sin(pi x1 x2) + 20 (x3 - 1/2)^2 + 10 x4 + 5 x5 + noise."""
    x = rng.uniform(size=(n, p))
    f = 10 * np.sin(np.pi * x[:, 0] * x[:, 1]) + 20 * (x[:, 2] - 0.5) ** 2 + 10 * x[:, 3] + 5 * x[:, 4]
    return x, f + noise_sd * rng.normal(size=n)


def peak_rss_mib():
    """Peak resident memory of this process so far, MiB."""
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if sys.platform == 'darwin':  # bytes there, KiB on Linux
        kib /= 1024
    return kib / 1024


def machine_info():
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count()
    import jaxlib  # noqa: PLC0415

    return {
        'platform': platform.platform(),
        'python': platform.python_version(),
        'cpu': cpu_model(),
        'cores': os.cpu_count(),
        'cores_usable': affinity,
        'jax': jax.__version__,
        'jaxlib': jaxlib.__version__,
        'devices': str(jax.devices()),
        'bartz': getattr(bartz, '__version__', '?'),
        'XLA_FLAGS': os.environ.get('XLA_FLAGS', ''),
    }


def build_state(x, y, ntree):
    """The initial sampler state, built as `bartz.gbart` does with default
    arguments (numcut=100, rm_const, standardised y, OLS sigest, sigdf=3,
    sigquant=0.9, k=2, base=0.95, power=2, maxdepth=6, min 5 points/leaf)."""
    splits = prepcovars.compute_splits(x, numcut=100)
    kept = np.asarray(prepcovars.usable_predictors(splits.max_split))
    if not kept.all():
        splits = prepcovars.drop_predictors(splits, kept)
    x = x[:, kept]
    X = prepcovars.bin_predictors_np(x, splits.splits)
    n = len(y)
    offset = y.mean()
    scale = float(np.std(y))
    design = np.column_stack([np.ones(n), x])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    sigest = float(np.sqrt(np.sum((y - design @ coef) ** 2) / max(n - design.shape[1], 1)))
    sigdf, sigquant, k = 3.0, 0.9, 2.0
    lambda_ = sigest**2 * stats.chi2.ppf(1 - sigquant, sigdf) / sigdf
    tau = (y.max() - y.min()) / 2 / (k * math.sqrt(ntree)) / scale
    return mcmcstep.init(
        X=jnp.asarray(X),
        max_split=splits.max_split,
        y=((y - offset) / scale).astype(np.float32),
        num_trees=ntree,
        max_depth=6,
        leaf_prior_var=tau**2,
        sigma2_alpha=sigdf / 2,
        sigma2_beta=sigdf * lambda_ / 2 / scale**2,
        sigma2_init=(sigest / scale) ** 2,
        base=0.95,
        power=2.0,
        min_points_per_leaf=5,
    )


def _run_k(key, state, start, k):
    """Run `k` (dynamic) MCMC iterations from iteration number `start`."""

    def body(i, carry):
        state, acc = carry
        state, info = mcmcstep.step(mcmcstep.fold_in(key, i), state)
        return state, acc + info.grow_accepted + info.prune_accepted

    state, acc = lax.fori_loop(start, start + k, body, (state, jnp.int32(0)))
    return state, acc


_run_k_jit = jax.jit(_run_k, donate_argnums=(1,))


class CompileClock:
    """Seconds JAX spends compiling (tracing, lowering, XLA), from its
    monitoring events; `CompileClock.total()` is a running sum."""

    _total = 0.0
    _count = 0
    _installed = False

    @classmethod
    def install(cls):
        if cls._installed:
            return

        def listener(event, duration, **_):
            if event.startswith('/jax/core/compile/'):
                cls._total += duration
                if event.endswith('backend_compile_duration'):
                    cls._count += 1

        jax.monitoring.register_event_duration_secs_listener(listener)
        cls._installed = True

    @classmethod
    def total(cls):
        return cls._total, cls._count


def timed(fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    jax.block_until_ready(out)
    return out, time.perf_counter() - t0


# ---------------------------------------------------------------- sections


def bench_mcmc(n, cfg, rng):
    x, y = friedman1(n, cfg.p, rng)
    state = build_state(x, y, cfg.ntree)
    jax.block_until_ready(state)
    key = random.key(0)
    i32 = jnp.int32

    t0 = time.perf_counter()
    # with the XLA options gbart's chunk uses at this n
    options = dict(xla_options.chunk_options(state.resid.shape[0]))
    compiled = _run_k_jit.lower(key, state, i32(0), i32(1)).compile(compiler_options=options or None)
    compile_time = time.perf_counter() - t0

    # burn-in, which doubles as the warm-up call
    it = 0
    (state, _), burn_time = timed(compiled, key, state, i32(it), i32(cfg.burn))
    it += cfg.burn
    est = burn_time / max(cfg.burn, 1)
    k = max(1, min(100_000, round(cfg.repeat_seconds / max(est, 1e-6))))

    times = []
    for _ in range(cfg.repeats):
        (state, _), dt = timed(compiled, key, state, i32(it), i32(k))
        it += k
        times.append(dt / k)
    leaves = float(jnp.mean(grove.forest_num_leaves(state.forest.split_tree)))
    return {
        'n': n,
        'p': cfg.p,
        'ntree': cfg.ntree,
        'compile_s': compile_time,
        'burn_iters': cfg.burn,
        'iters_per_repeat': k,
        'repeats': cfg.repeats,
        'best_s_per_iter': min(times),
        'median_s_per_iter': statistics.median(times),
        'mean_leaves_per_tree': leaves,
        'peak_rss_mib': peak_rss_mib(),
    }


def bench_gbart(cfg, rng):
    x, y = friedman1(cfg.gbart_n, cfg.p, rng)
    rows = []
    for call in (1, 2):
        c0, _ = CompileClock.total()
        t0 = time.perf_counter()
        fit = bartz.gbart(x, y, ntree=cfg.ntree, nskip=cfg.gbart_nskip, ndpost=cfg.gbart_ndpost, printevery=None)
        wall = time.perf_counter() - t0
        c1, _ = CompileClock.total()
        info = fit.run_info
        iters = cfg.gbart_nskip + cfg.gbart_ndpost
        rows.append({
            'call': call,
            'n': cfg.gbart_n,
            'ntree': cfg.ntree,
            'nskip': cfg.gbart_nskip,
            'ndpost': cfg.gbart_ndpost,
            'wall_s': wall,
            'mcmc_elapsed_s': info.elapsed,
            'mcmc_compile_s': info.compile_time,
            'jax_compile_s': c1 - c0,
            's_per_iter_excl_compile': (info.elapsed - info.compile_time) / iters,
            'outside_mcmc_s': wall - info.elapsed,
            'peak_rss_mib': peak_rss_mib(),
        })
    return rows


def _first_draws(fit, ndraws):
    """A copy of `fit` whose trace keeps only the first `ndraws` draws."""
    trace = getattr(fit, '_trace', None)
    if trace is None:
        return None
    small = copy.copy(fit)
    small._trace = jax.tree.map(lambda a: a[:ndraws], trace)  # noqa: SLF001
    small.ndpost = ndraws
    return small


def bench_predict(cfg, rng):
    x, y = friedman1(cfg.pred_fit_n, cfg.p, rng)
    ndpost = max(d for d, _ in cfg.pred_cases)
    t0 = time.perf_counter()
    fit = bartz.gbart(x, y, ntree=cfg.ntree, nskip=100, ndpost=ndpost, printevery=None)
    fit_time = time.perf_counter() - t0
    rows = []
    for ndraws, m in cfg.pred_cases:
        if ndraws == ndpost:
            f = fit
        else:
            f = _first_draws(fit, ndraws)
            if f is None:  # no private trace: fit again with fewer draws
                f = bartz.gbart(x, y, ntree=cfg.ntree, nskip=100, ndpost=ndraws, printevery=None)
        x_test, _ = friedman1(m, cfg.p, rng)
        rows.extend(_predict_calls(f, x_test, kind, ndraws, m, cfg.ntree) for kind in ('draws', 'mean'))
    # new fits of the same settings, as in a notebook that fits again: their
    # first call should find the programs compiled for the first fit
    m = max(m for d, m in cfg.pred_cases if d == ndpost)
    for seed in (1, 2, 3):
        x, y = friedman1(cfg.pred_fit_n, cfg.p, rng)
        refit = bartz.gbart(x, y, ntree=cfg.ntree, nskip=100, ndpost=ndpost, printevery=None, seed=seed)
        x_test, _ = friedman1(m, cfg.p, rng)
        rows.extend(_predict_calls(refit, x_test, kind, ndpost, m, cfg.ntree, new_fit=seed) for kind in ('draws', 'mean'))
    return fit_time, rows


def _predict_calls(f, x_test, kind, ndraws, m, ntree, new_fit=0):
    """Two calls of ``f.predict(x_test, kind=kind)``: times and compilations
    (`new_fit`: 0 for the first fit, else the number of the new fit)."""
    c0, k0 = CompileClock.total()
    out, first = timed(f.predict, x_test, kind=kind)
    c1, k1 = CompileClock.total()
    expected = (ndraws, m) if kind == 'draws' else (m,)
    assert out.shape == expected, (out.shape, expected)
    del out
    out, second = timed(f.predict, x_test, kind=kind)
    c2, k2 = CompileClock.total()
    del out
    return {
        'ndraws': ndraws,
        'm': m,
        'ntree': ntree,
        'kind': kind,
        'new_fit': new_fit,
        'first_call_s': first,
        'second_call_s': second,
        'compile_s_est': max(0.0, first - second),
        'jax_compile_first_s': c1 - c0,
        'jax_compile_second_s': c2 - c1,
        'xla_compiles_first': k1 - k0,
        'xla_compiles_second': k2 - k1,
        'peak_rss_mib': peak_rss_mib(),
    }


def _memmap_friedman_x(path, rows, p, seed, block=1_000_000):
    """A (rows, p) float32 .npy file of uniform predictors, written a block at
    a time through a plain file (writing through a memmap would leave the
    written pages in this process's RSS), then opened as a memmap."""
    rng = np.random.default_rng(seed)
    with open(path, 'wb') as fh:
        header = {'descr': np.lib.format.dtype_to_descr(np.dtype(np.float32)), 'fortran_order': False,
                  'shape': (rows, p)}
        np.lib.format.write_array_header_1_0(fh, header)
        for start in range(0, rows, block):
            stop = min(rows, start + block)
            fh.write(rng.uniform(size=(stop - start, p)).astype(np.float32).tobytes())
    return np.load(path, mmap_mode='r')


def bench_predict_large(cfg, rng):
    """Prediction on test sets read from a memmap (float32 on disk): seconds,
    ns per tree-row-draw and the process's peak RSS."""
    import tempfile  # noqa: PLC0415

    x, y = friedman1(cfg.pred_fit_n, cfg.p, rng)
    ndpost = max(d for _, d in cfg.large_cases)
    t0 = time.perf_counter()
    fit = bartz.gbart(x, y, ntree=cfg.ntree, nskip=100, ndpost=ndpost, printevery=None)
    fit_time = time.perf_counter() - t0
    rows_out = []
    with tempfile.TemporaryDirectory(dir=cfg.tmpdir) as tmp:
        for m, ndraws in cfg.large_cases:
            f = fit if ndraws == ndpost else _first_draws(fit, ndraws)
            path = os.path.join(tmp, f'x_{m}.npy')
            x_test = _memmap_friedman_x(path, m, cfg.p, seed=m)
            for kind in cfg.large_kinds:
                q = (0.05, 0.5, 0.95) if kind == 'quantiles' else None
                # one call: the compile time inside it (measured) is subtracted
                c0, _ = CompileClock.total()
                cpu0 = time.process_time()
                out, wall = timed(f.predict, x_test, kind=kind, q=q)
                cpu = time.process_time() - cpu0
                c1, _ = CompileClock.total()
                assert out.shape == ((m,) if q is None else (len(q), m))
                del out
                run_s = wall - (c1 - c0)
                work = m * cfg.ntree * ndraws
                rows_out.append({
                    'm': m,
                    'ndraws': ndraws,
                    'ntree': cfg.ntree,
                    'kind': kind,
                    'wall_s': wall,
                    'compile_s': c1 - c0,
                    'cpu_s': cpu,
                    'ns_per_tree_row_draw': run_s / work * 1e9,
                    'cpu_ns_per_tree_row_draw': cpu / work * 1e9,
                    'peak_rss_mib': peak_rss_mib(),
                })
                r = rows_out[-1]
                print(
                    f"  predict m={m} draws={ndraws} {kind}: {wall:.1f} s, "
                    f"{r['ns_per_tree_row_draw']:.2f} ns/tree-row-draw, peak RSS {r['peak_rss_mib']:.0f} MiB",
                    file=sys.stderr,
                    flush=True,
                )
            del x_test
            os.remove(path)
    return fit_time, rows_out


# ---------------------------------------------------------------- output


def table(headers, rows, markdown):
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    lines = []
    if markdown:
        lines.append('| ' + ' | '.join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + ' |')
        lines.append('|' + '|'.join('-' * (w + 1) + ':' for w in widths) + '|')
        lines += ['| ' + ' | '.join(c.rjust(w) for c, w in zip(r, widths, strict=True)) + ' |' for r in cells]
    else:
        lines.append('  '.join(h.rjust(w) for h, w in zip(headers, widths, strict=True)))
        lines.append('  '.join('-' * w for w in widths))
        lines += ['  '.join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return '\n'.join(lines)


def ms(s):
    return f'{s * 1e3:.2f}'


def sec(s):
    return f'{s:.2f}'


def mib(v):
    return f'{v:.0f}'


def emit(title, text, markdown):
    print(f'\n### {title}\n' if markdown else f'\n== {title}')
    print(text, flush=True)


# ---------------------------------------------------------------- main


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--sizes', default='1000,10000,100000', help='comma-separated n for the MCMC section')
    ap.add_argument('--ntree', type=int, default=200)
    ap.add_argument('--p', type=int, default=10)
    ap.add_argument('--quick', action='store_true', help='smoke test: tiny sizes (overrides --sizes, --burn, --repeats, --gbart-n, --predict-cases ...)')
    ap.add_argument('--sections', default=','.join(SECTIONS), help=f'comma-separated subset of {SECTIONS}')
    ap.add_argument('--burn', type=int, default=50, help='MCMC iterations before timing (warm-up)')
    ap.add_argument('--repeats', type=int, default=3)
    ap.add_argument('--repeat-seconds', type=float, default=1.5, help='target duration of one timed repeat')
    ap.add_argument('--gbart-n', type=int, default=10_000)
    ap.add_argument(
        '--predict-cases', default=None, help='comma-separated DRAWSxPOINTS, default 500x10000,200x100000'
    )
    ap.add_argument(
        '--large-cases',
        default='1000000x1000,10000000x1000',
        help="predict: large cases, comma-separated ROWSxDRAWS (test rows read from a float32 memmap), or 'none'",
    )
    ap.add_argument('--large-kinds', default='mean,quantiles', help="predict: kinds of the large cases, e.g. 'mean,quantiles'")
    ap.add_argument('--tmpdir', default=None, help='predict: where to write the memmapped large test sets')
    ap.add_argument('--markdown', action='store_true', help='print tables as markdown')
    ap.add_argument('--out-json', default=None, help='also write the results to this JSON file')
    args = ap.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(',') if s.strip()]
    args.sections = [s.strip() for s in args.sections.split(',') if s.strip()]
    bad = [s for s in args.sections if s not in SECTIONS]
    if bad:
        ap.error(f'unknown sections {bad}; choose among {SECTIONS}')
    if args.p < 5:
        ap.error(f'--p must be at least 5 (Friedman #1), got {args.p}')
    args.gbart_nskip = args.gbart_ndpost = 100
    args.pred_fit_n = 1000
    args.pred_cases = [(500, 10_000), (200, 100_000)]
    if args.quick:
        args.sizes = [200, 1000]
        args.burn = 5
        args.repeats = 2
        args.repeat_seconds = 0.2
        args.gbart_n = 1000
        args.gbart_nskip = args.gbart_ndpost = 10
        args.pred_fit_n = 300
        args.pred_cases = [(50, 1000), (20, 5000)]
    try:
        cases = '' if args.large_cases.lower() == 'none' else args.large_cases
        args.large_cases = [tuple(int(v) for v in c.lower().split('x')) for c in cases.split(',') if c.strip()]
        assert all(len(c) == 2 and min(c) > 0 for c in args.large_cases)
    except (ValueError, AssertionError):
        ap.error(f'--large-cases must look like 1000000x1000,10000000x1000, got {args.large_cases!r}')
    if args.quick:
        args.large_cases = [(20_000, 50), (100_000, 20)]
    args.large_kinds = [k.strip() for k in args.large_kinds.split(',') if k.strip()]
    if args.predict_cases:
        try:
            args.pred_cases = [tuple(int(v) for v in c.lower().split('x')) for c in args.predict_cases.split(',')]
            assert all(len(c) == 2 and min(c) > 0 for c in args.pred_cases)
        except (ValueError, AssertionError):
            ap.error(f'--predict-cases must look like 500x10000,200x100000, got {args.predict_cases!r}')
    return args


def main(argv=None):
    cfg = parse_args(argv)
    CompileClock.install()
    md = cfg.markdown
    results = {'machine': machine_info(), 'quick': cfg.quick}
    emit('machine', '\n'.join(f'{k:>12}: {v}' for k, v in results['machine'].items()), md)
    rng = np.random.default_rng(20240101)
    t_start = time.perf_counter()

    if 'mcmc' in cfg.sections:
        rows = []
        for n in cfg.sizes:
            rows.append(bench_mcmc(n, cfg, rng))
            print(f'  mcmc n={n}: {ms(rows[-1]["best_s_per_iter"])} ms/it', file=sys.stderr, flush=True)
        results['mcmc'] = rows
        emit(
            f'MCMC (Friedman #1, p={cfg.p}, {cfg.ntree} trees, default priors; '
            f'best of {cfg.repeats} after {cfg.burn} warm-up iterations)',
            table(
                ['n', 'compile (s)', 'ms/iter (best)', 'ms/iter (median)', 'iters/repeat', 'leaves/tree', 'peak RSS (MiB)'],
                [
                    [r['n'], sec(r['compile_s']), ms(r['best_s_per_iter']), ms(r['median_s_per_iter']),
                     r['iters_per_repeat'], f'{r["mean_leaves_per_tree"]:.2f}', mib(r['peak_rss_mib'])]
                    for r in rows
                ],
                md,
            ),
            md,
        )

    if 'gbart' in cfg.sections:
        rows = bench_gbart(cfg, rng)
        results['gbart'] = rows
        emit(
            f'gbart end to end (n={cfg.gbart_n}, p={cfg.p}, {cfg.ntree} trees, '
            f'nskip={cfg.gbart_nskip}, ndpost={cfg.gbart_ndpost})',
            table(
                ['call', 'wall (s)', 'MCMC (s)', 'MCMC compile est. (s)', 'JAX compile (s)', 'ms/iter excl. compile',
                 'outside MCMC (s)', 'peak RSS (MiB)'],
                [
                    [r['call'], sec(r['wall_s']), sec(r['mcmc_elapsed_s']), sec(r['mcmc_compile_s']), sec(r['jax_compile_s']),
                     ms(r['s_per_iter_excl_compile']), sec(r['outside_mcmc_s']), mib(r['peak_rss_mib'])]
                    for r in rows
                ],
                md,
            ),
            md,
        )
        # what users wait for, each in fresh processes (benchmarks/peers.py without a peer)
        import peers  # noqa: PLC0415

        latency_args = argparse.Namespace(
            quick=cfg.quick, sizes=[200] if cfg.quick else cfg.sizes, repeats=cfg.repeats, platform=None, rounds=1
        )
        latency = peers.measure_all([(peers.OURS_LABEL, sys.executable, peers.OURS)], latency_args)
        results['gbart_latency'] = latency[peers.OURS_LABEL]
        emit(
            'gbart end to end in fresh processes: cold (empty compilation cache), second process, warm, new n, new p',
            peers.render(*peers.table(latency, latency_args), md),
            md,
        )

    if 'predict' in cfg.sections:
        fit_time, rows = bench_predict(cfg, rng)
        results['predict'] = {'fit_n': cfg.pred_fit_n, 'fit_s': fit_time, 'rows': rows}
        emit(
            f'prediction with fit.predict ({cfg.ntree} trees; trace from a fit on n={cfg.pred_fit_n}, '
            f'took {fit_time:.1f} s)',
            table(
                ['draws', 'test points', 'kind', '1st call (s)', '2nd call (s)', '1st - 2nd (s)',
                 'JAX compile 1st/2nd (s)', 'peak RSS (MiB)'],
                [
                    [r['ndraws'], r['m'], r['kind'] + (f", new fit {r['new_fit']}" if r['new_fit'] else ''), sec(r['first_call_s']), sec(r['second_call_s']),
                     sec(r['compile_s_est']), f"{sec(r['jax_compile_first_s'])} / {sec(r['jax_compile_second_s'])}",
                     mib(r['peak_rss_mib'])]
                    for r in rows
                ],
                md,
            ),
            md,
        )

    if 'predict' in cfg.sections and cfg.large_cases:
        fit_time, rows = bench_predict_large(cfg, rng)
        results['predict_large'] = {'fit_n': cfg.pred_fit_n, 'fit_s': fit_time, 'rows': rows}
        emit(
            f'prediction on large test sets read from a float32 memmap ({cfg.p} predictors, {cfg.ntree} trees; '
            f'fit on n={cfg.pred_fit_n}, took {fit_time:.1f} s); compile time excluded from ns/tree-row-draw',
            table(
                ['test rows', 'draws', 'kind', 'wall (s)', 'of which compile (s)', 'ns/tree-row-draw',
                 'CPU ns/tree-row-draw (compile incl.)', 'peak RSS (MiB)'],
                [
                    [r['m'], r['ndraws'], r['kind'], sec(r['wall_s']), sec(r['compile_s']),
                     f"{r['ns_per_tree_row_draw']:.2f}", f"{r['cpu_ns_per_tree_row_draw']:.2f}",
                     mib(r['peak_rss_mib'])]
                    for r in rows
                ],
                md,
            ),
            md,
        )

    results['total_s'] = time.perf_counter() - t_start
    print(f'\ntotal {results["total_s"]:.1f} s, peak RSS {peak_rss_mib():.0f} MiB')
    if cfg.out_json:
        os.makedirs(os.path.dirname(os.path.abspath(cfg.out_json)), exist_ok=True)
        with open(cfg.out_json, 'w') as f:
            json.dump(results, f, indent=2)
        print(f'wrote {cfg.out_json}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
