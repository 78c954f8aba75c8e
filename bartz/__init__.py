"""bartz: Bayesian Additive Regression Trees in JAX.

The user layer is `gbart`, which mirrors R's ``BART::gbart``. The package is
layered, each folder importing only those above it in this list:

- `bartz.jaxext`: `autobatch`, memory-bounded batching of jittable functions;
- `bartz._compile`: the persistent compilation cache and stored programs
  (public as `bartz.compile_cache`);
- `bartz.kernels`: the data-axis kernels and the plan that chooses them;
- `bartz.forest`: trees as heap arrays, traversal and evaluation
  (`bartz.grove`);
- `bartz.sampler`: the Markov chain (`bartz.mcmcstep`: state, one Gibbs
  sweep; the moves; Polya-Gamma draws);
- `bartz.run`: the MCMC loop, chains and sharding (`bartz.mcmcloop`,
  `bartz.sharding`), warm starts;
- `bartz.prep`: host-side argument checks, column encoding
  (`bartz.encoding`), cut-points (`bartz.prepcovars`), R's priors
  (`bartz.priors`), the size ladder (`bartz.buckets`);
- `bartz.diagnostics`: R-hat, ESS, Geweke, summary tables, the convergence
  check of a fit;
- `bartz.api`: `gbart`, the result object `BARTFit`, save and load
  (`bartz.io`), the estimators, partial dependence;
- `bartz.plot`, `bartz.demo`.

The names in parentheses are the module paths of earlier releases, kept as
aliases of the modules they name. `bartz.compile_cache` keeps compiled
programs on disk for the next process; importing bartz switches it on unless
``BARTZ_COMPILATION_CACHE=0`` or JAX's cache is configured already.
"""

import sys

# First, so that nothing is compiled before the cache is set up.
from bartz._compile import cache as compile_cache

compile_cache._setup_default()  # noqa: SLF001

from bartz import diagnostics, jaxext  # noqa: E402
from bartz.api import estimators, io, partial  # noqa: E402
from bartz.api.abart import AFTFit, abart, mc_abart  # noqa: E402
from bartz.api.estimators import BARTClassifier, BARTRegressor  # noqa: E402
from bartz.api.gbart import BARTFit, gbart, mc_gbart  # noqa: E402
from bartz.api.io import load  # noqa: E402
from bartz.api.treedraws import from_treedraws  # noqa: E402
from bartz.api.rfamily import lbart, mc_lbart, mc_pbart, mc_wbart, pbart, predict, wbart  # noqa: E402
from bartz.api.survival import SurvBARTFit, mc_surv_bart, surv_bart, surv_pre_bart  # noqa: E402
from bartz.api.crisk import (  # noqa: E402
    Crisk2BARTFit, CriskBARTFit, crisk2_bart, crisk_bart, crisk_pre_bart, mc_crisk2_bart, mc_crisk_bart,
)  # fmt: skip
from bartz.api.recur import RecurBARTFit, mc_recur_bart, recur_bart, recur_pre_bart  # noqa: E402
from bartz.api.multinomial import MBARTFit, mbart, mbart2, mc_mbart, mc_mbart2  # noqa: E402
from bartz.diagnostics import ConvergenceWarning  # noqa: E402
from bartz.forest import grove  # noqa: E402
from bartz.prep import cutpoints as prepcovars  # noqa: E402
from bartz.prep import encoding, priors  # noqa: E402
from bartz.prep import sizes as buckets  # noqa: E402
from bartz.prep.encoding import PositionalColumnsWarning  # noqa: E402
from bartz.run import loop as mcmcloop  # noqa: E402
from bartz.run import sharding  # noqa: E402
from bartz.sampler import polyagamma  # noqa: E402
from bartz.sampler import step as mcmcstep  # noqa: E402

# `import bartz.mcmcstep` and the like find the modules under their old paths
for _name in ('buckets', 'compile_cache', 'encoding', 'estimators', 'grove', 'io', 'mcmcloop', 'mcmcstep',
              'partial', 'polyagamma', 'prepcovars', 'priors', 'sharding'):
    sys.modules[f'{__name__}.{_name}'] = globals()[_name]
del _name

from bartz._version import __version__  # noqa: E402

__all__ = [
    'AFTFit',
    'BARTClassifier',
    'BARTFit',
    'BARTRegressor',
    'ConvergenceWarning',
    'Crisk2BARTFit',
    'CriskBARTFit',
    'MBARTFit',
    'PositionalColumnsWarning',
    'RecurBARTFit',
    'SurvBARTFit',
    'abart',
    'buckets',
    'compile_cache',
    'crisk2_bart',
    'crisk_bart',
    'crisk_pre_bart',
    'diagnostics',
    'encoding',
    'estimators',
    'from_treedraws',
    'gbart',
    'grove',
    'io',
    'jaxext',
    'lbart',
    'load',
    'mbart',
    'mbart2',
    'mc_abart',
    'mc_crisk2_bart',
    'mc_crisk_bart',
    'mc_gbart',
    'mc_lbart',
    'mc_mbart',
    'mc_mbart2',
    'mc_pbart',
    'mc_recur_bart',
    'mc_surv_bart',
    'mc_wbart',
    'mcmcloop',
    'mcmcstep',
    'partial',
    'pbart',
    'plot',
    'polyagamma',
    'predict',
    'prepcovars',
    'priors',
    'recur_bart',
    'recur_pre_bart',
    'sharding',
    'surv_bart',
    'surv_pre_bart',
    'wbart',
]


def __getattr__(name):
    """`bartz.plot` on first use: it imports matplotlib, which ``import
    bartz`` does not need (PEP 562)."""
    if name == 'plot':
        import importlib  # noqa: PLC0415

        return importlib.import_module('bartz.plot')
    msg = f'module {__name__!r} has no attribute {name!r}'
    raise AttributeError(msg)
