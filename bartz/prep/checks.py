"""Checking and converting the arguments of the R-style front end.

Every function here runs before anything is traced and raises a builtin
`TypeError` or `ValueError` whose message names the argument and the bad
value (STYLE 8). The predictors are not converted here: that is the job of
`bartz.encoding`, which also remembers how for ``x_test`` and ``predict``.
"""

import decimal
import math
import numbers
import os
from typing import NamedTuple

import jax
import numpy as np
import pandas as pd
from jax import numpy as jnp

from bartz.kernels import rng as _random
from bartz.forest import grove
from bartz.run import sharding
from bartz.sampler.moves import move_probs_array, r_birth_of


# ---------------------------------------------------------------- arrays
# Helpers shared by the checks of the data (here, `bartz.encoding`, `bartz.diagnostics`).


def num_rows(x) -> int:
    """Number of rows of a DataFrame, Series, array or nested sequence (0
    for None or a scalar)."""
    if x is None:
        return 0
    shape = getattr(x, 'shape', None)
    if shape is None:
        shape = np.shape(x)
    return int(shape[0]) if len(shape) else 0


def is_number(v) -> bool:
    """A real number: Python's and NumPy's, and `decimal.Decimal` (what
    database drivers return for SQL's NUMERIC columns), read as float64."""
    return isinstance(v, numbers.Real | decimal.Decimal)


def is_missing(v) -> bool:
    """A missing value: None, NaN, ``pd.NA``, ``pd.NaT`` (`pandas.isna` of a scalar)."""
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def numbers_from_object(arr: np.ndarray) -> np.ndarray:
    """An object array whose elements are all real numbers or missing
    (`is_missing`: None, NaN, ``pd.NA``, as for a DataFrame's object
    column) as float64 with NaN for missing; any other array as it is (the
    caller rejects what is not numeric)."""
    if arr.dtype != object or arr.size == 0:
        return arr
    flat = arr.reshape(-1)
    if not all(is_missing(v) or is_number(v) for v in flat):
        return arr
    try:
        return np.array([np.nan if is_missing(v) else float(v) for v in flat], np.float64).reshape(arr.shape)
    except OverflowError:
        return arr  # an integer beyond float64: left for the caller's check, which names the column


def as_finite_array(name, x) -> np.ndarray:
    """``x``, array_like of any shape, as a float64 array with no NaN or inf.

    Booleans read as 0 and 1, numbers stored as objects as in
    `numbers_from_object`. Raises a `TypeError` naming ``name`` if ``x`` is
    not numeric or is complex, a `ValueError` if it is ragged, has masked
    entries or values that are not finite (naming the first).
    """
    if isinstance(x, np.ma.MaskedArray) and np.ma.getmaskarray(x).any():
        first = tuple(int(i) for i in np.argwhere(np.ma.getmaskarray(x))[0])
        msg = f'{name} must have no missing values; found a masked entry at index {first}'
        raise ValueError(msg)
    try:
        arr = numbers_from_object(np.asarray(x))
    except ValueError as exc:  # nested sequences of different lengths
        msg = f'{name} must be a numeric array, got a ragged {type(x).__name__}'
        raise ValueError(msg) from exc
    check_not_complex(name, arr)
    check_numeric(name, arr)
    arr = arr.astype(np.float64, copy=False)
    check_finite(name, arr, at='index')
    return arr


def check_axis(name, axis, ndim, of='the array') -> int:
    """``axis``, an integer from ``-ndim`` to ``ndim - 1``, as an index of the
    axes of an array ``of`` with ``ndim`` dimensions, from 0; a `TypeError`
    or `ValueError` naming ``name`` otherwise."""
    if isinstance(axis, bool | np.bool_) or not isinstance(axis, numbers.Integral):
        msg = f'{name} must be an integer, got {axis!r}'
        raise TypeError(msg)
    if not -ndim <= axis < ndim:
        msg = f'{name} must be an axis of {of}, from {-ndim} to {ndim - 1}, got {axis}'
        raise ValueError(msg)
    return int(axis) % ndim


def check_fraction(name, value) -> float:
    """``value``, a real number strictly between 0 and 1, as a float; a
    `TypeError` or `ValueError` naming ``name`` otherwise."""
    return _check_real(name, value, low=0, high=1)


# The checks of an array argument, shared by the front end (`bartz.encoding`,
# `bartz.prepcovars`, the estimators, `as_vector`). Each message reads
# "<name> must be <expected>, got <received>"; ``message`` replaces it where
# a caller owes another wording (the estimators: scikit-learn's, which its
# `check_estimator` matches).


def is_numeric_array(arr: np.ndarray) -> bool:
    """Numbers or booleans (not objects, strings or dates)."""
    return arr.dtype != object and (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool)


def check_numeric(name, arr: np.ndarray, *, error=TypeError, hint='') -> None:
    """Refuse an array that is not `is_numeric_array`; `hint` ends the message."""
    if not is_numeric_array(arr):
        msg = f'{name} must be numeric, got an array of dtype {arr.dtype}{hint}'
        raise error(msg)


def check_not_complex(name, arr, *, error=TypeError, message=None) -> None:
    """Refuse complex values."""
    if np.iscomplexobj(arr):
        raise error(message or f'{name} must be real, got complex values')


def check_ndim(name, x, ndim: int, expected: str, *, message=None) -> None:
    """Refuse an array (or array_like, by `numpy.shape`) without `ndim`
    dimensions: ``'{name} must be {expected}, got shape ...'``."""
    shape = np.shape(x)
    if len(shape) != ndim:
        raise ValueError(message or f'{name} must be {expected}, got shape {shape}')


def check_finite(name, arr: np.ndarray, *, allow_nan=False, expected=None, at='position', message=None) -> None:
    """Refuse NaN (unless `allow_nan`: a missing value) and infinite
    values, naming the first and where it is: its index (a 1-d array: the
    `at` it is, e.g. ``'row 3'``)."""
    bad = np.isinf(arr) if allow_nan else ~np.isfinite(arr)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        if message is None:
            expected = expected or ('finite or missing (NaN)' if allow_nan else 'finite (no NaN or inf)')
            where = f'{at} {i}' if arr.ndim == 1 else f'index {tuple(int(k) for k in np.unravel_index(i, arr.shape))}'
            message = f'{name} must be {expected}; found {arr.reshape(-1)[i]} at {where}'
        raise ValueError(message)


# ---------------------------------------------------------------- arguments


def _check_int(name, value, minimum, *, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral | float | np.floating):
        msg = f'{name} must be an integer >= {minimum}, got {value!r}'
        raise TypeError(msg)
    if isinstance(value, float | np.floating) and (not math.isfinite(value) or value != int(value)):
        msg = f'{name} must be an integer >= {minimum}, got {value!r}'
        raise ValueError(msg)
    if value < minimum:
        what = 'a positive integer' if minimum == 1 else f'an integer >= {minimum}'
        msg = f'{name} must be {what}, got {value!r}'
        raise ValueError(msg)
    return int(value)


def _check_bool(name, value):
    if not isinstance(value, bool | np.bool_):
        msg = f'{name} must be True or False, got {value!r}'
        raise TypeError(msg)


def _check_real(name, value, *, low=None, high=None, low_open=True, high_open=True, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        msg = f'{name} must be a real number, got {value!r}'
        raise TypeError(msg)
    try:
        value = float(value)
    except OverflowError:
        msg = f'{name} must be a finite real number, got an integer of {len(str(abs(value)))} digits, too large for float64'
        raise ValueError(msg) from None
    bad = not math.isfinite(value)
    if low is not None:
        bad |= value <= low if low_open else value < low
    if high is not None:
        bad |= value >= high if high_open else value > high
    if bad:
        lo = '' if low is None else (f'> {low}' if low_open else f'>= {low}')
        hi = '' if high is None else (f'< {high}' if high_open else f'<= {high}')
        cond = ' and '.join(s for s in (lo, hi) if s) or 'finite'
        msg = f'{name} must be {cond}, got {value!r}'
        raise ValueError(msg)
    return value


def as_vector(name, y, n):
    """`y` (``y_train``, ``w``) as a finite float64 vector of one value per row.

    Parameters
    ----------
    name
        The argument's name, for the messages.
    y
        A 1-d array, a sequence, a Series or a one-column DataFrame (an
        ``(n, 1)`` or ``(1, n)`` array too), numeric or boolean; an object
        array or Series of numbers (`decimal.Decimal` too).
    n
        The number of rows of ``x_train``.

    Returns
    -------
    numpy.ndarray
        ``(n,)`` float64.

    Raises
    ------
    TypeError
        `y` is None, not numeric, or complex.
    ValueError
        `y` has several columns, a masked, missing or infinite value, or
        not `n` values.
    """
    if y is None:
        msg = f'{name} must be an array, got None'
        raise TypeError(msg)
    if isinstance(y, pd.DataFrame):
        if y.shape[1] != 1:
            msg = f'{name} must be one column, got a DataFrame with {y.shape[1]} columns'
            raise ValueError(msg)
        y = y.iloc[:, 0]
    if isinstance(y, pd.Series):
        if y.dtype == object:  # numbers as objects (Decimal, None): as an object array
            y = y.to_numpy()
        elif not (pd.api.types.is_numeric_dtype(y) or pd.api.types.is_bool_dtype(y)):
            msg = f'{name} must be numeric, got a Series of dtype {y.dtype}'
            raise TypeError(msg)
        else:
            y = y.to_numpy(dtype=np.float64, na_value=np.nan)
    if isinstance(y, np.ma.MaskedArray) and np.ma.getmaskarray(y).any():
        i = int(np.argwhere(np.ma.getmaskarray(y).reshape(-1))[0, 0])
        msg = f'{name} must have no missing values; found a masked entry at position {i}'
        raise ValueError(msg)
    arr = numbers_from_object(np.asarray(y))
    check_numeric(name, arr)
    check_not_complex(name, arr)
    arr = arr.astype(np.float64)
    if arr.ndim == 2 and 1 in arr.shape:
        arr = arr.reshape(-1)
    check_ndim(name, arr, 1, '1-dimensional')
    if arr.shape[0] != n:
        msg = f'{name} must have one value per row of x_train ({n}), got {arr.shape[0]}'
        raise ValueError(msg)
    check_finite(name, arr)
    return arr


def _check_devices(devices, num_chain_devices, num_data_devices, mc_cores):
    """Validate the device arguments; return an explicit mesh or None (automatic)."""
    if devices is not None:
        try:
            devices = list(devices)
        except TypeError:
            msg = f'devices must be a sequence of JAX devices, got {devices!r}'
            raise TypeError(msg) from None
        if not devices or not all(isinstance(d, jax.Device) for d in devices):
            msg = f'devices must be a non-empty sequence of JAX devices, got {devices!r}'
            raise TypeError(msg)
    if num_chain_devices is None and num_data_devices is None:
        return None
    cd = _check_int('num_chain_devices', 1 if num_chain_devices is None else num_chain_devices, 1)
    dd = _check_int('num_data_devices', 1 if num_data_devices is None else num_data_devices, 1)
    if mc_cores % cd:
        msg = f'mc_cores ({mc_cores}) must be a multiple of num_chain_devices ({cd})'
        raise ValueError(msg)
    available = len(devices) if devices is not None else jax.device_count()
    if cd * dd > available:
        msg = f'num_chain_devices * num_data_devices = {cd * dd} devices requested, {available} available'
        raise ValueError(msg)
    return sharding.make_mesh(cd, dd, devices)


def make_key(seed, name='seed'):
    """The JAX key of an integer seed in ``[0, 2**64)`` or of a single JAX key.

    A seed below ``2**32`` gives ``random.key(seed)``'s stream (key words ``(0,
    seed)``); a larger one the words ``(seed >> 32, seed & 0xffffffff)``, as
    ``random.key`` does with 64-bit integers, so no two seeds below ``2**64``
    share a stream. A legacy ``random.PRNGKey`` (``uint32`` of shape ``(2,)``)
    is accepted; a batch of keys is refused by name.

    Parameters
    ----------
    seed
        The integer seed, or the JAX key.
    name
        The argument's name, for the messages.

    Returns
    -------
    jax.Array
        A typed JAX key of shape ``()``.
    """
    if isinstance(seed, jax.Array | np.ndarray) and not _is_integer_scalar(seed):
        return _single_key(seed, name)
    if isinstance(seed, bool | np.bool_) or not (isinstance(seed, numbers.Integral) or _is_integer_scalar(seed)):
        msg = f'{name} must be a non-negative integer or a JAX random key, got {seed!r}'
        raise TypeError(msg)
    seed = int(seed)
    if not 0 <= seed < 2**64:
        msg = f'{name} must be a non-negative integer below 2**64, got {seed}'
        raise ValueError(msg)
    return _random.key_on_host(seed)


def _is_integer_scalar(value) -> bool:
    """A 0-d integer array (NumPy's or JAX's): a seed, not a key."""
    dtype = getattr(value, 'dtype', None)
    return (
        getattr(value, 'ndim', None) == 0
        and dtype is not None
        and not jnp.issubdtype(dtype, jax.dtypes.prng_key)
        and np.issubdtype(dtype, np.integer)
    )


def _single_key(key, name):
    """`key` as one typed JAX key: a typed key of shape ``()``, or the raw
    ``uint32`` data ``(2,)`` of ``random.PRNGKey``."""
    if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != ():
            msg = (
                f'{name} must be a single JAX random key, got a batch of keys of shape {key.shape}; '
                'pass one of them (e.g. keys[0]), or one seed per fit'
            )
            raise ValueError(msg)
        return key
    if key.dtype == np.uint32 and key.shape == (2,):
        return jax.random.wrap_key_data(jnp.asarray(key))
    if key.dtype == np.uint32 and key.ndim == 2 and key.shape[-1] == 2:
        msg = (
            f'{name} must be a single JAX random key, got a batch of {key.shape[0]} raw keys (shape {key.shape}); '
            'pass one of them (e.g. keys[0])'
        )
        raise ValueError(msg)
    msg = f'{name} must be a non-negative integer or a JAX random key, got an array of dtype {key.dtype} and shape {key.shape}'
    raise TypeError(msg)


class Settings(NamedTuple):
    """The scalar arguments of `bartz.gbart`, checked, with the defaults
    that depend on the outcome type filled in."""

    sparse: bool  # DART on
    augment: bool  # DART's data augmentation (no effect without sparse, as R)
    theta: float  # DART concentration, 0 = random
    a: float  # DART Beta prior
    b: float
    rho: float | None  # DART, None = number of predictors
    mc_cores: int  # number of chains
    ndpost: int  # kept draws in total
    nskip: int  # burn-in iterations
    keepevery: int  # thinning
    ntree: int  # number of trees
    printevery: int | None  # progress period, None for silence
    maxdepth: int  # levels of the tree arrays
    min_points_per_leaf: int
    max_memory: int  # bytes of temporaries of the prediction kernels
    k: float  # leaf prior
    power: float  # tree prior
    base: float
    sigdf: float  # error variance prior
    sigquant: float
    lambda_: float | None  # None: from sigest and sigquant
    sigest: float | None  # None: OLS
    tau_num: float | None  # None: the outcome type's default
    offset: float | None  # None: the outcome type's default
    usequants: bool
    rm_const: bool
    save_yhat_train: bool
    warmstart: int  # grow-from-root sweeps before the MCMC
    move_probs: object = None  # (4,) float32 numpy: grow, prune, change, swap
    r_birth: str | None = None  # R's birth ('all', 'usable') for moves='R' (`bartz.sampler.moves.r_birth_of`)


def check_settings(
    outcome,
    *,
    sparse,
    theta,
    omega,
    a,
    b,
    augment,
    rho,
    mc_cores,
    ndpost,
    nskip,
    keepevery,
    ntree,
    printevery,
    maxdepth,
    min_points_per_leaf,
    max_memory,
    k,
    power,
    base,
    sigdf,
    sigquant,
    lambda_,
    sigest,
    tau_num,
    offset,
    usequants,
    rm_const,
    save_yhat_train,
    warmstart=0,
    moves=None,
) -> Settings:
    """Check the scalar arguments of `bartz.gbart`; ``outcome`` (a
    `bartz.priors.OutcomeType`) gives the defaults of ``ntree`` and
    ``keepevery``."""
    _check_bool('sparse', sparse)
    _check_bool('augment', augment)
    _check_real('omega', omega)
    maxdepth = _check_int('maxdepth', maxdepth, 2)
    if maxdepth > grove.MAX_SUPPORTED_DEPTH:
        msg = f'maxdepth must be at most {grove.MAX_SUPPORTED_DEPTH}, got {maxdepth}'
        raise ValueError(msg)
    _check_bool('usequants', usequants)
    _check_bool('rm_const', rm_const)
    _check_bool('save_yhat_train', save_yhat_train)
    _check_tree_prior(base, power)
    return Settings(
        sparse=bool(sparse),
        augment=bool(augment),
        theta=_check_real('theta', theta, low=0, low_open=False),
        a=_check_real('a', a, low=0),
        b=_check_real('b', b, low=0),
        rho=_check_real('rho', rho, low=0, allow_none=True),
        mc_cores=_check_int('mc_cores', mc_cores, 1),
        ndpost=_check_int('ndpost', ndpost, 1),
        nskip=_check_int('nskip', nskip, 0),
        keepevery=_check_int('keepevery', outcome.keepevery if keepevery is None else keepevery, 1),
        ntree=_check_int('ntree', outcome.ntree if ntree is None else ntree, 1),
        printevery=_check_int('printevery', printevery, 1, allow_none=True),
        maxdepth=maxdepth,
        min_points_per_leaf=_check_int('min_points_per_leaf', min_points_per_leaf, 0),
        max_memory=_check_int('max_memory', max_memory, 1),
        k=_check_real('k', k, low=0),
        power=_check_real('power', power, low=0, low_open=False),
        base=_check_real('base', base, low=0, high=1, high_open=False),
        sigdf=_check_real('sigdf', sigdf, low=0),
        sigquant=_check_real('sigquant', sigquant, low=0, high=1),
        lambda_=_check_real('lambda_', lambda_, low=0, low_open=False, allow_none=True),  # 0: sigma known (R)
        sigest=_check_real('sigest', sigest, low=0, allow_none=True),
        tau_num=_check_real('tau_num', tau_num, low=0, allow_none=True),
        offset=_check_real('offset', offset, allow_none=True),
        usequants=bool(usequants),
        rm_const=bool(rm_const),
        save_yhat_train=bool(save_yhat_train),
        warmstart=_check_int('warmstart', warmstart, 0),
        move_probs=move_probs_array(moves),
        r_birth=r_birth_of(moves, bool(augment)),
    )


def _check_tree_prior(base, power):
    """Refuse ``base=1, power=0``: every node splits with probability 1, so
    the prior has no finite trees and every move that stops a tree
    growing is refused (bartz's bounded trees would stay leaves)."""
    base = _check_real('base', base, low=0, high=1, high_open=False)
    power = _check_real('power', power, low=0, low_open=False)
    if base == 1 and power == 0:
        msg = (
            'base=1 with power=0 makes every node split with probability base / (1 + depth)**power = 1: '
            'the tree prior never stops growing, so no tree is possible; lower base (R: 0.95) or raise power (R: 2)'
        )
        raise ValueError(msg)


def check_warmstart(warmstart, mesh):
    """The warm start runs on one device's data: refuse it with the data
    split over devices (chains over devices are fine)."""
    if warmstart > 0 and mesh is not None and mesh.shape['data'] > 1:
        msg = (
            f'warmstart={warmstart} is not supported with the data split over devices '
            f"(num_data_devices={mesh.shape['data']}); use warmstart=0 or num_data_devices=1"
        )
        raise ValueError(msg)


def make_mesh(devices, num_chain_devices, num_data_devices, mc_cores):
    """The device mesh of a fit: explicit (from the arguments), or automatic;
    None for one chain on one device."""
    mesh = _check_devices(devices, num_chain_devices, num_data_devices, mc_cores)
    if devices is not None:
        devices = list(devices)
    if mesh is None:
        if devices is not None and len(devices) == 1:
            mesh = sharding.make_mesh(1, 1, devices)
        else:
            mesh = sharding.auto_mesh(mc_cores, devices)
    if mesh is not None and mc_cores % mesh.shape['chains']:
        msg = f"mc_cores={mc_cores} must be a multiple of the number of chain devices ({mesh.shape['chains']})"
        raise ValueError(msg)
    return mesh


def _physical_memory():
    """Bytes of physical memory on this machine, or None where unknown."""
    try:
        return os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
    except (AttributeError, ValueError, OSError):  # pragma: no cover (not on Linux)
        return None


def check_kept_memory(settings, n, n_test, p):
    """Refuse, before anything runs, a fit whose kept draws alone cannot fit
    in this machine's memory (``ndpost=10**9``): otherwise the sampler runs
    for hours and then fails to allocate. The estimate is a lower bound
    (1-byte tree indices, float32 values, no copies)."""
    memory = _physical_memory()
    if memory is None:
        return
    heap = 2**settings.maxdepth
    per_draw = {
        'trees': settings.ntree * (heap + 4 * heap),
        'yhat_train': 4 * n if settings.save_yhat_train else 0,
        'yhat_test': 4 * n_test,
        'varcount': 4 * p,
    }
    total = settings.ndpost * sum(per_draw.values())
    if total > memory:
        parts = ', '.join(f'{k} {v:,} B' for k, v in per_draw.items() if v)
        msg = (
            f'ndpost={settings.ndpost:,} kept draws need at least {total / 2**30:,.0f} GiB '
            f'({parts} per draw), more than the {memory / 2**30:,.0f} GiB of memory of this '
            'machine: lower ndpost, or pass '
            'save_yhat_train=False to keep no draws at the training points'
        )
        raise ValueError(msg)
