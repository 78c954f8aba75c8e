"""The Gibbs updates after the sweep over trees: the error variance, the
probit and logistic latents, right-censored responses, DART's split probabilities (with Linero's data
augmentation, and the Poisson draws it needs).

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
from bartz.sampler._move_bits import level_of_node
from bartz.sampler._move_rules import exhausted_on_path, path_rules
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
    eps = truncated_normal_above(u, a)
    z = jnp.where(state.y, mean + eps, mean - eps)
    real = state.forest.leaf_indices[0] != 0  # padding has no leaf: keep its residual 0
    return state._replace(z=z, resid=jnp.where(real, z - mean, 0.0))


def truncated_normal_above(u, a):
    """``eps ~ N(0, 1)`` truncated to ``eps > a``, from uniforms `u` in (0, 1)
    by the inverse CDF: ``-eps = ndtri(u * ndtr(-a))`` (any shape, float32).

    Below ``a = -10`` the truncation has probability under 1e-23 and is
    ignored. Far in the tail (``a > 5``) float32 underflows, and ``eps - a``
    is exponential with rate ``a`` to within a relative ``O(1/a^2)``."""
    a = jnp.maximum(a, -10.0)
    inverse_cdf = -ndtri(jnp.maximum(u * ndtr(-jnp.minimum(a, 5.0)), 1e-37))
    tail = a - jnp.log(u) / jnp.maximum(a, 1.0)
    return jnp.where(a > 5.0, tail, jnp.maximum(inverse_cdf, a))


def draw_censored(key, state: State, data_axis=None) -> State:
    """Right-censored outcomes (the accelerated failure time model of R's
    ``abart``): each censored response is missing data, known only to lie
    above its censoring value ``c_i``, and is drawn from its conditional,

        y_i | f, sigma ~ N(f(x_i), sigma^2 w_i^2) truncated to y_i > c_i,

    then its residual ``y_i - f(x_i)`` updated; the other responses stay.
    ``state.censor_bound`` holds ``c_i`` (-inf where ``y_i`` is observed),
    ``state.y`` the current responses (Sparapani, Spanbauer & McCulloch
    2021, the section on ``abart``)."""
    mean = state.y - state.resid
    n = mean.shape[0]
    offset = 0 if data_axis is None else lax.axis_index(data_axis) * n
    u = _point_uniforms(key, offset, n)
    censored = jnp.isfinite(state.censor_bound)
    variance = state.sigma2 if state.prec_weights is None else state.sigma2 / jnp.where(censored, state.prec_weights, 1.0)
    sd = jnp.sqrt(variance)
    a = jnp.where(censored, (state.censor_bound - mean) / sd, -10.0)
    y = mean + sd * truncated_normal_above(u, a)
    return state._replace(
        y=jnp.where(censored, y, state.y), resid=jnp.where(censored, y - mean, state.resid)
    )


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
    rho)`` over the grid ``k / 1001``, k = 1..1000, as R's BART.

    Predictors with no cut-point keep probability 0. The two copies of a
    column with missing values (`bartz.encoding`) are one predictor
    (``dart.group``): its split count is theirs summed, and each copy gets
    half its probability (the uniform choice of the copy, as without DART).

    The tree prior chooses a node's split variable with probability
    ``s_v / P_good``, ``P_good`` the total of ``s`` over the predictors
    with a usable cut-point at the node, so ``Dirichlet(theta/p + counts)``
    is the conditional of ``s`` only where every predictor is usable at
    every split node. With ``dart.options.augment`` (Linero 2018, sec. 3.2)
    the update is exact: the rejected draws of the choice read as "draw
    ``v ~ s`` over all predictors until it is usable" are drawn given the
    trees and the current ``s`` (`dart_rejection_rates`, `poisson`) and
    added to the counts; theta's step given ``s`` is unchanged. R's BART
    (2.9.9) adds instead, at every birth proposal (accepted or not),
    ``s_j / (P_good P_bad)`` to the count of each unusable ``j``, truncated
    to an integer and never removed: a deterministic stand-in (its comment
    means the expected count, which is ``s_j / P_good``), not a draw of
    the conditional law.
    """
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
    if dart.options.augment:
        key_s, key_aug = random.split(key_s)
        alpha, log_gamma_huge = _augment(key_aug, state, alpha)
    log_gamma = random.loggamma(key_s, jnp.where(usable_g, alpha, 1.0))
    if dart.options.augment:
        log_gamma = jnp.where(jnp.isfinite(log_gamma_huge), log_gamma_huge, log_gamma)
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


# a Poisson mean above which ``log Gamma(alpha + N)``, ``N`` the Poisson
# count, is ``log(alpha + mean)`` to well within float32 rounding: its sd,
# ``(2 / mean) ** 0.5 < 2**-23``, is far below the spacing of float32 numbers
# near ``log(mean) > 33`` (``2**-18``)
_LOG_HUGE_RATE = 48 * 0.6931472

def _augment(key, state: State, alpha):
    """Add the rejected draws of Linero's augmentation to the Dirichlet
    parameters `alpha` of the predictors; also return ``log Gamma(alpha)``
    where the count is too large for float32 to hold its noise (-inf
    elsewhere)."""
    dart = state.dart
    forest = state.forest
    num = alpha.shape[0]
    key_lambda, key_counts = random.split(key)
    exponential = random.exponential(key_lambda, forest.split_tree.shape)
    log_rate = dart_rejection_rates(exponential, forest.var_tree, forest.split_tree, state.max_split, state.log_s)
    # the copies of a column: a Poisson of the summed rates
    log_rate = _segment_logsumexp(log_rate, dart.group, num)
    huge = log_rate > _LOG_HUGE_RATE
    rate = jnp.exp(jnp.where(huge, -jnp.inf, log_rate))
    latent = poisson(key_counts, rate)
    return alpha + latent, jnp.where(huge, jnp.logaddexp(log_rate, jnp.log(alpha)), -jnp.inf)


def dart_rejection_rates(exponential, var_tree, split_tree, max_split, log_s):
    """Log Poisson means of Linero's latent rejected draws of each column.

    Read the prior of a node's split variable, ``s_v / P_good``, as: draw
    ``v ~ s`` over all the columns, again while ``v`` has no usable
    cut-point at the node. Then the number ``K`` of rejected draws before
    the accepted one is geometric, ``P(K = k) = P_bad^k P_good`` (``P_bad =
    1 - P_good``, the total of ``s`` over the unusable columns), and given
    ``K`` the rejected columns are multinomial with probabilities ``s_j /
    P_bad`` over the unusable ones: the counts ``n_j`` are negative
    multinomial with ``r = 1``, ``P(n) = P_good (sum n)! / prod(n_j!) prod
    s_j^n_j``, whose factor ``prod s_j^n_j`` makes ``s | trees, n`` the
    Dirichlet of the counts plus ``n``. Its Gamma-Poisson form: with
    ``lambda ~ Exponential(rate P_good)`` and ``n_j | lambda ~
    Poisson(lambda s_j)`` independent, ``K | lambda ~ Poisson(lambda
    P_bad)``, so ``P(K = k) = int P_good e^(-P_good l) e^(-P_bad l) (P_bad
    l)^k / k! dl = P_good P_bad^k`` (as ``P_good + P_bad = 1``), and given
    ``K`` the ``n_j`` are multinomial ``(K, s_j / P_bad)``: the same law.
    Summed over the split nodes, given the ``lambda`` of each, column ``j``
    gets ``Poisson(s_j Lambda_j)`` rejected draws, ``Lambda_j`` the total
    of ``lambda`` over the split nodes where ``j`` has no usable cut-point.

    Only the variables of a node's ancestors can be unusable there (the
    columns without cut-points aside), so the work is per node and level
    of the tree, not per column: ``P_good`` is the total of ``s`` but over
    those (`_log_total_except`), in a form that float32 does not round to 0
    where ``s`` is concentrated on them, as ``1 - P_bad`` would.

    Parameters
    ----------
    exponential
        Exponential(1) draws, ``(m, H/2)``, one per node (``lambda =
        exponential / P_good``; those of non-split nodes are not used).
    var_tree, split_tree
        The trees, ``(m, H/2)``.
    max_split
        Cut-points of each column, ``(p,)``: the columns without any have
        ``s = 0`` and no rejected draws.
    log_s
        Log split probabilities (normalised here over the columns with
        cut-points), ``(p,)``.

    Returns
    -------
    ``log(s_j Lambda_j)``, ``(p,)`` float32; -inf where there are no draws.
    """
    num = max_split.shape[0]
    half = split_tree.shape[1]
    usable = max_split > 0
    log_s = jnp.where(usable, log_s, -jnp.inf)
    log_s = log_s - jax.scipy.special.logsumexp(log_s)
    order = jnp.argsort(-log_s)  # decreasing s, the columns without cut-points last
    rank = jnp.zeros(num, jnp.int32).at[order].set(jnp.arange(num, dtype=jnp.int32))
    log_suffix = lax.cumlogsumexp(jnp.append(log_s[order], -jnp.inf), reverse=True)

    def node_terms(var, split, node):
        depth = level_of_node(node)
        path = path_rules(var, split, max_split, log_s, node, depth)
        levels = jnp.arange(path.var.shape[0])
        repeated = jnp.any((path.var[:, None] == path.var[None, :]) & (levels[None, :] < levels[:, None]), axis=1)
        unusable = exhausted_on_path(path, depth) & ~repeated  # each unusable variable once
        log_p_good = _log_total_except(log_suffix, jnp.where(unusable, rank[path.var], num))
        return path.var, unusable, log_p_good

    nodes = jnp.arange(half)
    var, unusable, log_p_good = jax.vmap(jax.vmap(node_terms, (None, None, 0)), (0, 0, None))(var_tree, split_tree, nodes)
    split_node = (split_tree != 0) & (nodes >= 1)
    log_lambda = jnp.where(split_node, jnp.log(exponential) - log_p_good, -jnp.inf)
    terms = jnp.where(unusable, log_lambda[..., None], -jnp.inf)  # (m, H/2, L)
    log_big_lambda = _segment_logsumexp(terms.reshape(-1), var.reshape(-1), num)
    return jnp.where(usable, log_s + log_big_lambda, -jnp.inf)


def _log_total_except(log_suffix, ranks):
    """Log of the total of ``s`` over the columns but those of ranks
    `ranks` (in decreasing ``s``; ``p`` for none), from the log totals
    `log_suffix` of ``s`` from each rank on, ``(p + 1,)``.

    The total is that of the runs of ranks between the excluded ones, each
    the difference ``S(a) - S(b)`` of two suffix totals, rounded like
    ``S(a)``: the run, plus ``s`` at the excluded rank ``b`` and at the
    other excluded ranks after it (each at most the run, as ``s`` decreases
    along the ranks), plus columns of the total. So the total keeps the
    relative precision of the logs, within a factor of about twice the
    number of excluded ranks, however small it is against 1."""
    num = log_suffix.shape[0] - 1
    ranks = jnp.sort(ranks)
    nxt = jnp.append(ranks, num)
    start = jnp.minimum(jnp.concatenate([jnp.zeros(1, ranks.dtype), ranks + 1]), nxt)
    log_a, log_b = log_suffix[start], log_suffix[nxt]
    nonempty = (start < nxt) & jnp.isfinite(log_a)
    safe_a = jnp.where(nonempty, log_a, 0.0)
    diff = jnp.where(nonempty, jnp.minimum(log_b - safe_a, 0.0), -1.0)
    log_run = jnp.where(nonempty, safe_a + jnp.log(-jnp.expm1(diff)), -jnp.inf)
    return jax.scipy.special.logsumexp(log_run)


def _segment_logsumexp(x, segment, num):
    """``log(segment_sum(exp(x)))``, each segment shifted by its own maximum
    (a segment of small values next to one of large ones does not underflow)."""
    top = jax.ops.segment_max(x, segment, num)
    top = jnp.where(jnp.isfinite(top), top, 0.0)
    return top + jnp.log(jax.ops.segment_sum(jnp.exp(x - top[segment]), segment, num))


def poisson(key, rate):
    """Poisson draws of float32 means `rate` (any shape), as float32.

    Knuth's product of uniforms below 10, Hörmann's transformed rejection
    (PTRS, 1993) above, as ``jax.random.poisson``, but with the log
    probability of the candidate in a form that keeps float32 precision for
    large means: ``jax.random.poisson`` (jax 0.10.2) evaluates ``-mean + k
    log(mean) - lgamma(k + 1)``, terms of size ``mean log(mean)`` that
    cancel, in the means' dtype, returns int32 and takes only threefry
    keys."""
    key_small, key_large = random.split(key)
    small = rate < 10
    knuth = _poisson_knuth(key_small, jnp.where(small, rate, 0.0))
    lam = jnp.where(small, 1e5, rate)  # (finite, so that the loop below stops)
    log_lam = jnp.log(lam)
    b = 0.931 + 2.53 * jnp.sqrt(lam)
    a = -0.059 + 0.02483 * b
    inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
    v_r = 0.9277 - 3.6224 / (b - 2)

    def body(carry):
        key, k_out, accepted = carry
        key, key_u, key_v = random.split(key, 3)
        u = random.uniform(key_u, lam.shape) - 0.5
        v = random.uniform(key_v, lam.shape)
        us = 0.5 - jnp.abs(u)
        k = jnp.floor((2 * a / us + b) * u + lam + 0.43)
        log_accept = jnp.log(v * inv_alpha / (a / (us * us) + b))
        ok = (us >= 0.07) & (v <= v_r)
        ok = ok | ((k >= 0) & ~((us < 0.013) & (v > us)) & (log_accept <= _poisson_log_pmf(k, lam, log_lam)))
        return key, jnp.where(accepted, k_out, k), accepted | ok

    init = (key_large, jnp.zeros_like(lam), jnp.zeros(lam.shape, bool))
    _, large, _ = lax.while_loop(lambda carry: ~jnp.all(carry[2]), body, init)
    return jnp.where(small, knuth, large)


def _poisson_knuth(key, lam):
    """Poisson draws of small means: the number of uniforms whose running
    product stays above ``exp(-lam)``."""

    def body(carry):
        key, k, log_prod, active = carry
        key, key_u = random.split(key)
        log_prod = log_prod + jnp.log(random.uniform(key_u, lam.shape))
        still = active & (log_prod > -lam)
        return key, k + still, log_prod, still

    init = (key, jnp.zeros_like(lam), jnp.zeros_like(lam), lam > 0)
    return lax.while_loop(lambda carry: jnp.any(carry[3]), body, init)[1]


def _poisson_log_pmf(k, lam, log_lam):
    """``log P(K = k)``, K Poisson of mean `lam` (floats, ``k >= 0``): direct
    for small k, else with Stirling's series, ``k - lam - k log1p((k - lam) /
    lam)`` being of the size of the result rather than of ``k log k``."""
    direct = -lam + k * log_lam - jax.scipy.special.gammaln(k + 1)
    kk = jnp.maximum(k, 1.0)
    series = -0.5 * jnp.log(2 * jnp.pi * kk) - 1 / (12 * kk) + 1 / (360 * kk**3)
    stirling = (kk - lam) - kk * jnp.log1p((kk - lam) / lam) + series
    return jnp.where(k < 30, direct, stirling)
