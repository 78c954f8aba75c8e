"""scikit-learn compatibility of `BARTRegressor` and `BARTClassifier`
(scikit-learn is a test-only dependency)."""

import pickle
import sys

import numpy as np
import pandas as pd
import pytest

from bartz import BARTClassifier, BARTFit, BARTRegressor

sklearn = pytest.importorskip('sklearn')
from sklearn.base import clone  # noqa: E402
from sklearn.model_selection import cross_val_score  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from sklearn.utils.estimator_checks import check_estimator  # noqa: E402

SMALL = {'ntree': 10, 'ndpost': 20, 'nskip': 20}


def test_no_sklearn_import_at_run_time():
    """bartz imports scikit-learn nowhere (it is loaded here by the test)."""
    import ast  # noqa: PLC0415
    import inspect  # noqa: PLC0415

    from bartz.api import estimators  # noqa: PLC0415

    tree = ast.parse(inspect.getsource(estimators))
    top_level = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    names = [a.name for n in top_level for a in n.names] + [n.module or '' for n in top_level if isinstance(n, ast.ImportFrom)]
    assert not any(name.startswith('sklearn') for name in names)
    assert 'sklearn' in sys.modules  # (imported by this test module)


@pytest.mark.filterwarnings('ignore::UserWarning', 'ignore::FutureWarning')
@pytest.mark.parametrize(
    'estimator',
    [
        # each check takes 40 s to over a minute (compilations for the shapes
        # that scikit-learn tries): they run with the slow tests. The logistic
        # classifier is the same estimator code with type='lbart' (its fit and
        # predict_proba are tested below): not checked again, for CI's budget.
        pytest.param(BARTRegressor(**SMALL), marks=pytest.mark.slow),
        pytest.param(BARTClassifier(**SMALL, keepevery=2), marks=pytest.mark.slow),
    ],
    ids=['regressor', 'classifier-probit'],
)
def test_check_estimator(estimator):
    results = check_estimator(estimator, on_fail=None)
    failed = {r['check_name']: repr(r['exception']) for r in results if r['status'] == 'failed'}
    assert not failed, failed
    assert sum(r['status'] == 'passed' for r in results) > 40


@pytest.fixture(scope='module')
def regression_data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3)) * [1, 10, 100]
    y = np.sin(2 * X[:, 0]) + X[:, 1] / 10 + 0.1 * rng.normal(size=120)
    return X, y


def test_pipeline_cross_val_score(regression_data):
    X, y = regression_data
    pipe = make_pipeline(StandardScaler(), BARTRegressor(**SMALL, random_state=0))
    scores = cross_val_score(pipe, X, y, cv=3)
    assert scores.shape == (3,)
    assert np.all(scores > 0.5), scores


def test_classifier_pipeline_cross_val_score():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(150, 2))
    y = np.where(X[:, 0] + X[:, 1] > 0, 'yes', 'no')
    pipe = make_pipeline(StandardScaler(), BARTClassifier(**SMALL, keepevery=2, random_state=0))
    scores = cross_val_score(pipe, X, y, cv=3)
    # 50 test points per fold: at chance a fold scores 0.5 +- 0.07 and the
    # mean of 3 folds 0.5 +- 0.04; the bounds sit 2 and 6 sd above chance,
    # below what a small BART reaches on this separable boundary (0.8-0.95)
    assert np.all(scores > 0.65), scores
    assert scores.mean() > 0.75, scores


def test_params_clone_and_fitted_attributes(regression_data):
    X, y = regression_data
    model = BARTRegressor(ntree=10, ndpost=20, nskip=20, random_state=3)
    params = model.get_params()
    assert params['ntree'] == 10 and params['random_state'] == 3 and params['ndpost'] == 20
    assert model.set_params(k=3.0) is model and model.k == 3.0
    with pytest.raises(ValueError, match='Invalid parameter'):
        model.set_params(kk=1)
    copy = clone(model)
    assert copy.get_params() == model.get_params() and copy is not model
    assert 'ntree=10' in repr(model) and 'BARTRegressor(' in repr(model)
    assert not hasattr(model, 'fit_')
    frame = pd.DataFrame(X, columns=['a', 'b', 'c'])
    assert model.fit(frame, y) is model
    assert isinstance(model.fit_, BARTFit) and model.fit_.ntree == 10
    assert model.n_features_in_ == 3
    assert list(model.feature_names_in_) == ['a', 'b', 'c']
    # the same seed gives the same fit; predict is the posterior mean
    again = clone(model).fit(frame, y)
    np.testing.assert_array_equal(again.predict(frame), model.predict(frame))
    np.testing.assert_allclose(model.predict(frame), model.fit_.predict(X, kind='mean'), rtol=1e-6)
    # survives pickling
    restored = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(restored.predict(frame), model.predict(frame))


def test_classifier_labels_and_proba():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(100, 2))
    y = np.where(X[:, 0] > 0, 'cat', 'ant')
    model = BARTClassifier(**SMALL, keepevery=2, type='lbart', random_state=0).fit(X, y)
    assert list(model.classes_) == ['ant', 'cat']
    assert model.fit_.type == 'lbart'
    proba = model.predict_proba(X)
    assert proba.shape == (100, 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1)
    np.testing.assert_allclose(proba[:, 1], model.fit_.predict(X, kind='mean'), rtol=1e-6)
    np.testing.assert_array_equal(model.predict(X), np.where(proba[:, 1] >= 0.5, 'cat', 'ant'))
    assert model.score(X, y) > 0.9


def test_categorical_dataframe_and_missing_values():
    """A DataFrame with a categorical and a string column with missing
    values reaches gbart as it is: the estimator's predictions are its
    fit's, on the same DataFrame; NaN in a numeric array is allowed, inf
    is not."""
    rng = np.random.default_rng(1)
    n = 90
    df = pd.DataFrame({
        'a': rng.uniform(size=n),
        'c': pd.Categorical(rng.choice(['x', 'y', 'z'], size=n)),
        's': rng.choice(['u', 'v', None], size=n).astype(object),
    })
    y = df['a'] + (df['c'] == 'x') + 0.1 * rng.normal(size=n)
    model = BARTRegressor(**SMALL, random_state=0).fit(df, y)
    assert list(model.feature_names_in_) == ['a', 'c', 's']
    np.testing.assert_allclose(model.predict(df.iloc[:7]), model.fit_.predict(df.iloc[:7], kind='mean'), rtol=1e-6)
    clf = BARTClassifier(**SMALL, random_state=0).fit(df, np.where(y > 1, 'hi', 'lo'))
    assert set(clf.predict(df.iloc[:7])) <= {'hi', 'lo'}
    X = df[['a']].to_numpy().copy()
    X[::10, 0] = np.nan
    with_nan = BARTRegressor(**SMALL, random_state=0).fit(X, y)
    assert np.all(np.isfinite(with_nan.predict(X)))
    # a masked array: its masked entries are the same missing values
    masked = np.ma.masked_invalid(X)
    assert masked.mask.any() and np.isnan(masked.data).any()
    masked.data[masked.mask] = 7.0  # the values under the mask are not used
    with_mask = BARTRegressor(**SMALL, random_state=0).fit(masked, y)
    np.testing.assert_array_equal(with_mask.predict(masked), with_nan.predict(X))
    X[0, 0] = np.inf
    with pytest.raises(ValueError, match='infinity'):
        BARTRegressor(**SMALL).fit(X, y)


@pytest.mark.parametrize(
    ('model', 'y', 'match'),
    [
        (BARTClassifier(**SMALL), np.arange(30) % 3, 'binary'),
        (BARTClassifier(**SMALL, type='wbart'), np.arange(30) % 2, "'pbart' or 'lbart'"),
        (BARTClassifier(**SMALL), np.linspace(0, 1, 30), 'continuous'),
        (BARTRegressor(**SMALL, random_state=-1), np.arange(30.0), 'random_state'),
        (BARTRegressor(**{**SMALL, 'ndpost': 0}), np.arange(30.0), 'ndpost'),
    ],
)
def test_bad_input(model, y, match):
    X = np.arange(60.0).reshape(30, 2)
    with pytest.raises(ValueError, match=match):
        model.fit(X, y)


def test_no_sklearn_needed():
    """The estimators work where scikit-learn is not installed (run in a
    subprocess that cannot import it)."""
    import subprocess  # noqa: PLC0415

    code = (
        'import sys; sys.modules["sklearn"] = None\n'
        'import numpy as np\n'
        'from bartz import BARTRegressor\n'
        'X = np.random.default_rng(0).normal(size=(30, 2)); y = X[:, 0]\n'
        'm = BARTRegressor(ntree=5, ndpost=5, nskip=5, random_state=0).fit(X, y)\n'
        'print(m.predict(X).shape)\n'
        'try:\n'
        '    BARTRegressor().predict(X)\n'
        'except ValueError as e:\n'
        '    print(type(e).__name__)\n'
    )
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True, cwd=str(_root()))
    assert out.stdout.split() == ['(30,)', 'NotFittedError']


def _root():
    from pathlib import Path  # noqa: PLC0415

    return Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_moves_and_warmstart_reach_gbart(regression_data, monkeypatch):
    """The estimators pass `moves` and `warmstart` to `bartz.gbart`, which
    validates them (a bad value fails at fit, naming the argument)."""
    X, y = regression_data
    model = BARTRegressor(**SMALL, moves=('grow', 'prune'), random_state=0).fit(X, y)
    info = model.fit_.run_info
    assert info.change_proposed == 0 and info.swap_proposed == 0 and info.grow_proposed > 0
    default = BARTRegressor(**SMALL, random_state=0).fit(X, y)
    assert default.fit_.run_info.change_proposed > 0
    with pytest.raises(ValueError, match='moves'):
        BARTRegressor(**SMALL, moves=('grow',)).fit(X, y)
    with pytest.raises(ValueError, match='warmstart'):
        BARTClassifier(**SMALL, warmstart=-1).fit(X, X[:, 0] > 0)

    from bartz.api import estimators  # noqa: PLC0415

    seen = {}
    real = estimators.gbart

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(estimators, 'gbart', spy)
    BARTClassifier(**SMALL, keepevery=2, warmstart=1, moves={'grow': 1, 'prune': 1, 'swap': 1}, random_state=0).fit(X, X[:, 0] > 0)
    assert seen['warmstart'] == 1 and seen['moves'] == {'grow': 1, 'prune': 1, 'swap': 1}
