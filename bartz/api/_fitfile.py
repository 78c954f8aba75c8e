"""Writing a fit to a file, in the format described in `bartz.io`.

`write` stores the declared attributes of a fit (`bartz.api.fit.BARTFit`)
and is what `BARTFit.save` and `bartz.io.save` call; it knows the fit only
by its attributes, so that the result object can save itself without
importing `bartz.io`, which imports it to build a loaded fit.
"""

import contextlib
import errno
import json
import os
import stat

import numpy as np
import pandas as pd

from bartz._version import __version__

__all__ = ['FORMAT_NAME', 'FORMAT_VERSION', 'SPECIAL', 'check_path', 'entries', 'file_kind', 'write', 'write_archive']

FORMAT_NAME = 'bartz.BARTFit'
FORMAT_VERSION = 1

# attributes stored in their own way, or not at all
SPECIAL = ('_encoding', '_trace', '_splits', '_kept', '_mesh', 'run_info')


def write(fit, path) -> None:
    """Save `fit` to the file `path`, atomically (see `bartz.io`).

    Parameters
    ----------
    fit : BARTFit
        The fit; every name of ``type(fit).__slots__`` is stored (or
        recorded as unset).
    path
        File name (str or path-like).
    """
    path = check_path(path)
    header, arrays = entries(fit)
    write_archive(path, header, arrays)


def write_archive(path: str, header: dict, arrays: dict) -> None:
    """Write ``header`` (as JSON bytes) and ``arrays`` to one ``.npz`` file, atomically."""
    blob = np.frombuffer(json.dumps(header).encode(), np.uint8)
    _write_atomically(path, lambda f: np.savez(f, header=blob, **arrays))


def entries(fit) -> tuple[dict, dict]:
    """The header and the arrays that store `fit` (see `bartz.io`)."""
    arrays = {
        'trace.var_tree': np.asarray(fit._trace.var_tree),
        'trace.split_tree': np.asarray(fit._trace.split_tree),
        'trace.leaf_tree': np.asarray(fit._trace.leaf_tree),
        'splits.splits': np.asarray(fit._splits.splits),
        'splits.max_split': np.asarray(fit._splits.max_split),
        'kept': np.asarray(fit._kept),
    }
    scalars, frames, unset = {}, {}, []
    for name in type(fit).__slots__:
        if name in SPECIAL:
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
    header = {
        'format': FORMAT_NAME,
        'format_version': FORMAT_VERSION,
        'bartz_version': __version__,
        'scalars': scalars,
        'arrays': sorted(arrays),
        'frames': frames,
        'unset': unset,
        'missing': list(fit.run_info.missing) if fit.run_info is not None else [],
        'encoding': fit._encoding.to_dict(),
    }
    return header, arrays


def check_path(path):
    """`path` as a str, or a `TypeError` or `IsADirectoryError` that says why it is no file name."""
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


def file_kind(mode: int) -> str:
    """What the file of stat mode `mode` is, in words ('a directory', ...)."""
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
                f'cannot save to {path!r}: it is {file_kind(st.st_mode)}, and a save replaces the file at '
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
