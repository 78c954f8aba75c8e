"""What users wait for in `bartz.surv_bart`, end to end: R's lung demo and a
large simulated study.

Run from the repository root:

    .venv/bin/python benchmarks/survival.py                 # lung, and 100,000 people
    .venv/bin/python benchmarks/survival.py --quick         # lung with fewer draws, 5,000 people
    .venv/bin/python benchmarks/survival.py --people 20000 --ndpost 200

Rows:

- ``lung``: R's ``demo/lung.surv.bart.R`` as R ships it (times in weeks,
  x = sex, age, ph.karno, ``mc.surv.bart(..., mc.cores=1, seed=99)`` with its
  defaults: 50 trees, ``nskip=250``, ``ndpost=1000``, ``keepevery=10``, so
  10,250 iterations on the person-period rows), in a fresh process (cold:
  compilation included, with the persistent cache emptied) and again in the
  same process (warm);
- ``simulated``: ``--people`` people with 5 uniform covariates, exponential
  event times whose rate depends on two of them, 30% censored at random,
  ``K=20`` quantile times (R's ``K``): the expansion's rows, the fit (warm)
  and the time per iteration, with ``--ndpost`` kept draws (``keepevery=1``,
  ``nskip`` = ``ndpost / 4``).

Each measurement runs in its own subprocess; peak RSS is that process's.
No R figure is on record for these workloads (R is not installed here).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# R's demo data: BARTZ_R_DATA, else the shared folder beside the checkout, else the work machine's
_R_DATA = [
    *([Path(os.environ['BARTZ_R_DATA'])] if os.environ.get('BARTZ_R_DATA') else []),
    ROOT.parent / 'shared' / 'data' / 'r-bart',
    Path('/work/shared/data/r-bart'),
]
LUNG = next((d / 'lung.csv' for d in _R_DATA if (d / 'lung.csv').is_file()), _R_DATA[0] / 'lung.csv')


def _lung_data():
    import pandas as pd  # noqa: PLC0415 (worker only)

    lung = pd.read_csv(LUNG)
    lung['ph.karno'] = lung['ph.karno'].fillna(lung['pat.karno'])
    times = np.ceil(lung['time'] / 7).to_numpy()
    delta = (lung['status'] - 1).to_numpy()
    x = lung[['sex', 'age', 'ph.karno']].to_numpy(float)
    return times, delta, x


def _simulated(people: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(people, 5))
    rate = 0.1 * np.exp(1.5 * x[:, 0] - x[:, 1])
    event = rng.exponential(1 / rate)
    censor = np.where(rng.uniform(size=people) < 0.3, rng.uniform(0, event), np.inf)
    times = np.minimum(event, censor)
    return times, (event <= censor).astype(int), x


def worker(kind: str, people: int, ndpost: int, quick: bool) -> dict:
    """One measurement, in this (fresh) process."""
    import bartz  # noqa: PLC0415 (after the cache settings of the parent)

    if kind.startswith('lung'):
        times, delta, x = _lung_data()
        options = {'mc_cores': 1, 'seed': 99, 'printevery': None}
        if quick:
            options |= {'ndpost': 200, 'nskip': 50, 'keepevery': 2}
        t0 = time.perf_counter()
        post = bartz.mc_surv_bart(x_train=x, times=times, delta=delta, **options)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        post = bartz.mc_surv_bart(x_train=x, times=times, delta=delta, **options)
        warm = time.perf_counter() - t0
        return {'rows': len(post.tx_train), 'K': int(post.K), 'cold_s': cold, 'warm_s': warm}
    times, delta, x = _simulated(people)
    options = {'K': 20, 'ndpost': ndpost, 'nskip': ndpost // 4, 'keepevery': 1, 'printevery': None}
    t0 = time.perf_counter()
    pre = bartz.surv_pre_bart(times, delta, x_train=x, K=20)
    prep = time.perf_counter() - t0
    bartz.surv_bart(x_train=x, times=times, delta=delta, **{**options, 'ndpost': 8, 'nskip': 2})  # compiles
    t0 = time.perf_counter()
    post = bartz.surv_bart(x_train=x, times=times, delta=delta, **options)
    fit = time.perf_counter() - t0
    iters = options['nskip'] + options['ndpost']
    return {'rows': len(pre.y_train), 'K': int(post.K), 'prep_s': prep, 'fit_s': fit, 'ms_per_iter': 1e3 * fit / iters}


def _run(args, kind: str) -> dict:
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as cache:
        if kind == 'lung':  # cold: an empty persistent cache
            env['BARTZ_CACHE_DIR'] = cache
        command = [sys.executable, __file__, '--worker', kind, '--people', str(args.people), '--ndpost', str(args.ndpost)]
        if args.quick:
            command.append('--quick')
        out = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if out.returncode:
        return {'error': out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f'exit {out.returncode}'}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--quick', action='store_true', help='fewer draws on lung, 5,000 people')
    parser.add_argument('--people', type=int, default=None, help='people of the simulated study (default 100,000)')
    parser.add_argument('--ndpost', type=int, default=200, help='kept draws of the simulated study')
    parser.add_argument('--worker', default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.people is None:
        args.people = 5000 if args.quick else 100_000
    if args.worker is not None:
        result = worker(args.worker, args.people, args.ndpost, args.quick)
        result['peak_rss_mb'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(result))
        return
    lung, sim = _run(args, 'lung'), _run(args, 'simulated')
    print(f'machine: {os.cpu_count()} cores; {time.strftime("%Y-%m-%d")}; command: {" ".join(sys.argv)}')
    print('| workload | person-period rows | K | time | peak RSS |')
    print('|---|---:|---:|---|---:|')
    draws = '200 draws, keepevery 2' if args.quick else "R's defaults, 10,250 iterations"
    if 'error' in lung:
        print(f"| lung ({draws}) | | | failed: {lung['error']} | |")
    else:
        print(
            f"| lung ({draws}) | {lung['rows']:,} | {lung['K']} | cold {lung['cold_s']:.1f} s, "
            f"warm {lung['warm_s']:.1f} s | {lung['peak_rss_mb']:.0f} MB |"
        )
    label = f'simulated, {args.people:,} people, ndpost {args.ndpost}'
    if 'error' in sim:
        print(f"| {label} | | | failed: {sim['error']} | |")
    else:
        print(
            f"| {label} | {sim['rows']:,} | {sim['K']} | expansion {sim['prep_s']:.2f} s, fit {sim['fit_s']:.1f} s "
            f"({sim['ms_per_iter']:.1f} ms/iter) | {sim['peak_rss_mb']:.0f} MB |"
        )


if __name__ == '__main__':
    main()
