"""R's alligator.R against bartz, with R BART 2.9.9's sampler (``moves='R'``)
and with bartz's grow/prune sampler of the stated prior.

    python benchmarks/experiments/alligator_r_sampler.py 99 1

Prints, per sampler and seed, the RMS and maximum of z = (bartz - R) /
(sqrt(2) se) over the 80 cells x 5 categories, and the same between each
pair of seeds.
"""

import sys
from pathlib import Path

import numpy as np
import pandas as pd

import bartz

R = Path(__file__).resolve().parents[2].parent / 'shared' / 'data' / 'r-bart'
table = pd.read_csv(R / 'alligator.csv')
ref = pd.read_csv(R / 'reference' / 'alligator_mbart.csv').sort_values(['row', 'category'])['prob_mean'].to_numpy()
codes = {c: pd.Categorical(table[c]).codes + 1 for c in ('lake', 'size', 'sex', 'food')}
cells = np.column_stack([codes['lake'], codes['size'], codes['sex']])
rows = np.repeat(np.arange(len(table)), table['count'])


def standard_error(p):
    ess = bartz.diagnostics.ess(p, chain_axis=None, draw_axis=0)
    return p.std(0, ddof=1) / np.sqrt(ess)


for moves in ('R', ('grow', 'prune')):
    draws = {}
    for seed in [int(a) for a in sys.argv[1:]] or [99]:
        fit = bartz.mc_mbart(cells[rows], codes['food'][rows], cells, mc_cores=1, seed=seed, printevery=None, moves=moves)
        p = np.asarray(fit.prob_test)
        draws[seed] = p
        z = (p.mean(0) - ref) / (np.sqrt(2) * standard_error(p))
        print(f'moves={moves!r} seed {seed} vs R: RMS z {np.sqrt(np.mean(z**2)):.2f}, max |z| {np.abs(z).max():.2f}')
    seeds = list(draws)
    for i, a in enumerate(seeds):
        for b in seeds[i + 1 :]:
            z = (draws[a].mean(0) - draws[b].mean(0)) / np.hypot(standard_error(draws[a]), standard_error(draws[b]))
            print(f'moves={moves!r} seed {a} vs seed {b}: RMS z {np.sqrt(np.mean(z**2)):.2f}, max |z| {np.abs(z).max():.2f}')
