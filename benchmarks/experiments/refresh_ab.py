"""Cost of the periodic exact refresh in `run_mcmc`: an interleaved A/B.

A settled experiment (the refresh stays in the loop; the figures are in
`benchmarks/LOG.md`), kept for reference: it reaches into the private
modules of bartz of its time and is not kept working as they move.

Run from the repository root:

    .venv/bin/python benchmarks/experiments/refresh_ab.py 1000 20       # n, pairs
    .venv/bin/python benchmarks/experiments/refresh_ab.py 100000 8

Friedman #1 data (p = 10, 200 trees, standardised y, leaf prior sd
0.25 * 2 / sqrt(200), sigma^2 ~ InvGamma(1.5, 0.05)). A is the compiled chunk of `bartz.mcmcloop.run_mcmc` (100
iterations) without `bartz.mcmcloop._maybe_refresh`, B the same with it;
after a compiling call each, the two run alternately (ABBA order), each call
continuing its own chain. Printed: wall and CPU (process) time per
iteration, the ratio of the medians and the median of the pairwise ratios
(CPU time is less disturbed by other processes on a shared machine), then
the time of one `bartz.mcmcstep.refresh` against 100 steps.
"""

import sys
import time

import jax
import numpy as np
from jax import random

from bartz import _programs, mcmcloop, mcmcstep

# the two runners differ by a patch the key of the stored programs cannot see
_programs.enabled = False


def main(n, pairs, ntree=200, p=10, chunk=100):
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(n, p))
    y = 10 * np.sin(np.pi * x[:, 0] * x[:, 1]) + 20 * (x[:, 2] - 0.5) ** 2 + 10 * x[:, 3] + 5 * x[:, 4] + rng.normal(size=n)
    X = np.floor(x.T * 101).astype(np.uint8)
    y = ((y - y.mean()) / y.std()).astype(np.float32)

    def make_state():
        return mcmcstep.init(
            X=X,
            max_split=np.full(p, 100),
            y=y,
            num_trees=ntree,
            leaf_prior_var=0.25**2 * 4 / ntree,
            sigma2_alpha=1.5,
            sigma2_beta=0.05,
            min_points_per_leaf=5,
        )

    opts = mcmcloop._compiler_options(n)
    original = mcmcloop._maybe_refresh
    runners = {}
    for name in ('A_without', 'B_with'):
        # traced at the first call, under the patch
        mcmcloop._maybe_refresh = (lambda refresh, state, i: state) if name == 'A_without' else original
        runner = mcmcloop._chunk_runner.__wrapped__(chunk, chunk, False, None, None, opts)
        state, _ = runner(random.key(0), make_state(), np.int32(0), np.int32(chunk), np.int32(0), np.int32(1), np.int32(0))
        runners[name] = [runner, jax.block_until_ready(state)]
    mcmcloop._maybe_refresh = original
    wall = {k: [] for k in runners}
    cpu = {k: [] for k in runners}
    for rep in range(pairs):
        for name in runners if rep % 2 == 0 else list(runners)[::-1]:
            runner, state = runners[name]
            t0, c0 = time.perf_counter(), time.process_time()
            start = np.int32(chunk * (rep + 1))
            state, _ = runner(random.key(rep), state, start, np.int32(chunk), np.int32(0), np.int32(1), np.int32(0))
            jax.block_until_ready(state)
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
            runners[name][1] = state
    for label, times in (('wall', wall), ('CPU', cpu)):
        a, b = np.array(times['A_without']), np.array(times['B_with'])
        print(
            f'n={n} {label}: ms/iter without {1e3 * np.median(a) / chunk:.3f}, with {1e3 * np.median(b) / chunk:.3f}; '
            f'ratio of medians {np.median(b) / np.median(a):.3f}, median pairwise ratio {np.median(b / a):.3f}'
        )
    state = runners['B_with'][1]
    refresh, step = jax.jit(mcmcstep.refresh), jax.jit(mcmcstep.step)
    jax.block_until_ready((refresh(state), step(random.key(0), state)))
    t_refresh, t_step = [], []
    for k in range(2 * pairs):
        c0 = time.process_time()
        jax.block_until_ready(refresh(state))
        t_refresh.append(time.process_time() - c0)
        c0 = time.process_time()
        jax.block_until_ready(step(random.key(k), state))
        t_step.append(time.process_time() - c0)
    print(
        f'n={n}: refresh {1e3 * np.median(t_refresh):.3f} ms CPU, one step {1e3 * np.median(t_step):.3f} ms, '
        f'refresh / 100 steps {np.median(t_refresh) / (100 * np.median(t_step)):.4f}'
    )


if __name__ == '__main__':
    main(int(sys.argv[1]), int(sys.argv[2]))
