"""The Gibbs updates after the sweep over trees: the error variance, the
probit and logistic latents, DART's split probabilities.

What this module says of XLA's code generation was measured with jaxlib 0.10.2.
"""

import jax
from jax import lax, random
from jax import numpy as jnp
from jax.scipy.special import ndtr, ndtri

from bartz import kernels
from bartz.forest import grove
from bartz.kernels.rng import _point_uniforms, gamma
from bartz.sampler import polyagamma
from bartz.sampler.state import State

_psum = kernels.psum


def draw_sigma2(key, state: State, data_axis=None) -> State:
    """Conjugate inverse gamma draw of the error variance."""
    resid = state.resid
    sq = resid * resid if state.prec_weights is None else resid * resid * state.prec_weights
    # the real points (padding has no leaf): one tree's counts, summed in
    # halves down to 32 (XLA's CPU backend splits a longer reduction in two kernels)
    counts = state.forest.leaf_count[0]
    while counts.shape[0] > 32:
        half = counts.shape[0] // 2
        counts = counts[:half] + counts[half:]
    n = jnp.sum(counts)
    alpha = state.sigma2_alpha + n.astype(jnp.float32) / 2
    beta = state.sigma2_beta + _psum(jnp.sum(sq), data_axis) / 2
    sigma2 = beta / gamma(key, alpha)
    return state._replace(sigma2=sigma2.astype(jnp.float32))


def draw_latent(key, state: State, data_axis=None) -> State:
    """Albert & Chib: latent ~ N(f, 1) truncated to the side given by y."""
    mean = state.z - state.resid
    n = mean.shape[0]
    offset = 0 if data_axis is None else lax.axis_index(data_axis) * n
    u = _point_uniforms(key, offset, n)
    # standardised truncation point, mirrored so we always sample a lower tail
    a = jnp.where(state.y, state.probit_threshold - mean, mean - state.probit_threshold)
    a = jnp.maximum(a, -10.0)  # below, the truncation has probability < 1e-23
    # eps ~ N(0, 1) | eps > a  <=>  -eps = ndtri(u * ndtr(-a)); far in the
    # tail (a > 5, probability < 3e-7 of y given f) float32 underflows, and
    # eps - a is exponential with rate a to within a relative O(1/a^2)
    inverse_cdf = -ndtri(jnp.maximum(u * ndtr(-jnp.minimum(a, 5.0)), 1e-37))
    tail = a - jnp.log(u) / jnp.maximum(a, 1.0)
    eps = jnp.where(a > 5.0, tail, jnp.maximum(inverse_cdf, a))
    z = jnp.where(state.y, mean + eps, mean - eps)
    real = state.forest.leaf_indices[0] != 0  # padding has no leaf: keep its residual 0
    return state._replace(z=z, resid=jnp.where(real, z - mean, 0.0))


def draw_latent_logit(key, state: State, data_axis=None) -> State:
    """Logistic BART by Polya-Gamma augmentation (Polson, Scott & Windle 2013).

    With ``psi_i = offset + f_i``, ``omega_i | psi_i ~ PG(1, psi_i)``
    exactly (`bartz.polyagamma`); given ``omega``, the logistic likelihood
    of ``psi`` is that of ``(y_i - 1/2) / omega_i ~ N(psi_i, 1 / omega_i)``,
    so the trees are drawn by the weighted Gaussian sweep with ``sigma^2 =
    1``, precision weights ``omega`` and pseudo-responses ``z`` (stored minus
    the offset). The sweep sums the precisions of each leaf afresh from the
    weights, so a logistic state carries no per-leaf precision sums
    (``forest.leaf_prec`` is None): keeping them equal to the new ``omega``
    would take one more scatter per tree and sweep, for a field nothing
    reads.
    """
    forest = state.forest
    mean = state.z - state.resid
    n = mean.shape[0]
    offset = 0 if data_axis is None else lax.axis_index(data_axis) * n
    real = forest.leaf_indices[0] != 0  # padding has no leaf
    psi = jnp.where(real, state.logit_offset + mean, 0.0)
    omega = polyagamma.pg1(key, psi, offset)
    omega = jnp.where(real, omega, 0.0)
    kappa = jnp.where(state.y, 0.5, -0.5)
    z = jnp.where(real, kappa / jnp.where(real, omega, 1.0) - state.logit_offset, 0.0)
    return state._replace(z=z, resid=jnp.where(real, z - mean, 0.0), prec_weights=omega)


_THETA_GRID_SIZE = 1000


def draw_dart(key, state: State) -> State:
    """DART: ``s | counts ~ Dirichlet(theta/p + counts)`` over the
    predictors, then theta by griddy Gibbs on ``lambda = theta / (theta +
    rho)`` over the grid ``k / 1001``, k = 1..1000, as R's BART. Predictors
    with no cut-point keep probability 0. The two copies of a column with
    missing values (`bartz.encoding`) are one predictor (``dart.group``):
    its split count is theirs summed, and each copy gets half its
    probability (the uniform choice of the copy, as without DART)."""
    dart = state.dart
    key_s, key_theta = random.split(key)
    num = state.max_split.shape[0]
    usable = state.max_split > 0
    group = dart.group
    copies = jax.ops.segment_sum(usable.astype(jnp.float32), group, num)  # usable copies per predictor
    usable_g = copies > 0
    p = jnp.sum(usable_g).astype(jnp.float32)
    counts = grove.var_count_scatter(state.forest.var_tree, state.forest.split_tree, num)
    counts = jax.ops.segment_sum(counts, group, num)
    alpha = dart.theta / p + counts
    log_gamma = random.loggamma(key_s, jnp.where(usable_g, alpha, 1.0))
    log_gamma = jnp.where(usable_g, log_gamma, -jnp.inf)
    log_s_g = log_gamma - jax.scipy.special.logsumexp(log_gamma)
    log_s = jnp.where(usable, log_s_g[group] - jnp.log(jnp.maximum(copies[group], 1.0)), -jnp.inf)

    lam = jnp.arange(1, _THETA_GRID_SIZE + 1, dtype=jnp.float32) / (_THETA_GRID_SIZE + 1)
    theta_grid = lam * dart.rho / (1 - lam)
    sum_log_s = jnp.sum(jnp.where(usable_g, log_s_g, 0.0))
    loglik = jax.scipy.special.gammaln(theta_grid) - p * jax.scipy.special.gammaln(theta_grid / p) + theta_grid / p * sum_log_s
    logprior = (dart.a - 1) * jnp.log(lam) + (dart.b - 1) * jnp.log1p(-lam)
    theta = theta_grid[random.categorical(key_theta, loglik + logprior)]
    theta = jnp.where(dart.theta_fixed, dart.theta, theta)

    on = dart.on
    return state._replace(
        log_s=jnp.where(on, log_s, state.log_s),
        dart=dart._replace(theta=jnp.where(on, theta, dart.theta)),
    )
