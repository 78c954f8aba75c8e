"""`bartz.sampler.moves.propose_tree` against a straightforward reference.

`_propose_tree_reference` is the proposal as first written (two full tree
summaries, the ranges of every predictor recomputed at each node that needs
them, one log prior per rule): it reads like the paper. The optimised
`propose_tree` must give the same moves on many random trees: every field of
`Moves` identical, the log ratio equal to float32 rounding.
"""

import functools

import jax
import numpy as np
import pytest
from jax import numpy as jnp
from jax import random

from bartz.forest import grove
from bartz.sampler import step as mcmcstep
from bartz.sampler import moves
from bartz.run import warmstart
from bartz.kernels.rng import _uniform
from bartz.sampler.moves import CHANGE, GROW, PRUNE, SWAP, Moves

# ---------------------------------------------------------------- reference


def _num_exhausted_reference(var_tree, split_tree, max_split, heap_size):
    anc, valid, right = moves._ancestor_tables(heap_size)
    half = heap_size // 2
    var = var_tree.astype(jnp.int32)
    cut = split_tree.astype(jnp.int32)
    path_var = var[anc[:half]]  # (H/2, L)
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


def _node_ranges_reference(var_tree, split_tree, max_split, node):
    heap_size = 2 * split_tree.shape[0]
    p = max_split.shape[0]
    anc, valid, right = moves._ancestor_tables(heap_size)
    path_var = var_tree.astype(jnp.int32)[jnp.asarray(anc)[node]]
    path_cut = split_tree.astype(jnp.int32)[jnp.asarray(anc)[node]]
    path_valid = jnp.asarray(valid)[node]
    path_right = jnp.asarray(right)[node]
    on_var = (path_var[None, :] == jnp.arange(p)[:, None]) & path_valid[None, :]
    lo = jnp.max(jnp.where(on_var & path_right, path_cut, 0), axis=1)
    hi = jnp.min(jnp.where(on_var & ~path_right, path_cut - 1, max_split[:, None]), axis=1)
    return lo, hi


def _log_rule_prior_reference(lo, hi, log_s, var, split):
    usable = hi > lo
    log_norm = jax.scipy.special.logsumexp(jnp.where(usable, log_s, -jnp.inf))
    width = (hi[var] - lo[var]).astype(jnp.float32)
    ok = (lo[var] < split) & (split <= hi[var]) & jnp.isfinite(log_s[var])
    value = log_s[var] - log_norm - jnp.log(jnp.where(ok, width, 1.0))
    return jnp.where(ok, value, -jnp.inf)


def _summary_reference(var_tree, split_tree, max_split, p_nonterminal, move_probs):
    half = split_tree.shape[0]
    heap_size = 2 * half
    depth_of = jnp.asarray(grove.node_depths(heap_size))
    slot = jnp.arange(heap_size)
    leaf = grove.is_leaf(split_tree)
    nog = jnp.concatenate([grove.is_nog(split_tree), jnp.zeros(half, bool)])
    swappable = nog & (slot > 1) & leaf[slot ^ 1]
    n_avail = jnp.sum(max_split > 0) - _num_exhausted_reference(var_tree, split_tree, max_split, heap_size)
    p_split = jnp.where(n_avail > 0, p_nonterminal[depth_of], 0.0)
    growable = leaf & (p_split > 0)
    num_nog = jnp.sum(nog, dtype=jnp.int32)
    counts = jnp.stack(
        [
            jnp.sum(growable, dtype=jnp.int32),
            num_nog,
            num_nog if heap_size > 4 else jnp.int32(0),
            jnp.sum(swappable, dtype=jnp.int32),
        ]
    )
    weight = jnp.where(counts > 0, move_probs, 0.0)
    total = jnp.sum(weight)
    log_probs = jnp.log(weight) - jnp.log(jnp.where(total > 0, total, 1.0))
    return leaf, nog, swappable, p_split, growable, counts, log_probs


def _choose_reference(mask, u):
    count = jnp.sum(mask, dtype=jnp.int32)
    k = jnp.minimum(jnp.floor(u * count).astype(jnp.int32), count - 1)
    return jnp.argmax(jnp.cumsum(mask, dtype=jnp.int32) > k)


def _choose_weighted_reference(weight, u):
    cum = jnp.cumsum(weight)
    return jnp.argmax(cum > u * cum[-1])


def _sum_terms_reference(move, terms):
    total = 0.0
    for name, value in terms.items():
        total = total + value + moves._TERM_PERTURBATION.get((move, name), 0.0)
    return total


def _propose_tree_reference(u, var_tree, split_tree, max_split, log_s, p_nonterminal, move_probs) -> Moves:
    """`bartz.sampler.moves.propose_tree` as first written (commit 98a4a83)."""
    half = split_tree.shape[0]
    heap_size = 2 * half
    slot = jnp.arange(heap_size, dtype=jnp.int32)
    u_move, u_split, u_node, u_var = u
    now_leaf, now_nog, now_swappable, now_p_split, now_growable, now_counts, now_log_probs = _summary_reference(
        var_tree, split_tree, max_split, p_nonterminal, move_probs
    )
    possible = jnp.any(now_counts > 0)
    kind = _choose_weighted_reference(jnp.exp(now_log_probs), u_move).astype(jnp.int32)

    eligible = jnp.stack([now_growable, now_nog, now_nog, now_swappable])[kind]
    chosen = _choose_reference(eligible, u_node).astype(jnp.int32)
    k = jnp.where(kind == SWAP, chosen >> 1, chosen)
    k_int = jnp.minimum(k, half - 1)
    c = jnp.minimum(chosen, half - 1)

    lo_k, hi_k = _node_ranges_reference(var_tree, split_tree, max_split, k)
    usable = hi_k > lo_k
    shift = jnp.max(jnp.where(usable, log_s, -jnp.inf))
    var_weight = jnp.where(usable, jnp.exp(log_s - jnp.where(jnp.isfinite(shift), shift, 0.0)), 0.0)
    var = _choose_weighted_reference(var_weight, u_var).astype(jnp.int32)
    split = lo_k[var] + 1 + jnp.floor(u_split * (hi_k[var] - lo_k[var])).astype(jnp.int32)
    split = jnp.minimum(split, hi_k[var])

    var_a, split_a = var_tree[k_int].astype(jnp.int32), split_tree[k_int].astype(jnp.int32)
    var_b, split_b = var_tree[c].astype(jnp.int32), split_tree[c].astype(jnp.int32)

    def pick(values):
        return jnp.stack(values)[kind]

    zero2 = jnp.zeros(2, jnp.int32)
    set_node = pick([jnp.stack([k, k]), jnp.stack([k, k]), jnp.stack([k, k]), jnp.stack([k, c])])
    set_var = pick([jnp.stack([var, var]), zero2, jnp.stack([var, var]), jnp.stack([var_b, var_a])])
    set_split = pick([jnp.stack([split, split]), zero2, jnp.stack([split, split]), jnp.stack([split_b, split_a])])
    set_node = jnp.where(possible, set_node, 0)
    set_var = jnp.where(possible, set_var, 0)
    set_split = jnp.where(possible, set_split, 0)
    new_var_tree = var_tree.at[set_node].set(set_var.astype(var_tree.dtype))
    new_split_tree = split_tree.at[set_node].set(set_split.astype(split_tree.dtype))
    new_leaf, _, _, new_p_split, _, new_counts, new_log_probs = _summary_reference(
        new_var_tree, new_split_tree, max_split, p_nonterminal, move_probs
    )

    left, right = jnp.minimum(2 * k, heap_size - 2), jnp.minimum(2 * k + 1, heap_size - 1)
    log = jnp.log
    grow_terms = {
        'move': new_log_probs[PRUNE] - now_log_probs[GROW],
        'node': log(now_counts[GROW].astype(jnp.float32)) - log(new_counts[PRUNE].astype(jnp.float32)),
        'split': log(now_p_split[k]) - jnp.log1p(-now_p_split[k]),
        'children': jnp.log1p(-new_p_split[left]) + jnp.log1p(-new_p_split[right]),
    }
    prune_terms = {
        'move': new_log_probs[GROW] - now_log_probs[PRUNE],
        'node': log(now_counts[PRUNE].astype(jnp.float32)) - log(new_counts[GROW].astype(jnp.float32)),
        'split': jnp.log1p(-new_p_split[k]) - log(new_p_split[k]),
        'children': -jnp.log1p(-now_p_split[left]) - jnp.log1p(-now_p_split[right]),
    }
    change_terms = {
        'move': new_log_probs[CHANGE] - now_log_probs[CHANGE],
        'children': (
            jnp.log1p(-new_p_split[left])
            + jnp.log1p(-new_p_split[right])
            - jnp.log1p(-now_p_split[left])
            - jnp.log1p(-now_p_split[right])
        ),
    }
    lo_c, hi_c = _node_ranges_reference(var_tree, split_tree, max_split, c)
    lo_c_new, hi_c_new = _node_ranges_reference(new_var_tree, new_split_tree, max_split, c)
    grandchildren = jnp.minimum(jnp.stack([2 * c, 2 * c + 1, c ^ 1]), heap_size - 1)
    swap_terms = {
        'move': new_log_probs[SWAP] - now_log_probs[SWAP],
        'rule_parent': _log_rule_prior_reference(lo_k, hi_k, log_s, var_b, split_b)
        - _log_rule_prior_reference(lo_k, hi_k, log_s, var_a, split_a),
        'rule_child': _log_rule_prior_reference(lo_c_new, hi_c_new, log_s, var_a, split_a)
        - _log_rule_prior_reference(lo_c, hi_c, log_s, var_b, split_b),
        'split_child': log(new_p_split[c]) - log(now_p_split[c]),
        'leaves': jnp.sum(jnp.log1p(-new_p_split[grandchildren]) - jnp.log1p(-now_p_split[grandchildren])),
    }
    log_ratio = pick(
        [
            _sum_terms_reference('grow', grow_terms),
            _sum_terms_reference('prune', prune_terms),
            _sum_terms_reference('change', change_terms),
            _sum_terms_reference('swap', swap_terms),
        ]
    )

    extra = jnp.where(k > 1, k >> 1, 4)
    dc = c & 1
    sib = c ^ 1
    keep = 2 * c + dc
    moved = 2 * c + 1 - dc
    col0, col1 = slot, slot
    grow_of = (jnp.where(slot == k, left, col0), jnp.where(slot == k, right, col1))
    change_of = (
        jnp.where(slot == right, extra, col0),
        jnp.where(slot == left, k, col1),
    )
    swap_of = (
        jnp.where((slot == sib) & (dc == 0), k, col0),
        jnp.where((slot == sib) & (dc == 1), k, col1),
    )
    col0 = pick([grow_of[0], col0, change_of[0], swap_of[0]])
    col1 = pick([grow_of[1], col1, change_of[1], swap_of[1]])
    col0 = jnp.where(possible, col0, slot)
    col1 = jnp.where(possible, col1, slot)
    cell_of = jnp.stack([col0, col1], axis=1).astype(jnp.uint8)
    rows = pick(
        [
            jnp.stack([k, jnp.int32(-1)]),
            jnp.full(2, -1, jnp.int32),
            jnp.stack([left, right]),
            jnp.stack([sib, jnp.int32(-1)]),
        ]
    )
    rows = jnp.where(possible, rows, -1)
    remap_cell = cell_of[jnp.clip(rows, 0, heap_size - 1)].astype(jnp.int32)

    def quad(*values):
        return jnp.stack([jnp.asarray(v, jnp.int32) for v in values])

    no = -1
    cells = pick([quad(left, right, no, no), quad(left, right, no, no), quad(left, right, k, extra), quad(keep, moved, sib, k)])
    cell_old = pick([quad(k, k, no, no), quad(left, right, no, no), quad(left, right, left, right), quad(keep, moved, sib, sib)])
    cell_new = pick(
        [quad(left, right, no, no), quad(k, k, no, no), quad(left, right, right, left), quad(keep, sib, sib, moved)]
    )
    t, f = True, False
    cell_fresh = jnp.stack(
        [jnp.array([t, t, t, t]), jnp.array([f, f, t, t]), jnp.array([t, t, t, t]), jnp.array([f, f, t, t])]
    )[kind]
    cells = jnp.where(possible, cells, no)
    cell_old = jnp.where(possible, cell_old, no)
    cell_new = jnp.where(possible, cell_new, no)
    touched = jnp.any(slot[:, None] == cell_old[None, :], axis=1)
    identity = now_leaf & ~touched

    return Moves(
        allowed=possible,
        kind=kind,
        node=jnp.where(possible, k, 1).astype(jnp.int32),
        var=pick([var, var, var, var_b]),
        split=pick([split, split, split, split_b]),
        log_ratio_tree=log_ratio.astype(jnp.float32),
        cell_of=cell_of,
        remap_leaf=rows.astype(jnp.int32),
        remap_cell=remap_cell,
        cells=cells,
        cell_old=cell_old,
        cell_new=cell_new,
        cell_fresh=cell_fresh,
        identity=identity,
        leaf=now_leaf,
        new_leaf=jnp.where(possible, new_leaf, now_leaf),
        set_node=set_node,
        set_var=set_var,
        set_split=set_split,
    )


# ---------------------------------------------------------------- random trees


def _state(rng, *, p, n=200, max_split, max_depth=6, num_trees=100, log_s=None, move_probs=None):
    max_split = np.broadcast_to(np.asarray(max_split, np.int32), (p,))
    X = np.stack([rng.integers(0, m + 1, size=n) for m in max_split]).astype(np.uint8)
    y = np.sin(X[0] * 3.0 / max(max_split[0], 1)) + (X[1 % p] > max_split[1 % p] // 2) + rng.normal(scale=0.1, size=n)
    return mcmcstep.init(
        X=jnp.asarray(X),
        max_split=jnp.asarray(max_split),
        y=jnp.asarray((y - y.mean()).astype(np.float32)),
        num_trees=num_trees,
        max_depth=max_depth,
        leaf_prior_var=0.5 / num_trees,
        sigma2_alpha=1.5,
        sigma2_beta=0.01,
        log_s=None if log_s is None else jnp.asarray(log_s, jnp.float32),
        move_probs=move_probs,
    )


def _grown(state, steps, seed):
    """`state` after `steps` iterations of the sampler."""
    step = jax.jit(mcmcstep.step)
    for key in random.split(random.key(seed), steps):
        state, _ = step(key, state)
    return state


def _from_prior(state, seed, p_split):
    """`state` with trees drawn from a prior that splits with probability
    `p_split` at every level but the bottom one (deep trees)."""
    depth = state.p_nonterminal.shape[0]
    deep = np.full(depth, p_split, np.float32)
    deep[-1] = 0
    drawn = warmstart.prior_trees(random.key(seed), state._replace(p_nonterminal=jnp.asarray(deep)))
    return drawn._replace(p_nonterminal=state.p_nonterminal)


def _dart_log_s(rng, p):
    log_s = rng.normal(scale=3.0, size=p)
    log_s[rng.choice(p, size=p // 4, replace=False)] = -np.inf
    return log_s


CASES = {
    'grown': lambda rng: _grown(_state(rng, p=10, max_split=30), 60, 0),
    'grown_change_swap': lambda rng: _grown(
        _state(rng, p=5, max_split=20, move_probs={'grow': 0.2, 'prune': 0.2, 'change': 0.3, 'swap': 0.3}), 80, 1
    ),
    'exhausted': lambda rng: _grown(_state(rng, p=4, max_split=[1, 2, 3, 0]), 80, 2),
    'exhausted_deep': lambda rng: _from_prior(_state(rng, p=3, max_split=[1, 3, 2]), 3, 0.95),
    'deep': lambda rng: _from_prior(_state(rng, p=10, max_split=100), 4, 0.98),
    'dart': lambda rng: _grown(_state(rng, p=20, max_split=10, log_s=_dart_log_s(rng, 20)), 60, 5),
    'dart_deep': lambda rng: _from_prior(_state(rng, p=12, max_split=4, log_s=_dart_log_s(rng, 12)), 6, 0.9),
    'dart_wide': lambda rng: _grown(_state(rng, p=100, max_split=3, log_s=_dart_log_s(rng, 100)), 40, 9),
    'dart_wider': lambda rng: _from_prior(_state(rng, p=300, max_split=2, log_s=_dart_log_s(rng, 300)), 10, 0.9),
    'stumps': lambda rng: _grown(_state(rng, p=5, max_split=3, max_depth=2), 30, 7),
    'depth3': lambda rng: _from_prior(_state(rng, p=4, max_split=2, max_depth=3), 8, 0.7),
    'single_leaf': lambda rng: _state(rng, p=10, max_split=30),
    'no_cutpoints': lambda rng: _state(rng, p=3, max_split=0),
}

MOVE_PROBS = [None, ('grow', 'prune'), {'grow': 0.1, 'prune': 0.1, 'change': 0.3, 'swap': 0.5}]


_IN_AXES = (0, 0, 0, None, None, None, None)
_fast = jax.jit(jax.vmap(moves.propose_tree, _IN_AXES))
_GROW_PRUNE = (True, True, False, False)
_fast_grow_prune = jax.jit(jax.vmap(functools.partial(moves.propose_tree, kinds=_GROW_PRUNE), _IN_AXES))
_reference = jax.jit(jax.vmap(_propose_tree_reference, _IN_AXES))


# cases where the proposal compiled for GROW and PRUNE alone is checked too
# (each case has its own shapes: a compilation each)
_GROW_PRUNE_CASES = {'grown', 'exhausted', 'stumps', 'single_leaf'}


def _proposal_args(state, key, move_probs):
    """The arguments of the vmapped `moves.propose_tree` for `state`'s trees."""
    m = state.forest.split_tree.shape[0]
    return (
        _uniform(key, (m, 4)),
        state.forest.var_tree,
        state.forest.split_tree,
        state.max_split,
        state.log_s,
        state.p_nonterminal,
        jnp.asarray(moves.move_probs_array(move_probs)),
    )


def _propose_both(state, key, move_probs, check_grow_prune=False):
    args = _proposal_args(state, key, move_probs)
    fast = _fast(*args)
    if check_grow_prune and move_probs == ('grow', 'prune'):
        # compiled for GROW and PRUNE alone (`MoveKinds`): the same moves
        _assert_same(_fast_grow_prune(*args), fast)
    return fast, _reference(*args)


def _assert_same(fast, reference):
    for name in Moves._fields:
        a, b = np.asarray(getattr(fast, name)), np.asarray(getattr(reference, name))
        assert a.dtype == b.dtype, name
        if name != 'log_ratio_tree':
            np.testing.assert_array_equal(a, b, err_msg=name)
    allowed = np.asarray(reference.allowed)
    a, b = np.asarray(fast.log_ratio_tree)[allowed], np.asarray(reference.log_ratio_tree)[allowed]
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
    np.testing.assert_array_equal(np.isposinf(a), np.isposinf(b))
    np.testing.assert_array_equal(np.isneginf(a), np.isneginf(b))
    finite = np.isfinite(b)
    np.testing.assert_allclose(a[finite], b[finite], rtol=1e-6, atol=1e-5)


# the costliest cases run with the slow tests (their features, exhausted
# predictors, DART and many predictors, are in the default run's cases too)
# (each case compiles for its own shapes, 10-40 s)
_SLOW_CASES = {'exhausted_deep', 'dart_wide', 'dart_wider', 'deep', 'dart_deep', 'grown', 'depth3'}


@pytest.mark.parametrize('case', [pytest.param(c, marks=pytest.mark.slow) if c in _SLOW_CASES else c for c in CASES])
def test_propose_tree_matches_reference(case):
    rng = np.random.default_rng(list(CASES).index(case))
    state = CASES[case](rng)
    kinds = np.zeros(4, int)
    for i, move_probs in enumerate(MOVE_PROBS):
        for key in random.split(random.key(100 + i), 8):
            fast, reference = _propose_both(state, key, move_probs, case in _GROW_PRUNE_CASES)
            _assert_same(fast, reference)
            kinds += np.bincount(np.asarray(reference.kind)[np.asarray(reference.allowed)], minlength=4)
    if case not in ('single_leaf', 'no_cutpoints'):
        assert kinds[GROW] > 0 and kinds[PRUNE] > 0, kinds
    if case not in ('single_leaf', 'no_cutpoints', 'stumps'):
        assert kinds[CHANGE] > 0 and kinds[SWAP] > 0, kinds


@pytest.mark.parametrize('case', ['exhausted', 'stumps'])
def test_static_facts_match_run_time_checks(case):
    """`init` records whether fewer predictors have cut-points than the
    trees have levels (`MoveKinds.exhaustible`: 3 of 4 predictors at 6
    levels; 5 predictors at 2 levels) and whether the split probabilities
    are uniform for good (`uniform_splits`: no DART, log_s 0); the proposal
    compiled for those facts alone proposes the same moves, bit for bit, as
    the one that checks them at run time."""
    rng = np.random.default_rng(list(CASES).index(case))
    state = CASES[case](rng)
    usable = np.count_nonzero(np.asarray(state.max_split) > 0)
    levels = state.p_nonterminal.shape[0]
    assert state.move_kinds.exhaustible == (usable < levels) == (case == 'exhausted')
    assert state.move_kinds.uniform_splits
    facts = {'exhaustible': state.move_kinds.exhaustible, 'uniform_splits': True}
    static = jax.jit(jax.vmap(functools.partial(moves.propose_tree, **facts), _IN_AXES))
    for key in random.split(random.key(5), 4):
        args = _proposal_args(state, key, None)
        checked, fixed = _fast(*args), static(*args)
        for name in Moves._fields:
            np.testing.assert_array_equal(np.asarray(getattr(fixed, name)), np.asarray(getattr(checked, name)), err_msg=name)


def test_uniform_splits_needs_zero_log_s_and_no_dart():
    """`MoveKinds.uniform_splits` holds only when `log_s` is 0 at `init` and
    no DART can change it."""
    rng = np.random.default_rng(11)
    assert _state(rng, p=8, max_split=5).move_kinds.uniform_splits
    assert not _state(rng, p=8, max_split=5, log_s=_dart_log_s(rng, 8)).move_kinds.uniform_splits
    plain = _state(rng, p=8, max_split=5)
    with_dart = mcmcstep.init(
        X=plain.X,
        max_split=plain.max_split,
        y=plain.y,
        num_trees=10,
        max_depth=6,
        leaf_prior_var=0.05,
        sigma2_alpha=1.5,
        sigma2_beta=0.01,
        dart={},
    )
    assert not with_dart.move_kinds.uniform_splits


def test_grow_prune_compiles_less():
    """With GROW and PRUNE alone, the code of CHANGE and SWAP is not compiled
    (the optimised program is much smaller), and a kind left out of the
    static kinds is never proposed, whatever its probability."""
    rng = np.random.default_rng(7)
    state = CASES['grown_change_swap'](rng)
    args = _proposal_args(state, random.key(3), {'grow': 0.1, 'prune': 0.1, 'change': 0.3, 'swap': 0.5})

    def size(f):
        return len(f.lower(*args).compile().as_text())

    assert size(_fast_grow_prune) < 0.7 * size(_fast)
    kinds = np.asarray(_fast_grow_prune(*args).kind)
    assert set(kinds.tolist()) <= {GROW, PRUNE}
    assert set(np.asarray(_fast(*args).kind).tolist()) & {CHANGE, SWAP}


def test_propose_tree_unbatched():
    """One tree without vmap gives the same as in the batch."""
    rng = np.random.default_rng(99)
    state = CASES['grown_change_swap'](rng)
    key = random.key(5)
    fast, _ = _propose_both(state, key, None)
    u = _uniform(key, (state.forest.split_tree.shape[0], 4))
    for i in (0, 7):
        one = jax.jit(moves.propose_tree)(
            u[i],
            state.forest.var_tree[i],
            state.forest.split_tree[i],
            state.max_split,
            state.log_s,
            state.p_nonterminal,
            jnp.asarray(moves.move_probs_array(None)),
        )
        for name in Moves._fields:
            np.testing.assert_array_equal(getattr(one, name), getattr(fast, name)[i], err_msg=name)


def test_propose_moves_as_the_batch():
    """`mcmcstep.propose_moves` (the small fields stacked after the vmap,
    the kinds of the state) gives the moves of the batched proposal."""
    rng = np.random.default_rng(list(CASES).index('dart'))
    state = CASES['dart'](rng)
    key = random.key(11)
    fast, _ = _propose_both(state, key, None)
    _assert_same(jax.jit(mcmcstep.propose_moves)(key, state), fast)
