"""Micro-benchmark of the move proposal: `bartz.mcmcstep.propose_moves` alone.

A settled experiment (the four-move proposal replaced the GROW/PRUNE one;
the figures are in `benchmarks/LOG.md`), kept for reference: it reaches into
the private modules of bartz of its time and is not kept working as they
move.

Run from the repository root:

    .venv/bin/python benchmarks/experiments/propose.py
    .venv/bin/python benchmarks/experiments/propose.py --p 10,100 --repeats 2000

For each p: random data (n points, p predictors with ``--numcut``
cut-points each), a state from `bartz.mcmcstep.init` with 200 trees of up
to 6 levels and the default moves (grow, prune, change, swap), grown by
``--burn`` iterations of `bartz.mcmcstep.step`. Then the jitted
``propose_moves(key, state)`` is called alone, and we print microseconds
per call: the minimum (and median) wall time over ``--repeats`` calls, each
waited for with ``block_until_ready``, and the minimum process CPU time per
call over blocks of 20 calls (all threads; less sensitive to other
processes on a shared machine), the variants interleaved block by block so
that a slower period of the machine hits all of them alike.

Rows:

propose_moves
    `bartz.mcmcstep.propose_moves` as it is in the checkout.
reference
    The straightforward implementation kept in
    ``tests/test_moves_fast.py`` (``_propose_tree_reference``), vmapped in
    the same way, if that file is there.
old grow/prune
    The GROW/PRUNE-only proposal of commit bfe0dfc (copied below, with its
    own 5 uniforms per tree), on the same trees: what the four-move
    proposal costs on top of it.
"""

import argparse
import importlib.util
import pathlib
import statistics
import time

import jax
import numpy as np
from jax import numpy as jnp
from jax import random

from bartz import grove, mcmcstep
from bartz.moves import _ancestor_tables  # static numpy tables, unchanged since bfe0dfc

# ------------------------------------------------ the GROW/PRUNE proposal of bfe0dfc


def num_exhausted(var_tree, split_tree, max_split, heap_size):
    anc, valid, right = _ancestor_tables(heap_size)
    half = heap_size // 2
    var = var_tree.astype(jnp.int32)
    cut = split_tree.astype(jnp.int32)
    path_var = var[anc[:half]]
    path_cut = cut[anc[:half]]
    same = (path_var == var[:, None]) & valid[:half]
    lo = jnp.max(jnp.where(same & right[:half], path_cut, 0), axis=1)
    hi = jnp.min(jnp.where(same & ~right[:half], path_cut - 1, max_split[var][:, None]), axis=1)
    left_exhausted = cut - 1 <= lo
    right_exhausted = hi <= cut
    newly = jnp.stack([left_exhausted, right_exhausted], axis=1).reshape(heap_size)
    newly = newly.at[:2].set(False)
    on_path = jnp.where(valid, newly[anc], False)
    return newly.astype(jnp.int32) + jnp.sum(on_path, axis=1, dtype=jnp.int32)


def _choose(mask, u):
    count = jnp.sum(mask, dtype=jnp.int32)
    k = jnp.minimum(jnp.floor(u * count).astype(jnp.int32), count - 1)
    return jnp.argmax(jnp.cumsum(mask, dtype=jnp.int32) > k)


def _choose_weighted(weight, u):
    cum = jnp.cumsum(weight)
    return jnp.argmax(cum > u * cum[-1])



def _old_propose_tree(u, var_tree, split_tree, max_split, log_s, p_nonterminal):
    """`bartz.mcmcstep._propose_tree` at commit bfe0dfc (GROW and PRUNE only),
    returning its fields as a tuple."""
    half = split_tree.shape[0]
    heap_size = 2 * half
    depth_of = jnp.asarray(grove.node_depths(heap_size))
    p = max_split.shape[0]
    u_move, u_split, u_leaf, u_nog, u_var = u

    leaf = grove.is_leaf(split_tree)
    nog = jnp.concatenate([grove.is_nog(split_tree), jnp.zeros(half, bool)])

    avail_root = jnp.sum(max_split > 0)
    n_avail = avail_root - num_exhausted(var_tree, split_tree, max_split, heap_size)  # (H,)
    p_split = jnp.where(n_avail > 0, p_nonterminal[depth_of], 0.0)
    growable = leaf & (p_split > 0)
    num_growable = jnp.sum(growable)
    num_nog = jnp.sum(nog)

    p_grow = jnp.where(num_nog == 0, 1.0, jnp.where(num_growable == 0, 0.0, 0.5))
    grow = u_move < p_grow
    possible = (num_growable > 0) | (num_nog > 0)

    leaf_node = _choose(growable, u_leaf)
    d = depth_of[leaf_node]
    anc, valid, right = _ancestor_tables(heap_size)
    path_var = var_tree.astype(jnp.int32)[jnp.asarray(anc)[leaf_node]]
    path_cut = split_tree.astype(jnp.int32)[jnp.asarray(anc)[leaf_node]]
    path_valid = jnp.asarray(valid)[leaf_node]
    path_right = jnp.asarray(right)[leaf_node]
    on_var = (path_var[None, :] == jnp.arange(p)[:, None]) & path_valid[None, :]
    var_lo = jnp.max(jnp.where(on_var & path_right, path_cut, 0), axis=1)
    var_hi = jnp.min(jnp.where(on_var & ~path_right, path_cut - 1, max_split[:, None]), axis=1)
    num_splits = var_hi - var_lo
    usable = num_splits > 0
    shift = jnp.max(jnp.where(usable, log_s, -jnp.inf))
    var_weight = jnp.where(usable, jnp.exp(log_s - jnp.where(jnp.isfinite(shift), shift, 0.0)), 0.0)
    var = _choose_weighted(var_weight, u_var)
    lo_v = var_lo[var]
    hi_v = var_hi[var]
    split = lo_v + 1 + jnp.floor(u_split * (hi_v - lo_v)).astype(jnp.int32)
    split = jnp.minimum(split, hi_v)
    avail_left = n_avail[leaf_node] - (split - 1 <= lo_v)
    avail_right = n_avail[leaf_node] - (hi_v <= split)
    p_child = p_nonterminal[jnp.minimum(d + 1, p_nonterminal.shape[0] - 1)]
    p_split_left = jnp.where(avail_left > 0, p_child, 0.0)
    p_split_right = jnp.where(avail_right > 0, p_child, 0.0)
    p_split_leaf = p_split[leaf_node]
    new_growable = num_growable - 1 + (p_split_left > 0) + (p_split_right > 0)
    sibling_leaf = leaf[leaf_node ^ 1] & (leaf_node != 1)
    new_nog = num_nog + 1 - sibling_leaf
    new_p_prune = jnp.where(new_growable == 0, 1.0, 0.5)
    log_ratio_grow = (
        jnp.log(new_p_prune / new_nog)
        - jnp.log(p_grow / num_growable)
        + jnp.log(p_split_leaf)
        + jnp.log1p(-p_split_left)
        + jnp.log1p(-p_split_right)
        - jnp.log1p(-p_split_leaf)
    )

    prune_node = _choose(nog, u_nog)
    child = 2 * prune_node
    p_split_node = p_split[prune_node]
    pruned_growable = num_growable - growable[child] - growable[child + 1] + 1
    new_p_grow = jnp.where(prune_node == 1, 1.0, 0.5)
    log_ratio_prune = (
        jnp.log(new_p_grow / pruned_growable)
        - jnp.log((1.0 - p_grow) / num_nog)
        + jnp.log1p(-p_split_node)
        - jnp.log(p_split_node)
        - jnp.log1p(-p_split[child])
        - jnp.log1p(-p_split[child + 1])
    )

    node = jnp.where(possible, jnp.where(grow, leaf_node, prune_node), 1).astype(jnp.int32)
    return (
        possible,
        grow,
        node,
        var.astype(jnp.int32),
        split.astype(jnp.int32),
        jnp.where(grow, log_ratio_grow, log_ratio_prune).astype(jnp.float32),
        leaf,
    )


def old_propose_moves(key, state):
    forest = state.forest
    num_trees = forest.split_tree.shape[0]
    u = mcmcstep._uniform(key, (num_trees, 5))
    return jax.vmap(_old_propose_tree, in_axes=(0, 0, 0, None, None, None))(
        u, forest.var_tree, forest.split_tree, state.max_split, state.log_s, state.p_nonterminal
    )


# ------------------------------------------------ the reference of the tests


def _load_reference():
    path = pathlib.Path(__file__).resolve().parents[2] / 'tests' / 'test_moves_fast.py'
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location('_test_moves_fast', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    reference = getattr(module, '_propose_tree_reference', None)
    if reference is None:
        return None

    def reference_propose_moves(key, state):
        forest = state.forest
        num_trees = forest.split_tree.shape[0]
        u = mcmcstep._uniform(key, (num_trees, 4))
        return jax.vmap(reference, in_axes=(0, 0, 0, None, None, None, None))(
            u,
            forest.var_tree,
            forest.split_tree,
            state.max_split,
            state.log_s,
            state.p_nonterminal,
            mcmcstep._move_probs(state),
        )

    return reference_propose_moves


# ------------------------------------------------ the benchmark


def make_state(p, n, numcut, num_trees, max_depth, burn, seed):
    rng = np.random.default_rng(seed)
    X = rng.integers(0, numcut + 1, size=(p, n)).astype(np.uint8)
    beta = rng.normal(size=min(p, 5))
    y = (np.sin(X[: len(beta)].T / numcut * 3) @ beta + rng.normal(scale=0.3, size=n)).astype(np.float32)
    state = mcmcstep.init(
        X=jnp.asarray(X),
        max_split=jnp.full(p, numcut, np.int32),
        y=jnp.asarray(y - y.mean()),
        num_trees=num_trees,
        max_depth=max_depth,
        leaf_prior_var=float(np.var(y)) / num_trees,
        sigma2_alpha=1.5,
        sigma2_beta=0.1,
    )
    step = jax.jit(mcmcstep.step)
    for key in random.split(random.key(seed), burn):
        state, _ = step(key, state)
    return state


def time_variants(variants, state, repeats, block=20):
    """Microseconds per call of each jitted variant: the minimum and median
    wall time over `repeats` calls, and the minimum process CPU time (all
    threads) per call over blocks of `block` calls (less sensitive to other
    processes on the machine). Variants interleaved block by block."""
    keys = random.split(random.key(1), 16)
    jitted = {name: jax.jit(fn) for name, fn in variants.items()}
    for fn in jitted.values():
        for key in keys[:3]:
            jax.block_until_ready(fn(key, state))
    wall = {name: [] for name in jitted}
    cpu = {name: [] for name in jitted}
    for i in range(0, repeats, block):
        for name, fn in jitted.items():
            cpu_start = time.process_time()
            for j in range(block):
                key = keys[(i + j) % len(keys)]
                start = time.perf_counter()
                jax.block_until_ready(fn(key, state))
                wall[name].append(time.perf_counter() - start)
            cpu[name].append((time.process_time() - cpu_start) / block)
    return {name: (min(wall[name]) * 1e6, statistics.median(wall[name]) * 1e6, min(cpu[name]) * 1e6) for name in jitted}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--p', default='10,100', help='comma-separated numbers of predictors')
    parser.add_argument('--n', type=int, default=1000)
    parser.add_argument('--numcut', type=int, default=100)
    parser.add_argument('--ntree', type=int, default=200)
    parser.add_argument('--max-depth', type=int, default=6)
    parser.add_argument('--burn', type=int, default=200, help='steps that grow the trees before timing')
    parser.add_argument('--repeats', type=int, default=1000)
    parser.add_argument('--no-reference', action='store_true', help='skip the reference of the tests')
    args = parser.parse_args()

    variants = {'propose_moves': mcmcstep.propose_moves}
    reference = None if args.no_reference else _load_reference()
    if reference is not None:
        variants['reference'] = reference
    variants['old grow/prune'] = old_propose_moves

    print(f'{jax.devices()[0].platform}, {args.ntree} trees, max depth {args.max_depth}, n = {args.n}')
    rows = []
    for p in [int(v) for v in args.p.split(',')]:
        state = make_state(p, args.n, args.numcut, args.ntree, args.max_depth, args.burn, seed=p)
        leaves = np.asarray(grove.is_leaf(state.forest.split_tree)).sum(axis=1)
        results = time_variants(variants, state, args.repeats)
        rows.append((p, float(leaves.mean()), results))
    header = f'{"variant":<16} {"p":>5} {"leaves/tree":>12} {"min us":>9} {"median us":>10} {"cpu us":>9}'
    print(header)
    print('-' * len(header))
    for p, leaves, results in rows:
        for name, (best, median, cpu) in results.items():
            print(f'{name:<16} {p:>5} {leaves:>12.1f} {best:>9.1f} {median:>10.1f} {cpu:>9.1f}')


if __name__ == '__main__':
    main()
