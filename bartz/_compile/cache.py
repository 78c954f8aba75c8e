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
    loads them without tracing anything (see ``bartz/_compile/programs.py``),
    so that a first fit in a new process costs little more than one in a
    warm process. These programs are compiled under a key of
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

What the cache trusts
    As JAX's documentation warns, the cache is trusted: whoever can write to
    it can make your process run their code (JAX's entries are compiled
    machine code, bartz's whole programs Python pickles of it). So, on
    Linux and macOS, bartz uses a directory only if no one but you (and
    root) can change what is in it:

    - the directory, and its folder ``bartz-programs`` if it exists, must
      be owned by you (``os.getuid()``) and not writable by group or
      others;
    - every directory above it must be owned by you or by root, and either
      not writable by group or others, or have the sticky bit (as
      ``/tmp``: there only an entry's owner can rename or delete it, so no
      one can put another directory in place of yours).

    This is the rule of OpenSSH's ``StrictModes`` for ``~/.ssh``. A
    directory that breaks it is refused with a warning that names it and
    says why, as one that cannot be written: at import and by `enable`
    the cache stays as it was (off, at import). Where the user configured
    JAX's cache (then bartz changes none of JAX's settings), bartz still
    neither loads nor writes whole programs in a ``bartz-programs``
    folder that breaks the rule. The directories that bartz creates, it
    creates as ``0o700`` (only you). On Windows, whose permissions are not
    these bits, nothing is checked.

Compiled programs in memory
    Every compiled program also takes memory in the process, and on Linux
    memory mappings (a few for each of its kernels: about 300 for the
    MCMC loop), of which a process may have at most ``vm.max_map_count``
    (65,530 by default); at that limit XLA's compiler aborts the process
    (``LLVM ERROR: Unable to allocate section memory!``). A session that
    fits many models of different settings would reach it, so bartz
    bounds what it keeps (`limits`, `set_limits`):

    - it keeps at most ``max_programs`` of its compiled programs (the MCMC
      loops and the predictions, 32 by default) in memory and drops the
      least recently used beyond that, with what JAX keeps of them (the
      caches of their jitted function); a dropped program is loaded from
      the cache again, or compiled again, when a fit needs it;
    - as a last resort, as a fit or a prediction starts, it counts the
      process's memory mappings (Linux only: the lines of
      ``/proc/self/maps``; far below the threshold, only every few calls),
      and above ``maps_fraction`` (by default 0.5) of ``vm.max_map_count`` it
      clears all of JAX's in-memory caches (``jax.clear_caches()``, also
      the programs of other JAX code in the process) and its own, and
      warns once with a `MemoryMapsWarning`. The next fits compile their
      programs again or load them from the cache.

    `programs_in_memory` tells how many programs bartz holds.
"""

import os
import sys
import tempfile
import warnings
from pathlib import Path

import jax

from bartz._compile import memory, settings
from bartz._compile.settings import Limits, MemoryMapsWarning, cache_dir, limits  # noqa: F401, public here

__all__ = [
    'Limits',
    'MemoryMapsWarning',
    'cache_dir',
    'disable',
    'enable',
    'limits',
    'programs_in_memory',
    'set_limits',
]

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

_UNCHANGED = object()


def set_limits(*, max_programs=_UNCHANGED, maps_fraction=_UNCHANGED) -> Limits:
    """Bound the compiled programs that a process keeps in memory.

    A long session that fits many models of different settings compiles a
    program for each; see "Compiled programs in memory" in
    `bartz.compile_cache`. An argument left out keeps its value.

    Parameters
    ----------
    max_programs : int or None
        The most compiled programs of bartz (MCMC loops, predictions) kept
        in memory, at least 1; beyond, the least recently used are dropped
        (at once if more are held now). A fit uses one to three. None: no
        limit.
    maps_fraction : float or None
        In (0, 1]: when a fit or a prediction starts with more memory
        mappings than this share of Linux's ``vm.max_map_count``, bartz
        clears JAX's in-memory caches (``jax.clear_caches()``) and its own,
        with a `MemoryMapsWarning` the first time. None: never (also where
        the count is unknown: not Linux).

    Returns
    -------
    The limits before the call, so that ``set_limits(**old._asdict())``
    puts them back.

    Raises
    ------
    TypeError, ValueError
        If an argument is not of the kind described above.

    Examples
    --------
    >>> from bartz import compile_cache
    >>> old = compile_cache.set_limits(max_programs=8)
    >>> compile_cache.limits().max_programs
    8
    >>> _ = compile_cache.set_limits(**old._asdict())
    """
    new = limits()
    if max_programs is not _UNCHANGED:
        if max_programs is not None:
            msg = f'max_programs must be a positive integer or None, got {max_programs!r}'
            if isinstance(max_programs, bool) or not isinstance(max_programs, int):
                raise TypeError(msg)
            if max_programs < 1:
                raise ValueError(msg)
        new = new._replace(max_programs=max_programs)
    if maps_fraction is not _UNCHANGED:
        if maps_fraction is not None:
            if isinstance(maps_fraction, bool) or not isinstance(maps_fraction, int | float):
                msg = f'maps_fraction must be a number in (0, 1] or None, got {maps_fraction!r}'
                raise TypeError(msg)
            if not 0 < maps_fraction <= 1:
                msg = f'maps_fraction must be in (0, 1] or None, got {maps_fraction!r}'
                raise ValueError(msg)
            maps_fraction = float(maps_fraction)
        new = new._replace(maps_fraction=maps_fraction)
    old = settings.replace_limits(new)
    memory.apply_limits()
    return old


def programs_in_memory() -> int:
    """Return how many compiled programs bartz holds in memory.

    Returns
    -------
    The number of MCMC loops and predictions that bartz keeps compiled in
    this process, at most ``limits().max_programs``. (With the test suite's
    switch ``bartz._compile.programs.enabled = False``, JAX's jit holds them
    instead, and this is 0.)
    """
    return memory.programs_in_memory()


def default_dir(platform: str | None = None) -> str:
    """Return the directory that bartz uses for the cache unless told otherwise.

    What `enable` uses without a path (not in ``__all__``).

    Parameters
    ----------
    platform
        The operating system, as `sys.platform` names it; None: this one.

    Returns
    -------
    ``BARTZ_CACHE_DIR`` if set, else ``bartz/jax-<jax version>`` under the
    user's cache directory of `platform`.
    """
    env = os.environ.get(settings.ENV_DIR, '').strip()
    if env:
        return os.path.expanduser(env)
    root = _user_cache_root(sys.platform if platform is None else platform)
    return os.fspath(root / 'bartz' / f'jax-{jax.__version__}')


def _user_cache_root(platform: str) -> Path:
    """The per-user cache directory of `platform`, as platformdirs finds it."""
    if platform == 'win32':
        local = os.environ.get('LOCALAPPDATA')
        return Path(local) if local else Path.home() / 'AppData' / 'Local'
    if platform == 'darwin':
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
            path = default_dir()
        except RuntimeError as exc:  # Path.home() without a home directory
            settings.warn_once('<user cache directory>', f'the home directory is unknown ({exc})')
            return cache_dir()
    if not isinstance(path, str | os.PathLike):
        msg = f'path must be a directory path (str or os.PathLike) or None, got {path!r}'
        raise TypeError(msg)
    path = os.fspath(path)
    problem = _check_writable(path)
    if problem is not None:
        settings.warn_once(path, problem)
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
    if switched_off():
        return
    if cache_dir() is not None or not jax.config.jax_enable_compilation_cache:
        return  # the user's configuration
    try:
        enable()
    except Warning:
        raise  # the user turned warnings into errors
    except Exception as exc:  # noqa: BLE001, a cache must never break `import bartz`
        settings.warn_once('<default>', f'setting it up failed: {type(exc).__name__}: {exc}')


def switched_off() -> bool:
    """Return whether ``BARTZ_COMPILATION_CACHE`` switches the cache off.

    What the set-up at ``import bartz`` asks (not in ``__all__``).

    Returns
    -------
    True for ``0``, ``false``, ``off``, ``no`` (any case, spaces around);
    False for ``1``, ``true``, ``on``, ``yes``, the empty value or no value,
    and for a value not understood, with a warning.
    """
    value = os.environ.get(settings.ENV_SWITCH, '')
    switch = value.strip().lower()
    if switch in settings.OFF_VALUES:
        return True
    if switch not in settings.ON_VALUES:
        warnings.warn(
            f'{settings.ENV_SWITCH}={value!r} is not understood, so the compilation '
            f'cache stays on; set it to 0, false, off or no to switch it off',
            stacklevel=4,
        )
    return False


def _check_writable(path: str) -> str | None:
    """Create `path`, check that it is trusted and write a file in it;
    return why it failed, or `None`.

    Checked once: a failure later is caught by JAX (jax 0.10.2,
    `jax._src.compiler._cache_write` and `_cache_read`), which warns and goes
    on, so it needs no guard here.
    """
    if '://' in path:
        return None  # a remote filesystem (JAX uses etils.epath): let JAX try
    try:
        settings.make_private_dirs(path)
        programs = Path(path) / settings.PROGRAMS_SUBDIR
        problem = settings.untrusted(path) or (programs.exists() and settings.untrusted(programs))
        if problem:
            return problem
        fd, probe = tempfile.mkstemp(dir=path, prefix='.bartz-write-test-')
        try:
            os.write(fd, b'bartz')
        finally:
            os.close(fd)
            os.remove(probe)
    except OSError as exc:
        return f'{type(exc).__name__}: {exc}'
    return None


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
