"""Partial dependence: `BARTFit.partial_dependence` and its plot."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import special

from bartz import gbart, plot
from bartz.api import partial

SMALL = {'ntree': 20, 'ndpost': 40, 'nskip': 30, 'printevery': None}
N = 150


@pytest.fixture(scope='module')
def data():
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(N, 3))
    f = np.sin(2 * np.pi * x[:, 0]) + 2 * x[:, 1]
    return x, f + 0.1 * rng.normal(size=N), f


@pytest.fixture(scope='module')
def fit(data):
    x, y, _ = data
    return gbart(pd.DataFrame(x, columns=['a', 'b', 'c']), y, seed=0, **SMALL)


def brute_force(fit, x, j, values):
    """The definition: (ndpost, grid) averages of the draws, all rows at once."""
    out = []
    for v in values:
        xs = x.copy()
        xs[:, j] = v
        out.append(fit.predict(xs).mean(axis=1))
    return np.array(out).T


def test_default_grid_is_pdbarts():
    col = np.arange(100.0)
    np.testing.assert_allclose(partial.default_grid(col), np.quantile(col, [0.05, *np.arange(1, 10) / 10, 0.95]))
    np.testing.assert_array_equal(partial.default_grid(np.array([3.0, 1.0, 3.0, 2.0])), [1.0, 2.0, 3.0])
    cat = pd.Series(pd.Categorical(['u', 'v', 'u'], categories=['v', 'u', 'w']))
    assert list(partial.default_grid(cat)) == ['v', 'u', 'w']


def test_one_predictor_matches_definition(fit, data):
    x, _, _ = data
    table = fit.partial_dependence(x, 'a')
    assert list(table.columns) == ['a', 'mean', 'sd', 'median', 'lower', 'upper']
    np.testing.assert_allclose(table['a'], partial.default_grid(x[:, 0]))
    draws = table.attrs['draws']
    assert draws.shape == (fit.ndpost, len(table))
    np.testing.assert_allclose(draws, brute_force(fit, x, 0, table['a']), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(table['mean'], draws.mean(axis=0))
    np.testing.assert_allclose(table['lower'], np.quantile(draws, 0.025, axis=0))
    assert np.all(table['lower'] <= table['mean']) and np.all(table['mean'] <= table['upper'])
    assert table.attrs['var'] == ['a'] and table.attrs['level'] == 0.95


def test_batches_do_not_change_the_result(fit, data):
    """A memory bound that forces one row batch per few rows, one grid point per call."""
    x, _, _ = data
    frame = pd.DataFrame(x, columns=['a', 'b', 'c'])
    grid = [0.1, 0.5, 0.9]
    whole = fit.partial_dependence(frame, 'b', grid=grid)
    tiny = fit.partial_dependence(frame, 1, grid=np.array(grid), max_memory=4 * fit.ndpost * 7)
    np.testing.assert_allclose(tiny.attrs['draws'], whole.attrs['draws'], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(whole.attrs['draws'], brute_force(fit, x, 1, grid), rtol=1e-5, atol=1e-5)


def test_recovers_the_shape(fit, data):
    """The additive truth: partial dependence on b is 2 b plus a constant."""
    x, _, _ = data
    table = fit.partial_dependence(x, 'b', grid=np.linspace(0.1, 0.9, 5))
    slope = np.polyfit(table['b'], table['mean'], 1)[0]
    assert slope == pytest.approx(2, abs=0.5)


def test_two_predictors(fit, data):
    x, _, _ = data
    grid = [np.array([0.2, 0.7]), np.array([0.1, 0.5, 0.9])]
    table = fit.partial_dependence(x, ['a', 'b'], grid=grid, level=0.9)
    assert table.shape[0] == 6
    assert list(table.columns[:2]) == ['a', 'b']
    expected = []
    for va, vb in zip(table['a'], table['b'], strict=True):
        xs = x.copy()
        xs[:, 0], xs[:, 1] = va, vb
        expected.append(fit.predict(xs).mean(axis=1))
    np.testing.assert_allclose(table.attrs['draws'], np.array(expected).T, rtol=1e-5, atol=1e-5)
    # explicit points
    points = pd.DataFrame({'a': [0.2, 0.3], 'b': [0.4, 0.4]})
    assert fit.partial_dependence(x, ['a', 'b'], grid=points).shape[0] == 2


def test_binary_on_probability_scale():
    rng = np.random.default_rng(1)
    x = rng.uniform(-2, 2, size=(120, 2))
    y = (rng.uniform(size=120) < special.expit(2 * x[:, 0])).astype(int)
    fit = gbart(x, y, type='lbart', seed=0, **{**SMALL, 'keepevery': 2})
    table = fit.partial_dependence(x, 0, grid=[-1.5, 0.0, 1.5])
    assert np.all((table['lower'] >= 0) & (table['upper'] <= 1))
    assert table['mean'].is_monotonic_increasing
    np.testing.assert_allclose(table.attrs['draws'], brute_force(fit, x, 0, [-1.5, 0.0, 1.5]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ('kwargs', 'error', 'match'),
    [
        ({'var': 'zz'}, ValueError, 'zz'),
        ({'var': 7}, ValueError, 'out of range'),
        ({'var': 1.5}, TypeError, 'var'),
        ({'var': ['a', 'b', 'c']}, ValueError, 'two'),
        ({'var': ['a', 0]}, ValueError, 'twice'),
        ({'var': 'a', 'kind': 'median'}, ValueError, 'kind'),
        ({'var': 'a', 'level': 1.0}, ValueError, 'level'),
        ({'var': 'a', 'grid': [[0.1, 0.2]]}, ValueError, 'grid'),
        ({'var': 'a', 'grid': [np.nan]}, ValueError, 'finite'),
        ({'var': ['a', 'b'], 'grid': [0.1, 0.2, 0.3]}, ValueError, 'pair'),
        ({'var': 'a', 'max_memory': 0}, ValueError, 'max_memory'),
        ({'var': 'a', 'x': np.zeros((3, 2))}, ValueError, 'columns'),
        ({'var': 'a', 'x': None}, TypeError, r'\bx\b'),
    ],
)
def test_bad_arguments(fit, data, kwargs, error, match):
    x, _, _ = data
    kwargs = {'x': x, **kwargs}
    with pytest.raises(error, match=match):
        fit.partial_dependence(kwargs.pop('x'), kwargs.pop('var'), **kwargs)


def test_plots(fit, data):
    x, _, _ = data
    table = fit.partial_dependence(x, 'a')
    ax = plot.partial_dependence(table)
    assert ax.get_xlabel() == 'a' and ax.get_title() == 'partial dependence'
    ax = plot.partial_dependence(fit, x, ['a', 'b'], grid=[np.linspace(0, 1, 4), np.linspace(0, 1, 3)])
    assert ax.get_xlabel() == 'a' and ax.get_ylabel() == 'b'
    with pytest.raises(ValueError, match='only when'):
        plot.partial_dependence(table, x=x)
    with pytest.raises(TypeError, match='pd_or_fit'):
        plot.partial_dependence(np.zeros(3))
    import matplotlib.pyplot as plt  # noqa: PLC0415

    plt.close('all')


def test_plot_fit(fit, data):
    """`plot.plot_fit`: its title is the RMSE of the posterior mean and the
    coverage of the intervals, computed here from the draws; the arguments
    the wrong way round, or of mismatched sizes, are clear errors."""
    x, y, f = data
    ax = plot.plot_fit(f, fit, level=0.9)
    draws = np.asarray(fit.yhat_train, np.float64)
    rmse = np.sqrt(np.mean((draws.mean(axis=0) - f) ** 2))
    low, high = np.quantile(draws, [0.05, 0.95], axis=0)
    coverage = np.mean((low <= f) & (f <= high))
    assert ax.get_title() == f'RMSE {rmse:.3g}, 90% coverage {coverage:.1%} (n={N})'
    with pytest.raises(TypeError, match=r'true values first and the fit second: plot_fit\(y, fit\)'):
        plot.plot_fit(fit, y)
    with pytest.raises(TypeError, match='y_true_or_f must be an array of numbers'):
        plot.plot_fit(['a'] * N, fit)
    with pytest.raises(ValueError, match=f'no draws of the fit match the {N - 1} true values'):
        plot.plot_fit(f[1:], fit)
    import matplotlib.pyplot as plt  # noqa: PLC0415

    plt.close('all')


def test_plot_module_is_an_attribute_loaded_on_use():
    """``bartz.plot`` works after ``import bartz`` alone, and ``import
    bartz`` does not import matplotlib (a subprocess, to start clean)."""
    code = (
        'import sys, bartz\n'
        'print("matplotlib" in sys.modules)\n'
        'print(bartz.plot.plot_fit.__name__)\n'
        'try:\n'
        '    bartz.no_such_name\n'
        'except AttributeError as e:\n'
        '    print(type(e).__name__)\n'
    )
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True, cwd=str(root))
    assert out.stdout.split() == ['False', 'plot_fit', 'AttributeError']
