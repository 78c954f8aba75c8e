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

import json
import os
import stat

import jax
import numpy as np
import pandas as pd

from bartz.api import _fitcheck, _fitfile, familyio
from bartz.api._fitfile import FORMAT_NAME, FORMAT_VERSION
from bartz.api.fit import BARTFit
from bartz.forest import grove
from bartz.prep import cutpoints as prepcovars
from bartz.prep import encoding

__all__ = ['FORMAT_NAME', 'FORMAT_VERSION', 'load', 'save']


def save(fit, path) -> None:
    """Save a fit to the file ``path`` (written as given; ``.npz`` is the
    conventional suffix), in the format described in `bartz.io`.

    ``fit`` is a `BARTFit` or the result of one of R's other model families
    (`bartz.SurvBARTFit`, `bartz.CriskBARTFit`, `bartz.Crisk2BARTFit`,
    `bartz.RecurBARTFit`, `bartz.MBARTFit`, `bartz.AFTFit`), stored whole:
    its own attributes and its binary fits (see `bartz.api.familyio`).

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
        If ``fit`` is not a fit, ``path`` is not a file name, or an
        attribute of the fit cannot be stored.
    IsADirectoryError
        If ``path`` is a directory.
    ValueError
        If ``path`` exists and is not a regular file (a FIFO, a device).
    OSError
        If the file cannot be written (the earlier file, if any, is kept).
    """
    if familyio.is_family(fit):
        familyio.save(fit, path)
        return
    if not isinstance(fit, BARTFit):
        msg = f'fit must be a BARTFit or the result of a bartz model function, got {type(fit).__name__}'
        raise TypeError(msg)
    _fitfile.write(fit, path)


def load(path):
    """Load a fit saved with `bartz.BARTFit.save` (or the ``save`` of a
    family result, e.g. `bartz.SurvBARTFit.save`).

    Only a regular file is opened, nothing is unpickled, and the contents
    are checked against the header before the fit is built (see
    `bartz.io` for the list of checks).

    Parameters
    ----------
    path
        File name (str or path-like).

    Returns
    -------
    BARTFit or a family result
        The fit, of the class that was saved, which predicts exactly as the
        saved one. ``run_info`` is None, and prediction runs on the default
        device.

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
    path = _fitfile.check_path(path)
    where = f'bartz.load({path!r})'
    try:
        with _open_regular(path, where) as file, np.load(file, allow_pickle=False) as archive:
            if not hasattr(archive, 'files') or 'header' not in archive.files:
                msg = f'{where}: not a bartz fit file (no header)'
                raise _NotOurs(msg)
            header = _read_json(archive['header'], where)
            if isinstance(header, dict) and header.get('format') == familyio.FORMAT_NAME:
                return _load_family(header, archive, where)
            header = _check_header(header, where)
            arrays = {a: archive[a] for a in header['arrays'] if a in archive.files}
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
        return _checked_fit(header, arrays)
    except _fitcheck.Invalid as e:
        msg = f'{where}: {e}'
        raise ValueError(msg) from None


def _checked_fit(header: dict, arrays: dict) -> BARTFit:
    """The fit of a checked header and the entries read for it, checked
    (`bartz.io`'s list); `_fitcheck.Invalid` says what is wrong."""
    missing = [a for a in header['arrays'] if a not in arrays]
    if missing:
        msg = f'the file is truncated or corrupt: it lacks the arrays {missing}'
        raise _fitcheck.Invalid(msg)
    arrays = {a: arrays[a] for a in header['arrays']}
    enc = _fitcheck.check_contents(header, arrays, BARTFit.__slots__)
    return _build(header, arrays, enc)


class _NotOurs(Exception):  # noqa: N818
    pass


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
    return f'{where}: the path is {_fitfile.file_kind(mode)}, not a regular file; a fit is read only from a regular file'


def _load_family(header: dict, archive, where: str):
    """A family result (see `bartz.api.familyio`), its inner fits checked as fit files."""
    listed = header.get('arrays')
    if not isinstance(listed, list) or not all(isinstance(a, str) for a in listed):
        raise _NotOurs(f'{where}: the file is truncated or corrupt: its header lacks the list of arrays')
    missing = [a for a in listed if a not in archive.files]
    if missing:
        raise _NotOurs(f'{where}: the file is truncated or corrupt: it lacks the arrays {missing}')
    arrays = {a: archive[a] for a in listed}

    def read_fit(blob, entries):
        try:
            return _checked_fit(_check_header(_read_json(blob, where), where), entries)
        except _fitcheck.Invalid as e:
            raise familyio.Invalid(f'an inner fit: {e}') from None

    try:
        return familyio.build(header, arrays, read_fit)
    except familyio.Invalid as e:
        raise _NotOurs(f'{where}: {e}') from None


def _read_json(blob, where):
    if blob.dtype != np.uint8 or blob.ndim != 1:
        msg = f'{where}: not a bartz fit file (bad header)'
        raise _NotOurs(msg)
    try:
        return json.loads(blob.tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        msg = f'{where}: not a bartz fit file (header is not JSON: {e})'
        raise _NotOurs(msg) from None


def _check_header(header, where) -> dict:
    if not isinstance(header, dict) or header.get('format') != FORMAT_NAME:
        msg = f'{where}: not a bartz fit file (format {header.get("format") if isinstance(header, dict) else None!r})'
        raise _NotOurs(msg)
    version = header.get('format_version')
    if not _fitcheck.is_int(version) or version < 1:
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


def _build(header: dict, arrays: dict, enc: encoding.Encoding) -> BARTFit:
    """The fit of a checked file."""
    fit = BARTFit()
    fit.moves = None  # files written before fits recorded their tree moves
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
