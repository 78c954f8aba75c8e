"""Convergence diagnostics for MCMC draws: R-hat, effective sample size, Geweke.

Numpy and scipy; these functions take draws already on the host (for example
the attributes of a `gbart` result, or any array of MCMC output) and never
run JAX. Arguments are checked by `bartz.prep.checks` before any computation.

The R-hat and ESS estimators follow Vehtari, Gelman, Simpson, Carpenter &
Bürkner (2021) exactly as implemented in Stan, the R package ``posterior`` and
ArviZ: chains are split in halves, draws are rank-normalised, autocovariances
are computed by FFT and summed with Geyer's initial monotone sequence
estimator. `geweke` reproduces R's ``coda::geweke.diag`` and
``BART::gewekediag``.

The modules, bottom to top: `chains` (checks, layout, split chains,
batches), `ranks` (rank normalisation), `spectral` (autocovariances, the
spectral density at zero, Geweke), `mixing` (R-hat and ESS), `tables`
(`summary`), `convergence` (the check of a fit and its warning).

Array convention
----------------
The R-hat / ESS functions take an array shaped ``(chains, draws, ...)`` by
default (move the axes with ``chain_axis`` and ``draw_axis``, or pass
``chain_axis=None`` for a single chain) and compute the diagnostic
independently for every element of the remaining trailing axes.

References
----------
.. [1] Vehtari, A., Gelman, A., Simpson, D., Carpenter, B. and Bürkner, P.-C.
   (2021). "Rank-normalization, folding, and localization: an improved R-hat
   for assessing convergence of MCMC". *Bayesian Analysis* 16(2), 667-718.
   doi:10.1214/20-BA1221
.. [2] Geyer, C. J. (1992). "Practical Markov chain Monte Carlo". *Statistical
   Science* 7(4), 473-483.
.. [3] Geweke, J. (1992). "Evaluating the accuracy of sampling-based approaches
   to calculating posterior moments". In *Bayesian Statistics 4*, Oxford
   University Press.
.. [4] Plummer, M., Best, N., Cowles, K. and Vines, K. (2006). "CODA:
   convergence diagnosis and output analysis for MCMC". *R News* 6(1), 7-11.
"""

from bartz.diagnostics.chains import MIN_DRAWS
from bartz.diagnostics.convergence import (
    CHECK_POINTS,
    ESS_MIN,
    RHAT_MAX,
    RHAT_WARN,
    ConvergenceStatistics,
    ConvergenceWarning,
    assess,
    check_points,
    convergence_message,
    convergence_notes,
    convergence_problems,
    convergence_statistics,
    notes_message,
    stuck_chains,
    trees_changed,
)
from bartz.diagnostics.mixing import ess, ess_bulk, ess_tail, rhat
from bartz.diagnostics.spectral import geweke
from bartz.diagnostics.tables import summary

__all__ = [
    'CHECK_POINTS',
    'ESS_MIN',
    'MIN_DRAWS',
    'RHAT_MAX',
    'RHAT_WARN',
    'ConvergenceStatistics',
    'ConvergenceWarning',
    'assess',
    'check_points',
    'convergence_message',
    'convergence_notes',
    'convergence_problems',
    'convergence_statistics',
    'ess',
    'ess_bulk',
    'ess_tail',
    'geweke',
    'rhat',
    'notes_message',
    'stuck_chains',
    'summary',
    'trees_changed',
]
