"""Tests for bartz.prepcovars: cut-points, binning, constant predictors."""

import jax
import numpy as np
import pytest
from jax import numpy as jnp

from bartz.prep.cutpoints import (
    Splits,
    bin_predictors,
    bin_predictors_np,
    binned_dtype,
    compute_splits,
    drop_predictors,
    usable_predictors,
)


def cuts_of(splits: Splits, j: int) -> np.ndarray:
    """Unpadded cut-points of predictor j."""
    return splits.splits[j, : splits.max_split[j]]


def check_splits_invariants(s: Splits):
    p, max_K = s.splits.shape
    assert s.splits.dtype == np.float32
    assert s.max_split.dtype == np.int32
    assert s.max_split.shape == (p,)
    assert max_K == max(1, s.max_split.max(initial=0))
    for j in range(p):
        c = cuts_of(s, j)
        assert np.all(np.isfinite(c))
        assert np.all(np.diff(c) > 0)
        assert np.all(s.splits[j, s.max_split[j] :] == np.inf)


@pytest.fixture
def rng():
    return np.random.default_rng(20240611)


def mixed_x(rng, n=200):
    """Continuous, binary, 3-valued and constant columns."""
    return np.column_stack(
        [
            rng.normal(size=n),
            rng.integers(0, 2, size=n),
            rng.choice([1.0, 2.0, 4.0], size=n),
            np.full(n, 3.5),
            rng.exponential(size=n),
        ]
    )


class TestComputeSplits:
    def test_evenly_spaced_matches_R(self, rng):
        x = rng.normal(size=(300, 1))
        s = compute_splits(x, numcut=100)
        lo, hi = np.float32(x.min()), np.float32(x.max())
        # R: seq(min, max, length.out=numcut+2)[-c(1, numcut+2)]
        expected = np.linspace(float(lo), float(hi), 102)[1:-1].astype(np.float32)
        assert s.max_split[0] == 100
        np.testing.assert_array_equal(cuts_of(s, 0), expected)
        check_splits_invariants(s)

    def test_few_unique_values_give_midpoints(self, rng):
        x = mixed_x(rng)
        for usequants in (False, True):
            s = compute_splits(x, numcut=100, usequants=usequants)
            np.testing.assert_array_equal(cuts_of(s, 1), [0.5])
            np.testing.assert_array_equal(cuts_of(s, 2), [1.5, 3.0])
            check_splits_invariants(s)

    def test_midpoints_up_to_numcut_plus_one_values(self):
        x = np.arange(6.0)[:, None]  # 6 distinct values
        np.testing.assert_array_equal(
            cuts_of(compute_splits(x, numcut=5), 0), np.arange(5) + 0.5
        )
        # one more value than numcut + 1: evenly spaced grid instead
        s = compute_splits(x, numcut=4)
        np.testing.assert_allclose(cuts_of(s, 0), [1, 2, 3, 4])

    def test_constant_column_has_no_cutpoints(self, rng):
        s = compute_splits(mixed_x(rng))
        assert s.max_split[3] == 0
        assert np.all(s.splits[3] == np.inf)

    def test_all_constant(self):
        s = compute_splits(np.ones((5, 3)))
        assert s.splits.shape == (3, 1)
        np.testing.assert_array_equal(s.max_split, [0, 0, 0])

    def test_usequants(self, rng):
        x = rng.exponential(size=(1000, 1)) ** 2
        numcut = 20
        s = compute_splits(x, numcut=numcut, usequants=True)
        c = cuts_of(s, 0)
        check_splits_invariants(s)
        assert len(np.unique(c)) == len(c) == numcut
        u = np.unique(x.astype(np.float32)).astype(np.float64)
        expected = np.quantile(u, np.arange(1, numcut + 1) / (numcut + 1))
        np.testing.assert_allclose(c, expected, rtol=1e-6)
        # quantiles follow the data: about the same count in each bin
        counts = np.bincount(bin_predictors_np(x, s.splits)[0], minlength=numcut + 1)
        assert counts.min() > 0.5 * len(x) / (numcut + 1)
        # the evenly spaced grid leaves the right tail sparse
        s_even = compute_splits(x, numcut=numcut)
        counts_even = np.bincount(bin_predictors_np(x, s_even.splits)[0])
        assert counts_even.max() > 5 * counts.max()

    def test_usequants_ties_no_duplicates(self, rng):
        # many ties at 0 and a continuous part
        x = np.where(rng.uniform(size=500) < 0.7, 0.0, rng.normal(size=500))[:, None]
        s = compute_splits(x, numcut=50, usequants=True)
        check_splits_invariants(s)
        assert 0 < s.max_split[0] <= 50

    def test_per_predictor_numcut(self, rng):
        x = rng.normal(size=(100, 3))
        s = compute_splits(x, numcut=[3, 10, 0])
        np.testing.assert_array_equal(s.max_split, [3, 10, 0])
        assert s.splits.shape == (3, 10)

    def test_float32_collisions(self):
        # distinct in float64, almost touching in float32
        a = np.float32(1.0)
        b = np.nextafter(a, np.float32(2))
        x = np.array([[a], [b]], dtype=np.float32)
        s = compute_splits(x)
        c = cuts_of(s, 0)
        assert len(c) == 1 and a < c[0] <= b
        bins = bin_predictors_np(x, s.splits)
        np.testing.assert_array_equal(bins, [[0, 1]])
        # tiny range: the evenly spaced grid collapses to few float32 values
        x = (1 + np.arange(300) * 1e-9)[:, None]
        s = compute_splits(x, numcut=100)
        check_splits_invariants(s)

    def test_errors(self, rng):
        x = rng.normal(size=(10, 2))
        with pytest.raises(ValueError, match='numcut'):
            compute_splits(x, numcut=-1)
        with pytest.raises(ValueError, match='numcut'):
            compute_splits(x, numcut=[1, 2, 3])
        with pytest.raises(ValueError, match='numcut'):
            compute_splits(x, numcut=2.5)
        x_nan = x.copy()
        x_nan[3, 1] = np.nan
        with pytest.raises(ValueError, match='x must be finite'):
            compute_splits(x_nan)
        with pytest.raises(ValueError, match='x must be finite'):
            compute_splits(np.array([[1e300], [0.0]]))  # overflows float32
        with pytest.raises(ValueError, match='x must be a 2-D'):
            compute_splits(x[:, 0])


class TestXinfo:
    def test_matrix_with_padding(self, rng):
        xinfo = np.array(
            [[0.0, 1.0, 2.0], [-1.0, np.nan, np.nan], [5.0, 6.0, np.inf]]
        )
        x = rng.normal(size=(10, 3))
        s = compute_splits(x, numcut=100, usequants=True, xinfo=xinfo)
        np.testing.assert_array_equal(s.max_split, [3, 1, 2])
        np.testing.assert_array_equal(cuts_of(s, 0), [0, 1, 2])
        np.testing.assert_array_equal(cuts_of(s, 1), [-1])
        np.testing.assert_array_equal(cuts_of(s, 2), [5, 6])
        check_splits_invariants(s)

    def test_list(self, rng):
        x = rng.normal(size=(10, 3))
        s = compute_splits(x, xinfo=[np.array([0.0, 1.0]), [3.0], []])
        np.testing.assert_array_equal(s.max_split, [2, 1, 0])
        assert s.splits.shape == (3, 2)
        np.testing.assert_array_equal(cuts_of(s, 0), [0, 1])
        check_splits_invariants(s)

    def test_matrix_and_list_agree(self, rng):
        rows = [np.sort(rng.normal(size=k)) for k in (4, 1, 7)]
        mat = np.full((3, 7), np.nan)
        for j, r in enumerate(rows):
            mat[j, : len(r)] = r
        x = rng.normal(size=(5, 3))
        a = compute_splits(x, xinfo=mat)
        b = compute_splits(x, xinfo=rows)
        np.testing.assert_array_equal(a.splits, b.splits)
        np.testing.assert_array_equal(a.max_split, b.max_split)

    @pytest.mark.parametrize(
        'xinfo, match',
        [
            (np.array([[1.0, 0.0], [0.0, 1.0]]), 'xinfo row 0.*strictly increasing'),
            (np.array([[0.0, 0.0], [0.0, 1.0]]), 'xinfo row 0.*strictly increasing'),
            (np.array([[0.0, 1.0]]), 'xinfo.*one row per predictor'),
            ([[0.0], [1.0], [2.0]], 'xinfo.*one row per predictor'),
            (np.array([[0.0, np.nan, 1.0], [0, 1, 2]]), 'xinfo row 0.*padding'),
            ([[-np.inf, 0.0], [1.0]], 'xinfo row 0.*finite'),
            ([[0.0], [2.0, 1.0]], 'xinfo row 1.*strictly increasing'),
            (np.zeros(3), 'xinfo must be a 2-D'),
            (3.0, 'xinfo must be'),
        ],
    )
    def test_errors(self, rng, xinfo, match):
        with pytest.raises(ValueError, match=match):
            compute_splits(rng.normal(size=(5, 2)), xinfo=xinfo)


class TestBinning:
    @pytest.fixture
    def data(self, rng):
        x = mixed_x(rng, n=300)
        s = compute_splits(x, numcut=30)
        # new data, also outside the training range
        x_new = np.concatenate([x, 3 * mixed_x(rng, n=100) - 1])
        return x_new, s

    def test_brute_force_and_jax_agree(self, data):
        x, s = data
        brute = np.array(
            [
                [(cuts_of(s, j) <= np.float32(xi)).sum() for xi in x[:, j]]
                for j in range(x.shape[1])
            ]
        )
        b_np = bin_predictors_np(x, s.splits)
        b_jax = bin_predictors(jnp.asarray(x.T, jnp.float32), s.splits)
        assert b_np.shape == b_jax.shape == x.T.shape
        assert b_np.dtype == b_jax.dtype == np.uint8
        np.testing.assert_array_equal(b_np, brute)
        np.testing.assert_array_equal(np.asarray(b_jax), brute)
        assert np.all(b_np <= s.max_split[:, None])

    def test_left_right_convention(self, data):
        x, s = data
        bins = bin_predictors_np(x, s.splits)
        x32 = x.astype(np.float32)
        for j in range(x.shape[1]):
            for idx in range(1, s.max_split[j] + 1):
                c = s.splits[j, idx - 1]
                np.testing.assert_array_equal(x32[:, j] < c, bins[j] < idx)

    def test_training_data_separates_unique_values(self, rng):
        x = mixed_x(rng)
        s = compute_splits(x, numcut=100)
        bins = bin_predictors_np(x, s.splits)
        for j in (1, 2, 3):  # few distinct values: one bin each
            assert len(np.unique(bins[j])) == len(np.unique(x[:, j]))

    def test_outside_training_range(self, rng):
        x = rng.normal(size=(100, 2))
        s = compute_splits(x, numcut=10)
        x_new = np.array([[-1e6, 1e6], [x.min() - 1, x.max() + 1], [-np.inf, np.inf]])
        expected = [[0, 0, 0], [10, 10, 10]]
        np.testing.assert_array_equal(bin_predictors_np(x_new, s.splits), expected)
        np.testing.assert_array_equal(
            bin_predictors(jnp.asarray(x_new.T), s.splits), expected
        )

    def test_constant_predictor_bins_to_zero(self, rng):
        x = mixed_x(rng)
        s = compute_splits(x)
        x_new = mixed_x(rng)
        x_new[:, 3] = np.linspace(-10, 10, len(x_new))
        assert np.all(bin_predictors_np(x_new, s.splits)[3] == 0)
        assert np.all(bin_predictors(jnp.asarray(x_new.T), s.splits)[3] == 0)

    def test_jittable(self, data):
        x, s = data
        x_t = jnp.asarray(x.T, jnp.float32)
        f = jax.jit(lambda x, sp: bin_predictors(x, sp).sum(axis=1, dtype=jnp.int32))
        expected = bin_predictors_np(x, s.splits).sum(axis=1)
        np.testing.assert_array_equal(f(x_t, jnp.asarray(s.splits)), expected)

    def test_dtypes(self, rng):
        x = rng.normal(size=(2000, 2))
        for numcut, dtype in [(100, np.uint8), (255, np.uint8), (1000, np.uint16)]:
            s = compute_splits(x, numcut=numcut)
            assert s.splits.shape[1] == numcut
            assert bin_predictors_np(x, s.splits).dtype == dtype
            assert bin_predictors(jnp.asarray(x.T), s.splits).dtype == dtype
        b_np = bin_predictors_np(x, s.splits)
        assert b_np.max() > 255
        np.testing.assert_array_equal(b_np, bin_predictors(jnp.asarray(x.T), s.splits))

    def test_shape_mismatch(self, rng):
        s = compute_splits(rng.normal(size=(10, 3)))
        with pytest.raises(ValueError, match='same p'):
            bin_predictors_np(rng.normal(size=(10, 2)), s.splits)
        with pytest.raises(ValueError, match='same p'):
            bin_predictors(jnp.zeros((2, 10)), s.splits)


@pytest.mark.parametrize('max_k', [1, 7, 255, 256, 1000])
@pytest.mark.parametrize('seed', [0, 1, 2])
def test_binning_matches_searchsorted_at_edge_values(max_k, seed):
    """The host binning (a branch-free binary search) gives numpy's
    ``searchsorted(cuts, x, side='right')`` bin by bin: at the cut-points
    themselves, +-0, +-inf, NaN and beyond float32, with rows of no, some
    and all cut-points, and for uint16 bins."""
    rng = np.random.default_rng(seed)
    p = 4
    splits = np.full((p, max_k), np.inf, np.float32)
    for j, k in enumerate([0, max_k, rng.integers(1, max_k + 1), max_k // 2]):
        cuts = np.unique(rng.normal(size=k).astype(np.float32))
        splits[j, : cuts.size] = cuts
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e39, -1e39]
    pool = np.concatenate([splits[np.isfinite(splits)], rng.normal(size=50), special])
    x = rng.choice(pool, size=(500, p))
    bins = bin_predictors_np(x, splits)
    assert bins.dtype == binned_dtype(max_k)
    with np.errstate(over='ignore'):
        x32 = x.astype(np.float32)
    for j in range(p):
        cuts = splits[j][np.isfinite(splits[j])]
        np.testing.assert_array_equal(bins[j], np.searchsorted(cuts, x32[:, j], side='right'))


def test_binned_dtype():
    assert binned_dtype(0) == np.uint8
    assert binned_dtype(255) == np.uint8
    assert binned_dtype(256) == np.uint16
    assert binned_dtype(65535) == np.uint16
    assert binned_dtype(65536) == np.uint32
    with pytest.raises(ValueError, match='max_K'):
        binned_dtype(-1)
    with pytest.raises(ValueError, match='max_K'):
        binned_dtype(2**32)


def test_rm_const(rng):
    x = mixed_x(rng)
    x_const = np.column_stack([np.zeros(len(x)), x])
    s = compute_splits(x_const, numcut=[500, 100, 100, 100, 100, 100])
    mask = usable_predictors(s.max_split)
    np.testing.assert_array_equal(mask, [False, True, True, True, False, True])
    kept = drop_predictors(s, mask)
    np.testing.assert_array_equal(kept.max_split, s.max_split[mask])
    np.testing.assert_array_equal(kept.splits, s.splits[mask, : kept.splits.shape[1]])
    assert kept.splits.shape == (4, 100)
    check_splits_invariants(kept)
    bins = bin_predictors_np(x_const[:, mask], kept.splits)
    np.testing.assert_array_equal(bins, bin_predictors_np(x_const, s.splits)[mask])
    # dropping everything still gives valid (p=0) arrays
    none = drop_predictors(s, np.zeros(6, bool))
    assert none.splits.shape == (0, 1)
    with pytest.raises(ValueError, match='mask'):
        drop_predictors(s, mask[:3])
