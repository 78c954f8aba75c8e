"""The key of a stored program (`bartz._compile.programs`): everything its
compiled executable depends on, hashed into the name of its file.

- the source of bartz (a hash of its ``.py`` files), the versions of JAX,
  jaxlib and Python, the platform and its devices, the CPU (machine type
  and instruction set flags) and ``XLA_FLAGS``;
- the JAX settings that change what is traced (``jax_enable_x64``, the
  random number generator, the promotion rules, ...);
- the name of the program, its static settings, and the shapes, dtypes,
  shardings and pytree structure of its arguments.
"""

import functools
import hashlib
import os
import platform
import sys
from pathlib import Path

import jax
import jaxlib

# Bump to ignore every file written by earlier layouts.
FORMAT = 2

# Public JAX settings that change what a function traces to.
TRACE_SETTINGS = (
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

# Where stored programs were checked to run: a broken serialisation fails
# only at run time, after the donated inputs are gone, so it cannot be
# caught and compiled again. Checked on CPU (jaxlib 0.10.2) and a CUDA GPU
# (jaxlib 0.11.2: no tracing in a new process, the same draws, a damaged
# file compiled again); TPUs are not.
PLATFORMS = ('cpu', 'gpu')

# The whole bartz package, whose source is part of every key.
PACKAGE = Path(__file__).resolve().parent.parent


def program_key(
    name: str, static: tuple, args: tuple, *, platforms: tuple[str, ...] = PLATFORMS, package: Path = PACKAGE
) -> str | None:
    """Return the file name of the program `name` for `args`.

    Parameters
    ----------
    name
        The program's name, the start of the key.
    static
        The settings the program closes over, as a tuple with a stable
        ``repr``.
    args
        The arguments of the program: a pytree of arrays, or of
        `jax.ShapeDtypeStruct` with the sharding the arrays will have.
    platforms
        The platforms where stored programs may run.
    package
        The folder whose ``.py`` files are hashed into the key (`fingerprint`).

    Returns
    -------
    ``name-<hash>``, or None if the arguments are not all concrete arrays (a
    tracer, a Python number: then jit decides), an argument lives on a
    platform not in `platforms`, or `package` holds no readable source.
    """
    leaves, treedef = jax.tree.flatten(args)
    signature = [str(treedef)]
    for leaf in leaves:
        if isinstance(leaf, jax.core.Tracer) or not (hasattr(leaf, 'shape') and hasattr(leaf, 'dtype')):
            return None
        sharding = getattr(leaf, 'sharding', None)
        devices = leaf.devices() if isinstance(leaf, jax.Array) else getattr(sharding, 'device_set', ())
        if any(d.platform not in platforms for d in devices):
            return None
        signature.append((
            tuple(leaf.shape),
            str(leaf.dtype),
            bool(getattr(leaf, 'weak_type', False)),
            None if sharding is None else repr(sharding),
        ))
    machine = fingerprint(package)
    if machine is None:
        return None
    settings = [(s, str(getattr(jax.config, s, None))) for s in TRACE_SETTINGS]
    text = repr((FORMAT, machine, os.environ.get('XLA_FLAGS', ''), settings, name, static, signature))
    return f'{name}-{hashlib.sha256(text.encode()).hexdigest()[:40]}'


@functools.cache
def fingerprint(package: Path = PACKAGE) -> tuple | None:
    """Return what a stored program depends on that a process cannot change.

    Parameters
    ----------
    package
        The folder of the source to hash (all its ``.py`` files, below it too).

    Returns
    -------
    The hash of the source, the versions of JAX, jaxlib and Python, the
    machine, its CPU and its devices; None if `package` holds no ``.py``
    file (a bytecode-only install: keep nothing) or one cannot be read.
    """
    source = hashlib.sha256()
    paths = sorted(Path(package).rglob('*.py'))
    if not paths:
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
