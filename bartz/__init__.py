"""bartz: Bayesian Additive Regression Trees in JAX.

The user layer is `gbart`, which mirrors R's ``BART::gbart``. The layers
below it are usable on their own: `bartz.mcmcstep` (sampler state and one
Gibbs sweep), `bartz.mcmcloop` (the chain), `bartz.grove` (tree arrays),
`bartz.prepcovars` (cut-points), `bartz.jaxext` (autobatch) and
`bartz.diagnostics` (R-hat, ESS, Geweke).
"""

from bartz import diagnostics, grove, jaxext, mcmcloop, mcmcstep, prepcovars, sharding
from bartz.BART import BARTFit, gbart, mc_gbart

__version__ = '0.1.0'

__all__ = [
    'BARTFit',
    'diagnostics',
    'gbart',
    'grove',
    'jaxext',
    'mc_gbart',
    'mcmcloop',
    'mcmcstep',
    'prepcovars',
    'sharding',
]
