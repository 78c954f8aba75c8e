"""`gbart` with several chains on one CPU device: chains on threads against one vmapped program.

A settled experiment (threads are the default on one CPU device; the figures
are in `benchmarks/LOG.md`), kept for reference: it reaches into the private
modules of bartz of its time and is not kept working as they move.

Run from the repository root:

    .venv/bin/python benchmarks/experiments/gbart_chains.py                    # n = 1,000, 2,000, 10,000; 2 and 4 chains
    .venv/bin/python benchmarks/experiments/gbart_chains.py --sizes 2000 --chains 4 --markdown
    .venv/bin/python benchmarks/experiments/gbart_chains.py --quick            # smoke test

On one CPU device `gbart(..., mc_cores=k)` runs each chain as its own calls
of the one-chain program, on a pool of up to as many threads as cores
(`bartz.mcmcloop.chain_workers`); before, the chains ran as one program
vmapped over them, which is still what a GPU runs. This script times both
in one process, interleaved: ``threads`` is the default, ``vmapped`` is
the same fit with ``mcmcloop.chain_workers`` patched to 0 (the warm start,
if any, follows the same switch). Friedman #1 (the data of
``benchmarks/peers.py``), p = 10, 200 trees, R's defaults, nskip 100 and
500 kept draws per chain, no test set. Each configuration is fitted once to
compile, then ``--repeats`` times per variant, alternating; the table shows
the best and the median wall time, and their ratio (threads / vmapped). The
draws are the same either way (tests/test_chains.py).
"""

import argparse
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/peers.py
import peers  # noqa: E402

import bartz  # noqa: E402
from bartz import mcmcloop  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--sizes', default='1000,2000,10000', help='comma-separated n (default %(default)s)')
    ap.add_argument('--chains', default='2,4', help='comma-separated mc_cores (default %(default)s)')
    ap.add_argument('--repeats', type=int, default=3, help='timed fits per variant (default %(default)s)')
    ap.add_argument('--warmstart', type=int, default=0, help='grow-from-root sweeps per chain (default 0)')
    ap.add_argument('--quick', action='store_true', help='n = 500, 2 chains, 2 repeats')
    ap.add_argument('--markdown', action='store_true')
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.chains, args.repeats = '500', '2', 2
    sizes = [int(s) for s in args.sizes.split(',')]
    chain_counts = [int(c) for c in args.chains.split(',')]
    warnings.simplefilter('ignore', bartz.ConvergenceWarning)
    threads = mcmcloop.chain_workers
    variants = {'threads': threads, 'vmapped': lambda num_chains, mesh=None: 0}

    rows = []
    for n in sizes:
        x, y = peers.friedman1(n)
        for k in chain_counts:

            def fit(k=k, x=x, y=y):
                t0 = time.perf_counter()
                settings = {'nskip': 100, 'ndpost': 500 * k, 'seed': 0, 'printevery': None}
                bartz.gbart(x, y, mc_cores=k, warmstart=args.warmstart, **settings)
                return time.perf_counter() - t0

            times = {name: [] for name in variants}
            try:
                for switch in variants.values():
                    mcmcloop.chain_workers = switch
                    fit()  # compiles
                for _ in range(args.repeats):
                    for name, switch in variants.items():
                        mcmcloop.chain_workers = switch
                        times[name].append(fit())
            finally:
                mcmcloop.chain_workers = threads
            best = {name: min(t) for name, t in times.items()}
            med = {name: statistics.median(t) for name, t in times.items()}
            rows.append([
                f'{n:,}',
                str(k),
                str(threads(k, None)),
                f'{best["vmapped"]:.3g} / {med["vmapped"]:.3g}',
                f'{best["threads"]:.3g} / {med["threads"]:.3g}',
                f'{best["threads"] / best["vmapped"]:.2f} / {med["threads"] / med["vmapped"]:.2f}',
            ])
            print(f'n={n} chains={k}: {times}', file=sys.stderr, flush=True)

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    print(f'Machine: {peers.cpu_model()}, {os.cpu_count()} cores ({usable} usable); warmstart={args.warmstart}')
    header = ['n', 'chains', 'threads used', 'vmapped: best / median (s)', 'threads: best / median (s)', 'ratio']
    print(peers.render(header, rows, args.markdown))


if __name__ == '__main__':
    main()
