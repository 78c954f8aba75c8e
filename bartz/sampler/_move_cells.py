"""The cell bookkeeping of a tree move: which points change leaf, and where they go.

The sweep (`bartz.sampler.step`) needs, for each proposed move, the cells of
`bartz.sampler.moves.Moves`: every point of the tree goes to the cell
``cell_of[leaf, b]``, where ``leaf`` is its current leaf and ``b`` its bit
for the move's rule (``X[var] >= split``); the few cells the move changes
are listed with their leaf now and in the proposed tree. Each field is
picked among the four kinds with selects (`pick`), entry by entry, so that
XLA fuses them (a stack per kind would be a kernel of its own, jaxlib
0.10.2); `bartz.sampler.reference` builds the same tables plainly.
"""

from typing import NamedTuple

import jax
from jax import numpy as jnp

from bartz.sampler._move_bits import computed

# the move kinds (`bartz.sampler.moves` takes them from here: it imports this module)
GROW, PRUNE, CHANGE, SWAP = 0, 1, 2, 3


class MoveNodes(NamedTuple):
    """The nodes a move acts on (int32 scalars, ``dc`` bool)."""

    n: jax.Array  # the node drawn: the leaf grown, the node pruned or changed, SWAP's child
    k: jax.Array  # the node whose rule changes (SWAP: the parent of the pair)
    c: jax.Array  # SWAP: the child of the pair (n, clipped to the internal nodes)
    left: jax.Array  # 2k, clipped to the heap
    right: jax.Array  # 2k + 1, clipped to the heap
    dc: jax.Array  # bool: c is a right child
    sib: jax.Array  # c's sibling


def picked(kind, possible, pick, *options, unused=None):
    """`pick` of tuples of scalars, entry by entry (selects that fuse into one
    stack, where a stack per option is a kernel of its own); `unused`: the
    value of every entry where no move is possible."""
    out = [pick(kind, [jnp.asarray(o[i], jnp.int32) for o in options]) for i in range(len(options[0]))]
    return out if unused is None else [jnp.where(possible, x, unused) for x in out]


def cell_tables(kind, possible, pick, nodes: MoveNodes, slot, leaf, one) -> dict:
    """The cell fields of `Moves` (the small ones as lists of entries) and the
    leaves of the proposed tree.

    Each column of ``cell_of`` is the identity but at most at one leaf: GROW
    splits k into its children; CHANGE sends the points of k's left child
    with bit 1 to k, of its right child with bit 0 to ``extra`` (a slot
    with no points: k's parent, or a child of leaf 2); SWAP sends the points
    of c's sibling with the bit of c's side to k.
    """
    k, c, left, right, dc, sib = nodes.k, nodes.c, nodes.left, nodes.right, nodes.dc, nodes.sib
    extra = jnp.where(k > 1, k >> 1, 4)
    keep = 2 * c + dc  # SWAP: leaf of c that stays
    moved = 2 * c + 1 - dc  # SWAP: leaf of c whose points go to c's sibling
    no = jnp.int32(-1)
    zero = jnp.int32(0)
    at0 = pick(kind, [k, no, right, jnp.where(dc, no, sib)])
    at1 = pick(kind, [k, no, left, jnp.where(dc, sib, no)])
    to0 = pick(kind, [left, zero, extra, k])
    to1 = pick(kind, [right, zero, k, k])
    at0, at1, to0, to1 = computed(one, *(jnp.where(possible, x, no) for x in (at0, at1)), to0, to1)
    bit = jnp.arange(2) == 1
    cell_of = jnp.where(slot[:, None] == jnp.where(bit, at1, at0), jnp.where(bit, to1, to0), slot[:, None])
    cell_of = cell_of.astype(jnp.uint8)

    def pick_entries(*options, unused=None):
        return picked(kind, possible, pick, *options, unused=unused)

    rows = pick_entries((k, no), (no, no), (left, right), (sib, no), unused=no)
    # the rows of cell_of at `rows` (row 0 where unused), from the definitions above
    remap_cell = pick_entries(
        (left, right, zero, zero),
        (zero, zero, zero, zero),
        (left, k, extra, right),
        (jnp.where(dc, sib, k), jnp.where(dc, k, sib), zero, zero),
        unused=zero,
    )
    remap_cell = jnp.stack(remap_cell).reshape(2, 2).astype(jnp.uint8).astype(jnp.int32)
    cells = pick_entries((left, right, no, no), (left, right, no, no), (left, right, k, extra), (keep, moved, sib, k), unused=no)
    cell_old = pick_entries((k, k, no, no), (left, right, no, no), (left, right, left, right), (keep, moved, sib, sib), unused=no)
    cell_new = pick_entries((left, right, no, no), (k, k, no, no), (left, right, right, left), (keep, sib, sib, moved), unused=no)
    cell_fresh = (jnp.arange(4) >= 2) | (kind == GROW) | (kind == CHANGE)
    touched = (slot == cell_old[0]) | (slot == cell_old[1]) | (slot == cell_old[2]) | (slot == cell_old[3])
    identity = leaf & ~touched
    is_k = slot == k
    is_child = (slot == left) | (slot == right)
    new_leaf = jnp.where(kind == GROW, (leaf & ~is_k) | is_child, jnp.where(kind == PRUNE, (leaf & ~is_child) | is_k, leaf))
    return dict(
        cell_of=cell_of,
        rows=rows,
        remap_cell=remap_cell,
        cells=cells,
        cell_old=cell_old,
        cell_new=cell_new,
        cell_fresh=cell_fresh,
        identity=identity,
        new_leaf=new_leaf,
    )
