"""Tests of bartz.diagnostics: R-hat, ESS, Geweke, summary."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import linalg, signal, special, stats

from bartz import diagnostics
from bartz.diagnostics import ess, ess_bulk, ess_tail, geweke, rhat, summary
from bartz.diagnostics.chains import BATCH_SIZE, as_chains, split_chains
from bartz.diagnostics.mixing import rhat_bulk_tail
from bartz.diagnostics.ranks import sorted_twice_ranks, z_scale
from bartz.diagnostics.spectral import spectrum0_ar

SEEDS = [0, 1, 2, 3, 4]


def ar1_chains(rng, phi, shape):
    """Stationary AR(1) chains with unit innovations along axis 1."""
    innov = rng.standard_normal(shape)
    innov[:, 0] /= math.sqrt(1 - phi**2)  # start from the stationary law
    return signal.lfilter([1], [1, -phi], innov, axis=1)


# ------------------------------------------- independent reference of Stan's ESS


def reference_autocov(chain):
    """Biased autocovariance by direct double loop."""
    n = len(chain)
    centered = [v - sum(chain) / n for v in chain]
    return [sum(centered[i] * centered[i + t] for i in range(n - t)) / n for t in range(n)]


def reference_ess(chains):
    """ESS of (chains, draws), a literal loop transcription of Stan's algorithm.

    Vehtari et al. (2021), appendix / Stan ``compute_effective_sample_size``.
    """
    chains = np.asarray(chains, dtype=float)
    m, n = chains.shape
    acov = [reference_autocov(list(c)) for c in chains]
    chain_mean = [sum(c) / n for c in chains]
    mean_var = sum(a[0] for a in acov) / m * n / (n - 1)
    var_plus = mean_var * (n - 1) / n
    if m > 1:
        grand = sum(chain_mean) / m
        var_plus += sum((c - grand) ** 2 for c in chain_mean) / (m - 1)

    def rho_at(t):
        return 1 - (mean_var - sum(a[t] for a in acov) / m) / var_plus

    rho = [0.0] * n
    rho[0] = rho_even = 1.0
    rho[1] = rho_odd = rho_at(1)
    t = 1
    while t < n - 3 and rho_even + rho_odd > 0:
        rho_even = rho_at(t + 1)
        rho_odd = rho_at(t + 2)
        if rho_even + rho_odd >= 0:
            rho[t + 1] = rho_even
            rho[t + 2] = rho_odd
        t += 2
    max_t = t - 2
    if rho_even > 0:
        rho[max_t + 1] = rho_even
    t = 1
    while t <= max_t - 2:
        if rho[t + 1] + rho[t + 2] > rho[t - 1] + rho[t]:
            rho[t + 1] = rho[t + 2] = (rho[t - 1] + rho[t]) / 2
        t += 2
    tau = -1 + 2 * sum(rho[: max_t + 1]) + rho[max_t + 1]
    tau = max(tau, 1 / math.log10(m * n))
    return m * n / tau


def reference_split(chains):
    n = chains.shape[1]
    half = n // 2
    return np.concatenate([chains[:, :half], chains[:, n - half :]])


def reference_rank_normalize(chains):
    flat = chains.ravel()
    ranks = stats.rankdata(flat)  # average ranks of ties
    return stats.norm.ppf((ranks - 3 / 8) / (flat.size + 1 / 4)).reshape(chains.shape)


@pytest.mark.parametrize(
    ('kind', 'shape'),
    [
        ('iid', (4, 40)),
        ('iid', (3, 41)),  # odd: middle draw dropped
        ('ar', (2, 57)),
        ('ar', (1, 30)),
        ('antithetic', (2, 30)),  # negative lag-1 autocorrelation
        ('short', (2, 4)),
        ('short', (1, 7)),
        ('ties', (3, 25)),
    ],
)
@pytest.mark.parametrize('seed', SEEDS)
def test_ess_matches_loop_reference(kind, shape, seed):
    rng = np.random.default_rng(seed)
    if kind == 'ar':
        x = ar1_chains(rng, 0.8, shape)
    elif kind == 'antithetic':
        x = ar1_chains(rng, -0.7, shape)
    elif kind == 'ties':
        x = rng.integers(0, 3, shape).astype(float)
    else:
        x = rng.standard_normal(shape)

    split = reference_split(x)
    np.testing.assert_allclose(ess(x), reference_ess(split), rtol=1e-8)
    np.testing.assert_allclose(
        ess_bulk(x), reference_ess(reference_rank_normalize(split)), rtol=1e-8
    )
    with np.errstate(invalid='ignore'):  # constant indicator with ties
        tail_ref = np.nanmin([
            reference_ess(reference_split((x <= np.quantile(x, p)).astype(float)))
            for p in (0.05, 0.95)
        ])
    np.testing.assert_allclose(ess_tail(x), tail_ref, rtol=1e-8)


def test_ess_vectorised_equals_elementwise():
    rng = np.random.default_rng(5)
    # elements with very different autocorrelation, so that the Geyer
    # truncation happens at different lags for each
    phis = np.array([-0.5, 0.0, 0.3, 0.9, 0.99])
    x = np.stack([ar1_chains(rng, phi, (3, 200)) for phi in phis], axis=-1)
    for func in (ess, ess_bulk, ess_tail, rhat):
        vectorised = func(x)
        assert vectorised.shape == (len(phis),)
        for j in range(len(phis)):
            np.testing.assert_allclose(vectorised[j], func(x[..., j]), rtol=1e-12)


def test_batched_over_elements():
    """More elements than one slice of `BATCH_SIZE` draws: processed in
    three slices (the last one shorter), and each element, at the edges of
    the slices too, gets what it gets alone."""
    rng = np.random.default_rng(6)
    num_chains, num_draws = 4, 32
    per_slice = BATCH_SIZE // (num_chains * num_draws)
    x = ar1_chains(rng, 0.5, (num_chains, num_draws, 2 * per_slice + 37))
    edges = [0, 1, per_slice - 1, per_slice, per_slice + 1, 2 * per_slice - 1, 2 * per_slice, x.shape[2] - 1]
    for func in (rhat, ess, ess_bulk, ess_tail):
        np.testing.assert_array_equal(func(x)[edges], func(x[..., edges]))
    table = summary(x)
    assert len(table) == x.shape[2]
    np.testing.assert_array_equal(table.iloc[edges].to_numpy(), summary(x[..., edges]).to_numpy())


@pytest.mark.parametrize('seed', SEEDS)
def test_ranks_match_scipy(seed):
    rng = np.random.default_rng(seed)
    for a in (
        rng.standard_normal((7, 50)),
        rng.integers(0, 4, (7, 50)).astype(float),  # many ties
        np.ones((2, 9)),
    ):
        order, ordered, twice = sorted_twice_ranks(a)
        np.testing.assert_array_equal(ordered, np.take_along_axis(a, order, axis=1))
        np.testing.assert_array_equal(ordered, np.sort(a, axis=1))
        np.testing.assert_array_equal(twice / 2, np.take_along_axis(stats.rankdata(a, axis=1), order, axis=1))


@pytest.mark.parametrize('seed', SEEDS)
def test_z_scale_table_is_ndtri_per_draw(seed):
    """`z_scale` takes Phi^-1 from a table of the possible (half-integer)
    ranks: the same numbers as Phi^-1 of each draw's rank, with and
    without ties; its median is `np.median`'s, for even and odd sizes."""
    rng = np.random.default_rng(seed)
    for x in (
        rng.standard_normal((5, 2, 40)),
        rng.integers(0, 4, (5, 3, 33)).astype(float),  # many ties, odd size
        np.abs(rng.standard_normal((5, 2, 40)) - 0.1),
    ):
        size = x.shape[1] * x.shape[2]
        ranks = stats.rankdata(x.reshape(len(x), size), axis=1)
        expected = special.ndtri((ranks - 0.375) / (size + 0.25)).reshape(x.shape)
        z, median = z_scale(x, with_median=True)
        np.testing.assert_array_equal(z, expected)
        np.testing.assert_array_equal(z_scale(x), expected)
        np.testing.assert_array_equal(median, np.median(x, axis=(1, 2)))


def test_reference_rank_normalization_and_rhat():
    """R-hat against a direct transcription of the formulas of the paper."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 51)) * [[1], [1.5], [1]] + [[0], [0.3], [0]]

    def basic(chains):
        m, n = chains.shape
        w = np.mean([np.var(c, ddof=1) for c in chains])
        b = n * np.var([np.mean(c) for c in chains], ddof=1)
        return math.sqrt(((n - 1) / n * w + b / n) / w)

    split = reference_split(x)
    bulk = basic(reference_rank_normalize(split))
    tail = basic(reference_rank_normalize(np.abs(split - np.median(split))))
    np.testing.assert_allclose(rhat(x), max(bulk, tail), rtol=1e-10)


def lcg_chains(shape, seed=12345):
    """Deterministic AR(1)-like draws from an integer LCG, reproducible anywhere.

    Used to freeze values computed by external implementations.
    """
    state = seed
    uniforms = []
    for _ in range(math.prod(shape)):
        state = (1103515245 * state + 12345) % 2**31
        uniforms.append(state / 2**31 - 0.5)
    u = np.array(uniforms).reshape(shape)
    out = np.empty(shape)
    out[..., 0] = u[..., 0]
    for t in range(1, shape[-1]):
        out[..., t] = 0.6 * out[..., t - 1] + u[..., t]
    return out


def test_matches_arviz_frozen_values():
    """Values computed by ArviZ 0.23.4 (``az.ess(x, method=...)``, ``az.rhat``).

    A wider random cross-check against ArviZ (ties, 1-4 chains, 4-300 draws,
    phi in (-0.8, 0.99)) agreed to 2e-15 when this module was written.
    """
    x = lcg_chains((3, 60))
    np.testing.assert_allclose(ess_bulk(x), 58.830527154460746, rtol=1e-12)
    np.testing.assert_allclose(ess_tail(x), 87.03119397633564, rtol=1e-12)
    np.testing.assert_allclose(ess(x), 59.01656894766338, rtol=1e-12)
    np.testing.assert_allclose(rhat(x), 1.0339304815687689, rtol=1e-12)


def test_geweke_matches_coda_frozen_values():
    """Values computed by R's coda 0.19-4 (``geweke.diag``, ``spectrum0.ar``).

    A wider cross-check against coda (n from 12 to 2000, phi up to 0.95,
    several frac1/frac2) agreed to 6e-14 when this module was written.
    """
    x = lcg_chains((2, 200), seed=777).T
    x[:20, 1] += 1.0
    np.testing.assert_allclose(
        geweke(x), [0.11902979391461026, 5.4593136023832045], rtol=1e-10
    )
    np.testing.assert_allclose(
        geweke(x, frac1=0.2, frac2=0.4), [0.60656435599193714, 1.26027479475848], rtol=1e-10
    )
    np.testing.assert_allclose(
        spectrum0_ar(x), [0.51217237199673926, 1.4177088771286199], rtol=1e-10
    )


# ----------------------------------------------------- statistical behaviour


@pytest.mark.parametrize('seed', SEEDS)
def test_iid_rhat_and_ess(seed):
    """Independent draws: R-hat ~ 1 and ESS ~ number of draws.

    Tolerances from a calibration on 5000 elements of 4 x 1000 iid draws:
    R-hat has mean 1.0003, sd 0.0005, max 1.0036; ESS / draws has mean 0.985
    (the estimator is slightly biased down), sd 0.044 and a heavier lower tail
    (0.1% quantile 0.79, min 0.75, max 1.13); tail ESS / draws min 0.70, max
    1.07.
    """
    rng = np.random.default_rng(seed)
    num_elements = 20
    x = rng.standard_normal((4, 1000, num_elements))
    total = 4000
    assert np.all(rhat(x) < 1.01)
    assert np.all(rhat(x) > 0.99)
    for func in (ess_bulk, ess):
        values = func(x) / total
        assert np.all((values > 0.65) & (values < 1.25)), values
        # the mean of 20 elements has sd 0.01: 0.93-1.04 is ~5 sd
        assert 0.93 < np.mean(values) < 1.04
    tail = ess_tail(x) / total
    assert np.all((tail > 0.55) & (tail < 1.25)), tail
    assert 0.9 < np.mean(tail) < 1.03


@pytest.mark.parametrize('phi', [0.5, 0.9])
@pytest.mark.parametrize('seed', SEEDS)
def test_ar1_ess_matches_analytic(seed, phi):
    """AR(1) chains: ESS ~ N (1 - phi) / (1 + phi).

    Calibration on 500 elements of 4 x 10000 draws with phi = 0.9: ESS /
    analytic has mean 0.997, sd 0.065, min 0.74, max 1.16 (sd 0.057 for phi =
    0.5 with 4 x 2000, so smaller here); one chain of 40000 draws: sd 0.062.
    """
    rng = np.random.default_rng(seed)
    num_chains, num_draws, num_elements = 4, 10_000, 10
    x = ar1_chains(rng, phi, (num_chains, num_draws, num_elements))
    expected = num_chains * num_draws * (1 - phi) / (1 + phi)
    for func in (ess, ess_bulk):
        values = func(x) / expected
        assert np.all(np.abs(values - 1) < 0.35), values  # > 5 sd
        # the mean of 10 elements has sd 0.02
        assert abs(np.mean(values) - 1) < 0.1, values
    # a single chain, draws along axis 0
    one = x.reshape(num_chains * num_draws, num_elements)  # chains concatenated
    single = ess_bulk(one, chain_axis=None, draw_axis=0) / expected
    assert np.all(np.abs(single - 1) < 0.35), single
    assert abs(np.mean(single) - 1) < 0.1, single
    assert np.all(rhat(x) < 1.02)


@pytest.mark.parametrize('seed', SEEDS)
def test_rhat_flags_different_means(seed):
    rng = np.random.default_rng(seed)
    # calibration on 5000 replicates: min R-hat 1.27 for this shift, 1.29
    # for the drift; iid chains never exceed 1.004
    x = rng.standard_normal((4, 500))
    x[3] += 2.0
    assert rhat(x) > 1.1
    # a chain that drifts within itself is caught by splitting
    drift = rng.standard_normal((1, 1000)) + np.linspace(0, 3, 1000)
    assert rhat(drift) > 1.1


@pytest.mark.parametrize('seed', SEEDS)
def test_rhat_tail_flags_different_scales(seed):
    rng = np.random.default_rng(seed)
    # calibration on 5000 replicates: bulk R-hat max 1.0055, tail min 1.17
    x = rng.standard_normal((4, 1000, 5))
    x[3] *= 4.0
    split = split_chains(as_chains(x, 0, 1)[0])
    bulk, tail = rhat_bulk_tail(split, z_scale(split))
    # same location: the bulk R-hat does not see it, the tail R-hat does
    assert np.all(bulk < 1.02)
    assert np.all(tail > 1.1)
    assert np.all(rhat(x) > 1.1)


def test_constant_elements_give_nan():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 50, 2))
    x[..., 1] = 3.0
    for func in (rhat, ess, ess_bulk, ess_tail):
        out = func(x)
        assert np.isfinite(out[0])
        assert np.isnan(out[1])


# -------------------------------------------------------------------- Geweke


def test_spectrum0_ar_levinson_matches_yule_walker():
    """The Levinson recursion reproduces a direct Yule-Walker solve."""
    rng = np.random.default_rng(9)
    y = ar1_chains(rng, 0.6, (1, 300))[0][:, None]
    n = len(y)
    yc = y[:, 0] - y.mean()
    acov = np.array([yc[: n - h] @ yc[h:] / n for h in range(n)])
    max_order = math.floor(10 * math.log10(n))
    aic = []
    fits = []
    for p in range(max_order + 1):
        if p == 0:
            coef, innov = np.zeros(0), acov[0]
        else:
            coef = linalg.solve_toeplitz(acov[:p], acov[1 : p + 1])
            innov = acov[0] - coef @ acov[1 : p + 1]
        aic.append(n * math.log(innov) + 2 * p)
        fits.append((coef, innov))
    p = int(np.argmin(aic))
    coef, innov = fits[p]
    expected = innov * n / (n - p - 1) / (1 - coef.sum()) ** 2
    np.testing.assert_allclose(spectrum0_ar(y), [expected], rtol=1e-10)


@pytest.mark.parametrize('seed', SEEDS)
def test_spectrum0_ar_of_ar1(seed):
    """S(0) of an AR(1) with unit innovations is 1 / (1 - phi)^2."""
    rng = np.random.default_rng(seed)
    phi = 0.5
    y = ar1_chains(rng, phi, (1, 5000, 50))[0]
    spec = spectrum0_ar(y) * (1 - phi) ** 2
    # calibration on 10000 columns: mean 0.9995, sd 0.070, range 0.65-1.71;
    # the upper tail is heavy because AIC now and then picks a long AR model
    assert np.all((spec > 0.5) & (spec < 2.2))
    assert abs(np.mean(spec) - 1) < 0.05  # sd of the mean of 50: 0.0097


@pytest.mark.parametrize('seed', SEEDS)
def test_geweke_iid_is_standard_normal(seed):
    """Over many independent columns, z is approximately N(0, 1).

    The AR estimate of S(0) on short windows (50 and 250 draws here) is a bit
    low, so z is slightly over-dispersed: calibration on 100000 columns gave
    mean 0.001, sd 1.076, P(|z| > 1.96) = 0.069 (coda behaves the same).
    """
    rng = np.random.default_rng(seed)
    num_columns = 2000
    z = geweke(rng.standard_normal((500, num_columns)))
    assert z.shape == (num_columns,)
    # 5 sd of the Monte Carlo error of each statistic on 2000 columns
    assert abs(np.mean(z)) < 5 * 1.08 / math.sqrt(num_columns)
    assert 0.98 < np.std(z) < 1.18
    assert 0.04 < np.mean(np.abs(z) > 1.96) < 0.1


@pytest.mark.parametrize('seed', SEEDS)
def test_geweke_ar1_is_standard_normal(seed):
    """The spectral correction accounts for autocorrelation.

    Calibration on 20000 AR(1) columns with phi = 0.8: mean 0.004, sd 1.10
    (the naive iid variance would give sd ~ 3).
    """
    rng = np.random.default_rng(seed)
    num_columns = 500
    x = ar1_chains(rng, 0.8, (1, 2000, num_columns))[0]
    z = geweke(x)
    assert abs(np.mean(z)) < 5 * 1.1 / math.sqrt(num_columns)
    assert 0.95 < np.std(z) < 1.3


@pytest.mark.parametrize('seed', SEEDS)
def test_geweke_detects_shift(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(1000)
    # first window 101 draws: z ~ 3 / sqrt(1/101 + 1/501) ~ 27; calibration on
    # 5000 replicates: min 10.1
    x[:100] += 3
    z = geweke(x)
    assert np.ndim(z) == 0
    assert z > 6
    assert geweke(-x) < -6


def test_geweke_windows_as_coda():
    """Means of coda's windows: 1..ceil(1 + 0.1 (n - 1)) and floor(n - 0.5 (n - 1))..n."""
    n = 1000
    x = np.zeros(n)
    # the first window is 101 draws, the last 501; mark the draws just outside
    x[:101] = 1.0
    x[101] = 1e6
    x[498] = -1e6
    x[499:] = -1.0
    # windows of two constants (linear in time) have zero variance: z = +inf
    assert geweke(x) == np.inf
    x[:101] += np.random.default_rng(10).standard_normal(101)
    assert 0 < geweke(x) < np.inf


def test_geweke_multi_column_and_trailing_axes():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((300, 2, 3))
    z = geweke(x)
    assert z.shape == (2, 3)
    np.testing.assert_allclose(z[1, 2], geweke(x[:, 1, 2]), rtol=1e-12)


# ------------------------------------------------------------------- summary


def test_summary():
    rng = np.random.default_rng(12)
    x = rng.standard_normal((4, 500, 3)) + [0, 5, -5]
    table = summary(x, names=['a', 'b', 'c'], quantiles=(0.025, 0.5, 0.975))
    assert isinstance(table, pd.DataFrame)
    assert list(table.index) == ['a', 'b', 'c']
    assert list(table.columns) == [
        'mean', 'sd', '2.5%', '50%', '97.5%', 'rhat', 'ess_bulk', 'ess_tail'
    ]
    flat = x.reshape(-1, 3)
    np.testing.assert_allclose(table['mean'], flat.mean(0))
    np.testing.assert_allclose(table['sd'], flat.std(0, ddof=1))
    np.testing.assert_allclose(table['97.5%'], np.quantile(flat, 0.975, axis=0))
    np.testing.assert_allclose(table['rhat'], rhat(x))
    np.testing.assert_allclose(table['ess_bulk'], ess_bulk(x))
    np.testing.assert_allclose(table['ess_tail'], ess_tail(x))


def test_summary_default_index():
    rng = np.random.default_rng(13)
    assert list(summary(rng.standard_normal((2, 20))).index) == [0]
    assert list(summary(rng.standard_normal((2, 20, 4))).index) == [0, 1, 2, 3]
    table = summary(rng.standard_normal((2, 20, 2, 3)))
    assert list(table.index) == [(i, j) for i in range(2) for j in range(3)]


def test_axes():
    rng = np.random.default_rng(14)
    x = rng.standard_normal((4, 100, 3))
    moved = np.moveaxis(x, (0, 1), (2, 0))  # (draws, elements, chains)
    np.testing.assert_allclose(rhat(moved, chain_axis=2, draw_axis=0), rhat(x))
    np.testing.assert_allclose(ess_bulk(moved, chain_axis=-1, draw_axis=0), ess_bulk(x))
    one = x[0]
    np.testing.assert_allclose(ess(one, chain_axis=None, draw_axis=0), ess(x[:1]))
    assert np.ndim(rhat(x[..., 0])) == 0
    empty = x[..., :0]
    for func in (rhat, ess, ess_bulk, ess_tail):
        assert func(empty).shape == (0,)
    assert summary(empty).shape == (0, 8)


# -------------------------------------------------------------------- errors


@pytest.mark.parametrize('func', [rhat, ess, ess_bulk, ess_tail, summary])
def test_errors_name_the_argument(func):
    good = np.random.default_rng(15).standard_normal((2, 10))
    with pytest.raises(ValueError, match='draws.*2 dimensions'):
        func(good[0])
    with pytest.raises(ValueError, match='at least 4 draws'):
        func(good[:, :3])
    with pytest.raises(ValueError, match='at least 1 chain'):
        func(good[:0])
    bad = good.copy()
    bad[1, 3] = np.nan
    with pytest.raises(ValueError, match=r'draws must be finite \(no NaN or inf\); found nan at index \(1, 3\)'):
        func(bad)
    bad[1, 3] = np.inf
    with pytest.raises(ValueError, match='draws must be finite .*found inf'):
        func(bad)
    with pytest.raises(ValueError, match='draws must have no missing values; found a masked entry at index'):
        func(np.ma.masked_array(good, mask=good > 1))
    with pytest.raises(ValueError, match='draws must be a numeric array, got a ragged list'):
        func([[0.0] * 10, [0.0] * 9])
    with pytest.raises(TypeError, match='draws must be numeric, got an array of dtype <U1'):
        func(np.full((2, 10), 'a'))
    with pytest.raises(TypeError, match='draws must be real'):
        func(good + 1j)
    with pytest.raises(ValueError, match='chain_axis and draw_axis'):
        func(good, chain_axis=1, draw_axis=-1)
    with pytest.raises(ValueError, match='draw_axis must be an axis of draws, from -2 to 1, got 2'):
        func(good, draw_axis=2)
    with pytest.raises(ValueError, match='draw_axis must be an axis of draws, from -1 to 0, got 1'):
        func(good[0], chain_axis=None)
    with pytest.raises(TypeError, match='chain_axis must be an integer, got 0.5'):
        func(good, chain_axis=0.5)


def test_summary_errors():
    good = np.random.default_rng(16).standard_normal((2, 10, 3))
    with pytest.raises(ValueError, match='names must have one label'):
        summary(good, names=['a', 'b'])
    with pytest.raises(ValueError, match=r'quantiles must be in \[0, 1\], got \(0.5, 1.5\)'):
        summary(good, quantiles=(0.5, 1.5))
    with pytest.raises(TypeError, match='quantiles must be numeric'):
        summary(good, quantiles=('median',))


def test_geweke_errors():
    good = np.random.default_rng(17).standard_normal(100)
    with pytest.raises(ValueError, match='frac1 must be > 0 and < 1, got 0.0'):
        geweke(good, frac1=0)
    with pytest.raises(ValueError, match='frac2 must be > 0 and < 1, got 1.2'):
        geweke(good, frac2=1.2)
    with pytest.raises(TypeError, match="frac1 must be a real number, got '0.1'"):
        geweke(good, frac1='0.1')
    with pytest.raises(ValueError, match='frac1 \\+ frac2'):
        geweke(good, frac1=0.6, frac2=0.5)
    with pytest.raises(ValueError, match='x must have at least 4 draws'):
        geweke(good[:3])
    with pytest.raises(ValueError, match='x must have at least 1 dimension'):
        geweke(1.0)
    with pytest.raises(ValueError, match='x must be finite .*found nan at index 5'):
        geweke(np.where(np.arange(100) == 5, np.nan, good))


# ------------------------------------------------------ convergence warning


@pytest.mark.parametrize('seed', SEEDS)
def test_slow_sigma_is_reported_not_warned(seed):
    """ESS of sigma: AR(1) chains of known ESS, 4 x 500 draws.

    phi = 0.5: ESS 2000 / 3 = 667; phi = 0.97: ESS 2000 * 0.03 / 1.97 = 30.
    The estimate's relative sd is below 0.1 at these sizes (see
    `test_ar1_ess_matches_analytic`), so 100 lies many sds from both. A
    slowly mixing sigma is a note, never a warned problem.
    """
    rng = np.random.default_rng(seed)
    fast = 1 + 0.05 * ar1_chains(rng, 0.5, (4, 500))
    assert diagnostics.convergence_problems(sigma=fast) == []
    assert diagnostics.convergence_notes(sigma=fast) == []
    slow = 1 + 0.05 * ar1_chains(rng, 0.97, (4, 500))
    assert diagnostics.convergence_problems(sigma=slow) == []
    notes = diagnostics.convergence_notes(sigma=slow)
    ((value,),) = [n[1:2] for n in notes if n[0] == 'ESS of sigma']
    assert value < 60
    advice = diagnostics.notes_message(notes)
    assert advice.startswith('Reported, not warned: ') and 'ESS of sigma is' in advice
    for hint in ('ndpost', 'keepevery', 'mc_cores'):
        assert hint in advice
    assert diagnostics.notes_message([]) == ''


@pytest.mark.parametrize('seed', SEEDS)
def test_convergence_problems_f(seed):
    """Median R-hat of f: iid chains pass, a chain shifted by 2 sd at every
    point fails (R-hat >= 1.27 for this shift, see
    `test_rhat_flags_different_means`); one shifted by 0.4 sd (R-hat about
    1.03 to 1.08, between the reported and the warned level) is at most a
    note; a drifting sigma is a note, never a problem."""
    rng = np.random.default_rng(seed)
    f = rng.standard_normal((4, 500, 30))
    sigma = 1 + 0.01 * rng.standard_normal((4, 500))
    assert diagnostics.convergence_problems(sigma, f) == []
    assert diagnostics.convergence_notes(sigma, f) == []
    mild = f.copy()
    mild[3] += 0.4
    assert diagnostics.convergence_problems(sigma, mild) == []
    f[3] += 2
    ((name, value, cmp, threshold),) = diagnostics.convergence_problems(sigma, f)
    assert name == 'median R-hat of f over 30 points'
    assert value > 1.2 and cmp == '>' and threshold == diagnostics.RHAT_WARN == 1.1
    drifting = sigma + np.linspace(1, 0, 500)
    assert diagnostics.convergence_problems(drifting, None) == []
    assert [n[0] for n in diagnostics.convergence_notes(drifting, None)] == ['R-hat of sigma', 'ESS of sigma']


def test_stuck_chain_is_warned():
    """A chain whose trees never change while another's do is warned (by
    its index); no chain moving at all is not (the data may admit no
    split), nor is one chain alone."""
    rng = np.random.default_rng(21)
    changed = rng.integers(1, 30, size=(3, 99))
    assert diagnostics.convergence_problems(changed=changed) == []
    changed[1] = 0
    ((name, value, cmp, threshold),) = diagnostics.convergence_problems(changed=changed)
    assert name == 'stuck chains (of 3: trees never changed, chain 1)'
    assert (value, cmp, threshold) == (1, '>', 0)
    assert 'stuck chains (of 3: trees never changed, chain 1) is 1' in diagnostics.convergence_message([(name, value, cmp, threshold)], 3)
    assert diagnostics.convergence_problems(changed=np.zeros((3, 99), int)) == []
    assert diagnostics.convergence_problems(changed=np.zeros((1, 99), int)) == []
    assert diagnostics.convergence_problems(changed=changed[:, :2]) == []  # too few draws


def test_trees_changed_counts_structure_changes():
    """Trees whose split variables or indices differ from the previous
    kept draw of the same chain, 2 chains of 3 draws of 2 trees."""
    var = np.zeros((6, 2, 4), np.uint8)
    split = np.zeros((6, 2, 4), np.uint8)
    var[1, 0, 1] = 3  # chain 0: tree 0 grows at draw 1, keeps it at draw 2
    var[2, 0, 1] = 3
    split[2, 1, 1] = 5  # chain 0: tree 1 changes at draw 2
    var[3, 1, 1] = 2  # chain 1 starts with a split: not a change
    var[3:, 1, 1] = 2
    split[5, 0, 2] = 1  # chain 1: tree 0 changes at its draw 2
    np.testing.assert_array_equal(diagnostics.trees_changed(var, split, 2), [[1, 1], [0, 1]])


def test_convergence_problems_edge_cases():
    rng = np.random.default_rng(20)
    # fewer than 4 draws per chain: not checked, no error
    assert diagnostics.convergence_problems(rng.standard_normal((2, 3)), rng.standard_normal((2, 3, 5))) == []
    # constant points have no R-hat; all constant: f is not checked
    assert diagnostics.convergence_problems(None, np.ones((2, 100, 4))) == []
    assert diagnostics.convergence_problems(None, None) == []
    assert diagnostics.convergence_notes(None, None) == []


def test_check_points_fixed_and_bounded():
    assert_array_equal = np.testing.assert_array_equal
    assert_array_equal(diagnostics.check_points(7), np.arange(7))
    assert_array_equal(diagnostics.check_points(100), np.arange(100))
    for n in (101, 12_345, 10**7):
        points = diagnostics.check_points(n)
        assert points.size == diagnostics.CHECK_POINTS == 100
        assert points[0] == 0 and points[-1] == n - 1
        assert np.all(np.diff(points) > 0)
        assert_array_equal(points, diagnostics.check_points(n))


def test_convergence_message_names_statistic_value_threshold():
    problems = [('R-hat of sigma', 1.234, '>', 1.05), ('ESS of sigma', 12.3, '<', 100)]
    msg = diagnostics.convergence_message(problems)
    assert 'R-hat of sigma is 1.234' in msg
    assert 'ESS of sigma is 12' in msg
    assert 'R-hat of sigma > 1.05' in msg and 'ESS of sigma < 100' in msg
    for advice in ('nskip', 'ndpost', 'keepevery', 'mc_cores', "category=bartz.ConvergenceWarning"):
        assert advice in msg
    assert 'mc_cores' not in diagnostics.convergence_message(problems, 4)  # several chains already
    assert issubclass(diagnostics.ConvergenceWarning, UserWarning)
