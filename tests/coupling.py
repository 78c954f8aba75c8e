"""Compare two runs of the same chains whose programs differ by float rounding.

Data split over devices, the vmapped against the per-chain program, a data
axis padded to another length: the same seed drives the same chains, but the
sums come out in another order, so leaf values and residuals differ in their
last bits. The chains take the same accept/reject decisions until one falls
within rounding of its threshold; from there on they are different (equally
valid) chains. Such near ties are rare but not negligible: in
`tests/test_sharding.py::test_run_mcmc_on_mesh`'s set-up (20 trees, 301
points, 30 iterations, 2 data devices against one), over 30 seeds, 1 chain of
60 flipped a decision with the leaf noise of f36ae08 and none with that of
115e51e; the test's own seed was the one that flipped. Asserting equal trees
for the whole run therefore tests the luck of one random stream.

`assert_coupled` asserts what does not depend on luck: each chain agrees with
its reference, values up to the tolerance and tree structures exactly, up to
a draw where the tree structures differ (a flipped decision); and at most
half the chains (rounded down) have such a draw, so that a broken program,
whose chains all part at once, fails. The chance that a correct program
fails is that of two near ties in one comparison (~3e-4 with two chains at
the rate above).
"""

import numpy as np


def assert_coupled(structure, values, *, rtol=1e-5, atol=1e-5):
    """Two runs take the same decisions until a flip, in at most half the chains.

    Parameters
    ----------
    structure : dict of (array, array)
        Per-draw tree structure (split variables and cutpoints, or the
        variable counts), each pair shaped ``(chains, draws, ...)``: equal
        up to a flip.
    values : dict of (array, array)
        Per-draw values shaped as `structure`: close up to a flip.

    Returns
    -------
    first : numpy.ndarray
        ``(chains,)``: the index of each chain's first differing draw (the
        number of draws where none does), for the callers' comparisons of
        what is not per draw.
    """
    leading = {np.shape(a)[:2] for pair in (*structure.values(), *values.values()) for a in pair}
    assert len(leading) == 1, f'draws shaped differently: {leading}'
    ((chains, draws),) = leading
    same_trees = np.ones((chains, draws), bool)
    for a, b in structure.values():
        same_trees &= (np.asarray(a) == np.asarray(b)).reshape(chains, draws, -1).all(-1)
    first = np.where(same_trees.all(1), draws, same_trees.argmin(1))
    for name, (a, b) in values.items():
        for c in range(chains):
            where = f'before its first flip (draw {first[c]})' if first[c] < draws else 'no flip'
            np.testing.assert_allclose(
                np.asarray(a, float)[c, : first[c]],
                np.asarray(b, float)[c, : first[c]],
                rtol=rtol,
                atol=atol,
                err_msg=f'{name}, chain {c}, {where}',
            )
    parted = int(np.sum(first < draws))
    assert parted <= chains // 2, f'{parted} of {chains} chains parted (first differing draws: {first.tolist()})'
    return first


def assert_same_fit(fit, ref, *, rtol=1e-5, atol=1e-5):
    """`assert_coupled` for two `gbart` fits with the same chains: the
    variable counts, ``yhat_train``, ``yhat_test``, the probabilities of a
    binary fit, the kept error sd and DART's split probabilities per draw;
    the burn-in's error sd of the chains that never part."""
    names = ('yhat_train', 'yhat_test', 'prob_train', 'prob_test', 'sigma_', 'varprob')
    names = [name for name in names if getattr(ref, name, None) is not None]
    for name in names:
        assert getattr(fit, name, None) is not None, name

    def by_chain(f, name):  # (draws, ...), chain after chain, as (chains, draws per chain, ...)
        value = np.asarray(getattr(f, name))
        return value.reshape(ref.chains, -1, *value.shape[1:])

    first = assert_coupled(
        {'varcount': (by_chain(fit, 'varcount'), by_chain(ref, 'varcount'))},
        {name: (by_chain(fit, name), by_chain(ref, name)) for name in names},
        rtol=rtol,
        atol=atol,
    )
    if getattr(ref, 'sigma', None) is not None:
        whole = first == ref.ndpost // ref.chains
        sigma = np.asarray(fit.sigma).reshape(len(fit.sigma), -1)  # (iterations, chains)
        ref_sigma = np.asarray(ref.sigma).reshape(sigma.shape)
        np.testing.assert_allclose(sigma[:, whole], ref_sigma[:, whole], rtol=rtol, atol=atol, err_msg='sigma')
    return first
