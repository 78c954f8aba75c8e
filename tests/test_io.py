"""Tests for bartz.io: `BARTFit.save` and `bartz.load`."""

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_array_equal

import bartz
from bartz import gbart, io

SMALL = {'ntree': 20, 'ndpost': 50, 'nskip': 20, 'printevery': None}
REPO = Path(__file__).resolve().parent.parent


def _data(seed=0, n=100):
    rng = np.random.default_rng(seed)
    a = rng.uniform(size=n)
    g = rng.choice(['p', 'q', 'r'], size=n)
    m = np.where(rng.uniform(size=n) < 0.25, np.nan, rng.uniform(size=n))
    df = pd.DataFrame({'a': a, 'g': g, 'm': m})
    y = np.sin(6 * a) + (g == 'p') + np.nan_to_num(m) + 0.1 * rng.normal(size=n)
    return df, y


@pytest.fixture(scope='module')
def fit():
    df, y = _data()
    return gbart(df, y, x_test=df.iloc[:30], seed=0, **SMALL)


@pytest.fixture(scope='module')
def saved(fit, tmp_path_factory):
    path = tmp_path_factory.mktemp('io') / 'fit.npz'
    fit.save(path)
    return path


def _same(a, b):
    if isinstance(a, pd.DataFrame | pd.Series):
        assert type(a) is type(b)
        assert_array_equal(a.to_numpy(), b.to_numpy())
        assert list(a.index) == list(b.index)
        if isinstance(a, pd.DataFrame):
            assert list(a.columns) == list(b.columns)
    elif isinstance(a, np.ndarray):
        assert_array_equal(a, b)
        assert a.dtype == b.dtype
    else:
        assert a == b


def test_round_trip_attributes(fit, saved):
    loaded = bartz.load(saved)
    for name in bartz.BARTFit.__slots__:
        if name in ('_trace', '_splits', '_encoding', '_mesh', 'run_info'):
            continue
        assert hasattr(loaded, name) == hasattr(fit, name), name
        if hasattr(fit, name):
            _same(getattr(fit, name), getattr(loaded, name))
    assert loaded._encoding == fit._encoding
    assert loaded.run_info is None
    assert repr(loaded) == repr(fit)


def test_loaded_predicts_exactly(fit, saved):
    df, _ = _data(1)
    loaded = bartz.load(str(saved))
    assert_array_equal(loaded.predict(df), fit.predict(df))
    assert_array_equal(loaded.predict(df, kind='mean'), fit.predict(df, kind='mean'))


def test_predict_in_fresh_process(fit, saved, tmp_path):
    """Another process, without the training data, predicts as the original."""
    df, _ = _data(2)
    df.to_csv(tmp_path / 'new.csv', index=False)
    out = tmp_path / 'pred.npy'
    code = (
        'import sys, numpy as np, pandas as pd, bartz\n'
        'fit = bartz.load(sys.argv[1])\n'
        'x = pd.read_csv(sys.argv[2])\n'
        'np.save(sys.argv[3], fit.predict(x))\n'
    )
    subprocess.run([sys.executable, '-c', code, str(saved), str(tmp_path / 'new.csv'), str(out)], check=True, cwd=REPO)
    assert_array_equal(np.load(out), fit.predict(pd.read_csv(tmp_path / 'new.csv')))


def test_probit_round_trip(tmp_path):
    rng = np.random.default_rng(3)
    x = rng.uniform(size=(100, 3))
    y = (x[:, 0] > 0.5).astype(float)
    fit = gbart(x, y, type='pbart', seed=0, **SMALL)
    fit.save(tmp_path / 'p.npz')
    loaded = bartz.load(tmp_path / 'p.npz')
    assert not hasattr(loaded, 'sigma')
    assert loaded.yhat_test is None
    assert_array_equal(loaded.prob_train, fit.prob_train)
    assert_array_equal(loaded.predict(x[:7]), fit.predict(x[:7]))


def _rewrite_header(src, dst, change):
    with np.load(src, allow_pickle=False) as archive:
        arrays = {k: archive[k] for k in archive.files}
    header = json.loads(arrays['header'].tobytes().decode())
    change(header)
    arrays['header'] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    with open(dst, 'wb') as f:
        np.savez(f, **arrays)


def test_newer_format_is_refused(saved, tmp_path):
    path = tmp_path / 'newer.npz'
    _rewrite_header(saved, path, lambda h: h.update(format_version=io.FORMAT_VERSION + 1))
    with pytest.raises(ValueError, match=r'newer\.npz.*newer bartz'):
        bartz.load(path)


def test_truncated_file_is_refused(saved, tmp_path):
    data = saved.read_bytes()
    for cut in (len(data) // 2, len(data) - 10, 100):
        path = tmp_path / f'cut{cut}.npz'
        path.write_bytes(data[:cut])
        with pytest.raises(ValueError, match=f'cut{cut}.npz'):
            bartz.load(path)


def test_missing_array_is_refused(saved, tmp_path):
    path = tmp_path / 'lacking.npz'
    with zipfile.ZipFile(saved) as src, zipfile.ZipFile(path, 'w') as dst:
        for item in src.infolist():
            if item.filename != 'trace.leaf_tree.npy':
                dst.writestr(item, src.read(item.filename))
    with pytest.raises(ValueError, match=r'lacking\.npz.*trace\.leaf_tree'):
        bartz.load(path)


@pytest.mark.parametrize('kind', ['text', 'npy', 'other_npz', 'pickle', 'bad_json'])
def test_not_our_file_is_refused(tmp_path, kind):
    path = tmp_path / f'{kind}.bin'
    if kind == 'text':
        path.write_text('hello')
    elif kind == 'npy':
        np.save(open(path, 'wb'), np.arange(3))  # noqa: SIM115
    elif kind == 'other_npz':
        np.savez(open(path, 'wb'), a=np.arange(3))  # noqa: SIM115
    elif kind == 'pickle':
        import pickle  # noqa: PLC0415

        path.write_bytes(pickle.dumps({'a': 1}))
    else:
        np.savez(open(path, 'wb'), header=np.frombuffer(b'{not json', np.uint8))  # noqa: SIM115
    with pytest.raises(ValueError, match=f'{kind}.bin') as info:
        bartz.load(path)
    # no advice to unpickle a file that is not ours
    assert 'allow_pickle' not in str(info.value)


def test_bad_arguments(fit, tmp_path):
    with pytest.raises(TypeError, match='path'):
        fit.save(3)
    with pytest.raises(FileNotFoundError):
        bartz.load(tmp_path / 'nothing.npz')
    # a directory, given where a file name is expected
    for call in (fit.save, bartz.load):
        with pytest.raises(IsADirectoryError, match='path must be a file name, got the directory'):
            call(tmp_path)


def test_summaries_of_categorical_and_missing_columns(fit, saved):
    """The summaries of `predict` and `predict_chunks` go through the fit's
    encoding (dummies, missing values), before and after a save, and agree
    with the draws."""
    df, _ = _data(seed=1, n=70)
    loaded = bartz.load(saved)
    draws = fit.predict(df)
    assert_array_equal(loaded.predict(df), draws)
    q = (0.1, 0.5, 0.9)
    for f in (fit, loaded):
        np.testing.assert_allclose(f.predict(df, kind='mean'), draws.mean(axis=0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(f.predict(df, kind='sd'), draws.std(axis=0, ddof=1), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(f.predict(df, kind='quantiles', q=q), np.quantile(draws, q, axis=0), rtol=1e-6)
        chunks = [df.iloc[:25], df.iloc[25:]]
        np.testing.assert_allclose(
            np.concatenate(list(f.predict_chunks(chunks, kind='mean'))), draws.mean(axis=0), rtol=1e-5, atol=1e-5
        )
    unseen = df.iloc[30:40].copy()
    unseen.loc[unseen.index[3], 'g'] = 's'
    with pytest.raises(ValueError, match="'g'.*'s'|'s'.*'g'"):
        list(fit.predict_chunks([df.iloc[:30], unseen]))


def test_lbart_round_trip(tmp_path):
    """A logistic fit saves and loads, and predicts the same probabilities."""
    df, y = _data(seed=2)
    y01 = (y > np.median(y)).astype(float)
    lfit = gbart(df, y01, type='lbart', seed=0, **SMALL)
    path = tmp_path / 'lfit.npz'
    lfit.save(path)
    loaded = bartz.load(path)
    assert loaded.type == 'lbart'
    p = loaded.predict(df, kind='mean')
    assert_array_equal(p, lfit.predict(df, kind='mean'))
    assert np.all((p > 0) & (p < 1))
    np.testing.assert_allclose(p, lfit.prob_train_mean, rtol=1e-4, atol=1e-5)
