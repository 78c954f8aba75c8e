# %% [markdown]
# # bartz quickstart: BART the R way, in Python
#
# This script reads like an R session with the `BART` package: simulate
# data, `gbart(x.train, y.train, x.test)`, look at the result, predict,
# check convergence, plot. It runs with plain `python notebooks/quickstart.py`,
# and cell by cell (`# %%`) in VS Code, Spyder, or Jupyter via jupytext.
#
# Set `BARTZ_QUICK=1` for a small, fast run (the test suite does this), and
# `BARTZ_OUT=<folder>` to choose where the figure goes (default `out/`).

# %%
import os
from pathlib import Path

import numpy as np
import pandas as pd

import bartz
from bartz import diagnostics, gbart
from bartz.plot import plot_fit, plot_sigma, plt

QUICK = os.environ.get('BARTZ_QUICK', '') not in ('', '0')
OUT = Path(os.environ.get('BARTZ_OUT', 'out'))

# R: set.seed(99); n <- 1000; ...
n, n_test = (300, 100) if QUICK else (2000, 500)
ndpost, nskip = (100, 100) if QUICK else (1000, 100)
ntree = 50 if QUICK else 200
print(f'bartz {bartz.__version__}; n={n}, ndpost={ndpost}, nskip={nskip}, ntree={ntree}')

# %% [markdown]
# ## Data: Friedman #1
#
# `y = 10 sin(pi x1 x2) + 20 (x3 - 0.5)^2 + 10 x4 + 5 x5 + N(0, 1)`; the
# predictors `x6..x10` are noise. As in R, `x` is `(n, p)`: one row per
# observation. A pandas DataFrame keeps its column names in the results.

# %%
rng = np.random.default_rng(99)


def friedman(x):
    return 10 * np.sin(np.pi * x['x1'] * x['x2']) + 20 * (x['x3'] - 0.5) ** 2 + 10 * x['x4'] + 5 * x['x5']


columns = [f'x{j}' for j in range(1, 11)]
x_train = pd.DataFrame(rng.uniform(size=(n, 10)), columns=columns)
y_train = friedman(x_train) + rng.normal(size=n)
x_test = pd.DataFrame(rng.uniform(size=(n_test, 10)), columns=columns)
f_test = friedman(x_test).to_numpy()
x_train.head()

# %% [markdown]
# ## Fit
#
# R: `fit <- gbart(x.train, y.train, x.test = x.test, ndpost = 1000, nskip = 100)`.
# Argument names are R's with `.` replaced by `_`.

# %%
fit = gbart(x_train, y_train, x_test=x_test, ntree=ntree, ndpost=ndpost, nskip=nskip, seed=99, printevery=None)
print(fit)

# %% [markdown]
# The result has R's attributes: `yhat_train` / `yhat_test` are
# `(ndpost, n)` draws of f, `sigma` the error sd with burn-in (as R),
# `varcount` the number of splits on each predictor per draw.

# %%
print('yhat.test:', fit.yhat_test.shape, ' sigma (burn-in + kept):', fit.sigma.shape)
lower, upper = np.quantile(fit.yhat_test, [0.025, 0.975], axis=0)
rmse = np.sqrt(np.mean((fit.yhat_test_mean - f_test) ** 2))
coverage = np.mean((lower <= f_test) & (f_test <= upper))
print(f'test RMSE vs true f: {rmse:.3f}; 95% interval coverage: {coverage:.0%}')
print(f'posterior mean sigma: {fit.sigma_mean:.3f} (true 1); prior guess sigest: {fit.sigest:.3f}')
print('acceptance rates:', {k: round(v, 3) for k, v in fit.accept_rate.items()})
print('mean number of splits per predictor (x6..x10 are noise):')
print(fit.varcount_mean.round(1).to_string())

# %% [markdown]
# ## Predict at new points
#
# R: `pred <- predict(fit, x.new)` gives `(ndpost, m)` draws. With
# `kind='mean'` bartz returns the posterior mean directly, without storing
# the draws; `max_memory` bounds the temporary memory, so `x_new` can be
# larger than the device memory would allow in one piece.

# %%
x_new = pd.DataFrame(rng.uniform(size=(5, 10)), columns=columns)
draws = fit.predict(x_new)
mean = fit.predict(x_new, kind='mean', max_memory=2**20)
print('draws:', draws.shape)
table = pd.DataFrame({'true f': friedman(x_new), 'posterior mean': mean, 'sd': draws.std(axis=0)})
print(table.astype(float).round(2))
assert np.allclose(mean, draws.mean(axis=0), atol=1e-3 * np.abs(mean).max())

# %% [markdown]
# ## Convergence diagnostics
#
# Single chain: effective sample size and Geweke's z of the error sd and of
# a few test predictions (R: `effectiveSize`, `gewekediag`).

# %%
ess_sigma = diagnostics.ess(fit.sigma_, chain_axis=None, draw_axis=0)
z_sigma = diagnostics.geweke(fit.sigma_)
print(f'sigma: ESS {ess_sigma:.0f} of {fit.ndpost} draws, Geweke z {z_sigma:.2f}')
print(diagnostics.summary(fit.yhat_test[:, :4], chain_axis=None, draw_axis=0).round(2))

# %% [markdown]
# ## Plots

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5), layout='constrained')
plot_fit(f_test, fit, ax1)
plot_sigma(fit, ax2)
OUT.mkdir(parents=True, exist_ok=True)
fig.savefig(OUT / 'quickstart.png', dpi=90)
plt.close(fig)
print('wrote', OUT / 'quickstart.png')

# %% [markdown]
# ## A binary outcome: probit BART
#
# R: `gbart(x.train, y.train, type = 'pbart')`. Defaults follow R: 50 trees,
# `keepevery = 10`. `prob_test` holds draws of `P(y = 1 | x)`.

# %%
p_true = 1 / (1 + np.exp(-(friedman(x_train) - 14) / 2))
y_binary = (rng.uniform(size=n) < p_true).astype(int)
fit_binary = gbart(
    x_train,
    y_binary,
    x_test=x_test,
    type='pbart',
    ndpost=ndpost,
    nskip=nskip,
    keepevery=2 if QUICK else 10,
    printevery=None,
)
p_test = 1 / (1 + np.exp(-(f_test - 14) / 2))
print(fit_binary)
print(f'mean absolute error of P(y=1|x) on the test set: {np.mean(np.abs(fit_binary.prob_test_mean - p_test)):.3f}')
