"""Keep compiled programs on disk, so that a new process does not compile them again.

A first fit compiles its programs with XLA, which takes seconds; a later fit
with the same shapes in the same process reuses them from memory. To let a
new process (a restarted notebook kernel, the next script) skip the
compilation too, ``import bartz`` switches on JAX's persistent compilation
cache, which keeps every compiled program in a directory and loads it from
there when the same program is asked for again.

Where the cache lives
    By default in ``bartz/jax-<jax version>`` under the user's cache
    directory:

    - Linux and other Unix: ``$XDG_CACHE_HOME/bartz/jax-<version>``, or
      ``~/.cache/bartz/jax-<version>`` if ``XDG_CACHE_HOME`` is not set;
    - macOS: ``~/Library/Caches/bartz/jax-<version>``;
    - Windows: ``%LOCALAPPDATA%\\bartz\\jax-<version>``.

    `cache_dir` tells the directory in use.

How to move it
    Set the environment variable ``BARTZ_CACHE_DIR`` to a directory before
    importing bartz (it is used as is), or call ``enable(path)`` at any time.

How to switch it off
    Set the environment variable ``BARTZ_COMPILATION_CACHE=0`` (or ``false``,
    ``off``, ``no``) before importing bartz, or call `disable` at any time.

A cache configured by the user is respected
    If JAX's cache directory is already set when bartz is imported, with
    ``jax.config.update('jax_compilation_cache_dir', ...)`` or the
    environment variable ``JAX_COMPILATION_CACHE_DIR``, or JAX's cache is
    switched off with ``jax_enable_compilation_cache``, bartz changes
    nothing. Only an explicit call to `enable` or `disable` overrides it.
    (In a directory configured so, bartz keeps its whole programs, below,
    in a folder ``bartz-programs``.)

Which programs are kept
    JAX by default keeps only programs that took at least one second to
    compile. Most of bartz's programs compile faster than that, yet loading
    one from the cache is several times faster than compiling it, even for
    the smallest ones, so when bartz sets up the cache it also sets
    ``jax_persistent_cache_min_compile_time_secs`` to 0 and
    ``jax_persistent_cache_min_entry_size_bytes`` to -1 (no minimum size):
    every program is kept. It does so only where these settings still have
    JAX's defaults (1 s and 0) and no environment variable sets them.

The MCMC loop and the predictions are kept whole
    JAX finds a program in its cache by the hash of its lowered text, so a
    new process must still trace and lower the program before it can load
    it: for the MCMC loop that takes several times longer than the
    loading. bartz therefore also keeps its main compiled programs
    themselves (the MCMC loop, the predictions at ``x_test`` and those of
    ``fit.predict``, on one CPU or GPU device), in the folder ``bartz-programs``
    inside the cache directory, under a key made of the source of bartz,
    the versions of JAX, jaxlib and Python, the machine (devices, CPU) and
    the shapes and settings of the fit; a new process with the same key
    loads them without tracing anything (see ``bartz/_programs.py``). At
    n = 1,000 a first fit in a new process then takes about 0.4 s more than
    a fit in a warm process, against about 2.5 s with JAX's cache alone
    (benchmarks/README.md). These programs are compiled under a key of
    their own and not written to JAX's entries (an executable that JAX
    loaded from its cache cannot be stored again in jaxlib 0.10.2). Their
    files follow the cache: on, off, moved and safe to delete with it. A
    new version of bartz, JAX or Python stores its own; the old files are
    never read again and can go.

Cost on disk
    Entries are compressed: from a few KB for a small program to about
    400 KB for an MCMC loop, which is most of the 420 KB of a small fit. Each
    new combination of shapes and settings adds entries, and nothing is
    evicted: JAX's size limit, ``jax_compilation_cache_max_size``, needs the
    optional ``filelock`` package, and does not count bartz's whole
    programs. JAX's settings are global, so the cache also keeps programs
    of other JAX code run in the same process.

It is safe to delete
    The directory holds nothing but the cache; delete it at any time, and it
    fills again as programs are compiled. Since entries of other versions of
    JAX are never read, the directories of old versions can go.

It never breaks a fit
    If the directory cannot be created or written, bartz warns once, saying
    which directory and why, and leaves the cache as it was (off, at
    import). If writing or reading an entry fails later (a full disk), JAX
    turns the error into a warning, one for each program, and compiles
    without the cache (unless ``jax_raise_persistent_cache_errors`` is set).
    Likewise a whole program that cannot be written warns once for its
    folder, and one that cannot be read is deleted and compiled again.

Security
    As JAX's documentation warns, the cache is trusted: whoever can write to
    it can make your process run their code (bartz's whole programs are
    Python pickles of compiled code). Do not point it at a directory that others
    can write to.
"""

import os
import sys
import tempfile
import warnings
from pathlib import Path

import jax

__all__ = ['cache_dir', 'disable', 'enable']

_ENV_DIR = 'BARTZ_CACHE_DIR'
_ENV_SWITCH = 'BARTZ_COMPILATION_CACHE'
_OFF_VALUES = frozenset({'0', 'false', 'off', 'no'})
_ON_VALUES = frozenset({'', '1', 'true', 'on', 'yes'})

# Thresholds bartz sets, as {JAX option: (JAX's default in jax 0.10.2, bartz's value)}.
# Keep every program: loading one from the cache is faster than compiling it
# even for the smallest. A minimum size of -1 also stops JAX from raising it
# for some filesystems (`default_min_cache_entry_size`, 0 in jax 0.10.2).
_THRESHOLDS = {
    'jax_persistent_cache_min_compile_time_secs': (1.0, 0.0),
    'jax_persistent_cache_min_entry_size_bytes': (0, -1),
}

# The thresholds that bartz changed, so that `disable` can put them back.
_changed_thresholds: dict[str, object] = {}

# Directories already warned about: warn once for each.
_warned_dirs: set[str] = set()


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


def _default_dir() -> str:
    """Return the directory that bartz uses for the cache unless told otherwise.

    Returns
    -------
    ``BARTZ_CACHE_DIR`` if set, else ``bartz/jax-<jax version>`` under the
    user's cache directory.
    """
    env = os.environ.get(_ENV_DIR, '').strip()
    if env:
        return os.path.expanduser(env)
    return os.fspath(_user_cache_root() / 'bartz' / f'jax-{jax.__version__}')


def _user_cache_root() -> Path:
    """The platform's per-user cache directory, as platformdirs finds it."""
    if sys.platform == 'win32':
        local = os.environ.get('LOCALAPPDATA')
        return Path(local) if local else Path.home() / 'AppData' / 'Local'
    if sys.platform == 'darwin':
        return Path.home() / 'Library' / 'Caches'
    xdg = os.environ.get('XDG_CACHE_HOME', '')
    # The XDG spec says to ignore relative paths.
    if os.path.isabs(xdg):
        return Path(xdg)
    return Path.home() / '.cache'


def enable(path: str | os.PathLike | None = None) -> str | None:
    """Keep compiled programs in a persistent cache on disk.

    Unlike the set-up at import, this replaces a cache directory that the
    user configured in JAX.

    Parameters
    ----------
    path
        The directory of the cache, created if missing. If `None`, the
        default: ``BARTZ_CACHE_DIR`` if set, else ``bartz/jax-<jax version>``
        under the user's cache directory.

    Returns
    -------
    The directory now in use, or the one in use before (or `None`) if `path`
    cannot be used: then a warning says why, once for each directory.

    Examples
    --------
    >>> import bartz
    >>> path = bartz.compile_cache.enable()  # the default directory
    """
    if path is None:
        try:
            path = _default_dir()
        except RuntimeError as exc:  # Path.home() without a home directory
            _warn_once('<user cache directory>', f'the home directory is unknown ({exc})')
            return cache_dir()
    if not isinstance(path, str | os.PathLike):
        msg = f'path must be a directory path (str or os.PathLike) or None, got {path!r}'
        raise TypeError(msg)
    path = os.fspath(path)
    problem = _check_writable(path)
    if problem is not None:
        _warn_once(path, problem)
        return cache_dir()
    _set_dir(path)
    _lower_thresholds()
    return path


def disable() -> None:
    """Stop keeping compiled programs on disk, whoever set up the cache.

    Programs compiled before stay in memory, and the files on disk stay
    where they are. Thresholds that bartz lowered go back to JAX's defaults.

    Examples
    --------
    >>> import bartz
    >>> bartz.compile_cache.disable()
    >>> bartz.compile_cache.cache_dir() is None
    True
    """
    _set_dir(None)
    for name, value in _changed_thresholds.items():
        # Put back only what no one changed after bartz.
        if getattr(jax.config, name) == value:
            jax.config.update(name, _THRESHOLDS[name][0])
    _changed_thresholds.clear()


def _setup_default() -> None:
    """Set up the cache at ``import bartz``, as the module docstring says.

    Never raises, except for a warning that the user turned into an error.
    """
    if _switched_off():
        return
    if cache_dir() is not None or not jax.config.jax_enable_compilation_cache:
        return  # the user's configuration
    try:
        enable()
    except Warning:
        raise  # the user turned warnings into errors
    except Exception as exc:  # noqa: BLE001, a cache must never break `import bartz`
        _warn_once('<default>', f'setting it up failed: {type(exc).__name__}: {exc}')


def _switched_off() -> bool:
    """Whether ``BARTZ_COMPILATION_CACHE`` switches the cache off; warn if not understood."""
    value = os.environ.get(_ENV_SWITCH, '')
    switch = value.strip().lower()
    if switch in _OFF_VALUES:
        return True
    if switch not in _ON_VALUES:
        warnings.warn(
            f'{_ENV_SWITCH}={value!r} is not understood, so the compilation '
            f'cache stays on; set it to 0, false, off or no to switch it off',
            stacklevel=4,
        )
    return False


def _check_writable(path: str) -> str | None:
    """Create `path` and write a file in it; return why it failed, or `None`.

    Checked once: a failure later is caught by JAX (jax 0.10.2,
    `jax._src.compiler._cache_write` and `_cache_read`), which warns and goes
    on, so it needs no guard here.
    """
    if '://' in path:
        return None  # a remote filesystem (JAX uses etils.epath): let JAX try
    try:
        # 0o700: the cache is trusted, see the module docstring.
        Path(path).mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix='.bartz-write-test-')
        try:
            os.write(fd, b'bartz')
        finally:
            os.close(fd)
            os.remove(probe)
    except OSError as exc:
        return f'{type(exc).__name__}: {exc}'
    return None


def _warn_once(path: str, problem: str) -> None:
    if path in _warned_dirs:
        return
    _warned_dirs.add(path)
    warnings.warn(
        f'bartz cannot use {path!r} for its compilation cache ({problem}), so '
        f'compiled programs will not be kept there for the next process. '
        f'To move the cache, set the environment variable {_ENV_DIR} or call '
        f'bartz.compile_cache.enable(path); to switch it off and silence this '
        f'warning, set {_ENV_SWITCH}=0.',
        stacklevel=3,
    )


def _set_dir(path: str | None) -> None:
    jax.config.update('jax_compilation_cache_dir', path)
    # JAX opens its cache at the first compilation after the directory is set
    # and keeps using it: make it open the cache again at the new place.
    # (In jax 0.10.2 a cache that was never opened needs no reset, but one
    # opened elsewhere does, also to switch it off.)
    try:
        from jax.experimental.compilation_cache import compilation_cache  # noqa: PLC0415

        compilation_cache.reset_cache()
    except (ImportError, AttributeError):  # pragma: no cover, a future JAX
        pass


def _lower_thresholds() -> None:
    """Keep small programs too, where the user left JAX's defaults."""
    for name, (jax_default, value) in _THRESHOLDS.items():
        if name.upper() in os.environ:
            continue
        current = getattr(jax.config, name)
        if current == jax_default:
            jax.config.update(name, value)
            _changed_thresholds[name] = value
