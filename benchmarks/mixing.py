"""Effective samples per second of `bartz.gbart`, and burn-in length, next to a peer.

Run from the repository root:

    .venv/bin/python benchmarks/mixing.py                                 # n = 2,000 and 10,000
    .venv/bin/python benchmarks/mixing.py --peer-python /opt/peer/bin/python
    .venv/bin/python benchmarks/mixing.py --quick                         # smoke test, about a minute
    .venv/bin/python benchmarks/mixing.py --sizes 2000 --markdown --out-json out/mixing.json
    .venv/bin/python benchmarks/mixing.py --seeds 5 --peer-python /opt/peer/bin/python   # figures over 5 fits

What a user gets from an MCMC run is effective samples per second, not
iterations per second. On Friedman #1 (the data of ``benchmarks/peers.py``:
x uniform on [0, 1]^10, y = 10 sin(pi x1 x2) + 20 (x3 - 0.5)^2 + 10 x4 + 5 x5
+ N(0, 1)), 200 trees, R's default priors, every configuration runs
``--chains`` chains (default 4, ``mc_cores``) of ``nskip + ndpost / chains``
iterations each (R's defaults: nskip 100, ndpost 2,000 kept draws in all;
``--nskip``, ``--ndpost``). The run keeps every iteration (``nskip=0``,
``ndpost=chains * (nskip + ndpost / chains)``): the same chain as an R-style
run, whose first ``nskip`` iterations per chain are then dropped to get the
kept draws, and whose full trace measures the burn-in.

Configurations (extra keyword arguments of `bartz.gbart`; one whose keyword
this bartz's ``gbart`` does not accept is skipped with a note):

``grow/prune``  ``{'moves': ('grow', 'prune')}``, the original sampler;
``default``     ``{}``;
``warm start``  ``{'warmstart': 5}``, grow-from-root sweeps first.

The peer (``--peer-python``, an interpreter with ``bartz==0.13.0`` from PyPI,
found and run by the machinery of ``benchmarks/peers.py``: isolated
subprocess, its own bartz) runs ``bartz.BART.mc_gbart`` with the same data,
chains, iterations, trees and ``keepevery=1``.

Columns
-------
seconds
    Wall time of the ``gbart`` call (plus blocking on its arrays), warm:
    every process first runs the identical call once, so compilation is
    excluded. Each configuration runs in its own fresh process.
ESS sigma, ESS f
    Bulk effective sample size (`bartz.diagnostics.ess_bulk`: rank-normalised,
    split chains, Geyer's initial monotone sequence; Vehtari et al. 2021),
    pooled over the chains, of the kept draws of the error sd and of f at
    each of ``--ntest`` (20) test points drawn from the same distribution as
    x; "ESS f" is the median over test points. The peer's draws go through
    the same estimator.
ESS/s
    ESS over seconds (the whole run, burn-in included).
R-hat
    `bartz.diagnostics.rhat` (rank-normalised split R-hat, max of bulk and
    tail) over the chains, of sigma and the maximum over test points of f.
burn-in sigma
    The first iteration ``t`` from which the mean over chains of sigma,
    averaged over the window ``[s, s + 20)``, stays within 2% of its
    long-run mean (the mean over the second half of all iterations) for
    every ``s >= t``.
burn-in f
    The smallest ``b``, a multiple of ``--burnin-step`` (25), such that the
    median over test points of the R-hat of f over the iterations ``[b,
    end)`` of all chains is below 1.01 (the issue's criterion);
    ``>B`` when no ``b`` up to half the run qualifies: the chains still
    disagree about f at that level of precision.

An ESS of 10 to 20 is itself uncertain by tens of percent: ``--seeds K``
runs K fits per configuration (seeds 99, 100, ...; the peer's too) in the
same process after the compiling one, and shows mean seconds, mean ESS,
ESS/s as mean ESS over mean seconds, the largest R-hat and the median
burn-ins, then the ESS of f of each fit.

The ratio "ESS/s f vs peer" of each row is its ESS per second of f over the
peer's at the same n.
"""

import argparse
import inspect
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402  (stdlib-only at import time: also runs under the peer)

REPO = peers.REPO
OURS = peers.OURS
TEST_SEED = 1
CONFIGS = (
    ('grow/prune', {'moves': ('grow', 'prune')}),
    ('default', {}),
    ('warm start', {'warmstart': 5}),
)
SIGMA_BAND = 0.02
SIGMA_WINDOW = 20
RHAT_BURNIN = 1.01


# ---------------------------------------------------------------- worker side
# Runs in subprocesses, also under the peer's interpreter: numpy and bartz are
# imported inside the functions, Python 3.9 syntax.


def test_points(ntest):
    import numpy as np  # noqa: PLC0415

    return np.random.default_rng(TEST_SEED).uniform(size=(ntest, peers.P))


def worker(spec):
    """Fit twice (the first compiles), save the draws of the second, return its time."""
    import numpy as np  # noqa: PLC0415

    if spec.get('probe'):
        return peers.probe()
    import bartz  # noqa: PLC0415
    import jax  # noqa: PLC0415

    chains, iters = spec['chains'], spec['iters']
    x, y = peers.friedman1(spec['n'])
    x_test = test_points(spec['ntest'])
    args = dict(x_test=x_test, nskip=0, ndpost=chains * iters, ntree=200, keepevery=1, printevery=None)
    if spec['lib'] == OURS:
        gbart = bartz.gbart
        args.update(mc_cores=chains, **{k: tuple(v) if isinstance(v, list) else v for k, v in spec['kwargs'].items()})
    else:
        gbart = bartz.BART.mc_gbart
        args.update(mc_cores=chains)

    def run(seed):
        t0 = time.perf_counter()
        fit = gbart(x, y, seed=seed, **args)
        slots = getattr(type(fit), '__slots__', ())
        attrs = vars(fit) if hasattr(fit, '__dict__') else {k: getattr(fit, k, None) for k in slots}
        jax.block_until_ready(attrs)
        return time.perf_counter() - t0, fit

    seeds = [peers.FIT_SEED + s for s in range(spec.get('seeds', 1))]
    compile_run_s, _ = run(seeds[0])
    seconds = []
    for i, seed in enumerate(seeds):
        s, fit = run(seed)
        seconds.append(s)
        # both keep the draws chain after chain
        sigma = np.asarray(fit.sigma_, np.float64).reshape(chains, iters)
        f = np.asarray(fit.yhat_test, np.float64).reshape(chains, iters, -1)
        np.savez(spec['out'].format(i), sigma=sigma, f=f)
    return {'seconds': seconds, 'first_s': compile_run_s, 'bartz_file': bartz.__file__}


# ---------------------------------------------------------------- parent side


def burnin_sigma(sigma):
    """First iteration from which the chain-mean of sigma stays within 2% of its long-run mean."""
    import numpy as np  # noqa: PLC0415

    num_iters = sigma.shape[1]
    long_run = sigma[:, num_iters // 2 :].mean()
    smooth = np.convolve(sigma.mean(axis=0), np.ones(SIGMA_WINDOW) / SIGMA_WINDOW, mode='valid')
    outside = np.flatnonzero(np.abs(smooth / long_run - 1) > SIGMA_BAND)
    return 0 if outside.size == 0 else int(outside[-1]) + 1


def burnin_f(f, step):
    """Smallest multiple b of `step` with median R-hat of f over [b, end) below 1.01, or None."""
    import numpy as np  # noqa: PLC0415

    from bartz import diagnostics  # noqa: PLC0415

    for b in range(0, f.shape[1] // 2 + 1, step):
        if np.median(diagnostics.rhat(f[:, b:])) < RHAT_BURNIN:
            return b
    return None


def statistics(path, seconds, nskip, step):
    """The row's figures from the saved draws."""
    import numpy as np  # noqa: PLC0415

    from bartz import diagnostics  # noqa: PLC0415

    with np.load(path) as data:
        sigma, f = data['sigma'], data['f']
    sigma_kept, f_kept = sigma[:, nskip:], f[:, nskip:]
    ess_sigma = float(diagnostics.ess_bulk(sigma_kept))
    ess_f = float(np.median(diagnostics.ess_bulk(f_kept)))
    return {
        'seconds': seconds,
        'ess_sigma': ess_sigma,
        'ess_f': ess_f,
        'ess_s_sigma': ess_sigma / seconds,
        'ess_s_f': ess_f / seconds,
        'rhat_sigma': float(diagnostics.rhat(sigma_kept)),
        'rhat_f_max': float(np.max(diagnostics.rhat(f_kept))),
        'burnin_sigma': burnin_sigma(sigma),
        'burnin_f': burnin_f(f, step),
        'burnin_f_limit': f.shape[1] // 2,
        'sigma_mean': float(sigma_kept.mean()),
    }


def accepted_configs():
    """The configurations whose keywords this repo's gbart accepts; notes for the others."""
    sys.path.insert(0, REPO)
    import bartz  # noqa: PLC0415

    params = inspect.signature(bartz.gbart).parameters
    kept, notes = [], []
    for name, kwargs in CONFIGS:
        missing = [k for k in kwargs if k not in params]
        if missing:
            notes.append(f'{name}: skipped, gbart has no keyword {", ".join(missing)} yet')
        else:
            kept.append((name, kwargs))
    return kept, notes


def measure(python, lib, n, kwargs, args, tmp):
    spec = {
        'lib': lib,
        'n': n,
        'ntest': args.ntest,
        'chains': args.chains,
        'iters': args.nskip + args.ndpost // args.chains,
        'kwargs': kwargs,
        'seeds': args.seeds,
        'out': os.path.join(tmp, 'draws{}.npz'),
    }
    env = {'JAX_PLATFORMS': args.platform} if args.platform else {}
    out = peers.run_worker(python, spec, env, ours=lib == OURS, script=__file__)
    if 'error' in out:
        return out
    if peers.in_repo(out['bartz_file']) != (lib == OURS):
        return {'error': f'wrong bartz imported: {out["bartz_file"]}'}
    per_seed = [
        statistics(spec['out'].format(i), s, args.nskip, args.burnin_step) for i, s in enumerate(out['seconds'])
    ]
    stats = combine(per_seed)
    stats['first_s'] = out['first_s']
    return stats


def combine(per_seed):
    """One row from the rows of several seeds: means (ESS per second as mean
    ESS over mean seconds), the largest R-hats, the median burn-ins (None,
    not reached, counts as beyond the limit); the per-seed figures kept."""
    import numpy as np  # noqa: PLC0415

    if len(per_seed) == 1:
        return per_seed[0]
    out = {k: float(np.mean([r[k] for r in per_seed])) for k in ('seconds', 'ess_sigma', 'ess_f', 'sigma_mean')}
    out['ess_s_sigma'] = out['ess_sigma'] / out['seconds']
    out['ess_s_f'] = out['ess_f'] / out['seconds']
    out['rhat_sigma'] = max(r['rhat_sigma'] for r in per_seed)
    out['rhat_f_max'] = max(r['rhat_f_max'] for r in per_seed)
    out['burnin_sigma'] = int(np.median([r['burnin_sigma'] for r in per_seed]))
    limit = per_seed[0]['burnin_f_limit']
    burn_f = np.median([limit + 1 if r['burnin_f'] is None else r['burnin_f'] for r in per_seed])
    out['burnin_f'] = None if burn_f > limit else int(burn_f)
    out['burnin_f_limit'] = limit
    out['per_seed'] = per_seed
    return out


def fmt_row(label, n, res, peer):
    if 'error' in res:
        return [label, f'{n:,}', 'failed'] + [''] * 10
    burn_f = f'>{res["burnin_f_limit"]}' if res['burnin_f'] is None else str(res['burnin_f'])
    ratio = '-'
    if peer is not None and 'error' not in peer:
        ratio = f'{res["ess_s_f"] / peer["ess_s_f"]:.2f}'
    return [
        label,
        f'{n:,}',
        f'{res["seconds"]:.3g}',
        f'{res["ess_sigma"]:.0f}',
        f'{res["ess_f"]:.0f}',
        f'{res["ess_s_sigma"]:.3g}',
        f'{res["ess_s_f"]:.3g}',
        f'{res["rhat_sigma"]:.3f}',
        f'{res["rhat_f_max"]:.3f}',
        str(res['burnin_sigma']),
        burn_f,
        f'{res["sigma_mean"]:.3f}',
        ratio,
    ]


HEADER = [
    'configuration',
    'n',
    'seconds',
    'ESS sigma',
    'ESS f',
    'ESS/s sigma',
    'ESS/s f',
    'R-hat sigma',
    'R-hat f (max)',
    'burn-in sigma',
    'burn-in f',
    'sigma mean',
    'ESS/s f vs peer',
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--peer-python', action='append', default=[], help='interpreter with bartz 0.13.0 (PyPI)')
    parser.add_argument('--sizes', help='comma separated n (default 2000,10000; 500 with --quick)')
    parser.add_argument('--chains', type=int, default=4, help='chains (mc_cores) per run (default %(default)s)')
    parser.add_argument('--nskip', type=int, help='burn-in per chain (default 100; 20 with --quick)')
    parser.add_argument('--ndpost', type=int, help='kept draws over all chains (default 2000; 200 with --quick)')
    parser.add_argument('--ntest', type=int, default=20, help='test points for f (default %(default)s)')
    parser.add_argument(
        '--seeds', type=int, default=1, help='fits per configuration, seeds 0, 1, ...: figures averaged (default 1)'
    )
    parser.add_argument('--burnin-step', type=int, help='grid of the burn-in of f (default 25; 10 with --quick)')
    parser.add_argument('--quick', action='store_true', help='tiny settings, a smoke test (about a minute)')
    parser.add_argument('--platform', default='cpu', help="JAX_PLATFORMS of the workers ('' lets JAX choose)")
    parser.add_argument('--markdown', action='store_true', help='print the table as markdown')
    parser.add_argument('--out-json', help='save the results to this file')
    parser.add_argument('--worker', help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    sizes = args.sizes or ('500' if args.quick else '2000,10000')
    sizes = [int(s) for s in sizes.split(',')]
    if args.nskip is None:
        args.nskip = 20 if args.quick else 100
    if args.ndpost is None:
        args.ndpost = 200 if args.quick else 2000
    if args.burnin_step is None:
        args.burnin_step = 10 if args.quick else 25
    if args.ndpost % args.chains:
        parser.error(f'--ndpost ({args.ndpost}) must be a multiple of --chains ({args.chains})')

    configs, notes = accepted_configs()
    for note in notes:
        print(note, file=sys.stderr)
    pythons = [p for item in args.peer_python for p in item.split(',') if p]
    found, _ = peers.find_peers(pythons, ['bartz'])
    probes = {peers.OURS_LABEL: peers.run_worker(sys.executable, {'probe': True}, ours=True, script=__file__)}
    probes.update({label: info for label, _, _, info in found})

    results = {}
    rows = []
    with tempfile.TemporaryDirectory(prefix='bartz-mixing-') as tmp:
        for n in sizes:
            peer_res = {}
            for label, python, lib, _ in found:
                print(f'{label}: n={n:,} ...', file=sys.stderr, flush=True)
                peer_res[label] = measure(python, lib, n, {}, args, tmp)
            first_peer = next(iter(peer_res.values()), None)
            for name, kwargs in configs:
                print(f'bartz {name}: n={n:,} ...', file=sys.stderr, flush=True)
                res = measure(sys.executable, OURS, n, kwargs, args, tmp)
                if 'error' in res:
                    print(f'  failed: {res["error"]}', file=sys.stderr, flush=True)
                results[f'bartz {name}, n={n}'] = res
                rows.append(fmt_row(f'bartz {name}', n, res, first_peer))
            for label, res in peer_res.items():
                if 'error' in res:
                    print(f'  {label} failed: {res["error"]}', file=sys.stderr, flush=True)
                results[f'{label}, n={n}'] = res
                rows.append(fmt_row(label, n, res, first_peer))

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    load = os.getloadavg()[0] if hasattr(os, 'getloadavg') else float('nan')
    print(
        f'Machine: {peers.cpu_model()}, {os.cpu_count()} cores ({usable} usable), '
        f'load average {load:.1f} at the end, JAX_PLATFORMS={args.platform!r}'
    )
    for label, info in probes.items():
        print(peers.describe(label, info))
    iters = args.nskip + args.ndpost // args.chains
    print(
        f'Friedman #1, p={peers.P}, 200 trees, {args.chains} chains x {iters} iterations '
        f'(nskip {args.nskip} + {args.ndpost // args.chains} kept per chain), {args.ntest} test points'
    )
    if args.seeds > 1:
        print(
            f'{args.seeds} fits per configuration (seeds {peers.FIT_SEED} to {peers.FIT_SEED + args.seeds - 1}): '
            'seconds, ESS and sigma mean are means over the fits, ESS/s is mean ESS over mean seconds, R-hat the '
            'largest, burn-in the median'
        )
    for note in notes:
        print(note)
    print()
    print(peers.render(HEADER, rows, args.markdown))
    if args.seeds > 1:
        print()
        for key, res in results.items():
            if 'per_seed' in res:
                each = ', '.join(f'{r["ess_f"]:.0f}' for r in res['per_seed'])
                secs = ', '.join(f'{r["seconds"]:.3g}' for r in res['per_seed'])
                print(f'{key}: ESS f by seed {each}; seconds {secs}')
    if args.out_json:
        os.makedirs(os.path.dirname(os.path.abspath(args.out_json)), exist_ok=True)
        with open(args.out_json, 'w') as f:
            json.dump({'args': vars(args), 'probes': probes, 'results': results, 'notes': notes}, f, indent=1)


if __name__ == '__main__':
    main()
