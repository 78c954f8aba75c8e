"""bartz: Bayesian Additive Regression Trees in JAX.

The user layer is `gbart`, which mirrors R's ``BART::gbart``. The layers
below it are usable on their own: `bartz.mcmcstep` (sampler state and one
Gibbs sweep), `bartz.mcmcloop` (the chain), `bartz.grove` (tree arrays),
`bartz.prepcovars` (cut-points), `bartz.jaxext` (autobatch) and
`bartz.diagnostics` (R-hat, ESS, Geweke). The front end itself is split by
concept: `bartz.encoding` (columns, categories, missing values),
`bartz.priors` (outcome types and R's priors), `bartz.fit` (the result
object) and `bartz.io` (`load`, and `BARTFit.save`). `bartz.compile_cache` keeps
compiled programs on disk for the next process; importing bartz switches it
on unless ``BARTZ_COMPILATION_CACHE=0`` or JAX's cache is configured already.
"""

# First, so that nothing is compiled before the cache is set up.
from bartz import compile_cache

compile_cache._setup_default()  # noqa: SLF001

from bartz import (  # noqa: E402
    buckets,
    diagnostics,
    encoding,
    grove,
    io,
    jaxext,
    mcmcloop,
    mcmcstep,
    prepcovars,
    priors,
    sharding,
)
from bartz.BART import BARTFit, gbart, mc_gbart  # noqa: E402
from bartz.io import load  # noqa: E402
from bartz.diagnostics import ConvergenceWarning  # noqa: E402
from bartz.encoding import PositionalColumnsWarning  # noqa: E402
from bartz import estimators, partial, polyagamma  # noqa: E402
from bartz.estimators import BARTClassifier, BARTRegressor  # noqa: E402

__version__ = '0.1.0'

__all__ = [
    'BARTClassifier',
    'BARTFit',
    'BARTRegressor',
    'ConvergenceWarning',
    'PositionalColumnsWarning',
    'buckets',
    'compile_cache',
    'diagnostics',
    'encoding',
    'estimators',
    'gbart',
    'grove',
    'io',
    'jaxext',
    'load',
    'mc_gbart',
    'mcmcloop',
    'mcmcstep',
    'partial',
    'plot',
    'polyagamma',
    'prepcovars',
    'priors',
    'sharding',
]


def __getattr__(name):
    """`bartz.plot` on first use: it imports matplotlib, which ``import
    bartz`` does not need (PEP 562)."""
    if name == 'plot':
        import importlib  # noqa: PLC0415

        return importlib.import_module('bartz.plot')
    msg = f'module {__name__!r} has no attribute {name!r}'
    raise AttributeError(msg)
