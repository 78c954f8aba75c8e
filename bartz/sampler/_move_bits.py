"""The machine side of the tree proposal: packed masks and element-wise reductions.

`bartz.sampler.moves.propose_tree` runs under a vmap over the trees, on
arrays of a few dozen entries per tree, so on CPU its cost is the number of
XLA kernels, not arithmetic: every reduction (or argmax, cumsum, gather) is a
kernel, while element-wise code fuses (jaxlib 0.10.2). So the helpers here
write the reductions over the few levels of a path, the 4 kinds or the
blocks of a cumulative sum as element-wise code, pack the boolean masks over
the heap into 32-bit words (counts are population counts, lookups are
shifts), and keep values XLA would recompute in every kernel that uses them
in kernels of their own (`computed`). Each computes what its docstring says
in plain terms; `bartz.sampler.reference` computes the same plainly.
"""

import functools
from typing import NamedTuple

import jax
import numpy as np
from jax import numpy as jnp

from bartz.forest import grove


@functools.cache
def ancestor_tables(heap_size: int):
    """Static tables of the ancestors of each node.

    ``anc[k, j]`` is the ancestor of node ``k`` at level ``j``, ``valid[k, j]``
    says it is a proper ancestor, ``right[k, j]`` says the path to ``k`` turns
    right at it.
    """
    depth = heap_size.bit_length() - 1
    levels = depth - 1
    nodes = np.arange(heap_size)
    node_level = grove.node_depths(heap_size)
    anc = np.zeros((heap_size, max(levels, 1)), np.int32)
    valid = np.zeros_like(anc, bool)
    right = np.zeros_like(anc, bool)
    for k in nodes[1:]:
        d = node_level[k]
        for j in range(d):
            anc[k, j] = k >> (d - j)
            valid[k, j] = True
            right[k, j] = (k >> (d - j - 1)) & 1
    return anc, valid, right


def opaque_one(u):
    """The int32 1, as ``1 + (u < 0)`` from the uniform `u` in (0, 1).

    What: always 1, since `u` is never negative. Why: XLA cannot prove it
    constant, so dividing by it (`computed`) is not folded away and keeps a
    value in a kernel of its own. Measured with jaxlib 0.10.2 on CPU.
    """
    return 1 + (u < 0).astype(jnp.int32)


def computed(one, *values):
    """`values`, each computed once: XLA fuses cheap element-wise code into
    every kernel that uses it, so a long chain of scalar operations used by
    many kernels is recomputed in each. A division is expensive in XLA's
    fusion rules, so dividing by `one`, a 1 that XLA cannot see is constant,
    makes it compute the value in a kernel of its own.

    Values of one shape and kind (integers and booleans as int32, floats
    by their type) are stacked and divided together: one kernel for the
    group instead of one per value (each costs compile time), the same
    values. Measured with jaxlib 0.10.2 on CPU."""
    groups = {}
    for i, value in enumerate(values):
        floating = jnp.issubdtype(value.dtype, jnp.floating)
        kind = value.dtype if floating or value.dtype not in (jnp.bool_, jnp.int32) else jnp.int32
        groups.setdefault((value.shape, kind), []).append(i)
    out = [None] * len(values)
    for (_, kind), members in groups.items():
        stacked = jnp.stack([values[i].astype(kind) for i in members])
        if jnp.issubdtype(kind, jnp.floating):
            stacked = stacked / one.astype(kind)
        else:
            stacked = jax.lax.div(stacked, one.astype(kind))
        for row, i in enumerate(members):
            out[i] = stacked[row] if values[i].dtype != jnp.bool_ else stacked[row].astype(bool)
    return tuple(out)


def level_of_node(node):
    """Level of `node` in the heap (0 for nodes 0 and 1), from its count of
    leading zero bits."""
    return 31 - jax.lax.clz(jnp.maximum(node, 1).astype(jnp.int32))


def path_levels(half: int) -> int:
    """Number of levels of internal nodes (at least 1, for the tables)."""
    return max(half.bit_length() - 1, 1)


def _on_ancestors(x, num_nodes):
    """``x[anc[k, j]]`` (0 where ``j`` is not a proper ancestor level) for the
    first `num_nodes` nodes, shape ``(num_nodes, L)``, from the per-node
    ``x`` of shape ``(H/2,)``: slices and repeats, not a gather."""
    levels = path_levels(x.shape[0])
    zero = jnp.zeros((), x.dtype)
    rows = [jnp.zeros((1, levels), x.dtype)]  # node 0
    d = 0
    while 2**d < num_nodes:
        width = 2**d
        cols = [
            jnp.repeat(x[2**j : 2 ** (j + 1)], 2 ** (d - j)) if j < d else jnp.broadcast_to(zero, (width,))
            for j in range(levels)
        ]
        rows.append(jnp.stack(cols, axis=1))
        d += 1
    return jnp.concatenate(rows)[:num_nodes]


def _down_the_tree(x):
    """Sum of ``x`` over each node and its proper ancestors, shape ``(H,)``."""
    heap_size = x.shape[0]
    out = [x[:1], x[1:2]]
    d = 1
    while 2**d < heap_size:
        out.append(x[2**d : 2 ** (d + 1)] + jnp.repeat(out[-1], 2))
        d += 1
    return jnp.concatenate(out)


def num_exhausted(var_tree, split_tree, max_split, heap_size):
    """Number of predictors with no usable split index left at each node.

    A predictor is exhausted at a node when the splits on it along the path
    leave no split index between them; it stays exhausted below. Only the
    parent's split variable can become exhausted at a child, so the count
    accumulates along the path: O(H * depth) per tree, independent of p.
    """
    _, valid, right = ancestor_tables(heap_size)
    half = heap_size // 2
    var = var_tree.astype(jnp.int32)
    cut = split_tree.astype(jnp.int32)
    # range of each internal node's own split variable at that node
    path_var = _on_ancestors(var, half)  # (H/2, L)
    path_cut = _on_ancestors(cut, half)
    top = max_split[var]
    lo, hi = jnp.zeros_like(cut), top
    for j in range(path_var.shape[1]):
        same = (path_var[:, j] == var) & valid[:half, j]
        lo = jnp.maximum(lo, jnp.where(same & right[:half, j], path_cut[:, j], 0))
        hi = jnp.minimum(hi, jnp.where(same & ~right[:half, j], path_cut[:, j] - 1, top))
    # the variable is newly exhausted at the left child if no index is left
    # in [lo + 1, cut - 1], at the right child if none in [cut + 1, hi]
    left_exhausted = cut - 1 <= lo
    right_exhausted = hi <= cut
    newly = jnp.stack([left_exhausted, right_exhausted], axis=1).reshape(heap_size)  # node 2k + r
    newly = newly & (jnp.arange(heap_size) > 1)  # nodes 0 and 1 have no parent split
    return _down_the_tree(newly.astype(jnp.int32))




def finite_or_zero(x):
    """`x` where finite, else 0."""
    return jnp.where(jnp.isfinite(x), x, 0.0)


def _cumsum_like_xla(x):
    """``jnp.cumsum(x)`` of a short 1-d `x` with the same rounding on CPU:
    XLA (jaxlib 0.10.2) sums sequentially within blocks of 16 and adds the cumulative sums
    of the blocks' totals (the same way, recursively)."""
    size = x.shape[0]
    if size <= 16:
        out = [x[0]]
        for i in range(1, size):
            out.append(out[-1] + x[i])
        return jnp.stack(out)
    num = -(-size // 16)
    blocks = jnp.pad(x, (0, 16 * num - size)).reshape(num, 16)
    inner = [blocks[:, 0]]
    for i in range(1, 16):
        inner.append(inner[-1] + blocks[:, i])
    inner = jnp.stack(inner, axis=1)
    totals = _cumsum_like_xla(inner[:, -1])
    before = jnp.concatenate([jnp.zeros(1, x.dtype), totals[:-1]])
    return (before[:, None] + inner).reshape(-1)[:size]


def choose_variable(usable, log_s, max_split, shift, u):
    """A variable drawn with probability proportional to ``where(usable,
    exp(log_s - shift), 0)`` by inverse cdf, ``argmax(cumsum(weight) > u *
    sum(weight))`` (0 if all are 0), and its ``max_split``.

    The cumulative sums are those of `jnp.cumsum` on CPU, in blocks of 16
    (`_cumsum_like_xla`), so the draw is the same, but only the blocks'
    totals and the block of the draw are summed, element-wise."""
    p = log_s.shape[0]
    block = min(p, 16)
    num = -(-p // block)
    pad = num * block - p
    weight = jnp.where(usable, jnp.exp(log_s - shift), 0.0)
    weight = jnp.pad(weight, (0, pad)).reshape(num, block)
    tops = jnp.pad(max_split, (0, pad)).reshape(num, block)
    totals = weight[:, 0]
    for i in range(1, block):
        totals = totals + weight[:, i]
    if num > 1:
        totals = _cumsum_like_xla(totals)
    total = totals[num - 1]
    threshold = u * total
    # the block of the first cumulative sum above the threshold, and the sum before it
    which = jnp.int32(0)
    before = jnp.float32(0.0)
    for b in range(num - 1):
        below = totals[b] <= threshold
        which = which + below
        before = jnp.where(below, totals[b], before)
    row, row_tops = weight[0], tops[0]
    for b in range(1, num):
        row = jnp.where(which == b, weight[b], row)
        row_tops = jnp.where(which == b, tops[b], row_tops)
    inner = row[0]
    index = (before + inner <= threshold).astype(jnp.int32)
    top = row_tops[0]
    for i in range(1, block):
        inner = inner + row[i]
        top = jnp.where(index == i, row_tops[i], top)
        index = index + (before + inner <= threshold)
    found = total > threshold
    var = jnp.where(found, which * block + index, 0)
    return var, jnp.where(found, top, max_split[0])



class TreeSummary(NamedTuple):
    """The nodes of a tree where each kind of move can act, as packed masks."""

    leaf: jax.Array  # (H,) bool
    words: jax.Array  # (F, W) uint32: the masks below (rows LEAF, ...), bit k % 32 of word k // 32 for node k
    counts: jax.Array  # (4,) int32: eligible nodes of each kind
    log_probs: jax.Array  # (4,) float32: log probability of each kind


# rows of `TreeSummary.words`: leaves, nodes whose children are leaves, such
# nodes (not the root) with a leaf sibling, growable leaves, then the bits
# of `num_exhausted`
LEAF, NOG, SWAPPABLE, GROWABLE, EXHAUSTED = range(5)


def _exhausted_bits(heap_size: int) -> int:
    return max(heap_size.bit_length() - 2, 1).bit_length()


def _eligible(counts, kinds):
    """The kinds with an eligible node, among the static `kinds`."""
    return counts > 0 if all(kinds) else (counts > 0) & np.array(kinds)


def _log_probs(counts, move_probs, kinds):
    """Log probability of each kind of move given the eligible counts (and
    the static `kinds` that can be proposed at all)."""
    weight = jnp.where(_eligible(counts, kinds), move_probs, 0.0)
    total = ((weight[0] + weight[1]) + weight[2]) + weight[3]
    return jnp.log(weight) - jnp.log(jnp.where(total > 0, total, 1.0))


def _pack(masks):
    """Pack ``(F, H)`` bool masks into ``(F, W)`` uint32 words, bit ``i % 32``
    of word ``i // 32`` for slot ``i``."""
    num, size = masks.shape
    bits = min(size, 32)
    shifted = masks.reshape(num, size // bits, bits).astype(jnp.uint32) << jnp.arange(bits, dtype=jnp.uint32)
    return jnp.sum(shifted, axis=-1, dtype=jnp.uint32)


def bits_at(words, index):
    """The bits of the packed masks `words` ``(F, W)`` at the slots `index`
    ``(n,)``: ``(F, n)`` int32."""
    word = words[:, :1]
    for i in range(1, words.shape[1]):
        word = jnp.where((index >> 5) == i, words[:, i : i + 1], word)
    return ((word >> (index & 31).astype(jnp.uint32)) & 1).astype(jnp.int32)


def _popcount(words):
    """Number of set bits of each row of ``(..., W)`` words, int32."""
    counts = jax.lax.population_count(words).astype(jnp.int32)
    total = counts[..., 0]
    for i in range(1, words.shape[-1]):
        total = total + counts[..., i]
    return total


def _spread(x):
    """Bits 0..15 of the uint32 `x` moved to the even bits 0, 2, .., 30."""
    x = x & 0xFFFF
    x = (x | (x << 8)) & 0x00FF00FF
    x = (x | (x << 4)) & 0x0F0F0F0F
    x = (x | (x << 2)) & 0x33333333
    return (x | (x << 1)) & 0x55555555


def _compact(x):
    """The even bits 0, 2, .., 30 of the uint32 `x` moved to bits 0..15."""
    x = x & 0x55555555
    x = (x | (x >> 1)) & 0x33333333
    x = (x | (x >> 2)) & 0x0F0F0F0F
    x = (x | (x >> 4)) & 0x00FF00FF
    return (x | (x >> 8)) & 0x0000FFFF


def _unpack(words, size):
    """The first `size` bits of packed `words` ``(W,)`` as a bool mask."""
    slot = np.arange(size)
    return ((jnp.repeat(words, 32)[:size] >> (slot % 32).astype(np.uint32)) & 1).astype(bool)


def tree_summary(var_tree, split_tree, max_split, p_nonterminal, move_probs, kinds, exhaustible=None) -> TreeSummary:
    """The eligible nodes of the current tree, as bit masks over the heap.

    From the packed mask of internal nodes (a node exists if its parent,
    ``k >> 1``, is internal; bit ``k`` of the heap's words), with bit
    operations on a few words per tree. `exhaustible`: as in `propose_tree`."""
    half = split_tree.shape[0]
    heap_size = 2 * half
    num_words = max(heap_size // 32, 1)
    depth_of = grove.node_depths(heap_size)
    internal = _pack(split_tree[None] != 0)[0]  # (max(H/64, 1),), bit k for node k
    words_of_internal = [internal[w] if w < internal.shape[0] else jnp.uint32(0) for w in range(num_words)]
    evens = jnp.uint32(0x55555555)
    leaf, nog_pairs = [], []
    for w in range(num_words):
        # heap word w holds the nodes 32w .. 32w + 31, children of 16w .. 16w + 15
        parents = internal[w // 2] >> (16 * (w % 2)) if half >= 32 else internal[0]
        exists = _spread(parents) * 3 | (2 if w == 0 else 0)  # node 1 always exists
        leaf.append(exists & ~words_of_internal[w])
        nog_pairs.append(_compact(leaf[w] & (leaf[w] >> 1)) << (16 * (w % 2)))
    nog = [jnp.uint32(0)] * num_words
    for w in range(num_words):
        nog[w // 2] = nog[w // 2] | nog_pairs[w]
    nog = [words_of_internal[w] & nog[w] for w in range(num_words)]
    # bit k of sibling_leaf[w] is the leaf bit of node k ^ 1
    sibling_leaf = [((x >> 1) & evens) | ((x & evens) << 1) for x in leaf]
    swappable = [nog[w] & sibling_leaf[w] & (~jnp.uint32(3) if w == 0 else ~jnp.uint32(0)) for w in range(num_words)]
    # the nodes with some predictor left (where p_split > 0 if their level
    # allows splits). At most D - 1 predictors are exhausted at a node, so
    # with at least D the counts need not be computed
    n_root = jnp.sum(max_split > 0)
    level_ok = p_nonterminal[depth_of] > 0
    num_bits = _exhausted_bits(heap_size)

    def no_count():
        return _pack(level_ok[None])[0], jnp.zeros((num_bits, num_words), jnp.uint32)

    def count():
        exhausted = num_exhausted(var_tree, split_tree, max_split, heap_size)
        bits = [((exhausted >> b) & 1).astype(bool) for b in range(num_bits)]
        words = _pack(jnp.stack([level_ok & (n_root - exhausted > 0), *bits]))
        return words[0], words[1:]

    if exhaustible is None:
        splittable, exhausted_bits = jax.lax.cond(n_root >= heap_size.bit_length() - 1, no_count, count)
    else:  # (only the way taken is compiled)
        splittable, exhausted_bits = count() if exhaustible else no_count()
    growable = [leaf[w] & splittable[w] for w in range(num_words)]
    words = jnp.concatenate([jnp.stack([w for x in (leaf, nog, swappable, growable) for w in x]).reshape(4, num_words), exhausted_bits])
    count = _popcount(words)
    num_nog = count[NOG]
    counts = jnp.stack([count[GROWABLE], num_nog, num_nog if heap_size > 4 else jnp.int32(0), count[SWAPPABLE]])
    return TreeSummary(_unpack(words[LEAF], heap_size), words, counts, _log_probs(counts, move_probs, kinds))


def choose_set_bit(words, count, u):
    """Index of a uniformly chosen set bit of the packed mask `words` with
    `count` bits set (0 if none), from one uniform ``u`` in (0, 1): the
    ``floor(u * count)``-th set bit, found by bisection on population
    counts."""
    rank = jnp.minimum(jnp.floor(u * count).astype(jnp.int32), count - 1)
    # the word of the entry, and its rank in it
    counts = jax.lax.population_count(words).astype(jnp.int32)
    word, base, r = words[0], jnp.int32(0), rank
    before = counts[0]
    for i in range(1, words.shape[0]):
        later = rank >= before
        word = jnp.where(later, words[i], word)
        base = jnp.where(later, 32 * i, base)
        r = jnp.where(later, rank - before, r)
        before = before + counts[i]
    pos = jnp.int32(0)
    width = 32
    while width > 1:
        width //= 2
        low = jax.lax.population_count(word & jnp.uint32((1 << width) - 1)).astype(jnp.int32)
        up = r >= low
        r = jnp.where(up, r - low, r)
        word = jnp.where(up, word >> width, word)
        pos = jnp.where(up, pos + width, pos)
    return jnp.where(count > 0, base + pos, 0)


def first_above(cum, threshold):
    """``argmax(cum > threshold)`` for a short non-decreasing `cum`."""
    index = jnp.int32(0)
    for i in range(cum.shape[0]):
        index = index + (cum[i] <= threshold)
    return jnp.where(cum[-1] > threshold, index, 0)


def take_small(table, index):
    """``table[index]`` for a short table (or list of scalars), as selects."""
    out = table[0]
    for i in range(1, len(table)):
        out = jnp.where(index == i, table[i], out)
    return out


def pick(kind, values, kinds):
    """``values[kind]`` for a list of 4 arrays of the same shape, as selects,
    among the `kinds` that can be proposed (the values of the others are
    not used, so XLA drops the code that computes them, jaxlib 0.10.2)."""
    enabled = [i for i in range(len(values)) if kinds[i]]
    out = values[enabled[-1]]
    for i in reversed(enabled[:-1]):
        out = jnp.where(kind == i, values[i], out)
    return out

