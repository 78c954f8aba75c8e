"""A tree's leaves in the sweep: their conjugate draws and noise, and the
output row through which a tree hands its result to the next one.

What this module says of XLA's code generation was measured with jaxlib 0.10.2.
"""

import numpy as np
from jax import lax, random
from jax import numpy as jnp

from bartz import kernels
from bartz._compile import programs as _programs
from bartz.kernels.rng import normal_from_words, _random_words, _unit_float

# the heap slot (never a node) where a tree's output row keeps its flags
_FLAGS_SLOT = 0


def _row_accepted(row):
    """Whether the tree of output row `row` (``(H, columns)``) accepted its move (its flags' bit 0)."""
    return (lax.bitcast_convert_type(row[_FLAGS_SLOT, 1], jnp.int32) & 1).astype(bool)


def final_leaves(cells, remapped, accepted):
    """The final leaves of points in their cells: ``cells`` ``(..., n)``,
    ``remapped`` ``(..., 3, 2)`` the (at most two) cells whose points can
    change leaf (-1: unused), their current and their proposed leaves,
    ``accepted`` ``(...)``: those cells go to their proposed leaf if the
    move was accepted, else to their current one; the other cells are their
    leaf's slot already."""
    to = jnp.where(accepted[..., None], remapped[..., 2, :], remapped[..., 1, :])
    return kernels.replace_indices(cells, [remapped[..., 0, c, None] for c in range(2)], [to[..., c, None] for c in range(2)])


def _leaf_draw(stats, noise, inv_sigma2, inv_tau2):
    """Conjugate draw of leaf values from their statistics ``(..., C)``
    (residual sum, precision, ...) and standard normal `noise`."""
    post_prec = stats[..., 1] * inv_sigma2 + inv_tau2
    post_mean = stats[..., 0] * inv_sigma2 / post_prec
    return post_mean + noise * lax.rsqrt(post_prec)


@_programs.inlined
def accept_and_noise(key, num_trees, heap_size):
    """Log acceptance uniforms ``(m,)`` and standard normal leaf noise
    ``(m, H)`` by heap slot, from ``H / 2`` values per tree, one per slot of
    the deepest level of the heap, which `noise_slot` maps to the slots:
    the leaves of any tree get distinct (independent) values.

    Half the Threefry words of one value per slot. The words are expanded,
    not the normals: XLA fuses the normals into the expansion, and emitted
    their code once per level of the heap (jaxlib 0.10.2)."""
    size = max(1, heap_size // 2)
    words = _random_words(key, num_trees * (1 + 2 * size))
    if words is None:
        key_u, key_noise = random.split(key)
        u = random.uniform(key_u, (num_trees,), minval=jnp.finfo(jnp.float32).tiny, maxval=1.0)
        return jnp.log(u), noise_by_slot(random.normal(key_noise, (num_trees, size)))
    u = jnp.maximum(_unit_float(words[:num_trees]), jnp.finfo(jnp.float32).tiny)
    pairs = noise_by_slot(words[num_trees:].reshape(2, num_trees, size))
    return jnp.log(u), normal_from_words(pairs[0], pairs[1])


def noise_slot(heap_size: int) -> np.ndarray:
    """For each heap slot ``(H,)``, which of the ``H / 2`` leaf noise values
    of `accept_and_noise` it takes: the position, on the deepest level of
    the heap, of the slot's leftmost descendant there (the map that
    `noise_by_slot` applies, written as indices for the tests).

    The leaves of a tree partition that level into the ranges of their
    descendants, so their leftmost descendants differ: the leaves of any
    tree take distinct (independent) values. Two slots share a value only
    when one descends from the other by left children alone, and a node
    and its descendant are never leaves of the same tree. (Slot 0, never a
    node, takes value 0.)"""
    slot = np.arange(heap_size)
    depth = np.floor(np.log2(np.maximum(slot, 1))).astype(np.int64)
    deepest = max(0, heap_size.bit_length() - 2)
    return np.where(slot == 0, 0, (slot << (deepest - depth)) - (1 << deepest)).astype(np.int32)


def noise_by_slot(noise):
    """``noise[..., noise_slot(H)]`` for ``noise`` ``(..., H / 2)``, as
    strided slices (the slots of depth d take every ``2**(D - d)``-th value,
    D the deepest level), which XLA fuses into the kernel that reads them."""
    size = noise.shape[-1]
    parts = [noise[..., :1]]  # slot 0
    stride = size
    while stride >= 1:
        parts.append(noise[..., ::stride])
        stride //= 2
    return jnp.concatenate(parts, axis=-1)
