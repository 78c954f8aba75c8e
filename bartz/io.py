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
  - ``encoding``: the column encoding, `bartz.encoding.Encoding.to_dict`.

- one array per array attribute (``yhat_train``, ``sigma``, ``varcount``,
  ...) and what prediction needs: the saved forests ``trace.var_tree``,
  ``trace.split_tree``, ``trace.leaf_tree``, the cut-points
  ``splits.splits``, ``splits.max_split`` and the kept model columns
  ``kept``.

Everything is numbers, strings and JSON: loading reads with
``allow_pickle=False`` and never executes code from the file. A loaded fit
predicts exactly as the original, in another process and without the
training data; what it lacks is ``run_info`` (None) and the device mesh
(prediction runs on the default device).
"""

import json
import os

import jax
import numpy as np
import pandas as pd

from bartz import encoding, grove, prepcovars
from bartz.fit import BARTFit

__all__ = ['FORMAT_NAME', 'FORMAT_VERSION', 'load', 'save']

FORMAT_NAME = 'bartz.BARTFit'
FORMAT_VERSION = 1

# attributes stored in their own way, or not at all
_SPECIAL = ('_encoding', '_trace', '_splits', '_kept', '_mesh', 'run_info')


def save(fit: BARTFit, path) -> None:
    """Save a fit to the file ``path`` (written as given; ``.npz`` is the
    conventional suffix), in the format described in `bartz.io`.

    Parameters
    ----------
    fit
        The fit to save.
    path
        File name (str or path-like).
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
        'encoding': fit._encoding.to_dict(),
    }
    blob = np.frombuffer(json.dumps(header).encode(), np.uint8)
    with open(path, 'wb') as f:
        np.savez(f, header=blob, **arrays)


def load(path) -> BARTFit:
    """Load a fit saved with `bartz.BARTFit.save`.

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
    ValueError
        If the file is not a bartz fit, is truncated or corrupt, or was
        written by a newer version of bartz (a newer format version); the
        message names the file.
    """
    path = _check_path(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            if not hasattr(archive, 'files') or 'header' not in archive.files:
                msg = f'{path!r} is not a bartz fit file (no header)'
                raise _NotOurs(msg)
            header = _read_header(archive['header'], path)
            missing = [a for a in header['arrays'] if a not in archive.files]
            if missing:
                msg = f'{path!r} is truncated or corrupt: it lacks the arrays {missing}'
                raise _NotOurs(msg)
            arrays = {a: archive[a] for a in header['arrays']}
    except _NotOurs as e:
        raise ValueError(str(e)) from None
    except (OSError, ValueError, EOFError, KeyError, TypeError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        # (NumPy's reason for a file that is not an archive suggests loading
        # it with pickle: not advice to pass on for a fit file)
        reason = 'not a NumPy archive' if 'allow_pickle' in str(e) else str(e)
        msg = f'{path!r} is not a readable bartz fit file (truncated, corrupt or another format): {reason}'
        raise ValueError(msg) from e
    except Exception as e:  # zipfile.BadZipFile and relatives
        msg = f'{path!r} is not a readable bartz fit file (truncated, corrupt or another format): {e}'
        raise ValueError(msg) from e
    try:
        return _build(header, arrays)
    except (KeyError, TypeError, ValueError) as e:
        msg = f'{path!r} is not a valid bartz fit file: {e}'
        raise ValueError(msg) from e


class _NotOurs(Exception):  # noqa: N818
    pass


def _check_path(path):
    try:
        path = os.fspath(path)
    except TypeError:
        msg = f'path must be a file name (str or path-like), got {path!r}'
        raise TypeError(msg) from None
    if os.path.isdir(path):
        msg = f'path must be a file name, got the directory {path!r} (for example {os.path.join(path, "fit.npz")!r})'
        raise IsADirectoryError(msg)
    return path


def _scalar(value, name):
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, np.generic) and value.dtype.kind in 'biuf':
        return value.item()
    msg = f'attribute {name} of type {type(value).__name__} cannot be saved'
    raise TypeError(msg)


def _read_header(blob, path) -> dict:
    if blob.dtype != np.uint8 or blob.ndim != 1:
        msg = f'{path!r} is not a bartz fit file (bad header)'
        raise _NotOurs(msg)
    try:
        header = json.loads(blob.tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        msg = f'{path!r} is not a bartz fit file (header is not JSON: {e})'
        raise _NotOurs(msg) from None
    if not isinstance(header, dict) or header.get('format') != FORMAT_NAME:
        msg = f'{path!r} is not a bartz fit file (format {header.get("format") if isinstance(header, dict) else None!r})'
        raise _NotOurs(msg)
    version = header.get('format_version')
    if not isinstance(version, int) or version < 1:
        msg = f'{path!r} has an invalid format version {version!r}'
        raise _NotOurs(msg)
    if version > FORMAT_VERSION:
        msg = (
            f'{path!r} was written by a newer bartz ({header.get("bartz_version")}, format version {version}); '
            f'this bartz reads format versions up to {FORMAT_VERSION}: upgrade bartz'
        )
        raise _NotOurs(msg)
    for key, kind in (('scalars', dict), ('arrays', list), ('frames', dict), ('unset', list), ('encoding', dict)):
        if not isinstance(header.get(key), kind):
            msg = f'{path!r} is truncated or corrupt: its header lacks {key!r}'
            raise _NotOurs(msg)
    return header


def _build(header: dict, arrays: dict) -> BARTFit:
    enc = encoding.Encoding.from_dict(header['encoding'])
    fit = BARTFit()
    known = set(BARTFit.__slots__)
    for name, value in header['scalars'].items():
        if name not in known or name in _SPECIAL:
            msg = f'unknown attribute {name!r}'
            raise ValueError(msg)
        setattr(fit, name, value)
    labels = enc.encoded_names
    for name, value in arrays.items():
        if '.' in name or name == 'kept':
            continue
        if name not in known or name in _SPECIAL:
            msg = f'unknown attribute {name!r}'
            raise ValueError(msg)
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
    if fit._kept.shape != (enc.num_model,) or fit._splits.splits.shape[0] != int(fit._kept.sum()):
        msg = 'the encoding, the kept columns and the cut-points do not match'
        raise ValueError(msg)
    return fit
