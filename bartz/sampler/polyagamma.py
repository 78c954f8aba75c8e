"""Exact draws from the Polya-Gamma distribution PG(1, c), vectorised.

Logistic BART (``gbart(type='lbart')``) augments each binary outcome with
``omega_i ~ PG(1, f_i)`` (Polson, Scott & Windle 2013): given ``omega``, the
logistic likelihood of ``f`` is Gaussian, ``z_i = (y_i - 1/2) / omega_i ~
N(f_i, 1 / omega_i)``, and the trees are drawn with the weighted Gaussian
sweep. This module draws ``omega``.

``PG(1, c) = J*(1, |c| / 2) / 4`` where ``J*(1, z)`` has density
``cosh(z) exp(-z^2 x / 2) sum_n (-1)^n a_n(x)`` on ``x > 0``, an alternating
series whose partial sums bound it from above and below (Devroye 2009).
The sampler is exact rejection sampling from the envelope given by the
first term ``a_0`` in the form of Polson, Scott & Windle's Algorithm 1:

- right of ``t = 0.64``, ``a_0(x) exp(-z^2 x / 2)`` is an exponential
  density with rate ``K = pi^2 / 8 + z^2 / 2``, sampled exactly;
- left of ``t``, for ``z > 1 / t``, it is ``2 exp(-z)`` times the inverse
  Gaussian density ``IG(1 / z, 1)``, sampled exactly (Michael, Schucany &
  Haas 1976) and kept if below ``t``; for ``z <= 1 / t``, the envelope
  drops the factor ``exp(-z^2 x / 2)``: ``1 / N^2`` with ``|N| > 1 / sqrt(t)``
  (a truncated Levy law), then kept with probability ``exp(-z^2 x / 2)``;
- the candidate is accepted when ``V a_0(x)`` is below the alternating sum,
  decided by partial sums.

Any rejection starts the point over with a fresh component choice (the
weights of the components are the masses of their untruncated envelopes, so
this is plain rejection sampling from one envelope). Each round accepts
most points (at least about 70% for any ``c``), and the loop runs until all
points are accepted, so its length grows like ``log n``. Each point's
draws come from its own random stream, so the result does not depend on
how the points are split into batches or devices.

References
----------
Polson, Scott & Windle (2013), "Bayesian inference for logistic models
using Polya-Gamma latent variables", J. Am. Stat. Assoc. 108(504).
Devroye (2009), "On exact simulation algorithms for some distributions
related to Jacobi theta functions", Stat. Probab. Lett. 79(21).
"""

import math

import jax
import numpy as np
from jax import lax, random
from jax import numpy as jnp
from jax.scipy.special import ndtri

__all__ = ['pg1', 'pg1_mean', 'pg1_var']

_T = 0.64  # switch point of the two forms of the series (Polson, Scott & Windle)
_LEVY_TAIL = 0.5 * math.erfc(1 / math.sqrt(2 * _T))  # P(N < -1 / sqrt(t))
_MAX_ROUNDS = 1000  # a guard against non-finite input only: P(a round rejects) < 0.3
_MAX_TERMS = 50  # likewise: the series decides after one or two terms but with tiny probability


def pg1(key: jax.Array, c: jax.Array, offset=0) -> jax.Array:
    """Draw ``omega_i ~ PG(1, c_i)`` independently for every element of `c`.

    Parameters
    ----------
    key
        A JAX random key, used once.
    c
        Tilting parameters, shape ``(n,)``, float32.
    offset
        Number of the first element in a larger array that `c` is a slice
        of (an int, possibly traced; default 0). Element ``i`` draws from
        its own random stream, numbered ``offset + i``: its draw depends
        only on ``key``, ``c[i]`` and that number, so a slice gets the same
        draws as the whole. `bartz.mcmcstep` passes the position of the
        device's points in the data, so that the draws do not depend on how
        the data are split among devices.

    Returns
    -------
    An ``(n,)`` array. Elements whose `c` is not finite come back NaN.

    Notes
    -----
    A round costs the same for every element it covers, and most elements
    are accepted at the first one. So the rounds run over all elements only
    until at most an eighth of them are left; those are then gathered and
    the next rounds run over them only, and again below a 64th. Which
    rounds an element takes part in does not change its draw.
    """
    c = jnp.asarray(c, jnp.float32)
    if c.ndim != 1:
        msg = f'c must be 1-dimensional, got shape {c.shape}'
        raise ValueError(msg)
    n = c.shape[0]

    def rounds(c, stream, done, r, until):
        def cond(carry):
            done, _, r = carry
            return (jnp.sum(~done) > until) & (r < _MAX_ROUNDS)

        def body(carry):
            done, x_out, r = carry
            accept, x = _candidates(_stream_uniforms(random.fold_in(key, r), stream), c)
            new = ~done & accept
            return done | new, jnp.where(new, x, x_out), r + 1

        return lax.while_loop(cond, body, (done, jnp.full(done.shape, jnp.nan, jnp.float32), r))

    # round 0 over all elements, with uniforms drawn by blocks of streams
    # (half the cost of one key per stream)
    accept, x = _candidates(_block_uniforms(random.fold_in(key, 0), offset, n), c)
    accept &= jnp.isfinite(c)
    done = accept | ~jnp.isfinite(c)
    x_out = jnp.where(accept, x, jnp.nan)

    sizes = [n // d for d in _LEVEL_DIVISORS if n // d >= 1]
    pos = jnp.arange(n)  # where the elements of the current level are in `c`; n for none
    level_c, stream, r = c, offset + pos, jnp.int32(1)
    for size in [*sizes, 0]:
        done, x_level, r = rounds(level_c, stream, done, r, size)
        x_out = x_out.at[pos].set(jnp.where(jnp.isnan(x_level), x_out[jnp.minimum(pos, n - 1)], x_level), mode='drop')
        if size:
            (sel,) = jnp.nonzero(~done, size=size, fill_value=done.shape[0])
            real = sel < done.shape[0]
            sel = jnp.minimum(sel, done.shape[0] - 1)
            pos = jnp.where(real, pos[sel], n)
            level_c, stream, done = level_c[sel], stream[sel], ~real
    return x_out / 4


_LEVEL_DIVISORS = (8, 64)  # see the notes of pg1


def _block_uniforms(key, offset, n):
    """``(n, 4)`` uniforms in (0, 1) for the streams ``offset`` to ``offset +
    n - 1`` (round 0): stream ``s`` gets row ``s % B`` of the block drawn from
    ``fold_in(key, s // B)``, ``B = _BLOCK``."""
    first = offset // _BLOCK
    num_blocks = -(-n // _BLOCK) + 1  # enough for any alignment of the slice
    keys = jax.vmap(lambda b: random.fold_in(key, b))(first + jnp.arange(num_blocks))
    tiny = jnp.finfo(jnp.float32).tiny
    u = jax.vmap(lambda k: random.uniform(k, (_BLOCK, 4), minval=tiny, maxval=1.0))(keys).reshape(-1, 4)
    return lax.dynamic_slice_in_dim(u, offset - first * _BLOCK, n)


_BLOCK = 128


def _stream_uniforms(key, stream):
    """Four uniforms in (0, 1) for each stream number, from ``fold_in(key, s)``
    (rounds after the first, on the elements left)."""
    tiny = jnp.finfo(jnp.float32).tiny
    return jax.vmap(lambda s: random.uniform(random.fold_in(key, s), (4,), minval=tiny, maxval=1.0))(stream)


def _candidates(u, c):
    """One round: a candidate for every element, from its four uniforms
    ``u`` (``(n, 4)``), and whether it is accepted."""
    u_comp, u_prop, u_aux, v = u[:, 0], u[:, 1], u[:, 2], u[:, 3]

    z = jnp.abs(c) / 2
    big_z = z > 1 / _T
    K = math.pi**2 / 8 + z * z / 2
    log_right = math.log(math.pi / 2) - K * _T - jnp.log(K)
    log_left = jnp.where(big_z, math.log(2.0) - z, math.log(4 * _LEVY_TAIL))
    p_right = jax.nn.sigmoid(log_right - log_left)
    mu = 1 / jnp.maximum(z, 1 / _T)  # inverse Gaussian mean, used only where z > 1 / t

    # right: t + Exp(K)
    x_right = _T - jnp.log(u_prop) / K
    # left, z > 1/t: IG(mu, 1) by Michael, Schucany & Haas, kept below t
    w = mu * jnp.square(ndtri(u_prop))
    x_small = mu / (1 + w / 2 + jnp.sqrt(w + w * w / 4))  # the smaller root, without cancellation
    x_ig = jnp.where(u_aux * (mu + x_small) <= mu, x_small, mu * mu / x_small)
    ok_ig = x_ig < _T
    # left, z <= 1/t: 1 / N^2 with |N| > 1/sqrt(t), kept with prob exp(-z^2 x / 2)
    x_levy = 1 / jnp.square(ndtri(u_prop * _LEVY_TAIL))
    ok_levy = u_aux <= jnp.exp(-z * z * x_levy / 2)

    right = u_comp < p_right
    x = jnp.where(right, x_right, jnp.where(big_z, x_ig, x_levy))
    ok = right | jnp.where(big_z, ok_ig, ok_levy)
    return ok & _series_accepts(x, v), x


def _series_accepts(x, v):
    """Whether ``v a_0(x) < sum_n (-1)^n a_n(x)``, by partial sums.

    The terms relative to ``a_0`` are ``(2n + 1) exp(-2 n (n + 1) / x)``
    left of ``t`` and ``(2n + 1) exp(-n (n + 1) pi^2 x / 2)`` right of it;
    in either form the terms decrease from the first on, so odd partial
    sums are lower bounds and even ones upper bounds.
    """
    left = x <= _T

    def term(n):
        nf = n.astype(jnp.float32)
        rate = jnp.where(left, 2 / x, math.pi**2 * x / 2)
        return (2 * nf + 1) * jnp.exp(-nf * (nf + 1) * rate)

    def cond(carry):
        n, _, decided, _ = carry
        return ~jnp.all(decided) & (n < _MAX_TERMS)

    def body(carry):
        n, s, decided, accepted = carry
        n = n + 1
        odd = (n % 2) == 1
        s = jnp.where(odd, s - term(n), s + term(n))
        now_accept = odd & (v < s)
        now_reject = ~odd & (v > s)
        accepted = accepted | (~decided & now_accept)
        decided = decided | now_accept | now_reject
        return n, s, decided, accepted

    carry = (jnp.int32(0), jnp.ones_like(x), ~jnp.isfinite(x), jnp.zeros(x.shape, bool))
    # two terms decide nearly every point: unrolled, they save a loop's overhead
    carry = body(body(carry))
    _, _, _, accepted = lax.while_loop(cond, body, carry)
    return accepted


def pg1_mean(c):
    """``E[PG(1, c)] = tanh(c / 2) / (2 c)`` (1/4 at ``c = 0``), numpy."""
    c = np.abs(np.asarray(c, np.float64))
    small = c < 1e-4
    safe = np.where(small, 1.0, c)
    return np.where(small, 0.25 - c**2 / 48, np.tanh(safe / 2) / (2 * safe))


def pg1_var(c):
    """``Var[PG(1, c)] = (sinh(c) - c) / (4 c^3 cosh(c / 2)^2)`` (1/24 at
    ``c = 0``), numpy."""
    c = np.abs(np.asarray(c, np.float64))
    small = c < 1e-2
    safe = np.where(small, 1.0, c)
    exact = (np.sinh(safe) - safe) / (4 * safe**3 * np.cosh(safe / 2) ** 2)
    return np.where(small, 1 / 24 - c**2 / 120, exact)
