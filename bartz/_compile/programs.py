"""bartz's main compiled programs (the MCMC loop, the predictions) kept on
disk whole, so that a new process neither traces nor lowers them again.

JAX's persistent cache (`bartz.compile_cache`) spares a new process XLA's
compilation, but not the tracing and lowering that come before it: JAX
looks a program up by the hash of its lowered text, so it must trace the
Python function first; for the MCMC loop that is most of a second fit in a
new process. `persistent` wraps a jitted function so that its
compiled executable is stored, with the pytree structures of its inputs and
outputs, in a ``bartz-programs`` folder inside the cache directory, under a
key made of everything the program depends on:

- the source of bartz (a hash of its ``.py`` files), the versions of JAX,
  jaxlib and Python, the platform and its devices, the CPU (machine type
  and instruction set flags) and ``XLA_FLAGS``;
- the JAX settings that change what is traced (``jax_enable_x64``, the
  random number generator, the promotion rules, ...);
- the name of the program, its static settings, and the shapes, dtypes,
  shardings and pytree structure of its arguments.

A new process with the same key loads the executable (deserialising it,
a few tenths of a second) instead of tracing, lowering and fetching it from
JAX's cache. The layer is on when and where JAX's persistent cache is on,
and off with it, for programs that run on one CPU or GPU device
(`_PLATFORMS`: where it was checked; not on a mesh of several devices).
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

The programs of this process are kept in memory (`_LOADED`), also where
the cache is off (then compiled ahead of time in memory, as plain jit
would, and not stored), at most ``compile_cache.limits().max_programs``
of them: beyond, the least recently used is dropped, with the caches of
the jitted function it came from (which hold its executable too). A long
session that fits many settings thus holds a bounded number of them,
where each would keep memory and a few hundred memory mappings
(`watch_maps` is the last resort for what bartz does not track).

(Over 600 lines: the programs kept in memory, their keys and their files
share one table of keys and its locks.)
"""

import collections
import contextlib
import functools
import gc
import hashlib
import os
import pickle
import platform
import sys
import tempfile
import threading
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path

import jax
import jaxlib

from bartz import _warn
from bartz._compile import settings

# Bump to ignore every file written by earlier layouts.
_FORMAT = 2
_SUBDIR = settings.PROGRAMS_SUBDIR
_SUFFIX = '.bartz-program'

# Public JAX settings that change what a function traces to.
_TRACE_SETTINGS = (
    'jax_enable_x64',
    'jax_default_prng_impl',
    'jax_threefry_partitionable',
    'jax_numpy_rank_promotion',
    'jax_numpy_dtype_promotion',
    'jax_default_matmul_precision',
    'jax_debug_nans',
    'jax_debug_infs',
    'jax_enable_checks',
    'jax_legacy_prng_key',
    'jax_enable_custom_prng',
)


class _Loaded:
    """The compiled programs of this process, by key, the least recently
    used first, at most ``compile_cache.limits().max_programs``; cleared by
    `jax.clear_caches` like JAX's own, so that a long session can release
    them (each keeps memory mappings and code)."""

    def __init__(self):
        self.programs: collections.OrderedDict[str, object] = collections.OrderedDict()
        self.jitted: dict[str, Callable] = {}  # the jitted function of each
        self.lock = threading.Lock()

    def get(self, key: str):
        """The program of `key`, now the most recently used, or None."""
        with self.lock:
            program = self.programs.get(key)
            if program is not None:
                self.programs.move_to_end(key)
            return program

    def keep(self, key: str, program, jitted: Callable):
        """Keep `program` (or return the one kept already under `key`),
        dropping the least recently used beyond the limit."""
        with self.lock:
            program = self.programs.setdefault(key, program)
            self.programs.move_to_end(key)
            self.jitted[key] = jitted
            dropped = self._over_limit()
        _release(dropped)
        return program

    def replace(self, key: str, program) -> None:
        """Put `program` in place of the one of `key`, if still kept."""
        with self.lock:
            if key in self.programs:
                self.programs[key] = program

    def enforce(self) -> None:
        with self.lock:
            dropped = self._over_limit()
        _release(dropped)

    def _over_limit(self) -> list[Callable]:
        limit = settings.limits().max_programs
        dropped = []
        while limit is not None and len(self.programs) > limit:
            key, _ = self.programs.popitem(last=False)
            dropped.append(self.jitted.pop(key))
            with _LOCK:
                _KEY_LOCKS.pop(key, None)
        return dropped

    def cache_clear(self):
        with self.lock:
            self.programs.clear()
            self.jitted.clear()

    def cache_info(self):
        return f'{len(self.programs)} bartz programs'

    def cache_keys(self):
        return list(self.programs)


def _release(jitteds: list[Callable]) -> None:
    """Clear the caches of the jitted functions of dropped programs: JAX
    holds each executable too, through the traced and lowered program
    cached for its function (jax 0.10.2: ``clear_cache`` clears the
    function's compiled and traced programs), so dropping bartz's reference
    alone would free nothing. Programs of the same function still kept by
    bartz are not affected (bartz holds them); the function traces again
    for a new one."""
    for jitted in {id(j): j for j in jitteds}.values():
        clear = getattr(jitted, 'clear_cache', None)
        if clear is not None:
            clear()


_LOADED = _Loaded()
try:  # jax 0.10.2 (private): let jax.clear_caches() clear ours too
    from jax._src import util as _jax_util

    _jax_util.register_cache(_LOADED, 'bartz._compile.programs')
except (ImportError, AttributeError):  # pragma: no cover, a future JAX
    pass


def apply_limits() -> None:
    """Drop what is beyond ``compile_cache.limits()`` now, and count the
    mappings at the next call of `watch_maps` (called by
    `bartz.compile_cache.set_limits`)."""
    _LOADED.enforce()
    _Maps.skip = 0


def programs_in_memory() -> int:
    """The number of programs kept in `_LOADED`."""
    with _LOADED.lock:
        return len(_LOADED.programs)


class _Maps:
    warned = False  # `watch_maps` warns once per process
    skip = 0  # calls of `watch_maps` left before it counts again


# Generously more mappings than one fit or prediction adds (about 300 for
# an MCMC loop): `watch_maps` counts again only after as many calls as
# could, at this many each, fill the margin left below its threshold
# (reading ``/proc/self/maps`` takes time in proportion to the mappings).
_MAPS_PER_CALL = 2_000


def watch_maps() -> None:
    """The last resort against Linux's limit of memory mappings, called
    where a fit or a prediction starts, before it compiles anything.

    Every compiled XLA CPU program keeps a few memory mappings per kernel
    (jaxlib 0.10.2),
    and at ``vm.max_map_count`` (65,530 by default) XLA's compiler aborts
    the process (``LLVM ERROR: Unable to allocate section memory!``, no
    Python traceback). bartz bounds its own programs (`_LOADED`), but not
    those of its other jitted functions or of other JAX code: above
    ``compile_cache.limits().maps_fraction`` of the limit, clear all of
    JAX's in-memory caches, and warn the first time. Off where
    ``/proc/self/maps`` cannot be read (not Linux)."""
    fraction = settings.limits().maps_fraction
    limit = _max_map_count()
    if fraction is None or limit is None:
        return
    if _Maps.skip > 0:
        _Maps.skip -= 1
        return
    count = map_count()
    threshold = fraction * limit
    if count is None or count <= threshold:
        _Maps.skip = 0 if count is None else int((threshold - count) // _MAPS_PER_CALL)
        return
    jax.clear_caches()
    _LOADED.cache_clear()  # (also if a future JAX no longer clears registered caches)
    gc.collect()  # executables in reference cycles keep their mappings until collected
    if _Maps.warned:
        return
    _Maps.warned = True
    after = map_count()
    warnings.warn(
        f'this process held {count:,} memory mappings, more than {fraction:.0%} of Linux\'s limit '
        f'(vm.max_map_count = {limit:,}), at which XLA\'s compiler aborts the process: bartz cleared '
        f'the compiled programs of JAX from memory (jax.clear_caches(); {after:,} mappings now). The '
        f'next fits compile their programs again, or load them from the compilation cache. This '
        f'warning is given once; bartz.compile_cache.set_limits(maps_fraction=...) sets the share.',
        settings.MemoryMapsWarning,
        stacklevel=_warn.user_stacklevel(),
    )


def map_count() -> int | None:
    """The number of memory mappings of this process, or None where the
    OS does not tell (only Linux's ``/proc/self/maps``, a line each)."""
    try:
        with open('/proc/self/maps', 'rb') as file:
            return file.read().count(b'\n')
    except OSError:
        return None


@functools.cache
def _max_map_count() -> int | None:
    """Linux's ``vm.max_map_count``, or None where unknown."""
    try:
        return int(Path('/proc/sys/vm/max_map_count').read_text())
    except (OSError, ValueError):
        return None


# Switched off by the test suite, whose tests patch traced code in place.
enabled = True

# Where stored programs were checked to run: a broken serialisation fails
# only at run time, after the donated inputs are gone, so it cannot be
# caught and compiled again. Checked on CPU (jaxlib 0.10.2) and a CUDA GPU
# (jaxlib 0.11.2: no tracing in a new process, the same draws, a damaged
# file compiled again); TPUs are not.
_PLATFORMS = ('cpu', 'gpu')

_LOCK = threading.Lock()  # guards _KEY_LOCKS
_KEY_LOCKS: dict[str, threading.Lock] = {}


def _key_lock(key: str) -> threading.Lock:
    """The lock of one program: chains on threads compile or load it once,
    and a program compiled ahead (`persistent`'s ``prepare``) on another
    thread does not hold up the others."""
    with _LOCK:
        return _KEY_LOCKS.setdefault(key, threading.Lock())


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
    `_LOADED`, within the limit). Its ``prepare(*args)`` loads or compiles
    the program for arguments that may be `jax.ShapeDtypeStruct` (with the
    sharding the arrays will have; None for numpy arrays) without running
    it, and returns whether the program is now ready; it is meant for a
    background thread (a later call with arrays of that signature waits
    for it, then runs the program).
    """

    def program_for(directory, key, args, quick=None):
        """The program, and a function that stores it if it was compiled
        afresh here (else None); `directory` None: in memory only."""
        program = _LOADED.get(key)
        store = None
        if program is None:
            with _key_lock(key):
                program = _LOADED.get(key)
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
                                program, fresh = _compile_fresh(lowered)
                                if fresh:
                                    store = functools.partial(_store, directory, key, program)
                    program = _LOADED.keep(key, program, jitted)
        return program, store

    @functools.wraps(jitted)
    def call(*args, quick: dict | None = None):
        key = _key(name, static, args) if _tracked() else None
        if key is None:
            return jitted(*args)
        program, store = program_for(_directory(), key, args, quick)
        out = program(*args)
        if store is not None:
            # written after the program is dispatched, while it runs
            store()
        return out

    def prepare(*args) -> bool:
        key = _key(name, static, args) if _tracked() else None
        if key is None:
            return False
        _, store = program_for(_directory(), key, args)
        if store is not None:
            store()
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


# JAX writes no entry that compiled faster than this (tests lower it)
_NO_WRITE_BELOW_SECS = float('inf')


# Where a quick first program (`_compile_quick_first`) was checked to give
# the draws of the full one bit for bit: jaxlib versions, on CPU.
QUICK_CHECKED_JAXLIB = ('0.10.2',)

_BACKGROUND: list[threading.Thread] = []  # compilations still running


def quick_allowed() -> bool:
    """Whether quick programs are switched on (``BARTZ_QUICK_COMPILE``, with
    the values that switch the compilation cache on, the empty one aside)
    and this jaxlib is one where they were checked."""
    value = os.environ.get('BARTZ_QUICK_COMPILE', '')
    switch = value.strip().lower()
    on = switch in settings.ON_VALUES - {''}
    if not on and switch not in settings.ON_VALUES | settings.OFF_VALUES:
        warnings.warn(
            f'BARTZ_QUICK_COMPILE={value!r} is not understood, so quick first programs stay off; '
            f'set it to 1, true, on or yes to switch them on (or 0, false, off, no)',
            stacklevel=2,
        )
    return on and jaxlib.__version__ in QUICK_CHECKED_JAXLIB


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
        program, _ = _compile_fresh(lowered, quick)
    except Exception:  # noqa: BLE001, an option this XLA does not know
        return None
    program = _LOADED.keep(key, program, jitted)

    def full():
        try:
            better, fresh = _compile_fresh(lowered)
        except Exception:  # noqa: BLE001, keep the quick program
            return
        _LOADED.replace(key, better)
        if fresh:
            _store(directory, key, better)

    thread = threading.Thread(target=full, name=f'bartz-compile-{key[:24]}')
    with _LOCK:
        _BACKGROUND[:] = [t for t in _BACKGROUND if t.is_alive()]
        _BACKGROUND.append(thread)
    thread.start()
    return program


def wait_for_background(timeout: float | None = None) -> bool:
    """Wait for the full programs still compiling after quick ones; return
    whether none is left."""
    with _LOCK:
        threads = list(_BACKGROUND)
    for thread in threads:
        thread.join(timeout)
    return not any(t.is_alive() for t in threads)


def _compile_fresh(lowered, options: dict | None = None) -> tuple[object, bool]:
    """Compile `lowered` with XLA, not from JAX's persistent cache; return
    the program and whether it was compiled here.

    An executable that JAX loaded from its cache serialises incompletely
    (jaxlib 0.10.2: the copy loaded from that serialisation fails at its
    first run with "Function ... not found"), so only a fresh compilation
    may be stored. The compile runs under a cache key of its own (with the
    program's source locations, thread-local settings) that JAX never
    writes (no minimum compile time is reached), so it does not find the
    entry of the same program compiled by plain jit; if JAX's cache
    answers all the same, the program is used but not stored. `options`:
    XLA options added to those of the jitted function.
    """
    contexts = []
    try:  # jax 0.10.2, private
        from jax._src import config as jax_config  # noqa: PLC0415

        contexts = [
            jax_config.compilation_cache_include_metadata_in_key(True),
            jax_config.persistent_cache_min_compile_time_secs(_NO_WRITE_BELOW_SECS),
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


def _tracked() -> bool:
    """Whether the layer is on: programs compiled and kept by bartz (in
    memory, and on disk with the cache)."""
    return enabled and not jax.config.jax_disable_jit and jax.default_backend() in _PLATFORMS


def _directory() -> Path | None:
    """The folder of the programs, or None when the layer is off, the
    cache too, or the folder is not trusted (then a warning, once)."""
    if not _tracked():
        return None
    root = settings.cache_dir()
    if root is None or '://' in root:  # remote filesystems: JAX's cache only
        return None
    folder = Path(root) / _SUBDIR
    # also in a directory that the user gave JAX, which bartz did not check
    problem = settings.untrusted(root) or (folder.exists() and settings.untrusted(folder))
    if problem:
        settings.warn_once(os.fspath(folder), problem)
        return None
    return folder


def _key(name: str, static: tuple, args: tuple) -> str | None:
    """The file name of the program for `args`, or None if they are not
    all concrete arrays (a tracer, a Python number: then jit decides)."""
    leaves, treedef = jax.tree.flatten(args)
    signature = [str(treedef)]
    for leaf in leaves:
        if isinstance(leaf, jax.core.Tracer) or not (hasattr(leaf, 'shape') and hasattr(leaf, 'dtype')):
            return None
        sharding = getattr(leaf, 'sharding', None)
        devices = leaf.devices() if isinstance(leaf, jax.Array) else getattr(sharding, 'device_set', ())
        if any(d.platform not in _PLATFORMS for d in devices):
            return None
        signature.append((
            tuple(leaf.shape),
            str(leaf.dtype),
            bool(getattr(leaf, 'weak_type', False)),
            None if sharding is None else repr(sharding),
        ))
    fingerprint = _fingerprint()
    if fingerprint is None:
        return None
    settings = [(s, str(getattr(jax.config, s, None))) for s in _TRACE_SETTINGS]
    text = repr((_FORMAT, fingerprint, os.environ.get('XLA_FLAGS', ''), settings, name, static, signature))
    return f'{name}-{hashlib.sha256(text.encode()).hexdigest()[:40]}'


@functools.cache
def _fingerprint() -> tuple | None:
    """What a stored program depends on that a process cannot change; None
    if the source of bartz cannot be read."""
    source = hashlib.sha256()
    package = Path(__file__).resolve().parent.parent  # the whole bartz package
    paths = sorted(package.rglob('*.py'))
    if not paths:  # no sources to hash (a bytecode-only install): keep nothing
        return None
    try:
        for path in paths:
            source.update(path.relative_to(package).as_posix().encode())
            source.update(path.read_bytes())
    except OSError:
        return None
    devices = tuple((d.platform, d.device_kind, d.client.platform_version) for d in jax.devices())
    return (
        source.hexdigest(),
        jax.__version__,
        jaxlib.__version__,
        sys.version,
        platform.machine(),
        _cpu_flags(),
        devices,
    )


def _cpu_flags() -> str:
    """The CPU's model and instruction set flags, where the OS tells them
    (a program compiled for one CPU may not run on another)."""
    try:
        text = Path('/proc/cpuinfo').read_text()
    except OSError:
        return platform.processor()
    lines = [line for line in text.splitlines() if line.startswith(('flags', 'Features', 'model name'))]
    return hashlib.sha256('\n'.join(sorted(set(lines))).encode()).hexdigest()


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


def _store(directory: Path, key: str, program) -> None:
    """Write `program` under `key`; warn once per directory if that fails."""
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
