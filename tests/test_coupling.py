"""The comparison of runs that may part at a flipped decision (`tests/coupling.py`)."""

import numpy as np
import pytest

from tests.coupling import assert_coupled

CHAINS, DRAWS = 2, 6


def _runs():
    rng = np.random.default_rng(0)
    trees = rng.integers(0, 4, size=(CHAINS, DRAWS, 5))
    values = rng.normal(size=(CHAINS, DRAWS, 3))
    return trees, values


def _check(trees_a, values_a, trees_b, values_b):
    return assert_coupled({'trees': (trees_a, trees_b)}, {'values': (values_a, values_b)})


def test_same_runs():
    trees, values = _runs()
    first = _check(trees, values, trees.copy(), values * (1 + 1e-7))
    np.testing.assert_array_equal(first, [DRAWS, DRAWS])


def test_one_chain_parts():
    """Chain 1 flips a decision at draw 3: what follows is not compared."""
    trees, values = _runs()
    other_trees, other_values = trees.copy(), values.copy()
    other_trees[1, 3:, 0] += 1
    other_values[1, 3:] += 1
    np.testing.assert_array_equal(_check(trees, values, other_trees, other_values), [DRAWS, 3])


def test_all_chains_part():
    trees, values = _runs()
    other_trees = trees.copy()
    other_trees[:, 4, 2] += 1
    with pytest.raises(AssertionError, match='2 of 2 chains parted'):
        _check(trees, values, other_trees, values)


def test_values_differ_before_a_flip():
    """Values that differ while the trees are the same are an error, not a flip."""
    trees, values = _runs()
    other_trees, other_values = trees.copy(), values.copy()
    other_trees[0, 4, 0] += 1
    other_values[0, 2, 1] += 1e-3
    with pytest.raises(AssertionError, match=r'values, chain 0, before its first flip \(draw 4\)'):
        _check(trees, values, other_trees, other_values)
    other_values[0, 2, 1] = values[0, 2, 1]
    other_values[1, 0, 0] += 1e-3
    with pytest.raises(AssertionError, match='values, chain 1, no flip'):
        _check(trees, values, other_trees, other_values)
