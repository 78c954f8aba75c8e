"""The random numbers of the sampler: JAX's Threefry-2x32 generator with the
cipher written out in array operations (one fused kernel per call instead of
JAX's rolled loop), uniforms, keys, gamma and normal variates.

For a threefry key each function draws from its own stream of the same
generator as the named `jax.random` function; other kinds of keys go to
`jax.random`.
"""

import math

import jax
import numpy as np
from jax import lax, random
from jax import numpy as jnp

from bartz._compile import programs as _programs


@_programs.inlined
def _threefry2x32(key0, key1, x0, x1):
    """The Threefry-2x32 block cipher (20 rounds; Salmon et al. 2011), the
    generator of JAX's default keys, written out in array operations.

    JAX's own CPU lowering runs the rounds in a rolled loop of five
    iterations, each a dozen small kernels: in the sweep, about ten such
    loops per iteration. Written out, each call is one fused kernel.
    """
    key2 = key0 ^ key1 ^ np.uint32(0x1BD11BDA)
    keys = (key0, key1, key2)
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    x0 = x0 + key0
    x1 = x1 + key1
    for i in range(5):
        for r in rotations[i % 2]:
            x0 = x0 + x1
            x1 = (x1 << np.uint32(r)) | (x1 >> np.uint32(32 - r))
            x1 = x1 ^ x0
        x0 = x0 + keys[(i + 1) % 3]
        x1 = x1 + keys[(i + 2) % 3] + np.uint32(i + 1)
    return x0, x1


def _is_threefry(words):
    """Whether `words`, a key's data, are those of a threefry key."""
    return words.shape == (2,) and words.dtype == np.uint32


def _random_words(key, num):
    """`num` random uint32 words from a threefry `key`: the cipher applied
    to the counters 0, 1, ...; None for other kinds of keys."""
    data = random.key_data(key)
    if not _is_threefry(data):
        return None
    half = -(-num // 2)
    count = jnp.arange(half, dtype=jnp.uint32)
    x0, x1 = _threefry2x32(data[0], data[1], count, jnp.zeros_like(count))
    return jnp.concatenate([x0, x1])[:num]


def uniform(key, shape):
    """Draw uniforms in (0, 1), as ``random.uniform(key, shape, minval=tiny)``
    does, from another stream of the same generator.

    Parameters
    ----------
    key : jax.Array
        A random key.
    shape : tuple of int
        The shape of the draws.

    Returns
    -------
    Float32 uniforms of shape `shape`, at least the smallest normal float32.
    """
    num = math.prod(shape)
    words = _random_words(key, num)
    tiny = jnp.finfo(jnp.float32).tiny
    if words is None:
        return random.uniform(key, shape, minval=tiny, maxval=1.0)
    return jnp.maximum(_unit_float(words), tiny).reshape(shape)


def fold_in(key, data):
    """``random.fold_in(key, data)`` for a uint32-range `data`, bit for bit,
    with the cipher written out (`_threefry2x32`); other kinds of keys go
    to `random.fold_in`."""
    key_words = random.key_data(key)
    if not _is_threefry(key_words):
        return random.fold_in(key, data)
    data = jnp.asarray(data).astype(jnp.uint32)
    y0, y1 = _threefry2x32(key_words[0], key_words[1], jnp.zeros_like(data), data)
    return random.wrap_key_data(jnp.stack([y0, y1]), impl='threefry2x32')


def key_on_host(seed):
    """``random.key(seed)`` for a seed in ``[0, 2**64)``, made on the host:
    with the default threefry generator the key's words are ``(seed >> 32,
    seed & 0xffffffff)``, as JAX makes them from a 64-bit seed (``(0, seed)``
    below ``2**32``), so no program is compiled (JAX's `random.key` compiles
    two). Other generators get ``random.key`` of the low word, with the high
    word folded in when it is not 0."""
    high, low = seed >> 32, seed & 0xFFFFFFFF
    if jax.config.jax_default_prng_impl != 'threefry2x32':
        key = random.key(low)
        return key if high == 0 else random.fold_in(key, high)
    return random.wrap_key_data(np.array([high, low], np.uint32), impl='threefry2x32')


def fold_in_on_host(key, data):
    """`fold_in` computed with NumPy for a threefry `key` (no program is
    compiled; the same key, bit for bit); other keys go to
    `random.fold_in`."""
    words = np.asarray(random.key_data(key))
    if not _is_threefry(words):
        return random.fold_in(key, data)
    with np.errstate(over='ignore'):
        y0, y1 = _threefry2x32(words[0], words[1], np.uint32(0), np.uint32(data))
    return random.wrap_key_data(np.array([y0, y1], np.uint32), impl='threefry2x32')


_GAMMA_MAX_TRIES = 1 << 16


def gamma(key, alpha):
    """Draw from Gamma(`alpha`, 1) by Marsaglia & Tsang's (2000) rejection
    method, from words of `_threefry2x32` (as `random.gamma`, another
    stream; its loop calls JAX's rolled cipher several times per try).

    Try ``c`` (from 1) takes its normal from the two words of counter ``c``
    of stream 1 (`normal_from_words`: the normal's law to float32
    accuracy out to 9.2 sd, where ``ndtri`` of a 23-bit uniform has none
    beyond 5.3 sd) and its acceptance uniform from counter ``c`` of stream
    2, in one call of the cipher; with ``alpha < 1``, the boost's uniform
    is counter 0 of stream 1. The normal is AS 241's three rational
    functions, not ``ndtri``'s six (about 60 traced operations per try
    instead of 240, and fewer kernels in the compiled loop).

    Parameters
    ----------
    key : jax.Array
        A random key (other kinds than threefry go to `random.gamma`).
    alpha : jax.Array
        The shape, a float32 scalar.

    Returns
    -------
    A float32 draw; NaN for a shape that is not finite.
    """
    key_words = random.key_data(key)
    if key_words.shape != (2,) or key_words.dtype != jnp.uint32:
        return random.gamma(key, alpha)
    tiny = jnp.finfo(jnp.float32).tiny

    streams = np.array([1, 2], np.uint32)

    def constants():
        """``d``, ``c`` and whether the shape is finite: computed where they
        are read, in the loop (kernels of their own before it otherwise)."""
        # alpha < 1: Gamma(alpha) = Gamma(alpha + 1) * U^(1 / alpha)
        d = jnp.where(alpha < 1, alpha + 1, alpha) - 1.0 / 3.0
        return d, lax.rsqrt(9.0 * d), jnp.isfinite(d)

    @_programs.inlined
    def body(carry):
        counter, _, _ = carry
        d, c, _ = constants()
        hi, lo = _threefry2x32(key_words[0], key_words[1], jnp.broadcast_to(counter, streams.shape), streams)
        x = normal_from_words(hi[0], lo[0])
        u_accept = jnp.maximum(_unit_float(hi[1]), tiny)
        v = (1.0 + c * x) ** 3
        ok = (v > 0) & (jnp.log(u_accept) < 0.5 * x * x + d - d * v + d * jnp.log(jnp.maximum(v, tiny)))
        return counter + 1, ok, d * v

    # a try is accepted with probability above 0.95 for any finite shape;
    # a NaN or infinite shape ends the loop at once (and gives NaN), the
    # cap keeps it finite whatever happens
    def more(carry):
        counter, ok, _ = carry
        return ~ok & constants()[2] & (counter < _GAMMA_MAX_TRIES)

    _, _, value = lax.while_loop(more, body, (jnp.uint32(1), jnp.bool_(False), jnp.float32(jnp.nan)))
    value = jnp.where(constants()[2], value, jnp.nan)
    u_boost = jnp.maximum(_unit_float(_threefry2x32(key_words[0], key_words[1], jnp.uint32(0), jnp.uint32(1))[0]), tiny)
    return jnp.where(alpha < 1, value * u_boost ** (1.0 / alpha), value)


def _unit_float(words):
    """Floats in [0, 1) from uint32 words: 23 random mantissa bits in
    [1, 2), minus 1."""
    return lax.bitcast_convert_type((words >> np.uint32(9)) | np.uint32(0x3F800000), jnp.float32) - 1.0


def _split(key, num):
    """`num` new keys from `key` (as ``random.split``, another stream)."""
    words = _random_words(key, 2 * num)
    if words is None:
        return random.split(key, num)
    return random.wrap_key_data(words.reshape(2, num).T, impl='threefry2x32')


def _point_uniforms(key, offset, n):
    """Uniforms in (0, 1) for the points ``offset`` to ``offset + n - 1`` of
    the whole data set, the same whichever way the points are split among
    devices: point ``i`` gets number ``i % B`` of the stream
    ``fold_in(key, i // B)``, with ``B = _UNIFORM_BLOCK``. Memory
    O(n + B), not O(total n)."""
    block = _UNIFORM_BLOCK
    num_blocks = -(-n // block) + 1  # enough for any alignment of the slice
    first = offset // block
    blocks = first + jnp.arange(num_blocks)
    tiny = jnp.finfo(jnp.float32).tiny
    key_words = random.key_data(key)
    if key_words.shape == (2,) and key_words.dtype == jnp.uint32:
        # uniform(fold_in(key, b), (block,)) for every block b at once
        k0, k1 = _threefry2x32(key_words[0], key_words[1], jnp.zeros_like(blocks, jnp.uint32), blocks.astype(jnp.uint32))
        count = jnp.arange(block // 2, dtype=jnp.uint32)
        x0, x1 = _threefry2x32(k0[:, None], k1[:, None], count, jnp.zeros_like(count))
        u = jnp.maximum(_unit_float(jnp.concatenate([x0, x1], axis=1)), tiny).reshape(-1)
    else:
        keys = jax.vmap(lambda b: random.fold_in(key, b))(blocks)
        u = jax.vmap(lambda k: random.uniform(k, (block,), minval=tiny, maxval=1.0))(keys).reshape(-1)
    return lax.dynamic_slice_in_dim(u, offset - first * block, n)


_UNIFORM_BLOCK = 1024


def _normal_quantile(u):
    """Standard normal quantile of `u` in (0, 1), float32: Wichura's
    algorithm AS 241 (PPND7), three rational functions of degree 3.

    As accurate as `jax.scipy.special.ndtri` in float32 (relative error
    below 4e-7 on the grid of `uniform`, tails included) at about 60% of
    its cost, which matters for the leaf noise of a sweep (trees x half the heap
    size values per iteration): ``ndtri`` evaluates six rational functions
    of degree 8 and two logarithms per value.

    References
    ----------
    Wichura, M. J. (1988). Algorithm AS 241: The percentage points of the
    normal distribution. Applied Statistics 37(3), 477-484.
    """
    q = u - 0.5
    r = 0.180625 - q * q
    central = q * _poly(_PPND7_A, r) / _poly(_PPND7_B, r)
    s = jnp.sqrt(-jnp.log(jnp.minimum(u, 1.0 - u)))
    near = s <= 5.0
    t = jnp.where(near, s - 1.6, s - 5.0)
    num = jnp.where(near, _poly(_PPND7_C, t), _poly(_PPND7_E, t))
    den = jnp.where(near, _poly(_PPND7_D, t), _poly(_PPND7_F, t))
    return jnp.where(jnp.abs(q) <= 0.425, central, jnp.where(q < 0, -num, num) / den)


def _poly(coef, x):
    """``sum(coef[k] * x**k)`` by Horner's rule."""
    out = jnp.full_like(x, coef[-1])
    for c in coef[-2::-1]:
        out = out * x + c
    return out


# AS 241 PPND7: central region |u - 1/2| <= 0.425, then the tails for
# sqrt(-log(min(u, 1 - u))) up to 5 and beyond
_PPND7_A = (3.3871327179, 50.434271938, 159.29113202, 59.109374720)
_PPND7_B = (1.0, 17.895169469, 78.757757664, 67.187563600)
_PPND7_C = (1.4234372777, 2.7568153900, 1.3067284816, 0.17023821103)
_PPND7_D = (1.0, 0.73700164250, 0.12021132975)
_PPND7_E = (6.6579051150, 3.0812263860, 0.42868294337, 0.017337203997)
_PPND7_F = (1.0, 0.24197894225, 0.012258202635)


def normal_from_words(hi, lo):
    """Standard normals from two uint32 words each, by inversion with
    precision where it matters.

    The lowest bit of `hi` is the sign; the other 31 bits and the 32 of `lo`
    make a uniform ``u = (hi >> 1 + (lo + 1/2) 2**-32) 2**-32`` on ``(0,
    1/2)``, rounded to float32 (relative error 2**-24 at every scale, down to
    ``u ~ 2**-64``), and the draw is ``-+Phi^-1(u)`` (`_normal_quantile`, AS 241,
    accurate to about 1e-7 relative over the whole range). The law is the
    normal's to float32 accuracy out to the largest possible draw,
    ``-Phi^-1(2**-65) ~ 9.2`` sd (probability beyond: ~2e-20). `ndtri` of a 23-bit uniform
    (mass 2**-23 at -13 sd, none beyond +5.3 sd) is far coarser.
    """
    frac = (lo.astype(jnp.float32) + 0.5) * np.float32(2.0**-32)
    u = ((hi >> np.uint32(1)).astype(jnp.float32) + frac) * np.float32(2.0**-32)
    z = _normal_quantile(u)  # <= 0
    return jnp.where((hi & np.uint32(1)) == 1, -z, z)
