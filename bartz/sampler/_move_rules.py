"""The prior of a tree's rules, as the moves of `bartz.sampler.moves` need it.

The rules on the path to a node and the usable range of a predictor below
them, the prior probability of a rule (variable by its split probability
among the usable predictors, split index uniform in its range) and of a
node being internal (``base * (1 + depth) ** -power``, 0 where no predictor
is left), a rule drawn from that prior, and the rules and ranges around a
SWAP's pair before and after it. `bartz.sampler.reference` computes the
same from whole-tree summaries.
"""

from typing import NamedTuple

import jax
from jax import numpy as jnp

from bartz.sampler._move_bits import choose_variable, computed, finite_or_zero, level_of_node, path_levels, take_small


class Path(NamedTuple):
    """The rules on the path to a node, level by level (``(L,)`` arrays)."""

    var: jax.Array  # int32: variable of the ancestor at each level (the node itself at its level)
    cut: jax.Array  # int32: its split index
    right: jax.Array  # bool: the path turns right there
    top: jax.Array  # int32: max_split of the variable
    log_s: jax.Array  # float32: log_s of the variable


def path_rules(var_tree, split_tree, max_split, log_s, node, depth) -> Path:
    """The rules on the path to `node` at level `depth`."""
    half = split_tree.shape[0]
    level = jnp.arange(path_levels(half), dtype=jnp.int32)
    up = depth - level
    anc = jnp.clip(node >> jnp.maximum(up, 0), 0, half - 1)
    right = ((node >> jnp.maximum(up - 1, 0)) & 1).astype(bool)
    rule = (var_tree.astype(jnp.int32) << 16) | split_tree.astype(jnp.int32)  # one gather for both
    rule = rule[anc]
    var = rule >> 16
    table = jnp.stack([max_split.astype(jnp.float32), log_s], axis=1)[var]  # exact below 2**24
    return Path(var, rule & 0xFFFF, right, table[:, 0].astype(jnp.int32), table[:, 1])


def range_on_path(path: Path, num_levels, var, top):
    """Usable split indices ``lo + 1 .. hi`` of `var` (with `top` =
    ``max_split[var]``) below the first `num_levels` rules of `path`; `var`
    and `top` may be arrays of the same shape (one range each)."""
    var, top = jnp.asarray(var)[..., None], jnp.asarray(top)[..., None]
    same = (path.var == var) & (jnp.arange(path.var.shape[0]) < num_levels)
    lo = jnp.max(jnp.where(same & path.right, path.cut, 0), axis=-1)
    hi = jnp.min(jnp.where(same & ~path.right, path.cut - 1, top), axis=-1)
    return lo, hi


def exhausted_on_path(path: Path, num_levels):
    """Whether the variable of each rule of `path` is exhausted below the
    first `num_levels` rules, ``(L,)``: only these variables can be (the
    others are usable iff their ``max_split`` is positive)."""
    lo, hi = range_on_path(path, num_levels, path.var, path.top)
    return (jnp.arange(path.var.shape[0]) < num_levels) & (hi <= lo)


def node_ranges(var_tree, split_tree, max_split, node):
    """Usable split indices ``lo + 1, ..., hi`` of every predictor at `node`,
    given the rules of its ancestors: two ``(p,)`` int32 arrays."""
    p = max_split.shape[0]
    depth = level_of_node(node)
    path = path_rules(var_tree, split_tree, max_split, jnp.zeros(p), node, depth)
    return range_on_path(path, depth, jnp.arange(p), max_split)


def log_rule_prior(lo, hi, log_s, var, split):
    """Log prior probability of the rule ``(var, split)`` at a node with
    usable ranges ``lo, hi``: the variable's split probability among the
    usable predictors, times 1 / (number of its usable split indices); -inf
    if the split index is not usable there."""
    log_norm = jax.scipy.special.logsumexp(jnp.where(hi > lo, log_s, -jnp.inf))
    return rule_log_prior(lo[var], hi[var], log_s[var], log_norm, split)


def rule_log_prior(lo_var, hi_var, log_s_var, log_norm, split):
    """`log_rule_prior` from the variable's range and log split probability
    and the log normaliser of the split probabilities at the node."""
    ok = (lo_var < split) & (split <= hi_var) & jnp.isfinite(log_s_var)
    width = (hi_var - lo_var).astype(jnp.float32)
    value = log_s_var - log_norm - jnp.log(jnp.where(ok, width, 1.0))
    return jnp.where(ok, value, -jnp.inf)


def exhausts(split, lo, hi, to_right):
    """Whether the rule leaves no split index in the child on that side."""
    return jnp.where(to_right, hi <= split, split - 1 <= lo)


class Rule(NamedTuple):
    """A rule ``X[var] >= split`` and the usable range ``lo + 1 .. hi`` of
    its variable where it sits (int32 scalars)."""

    var: jax.Array
    split: jax.Array
    lo: jax.Array
    hi: jax.Array
    log_s: jax.Array | None = None  # float32: log_s of the variable


# ---------------------------------------------------------------- the split prior


class SplitProb(NamedTuple):
    """Prior probability that a node is internal, and its logs."""

    p: jax.Array
    log: jax.Array  # log p
    log_not: jax.Array  # log(1 - p)


class SplitPrior(NamedTuple):
    """The prior split probabilities at the level of the move's node and
    the level below, given the number of exhausted predictors."""

    levels: tuple  # (SplitProb at n's level, SplitProb one level below)
    n_root: jax.Array  # int32: predictors with some cut-point
    exhaustible: bool | None  # static, as in `propose_tree`

    def at(self, exhausted, level):
        """The split probability of a node at the level of n (`level` 0) or
        below (1) with `exhausted` predictors."""
        p, log_p, log_not_p = self.levels[level]
        if self.exhaustible is False:
            # every node keeps a predictor (but at the bottom level, where
            # p is 0 anyway): the counts of exhausted predictors are not
            # computed (zero) and the code that adds to them is dropped
            return SplitProb(p, log_p, log_not_p)
        ok = self.n_root - exhausted > 0
        return SplitProb(jnp.where(ok, p, 0.0), jnp.where(ok, log_p, -jnp.inf), jnp.where(ok, log_not_p, 0.0))


def split_prior(p_nonterminal, n_root, depth_n, exhaustible) -> SplitPrior:
    """`SplitPrior` at level `depth_n`, the logs from tables (one log per
    level for all trees)."""
    tables = (p_nonterminal, jnp.log(p_nonterminal), jnp.log1p(-p_nonterminal))
    at_level_n = SplitProb(*(take_small(table, depth_n) for table in tables))
    at_level_below = SplitProb(*(take_small(table, depth_n + 1) for table in tables))
    return SplitPrior((at_level_n, at_level_below), n_root, exhaustible)


# ---------------------------------------------------------------- the rules around a move


def pair_rules(path, depth_n, depth_k):
    """SWAP's rules: A at the level above n, B at n's level, with the
    usable ranges of their variables at k (both in one reduction each)."""
    level_a = jnp.maximum(depth_n - 1, 0)
    var_a, split_a = take_small(path.var, level_a), take_small(path.cut, level_a)
    top_a, log_s_a = take_small(path.top, level_a), take_small(path.log_s, level_a)
    var_b, split_b = take_small(path.var, depth_n), take_small(path.cut, depth_n)
    top_b, log_s_b = take_small(path.top, depth_n), take_small(path.log_s, depth_n)
    lo_ab, hi_ab = range_on_path(path, depth_k, jnp.stack([var_a, var_b]), jnp.stack([top_a, top_b]))
    (lo_a, lo_b), (hi_a, hi_b) = lo_ab, hi_ab
    return Rule(var_a, split_a, lo_a, hi_a, log_s_a), Rule(var_b, split_b, lo_b, hi_b, log_s_b)


def usable_at(path, depth_k, max_split, one):
    """The predictors with a usable split index at k, ``(p,)`` bool: those
    with cut-points, less the variables of k's ancestors that the path
    exhausts."""
    p = max_split.shape[0]
    gone = exhausted_on_path(path, depth_k)
    (gone,) = computed(one, gone)
    usable = max_split > 0
    for j in range(gone.shape[0]):
        usable = usable & ~(gone[j] & (jnp.arange(p) == path.var[j]))
    return usable


class Normalisers(NamedTuple):
    """Log normalisers of the split probabilities of the usable predictors."""

    shift: jax.Array  # the largest log_s usable at k (0 if none), the shift of the exponentials
    same_ab: jax.Array  # bool: SWAP's rules A and B have the same variable
    log_norm_c: jax.Array  # at c now
    log_norm_c_new: jax.Array  # at c after SWAP


def rule_normalisers(rule_a, rule_b, usable, log_s, dc, one, uniform_splits):
    """The `Normalisers` of the rule prior at k and at c. The usable
    predictors at c, now and in the proposed tree, differ from those at k
    at most in the variable of k's rule; `rest` are the usable ones at
    both. Returns the rules and `usable` (computed once) and them."""
    gone_a = (rule_a.hi > rule_a.lo) & exhausts(rule_a.split, rule_a.lo, rule_a.hi, dc)
    gone_b = (rule_b.hi > rule_b.lo) & exhausts(rule_b.split, rule_b.lo, rule_b.hi, dc)
    var_a, var_b, gone_a, gone_b, usable = computed(one, rule_a.var, rule_b.var, gone_a, gone_b, usable)
    var_p = jnp.arange(usable.shape[0])
    rest = usable & ~((var_p == var_a) & gone_a) & ~((var_p == var_b) & gone_b)
    if uniform_splits:  # (the maxima below are 0 or, if none is usable, -inf made 0)
        shift = shift_rest = 0.0
    else:
        shift = finite_or_zero(jnp.max(jnp.where(usable, log_s, -jnp.inf)))
        shift_rest = finite_or_zero(jnp.max(jnp.where(rest, log_s, -jnp.inf)))
    log_norm_rest = jnp.log(jnp.sum(jnp.where(rest, jnp.exp(log_s - shift_rest), 0.0))) + shift_rest
    same_ab = var_a == var_b
    log_norm_c = jnp.logaddexp(log_norm_rest, jnp.where(gone_b & ~(gone_a & same_ab), rule_b.log_s, -jnp.inf))
    log_norm_c_new = jnp.logaddexp(log_norm_rest, jnp.where(gone_a & ~(gone_b & same_ab), rule_a.log_s, -jnp.inf))
    norms = Normalisers(shift, same_ab, log_norm_c, log_norm_c_new)
    return rule_a._replace(var=var_a), rule_b._replace(var=var_b), usable, norms


def draw_rule(path, depth_k, usable, log_s, max_split, shift, u_var, u_split, one) -> Rule:
    """A new rule at k from the prior (GROW, CHANGE): a usable variable with
    probability proportional to its split probability, a split index
    uniform in its usable range."""
    var, top = computed(one, *choose_variable(usable, log_s, max_split, shift, u_var))
    lo_v, hi_v = range_on_path(path, depth_k, var, top)
    split = lo_v + 1 + jnp.floor(u_split * (hi_v - lo_v)).astype(jnp.int32)
    split = jnp.minimum(split, hi_v)
    return Rule(var, split, lo_v, hi_v)


def children_of_new_rule(prior, exhausted_k, new_rule):
    """GROW, CHANGE: the split probabilities of k's children (leaves) under
    the new rule."""
    left = prior.at(exhausted_k + exhausts(new_rule.split, new_rule.lo, new_rule.hi, False), 1)
    right = prior.at(exhausted_k + exhausts(new_rule.split, new_rule.lo, new_rule.hi, True), 1)
    return left, right


class Swapped(NamedTuple):
    """The tree after SWAP, around c."""

    rule_a_at_c: Rule  # rule A at c: its range is k's narrowed by B
    rule_b_at_c: Rule  # rule B at c now: its range is k's narrowed by A
    p_split_c: SplitProb  # c's split probability
    leaves: list  # SplitProb of 2c, 2c + 1 and c's sibling


def swapped_rules(prior, exhausted_k, rule_a, rule_b, dc, same_ab) -> Swapped:
    """SWAP: rule B at k, rule A at c; the ranges and split probabilities at
    c and its leaves, and at c's sibling."""
    exhausted_c_new = exhausted_k + exhausts(rule_b.split, rule_b.lo, rule_b.hi, dc)
    lo_a_c_new = jnp.where(same_ab & dc, jnp.maximum(rule_a.lo, rule_b.split), rule_a.lo)
    hi_a_c_new = jnp.where(same_ab & ~dc, jnp.minimum(rule_a.hi, rule_b.split - 1), rule_a.hi)
    lo_b_c = jnp.where(same_ab & dc, jnp.maximum(rule_b.lo, rule_a.split), rule_b.lo)
    hi_b_c = jnp.where(same_ab & ~dc, jnp.minimum(rule_b.hi, rule_a.split - 1), rule_b.hi)
    p_split_c_new = prior.at(exhausted_c_new, 0)
    leaves_new = [  # 2c, 2c + 1, sibling
        prior.at(exhausted_c_new + exhausts(rule_a.split, lo_a_c_new, hi_a_c_new, False), 1),
        prior.at(exhausted_c_new + exhausts(rule_a.split, lo_a_c_new, hi_a_c_new, True), 1),
        prior.at(exhausted_k + exhausts(rule_b.split, rule_b.lo, rule_b.hi, ~dc), 0),
    ]
    return Swapped(
        rule_a._replace(lo=lo_a_c_new, hi=hi_a_c_new), rule_b._replace(lo=lo_b_c, hi=hi_b_c), p_split_c_new, leaves_new
    )

