"""`BARTFit.to_inference_data`: a fit's draws for ArviZ, and bartz's R-hat
and ESS against ArviZ's on the same draws."""

import sys
import warnings

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import bartz
from bartz import diagnostics

with warnings.catch_warnings():
    warnings.simplefilter('ignore', FutureWarning)  # (arviz 0.23 announces its refactor)
    az = pytest.importorskip('arviz')

N, P, N_TEST = 100, 3, 30
SMALL = {'ntree': 20, 'ndpost': 50, 'nskip': 20, 'printevery': None}


def _data(seed):
    rng = np.random.default_rng(seed)
    x = pd.DataFrame(rng.uniform(size=(N, P)), columns=['age', 'dose', 'weight'])
    y = np.sin(6 * x['age'].to_numpy()) + 2 * x['dose'].to_numpy() + 0.1 * rng.normal(size=N)
    x_test = pd.DataFrame(rng.uniform(size=(N_TEST, P)), columns=x.columns)
    return x, y, x_test


@pytest.fixture(scope='module')
def fits():
    x, y, x_test = _data(0)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', bartz.ConvergenceWarning)
        dart = bartz.mc_gbart(x, y, x_test, mc_cores=2, sparse=True, seed=0, **SMALL)
        binary = bartz.gbart(x, (y > 1).astype(float), type='pbart', seed=1, **SMALL)
    return x, y, x_test, dart, binary


def test_groups_dims_and_values(fits):
    """The groups ArviZ expects, chains and draws as ArviZ lays them out,
    coordinates named after the columns, the same numbers as the fit's."""
    x, y, _, fit, _ = fits
    data = fit.to_inference_data(y=y)
    groups = data.groups if isinstance(data.groups, tuple) else data.groups()  # (DataTree, InferenceData)
    assert {'posterior', 'sample_stats', 'observed_data'} <= {group.strip('/') for group in groups}
    post = data['posterior']
    assert dict(post.sizes) == {'chain': 2, 'draw': 25, 'point': N_TEST, 'predictor': P}
    assert list(post['predictor'].values) == ['age', 'dose', 'weight']
    assert_array_equal(post['sigma'].values, fit.by_chain('sigma_'))
    assert_allclose(post['f'].values, fit.by_chain('yhat_test'))
    assert_allclose(post['varprob'].values, fit.by_chain('varprob'))  # DART: drawn
    assert post.attrs['point_source'] == 'x_test'
    stats = data['sample_stats']
    assert_array_equal(stats['varcount'].values, fit.by_chain('varcount'))
    split_tree = np.asarray(fit._trace.split_tree)  # noqa: SLF001
    leaves = 1 + np.count_nonzero(split_tree, axis=(1, 2)) / fit.ntree
    assert_allclose(stats['leaves'].values, leaves.reshape(2, 25))
    changed = stats['trees_changed'].values
    assert np.all(np.isnan(changed[:, 0])) and np.all(changed[:, 1:] >= 0)
    assert np.any(changed[:, 1:] > 0)  # the trees move
    assert stats.attrs['accept_rate_grow'] == fit.accept_rate['grow']
    assert_array_equal(data['observed_data']['y'].values, y)


def test_points_and_new_x(fits):
    x, _, _, fit, binary = fits
    at_rows = fit.to_inference_data(points=[3, 0, 7])['posterior']
    assert list(at_rows['point'].values) == [3, 0, 7]
    assert_allclose(at_rows['f'].values, fit.by_chain('yhat_train')[:, :, [3, 0, 7]])
    new = x.iloc[10:15]
    at_x = fit.to_inference_data(new)['posterior']
    assert list(at_x['point'].values) == list(new.index)
    assert_allclose(at_x['f'].values, fit.predict(new).reshape(2, 25, 5), rtol=1e-6)
    # binary: the probability, at the convergence check's points by default (no x_test)
    post = binary.to_inference_data()['posterior']
    assert 'sigma' not in post and 'f' not in post and 'varprob' not in post  # (no DART: no varprob)
    assert_array_equal(post['point'].values, diagnostics.check_points(N))
    assert_allclose(post['prob'].values[0], binary.prob_train, rtol=1e-6)


@pytest.mark.filterwarnings('ignore::DeprecationWarning')  # (arviz 0.23's plots on matplotlib 3.11)
def test_arviz_functions_work_on_it(fits):
    matplotlib = pytest.importorskip('matplotlib')
    matplotlib.use('Agg')
    _, y, _, fit, _ = fits
    data = fit.to_inference_data(y=y)
    table = az.summary(data, var_names=['sigma', 'f'])
    assert table.shape[0] == 1 + N_TEST and {'r_hat', 'ess_bulk'} <= set(table.columns)
    assert float(az.rhat(data)['sigma']) > 0
    assert float(az.ess(data)['sigma']) > 0
    assert az.plot_trace(data, var_names=['sigma']) is not None  # (Axes with arviz 0.x, a PlotCollection with 1.x)
    matplotlib.pyplot.close('all')


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_rhat_and_ess_equal_arviz(seed):
    """The same estimators (Vehtari et al. 2021) on the same draws: AR(1)
    chains of three mixing speeds, one chain offset, and a fit's draws."""
    rng = np.random.default_rng(seed)
    cases = []
    for phi in (0.0, 0.7, 0.97):
        draws = np.zeros((4, 400))
        noise = rng.standard_normal((4, 400))
        for t in range(400):
            draws[:, t] = phi * draws[:, t - 1] + noise[:, t] if t else noise[:, 0]
        cases.append(draws)
    offset = rng.standard_normal((4, 400))
    offset[2] += 1.5
    cases.append(offset)
    x, y, x_test = _data(seed)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', bartz.ConvergenceWarning)
        fit = bartz.mc_gbart(x, y, x_test, mc_cores=2, seed=seed, **SMALL)
    cases.append(fit.by_chain('sigma_'))
    for draws in cases:
        ours = [diagnostics.rhat(draws), diagnostics.ess_bulk(draws), diagnostics.ess_tail(draws)]
        theirs = [az.rhat(draws, method='rank'), az.ess(draws, method='bulk'), az.ess(draws, method='tail', prob=(0.05, 0.95))]
        assert_allclose(ours, theirs, rtol=1e-8)
    f = fit.by_chain('yhat_test')
    data = fit.to_inference_data()
    assert_allclose(diagnostics.rhat(f), az.rhat(data)['f'].values, rtol=1e-8)
    assert_allclose(diagnostics.ess_bulk(f), az.ess(data, method='bulk')['f'].values, rtol=1e-8)


def test_bad_arguments_are_named(fits):
    x, y, _, fit, binary = fits
    with pytest.raises(ValueError, match='pass x .* or points .*, not both'):
        fit.to_inference_data(x, points=[0])
    with pytest.raises(ValueError, match=r'points must be rows of x_train \(0 to 99\), got 100'):
        fit.to_inference_data(points=[0, 100])
    with pytest.raises(ValueError, match='points must be a non-empty sequence of integer row indices'):
        fit.to_inference_data(points=[0.5])
    with pytest.raises(ValueError, match=r'y must have one value per row of x_train \(100\), got 50'):
        fit.to_inference_data(y=y[:50])


def test_without_arviz_says_how_to_install(fits, monkeypatch):
    fit = fits[3]
    monkeypatch.setitem(sys.modules, 'arviz', None)  # (import arviz raises ImportError)
    with pytest.raises(ImportError, match=r"needs ArviZ: pip install 'bartz\[arviz\]'"):
        fit.to_inference_data()
