"""Memory-bounded batching of a jittable function along one axis."""

import functools
import math
import warnings
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax import lax
from jax import numpy as jnp

__all__ = ['autobatch']


class _Axis:
    """Wrapper that makes an axis spec (an int or None) a pytree leaf."""

    __slots__ = ('value',)

    def __init__(self, value):
        self.value = value


def _broadcast_prefix(prefix, tree, name):
    """Return the flat list of axis specs of the leaves of `tree`.

    `prefix` is a tree prefix of `tree`, as `in_axes`/`out_axes` of `jax.vmap`.
    """
    try:
        wrapped = jax.tree.map(
            lambda axis, subtree: jax.tree.map(lambda _: _Axis(axis), subtree),
            prefix,
            tree,
            is_leaf=lambda x: x is None,
        )
    except ValueError as error:
        raise ValueError(
            f'{name} must be a tree prefix of the corresponding values; '
            f'{name}={prefix!r} does not match the structure '
            f'{jax.tree.structure(tree)}'
        ) from error
    return [ax.value for ax in jax.tree.leaves(wrapped)]


def _normalize_axis(axis, ndim, name):
    """Check an axis spec and make it non-negative."""
    if axis is None:
        return None
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer):
        raise ValueError(f'{name} must contain ints or None, got {axis!r}')
    if not -ndim <= axis < ndim:
        raise ValueError(f'{name} contains axis {axis}, out of range for an array with {ndim} dimensions')
    return int(axis) % ndim


def _min_value(dtype):
    if jnp.issubdtype(dtype, jnp.bool_):
        return False
    if jnp.issubdtype(dtype, jnp.inexact):
        return -np.inf
    return jnp.iinfo(dtype).min


def _max_value(dtype):
    if jnp.issubdtype(dtype, jnp.bool_):
        return True
    if jnp.issubdtype(dtype, jnp.inexact):
        return np.inf
    return jnp.iinfo(dtype).max


# ufunc name -> (reduction along an axis, identity as a function of the dtype)
_REDUCTIONS = {
    'add': (jnp.sum, lambda dtype: 0),
    'multiply': (jnp.prod, lambda dtype: 1),
    # with `initial`, to reduce also empty arrays
    'maximum': (lambda x, axis: jnp.max(x, axis=axis, initial=_min_value(x.dtype)), _min_value),
    'minimum': (lambda x, axis: jnp.min(x, axis=axis, initial=_max_value(x.dtype)), _max_value),
    'logical_and': (jnp.all, lambda dtype: True),
    'logical_or': (jnp.any, lambda dtype: False),
}


def _reduction_name(reduce_ufunc):
    """Identify a supported ufunc (jax.numpy or numpy) by name."""
    for name in _REDUCTIONS:
        if reduce_ufunc is getattr(jnp, name) or reduce_ufunc is getattr(np, name):
            return name
    supported = ', '.join(f'jnp.{name}' for name in _REDUCTIONS)
    raise ValueError(f'reduce_ufunc must be one of {supported} (or the numpy equivalent), got {reduce_ufunc!r}')


def _accumulation_dtype(name, dtype):
    """Dtype of the reduction of an array of `dtype`, as `jnp.sum` & co. give."""
    reduce_fn, _ = _REDUCTIONS[name]
    return jax.eval_shape(functools.partial(reduce_fn, axis=0), jax.ShapeDtypeStruct((0,), dtype)).dtype


def _abstract(x, shape=None):
    """A ShapeDtypeStruct like `x` (keeping its varying manual axes), optionally reshaped."""
    aval = jax.typeof(x)
    return jax.ShapeDtypeStruct(
        aval.shape if shape is None else shape,
        aval.dtype,
        manual_axis_type=getattr(aval, 'manual_axis_type', None),
    )


def _resize_args(args, axes, length):
    """Abstract arguments with the batched axes resized to `length`."""
    leaves, treedef = jax.tree.flatten(args)
    out = []
    for x, ax in zip(leaves, axes, strict=True):
        if ax is None:
            out.append(x)
        else:
            shape = list(np.shape(x))
            shape[ax] = length
            out.append(_abstract(x, tuple(shape)))
    return jax.tree.unflatten(treedef, out)


def _with_length(shapes, oaxes, length):
    """Output shapes with the batched axes set to `length`."""
    leaves, treedef = jax.tree.flatten(shapes)
    out = []
    for s, ax in zip(leaves, oaxes, strict=True):
        ax = _normalize_axis(ax, len(s.shape), 'out_axes')
        shape = list(s.shape)
        shape[ax] = length
        out.append(jax.ShapeDtypeStruct(tuple(shape), s.dtype))
    return jax.tree.unflatten(treedef, out)


@dataclass(frozen=True)
class _Plan:
    """Static description of how to cut the work; hashable, used as a jit static argument."""

    in_axes: tuple[Any, ...]  # per flat input leaf: axis or None
    out_axes: tuple[int, ...]  # per flat output leaf of func
    out_treedef: Any
    out_shapes: tuple[tuple[int, ...], ...]  # full (unbatched, unreduced) output shapes of func
    out_dtypes: tuple[Any, ...]
    length: int  # length of the batched axis
    batch_size: int
    nbatches: int  # number of calls of func
    overflow: bool  # one element alone exceeds the budget
    elem_nbytes: int  # input + output bytes per element of the axis


def autobatch(
    func,
    max_io_nbytes,
    in_axes=0,
    out_axes=0,
    *,
    reduce_ufunc=None,
    return_nbatches=False,
    warn_on_overflow=True,
    result_shape_dtype=None,
):
    """Batch a function so that its inputs and outputs fit a memory budget.

    Wrap `func`, which is batchable along an axis (as a `jax.vmap`-ped function
    is: applying it to a slice of the axis gives the same slice of the output),
    into a function that computes the same result, but calls `func` on
    consecutive slices of the axis, each small enough that the bytes of its
    batched inputs and outputs stay within `max_io_nbytes`. The slices are
    looped over with `jax.lax.fori_loop`, so the compiled code does not grow
    with the number of batches, and the memory of temporaries inside `func`
    scales with the batch instead of the whole axis.

    Parameters
    ----------
    func : callable
        A jittable function of positional array (pytree) arguments that
        returns a pytree of arrays.
    max_io_nbytes : int
        Maximum number of bytes of the batched inputs plus the (unreduced)
        outputs of one call of `func`.
    in_axes : int, None, or pytree
        Batched axis of each argument, as in `jax.vmap`: an int or None
        applies to all arguments; a tuple with one entry per positional
        argument, each a tree prefix of the argument. None passes the
        argument whole to every call; its bytes are not counted in the
        budget. Negative axes count from the end. All batched arrays must
        have the same length along their axis, and at least one array must
        be batched.
    out_axes : int or pytree
        Batched axis of each output of `func`, a tree prefix of the output.
        The outputs must have the same length as the inputs along it.
    reduce_ufunc : jax.numpy.ufunc, optional
        If given, one of `jnp.add`, `jnp.multiply`, `jnp.maximum`,
        `jnp.minimum`, `jnp.logical_and`, `jnp.logical_or` (or the numpy
        ufuncs of the same name). The outputs of `func` are then reduced
        along their out axis, which disappears from the result, and the
        reduction is accumulated across batches, so the full output is
        never materialized. The accumulator is in the dtype that `jnp.sum`,
        `jnp.prod`, `jnp.max`, ... would return, e.g., int8 outputs are
        summed in int32 (with 32-bit JAX). An empty axis gives the identity
        of the ufunc (for `maximum`, ``-inf`` for floats and the minimum
        integer for ints).
    return_nbatches : bool, default False
        If True, the returned function also returns the number of calls of
        `func`, as a Python int.
    warn_on_overflow : bool, default True
        If True, warn when a single element of the axis exceeds the budget;
        in that case `func` is anyway called on one element at a time.
    result_shape_dtype : pytree of jax.ShapeDtypeStruct, optional
        Shapes and dtypes of the output of `func` applied to the full,
        unbatched arguments (before any reduction), as `jax.eval_shape`
        would give. If not given, `jax.eval_shape` is used, which traces
        `func` once more.

    Returns
    -------
    batched_func : callable
        A function with the same positional arguments as `func`, that
        returns the same outputs (reduced along the out axes if
        `reduce_ufunc` is given), or the pair ``(outputs, nbatches)`` if
        `return_nbatches` is True. It is jit-compiled, and can be called on
        tracers (under `jax.jit`, `jax.vmap`, `jax.shard_map`).

    Notes
    -----
    Let ``n`` be the length of the axis and ``b`` the number of bytes of
    batched inputs and outputs per element of the axis. The number of calls
    of `func` is the smallest that respects the budget,
    ``k = ceil(n / max(1, floor(max_io_nbytes / b)))``, and each call takes
    ``ceil(n / k)`` elements, so any ``n`` (also a prime) uses ``k`` calls of
    about the same size. The last call is shifted back to end at ``n``, so
    it overlaps the previous one by fewer than ``k`` elements, which are
    computed twice: a plain output gets the same values written twice, a
    reduction masks them out. This keeps a single call site of `func`, in a
    single loop. If ``k`` is 1, `func` is called directly on the whole
    arguments. If ``n`` is 0, ``nbatches`` is 0 and the result is empty, or
    the identity of the ufunc. `func` is never called on an empty slice:
    the loop carry is typed with `jax.eval_shape` (and, inside
    `jax.shard_map`, given the varying manual axes of `func`'s outputs with
    `jax.lax.pcast`).

    The budget counts only the batched inputs and outputs: temporaries inside
    `func` are assumed proportional to them. Arguments with axis None, the
    full output buffer (which is written in place, slice by slice), and the
    accumulator of a reduction are not counted. Under `jax.vmap` the budget
    applies to each vmapped element separately, because the batching plan
    is computed from the shapes `func` sees.

    With ``reduce_ufunc=jnp.add`` on floats, the sum is accumulated batch by
    batch, so it may differ from the unbatched sum by rounding.

    The batching plan depends only on the shapes and dtypes of the
    arguments, and is cached per shape.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from bartz.jaxext import autobatch
    >>> x = jnp.arange(10_007, dtype=jnp.float32)
    >>> f = autobatch(jnp.sin, max_io_nbytes=8000, return_nbatches=True)
    >>> y, nbatches = f(x)
    >>> bool(jnp.all(y == jnp.sin(x))), nbatches
    (True, 11)

    Sum of squares over the first axis, 1000 rows at a time:

    >>> g = autobatch(lambda x: x**2, 8000, reduce_ufunc=jnp.add)
    >>> g(jnp.ones((10_000, 2)))
    Array([10000., 10000.], dtype=float32)
    """
    max_io_nbytes = _check_budget(max_io_nbytes)
    reduction = None if reduce_ufunc is None else _reduction_name(reduce_ufunc)
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)

    plans = {}

    @functools.partial(jax.jit, static_argnums=0)
    def run(plan, *args):
        return _run_plan(func, reduction, plan, args)

    def batched_func(*args):
        key = (jax.tree.structure(args), tuple(jax.typeof(x) for x in jax.tree.leaves(args)))
        plan = plans.get(key)
        if plan is None:
            plan = plans[key] = _make_plan(func, args, in_axes, out_axes, result_shape_dtype, max_io_nbytes)
        if plan.overflow and warn_on_overflow:
            warnings.warn(
                f'autobatch: one element of the batched axis takes {plan.elem_nbytes} bytes of inputs and '
                f'outputs, more than max_io_nbytes={max_io_nbytes}; running one element per batch',
                stacklevel=2,
            )
        out = run(plan, *args)
        return (out, plan.nbatches) if return_nbatches else out

    functools.update_wrapper(batched_func, func, assigned=('__module__', '__name__', '__qualname__', '__doc__'))
    return batched_func


def _check_budget(max_io_nbytes):
    """`max_io_nbytes` as an int, checked to be a positive integer."""
    if isinstance(max_io_nbytes, bool) or not isinstance(max_io_nbytes, int | np.integer) or max_io_nbytes <= 0:
        raise ValueError(f'max_io_nbytes must be a positive integer, got {max_io_nbytes!r}')
    return int(max_io_nbytes)


def _make_plan(func, args, in_axes, out_axes, result_shape_dtype, max_io_nbytes):
    """The `_Plan` of `func` on arguments of the shapes of `args`: the axes,
    the output types, and the batch size that fits `max_io_nbytes`."""
    in_leaves = jax.tree.leaves(args)
    axes, length = _input_axes(in_axes, args, in_leaves)
    out_leaves, out_treedef, oaxes = _output_axes(func, args, axes, length, out_axes, result_shape_dtype)
    elem = _elem_nbytes(in_leaves, axes, out_leaves, oaxes)
    batch_size, nbatches = _batch_size(length, elem, max_io_nbytes)
    return _Plan(
        in_axes=axes,
        out_axes=tuple(oaxes),
        out_treedef=out_treedef,
        out_shapes=tuple(tuple(s.shape) for s in out_leaves),
        out_dtypes=tuple(s.dtype for s in out_leaves),
        length=length,
        batch_size=batch_size,
        nbatches=nbatches,
        overflow=elem > max_io_nbytes,
        elem_nbytes=elem,
    )


def _input_axes(in_axes, args, in_leaves):
    """The batched axis of each flat input leaf (None: not batched), and the
    common length of the batched axes."""
    axes_prefix = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
    if len(axes_prefix) != len(args):
        raise ValueError(
            f'in_axes has {len(axes_prefix)} entries, but the function was called '
            f'with {len(args)} positional arguments'
        )
    axes = _broadcast_prefix(axes_prefix, args, 'in_axes')
    axes = tuple(_normalize_axis(ax, np.ndim(x), 'in_axes') for ax, x in zip(axes, in_leaves, strict=True))

    lengths = {np.shape(x)[ax] for ax, x in zip(axes, in_leaves, strict=True) if ax is not None}
    if not lengths:
        raise ValueError('in_axes must batch at least one array argument, but all arguments have axis None')
    if len(lengths) > 1:
        raise ValueError(f'the batched arguments have different lengths along their in_axes: {sorted(lengths)}')
    (length,) = lengths
    return axes, length


def _output_axes(func, args, axes, length, out_axes, result_shape_dtype):
    """The flat output types of `func` on the whole arguments, their tree
    structure and their batched axes, checked to have the inputs' length."""
    if result_shape_dtype is not None:
        shapes = result_shape_dtype
    elif length > 0:
        shapes = jax.eval_shape(func, *args)
    else:
        # never trace func on an empty axis (it may reshape with -1 or divide
        # by the length): type it on one element, then make the axis empty
        one = jax.eval_shape(func, *_resize_args(args, axes, 1))
        shapes = _with_length(one, _broadcast_prefix(out_axes, one, 'out_axes'), 0)
    out_leaves, out_treedef = jax.tree.flatten(shapes)
    oaxes = _broadcast_prefix(out_axes, shapes, 'out_axes')
    oaxes = [_normalize_axis(ax, len(s.shape), 'out_axes') for ax, s in zip(oaxes, out_leaves, strict=True)]
    if any(ax is None for ax in oaxes):
        raise ValueError('out_axes must not contain None: every output must be batched')
    for ax, s in zip(oaxes, out_leaves, strict=True):
        if s.shape[ax] != length:
            raise ValueError(
                f'an output of func has length {s.shape[ax]} along its out axis {ax} (shape {s.shape}), '
                f'but the batched inputs have length {length}'
            )
    return out_leaves, out_treedef, oaxes


def _elem_nbytes(in_leaves, axes, out_leaves, oaxes):
    """Bytes of the batched inputs and of the outputs per element of the axis."""

    def per_elem(shape, dtype, ax):
        return math.prod(shape[:ax] + shape[ax + 1 :]) * dtype.itemsize

    elem = sum(
        per_elem(np.shape(x), jax.typeof(x).dtype, ax) for ax, x in zip(axes, in_leaves, strict=True) if ax is not None
    )
    return elem + sum(per_elem(s.shape, s.dtype, ax) for ax, s in zip(oaxes, out_leaves, strict=True))


def _batch_size(length, elem, max_io_nbytes):
    """The size and number of batches: the fewest calls within the budget,
    each of about the same size (one element per call if one alone exceeds it)."""
    if length == 0:
        return 0, 0
    max_batch = max(1, max_io_nbytes // elem) if elem else length
    nbatches = -(-length // max_batch)
    return -(-length // nbatches), nbatches


def _run_plan(func, reduction, plan, args):
    """Compute `func` on `args` batch by batch as `plan` says (traced by the
    jitted ``run`` of `autobatch`)."""
    in_leaves, in_treedef = jax.tree.flatten(args)

    # Slice random keys as raw data, and wrap each slice into fresh keys:
    # `jax_debug_key_reuse` would see slicing a key array in a loop as
    # reusing it, although the slices are disjoint.
    key_impls = [
        jax.random.key_impl(x) if ax is not None and jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else None
        for ax, x in zip(plan.in_axes, in_leaves, strict=True)
    ]
    loop_leaves = [x if impl is None else jax.random.key_data(x) for x, impl in zip(in_leaves, key_impls, strict=True)]

    def call(start, size, leaves=None):
        """Apply func to the slice start:start+size of the axis (all if None); flat outputs."""
        if start is None:
            sliced = in_leaves
        else:
            sliced = [
                x if ax is None else lax.dynamic_slice_in_dim(x, start, size, ax)
                for ax, x in zip(plan.in_axes, loop_leaves if leaves is None else leaves, strict=True)
            ]
            sliced = [
                x if impl is None else jax.random.wrap_key_data(x, impl=impl)
                for x, impl in zip(sliced, key_impls, strict=True)
            ]
        out = func(*jax.tree.unflatten(in_treedef, sliced))
        out_leaves, out_treedef = jax.tree.flatten(out)
        if out_treedef != plan.out_treedef:
            raise ValueError(
                f'func returned a pytree with structure {out_treedef} on a batch, expected {plan.out_treedef}'
            )
        return out_leaves

    def batch_types():
        """Types of the outputs of one batch (varying manual axes included), by tracing only."""
        return jax.eval_shape(lambda leaves: call(0, plan.batch_size, leaves), loop_leaves)

    if reduction is None:
        outs = _run_map(plan, call, batch_types)
    else:
        outs = _run_reduce(plan, call, batch_types, reduction)
    return jax.tree.unflatten(plan.out_treedef, outs)


def _batch_start(plan, i):
    """Start of batch `i` along the axis.

    The batches have size ``plan.batch_size``; the last one is shifted back
    to end at the end of the axis, so it overlaps the previous one by fewer
    than ``plan.nbatches`` elements. This keeps a single call site of `func`
    in a single loop: a separate call for the remainder would let XLA
    (jaxlib 0.10.2) run it concurrently with the loop when the loop has one
    iteration and is inlined, doubling the temporary memory.
    """
    return jnp.minimum(i * plan.batch_size, plan.length - plan.batch_size)


def _like(x, t):
    """Give the array `x` the varying manual axes of the type `t` (inside
    `jax.shard_map` a loop carry must have the type of the loop body's output,
    and a constant initial value varies over no axis)."""
    mat = getattr(t, 'manual_axis_type', None)
    varying = () if mat is None else tuple(sorted(mat.varying))
    have = getattr(jax.typeof(x), 'manual_axis_type', None)
    have = frozenset() if have is None else have.varying
    missing = tuple(a for a in varying if a not in have)
    return lax.pcast(x, missing, to='varying') if missing else x


def _run_map(plan, call, batch_types):
    """Loop over batches, writing each output slice into a preallocated output."""
    if plan.nbatches == 1:
        return call(None, None)

    def write(outs, ys, start):
        return [
            lax.dynamic_update_slice_in_dim(o, y if y.dtype == o.dtype else y.astype(o.dtype), start, ax)
            for o, y, ax in zip(outs, ys, plan.out_axes, strict=True)
        ]

    def body(i, outs):
        start = _batch_start(plan, i)
        return write(outs, call(start, plan.batch_size), start)

    outs = [jnp.zeros(s, d) for s, d in zip(plan.out_shapes, plan.out_dtypes, strict=True)]
    if plan.length == 0:
        return outs
    outs = [_like(o, t) for o, t in zip(outs, batch_types(), strict=True)]
    return lax.fori_loop(0, plan.nbatches, body, outs)


def _run_reduce(plan, call, batch_types, reduction):
    """Loop over batches, accumulating the reduction of the outputs."""
    reduce_fn, identity = _REDUCTIONS[reduction]
    ufunc = getattr(jnp, reduction)
    acc_dtypes = [_accumulation_dtype(reduction, d) for d in plan.out_dtypes]

    def reduce_batch(ys, mask=None):
        out = []
        for y, ax, d in zip(ys, plan.out_axes, acc_dtypes, strict=True):
            if mask is not None:
                shape = [1] * y.ndim
                shape[ax] = mask.size
                y = jnp.where(mask.reshape(shape), y, jnp.asarray(identity(y.dtype), y.dtype))
            out.append(reduce_fn(y, axis=ax).astype(d))
        return out

    if plan.nbatches == 1:
        return reduce_batch(call(None, None))

    carry = [
        jnp.full(s[:ax] + s[ax + 1 :], identity(d), d)
        for s, ax, d in zip(plan.out_shapes, plan.out_axes, acc_dtypes, strict=True)
    ]
    if plan.length == 0:
        return carry
    carry = [_like(c, t) for c, t in zip(carry, batch_types(), strict=True)]
    overlap = plan.nbatches * plan.batch_size != plan.length

    def body(i, carry):
        start = _batch_start(plan, i)
        ys = call(start, plan.batch_size)
        # the shifted last batch must not count again what the previous one did
        mask = start + jnp.arange(plan.batch_size) >= i * plan.batch_size if overlap else None
        return [ufunc(c, r).astype(c.dtype) for c, r in zip(carry, reduce_batch(ys, mask), strict=True)]

    return lax.fori_loop(0, plan.nbatches, body, carry)
