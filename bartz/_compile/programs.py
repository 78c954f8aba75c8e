"""bartz's main compiled programs (the MCMC loop, the predictions) kept on
disk whole, so that a new process neither traces nor lowers them again.

JAX's persistent cache (`bartz.compile_cache`) spares a new process XLA's
compilation, but not the tracing and lowering that come before it: JAX
looks a program up by the hash of its lowered text, so it must trace the
Python function first; for the MCMC loop that is most of a second fit in a
new process. `persistent` wraps a jitted function so that its
compiled executable is stored, with the pytree structures of its inputs and
outputs, in a ``bartz-programs`` folder inside the cache directory, under a
key made of everything the program depends on (`bartz._compile.keys`).

A new process with the same key loads the executable (deserialising it,
a few tenths of a second) instead of tracing, lowering and fetching it from
JAX's cache. The layer is on when and where JAX's persistent cache is on,
and off with it, for programs that run on one CPU or GPU device
(`keys.PLATFORMS`: where it was checked; not on a mesh of several devices).
A program that cannot be stored, or a stored file that cannot be read,
never breaks a fit: the program is compiled as usual (a failed write
warns once per directory).

The files are Python pickles of JAX's serialised executables
(`jax.experimental.serialize_executable`): like JAX's own cache entries
they are trusted, and whoever can write to the cache directory can make
the process run their code. So they are read and written only where
`bartz.compile_cache`'s rule allows (the directory and its
``bartz-programs`` folder yours and writable by you alone, the
directories above them safe from others), also in a directory that the
user configured in JAX; elsewhere a warning says why, once.

The programs of this process are kept in memory (`bartz._compile.memory`),
also where the cache is off (then compiled ahead of time in memory, as
plain jit would, and not stored), at most
``compile_cache.limits().max_programs`` of them: beyond, the least
recently used is dropped, with the caches of the jitted function it came
from (which hold its executable too).
"""

import contextlib
import functools
import os
import pickle
import tempfile
import threading
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path

import jax
import jaxlib

from bartz._compile import memory, settings
from bartz._compile.keys import PLATFORMS, program_key
from bartz._compile.memory import watch_maps  # noqa: F401, where the package calls it

_SUBDIR = settings.PROGRAMS_SUBDIR
_SUFFIX = '.bartz-program'

# False: bartz's programs are compiled as jit does, neither loaded nor kept
# (for a test that patches traced code, which a program's key cannot see:
# the `traced_code_patched` fixture of tests/conftest.py).
enabled = True

def persistent(jitted: Callable, name: str, static: tuple) -> Callable:
    """Wrap `jitted` (a `jax.jit` function) so that its compiled program is
    kept on disk and loaded from there by later processes.

    Parameters
    ----------
    jitted
        The jitted function. Its arguments must be arrays or pytrees of
        arrays (no static arguments).
    name
        The program's name, part of the key.
    static
        Everything besides the arguments that decides the traced program
        (the settings the function closes over), as a tuple with a stable
        ``repr``.

    Returns
    -------
    A function called like `jitted`, with one more keyword argument,
    ``quick``: XLA options for a first program that compiles faster (see
    `_compile_quick_first`, only with the cache on), or None. It calls
    `jitted` itself when the layer is off (`enabled`, jit disabled, a
    platform not checked) or an argument is not a concrete array; with
    the cache off, it compiles the program in memory only (kept in
    `memory.LOADED`, within the limit). Its ``prepare(*args)`` loads or compiles
    the program for arguments that may be `jax.ShapeDtypeStruct` (with the
    sharding the arrays will have; None for numpy arrays) without running
    it, and returns whether the program is now ready; it is meant for a
    background thread (a later call with arrays of that signature waits
    for it, then runs the program).
    """

    def program_for(directory, key, args, quick=None):
        """The program, and a function that stores it if it was compiled
        afresh here (else None); `directory` None: in memory only."""
        program = memory.LOADED.get(key)
        write = None
        if program is None:
            with memory.key_lock(key):
                program = memory.LOADED.get(key)
                if program is None:
                    program = None if directory is None else _load(directory, key)
                    if program is None:
                        lowered = jitted.lower(*args)
                        if directory is None:
                            program = lowered.compile()
                        else:
                            program = (
                                None
                                if quick is None
                                else _compile_quick_first(directory, key, lowered, quick, jitted)
                            )
                            if program is None:
                                program, fresh = compile_fresh(lowered)
                                if fresh:
                                    write = functools.partial(store, directory, key, program)
                    program = memory.LOADED.keep(key, program, jitted)
        return program, write

    @functools.wraps(jitted)
    def call(*args, quick: dict | None = None):
        key = program_key(name, static, args) if tracked() else None
        if key is None:
            return jitted(*args)
        program, write = program_for(directory(), key, args, quick)
        out = program(*args)
        if write is not None:
            # written after the program is dispatched, while it runs
            write()
        return out

    def prepare(*args) -> bool:
        key = program_key(name, static, args) if tracked() else None
        if key is None:
            return False
        _, write = program_for(directory(), key, args)
        if write is not None:
            write()
        return True

    call.prepare = prepare
    return call


def persistent_jit(fun: Callable, name: str, **static) -> Callable:
    """`persistent` of ``jax.jit(functools.partial(fun, **static))``: the
    keyword arguments are the static settings, and part of the key."""
    return persistent(jax.jit(functools.partial(fun, **static)), name, tuple(static.items()))


def inlined(fun: Callable) -> Callable:
    """`fun`, called under ``jax.disable_jit()``: for code traced inside a
    compiled program, to trace it faster.

    Most `jax.numpy` functions and array operators are small jitted
    functions: inside a trace each call goes through `jax.jit`'s machinery,
    is traced once per signature and inlined. With jit disabled they are
    traced inline directly, to the same operations (jax 0.10.2), so a first
    fit traces and lowers faster and draws the same bit for bit.

    A loop (`lax.scan`, `lax.fori_loop`, `lax.while_loop`) must not be
    called inside `fun`: it would run in Python. `fun` may itself be a
    loop's body.
    """

    @functools.wraps(fun)
    def wrapper(*args, **kwargs):
        with jax.disable_jit():
            return fun(*args, **kwargs)

    return wrapper


class _Watch(threading.local):
    compiling = False
    cache_hits = 0


_WATCH = _Watch()


def _count_cache_hits(event: str, **_):
    if _WATCH.compiling and event == '/jax/compilation_cache/cache_hits':
        _WATCH.cache_hits += 1


jax.monitoring.register_event_listener(_count_cache_hits)


# Where a quick first program (`_compile_quick_first`) was checked to give
# the draws of the full one bit for bit: jaxlib versions, on CPU.
QUICK_CHECKED_JAXLIB = ('0.10.2',)

_BACKGROUND_LOCK = threading.Lock()
_BACKGROUND: list[threading.Thread] = []  # compilations started (the ended ones pruned at each start)


def quick_allowed(checked_jaxlib: tuple[str, ...] = QUICK_CHECKED_JAXLIB) -> bool:
    """Return whether quick first programs may be used.

    Parameters
    ----------
    checked_jaxlib
        The jaxlib versions where quick programs were checked.

    Returns
    -------
    Whether quick programs are switched on (``BARTZ_QUICK_COMPILE``, with
    the values that switch the compilation cache on, the empty one aside)
    and this jaxlib is one of `checked_jaxlib`. A value that is not
    understood warns, and leaves them off.
    """
    value = os.environ.get('BARTZ_QUICK_COMPILE', '')
    switch = value.strip().lower()
    on = switch in settings.ON_VALUES - {''}
    if not on and switch not in settings.ON_VALUES | settings.OFF_VALUES:
        warnings.warn(
            f'BARTZ_QUICK_COMPILE={value!r} is not understood, so quick first programs stay off; '
            f'set it to 1, true, on or yes to switch them on (or 0, false, off, no)',
            stacklevel=2,
        )
    return on and jaxlib.__version__ in checked_jaxlib


def _compile_quick_first(directory: Path, key: str, lowered, quick: dict, jitted: Callable):
    """A program compiled with the extra XLA options `quick` (faster to
    compile, slower to run), while the full program compiles on a thread
    and replaces it once ready (it is the one stored); None if the quick
    compilation fails (then the caller compiles as usual).

    Meant for options that change how XLA emits its kernels but not what
    they compute (``xla_cpu_use_fusion_emitters=False``: the same draws bit
    for bit, `tests/test_compile_cache.py`), so that a run may switch from
    one program to the other between calls. The thread is not a daemon: a
    process that ends while it compiles waits for it."""
    try:
        program, _ = compile_fresh(lowered, quick)
    except Exception:  # noqa: BLE001, an option this XLA does not know
        return None
    program = memory.LOADED.keep(key, program, jitted)

    def full():
        try:
            better, fresh = compile_fresh(lowered)
        except Exception:  # noqa: BLE001, keep the quick program
            return
        memory.LOADED.replace(key, better)
        if fresh:
            store(directory, key, better)

    thread = threading.Thread(target=full, name=f'bartz-compile-{key[:24]}')
    with _BACKGROUND_LOCK:
        _BACKGROUND[:] = [t for t in _BACKGROUND if t.is_alive()]
        _BACKGROUND.append(thread)
    thread.start()
    return program


def wait_for_background(timeout: float | None = None) -> bool:
    """Wait for the full programs still compiling after quick ones; return
    whether none is left."""
    with _BACKGROUND_LOCK:
        threads = list(_BACKGROUND)
    for thread in threads:
        thread.join(timeout)
    return not any(t.is_alive() for t in threads)


def background_compilations() -> list[threading.Thread]:
    """Return the threads that compile full programs after quick ones.

    Returns
    -------
    The threads started by `_compile_quick_first`, named
    ``bartz-compile-<key>``; those that ended stay listed until another
    starts.
    """
    with _BACKGROUND_LOCK:
        return list(_BACKGROUND)


def compile_fresh(
    lowered, options: dict | None = None, *, no_write_below_secs: float = float('inf')
) -> tuple[object, bool]:
    """Compile `lowered` with XLA, not from JAX's persistent cache.

    An executable that JAX loaded from its cache serialises incompletely
    (jaxlib 0.10.2: the copy loaded from that serialisation fails at its
    first run with "Function ... not found"), so only a fresh compilation
    may be stored. The compile runs under a cache key of its own (with the
    program's source locations, thread-local settings) that JAX never
    writes (no minimum compile time is reached), so it does not find the
    entry of the same program compiled by plain jit; if JAX's cache
    answers all the same, the program is used but not stored.

    Parameters
    ----------
    lowered : jax.stages.Lowered
        The lowered program.
    options
        XLA options added to those of the jitted function.
    no_write_below_secs
        JAX's minimum compile time for writing the entry of this key to
        its cache: by default none is written (a finite value lets a test
        make JAX's cache answer the next compilation).

    Returns
    -------
    program : jax.stages.Compiled
        The compiled program.
    fresh : bool
        Whether it was compiled here (False: JAX's cache answered).
    """
    contexts = []
    try:  # jax 0.10.2, private
        from jax._src import config as jax_config  # noqa: PLC0415

        contexts = [
            jax_config.compilation_cache_include_metadata_in_key(True),
            jax_config.persistent_cache_min_compile_time_secs(no_write_below_secs),
        ]
    except (ImportError, AttributeError):  # pragma: no cover, a future JAX
        pass
    _WATCH.compiling, _WATCH.cache_hits = True, 0
    try:
        with contextlib.ExitStack() as stack:
            for context in contexts:
                stack.enter_context(context)
            program = lowered.compile(options)
    finally:
        _WATCH.compiling = False
    return program, _WATCH.cache_hits == 0


def tracked(platforms: tuple[str, ...] = PLATFORMS) -> bool:
    """Return whether the layer is on: programs compiled and kept by bartz
    (in memory, and on disk with the cache).

    Parameters
    ----------
    platforms
        The platforms where stored programs may run.

    Returns
    -------
    Whether `enabled` is set, jit is not disabled and JAX's default backend
    is one of `platforms`.
    """
    return enabled and not jax.config.jax_disable_jit and jax.default_backend() in platforms


def directory() -> Path | None:
    """Return the folder of the stored programs in use.

    Returns
    -------
    `programs_folder` of the cache directory, or None when the layer is off
    (`tracked`).
    """
    return programs_folder(settings.cache_dir()) if tracked() else None


def programs_folder(root: str | None) -> Path | None:
    """Return the folder of the stored programs in a cache directory.

    Parameters
    ----------
    root
        The cache directory, or None where the cache is off.

    Returns
    -------
    ``root/bartz-programs``, or None where `root` is None, on a remote
    filesystem (JAX's cache only), or not trusted (then a warning, once).
    """
    if root is None or '://' in root:
        return None
    folder = Path(root) / _SUBDIR
    # also in a directory that the user gave JAX, which bartz did not check
    problem = settings.untrusted(root) or (folder.exists() and settings.untrusted(folder))
    if problem:
        settings.warn_once(os.fspath(folder), problem)
        return None
    return folder


def _load(directory: Path, key: str):
    """The stored program of `key`, or None if absent or unreadable."""
    path = directory / (key + _SUFFIX)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        from jax.experimental import serialize_executable  # noqa: PLC0415

        payload, in_tree, out_tree, device_ids = pickle.loads(zlib.decompress(data))  # noqa: S301, trusted, see the docstring
        by_id = {d.id: d for d in jax.devices()}
        devices = [by_id[i] for i in device_ids]
        return serialize_executable.deserialize_and_load(payload, in_tree, out_tree, execution_devices=devices)
    except Exception:  # noqa: BLE001, a damaged or foreign file: compile instead
        try:
            path.unlink()
        except OSError:
            pass
        return None


def store(directory: Path, key: str, program) -> None:
    """Write a compiled program to its file.

    Parameters
    ----------
    directory
        The folder of the stored programs, created if missing.
    key
        The program's key (`bartz._compile.keys.program_key`).
    program : jax.stages.Compiled
        The program, compiled afresh (`compile_fresh`).

    Notes
    -----
    A program that cannot be serialised is not written (it is compiled
    again next time); a write that fails warns once per directory.
    """
    try:
        from jax.experimental import serialize_executable  # noqa: PLC0415

        # the devices it runs on: by default a loaded program would run on all
        device_ids = [d.id for d in program.runtime_executable().local_devices()]
        data = zlib.compress(pickle.dumps((*serialize_executable.serialize(program), device_ids)), 1)
    except Exception:  # noqa: BLE001, this backend or program cannot be serialised: compile next time
        return
    try:
        settings.make_private_dirs(directory)  # 0o700: the cache is trusted
        fd, temporary = tempfile.mkstemp(dir=directory, prefix='.tmp-')
        try:
            with os.fdopen(fd, 'wb') as file:
                file.write(data)
            os.replace(temporary, directory / (key + _SUFFIX))
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError as exc:
        settings.warn_once(os.fspath(directory), f'{type(exc).__name__}: {exc}')
