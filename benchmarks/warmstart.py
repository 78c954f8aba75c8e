"""Burn-in needed to reach stationarity, by starting state (not a test).

Friedman #1 (p = 10, noise sd 1), 200 trees, R's default priors, 4 chains
(``gbart(..., mc_cores=4)``), 100 test points. Every iteration from the
first is kept (``nskip=0``, ``keepevery=1``), and `burnin_iterations`
reads off the burn-in:

- sigma: the first iteration ``t`` where the mean sigma over the chains
  and over iterations ``t .. t + 9`` is within ``tol`` (2%) of the
  long-run mean (all chains, second half of the run). A 10-iteration,
  4-chain mean: one draw's noise is 1-2% at these n. "First" rather than
  "from then on": the approach is monotone, and a later noise excursion
  is not a transient;
- f: the first ``t`` (a multiple of ``step``) where the (not split) R-hat
  of f across the chains, on iterations ``t .. t + window - 1`` (100) and
  averaged over the test points, is below ``rhat_max`` (1.01);
- burn-in: the larger of the two (None when either is not reached).

Starts compared: the root start (every tree a leaf of value 0, all chains
the same, as R), random trees from the prior (``start='prior'``), and
``warmstart=k`` grow-from-root sweeps. The warm start's cost is timed
separately (a second call, compiled), and as MCMC iterations of the same
fit.

With ``--keepevery K`` every K-th iteration is kept (long runs: the
trees of every kept draw are stored), and the windows above are read in
iterations, rounded to kept draws. For long runs `long_run_summary` also
prints, per run, the rank-normalised split R-hat of f (median over the
test points) on the iterations from ``t`` to the end, and how many
iterations of one chain make one effective draw of f (bulk ESS, second
half): R-hat of f below 1.01 needs about 50 effective draws per half chain, so
this says how long a run must be to reach it, from any start.

Usage::

    python benchmarks/warmstart.py                      # n = 1000, 2000, 10000
    python benchmarks/warmstart.py --sizes 2000 --iters 600 --markdown
    python benchmarks/warmstart.py --sizes 10000 --iters 12000 --keepevery 5 --starts root,prior,warm10 --save out/long
"""

import argparse
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bartz import gbart  # noqa: E402
from bartz.run import warmstart  # noqa: E402
from bartz.diagnostics import ess_bulk, rhat  # noqa: E402


def friedman1(n, rng, p=10):
    x = rng.uniform(size=(n, p))
    f = 10 * np.sin(np.pi * x[:, 0] * x[:, 1]) + 20 * (x[:, 2] - 0.5) ** 2 + 10 * x[:, 3] + 5 * x[:, 4]
    return x, f


def _rhat(draws):
    """R-hat (not split) of ``draws`` of shape ``(chains, iterations, ...)``."""
    m, t = draws.shape[:2]
    chain_means = draws.mean(axis=1)
    within = draws.var(axis=1, ddof=1).mean(axis=0)
    between = t * chain_means.var(axis=0, ddof=1)
    var_plus = (t - 1) / t * within + between / t
    return np.sqrt(var_plus / within)


def burnin_iterations(sigma, f_test, *, tol=0.02, rhat_max=1.01, window=100, step=10, sigma_window=10, keep=1):
    """Iterations of burn-in needed to reach stationarity.

    Parameters
    ----------
    sigma
        ``(chains, iterations)`` error sd after each iteration, from the
        first.
    f_test
        ``(chains, iterations, points)`` draws of f at test points.
    tol, rhat_max, window, step, sigma_window
        See the module docstring (in iterations).
    keep
        Iterations per kept draw (``keepevery``): the windows become
        ``window // keep`` draws etc., and the burn-in is returned in
        iterations.

    Returns
    -------
    dict with ``sigma`` and ``rhat`` (the burn-in by each criterion, None
    if not reached within the run), ``burnin`` (their maximum, None if
    either is None), ``sigma_mean`` (the long-run mean) and ``rhat_last``
    (the mean R-hat of the last window).
    """
    sigma = np.asarray(sigma, np.float64)
    f_test = np.asarray(f_test, np.float64)
    window, step, sigma_window = (max(1, v // keep) for v in (window, step, sigma_window))
    total = sigma.shape[1]
    long_run = sigma[:, total // 2 :].mean()
    smooth = np.convolve(sigma.mean(axis=0), np.ones(sigma_window) / sigma_window, 'valid')
    near = np.flatnonzero(np.abs(smooth - long_run) <= tol * long_run)
    b_sigma = int(near[0]) * keep if near.size else None
    starts = np.arange(0, total - window + 1, step)
    rhat = np.array([_rhat(f_test[:, t : t + window]).mean() for t in starts])
    below = np.flatnonzero(rhat < rhat_max)
    b_rhat = int(starts[below[0]]) * keep if below.size else None
    burnin = None if b_sigma is None or b_rhat is None else max(b_sigma, b_rhat)
    return {'sigma': b_sigma, 'rhat': b_rhat, 'burnin': burnin, 'sigma_mean': float(long_run), 'rhat_last': float(rhat[-1])}


LONG_RUN_FROM = (0, 100, 1000, 4000)


def long_run_summary(f_test, keep=1, starts=LONG_RUN_FROM):
    """What a long run says of the mixing of f, from any start.

    Parameters
    ----------
    f_test
        ``(chains, draws, points)`` draws of f, every `keep`-th iteration.
    keep
        Iterations per draw.
    starts
        Iterations from which R-hat is taken to the end of the run.

    Returns
    -------
    dict with ``rhat_from`` (``{t: median over the points of the
    rank-normalised split R-hat of f on iterations t .. end}``, for the
    ``t`` that leave at least 100 draws per chain) and
    ``iters_per_ess`` (iterations of one chain per effective draw of f:
    chains x iterations of the second half / its bulk ESS, median over the
    points).
    """
    f_test = np.asarray(f_test, np.float64)
    chains, total = f_test.shape[:2]
    rhat_from = {t: float(np.median(rhat(f_test[:, t // keep :]))) for t in starts if total - t // keep >= 100}
    second = f_test[:, total // 2 :]
    iters_per_ess = chains * second.shape[1] * keep / float(np.median(ess_bulk(second)))
    return {'rhat_from': rhat_from, 'iters_per_ess': iters_per_ess}


def analyse(folder):
    """The table of `burnin_iterations` from traces saved by ``--save``, and
    for runs kept thinned (long runs) the table of `long_run_summary`."""
    rows, long_rows = [], []
    for path in sorted(Path(folder).glob('*.npz')):
        n, start, seed = path.stem.split('_')
        d = np.load(path)
        keep = int(d['keep']) if 'keep' in d else 1
        iters = d['sigma'].shape[1] * keep
        b = burnin_iterations(d['sigma'], d['f_test'], keep=keep)
        rows.append((int(n), start, int(seed), iters, b['sigma'], b['rhat'], f'{b["rhat_last"]:.2f}'))
        if keep > 1:
            s = long_run_summary(d['f_test'], keep)
            cells = [f'{s["rhat_from"][t]:.3f}' if t in s['rhat_from'] else '' for t in LONG_RUN_FROM]
            long_rows.append((int(n), start, int(seed), iters, *cells, f'{s["iters_per_ess"]:.0f}'))
    rows.sort()
    print('| n | start | seed | iterations | burn-in (sigma within 2%) | burn-in (R-hat < 1.01) | R-hat, last 100 |')
    print('|---|---|---|---|---|---|---|')
    for row in rows:
        print('| ' + ' | '.join(str(v) for v in row) + ' |')
    if long_rows:
        long_rows.sort()
        heads = [f'R-hat of f, iterations {t} .. end' for t in LONG_RUN_FROM]
        print()
        print('| n | start | seed | iterations | ' + ' | '.join(heads) + ' | iterations per effective draw of f, one chain |')
        print('|---' * (5 + len(heads)) + '|')
        for row in long_rows:
            print('| ' + ' | '.join(str(v) for v in row) + ' |')


def run_start(x, y, x_test, iters, start, k, seed, chains=4, keep=1):
    """One fit of `chains` chains from the given start, every `keep`-th
    iteration kept from the first."""
    old = warmstart.DEFAULT_START
    warmstart.DEFAULT_START = start
    try:
        t0 = time.perf_counter()
        fit = gbart(
            x,
            y,
            x_test,
            nskip=0,
            ndpost=iters // keep * chains,
            keepevery=keep,
            mc_cores=chains,
            printevery=None,
            seed=seed,
            save_yhat_train=False,
            warmstart=k,
        )
        wall = time.perf_counter() - t0
    finally:
        warmstart.DEFAULT_START = old
    sigma = np.asarray(fit.sigma).T  # (chains, iters)
    f_test = np.asarray(fit.yhat_test).reshape(chains, iters // keep, -1)
    return sigma, f_test, wall, fit.run_info.elapsed


def time_warm_start(x, y, k, chains=4, seed=0):
    """Seconds of the warm start alone: the difference between a fit with
    and without it, 1 iteration each, all compiled (second calls)."""

    def fit(ws):
        t0 = time.perf_counter()
        gbart(x, y, nskip=0, ndpost=chains, mc_cores=chains, printevery=None, seed=seed, save_yhat_train=False, warmstart=ws)
        return time.perf_counter() - t0

    fit(0), fit(k)
    times = [(fit(0), fit(k)) for _ in range(3)]
    return float(np.median([b - a for a, b in times]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--sizes', default='1000,2000,10000')
    parser.add_argument('--iters', default='1000,1000,1500', help='iterations per chain, one per size')
    parser.add_argument('--starts', default='root,prior,warm5')
    parser.add_argument('--seeds', type=int, default=1)
    parser.add_argument('--first-seed', type=int, default=0)
    parser.add_argument('--keepevery', type=int, default=1, help='keep every K-th iteration (long runs)')
    parser.add_argument('--markdown', action='store_true')
    parser.add_argument('--save', default=None, help='folder to save the traces in (npz), for re-analysis')
    parser.add_argument('--analyse', default=None, help='only print the table of the traces saved in this folder')
    args = parser.parse_args(argv)
    if args.analyse:
        analyse(args.analyse)
        return
    sizes = [int(s) for s in args.sizes.split(',')]
    iters = [int(s) for s in args.iters.split(',')]
    iters = iters + [iters[-1]] * (len(sizes) - len(iters))
    print(f'# devices {jax.devices()}', flush=True)
    rows = []
    for n, t in zip(sizes, iters, strict=False):
        rng = np.random.default_rng(n)
        x, f = friedman1(n, rng)
        y = f + rng.normal(size=n)
        x_test, _ = friedman1(100, rng)
        for start in args.starts.split(','):
            k = int(start[4:]) if start.startswith('warm') else 0
            mode = 'root' if k else start
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                keep = args.keepevery
                sigma, f_test, wall, elapsed = run_start(x, y, x_test, t, mode, k, seed, keep=keep)
                if args.save:
                    Path(args.save).mkdir(parents=True, exist_ok=True)
                    path = Path(args.save) / f'{n}_{start}_{seed}.npz'
                    np.savez(path, sigma=sigma, f_test=f_test, wall=wall, elapsed=elapsed, keep=keep)
                b = burnin_iterations(sigma, f_test, keep=keep)
                rows.append((n, start, seed, b['sigma'], b['rhat'], b['burnin'], elapsed / t, wall))
                print(
                    f'n={n} start={start} seed={seed}: burn-in sigma {b["sigma"]} rhat {b["rhat"]} -> {b["burnin"]}'
                    f' (sigma mean {b["sigma_mean"]:.3f}, iters {t}, s/iter {elapsed / t:.4f}, wall {wall:.1f}s)',
                    flush=True,
                )
                if keep > 1:
                    s = long_run_summary(f_test, keep)
                    rhats = ', '.join(f'from {t}: {r:.3f}' for t, r in s['rhat_from'].items())
                    print(f'  R-hat of f to the end, {rhats}; iterations per ESS of f, one chain: {s["iters_per_ess"]:.0f}', flush=True)
            if k:
                cost = time_warm_start(x, y, k)
                print(f'n={n} warm start k={k}, 4 chains: {cost:.2f} s = {cost / (elapsed / t):.0f} iterations', flush=True)
    sep = '|' if args.markdown else ' '
    print(sep.join(['n', 'start', 'seed', 'burn-in sigma', 'burn-in R-hat', 'burn-in', 's/iteration']))
    for row in rows:
        print(sep.join(str(v) if not isinstance(v, float) else f'{v:.4f}' for v in row[:-1]))


if __name__ == '__main__':
    main()
