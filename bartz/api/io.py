"""Saving and loading fits: `save` (`bartz.BARTFit.save`) and `load`.

The file format
---------------
A fit is one ``.npz`` file (a zip archive of ``.npy`` arrays, written by
`numpy.savez`) holding:

- ``header``: a ``uint8`` array, the UTF-8 bytes of a JSON object with

  - ``format``: ``"bartz.BARTFit"``;
  - ``format_version``: an integer, `FORMAT_VERSION` (1) for this version
    of bartz; a file with a larger one is refused;
  - ``bartz_version``: the version of bartz that wrote it;
  - ``scalars``: the scalar attributes of the fit (numbers, strings,
    null), e.g. ``type``, ``offset``, ``ndpost``, ``accept_rate``;
  - ``arrays``: the names of the other entries of the archive;
  - ``frames``: which arrays were pandas DataFrames or Series (their
    labels are the encoded column names);
  - ``unset``: the attributes that do not apply to this fit (e.g.
    ``sigma`` of a probit fit);
  - ``missing``: the attributes that a Ctrl-C left None
    (``run_info.missing``, see `bartz.api.fit.STAGES`); absent or empty for a
    fit that was not cut short;
  - ``encoding``: the column encoding, `bartz.encoding.Encoding.to_dict`.

- one array per array attribute (``yhat_train``, ``sigma``, ``varcount``,
  ...) and what prediction needs: the saved forests ``trace.var_tree``,
  ``trace.split_tree``, ``trace.leaf_tree``, the cut-points
  ``splits.splits``, ``splits.max_split`` and the kept model columns
  ``kept``.

Saving is atomic
----------------
`save` writes the whole file to a temporary file in the target's directory
(``.<name>.<random>.tmp``), flushes it to disk (``fsync``), and only then
renames it onto the target (`os.replace`; on POSIX the directory is synced
too). If anything fails before the rename (an error of the fit, a full
disk, a file size limit, an exception or a Ctrl-C in the middle of the
write), the temporary file is removed and the error raised again: a file
that was there before is untouched, and a new name gets no file at all.
Either the complete new file is at ``path``, or what was there before.
The new file has the permissions of the file it replaces, or those of a
plain ``open(path, 'wb')`` (``0o666`` less the umask). Saving through a
symbolic link replaces the file it points to and keeps the link; a path
that is something other than a regular file (a FIFO, a device) is refused.

Loading validates
-----------------
`load` opens only regular files: a directory, a FIFO, a device or a socket
is refused before anything is read from it (no hang on a FIFO). It reads
with ``allow_pickle=False`` and never executes code from the file:
everything is numbers, strings and JSON. Before building the fit it checks
the file against its header, and refuses with a `ValueError` that names
the file and the field:

- the scalars: ``type`` one of the known outcome types, ``ndpost``,
  ``ntree``, ``chains`` and ``_n`` positive integers (``ndpost`` a
  multiple of ``chains``), ``offset`` finite, ``_scale`` finite and
  positive, the other settings finite numbers (or null where the fit has
  none);
- the forests: ``trace.*`` of shapes ``(ndpost, ntree, H/2)`` and
  ``(ndpost, ntree, H)`` with ``H`` a power of two (a supported depth),
  unsigned split variables and indices, float32 leaves, all finite; at
  every internal node (split index not 0) a predictor index below the
  number of kept predictors and a split index at most that predictor's
  number of cut-points;
- the cut-points: ``splits.splits`` float32 with one row per kept model
  column, ``splits.max_split`` between 0 and its width; the cut-points in
  use finite and sorted, the padding after them ``+inf`` (as written);
  ``numcut`` and ``xinfo`` equal to them; ``kept`` boolean, one per model
  column of the encoding;
- the other arrays (``yhat_train``, ``sigma``, ``varcount``, ...): their
  shapes against ``ndpost``, ``chains``, ``_n``, the number of test points
  and of encoded columns, their dtypes, finite values (probabilities and
  split probabilities in [0, 1], ``sigma`` and ``varcount`` not negative);
- the encoding and the ``frames``: well-formed, the labels matching.

A loaded fit predicts exactly as the original, in another process and
without the training data; what it lacks is ``run_info`` (None) and the
device mesh (prediction runs on the default device).
"""

import contextlib
import errno
import json
import math
import os
import stat

import jax
import numpy as np
import pandas as pd

from bartz.prep import encoding
from bartz.forest import grove
from bartz.prep import cutpoints as prepcovars
from bartz.prep import priors
from bartz.api.fit import BARTFit

__all__ = ['FORMAT_NAME', 'FORMAT_VERSION', 'load', 'save']

FORMAT_NAME = 'bartz.BARTFit'
FORMAT_VERSION = 1

# attributes stored in their own way, or not at all
_SPECIAL = ('_encoding', '_trace', '_splits', '_kept', '_mesh', 'run_info')


def save(fit: BARTFit, path) -> None:
    """Save a fit to the file ``path`` (written as given; ``.npz`` is the
    conventional suffix), in the format described in `bartz.io`.

    The save is atomic: the file is written to a temporary file next to
    ``path`` and renamed onto it only when complete, so a failed save (a
    full disk, an exception, a Ctrl-C) leaves a file that was there before
    untouched and no partial file (see `bartz.io`).

    Parameters
    ----------
    fit
        The fit to save.
    path
        File name (str or path-like).

    Raises
    ------
    TypeError
        If ``fit`` is not a `BARTFit`, ``path`` is not a file name, or an
        attribute of the fit cannot be stored.
    IsADirectoryError
        If ``path`` is a directory.
    ValueError
        If ``path`` exists and is not a regular file (a FIFO, a device).
    OSError
        If the file cannot be written (the earlier file, if any, is kept).
    """
    if not isinstance(fit, BARTFit):
        msg = f'fit must be a BARTFit, got {type(fit).__name__}'
        raise TypeError(msg)
    path = _check_path(path)
    arrays = {
        'trace.var_tree': np.asarray(fit._trace.var_tree),
        'trace.split_tree': np.asarray(fit._trace.split_tree),
        'trace.leaf_tree': np.asarray(fit._trace.leaf_tree),
        'splits.splits': np.asarray(fit._splits.splits),
        'splits.max_split': np.asarray(fit._splits.max_split),
        'kept': np.asarray(fit._kept),
    }
    scalars, frames, unset = {}, {}, []
    for name in BARTFit.__slots__:
        if name in _SPECIAL:
            continue
        if not hasattr(fit, name):
            unset.append(name)
            continue
        value = getattr(fit, name)
        if isinstance(value, pd.DataFrame | pd.Series):
            frames[name] = type(value).__name__
            arrays[name] = value.to_numpy()
        elif isinstance(value, np.ndarray):
            arrays[name] = value
        elif isinstance(value, dict):
            scalars[name] = {str(k): _scalar(v, name) for k, v in value.items()}
        else:
            scalars[name] = _scalar(value, name)
    for name, arr in arrays.items():
        if arr.dtype == object:
            msg = f'attribute {name} is an array of Python objects, which the format does not store'
            raise TypeError(msg)
    import bartz  # noqa: PLC0415

    header = {
        'format': FORMAT_NAME,
        'format_version': FORMAT_VERSION,
        'bartz_version': bartz.__version__,
        'scalars': scalars,
        'arrays': sorted(arrays),
        'frames': frames,
        'unset': unset,
        'missing': list(fit.run_info.missing) if fit.run_info is not None else [],
        'encoding': fit._encoding.to_dict(),
    }
    blob = np.frombuffer(json.dumps(header).encode(), np.uint8)
    _write_atomically(path, lambda f: np.savez(f, header=blob, **arrays))


def load(path) -> BARTFit:
    """Load a fit saved with `bartz.BARTFit.save`.

    Only a regular file is opened, nothing is unpickled, and the contents
    are checked against the header before the fit is built (see
    `bartz.io` for the list of checks).

    Parameters
    ----------
    path
        File name (str or path-like).

    Returns
    -------
    BARTFit
        The fit, which predicts exactly as the saved one. ``run_info`` is
        None, and prediction runs on the default device.

    Raises
    ------
    FileNotFoundError
        If there is no file ``path``.
    IsADirectoryError
        If ``path`` is a directory.
    ValueError
        If ``path`` is not a regular file (a FIFO, a device), is not a
        bartz fit, is truncated or corrupt, has a field that is out of
        range or inconsistent with the others, or was written by a newer
        version of bartz (a newer format version); the message names the
        file, and the field where there is one.
    """
    path = _check_path(path)
    where = f'bartz.load({path!r})'
    try:
        with _open_regular(path, where) as file, np.load(file, allow_pickle=False) as archive:
            if not hasattr(archive, 'files') or 'header' not in archive.files:
                msg = f'{where}: not a bartz fit file (no header)'
                raise _NotOurs(msg)
            header = _read_header(archive['header'], where)
            missing = [a for a in header['arrays'] if a not in archive.files]
            if missing:
                msg = f'{where}: the file is truncated or corrupt: it lacks the arrays {missing}'
                raise _NotOurs(msg)
            arrays = {a: archive[a] for a in header['arrays']}
    except _NotOurs as e:
        raise ValueError(str(e)) from None
    except (OSError, ValueError, EOFError, KeyError, TypeError) as e:
        if isinstance(e, FileNotFoundError | IsADirectoryError):
            raise
        # (NumPy's reason for a file that is not an archive suggests loading
        # it with pickle: not advice to pass on for a fit file)
        reason = 'not a NumPy archive' if 'allow_pickle' in str(e) else str(e)
        msg = f'{where}: not a readable bartz fit file (truncated, corrupt or another format): {reason}'
        raise ValueError(msg) from e
    except Exception as e:  # zipfile.BadZipFile and relatives
        msg = f'{where}: not a readable bartz fit file (truncated, corrupt or another format): {e}'
        raise ValueError(msg) from e
    try:
        enc = _check_contents(header, arrays)
    except _Invalid as e:
        msg = f'{where}: {e}'
        raise ValueError(msg) from None
    return _build(header, arrays, enc)


class _NotOurs(Exception):  # noqa: N818
    pass


class _Invalid(Exception):  # noqa: N818
    """A field of the file is out of range or inconsistent (the message names it)."""


def _check_path(path):
    try:
        path = os.fspath(path)
    except TypeError:
        msg = f'path must be a file name (str or path-like), got {path!r}'
        raise TypeError(msg) from None
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if os.path.isdir(path):
        msg = f'path must be a file name, got the directory {path!r} (for example {os.path.join(path, "fit.npz")!r})'
        raise IsADirectoryError(msg)
    return path


def _file_kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISDIR, 'a directory'),
        (stat.S_ISFIFO, 'a FIFO (named pipe)'),
        (stat.S_ISCHR, 'a character device'),
        (stat.S_ISBLK, 'a block device'),
        (stat.S_ISSOCK, 'a socket'),
    ):
        if test(mode):
            return kind
    return 'not a regular file'


# ---------------------------------------------------------------- writing


def _write_atomically(path: str, write) -> None:
    """Call ``write(file)`` on a temporary file in the directory of `path`,
    then rename it onto `path`; on any failure (a `BaseException`, Ctrl-C
    included) remove the temporary file and raise again."""
    # through a symbolic link, replace its target (as open(path, 'wb') writes there)
    target = os.path.realpath(path) if os.path.islink(path) else path
    directory = os.path.dirname(os.path.abspath(target))
    try:
        st = os.stat(target)
    except FileNotFoundError:
        mode = None
    else:
        if not stat.S_ISREG(st.st_mode):
            msg = (
                f'cannot save to {path!r}: it is {_file_kind(st.st_mode)}, and a save replaces the file at '
                'path by a new regular file; give the name of a regular file'
            )
            raise ValueError(msg)
        # the rename would replace a file that open(path, 'wb') may not write
        if not os.access(target, os.W_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        mode = stat.S_IMODE(st.st_mode)
    try:
        fd, tmp = _create_temporary(directory, os.path.basename(target))
    except OSError as e:
        # (named after the temporary file, the error would not say which save failed)
        msg = (
            f'cannot save to {path!r}: a save first writes a temporary file in the directory {directory!r}, '
            f'and that failed: {e.strerror}'
        )
        raise OSError(e.errno, msg) from e  # (the subclass of e.errno: FileNotFoundError, PermissionError...)
    try:
        with os.fdopen(fd, 'wb') as file:
            if mode is not None:
                _chmod(file.fileno(), tmp, mode)
            write(file)
            file.flush()
            _fsync(file.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _sync_directory(directory)


def _create_temporary(directory: str, name: str) -> tuple[int, str]:
    """Create a new file ``.<name>.<random>.tmp`` in `directory` and open it.

    Created with mode ``0o666`` as `open` does, so that the kernel applies
    the umask (`tempfile.mkstemp` creates ``0o600``, and reading the umask
    means setting it, which races with other threads).
    """
    flags = (
        os.O_WRONLY
        | os.O_CREAT
        | os.O_EXCL
        | getattr(os, 'O_BINARY', 0)
        | getattr(os, 'O_NOFOLLOW', 0)
        | getattr(os, 'O_CLOEXEC', 0)
    )
    for _ in range(100):
        tmp = os.path.join(directory, f'.{name}.{os.urandom(6).hex()}.tmp')
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f'no free temporary file name in {directory!r}')


def _fsync(fd: int) -> None:
    """Flush a file to disk; a file system that cannot (EINVAL, ENOTSUP)
    still has the data, while a real failure (EIO, ENOSPC) is raised."""
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, getattr(errno, 'ENOTSUP', None), getattr(errno, 'EOPNOTSUPP', None)):
            raise


def _chmod(fd: int, tmp: str, mode: int) -> None:
    if hasattr(os, 'fchmod'):
        os.fchmod(fd, mode)
    else:  # Windows
        os.chmod(tmp, mode)


def _sync_directory(directory: str) -> None:
    """Make the rename durable (POSIX; where a directory cannot be opened or
    synced the rename is still atomic, only perhaps not yet on disk)."""
    if os.name != 'posix':
        return
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, 'O_DIRECTORY', 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _scalar(value, name):
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, np.generic) and value.dtype.kind in 'biuf':
        return value.item()
    msg = f'attribute {name} of type {type(value).__name__} cannot be saved'
    raise TypeError(msg)


# ---------------------------------------------------------------- reading


def _open_regular(path: str, where: str):
    """Open `path` for reading if it is a regular file.

    Checked before opening (opening a FIFO blocks until a writer comes,
    opening a device may act on it) and again on the opened file, which
    is opened non-blocking so that a FIFO put there in between cannot hang.
    """
    st = os.stat(path)
    if stat.S_ISDIR(st.st_mode):
        msg = f'path must be a file name, got the directory {path!r}'
        raise IsADirectoryError(msg)
    if not stat.S_ISREG(st.st_mode):
        raise _NotOurs(_not_regular(where, st.st_mode))
    flags = os.O_RDONLY | getattr(os, 'O_BINARY', 0) | getattr(os, 'O_NONBLOCK', 0) | getattr(os, 'O_NOCTTY', 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _NotOurs(_not_regular(where, st.st_mode))
        return os.fdopen(fd, 'rb')
    except BaseException:
        os.close(fd)
        raise


def _not_regular(where: str, mode: int) -> str:
    return f'{where}: the path is {_file_kind(mode)}, not a regular file; a fit is read only from a regular file'


def _read_header(blob, where) -> dict:
    if blob.dtype != np.uint8 or blob.ndim != 1:
        msg = f'{where}: not a bartz fit file (bad header)'
        raise _NotOurs(msg)
    try:
        header = json.loads(blob.tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        msg = f'{where}: not a bartz fit file (header is not JSON: {e})'
        raise _NotOurs(msg) from None
    if not isinstance(header, dict) or header.get('format') != FORMAT_NAME:
        msg = f'{where}: not a bartz fit file (format {header.get("format") if isinstance(header, dict) else None!r})'
        raise _NotOurs(msg)
    version = header.get('format_version')
    if not _is_int(version) or version < 1:
        msg = f'{where}: the file has an invalid format version {version!r}'
        raise _NotOurs(msg)
    if version > FORMAT_VERSION:
        msg = (
            f'{where}: the file was written by a newer bartz ({header.get("bartz_version")}, format version '
            f'{version}); this bartz reads format versions up to {FORMAT_VERSION}: upgrade bartz'
        )
        raise _NotOurs(msg)
    for key, kind in (('scalars', dict), ('arrays', list), ('frames', dict), ('unset', list), ('encoding', dict)):
        if not isinstance(header.get(key), kind):
            msg = f'{where}: the file is truncated or corrupt: its header lacks {key!r}'
            raise _NotOurs(msg)
    header.setdefault('missing', [])  # files of fits that no Ctrl-C cut short have none
    if not isinstance(header['missing'], list):
        msg = f'{where}: the file is corrupt: header.missing must be a list of names, got {header["missing"]!r}'
        raise _NotOurs(msg)
    for key in ('arrays', 'unset', 'missing'):
        if not all(isinstance(a, str) for a in header[key]):
            msg = f'{where}: the file is corrupt: header.{key} must be a list of names, got {header[key]!r}'
            raise _NotOurs(msg)
    return header


# ---------------------------------------------------------------- validation
#
# Each check raises _Invalid with a message that starts with the field; `load`
# prefixes the file. The checks are those of the module docstring.

# scalar attributes: name -> (rule, whether a fit without it is refused)
_COUNT, _FINITE, _POSITIVE, _FINITE_OR_NONE = 'count', 'finite', 'positive', 'finite or None'
_SCALAR_RULES = {
    'type': ('type', True),
    'ndpost': (_COUNT, True),
    'ntree': (_COUNT, True),
    'chains': (_COUNT, True),
    '_n': (_COUNT, True),
    'offset': (_FINITE, True),
    '_scale': (_POSITIVE, True),
    'sigest': (_FINITE_OR_NONE, False),
    'k': (_FINITE, False),
    'power': (_FINITE, False),
    'base': (_FINITE, False),
    'sigdf': (_FINITE, False),
    'sigquant': (_FINITE, False),
    'lambda_': (_FINITE_OR_NONE, False),
    'tau_num': (_FINITE, False),
    'sigma_mean': (_FINITE, False),
    'elapsed': (_FINITE, False),
    'accept_rate': ('rates', False),
}

# array attributes: name -> (shape in named sizes, dtype kinds, range, whether None is allowed)
_ARRAY_RULES = {
    'yhat_train': (('ndpost', 'n'), 'f', None, True),
    'yhat_train_mean': (('n',), 'f', None, False),
    'yhat_test': (('ndpost', 'n_test'), 'f', None, True),
    'yhat_test_mean': (('n_test',), 'f', None, True),
    'prob_train': (('ndpost', 'n'), 'f', (0, 1), True),
    'prob_train_mean': (('n',), 'f', (0, 1), False),
    'prob_test': (('ndpost', 'n_test'), 'f', (0, 1), True),
    'prob_test_mean': (('n_test',), 'f', (0, 1), True),
    'sigma': (None, 'f', (0, math.inf), False),  # shape depends on chains: see _sigma_shape
    'sigma_': (('ndpost',), 'f', (0, math.inf), False),
    'varcount': (('ndpost', 'p_enc'), 'iu', (0, math.inf), False),
    'varcount_mean': (('p_enc',), 'f', (0, math.inf), False),
    'varprob': (('ndpost', 'p_enc'), 'f', (0, 1), False),
    'varprob_mean': (('p_enc',), 'f', (0, 1), False),
    'numcut': (('p_kept',), 'iu', None, False),
    'xinfo': (None, 'f', None, False),  # checked equal to splits.splits
    'rm_const': (None, 'iu', None, False),  # checked in _check_rm_const
}

_TEST_ARRAYS = ('yhat_test', 'yhat_test_mean', 'prob_test', 'prob_test_mean')


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_contents(header: dict, arrays: dict) -> encoding.Encoding:
    """Check the file's fields against each other; return its encoding."""
    scalars = header['scalars']
    _check_names(header, arrays)
    missing = set(header['missing'])  # left None by a Ctrl-C (`bartz.api.fit.STAGES`)
    unknown = sorted(missing - set(BARTFit.__slots__))
    if unknown:
        msg = f'header.missing names unknown attributes {unknown}'
        raise _Invalid(msg)
    for name, (rule, required) in _SCALAR_RULES.items():
        if name in missing and scalars.get(name, 0) is None:
            continue
        if name in scalars:
            _check_scalar(name, scalars[name], rule)
        elif required:
            msg = f'the attribute {name} is missing (not in header.scalars)'
            raise _Invalid(msg)
    ndpost, ntree, chains = scalars['ndpost'], scalars['ntree'], scalars['chains']
    if ndpost % chains:
        msg = f'ndpost ({ndpost}) must be a multiple of chains ({chains}): each chain keeps ndpost / chains draws'
        raise _Invalid(msg)
    enc = _check_encoding(header['encoding'])
    kept = _check_kept(arrays['kept'], enc)
    max_split = _check_splits(arrays['splits.splits'], arrays['splits.max_split'], int(kept.sum()))
    _check_trace(arrays, ndpost, ntree, max_split)
    sizes = {
        'ndpost': ndpost,
        'n': scalars['_n'],
        'n_test': _num_test(arrays),
        'p_enc': enc.num_encoded,
        'p_kept': max_split.size,
    }
    for name, rule in _ARRAY_RULES.items():
        if name in arrays:
            _check_array(name, arrays[name], rule, sizes, chains)
        elif name in scalars and scalars[name] is not None:
            msg = f'{name} must be an array, got {scalars[name]!r}'
            raise _Invalid(msg)
        elif name in scalars and not rule[3] and name not in missing:
            msg = f'{name} must be an array, got None'
            raise _Invalid(msg)
    given = [name for name in _TEST_ARRAYS if name in arrays]
    none = [name for name in _TEST_ARRAYS if scalars.get(name, 0) is None]
    if given and none:
        msg = f'{none[0]} is None (no x_test) but {given[0]} is an array'
        raise _Invalid(msg)
    if not priors.OUTCOME_TYPES[scalars['type']].binary and 'sigma_' not in arrays and 'sigma_' not in missing:
        msg = f"sigma_ is missing: a fit of type {scalars['type']!r} needs its draws of sigma to predict"
        raise _Invalid(msg)
    if 'numcut' in arrays and not np.array_equal(arrays['numcut'], max_split):
        msg = 'numcut differs from splits.max_split (the numbers of cut-points the trees use)'
        raise _Invalid(msg)
    if 'xinfo' in arrays and not np.array_equal(arrays['xinfo'], arrays['splits.splits']):
        msg = 'xinfo differs from splits.splits (the cut-points the trees use)'
        raise _Invalid(msg)
    if 'rm_const' in arrays:
        _check_rm_const(arrays['rm_const'], enc.num_encoded)
    _check_frames(header['frames'], arrays, enc)
    return enc


def _check_names(header: dict, arrays: dict) -> None:
    known = set(BARTFit.__slots__) - set(_SPECIAL)
    stored = {'trace.var_tree', 'trace.split_tree', 'trace.leaf_tree', 'splits.splits', 'splits.max_split', 'kept'}
    missing = sorted(stored - set(arrays))
    if missing:
        msg = f'the arrays {missing} are missing (not in header.arrays)'
        raise _Invalid(msg)
    seen = {}
    for where, names in (
        ('header.scalars', list(header['scalars'])),
        ('header.arrays', [a for a in arrays if a not in stored]),
        ('header.unset', header['unset']),
    ):
        for name in names:
            if name not in known:
                msg = f'{where} names an unknown attribute {name!r}'
                raise _Invalid(msg)
            if name in seen:
                msg = f'the attribute {name!r} is in both {seen[name]} and {where}'
                raise _Invalid(msg)
            seen[name] = where


def _check_scalar(name: str, value, rule: str) -> None:
    if rule == 'type':
        if not isinstance(value, str) or value not in priors.OUTCOME_TYPES:
            names = ', '.join(repr(t) for t in priors.OUTCOME_TYPES)
            msg = f'type must be one of {names}, got {value!r}'
            raise _Invalid(msg)
    elif rule == _COUNT:
        if not _is_int(value) or value < 1:
            msg = f'{name} must be a positive integer, got {value!r}'
            raise _Invalid(msg)
    elif rule == 'rates':
        if not isinstance(value, dict) or not all(
            _is_number(v) and math.isfinite(v) and 0 <= v <= 1 for v in value.values()
        ):
            msg = f'{name} must map move names to rates in [0, 1], got {value!r}'
            raise _Invalid(msg)
    elif value is None and rule == _FINITE_OR_NONE:
        return
    elif not _is_number(value) or not math.isfinite(value) or (rule == _POSITIVE and value <= 0):
        what = {_FINITE: 'a finite number', _POSITIVE: 'a finite positive number'}.get(rule, 'a finite number or null')
        msg = f'{name} must be {what}, got {value!r}'
        raise _Invalid(msg)


def _check_encoding(d: dict) -> encoding.Encoding:
    named = d.get('named')
    columns = d.get('columns')
    if not isinstance(named, bool) or not isinstance(columns, list):
        msg = 'encoding must have "named" (true or false) and "columns" (a list)'
        raise _Invalid(msg)
    keys = {'name', 'kind', 'levels', 'missing', 'fill'}
    for i, c in enumerate(columns):
        field = f'encoding.columns[{i}]'
        if not isinstance(c, dict) or not keys <= set(c):
            msg = f'{field} must be an object with the keys {sorted(keys)}, got {c!r}'
            raise _Invalid(msg)
        if not (isinstance(c['name'], str) if named else c['name'] is None):
            msg = f'{field}.name must be {"a string" if named else "null (x_train was an array)"}, got {c["name"]!r}'
            raise _Invalid(msg)
        if not isinstance(c['levels'], list) or not all(
            isinstance(v, str | int | float | bool) for v in c['levels']
        ):
            msg = f'{field}.levels must be a list of strings or numbers, got {c["levels"]!r}'
            raise _Invalid(msg)
        if not isinstance(c['missing'], bool):
            msg = f'{field}.missing must be true or false, got {c["missing"]!r}'
            raise _Invalid(msg)
        fill = c['fill']
        finite = _is_number(fill) and math.isfinite(fill)
        if c['kind'] == 'numeric':
            ok = finite and not c['levels']
        elif c['kind'] == 'categorical':
            ok = finite and fill == int(fill) and 0 <= fill < len(c['levels'])
        else:
            msg = f"{field}.kind must be 'numeric' or 'categorical', got {c['kind']!r}"
            raise _Invalid(msg)
        if not ok:
            msg = (
                f'{field}.fill must be a finite number (numeric column, no levels) or the index of a level '
                f'(categorical column, {len(c["levels"])} levels), got {fill!r}'
            )
            raise _Invalid(msg)
    try:
        return encoding.Encoding.from_dict(d)
    except (KeyError, TypeError, ValueError) as e:
        msg = f'encoding is not valid: {e}'
        raise _Invalid(msg) from None


def _check_kept(kept: np.ndarray, enc: encoding.Encoding) -> np.ndarray:
    if kept.dtype != bool or kept.shape != (enc.num_model,):
        msg = (
            f'kept must be a boolean array of shape ({enc.num_model},), one per model column of the encoding, '
            f'got {kept.dtype} of shape {kept.shape}'
        )
        raise _Invalid(msg)
    return kept


def _check_splits(splits: np.ndarray, max_split: np.ndarray, p_kept: int) -> np.ndarray:
    if splits.dtype != np.float32 or splits.ndim != 2 or splits.shape[0] != p_kept or splits.shape[1] < 1:
        msg = (
            f'splits.splits must be float32 of shape ({p_kept}, max_K), one row per kept model column, '
            f'got {splits.dtype} of shape {splits.shape}'
        )
        raise _Invalid(msg)
    width = splits.shape[1]
    if max_split.dtype.kind not in 'iu' or max_split.shape != (p_kept,):
        msg = (
            f'splits.max_split must be integers of shape ({p_kept},), '
            f'got {max_split.dtype} of shape {max_split.shape}'
        )
        raise _Invalid(msg)
    bad = np.flatnonzero((max_split < 0) | (max_split > width))
    if bad.size:
        j = bad[0]
        msg = f'splits.max_split[{j}] is {max_split[j]}, outside 0..{width} (the width of splits.splits)'
        raise _Invalid(msg)
    used = np.arange(width) < max_split[:, None]
    with np.errstate(invalid='ignore'):
        bad = np.argwhere(used & ~np.isfinite(splits))
        if bad.size:
            j, s = bad[0]
            msg = f'splits.splits[{j}, {s}] is {splits[j, s]}: cut-point {s} of predictor {j} must be finite'
            raise _Invalid(msg)
        unsorted = np.argwhere(used[:, 1:] & (splits[:, 1:] < splits[:, :-1]))
        if unsorted.size:
            j, s = unsorted[0]
            msg = (
                f'splits.splits[{j}]: the cut-points of predictor {j} are not sorted '
                f'({splits[j, s]} before {splits[j, s + 1]})'
            )
            raise _Invalid(msg)
        # binning counts the cut-points as the entries below +inf
        padding = np.argwhere(~used & (splits != np.inf))
    if padding.size:
        j, s = padding[0]
        msg = (
            f'splits.splits[{j}, {s}] is {splits[j, s]}: predictor {j} has {max_split[j]} cut-points '
            '(splits.max_split), so the rest of its row must be +inf'
        )
        raise _Invalid(msg)
    return max_split


def _check_trace(arrays: dict, ndpost: int, ntree: int, max_split: np.ndarray) -> None:
    var, split, leaf = (arrays[f'trace.{f}'] for f in ('var_tree', 'split_tree', 'leaf_tree'))
    if leaf.dtype != np.float32 or leaf.ndim != 3 or leaf.shape[:2] != (ndpost, ntree):
        msg = (
            f'trace.leaf_tree must be float32 of shape (ndpost, ntree, H) = ({ndpost}, {ntree}, H), '
            f'got {leaf.dtype} of shape {leaf.shape}'
        )
        raise _Invalid(msg)
    heap_size = leaf.shape[2]
    try:
        grove.heap_depth(heap_size)
    except ValueError as e:
        msg = f'trace.leaf_tree: {e}'
        raise _Invalid(msg) from None
    for name, a in (('trace.var_tree', var), ('trace.split_tree', split)):
        if a.dtype.kind != 'u' or a.shape != (ndpost, ntree, heap_size // 2):
            msg = (
                f'{name} must be unsigned integers of shape (ndpost, ntree, H/2) = '
                f'({ndpost}, {ntree}, {heap_size // 2}), got {a.dtype} of shape {a.shape}'
            )
            raise _Invalid(msg)
    # node 0 of the heap is unused: only nodes 1 .. H/2 - 1 can be internal
    internal = split != 0
    internal[..., 0] = False
    p_kept = max_split.size
    bad = _first_true(internal & (var >= p_kept))
    if bad is not None:
        d, t, k = bad
        msg = (
            f'trace.var_tree refers to predictor {var[d, t, k]} (draw {d}, tree {t}, node {k}), '
            f'but the file has {p_kept} predictors'
        )
        raise _Invalid(msg)
    if p_kept:
        limit = max_split[np.minimum(var, p_kept - 1)]
        bad = _first_true(internal & (split > limit))
        if bad is not None:
            d, t, k = bad
            msg = (
                f'trace.split_tree refers to cut-point {split[d, t, k]} of predictor {var[d, t, k]} '
                f'(draw {d}, tree {t}, node {k}), but that predictor has {limit[d, t, k]} cut-points'
            )
            raise _Invalid(msg)
    bad = _first_true(~np.isfinite(leaf))
    if bad is not None:
        d, t, k = bad
        msg = (
            f'trace.leaf_tree has the value {leaf[d, t, k]} (draw {d}, tree {t}, node {k}); '
            'leaf values must be finite'
        )
        raise _Invalid(msg)


def _first_true(mask: np.ndarray) -> tuple[int, ...] | None:
    """Index of the first True of `mask`, or None."""
    if not mask.any():
        return None
    return tuple(int(i) for i in np.unravel_index(np.argmax(mask), mask.shape))


def _num_test(arrays: dict) -> int | None:
    for name in _TEST_ARRAYS:
        if name in arrays and arrays[name].ndim >= 1:
            return int(arrays[name].shape[-1])
    return None


def _sigma_shape(value: np.ndarray, ndpost: int, chains: int) -> str | None:
    """What is wrong with the shape of ``sigma`` (None if nothing): ``(nskip
    + ndpost,)`` for one chain, ``(nskip + ndpost / chains, chains)`` for more."""
    per_chain = ndpost // chains
    if chains == 1 and (value.ndim != 1 or value.shape[0] < ndpost):
        return f'(nskip + ndpost,) with ndpost = {ndpost}'
    if chains > 1 and (value.ndim != 2 or value.shape[1] != chains or value.shape[0] < per_chain):
        return f'(nskip + ndpost / chains, chains) with ndpost / chains = {per_chain}, chains = {chains}'
    return None


def _check_array(name: str, value: np.ndarray, rule, sizes: dict, chains: int) -> None:
    shape, kinds, bounds, _ = rule
    if value.dtype.kind not in kinds:
        what = 'floats' if kinds == 'f' else 'integers'
        msg = f'{name} must be {what}, got {value.dtype}'
        raise _Invalid(msg)
    if name == 'sigma':
        expected = _sigma_shape(value, sizes['ndpost'], chains)
        if expected is not None:
            msg = f'sigma has shape {value.shape}, expected {expected}'
            raise _Invalid(msg)
    elif shape is not None:
        expected = tuple(sizes[s] for s in shape)
        if value.shape != expected:
            named = ', '.join(f'{s} = {sizes[s]}' for s in shape)
            msg = f'{name} has shape {value.shape}, expected ({", ".join(shape)},) with {named}'
            raise _Invalid(msg)
    if value.dtype.kind == 'f' and name != 'xinfo':  # (xinfo is +inf padded)
        _check_values(name, value, lambda v: ~np.isfinite(v), 'it must be finite')
    if bounds is not None:
        low, high = bounds
        with np.errstate(invalid='ignore'):
            _check_values(name, value, lambda v: (v < low) | (v > high), f'outside [{low}, {high}]')


_CHUNK = 2**20


def _check_values(name: str, value: np.ndarray, is_bad, what: str) -> None:
    """Refuse `value` if ``is_bad`` holds anywhere, scanning chunks so that
    the temporaries stay small next to a large array (``yhat_train``)."""
    flat = value.reshape(-1)
    for start in range(0, flat.size, _CHUNK):
        bad = is_bad(flat[start : start + _CHUNK])
        if bad.any():
            i = start + int(np.argmax(bad))
            index = tuple(int(j) for j in np.unravel_index(i, value.shape))
            msg = f'{name} has the value {flat[i]} at {list(index)}; {what}'
            raise _Invalid(msg)


def _check_rm_const(rm_const: np.ndarray, p_enc: int) -> None:
    if rm_const.ndim != 1 or np.any(rm_const < 0) or np.any(rm_const >= p_enc) or np.any(np.diff(rm_const) <= 0):
        msg = f'rm_const must be increasing indices of the {p_enc} encoded columns, got {rm_const.tolist()}'
        raise _Invalid(msg)


def _check_frames(frames: dict, arrays: dict, enc: encoding.Encoding) -> None:
    labels = enc.encoded_names
    for name, kind in frames.items():
        if name not in arrays:
            msg = f'header.frames names {name!r}, which is not an array of the file'
            raise _Invalid(msg)
        if kind not in ('DataFrame', 'Series'):
            msg = f"header.frames[{name!r}] must be 'DataFrame' or 'Series', got {kind!r}"
            raise _Invalid(msg)
        if labels is None:
            msg = f'header.frames makes {name} a {kind}, but x_train was not a DataFrame (no column names)'
            raise _Invalid(msg)
        value = arrays[name]
        if value.ndim != (2 if kind == 'DataFrame' else 1) or value.shape[-1] != len(labels):
            msg = f'{name} of shape {value.shape} cannot be a {kind} with the {len(labels)} encoded column names'
            raise _Invalid(msg)


def _build(header: dict, arrays: dict, enc: encoding.Encoding) -> BARTFit:
    """The fit of a checked file."""
    fit = BARTFit()
    for name, value in header['scalars'].items():
        setattr(fit, name, value)
    labels = enc.encoded_names
    for name, value in arrays.items():
        if '.' in name or name == 'kept':
            continue
        frame = header['frames'].get(name)
        if frame == 'DataFrame':
            value = pd.DataFrame(value, columns=labels)
        elif frame == 'Series':
            value = pd.Series(value, index=labels)
        setattr(fit, name, value)
    fit._encoding = enc
    fit._kept = arrays['kept'].astype(bool)
    fit._splits = prepcovars.Splits(splits=arrays['splits.splits'], max_split=arrays['splits.max_split'])
    fit._trace = jax.device_put(
        grove.TreeHeaps(arrays['trace.var_tree'], arrays['trace.split_tree'], arrays['trace.leaf_tree'])
    )
    fit._mesh = None
    fit.run_info = None
    return fit
