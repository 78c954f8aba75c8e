"""The compiled programs that a process keeps in memory: the table of
stored programs loaded or compiled by `bartz._compile.programs`, its locks,
its limit (``compile_cache.limits().max_programs``, the least recently used
dropped beyond), and the watch of the process's memory mappings.

A long session that fits many settings thus holds a bounded number of
programs, where each would keep memory and a few hundred memory mappings
(`watch_maps` is the last resort for what bartz does not track).
"""

import collections
import functools
import gc
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

import jax

from bartz import _warn
from bartz._compile import settings

_LOCK = threading.Lock()  # guards _KEY_LOCKS
_KEY_LOCKS: dict[str, threading.Lock] = {}


def key_lock(key: str) -> threading.Lock:
    """Return the lock of one program.

    Chains on threads compile or load a program once, and a program
    compiled ahead (`persistent`'s ``prepare``) on another thread does not
    hold up the others. The lock is dropped with the program (`LOADED`).

    Parameters
    ----------
    key
        The program's key.

    Returns
    -------
    The same lock for the same key.
    """
    with _LOCK:
        return _KEY_LOCKS.setdefault(key, threading.Lock())


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


# The programs kept by this process (used by `bartz._compile.programs`).
LOADED = _Loaded()
try:  # jax 0.10.2 (private): let jax.clear_caches() clear ours too
    from jax._src import util as _jax_util

    _jax_util.register_cache(LOADED, 'bartz._compile.memory')
except (ImportError, AttributeError):  # pragma: no cover, a future JAX
    pass


def apply_limits() -> None:
    """Drop what is beyond ``compile_cache.limits()`` now, and count the
    mappings at the next call of `watch_maps` (called by
    `bartz.compile_cache.set_limits`)."""
    LOADED.enforce()
    _Maps.skip = 0


def programs_in_memory() -> int:
    """The number of programs kept in `LOADED`."""
    with LOADED.lock:
        return len(LOADED.programs)


def clear_programs() -> None:
    """Drop the compiled programs kept in memory (not their caches in JAX).

    `jax.clear_caches` does it too, with JAX's own caches; this leaves
    those, so that the next call of a `persistent` function loads its
    program from disk (or compiles it) without tracing anything else again.
    """
    LOADED.cache_clear()


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
    Python traceback). bartz bounds its own programs (`LOADED`), but not
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
    LOADED.cache_clear()  # (also if a future JAX no longer clears registered caches)
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
