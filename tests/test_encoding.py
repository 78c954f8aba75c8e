"""Tests for bartz.encoding: numeric, categorical and missing columns, and
their use by `gbart` (dummies as R's model matrix, x_test and predict)."""

import json
import warnings

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from bartz import gbart
from bartz.prep import cutpoints as prepcovars
from bartz.diagnostics import ConvergenceWarning
from bartz.prep.encoding import Encoding, PositionalColumnsWarning, fit_encoding

SMALL = {'ntree': 20, 'ndpost': 50, 'nskip': 20, 'printevery': None}


def _df(n=12):
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {
            'num': rng.normal(size=n),
            'flag': np.arange(n) % 2 == 0,
            'two': pd.Categorical(['lo', 'hi'] * (n // 2), categories=['lo', 'hi']),
            'three': ['b', 'a', 'c'] * (n // 3),
        }
    )


# ---------------------------------------------------------------- encoding of the columns


def test_numeric_array_is_unchanged():
    x = np.random.default_rng(0).normal(size=(10, 3))
    enc = fit_encoding(x)
    assert not enc.named
    assert enc.num_columns == enc.num_encoded == enc.num_model == 3
    assert enc.column_names is None and enc.encoded_names is None
    assert_array_equal(enc.transform(x, 'x'), x)
    assert not enc.augmented


def test_dummies_as_r_model_matrix():
    """bool: 0/1; two levels: one dummy (the second level); q > 2 levels: q
    dummies; string levels sorted."""
    df = _df()
    enc = fit_encoding(df)
    assert enc.encoded_names == ['num', 'flag', 'two_hi', 'three_a', 'three_b', 'three_c']
    out = enc.transform(df, 'x')
    assert_array_equal(out[:, 0], df['num'])
    assert_array_equal(out[:, 1], df['flag'].astype(float))
    assert_array_equal(out[:, 2], (df['two'] == 'hi').astype(float))
    for j, level in enumerate('abc'):
        assert_array_equal(out[:, 3 + j], (df['three'] == level).astype(float))
    assert_array_equal(enc.encoded_column, [0, 1, 2, 3, 3, 3])


def test_columns_matched_by_name_levels_by_value():
    df = _df()
    enc = fit_encoding(df)
    new = df.iloc[:5][['three', 'two', 'flag', 'num']].assign(extra='ignored')
    # a column of strings where training had a category, and vice versa
    new['two'] = new['two'].astype(str)
    new['three'] = pd.Categorical(new['three'])
    assert_array_equal(enc.transform(new, 'x_new'), enc.transform(df.iloc[:5], 'x'))


def test_prediction_errors_name_column_and_level():
    df = _df()
    enc = fit_encoding(df)
    with pytest.raises(ValueError, match=r"x_new column 'three' has the level 'z'"):
        enc.transform(df.assign(three='z'), 'x_new')
    with pytest.raises(ValueError, match=r"x_new lacks the training columns \['two'\]"):
        enc.transform(df.drop(columns='two'), 'x_new')
    with pytest.raises(TypeError, match=r"x_new column 'num'"):
        enc.transform(df.assign(num='a'), 'x_new')
    with pytest.raises(ValueError, match='x_new must have 4 columns'):
        enc.transform(np.zeros((3, 5)), 'x_new')
    with pytest.raises(ValueError, match=r'x_new must have 4 columns.*got 1 \(a 1-d array is one column'):
        enc.transform(np.zeros(4), 'x_new')


@pytest.mark.parametrize(
    ('column', 'exc', 'match'),
    [
        (pd.date_range('2020-01-01', periods=12), TypeError, 'dtype datetime64'),
        (pd.to_timedelta(np.arange(12), unit='D'), TypeError, 'timedelta'),
        (np.arange(12) + 1j, TypeError, 'complex'),
        (pd.Series([1, 'a'] * 6, dtype=object), TypeError, 'mixes'),
        (pd.Categorical([None] * 12, categories=['a']), ValueError, 'all are missing'),
        ([np.nan] * 12, ValueError, 'all are missing'),
        ([None] * 12, ValueError, 'all are missing'),
    ],
    ids=['datetime', 'timedelta', 'complex', 'mixed_object', 'category_all_nan', 'numeric_all_nan', 'object_all_none'],
)
def test_careless_columns(column, exc, match):
    with pytest.raises(exc, match=rf"x_train column 'bad'.*{match}|{match}.*'bad'"):
        fit_encoding(_df().assign(bad=column), 'x_train')


def test_object_numbers_and_bools_are_numeric():
    df = pd.DataFrame({'a': pd.Series([1, None, 2.5] * 4, dtype=object), 'b': pd.array([True, None, False] * 4)})
    enc = fit_encoding(df)
    assert [c.kind for c in enc.columns] == ['numeric', 'numeric']
    out = enc.encode(df, 'x')
    assert_array_equal(out[:3, 0], [1, np.nan, 2.5])
    assert_array_equal(out[:3, 1], [1, np.nan, 0])


def test_object_arrays_of_numbers_are_numeric():
    """A NumPy object array of numbers (and None), as a DataFrame's object
    column of numbers: float64 with NaN for None, in x_train, x_new and
    y_train; any other object stays a TypeError."""
    x = np.random.default_rng(1).normal(size=(12, 2))
    objects = x.astype(object)
    objects[2, 1] = None
    enc = fit_encoding(objects)
    expected = x.copy()
    expected[2, 1] = np.nan
    assert_array_equal(enc.encode(objects, 'x'), expected)
    mixed = objects.copy()
    mixed[0, 0] = 'a'
    with pytest.raises(TypeError, match='x must be numeric, got an array of dtype object'):
        fit_encoding(mixed, 'x')
    y = x[:, 0] + 1
    fit = gbart(objects, y.astype(object), ndpost=4, nskip=2, printevery=None, seed=0)
    reference = gbart(expected, y, ndpost=4, nskip=2, printevery=None, seed=0)
    assert_array_equal(fit.yhat_train, reference.yhat_train)
    assert_array_equal(fit.predict(objects[:3]), reference.predict(expected[:3]))


def test_decimals_are_numbers():
    """`decimal.Decimal` values (what database drivers return for SQL's
    NUMERIC) are numbers in a DataFrame column, an object array and
    y_train, with Decimal('NaN') missing; an object column of one other
    type is refused, naming the type."""
    from decimal import Decimal  # noqa: PLC0415

    from bartz.prep import checks as _checks  # noqa: PLC0415

    values = [1.5, float('nan'), -2.25, 3.0] * 3
    decimals = [Decimal(str(v)) for v in values]
    df = pd.DataFrame({'a': pd.Series(decimals, dtype=object)})
    enc = fit_encoding(df)
    assert [c.kind for c in enc.columns] == ['numeric']
    assert_array_equal(enc.encode(df, 'x')[:, 0], values)
    objects = np.array(decimals, dtype=object)[:, None]
    assert_array_equal(fit_encoding(objects).encode(objects, 'x')[:, 0], values)

    y = [Decimal('0.1'), Decimal('2'), Decimal('-3.5')]
    assert_array_equal(_checks.as_vector('y_train', pd.Series(y), 3), [0.1, 2.0, -3.5])
    assert_array_equal(_checks.as_vector('y_train', pd.Series([0.1, 2, -3.5], dtype=object), 3), [0.1, 2.0, -3.5])
    with pytest.raises(ValueError, match='y_train must be finite'):
        _checks.as_vector('y_train', pd.Series([Decimal('NaN'), *y[1:]]), 3)
    with pytest.raises(TypeError, match='y_train must be numeric'):
        _checks.as_vector('y_train', pd.Series(['a', 'b', 'c'], dtype=object), 3)
    with pytest.raises(TypeError, match=r"x_train column 'a' has values of type object;"):
        fit_encoding(pd.DataFrame({'a': [object()] * 4}), 'x_train')


def test_masked_arrays_mark_missing_values():
    """A NumPy masked array: its masked entries are missing values in
    x_train, x_test and x_new (np.asarray alone would read the values under
    the mask); a masked y_train or w is refused, naming the position."""
    x = np.random.default_rng(1).normal(size=(12, 2))
    masked = np.ma.masked_array(x, mask=np.zeros_like(x, bool))
    masked[2, 1] = np.ma.masked
    expected = x.copy()
    expected[2, 1] = np.nan
    assert_array_equal(fit_encoding(masked).encode(masked, 'x'), expected)
    y = x[:, 0] + 1
    fit = gbart(masked, y, x_test=masked[:3], ndpost=4, nskip=2, printevery=None, seed=0)
    reference = gbart(expected, y, x_test=expected[:3], ndpost=4, nskip=2, printevery=None, seed=0)
    assert_array_equal(fit.yhat_train, reference.yhat_train)
    assert_array_equal(fit.yhat_test, reference.yhat_test)
    assert_array_equal(fit.predict(masked[:3]), reference.predict(expected[:3]))
    assert not np.array_equal(fit.predict(masked[:3]), fit.predict(x[:3]))
    y_masked = np.ma.masked_array(y, mask=np.arange(12) == 7)
    with pytest.raises(ValueError, match='y_train must have no missing values; found a masked entry at position 7'):
        gbart(x, y_masked, ndpost=4, nskip=2, printevery=None)
    with pytest.raises(ValueError, match='w must have no missing values; found a masked entry at position 0'):
        gbart(x, y, w=np.ma.masked_array(np.ones(12), mask=np.arange(12) == 0), ndpost=4, nskip=2, printevery=None)


# ---------------------------------------------------------------- missing values


def test_numeric_missing_two_copies():
    """A column with missing values: two model columns, missing at -inf and
    +inf, one more cut-point each; binned, the missing values are below
    (first copy) and above (second copy) every observed value."""
    x = np.array([[0.0, 1], [1, np.nan], [2, 3], [np.nan, 4], [4, 5]])
    enc = fit_encoding(x)
    assert enc.num_model == 4
    assert_array_equal(enc.model_encoded, [0, 0, 1, 1])
    assert_array_equal(enc.direction, [-1, 1, -1, 1])
    assert_allclose(enc.log_split_weights(), np.log(0.5))
    model = enc.transform(x, 'x')
    assert_array_equal(model[:, 0], [0, 1, 2, -np.inf, 4])
    assert_array_equal(model[:, 1], [0, 1, 2, np.inf, 4])
    splits = enc.cut_points(enc.encode(x, 'x'), numcut=100, usequants=False, xinfo=None)
    plain = prepcovars.compute_splits(np.array([[0.0], [1], [2], [4]]))
    K = int(plain.max_split[0])
    assert_array_equal(splits.max_split[:2], [K + 1, K + 1])
    bins = prepcovars.bin_predictors_np(model, splits.splits)
    observed = prepcovars.bin_predictors_np(np.array([[0.0], [1], [2], [4]]), plain.splits)[0]
    assert_array_equal(bins[0], [*(observed[:3] + 1), 0, observed[3] + 1])
    assert_array_equal(bins[1], [*observed[:3], K + 1, observed[3]])


def test_categorical_missing_is_a_level():
    df = pd.DataFrame({'c': ['a', None, 'b', 'a'], 'd': ['u', 'v', None, 'w']})
    enc = fit_encoding(df)
    assert enc.encoded_names == ['c_a', 'c_b', 'c_nan', 'd_u', 'd_v', 'd_w', 'd_nan']
    assert not enc.augmented
    out = enc.transform(df, 'x')
    assert_array_equal(out[:, 2], [0, 1, 0, 0])
    assert_array_equal(out.sum(axis=1), [2, 2, 2, 2])
    # one level and missing: two levels, one dummy (missing)
    enc1 = fit_encoding(pd.DataFrame({'c': ['a', None, 'a']}))
    assert enc1.encoded_names == ['c_nan']


def test_unexpected_missing_imputed_with_warning():
    x = np.array([[0.0], [1.0], [5.0]])
    enc = fit_encoding(x)
    with pytest.warns(UserWarning, match='median 1'):
        out = enc.transform(np.array([[np.nan]]), 'x_new')
    assert out[0, 0] == 1.0
    df = pd.DataFrame({'c': ['a', 'b', 'b']})
    enc = fit_encoding(df)
    with pytest.warns(UserWarning, match="level 'b'"):
        out = enc.transform(pd.DataFrame({'c': [None]}), 'x_new')
    assert out[0, 0] == 1.0


def test_dict_round_trip():
    df = _df().assign(m=[np.nan, 1.0] * 6, k=['x', None] * 6)
    enc = fit_encoding(df)
    again = Encoding.from_dict(json.loads(json.dumps(enc.to_dict())))
    assert again == enc
    assert_array_equal(again.transform(df, 'x'), enc.transform(df, 'x'))


# ---------------------------------------------------------------- through gbart


@pytest.fixture(scope='module')
def cat_data():
    rng = np.random.default_rng(5)
    n = 100
    a = rng.uniform(size=n)
    g = rng.choice(['p', 'q', 'r'], size=n)
    y = np.sin(6 * a) + np.select([g == 'p', g == 'q'], [-1.0, 0.0], 1.0) + 0.1 * rng.normal(size=n)
    df = pd.DataFrame({'a': a, 'g': pd.Categorical(g), 'z': rng.uniform(size=n)})
    return df, y


@pytest.fixture(scope='module')
def cat_fit(cat_data):
    df, y = cat_data
    return gbart(df, y, x_test=df.iloc[:30], seed=0, **SMALL)


def test_categorical_fit_is_the_dummies_fit(cat_data, cat_fit):
    """A category column gives the draws of the fit on R's model matrix."""
    df, y = cat_data
    dummies = np.column_stack([df['a'], *(df['g'] == level for level in 'pqr'), df['z']]).astype(float)
    ref = gbart(dummies, y, x_test=dummies[:30], seed=0, **SMALL)
    assert_array_equal(cat_fit.yhat_train, ref.yhat_train)
    assert_array_equal(cat_fit.yhat_test, ref.yhat_test)
    assert list(cat_fit.varcount.columns) == ['a', 'g_p', 'g_q', 'g_r', 'z']
    assert_array_equal(cat_fit.varcount.to_numpy(), ref.varcount)


def test_categorical_predict_and_importance(cat_data, cat_fit):
    df, y = cat_data
    new = df.iloc[:30][['z', 'g', 'a']].assign(g=lambda d: d['g'].astype(str))
    assert_allclose(cat_fit.predict(new), cat_fit.yhat_test, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"x_new column 'g' has the level 's'"):
        cat_fit.predict(df.iloc[:3].assign(g='s'))
    vi = cat_fit.variable_importance()
    assert list(vi.index) == ['a', 'g', 'z'] or set(vi.index) == {'a', 'g', 'z'}
    vc = cat_fit.varcount.to_numpy()
    assert vi.loc['g', 'varcount_mean'] == pytest.approx(vc[:, 1:4].sum(axis=1).mean())
    assert vi.loc['g', 'varprob_mean'] == pytest.approx(3 / 5)
    assert vi.loc['g', 'varcount_mean'] > vi.loc['z', 'varcount_mean']
    enc_vi = cat_fit.variable_importance(by='encoded')
    assert set(enc_vi.index) == {'a', 'g_p', 'g_q', 'g_r', 'z'}
    with pytest.raises(ValueError, match='by'):
        cat_fit.variable_importance(by='dummy')


def test_a_row_of_the_dataframe_is_one_row(cat_data, cat_fit):
    """``df.iloc[i]`` (a Series indexed by the training columns, in any
    order) is one row for `predict` and `x_test`; a column Series stays
    one column, which a fit of several columns refuses."""
    df, y = cat_data
    row = df.iloc[7]
    assert_array_equal(cat_fit.predict(row), cat_fit.predict(df.iloc[7:8]))
    assert_array_equal(cat_fit.predict(row[['z', 'g', 'a']]), cat_fit.yhat_test[:, 7:8])
    assert_allclose(cat_fit.predict(row, kind='mean'), cat_fit.yhat_test_mean[7:8], rtol=1e-5)  # (summed in another order)
    with pytest.raises(ValueError, match=r"x_new lacks the training columns \['g', 'z'\] \(it is a Series, read as one column"):
        cat_fit.predict(df['a'])
    with pytest.raises(ValueError, match=r"lacks the training columns \['a', 'g', 'z'\] \(it is a Series"):
        cat_fit.predict(row[['a', 'g']])  # not all the columns: a column
    numbered = pd.DataFrame(df[['a', 'z']].to_numpy())  # columns 0, 1, a range
    fit = gbart(numbered, y, seed=0, **SMALL)
    with pytest.raises(ValueError, match='it is a Series'):
        fit.predict(numbered[0])  # a column, not the row of its first two values
    fit = gbart(df, y, x_test=row, seed=0, **SMALL)
    assert_array_equal(fit.yhat_test, cat_fit.yhat_test[:, 7:8])
    # in predict_chunks a row counts as one row in the numbering of the noise
    noisy = {'kind': 'draws', 'predictive': True, 'seed': 1}
    parts = list(cat_fit.predict_chunks([row, df.iloc[8:10]], **noisy))
    assert_array_equal(np.concatenate(parts, axis=1), cat_fit.predict(df.iloc[7:10], **noisy))


def test_missing_fit_reports_original_columns(cat_data):
    """Copies of a column with missing values are summed in varcount and
    varprob; the prior split probability of the column is unchanged."""
    df, y = cat_data
    df = df.assign(a=df['a'].mask(np.arange(len(df)) % 4 == 0))
    with warnings.catch_warnings():
        # no imputation warning; the short test fit may warn that it has not converged
        warnings.simplefilter('error')
        warnings.filterwarnings('ignore', category=ConvergenceWarning)
        fit = gbart(df, y, x_test=df.iloc[:30], seed=0, **SMALL)
    assert list(fit.varcount.columns) == ['a', 'g_p', 'g_q', 'g_r', 'z']
    assert_allclose(fit.varprob.to_numpy(), 1 / 5)
    assert fit.varcount['a'].mean() > fit.varcount['z'].mean()
    assert np.all(np.isfinite(fit.yhat_test))
    assert_allclose(fit.predict(df.iloc[:30]), fit.yhat_test, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- columns by position


@pytest.fixture(scope='module')
def position_data():
    rng = np.random.default_rng(3)
    x = rng.uniform(size=(60, 3))
    y = x[:, 0] + 0.1 * rng.normal(size=60)
    return x, y


POSITION = {'ntree': 5, 'ndpost': 10, 'nskip': 5, 'printevery': None}


def _position_warnings(record):
    return [w for w in record if issubclass(w.category, PositionalColumnsWarning)]


def test_array_fit_dataframe_x_test_warns_once(position_data):
    x, y = position_data
    reordered = pd.DataFrame(x[:5, ::-1], columns=['c', 'b', 'a'])
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter('always')
        fit = gbart(x, y, x_test=reordered, **POSITION)
        fit.predict(reordered)
        fit.predict(reordered)
    (w,) = _position_warnings(record)
    assert 'x_test is a DataFrame but x_train was not' in str(w.message)
    assert 'taken by position' in str(w.message)
    assert w.filename == __file__  # points at the user's call
    assert_array_equal(fit.predict(reordered), fit.predict(x[:5, ::-1]))  # by position, as said


def test_dataframe_fit_array_predict_warns_once(position_data):
    x, y = position_data
    fit = gbart(pd.DataFrame(x, columns=['a', 'b', 'c']), y, **POSITION)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter('always')
        fit.predict(x[:5])
        fit.predict(x[:5])
    (w,) = _position_warnings(record)
    assert "x_train was a DataFrame (columns ['a', 'b', 'c']) but x_new is not" in str(w.message)


def test_same_kind_or_one_column_does_not_warn(position_data):
    x, y = position_data
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter('always')
        gbart(x, y, x_test=x[:5], **POSITION).predict(x[:5])
        frame = pd.DataFrame(x, columns=['a', 'b', 'c'])
        gbart(frame, y, x_test=frame.iloc[:5, ::-1], **POSITION)
        gbart(x[:, :1], y, x_test=pd.DataFrame({'z': x[:5, 0]}), **POSITION)
    assert not _position_warnings(record)
