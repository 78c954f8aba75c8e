"""Tests for bartz.io: `BARTFit.save` and `bartz.load`."""

import contextlib
import json
import os
import re
import stat
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_array_equal

import bartz
from bartz.api import packaging
from bartz import gbart
from bartz.api import io

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
        quantiles = np.quantile(draws, q, axis=0)
        np.testing.assert_allclose(f.predict(df, kind='quantiles', q=q), quantiles, rtol=1e-6, atol=1e-6)
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


# ---------------------------------------------------------------- atomic saves


def _listing(directory):
    return sorted(p.name for p in Path(directory).iterdir())


class _FailingFile:
    """A file whose writes fail with `error` once `limit` bytes are written
    (the bytes up to the limit reach the file, as with a full disk)."""

    def __init__(self, file, limit, error):
        self._file, self._left, self._error = file, limit, error

    def write(self, data):
        data = memoryview(data).cast('B')
        if len(data) > self._left:
            self._file.write(data[: self._left])
            self._left = 0
            raise self._error
        self._left -= len(data)
        return self._file.write(data)

    def __getattr__(self, name):
        return getattr(self._file, name)


def _fail_savez(monkeypatch, error, limit=50_000):
    """Make `numpy.savez`, the writer inside `save`, fail after `limit` bytes."""
    real = np.savez

    def savez(file, *args, **kwargs):
        return real(_FailingFile(file, limit, error), *args, **kwargs)

    monkeypatch.setattr(io.np, 'savez', savez)


@pytest.mark.parametrize(
    'error', [OSError(28, 'No space left on device'), KeyboardInterrupt()], ids=['disk_full', 'ctrl_c']
)
def test_failed_save_keeps_earlier_file(fit, saved, tmp_path, monkeypatch, error):
    """A write that fails (an OSError, or Ctrl-C) in the middle of the file
    leaves the earlier file as it was and no temporary file."""
    path = tmp_path / 'fit.npz'
    path.write_bytes(saved.read_bytes())
    before = path.read_bytes()
    assert len(before) > 50_000  # the failure comes in the middle of the file
    _fail_savez(monkeypatch, error)
    with pytest.raises(type(error)):
        fit.save(path)
    monkeypatch.undo()
    assert _listing(tmp_path) == ['fit.npz']
    assert path.read_bytes() == before
    x, _ = _data(1, n=20)
    assert_array_equal(bartz.load(path).predict(x), fit.predict(x))


@pytest.mark.parametrize(
    'error', [OSError(28, 'No space left on device'), KeyboardInterrupt()], ids=['disk_full', 'ctrl_c']
)
def test_failed_save_to_new_name_leaves_nothing(fit, tmp_path, monkeypatch, error):
    _fail_savez(monkeypatch, error)
    with pytest.raises(type(error)):
        fit.save(tmp_path / 'new.npz')
    assert _listing(tmp_path) == []


@pytest.mark.skipif(sys.platform == 'win32', reason='RLIMIT_FSIZE is POSIX')
def test_save_over_file_size_limit_keeps_earlier_file(fit, saved, tmp_path):
    """A real short write: a process whose file size limit (RLIMIT_FSIZE,
    as a full disk would) stops the save gets OSError EFBIG; the earlier
    file is untouched and no temporary file is left."""
    path = tmp_path / 'fit.npz'
    path.write_bytes(saved.read_bytes())
    before = path.read_bytes()
    code = (
        'import errno, resource, signal, sys, bartz\n'
        'fit = bartz.load(sys.argv[1])\n'
        # without SIGXFSZ ignored the process would be killed, not see EFBIG
        'signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n'
        'resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[3]), resource.RLIM_INFINITY))\n'
        'try:\n'
        '    fit.save(sys.argv[2])\n'
        'except OSError as e:\n'
        '    sys.exit(0 if e.errno == errno.EFBIG else 3)\n'
        'sys.exit(4)\n'
    )
    limit = len(before) // 3
    result = subprocess.run(
        [sys.executable, '-c', code, str(saved), str(path), str(limit)], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert _listing(tmp_path) == ['fit.npz']
    assert path.read_bytes() == before
    x, _ = _data(1, n=20)
    assert_array_equal(bartz.load(path).predict(x), fit.predict(x))


@pytest.mark.skipif(sys.platform == 'win32', reason='POSIX permissions')
def test_save_permissions(fit, tmp_path):
    """A new file gets 0o666 less the umask (as open does, not mkstemp's
    0o600); an overwritten file keeps its mode."""
    umask = os.umask(0o027)
    try:
        fit.save(tmp_path / 'new.npz')
    finally:
        os.umask(umask)
    assert stat.S_IMODE(os.stat(tmp_path / 'new.npz').st_mode) == 0o640
    path = tmp_path / 'old.npz'
    path.write_bytes(b'old')
    path.chmod(0o604)
    fit.save(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o604
    assert _listing(tmp_path) == ['new.npz', 'old.npz']
    bartz.load(path)


def _call_in_thread(call, timeout, unblock):
    """``call()`` in a thread, so that a test of a FIFO cannot hang: the
    exception it raised (None if none), or a test failure if it is still
    running after `timeout` seconds (then ``unblock()`` lets it end)."""
    outcome = {}

    def target():
        try:
            call()
        except BaseException as e:  # noqa: BLE001
            outcome['error'] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        with contextlib.suppress(OSError):
            unblock()
        thread.join(10)
        pytest.fail(f'{call} blocks on a FIFO')
    return outcome.get('error')


def _open_fifo_end(fifo, flag):
    """Open and close the other end of `fifo`, which unblocks an open() of it."""
    os.close(os.open(fifo, flag | os.O_NONBLOCK))


@pytest.mark.skipif(sys.platform == 'win32', reason='symbolic links and FIFOs')
def test_save_through_symlink_and_to_fifo(fit, tmp_path):
    """Saving through a symbolic link replaces its target and keeps the
    link; saving to a FIFO is refused (no hang, the FIFO stays)."""
    target = tmp_path / 'target.npz'
    target.write_bytes(b'old')
    link = tmp_path / 'link.npz'
    link.symlink_to(target)
    fit.save(link)
    assert link.is_symlink()
    bartz.load(target)
    fifo = tmp_path / 'fifo'
    os.mkfifo(fifo)
    error = _call_in_thread(lambda: fit.save(fifo), 30, lambda: _open_fifo_end(fifo, os.O_RDONLY))
    assert isinstance(error, ValueError), error
    assert re.search(r'fifo.*is a FIFO', str(error)), error
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


# ---------------------------------------------------------------- validated loads


def _corrupt(src, dst, change=None):
    """Rewrite the saved fit `src` to `dst`, after ``change(scalars,
    arrays)`` has changed in place the header's scalars and the arrays."""
    with np.load(src, allow_pickle=False) as archive:
        arrays = {k: archive[k] for k in archive.files}
    header = json.loads(arrays.pop('header').tobytes().decode())
    if change is not None:
        change(header['scalars'], arrays)
    with open(dst, 'wb') as f:
        np.savez(f, header=np.frombuffer(json.dumps(header).encode(), np.uint8), **arrays)


def _scalar(name, value):
    return lambda scalars, _: scalars.update({name: value})


def _item(name, index, value):
    def change(_, arrays):
        arrays[name][index] = value

    return change


def _array(name, function):
    def change(_, arrays):
        arrays[name] = function(arrays[name])

    return change


def _first_internal(arrays):
    """(draw, tree, node) of the first internal node of the trace (node 0 is unused)."""
    return tuple(np.argwhere(arrays['trace.split_tree'][..., 1:] != 0)[0] + (0, 0, 1))


def _var_out_of_range(_, arrays):
    arrays['trace.var_tree'][_first_internal(arrays)] = 9


def _split_out_of_range(_, arrays):
    """A cut-point index one past the number of cut-points of its predictor."""
    node = _first_internal(arrays)
    var = arrays['trace.var_tree'][node]
    arrays['trace.split_tree'][node] = arrays['splits.max_split'][var] + 1


# the fixture's file: 6 model columns, ndpost 50, ntree 20, heap size 64, n 100
CORRUPTIONS = {
    'var_out_of_range': (_var_out_of_range, r'trace\.var_tree refers to predictor 9 .*, but the file has 6 predictors'),
    'split_out_of_range': (_split_out_of_range, r'trace\.split_tree refers to cut-point'),
    'nan_cut_point': (_item('splits.splits', (0, 3), np.nan), r'splits\.splits\[0, 3\] is nan'),
    'unsorted_cut_points': (_item('splits.splits', (0, 3), 0.9), r'splits\.splits\[0\].*not sorted'),
    'finite_padding': (_item('splits.splits', (1, 5), 0.7), r'splits\.splits\[1, 5\].*must be \+inf'),
    'max_split_too_large': (_item('splits.max_split', 1, 500), r'splits\.max_split\[1\] is 500'),
    'nan_leaf': (_item('trace.leaf_tree', (0, 0, 1), np.nan), r'trace\.leaf_tree has the value nan'),
    'inf_leaf': (_item('trace.leaf_tree', (3, 2, 1), np.inf), r'trace\.leaf_tree has the value inf \(draw 3'),
    'offset_infinity': (_scalar('offset', float('inf')), r'offset must be a finite number, got inf'),
    'scale_zero': (_scalar('_scale', 0.0), r'_scale must be a finite positive number'),
    'ndpost_abc': (_scalar('ndpost', 'abc'), r"ndpost must be a positive integer, got 'abc'"),
    'ndpost_wrong': (_scalar('ndpost', 49), r'trace\.leaf_tree must be .* \(49, 20, H\)'),
    'ntree_float': (_scalar('ntree', 20.0), r'ntree must be a positive integer, got 20\.0'),
    'type_unknown': (_scalar('type', 'xbart'), r"type must be one of .*'wbart'.*got 'xbart'"),
    'moves_unknown': (_scalar('moves', {'grow': 0.5, 'jump': 0.5}), r"moves must be 'R' or map move names"),
    'moves_string': (_scalar('moves', 'r'), r"moves must be 'R' or map move names.*got 'r'"),
    'heap_not_power_of_2': (_array('trace.leaf_tree', lambda a: a[..., :48]), r'trace\.leaf_tree: heap size'),
    'var_tree_shape': (_array('trace.var_tree', lambda a: a[..., :16]), r'trace\.var_tree must be .*\(50, 20, 32\)'),
    'leaf_tree_dtype': (_array('trace.leaf_tree', lambda a: a.astype(np.float64)), r'trace\.leaf_tree must be float32'),
    'yhat_train_shape': (_array('yhat_train', lambda a: a[:, :-1]), r'yhat_train has shape \(50, 99\).*n = 100'),
    'sigma_shape': (_array('sigma', lambda a: a[:10]), r'sigma has shape \(10,\)'),
    'sigma_nan': (_item('sigma_', 3, np.nan), r'sigma_ has the value nan'),
    'varcount_negative': (_item('varcount', (0, 0), -1), r'varcount has the value -1'),
    'kept_shape': (_array('kept', lambda a: a[:-1]), r'kept must be a boolean array of shape \(6,\)'),
}


@pytest.mark.parametrize('case', list(CORRUPTIONS))
def test_corrupt_field_is_refused(saved, tmp_path, case):
    """Each corruption of a field of a real file is refused by `load` with a
    ValueError naming the file and the field (no wrong predictions later)."""
    change, match = CORRUPTIONS[case]
    path = tmp_path / f'{case}.npz'
    _corrupt(saved, path, change)
    with pytest.raises(ValueError, match=rf"^bartz\.load\('.*{case}\.npz'\): {match}"):
        bartz.load(path)


def test_offset_infinity_in_json(saved, tmp_path):
    """The JSON literal Infinity, which Python's json parses, is refused too."""
    with np.load(saved, allow_pickle=False) as archive:
        content = {k: archive[k] for k in archive.files}
    text = content['header'].tobytes().decode()
    header = json.loads(text)
    text = text.replace(json.dumps(header['scalars']['offset']), 'Infinity', 1)
    assert json.loads(text)['scalars']['offset'] == float('inf')
    content['header'] = np.frombuffer(text.encode(), np.uint8)
    path = tmp_path / 'inf.npz'
    with open(path, 'wb') as f:
        np.savez(f, **content)
    with pytest.raises(ValueError, match=r"inf\.npz'\): offset must be a finite number"):
        bartz.load(path)


def test_rewritten_good_file_still_loads(fit, saved, tmp_path):
    """The rewriting of the corruption tests alone changes nothing: the file
    loads and predicts bit for bit as the original."""
    path = tmp_path / 'same.npz'
    _corrupt(saved, path)
    x, _ = _data(1, n=20)
    assert_array_equal(bartz.load(path).predict(x), fit.predict(x))


def test_file_without_moves_loads(fit, saved, tmp_path):
    """A file written before fits recorded their tree moves loads, with
    ``moves`` None."""
    path = tmp_path / 'older.npz'
    _corrupt(saved, path, lambda scalars, _: scalars.pop('moves'))
    loaded = bartz.load(path)
    assert loaded.moves is None and fit.moves is not None
    x, _ = _data(1, n=20)
    assert_array_equal(loaded.predict(x), fit.predict(x))


def test_load_accepts_other_layouts(tmp_path):
    """Several chains, no yhat_train, DART, a dropped constant column and an
    array x_train: the checks accept what `save` writes."""
    rng = np.random.default_rng(5)
    x = rng.uniform(size=(60, 4))
    x[:, 2] = 1.0
    y = x[:, 0] + 0.1 * rng.normal(size=60)
    fit = gbart(x, y, x_test=x[:7], mc_cores=2, sparse=True, save_yhat_train=False, seed=0, **SMALL)
    fit.save(tmp_path / 'f.npz')
    loaded = bartz.load(tmp_path / 'f.npz')
    assert loaded.sigma.shape[1] == 2
    assert loaded.yhat_train is None
    assert_array_equal(loaded.predict(x[:9]), fit.predict(x[:9]))


@pytest.mark.skipif(sys.platform == 'win32', reason='FIFOs are POSIX')
def test_fifo_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / 'fit.npz'
    os.mkfifo(fifo)
    error = _call_in_thread(lambda: bartz.load(fifo), 30, lambda: _open_fifo_end(fifo, os.O_WRONLY))
    assert isinstance(error, ValueError), error
    assert re.search(r"fit\.npz'\): the path is a FIFO \(named pipe\), not a regular file", str(error)), error


@pytest.mark.skipif(not os.path.exists('/dev/null'), reason='needs /dev/null')
def test_device_is_refused():
    with pytest.raises(ValueError, match=r"'/dev/null'\): the path is a character device, not a regular file"):
        bartz.load('/dev/null')


@pytest.mark.parametrize('stage', ['set_variable_use', 'x_test'])
def test_interrupted_fit_saves_and_loads(monkeypatch, tmp_path, stage, capsys):
    """A fit that a Ctrl-C cut short (its later attributes None, listed in
    ``run_info.missing``) is saved and loaded with them None, and predicts
    as the original."""
    df, y = _data()
    if stage == 'x_test':
        evaluate = packaging.evaluate_fit

        def interrupt_x_test(fit, X, m, *args, **kwargs):
            if m == 30:
                raise KeyboardInterrupt
            return evaluate(fit, X, m, *args, **kwargs)

        monkeypatch.setattr(packaging, 'evaluate_fit', interrupt_x_test)
    else:

        def interrupt(*args, **kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr(packaging, stage, interrupt)
    cut = gbart(df, y, x_test=df.iloc[:30], seed=0, **SMALL)
    monkeypatch.undo()
    assert cut.run_info.missing
    cut.save(tmp_path / 'cut.npz')
    loaded = bartz.load(tmp_path / 'cut.npz')
    for name in cut.run_info.missing:
        assert getattr(loaded, name) is None, name
    assert_array_equal(loaded.predict(df.iloc[:30]), cut.predict(df.iloc[:30]))
