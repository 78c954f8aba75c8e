"""Speed of several chains and of data sharding, on virtual CPU devices.

Run from the repository root:

    .venv/bin/python benchmarks/chains.py            # full benchmark (about 5-10 min on 2 cores)
    .venv/bin/python benchmarks/chains.py --quick    # smoke test, tiny sizes (about 1-2 min)
    .venv/bin/python benchmarks/chains.py --markdown --sections data

The script gives JAX 8 virtual CPU devices (``XLA_FLAGS``, set before jax is
imported). Virtual devices share the host's cores, so spreading work over
them shows the overhead of sharding and the memory per device, not the
speed-up of real devices: expect at best a speed-up of about the number of
physical cores. On a machine with several GPUs, run the same script without
the flag (``--no-virtual-devices``) to measure the real thing.

Sections (select with ``--sections``):

chains
    1, 2, 4, 8 chains (Friedman #1, n = ``--n``, p = 10, ``--ntree`` trees):
    all on one device with ``vmap``, and spread one chain per device over a
    ``('chains', 'data')`` mesh of shape (chains, 1). Each row: compile time
    of a jitted `lax.fori_loop` of the step (`bartz.run.steps.make_step`,
    keys ``fold_in(key, i)`` as `bartz.mcmcloop.run_mcmc`), then
    ``--warmup`` iterations (which also let the trees grow), then the best and
    median of ``--repeats`` timed repeats of K iterations, K chosen so that a
    repeat lasts about ``--repeat-seconds``; seconds per iteration (all chains)
    and per chain-iteration.
data
    One chain at n = ``--big-n`` (default 1,000,000), p = 10, ``--big-ntree``
    (default 50) trees, on 1 device (no mesh) and with the data points split
    over 2 devices (mesh (1, 2)) (``--data-devices``): after compilation
    and ``--big-warmup`` iterations, the time per iteration as above; and
    the memory per device of the state (all of it, and its data-sized
    arrays: binned X, leaf indices, residuals, y) and of the compiled
    step's temporaries (``memory_analysis()``).

In both sections the error sd of chain 0 after the warm-up is printed: the
draws do not depend on the mesh, so it must agree between rows with the same
number of chains (up to float rounding).
"""

import os
import sys

_FLAG = '--xla_force_host_platform_device_count=8'
if '--no-virtual-devices' not in sys.argv and _FLAG not in os.environ.get('XLA_FLAGS', ''):
    os.environ['XLA_FLAGS'] = f'{os.environ.get("XLA_FLAGS", "")} {_FLAG}'.strip()

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax, random  # noqa: E402
from jax import numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec  # noqa: E402

from bartz import grove, mcmcloop, mcmcstep, sharding  # noqa: E402
# the data and the gbart-like initial state are speed.py's, in the same folder
from speed import build_state, friedman1, peak_rss_mib  # noqa: E402

SECTIONS = ('chains', 'data')
MIB = 2**20


# ---------------------------------------------------------------- helpers


def place(state, mesh):
    """Put a multi-chain state on `mesh` as `run_mcmc` does (no-op without mesh)."""
    if mesh is None:
        return state
    specs = mcmcloop.state_specs(state)
    return jax.tree.map(
        lambda s, x: jax.device_put(x, NamedSharding(mesh, s)),
        specs,
        state,
        is_leaf=lambda s: isinstance(s, PartitionSpec),
    )


def state_bytes_per_device(state):
    """(data-sized, all) bytes of the state held by the first device."""
    specs = mcmcloop.state_specs(state)
    data = total = 0
    for x, spec in zip(jax.tree.leaves(state), jax.tree.leaves(specs), strict=True):
        b = x.addressable_shards[0].data.nbytes
        total += b
        data += b if 'data' in spec else 0
    return data, total


def make_runner(num_chains, mesh):
    """Jitted: run `k` (dynamic) iterations of the (sharded) step from iteration `start`."""
    step = mcmcloop.make_step(num_chains, mesh)

    def run(key, state, start, k):
        return lax.fori_loop(start, start + k, lambda i, s: step(random.fold_in(key, i), s)[0], state)

    return jax.jit(run, donate_argnums=(1,))


def measure(state, num_chains, mesh, cfg, warmup):
    """Compile, run `warmup` iterations, time; returns a dict of figures."""
    # a private copy: the runner donates its state, and the shared fields
    # (X, y, ...) of a state from `init_chains` are the single-chain state's
    state = place(jax.tree.map(lambda x: jnp.array(x, copy=True), state), mesh)
    jax.block_until_ready(state)
    data_bytes, all_bytes = state_bytes_per_device(state)
    runner = make_runner(num_chains, mesh)
    key = random.key(0)
    i32 = jnp.int32
    t0 = time.perf_counter()
    compiled = runner.lower(key, state, i32(0), i32(1)).compile()
    compile_s = time.perf_counter() - t0
    memory = compiled.memory_analysis()

    it = 0
    t0 = time.perf_counter()
    state = jax.block_until_ready(compiled(key, state, i32(it), i32(warmup)))
    warm_s = (time.perf_counter() - t0) / max(warmup, 1)
    it += warmup
    sigma0 = float(np.sqrt(np.asarray(state.sigma2)[0]))
    k = max(1, min(100_000, round(cfg.repeat_seconds / max(warm_s, 1e-6))))
    times = []
    for _ in range(cfg.repeats):
        t0 = time.perf_counter()
        state = jax.block_until_ready(compiled(key, state, i32(it), i32(k)))
        times.append((time.perf_counter() - t0) / k)
        it += k
    leaves = float(jnp.mean(grove.forest_num_leaves(state.forest.split_tree)))
    return {
        'compile_s': compile_s,
        'iters_per_repeat': k,
        'best_s_per_iter': min(times),
        'median_s_per_iter': statistics.median(times),
        'sigma_after_warmup': sigma0,
        'mean_leaves_per_tree': leaves,
        'state_data_mib_per_device': data_bytes / MIB,
        'state_mib_per_device': all_bytes / MIB,
        'temp_mib_per_device': memory.temp_size_in_bytes / MIB if memory is not None else float('nan'),
        'peak_rss_mib': peak_rss_mib(),
    }


# ---------------------------------------------------------------- sections


def bench_chains(cfg):
    rng = np.random.default_rng(0)
    x, y = friedman1(cfg.n, cfg.p, rng)
    one, scale = build_state(x, y, cfg.ntree), float(np.std(y))
    rows = []
    for c in cfg.chains:
        placements = [('one device (vmap)', None)]
        if 1 < c <= jax.device_count():
            placements.append((f'{c} devices', sharding.make_mesh(c, 1)))
        for name, mesh in placements:
            r = measure(mcmcstep.init_chains(one, c), c, mesh, cfg, cfg.warmup)
            r.update(chains=c, placement=name, n=cfg.n, ntree=cfg.ntree)
            r['sigma_after_warmup'] *= scale
            rows.append(r)
            print_progress(r)
    return rows


def bench_data(cfg):
    rng = np.random.default_rng(1)
    x, y = friedman1(cfg.big_n, cfg.p, rng)
    one, scale = build_state(x, y, cfg.big_ntree), float(np.std(y))
    del x
    rows = []
    for k in cfg.data_devices:
        if k > jax.device_count():
            print(f'skipping {k} data devices: only {jax.device_count()} devices', file=sys.stderr)
            continue
        if cfg.big_n % k:  # gbart would pad; here keep the shapes simple
            print(f'skipping {k} data devices: --big-n={cfg.big_n} is not a multiple', file=sys.stderr)
            continue
        mesh = None if k == 1 else sharding.make_mesh(1, k)
        r = measure(mcmcstep.init_chains(one, 1), 1, mesh, cfg, cfg.big_warmup)
        r.update(data_devices=k, n=cfg.big_n, ntree=cfg.big_ntree)
        r['sigma_after_warmup'] *= scale
        rows.append(r)
        print_progress(r)
    return rows


# ---------------------------------------------------------------- output


def print_progress(r):
    print(f'  ... done: {r["best_s_per_iter"] * 1e3:.2f} ms/iter, compile {r["compile_s"]:.1f}s', file=sys.stderr)


def table(headers, rows, markdown):
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    if markdown:
        lines = ['| ' + ' | '.join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + ' |']
        lines.append('|' + '|'.join('-' * (w + 1) + ':' for w in widths) + '|')
        lines += ['| ' + ' | '.join(c.rjust(w) for c, w in zip(r, widths, strict=True)) + ' |' for r in cells]
    else:
        lines = ['  '.join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
        lines += ['  '.join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return '\n'.join(lines)


def chains_table(rows, markdown):
    base = {r['chains']: r['best_s_per_iter'] for r in rows if r['placement'].startswith('one')}
    headers = ['chains', 'placement', 'compile (s)', 'ms/iter (best)', 'ms/iter (median)', 'ms per chain-iter',
               'vs one device', 'sigma after warm-up', 'state MiB/device', 'temp MiB/device']  # fmt: skip
    out = []
    for r in rows:
        t = r['best_s_per_iter']
        out.append([
            r['chains'],
            r['placement'],
            f'{r["compile_s"]:.1f}',
            f'{t * 1e3:.2f}',
            f'{r["median_s_per_iter"] * 1e3:.2f}',
            f'{t * 1e3 / r["chains"]:.2f}',
            f'{base[r["chains"]] / t:.2f}x' if r['chains'] in base else '',
            f'{r["sigma_after_warmup"]:.6g}',
            f'{r["state_mib_per_device"]:.2f}',
            f'{r["temp_mib_per_device"]:.2f}',
        ])
    return table(headers, out, markdown)


def data_table(rows, markdown):
    base = next((r for r in rows if r['data_devices'] == 1), None)
    headers = ['data devices', 'compile (s)', 's/iter (best)', 's/iter (median)', 'vs 1 device',
               'sigma after warm-up', 'data arrays MiB/device', 'state MiB/device', 'temp MiB/device',
               'peak RSS MiB']  # fmt: skip
    out = []
    for r in rows:
        t = r['best_s_per_iter']
        out.append([
            r['data_devices'],
            f'{r["compile_s"]:.1f}',
            f'{t:.3f}',
            f'{r["median_s_per_iter"]:.3f}',
            f'{base["best_s_per_iter"] / t:.2f}x' if base else '',
            f'{r["sigma_after_warmup"]:.6g}',
            f'{r["state_data_mib_per_device"]:.1f}',
            f'{r["state_mib_per_device"]:.1f}',
            f'{r["temp_mib_per_device"]:.1f}',
            f'{r["peak_rss_mib"]:.0f}',
        ])
    return table(headers, out, markdown)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--quick', action='store_true', help='tiny sizes, for a smoke test')
    ap.add_argument('--sections', default=','.join(SECTIONS), help='comma-separated subset of chains,data')
    ap.add_argument('--n', type=int, default=10_000, help='points in the chains section')
    ap.add_argument('--p', type=int, default=10)
    ap.add_argument('--ntree', type=int, default=200, help='trees in the chains section')
    ap.add_argument('--chains', default='1,2,4,8')
    ap.add_argument('--big-n', type=int, default=1_000_000, help='points in the data section')
    ap.add_argument('--big-ntree', type=int, default=50, help='trees in the data section')
    ap.add_argument('--data-devices', default='1,2')
    ap.add_argument('--warmup', type=int, default=20, help='untimed iterations after compiling (chains)')
    ap.add_argument('--big-warmup', type=int, default=5, help='untimed iterations after compiling (data)')
    ap.add_argument('--repeats', type=int, default=3)
    ap.add_argument('--repeat-seconds', type=float, default=1.5)
    ap.add_argument('--markdown', action='store_true')
    ap.add_argument('--out-json', help='also write the results to this file')
    ap.add_argument('--no-virtual-devices', action='store_true', help='do not set XLA_FLAGS (real devices)')
    cfg = ap.parse_args(argv)
    if cfg.quick:
        cfg.n, cfg.ntree, cfg.chains = 500, 10, '1,2'
        cfg.big_n, cfg.big_ntree, cfg.data_devices = 20_000, 10, '1,2'
        cfg.warmup, cfg.big_warmup, cfg.repeats, cfg.repeat_seconds = 3, 3, 1, 0.2
    cfg.chains = [int(c) for c in cfg.chains.split(',')]
    cfg.data_devices = [int(k) for k in cfg.data_devices.split(',')]
    cfg.sections = [s.strip() for s in cfg.sections.split(',') if s.strip()]
    bad = [s for s in cfg.sections if s not in SECTIONS]
    if bad:
        ap.error(f'unknown sections {bad}; choose from {SECTIONS}')
    return cfg


def main(argv=None):
    cfg = parse_args(argv)
    info = {
        'platform': platform.platform(),
        'cores': os.cpu_count(),
        'jax': jax.__version__,
        'devices': f'{jax.device_count()} x {jax.devices()[0].device_kind}',
        'XLA_FLAGS': os.environ.get('XLA_FLAGS', ''),
    }
    print('# bartz chains and data sharding benchmark')
    for k, v in info.items():
        print(f'# {k}: {v}', flush=True)
    results = {'machine': info}
    t_start = time.perf_counter()
    if 'chains' in cfg.sections:
        rows = bench_chains(cfg)
        results['chains'] = rows
        print(f'\n## Chains: n = {cfg.n:,}, p = {cfg.p}, {cfg.ntree} trees; time per iteration of all chains\n')
        print(chains_table(rows, cfg.markdown), flush=True)
    if 'data' in cfg.sections:
        rows = bench_data(cfg)
        results['data'] = rows
        print(f'\n## Data sharding: n = {cfg.big_n:,}, p = {cfg.p}, {cfg.big_ntree} trees, 1 chain\n')
        print(data_table(rows, cfg.markdown))
    print(f'\n# total {time.perf_counter() - t_start:.0f}s')
    if cfg.out_json:
        with open(cfg.out_json, 'w') as f:
            json.dump(results, f, indent=1)


if __name__ == '__main__':
    main()
