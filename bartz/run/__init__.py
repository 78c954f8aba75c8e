"""Running the chain: `run_mcmc` (burn-in, thinning, traces, progress,
Ctrl-C), several chains, and the data and chain axes of a device mesh."""
