"""Demo: fit BART to Friedman's benchmark function and summarise the fit.

Run it with ``python -m bartz.demo`` (``make demo``). It simulates Friedman #1,

    y = 10 sin(pi x1 x2) + 20 (x3 - 0.5)^2 + 10 x4 + 5 x5 + N(0, 1),

with ``x ~ U(0, 1)^10`` (five predictors are noise), fits ``gbart`` with R's
default settings (200 trees, 100 burn-in iterations, 1000 kept draws),
predicts on a test set, prints the speed and the accuracy of the fit
against the true function, and writes a PNG with the predictions and the
trace of the error sd. ``python -m bartz.demo --help`` lists the options.

References
----------
Friedman (1991), Multivariate adaptive regression splines, Ann. Statist.
19(1).
"""

import argparse
import sys
import time
import warnings
from pathlib import Path

import jax
import numpy as np

from bartz import ConvergenceWarning, gbart
from bartz.plot import plot_fit, plot_sigma, plt

__all__ = ['friedman1', 'main']


def friedman1(n: int, rng: np.random.Generator, *, p: int = 10, noise_sd: float = 1.0):
    """Simulate Friedman's first benchmark function.

    Parameters
    ----------
    n
        Number of points.
    rng
        Numpy random generator.
    p
        Number of predictors (at least 5; those beyond the fifth are noise).
    noise_sd
        Standard deviation of the Gaussian error.

    Returns
    -------
    x : (n, p) array
        Predictors, uniform on the unit cube.
    y : (n,) array
        Outcome, ``f(x)`` plus noise.
    f : (n,) array
        The true function at ``x``.
    """
    if p < 5:
        msg = f'p must be at least 5, got {p}'
        raise ValueError(msg)
    x = rng.uniform(size=(n, p))
    f = _true_f(x)
    y = f + noise_sd * rng.normal(size=n)
    return x, y, f


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog='python -m bartz.demo',
        description='Fit BART (bartz.gbart) to Friedman #1 and summarise the fit.',
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument('--n', type=int, default=10_000, help='training points')
    parser.add_argument('--ntest', type=int, default=1000, help='test points')
    parser.add_argument('--ndpost', type=int, default=1000, help='kept posterior draws')
    parser.add_argument('--nskip', type=int, default=100, help='burn-in iterations')
    parser.add_argument('--ntree', type=int, default=200, help='number of trees')
    parser.add_argument(
        '--mc-cores', type=int, default=1, help='chains (R: mc.gbart mc.cores), run on all cores; ndpost is their total'
    )
    parser.add_argument('--printevery', type=int, default=100, help='progress every this many iterations (0: silent)')
    parser.add_argument('--out', default='out/demo.png', help='where to write the figure')
    parser.add_argument('--seed', type=int, default=0, help='seed of the simulated data and of the MCMC')
    return parser


def _check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    minimums = (('n', 2), ('ntest', 1), ('ndpost', 1), ('nskip', 0), ('ntree', 1), ('printevery', 0), ('mc_cores', 1))
    for name, minimum in minimums:
        if getattr(args, name) < minimum:
            flag = name.replace('_', '-')
            parser.error(f'--{flag} must be at least {minimum}, got {getattr(args, name)}')
    if args.seed < 0:
        parser.error(f'--seed must be non-negative, got {args.seed}')


def main(argv: list[str] | None = None) -> int:
    """Run the demo; ``argv`` are the command-line options (default ``sys.argv[1:]``).

    Returns
    -------
    The exit status, 0.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    _check_args(parser, args)
    out = Path(args.out)
    if out.suffix.lower() != '.png':
        parser.error(f'--out must be a .png file, got {args.out!r}')

    rng = np.random.default_rng(args.seed)
    x, y, f_train = friedman1(args.n, rng)
    x_test, _, f_test = friedman1(args.ntest, rng)
    keepevery = 1
    chains = args.mc_cores
    iterations = args.nskip + -(-args.ndpost // chains) * keepevery  # per chain

    print(
        f'bartz demo: Friedman #1, n={args.n} training points, p={x.shape[1]}, {args.ntest} test points; '
        f'gbart with ntree={args.ntree}, nskip={args.nskip}, ndpost={args.ndpost}, mc_cores={chains} '
        f'on {jax.devices()[0].platform.upper()} ({jax.device_count()} device(s))'
    )
    fit, total, converged = _fit(args, x, y, x_test, keepevery)
    info = fit.run_info
    if info.interrupted:
        iterations = args.nskip + fit.ndpost // chains * keepevery
    per_iter = max(info.elapsed - info.compile_time, 0.0) / max(iterations, 1)
    rows = _summary(args, fit, f_train, f_test, iterations, per_iter, total, converged)
    label_width = max(len(label) for label, _ in rows)
    print('\nsummary')
    for label, value in rows:
        print(f'  {label:<{label_width}}  {value}')
    _figure(args, out, fit, f_test, per_iter)
    print(f'\nwrote {out}')
    return 0


def _fit(args, x, y, x_test, keepevery):
    """Run `gbart`; return the fit, its time, and whether it passed the
    convergence check (reported in the summary, not as a warning)."""
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always', ConvergenceWarning)
        fit = gbart(
            x,
            y,
            x_test=x_test,
            ntree=args.ntree,
            nskip=args.nskip,
            ndpost=args.ndpost,
            keepevery=keepevery,
            printevery=args.printevery or None,
            seed=args.seed,
            mc_cores=args.mc_cores,
        )
    total = time.perf_counter() - start
    converged = True
    for w in caught:
        if issubclass(w.category, ConvergenceWarning):
            converged = False
        else:  # pass the other warnings on
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return fit, total, converged


def _summary(args, fit, f_train, f_test, iterations, per_iter, total, converged):
    """The rows of the printed summary: (label, value)."""
    info = fit.run_info
    chains = args.mc_cores
    draws = fit.yhat_test
    mean = fit.yhat_test_mean
    low, high = np.quantile(draws, [0.025, 0.975], axis=0)
    rmse = float(np.sqrt(np.mean((mean - f_test) ** 2)))
    coverage = float(np.mean((low <= f_test) & (f_test <= high)))
    width = float(np.mean(high - low))
    rmse_train = float(np.sqrt(np.mean((fit.yhat_train_mean - f_train) ** 2)))

    of_chains = f' x {chains} chains' if chains > 1 else ''
    rows = [
        ('MCMC iterations', f'{iterations} ({args.nskip} burn-in + {fit.ndpost // chains} kept)' + of_chains),
        ('time per iteration' + (' (all chains)' if chains > 1 else ''), f'{1000 * per_iter:.2f} ms'),
        ('compilation', f'{info.compile_time:.1f} s'),
        ('MCMC total (incl. compilation)', f'{info.elapsed:.1f} s'),
        ('gbart total (incl. prediction)', f'{total:.1f} s'),
        ('test RMSE vs true f', f'{rmse:.3f}'),
        ('train RMSE vs true f', f'{rmse_train:.3f}'),
        ('95% interval coverage of f (test)', f'{coverage:.1%} (mean width {width:.3f})'),
        ('posterior mean sigma (true 1)', f'{fit.sigma_mean:.3f}'),
        ('sigest (prior guess)', f'{fit.sigest:.3f}'),
        ('acceptance rate, grow | prune | change | swap', _accept_line(fit.accept_rate)),
        ('splits per draw on x1..x5 | x6..x10', _varcount_line(fit.varcount_mean)),
        ('convergence (sigma, f)', _convergence_line(fit, converged)),
    ]
    if info.interrupted:
        rows.insert(0, ('note', 'interrupted by Ctrl-C: summary of the draws collected so far'))
    return rows


def _figure(args, out, fit, f_test, per_iter):
    """Write the PNG: predictions against the truth, and the trace of sigma."""
    chains = args.mc_cores
    out.parent.mkdir(parents=True, exist_ok=True)
    fig, (ax_fit, ax_sigma) = plt.subplots(1, 2, figsize=(11, 4.8), layout='constrained')
    plot_fit(f_test, fit, ax_fit)
    ax_fit.set_xlabel('true f(x) at the test points')
    ax_fit.set_ylabel('posterior mean of f(x)')
    plot_sigma(fit, ax_sigma)
    ax_sigma.axhline(1.0, color='C2', lw=1.2, ls=':', label='true sigma 1')
    ax_sigma.legend(loc='upper right', fontsize='small')
    chain_note = f', {chains} chains' if chains > 1 else ''
    fig.suptitle(
        f'bartz.gbart on Friedman #1 (n={args.n}, ntree={args.ntree}{chain_note}, {per_iter * 1000:.1f} ms/iteration)'
    )
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _true_f(x: np.ndarray) -> np.ndarray:
    return 10 * np.sin(np.pi * x[:, 0] * x[:, 1]) + 20 * (x[:, 2] - 0.5) ** 2 + 10 * x[:, 3] + 5 * x[:, 4]


def _convergence_line(fit, converged: bool) -> str:
    with warnings.catch_warnings():  # (already reported by `converged`)
        warnings.simplefilter('ignore', ConvergenceWarning)
        stats = fit.diagnostics()
    sigma, f = stats.loc['sigma'], stats.loc['yhat_train (median point)']
    line = (
        f'sigma: R-hat {sigma["rhat"]:.3f}, ESS {sigma["ess_bulk"]:.0f} of {fit.ndpost} draws; '
        f'f: median R-hat {f["rhat"]:.3f}'
    )
    if not converged:
        return line + ': check failed (the chains disagree on f): run a longer burn-in (--nskip, --ndpost)'
    if stats.attrs['notes']:
        # reported, not warned: at large n the error sd of BART mixes slowly
        return line + ': check passed; sigma mixes slowly: for its intervals run longer (--ndpost) or more chains'
    return line + ': check passed'


def _accept_line(accept_rate: dict) -> str:
    return ' | '.join(f'{accept_rate[move]:.1%}' for move in ('grow', 'prune', 'change', 'swap'))


def _varcount_line(varcount_mean) -> str:
    counts = np.asarray(varcount_mean, dtype=np.float64)
    first = ' '.join(f'{c:.0f}' for c in counts[:5])
    rest = ' '.join(f'{c:.0f}' for c in counts[5:])
    return f'{first} | {rest}'


if __name__ == '__main__':
    sys.exit(main())
