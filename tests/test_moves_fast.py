"""`bartz.sampler.moves.propose_tree` against the plain reference proposal.

`bartz.sampler.reference.propose_tree` is the proposal as first written
(two full tree summaries, the ranges of every predictor recomputed at each
node that needs them, one log prior per rule): it reads like the paper.
Every compiled variant of the fast `propose_tree` (all four kinds or GROW
and PRUNE alone, the exhausted-predictor count checked at run time or fixed,
uniform split probabilities, the small fields as entries) must give the
same moves on many random trees: every field of `Moves` identical, the log
ratio equal to float32 rounding.
"""

import functools

import jax
import numpy as np
import pytest
from jax import numpy as jnp
from jax import random

from bartz.kernels.rng import uniform  # the uniforms propose_moves draws from its key (one test)
from bartz.run import warmstart
from bartz.sampler import moves, reference
from bartz.sampler import step as mcmcstep
from bartz.sampler.moves import CHANGE, GROW, PRUNE, SWAP, Moves

# ---------------------------------------------------------------- random trees


def _state(rng, *, p, n=200, max_split, max_depth=6, num_trees=100, log_s=None, move_probs=None, r_birth=None):
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
        r_birth=r_birth,
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
_GROW_PRUNE = (True, True, False, False)
_reference = jax.jit(jax.vmap(reference.propose_tree, _IN_AXES))


@functools.cache
def _fast(**options):
    """The fast proposal vmapped over the trees, compiled for the static
    `options` of `moves.propose_tree`; with ``entries=True`` the small
    fields are stacked along the trees' axis after the vmap (as
    `mcmcstep.propose_moves` does), so that every variant returns `Moves`
    of the same shapes."""
    propose = jax.vmap(functools.partial(moves.propose_tree, **options), _IN_AXES)

    def stacked(*args):
        out = propose(*args)
        entries = {name: jnp.stack(value, axis=1) for name, value in out._asdict().items() if isinstance(value, tuple)}
        return out._replace(**entries)

    return jax.jit(stacked)


# cases where the proposal compiled for GROW and PRUNE alone is checked too
# (each case has its own shapes: a compilation each)
_GROW_PRUNE_CASES = {'grown', 'exhausted', 'stumps', 'single_leaf'}


def _uniforms(key, num_trees):
    """Four uniforms in (0, 1) per tree: kind, split index, node, variable."""
    return random.uniform(key, (num_trees, 4), minval=np.finfo(np.float32).tiny)


def _proposal_args(state, u, move_probs):
    """The arguments of the vmapped `moves.propose_tree` for `state`'s trees."""
    return (
        u,
        state.forest.var_tree,
        state.forest.split_tree,
        state.max_split,
        state.log_s,
        state.p_nonterminal,
        jnp.asarray(moves.move_probs_array(move_probs)),
    )


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


def _assert_identical(a, b):
    for name in Moves._fields:
        np.testing.assert_array_equal(np.asarray(getattr(a, name)), np.asarray(getattr(b, name)), err_msg=name)


# the costliest cases run with the slow tests (their features, exhausted
# predictors, DART and many predictors, are in the default run's cases too)
# (each case compiles for its own shapes)
_SLOW_CASES = {'exhausted_deep', 'dart_wide', 'dart_wider', 'deep', 'dart_deep', 'grown', 'depth3'}


@pytest.mark.parametrize('case', [pytest.param(c, marks=pytest.mark.slow) if c in _SLOW_CASES else c for c in CASES])
def test_propose_tree_matches_reference(case):
    """The fast proposal (all kinds compiled; GROW and PRUNE alone where the
    move probabilities allow only those) proposes the reference's moves."""
    rng = np.random.default_rng(list(CASES).index(case))
    state = CASES[case](rng)
    m = state.forest.split_tree.shape[0]
    kinds = np.zeros(4, int)
    for i, move_probs in enumerate(MOVE_PROBS):
        for key in random.split(random.key(100 + i), 8):
            args = _proposal_args(state, _uniforms(key, m), move_probs)
            expected = _reference(*args)
            _assert_same(_fast()(*args), expected)
            if case in _GROW_PRUNE_CASES and move_probs == ('grow', 'prune'):
                _assert_same(_fast(kinds=_GROW_PRUNE)(*args), expected)
            kinds += np.bincount(np.asarray(expected.kind)[np.asarray(expected.allowed)], minlength=4)
    if case not in ('single_leaf', 'no_cutpoints'):
        assert kinds[GROW] > 0 and kinds[PRUNE] > 0, kinds
    if case not in ('single_leaf', 'no_cutpoints', 'stumps'):
        assert kinds[CHANGE] > 0 and kinds[SWAP] > 0, kinds


@pytest.mark.parametrize('case', ['exhausted', 'stumps'])
def test_static_facts_match_reference(case):
    """`init` records whether fewer predictors have cut-points than the
    trees have levels (`MoveKinds.exhaustible`: 3 of 4 predictors at 6
    levels; 5 predictors at 2 levels) and whether the split probabilities
    are uniform for good (`uniform_splits`: no DART, log_s 0); the proposal
    compiled for those facts alone, with the small fields as entries,
    proposes the reference's moves, and bit for bit those of the one that
    checks the facts at run time."""
    rng = np.random.default_rng(list(CASES).index(case))
    state = CASES[case](rng)
    usable = np.count_nonzero(np.asarray(state.max_split) > 0)
    levels = state.p_nonterminal.shape[0]
    assert state.move_kinds.exhaustible == (usable < levels) == (case == 'exhausted')
    assert state.move_kinds.uniform_splits
    static = _fast(exhaustible=state.move_kinds.exhaustible, uniform_splits=True, entries=True)
    m = state.forest.split_tree.shape[0]
    for key in random.split(random.key(5), 4):
        args = _proposal_args(state, _uniforms(key, m), None)
        checked, fixed = _fast()(*args), static(*args)
        _assert_same(fixed, _reference(*args))
        _assert_identical(fixed, checked)


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
    u = _uniforms(random.key(3), state.forest.split_tree.shape[0])
    args = _proposal_args(state, u, {'grow': 0.1, 'prune': 0.1, 'change': 0.3, 'swap': 0.5})

    def size(f):
        return len(f.lower(*args).compile().as_text())

    assert size(_fast(kinds=_GROW_PRUNE)) < 0.7 * size(_fast())
    kinds = np.asarray(_fast(kinds=_GROW_PRUNE)(*args).kind)
    assert set(kinds.tolist()) <= {GROW, PRUNE}
    assert set(np.asarray(_fast()(*args).kind).tolist()) & {CHANGE, SWAP}


def test_propose_tree_unbatched():
    """One tree without vmap gives the same as in the batch."""
    rng = np.random.default_rng(99)
    state = CASES['grown_change_swap'](rng)
    u = _uniforms(random.key(5), state.forest.split_tree.shape[0])
    fast = _fast()(*_proposal_args(state, u, None))
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


def test_propose_moves_as_the_reference():
    """`mcmcstep.propose_moves` (the small fields stacked after the vmap,
    the kinds and facts of the state) proposes the reference's moves, for
    the uniforms it draws from its key (as `mcmcstep.step` does)."""
    rng = np.random.default_rng(list(CASES).index('dart'))
    state = CASES['dart'](rng)
    key = random.key(11)
    proposed = jax.jit(mcmcstep.propose_moves)(key, state)
    u = uniform(key, (state.forest.split_tree.shape[0], 4))
    _assert_same(proposed, _reference(*_proposal_args(state, u, None)))


@pytest.mark.parametrize('case', ['exhausted', 'dart'])
def test_r_birth_matches_reference(case):
    """R BART 2.9.9's birth (`moves.propose_tree`'s ``r_birth``, compiled
    for GROW and PRUNE alone and the state's static facts) proposes the
    reference's moves, where the reference writes the death's node count as
    R does; both departures from the stated prior happen in these trees (a
    variable drawn with no usable cut-point, refused; a birth below the
    root of a two-leaf tree), and with ``'usable'`` the variable is always
    usable."""
    rng = np.random.default_rng(list(CASES).index(case))
    state = CASES[case](rng)
    m = state.forest.split_tree.shape[0]
    kinds = state.move_kinds
    two_leaf = np.asarray(state.forest.split_tree[:, 1] > 0) & np.all(np.asarray(state.forest.split_tree[:, 2:4]) == 0, 1)
    assert two_leaf.any()
    for r_birth in ('all', 'usable'):
        fast = _fast(kinds=_GROW_PRUNE, exhaustible=kinds.exhaustible, uniform_splits=kinds.uniform_splits, r_birth=r_birth)
        reference_r = jax.jit(jax.vmap(functools.partial(reference.propose_tree, r_birth=r_birth), _IN_AXES))
        refused = below_root = 0
        for key in random.split(random.key(7), 8):
            args = _proposal_args(state, _uniforms(key, m), 'R')
            expected = reference_r(*args)
            _assert_same(fast(*args), expected)
            grow = np.asarray(expected.allowed) & (np.asarray(expected.kind) == GROW)
            refused += np.count_nonzero(grow & np.isneginf(np.asarray(expected.log_ratio_tree)))
            below_root += np.count_nonzero(grow & two_leaf & (np.asarray(expected.node) >> 1 == 1))
        assert below_root > 0
        assert (refused > 0) == (r_birth == 'all'), refused
        plain = _reference(*args)  # the stated prior's birth differs
        differs = np.asarray(plain.log_ratio_tree) != np.asarray(expected.log_ratio_tree)
        assert np.any(differs & grow)


def test_r_birth_needs_grow_and_prune_alone():
    """`init` and `propose_tree` refuse R's birth with CHANGE or SWAP, and an
    unknown ``r_birth``; ``move_probs='R'`` is GROW and PRUNE 1/2 each with
    R's birth, ``augment=FALSE`` unless told."""
    rng = np.random.default_rng(3)
    np.testing.assert_array_equal(moves.move_probs_array('R'), [0.5, 0.5, 0, 0])
    assert _state(rng, p=4, max_split=3, move_probs='R').move_kinds.r_birth == 'all'
    assert _state(rng, p=4, max_split=3, move_probs=('grow', 'prune')).move_kinds.r_birth is None
    assert moves.r_birth_of('R', augment=True) == 'usable'
    assert moves.r_birth_of(None) is None
    with pytest.raises(ValueError, match="got the string 'r'"):
        moves.move_probs_array('r')
    with pytest.raises(ValueError, match='grow and prune alone'):
        mcmcstep.init(
            X=jnp.zeros((2, 10), jnp.uint8), max_split=jnp.full(2, 3), y=jnp.zeros(10), num_trees=2,
            leaf_prior_var=0.1, r_birth='all',
        )
    with pytest.raises(ValueError, match='r_birth must be'):
        _state(rng, p=4, max_split=3, move_probs='R', r_birth='some')
    with pytest.raises(ValueError, match='GROW and PRUNE alone'):
        _fast(r_birth='all')(*_proposal_args(_state(rng, p=4, max_split=3), _uniforms(random.key(0), 100), None))
