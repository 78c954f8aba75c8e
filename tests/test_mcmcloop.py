"""What `bartz.mcmcloop.run_mcmc` does on the host around the compiled chunk:
the draws travel packed by item size (`bartz.run.traces.Packing`), the
splits per predictor are counted from the saved trees
(`bartz.run.traces.var_count`) and the progress's leaves per tree follow
from the accepted moves."""

import jax
import numpy as np
import pytest
from jax import numpy as jnp
from jax import random

from bartz.forest import grove
from bartz.run import loop as mcmcloop
from bartz.run import traces
from bartz.sampler import step as mcmcstep
from tests.test_mcmcstep import data_state


def _random_trace(rng, lead):
    """A `mcmcloop.Trace` of random values of every item size, ``lead`` in front."""
    return mcmcloop.Trace(
        var_tree=rng.integers(0, 256, size=(*lead, 5, 8), dtype=np.uint8),
        split_tree=rng.integers(0, 2**16, size=(*lead, 5, 8), dtype=np.uint16),
        # any bits, NaN patterns included: the packing must not touch them
        leaf_tree=rng.integers(0, 2**32, size=(*lead, 5, 16), dtype=np.uint32).view(np.float32),
        sigma2=rng.normal(size=lead).astype(np.float32),
        varcount=rng.integers(-(2**31), 2**31, size=(*lead, 3), dtype=np.int32),
        fit_train=None,
        log_s=(rng.normal(size=(*lead, 3)) > 0),
    )


@pytest.mark.parametrize('lead', [(), (2,)])
def test_packed_draws_come_back_bit_for_bit(lead):
    """Packed in the program (`pack_draw`, one row per item size: here 1, 2 and
    4 bytes) and unpacked on the host (`unpack_draws`), every field of a saved
    draw comes back with its shape, type and bits, with and without a
    chain axis."""
    rng = np.random.default_rng(0)
    draws = [_random_trace(rng, lead) for _ in range(3)]
    packing = traces.draw_packing(jax.eval_shape(lambda: draws[0]))
    assert [dtype for dtype, _ in packing.rows] == [np.uint8, np.uint16, np.uint32]
    rows = [jax.jit(lambda d: traces.pack_draw(packing, d))(d) for d in draws]
    buffer = tuple(np.stack([np.asarray(r[i]) for r in rows]) for i in range(len(packing.rows)))
    back = traces.unpack_draws(packing, buffer)
    assert back.fit_train is None
    for name in mcmcloop.Trace._fields:
        want = [getattr(d, name) for d in draws]
        if want[0] is None:
            continue
        got = getattr(back, name)
        want = np.stack(want)
        assert got.shape == want.shape and got.dtype == want.dtype, name
        np.testing.assert_array_equal(np.ascontiguousarray(got).view(np.uint8), want.view(np.uint8), err_msg=name)


def test_var_count_on_host_is_the_scatter():
    """`var_count`, on the host from saved trees ``(draws, chains, m,
    H/2)``, counts the splits on each predictor as
    `bartz.grove.var_count_scatter` does in the program: leaves (split 0)
    are not counted, whatever their variable."""
    rng = np.random.default_rng(1)
    num_vars = 6
    var_tree = rng.integers(0, num_vars, size=(4, 3, 7, 16), dtype=np.uint8)
    split_tree = (rng.integers(0, 5, size=var_tree.shape) * (rng.uniform(size=var_tree.shape) < 0.4)).astype(np.uint8)
    got = traces.var_count(var_tree, split_tree, num_vars)
    assert got.shape == (4, 3, num_vars) and got.dtype == np.int32
    count = jax.jit(jax.vmap(jax.vmap(lambda v, s: grove.var_count_scatter(v, s, num_vars))))
    np.testing.assert_array_equal(got, count(var_tree, split_tree))
    # no draws: an empty count of the right shape
    assert traces.var_count(var_tree[:0], split_tree[:0], num_vars).shape == (0, 3, num_vars)


@pytest.mark.parametrize('num_chains', [None, 3])
def test_progress_leaves_per_tree_follow_the_trees(num_chains):
    """The progress's leaves per tree, followed on the host from the
    accepted GROW and PRUNE moves, are those of the trees after every
    chunk (one chain; three chains on threads, summed over the chains), and
    the saved splits per predictor are those of the saved trees."""
    state = data_state(2)
    if num_chains is not None:
        state = mcmcstep.init_chains(state, num_chains)
    seen = []
    settings = {'n_burn': 4, 'n_save': 6, 'chunk_size': 2, 'printevery': None, 'num_chains': num_chains}
    final, trace, _ = mcmcloop.run_mcmc(random.key(4), state, callback=lambda f: seen.append(f['mean_leaves']), **settings)

    def mean_leaves(split):
        return 1 + np.count_nonzero(split) / (split.size // split.shape[-1])

    assert len(seen) == 5 and seen[0] > 1  # (from the root)
    assert seen[-1] == pytest.approx(mean_leaves(np.asarray(final.forest.split_tree)), rel=1e-12)
    # the chunks after the burn-in end on a saved draw (iterations 6, 8, 10: draws 1, 3, 5)
    for k, draw in ((2, 1), (3, 3), (4, 5)):
        assert seen[k] == pytest.approx(mean_leaves(trace.split_tree[draw]), rel=1e-12)
    num_vars = state.X.shape[0]
    count = jax.vmap(lambda v, s: grove.var_count_scatter(v, s, num_vars))
    if num_chains is not None:
        count = jax.vmap(count)
    np.testing.assert_array_equal(trace.varcount, count(jnp.asarray(trace.var_tree), jnp.asarray(trace.split_tree)))
