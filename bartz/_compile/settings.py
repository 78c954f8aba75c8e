"""What the compilation cache (`bartz.compile_cache`) and the stored programs
(`bartz._compile.programs`) share: the switch values, the cache directory and
the rule of which directories are trusted, and the limits on the compiled
programs kept in memory. `bartz.compile_cache` documents them; it imports
`bartz._compile.programs`, which imports this module, so that the
dependency goes one way.
"""

import os
import stat
import warnings
from pathlib import Path
from typing import NamedTuple

import jax

ENV_DIR = 'BARTZ_CACHE_DIR'
ENV_SWITCH = 'BARTZ_COMPILATION_CACHE'
OFF_VALUES = frozenset({'0', 'false', 'off', 'no'})
ON_VALUES = frozenset({'', '1', 'true', 'on', 'yes'})

# The folder of bartz's whole programs in the cache directory (`bartz._compile.programs`).
PROGRAMS_SUBDIR = 'bartz-programs'

# Directories already warned about: warn once for each.
warned_dirs: set[str] = set()


class MemoryMapsWarning(UserWarning):
    """The process came near Linux's limit of memory mappings, and bartz
    cleared JAX's compiled programs from memory (see `bartz.compile_cache`)."""


class Limits(NamedTuple):
    """How much compiled code bartz lets a process keep (see `set_limits`)."""

    max_programs: int | None
    """bartz's compiled programs kept in memory, least recently used dropped
    beyond; None: no limit."""

    maps_fraction: float | None
    """The share of ``vm.max_map_count`` above which, at a fit or a
    prediction, bartz clears JAX's in-memory caches; None: never."""


DEFAULT_LIMITS = Limits(max_programs=32, maps_fraction=0.5)
_limits = DEFAULT_LIMITS
def limits() -> Limits:
    """Return the limits on the compiled programs kept in memory.

    Returns
    -------
    The current `Limits`; by default ``Limits(max_programs=32,
    maps_fraction=0.5)``.
    """
    return _limits


def replace_limits(new: Limits) -> Limits:
    """Make `new` the limits (checked by `bartz.compile_cache.set_limits`); return the old ones."""
    global _limits  # noqa: PLW0603
    old, _limits = _limits, new
    return old


def cache_dir() -> str | None:
    """Return the directory of JAX's persistent compilation cache.

    Returns
    -------
    The directory in use, whoever set it up, or `None` if the cache is off.
    """
    path = jax.config.jax_compilation_cache_dir
    if not path or not jax.config.jax_enable_compilation_cache:
        return None
    return path


def make_private_dirs(path: str | os.PathLike) -> None:
    """Create `path` and the missing directories above it, each readable
    and writable by the user alone (``Path.mkdir(parents=True)`` would give
    those above the default mode, group-writable under a umask of 002,
    which `untrusted` then refuses)."""
    path = Path(os.path.abspath(path))
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:  # made meanwhile by another process
            pass


def untrusted(path: str | os.PathLike) -> str | None:
    """Why others could change what is in the directory `path`, or None
    if only the user (and root) can: the rule in the module docstring.

    Parameters
    ----------
    path
        A directory. If it does not exist yet (bartz creates it as it first
        writes there, as ``0o700``), only the directories above it are
        checked.

    Returns
    -------
    None where `path` is trusted or permissions cannot be told (Windows),
    else a sentence that names the directory at fault.
    """
    if not hasattr(os, 'getuid'):  # Windows: no POSIX owners and mode bits
        return None
    uid = os.getuid()
    real = Path(os.path.realpath(path))
    advice = 'it must be owned by you and writable by you alone, as the cache runs the code it holds'
    try:
        if real.exists():
            info = real.stat()
            if not stat.S_ISDIR(info.st_mode):
                return f'{os.fspath(real)!r} is not a directory'
            if info.st_uid != uid:
                return f'{os.fspath(real)!r} belongs to another user (uid {info.st_uid}, yours is {uid}): {advice}'
            if info.st_mode & 0o022:
                return (
                    f'{os.fspath(real)!r} can be written by {_writers(info.st_mode)} '
                    f'(mode {oct(info.st_mode & 0o7777)}): {advice} (chmod go-w {os.fspath(real)!r})'
                )
        for parent in real.parents:
            if not parent.exists():
                continue
            info = parent.stat()
            if info.st_uid not in (uid, 0):
                return (
                    f'{os.fspath(parent)!r}, above it, belongs to another user (uid {info.st_uid}), '
                    f'who could replace it: {advice}'
                )
            if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
                return (
                    f'{os.fspath(parent)!r}, above it, can be written by {_writers(info.st_mode)} '
                    f'(mode {oct(info.st_mode & 0o7777)}, no sticky bit), who could replace it: {advice}'
                )
    except OSError as exc:
        return f'{type(exc).__name__}: {exc}'
    return None


def _writers(mode: int) -> str:
    return ' and '.join(who for who, bit in (('its group', 0o020), ('all users', 0o002)) if mode & bit)


def warn_once(path: str, problem: str) -> None:
    if path in warned_dirs:
        return
    warned_dirs.add(path)
    warnings.warn(
        f'bartz cannot use {path!r} for its compilation cache ({problem}), so '
        f'compiled programs will not be kept there for the next process. '
        f'To move the cache, set the environment variable {ENV_DIR} or call '
        f'bartz.compile_cache.enable(path); to switch it off and silence this '
        f'warning, set {ENV_SWITCH}=0.',
        stacklevel=3,
    )
