"""Checks of a fit file's contents before `bartz.io.load` builds the fit.

Each check raises `Invalid` with a message that starts with the field;
`load` prefixes the file. The checks are those of the `bartz.io` docstring.
"""

import math
from collections.abc import Iterable

import numpy as np

from bartz.api._fitfile import SPECIAL
from bartz.forest import grove
from bartz.prep import encoding, priors
from bartz.sampler.moves import MOVE_NAMES

__all__ = ['Invalid', 'check_contents', 'is_int']


class Invalid(Exception):  # noqa: N818
    """A field of the file is out of range or inconsistent (the message names it)."""


# scalar attributes: name -> (rule, whether a fit without it is refused)
_COUNT, _FINITE, _POSITIVE, _FINITE_OR_NONE = 'count', 'finite', 'positive', 'finite or None'
_SCALAR_RULES = {
    'type': ('type', True),
    'ndpost': (_COUNT, True),
    'ntree': (_COUNT, True),
    'chains': (_COUNT, True),
    '_n': (_COUNT, True),
    'offset': (_FINITE, True),
    '_scale': (_POSITIVE, True),
    'sigest': (_FINITE_OR_NONE, False),
    'k': (_FINITE, False),
    'power': (_FINITE, False),
    'base': (_FINITE, False),
    'sigdf': (_FINITE, False),
    'sigquant': (_FINITE, False),
    'lambda_': (_FINITE_OR_NONE, False),
    'tau_num': (_FINITE, False),
    'sigma_mean': (_FINITE, False),
    'elapsed': (_FINITE, False),
    'accept_rate': ('rates', False),
    'moves': ('moves', False),
    'nkeep': ('nkeep', False),
}
# the rows of the draws that R's nkeep counts thin (`bartz.wbart`): size name -> key of ``nkeep``
_KEPT_ROWS = {'ndpost_train': 'train', 'ndpost_test': 'test', 'ndpost_trees': 'treedraws'}

# array attributes: name -> (shape in named sizes, dtype kinds, range, whether None is allowed)
_ARRAY_RULES = {
    'yhat_train': (('ndpost_train', 'n'), 'f', None, True),
    'yhat_train_mean': (('n',), 'f', None, False),
    'yhat_test': (('ndpost_test', 'n_test'), 'f', None, True),
    'yhat_test_mean': (('n_test',), 'f', None, True),
    'prob_train': (('ndpost_train', 'n'), 'f', (0, 1), True),
    'prob_train_mean': (('n',), 'f', (0, 1), False),
    'prob_test': (('ndpost_test', 'n_test'), 'f', (0, 1), True),
    'prob_test_mean': (('n_test',), 'f', (0, 1), True),
    'sigma': (None, 'f', (0, math.inf), False),  # shape depends on chains: see _sigma_shape
    'sigma_': (('ndpost_trees',), 'f', (0, math.inf), False),
    'varcount': (('ndpost_trees', 'p_enc'), 'iu', (0, math.inf), False),
    'varcount_mean': (('p_enc',), 'f', (0, math.inf), False),
    'varprob': (('ndpost_trees', 'p_enc'), 'f', (0, 1), False),
    'varprob_mean': (('p_enc',), 'f', (0, 1), False),
    'numcut': (('p_kept',), 'iu', None, False),
    'xinfo': (None, 'f', None, False),  # checked equal to splits.splits
    'rm_const': (None, 'iu', None, False),  # checked in _check_rm_const
}

_TEST_ARRAYS = ('yhat_test', 'yhat_test_mean', 'prob_test', 'prob_test_mean')


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_contents(header: dict, arrays: dict, attributes: Iterable[str]) -> encoding.Encoding:
    """Check the file's fields against each other and against the names of
    the fit's `attributes`; return its encoding, or raise `Invalid`."""
    scalars = header['scalars']
    attributes = set(attributes)
    _check_names(header, arrays, attributes)
    missing = set(header['missing'])  # left None by a Ctrl-C (`bartz.api.fit.STAGES`)
    unknown = sorted(missing - attributes)
    if unknown:
        msg = f'header.missing names unknown attributes {unknown}'
        raise Invalid(msg)
    for name, (rule, required) in _SCALAR_RULES.items():
        if name in missing and scalars.get(name, 0) is None:
            continue
        if name in scalars:
            _check_scalar(name, scalars[name], rule)
        elif required:
            msg = f'the attribute {name} is missing (not in header.scalars)'
            raise Invalid(msg)
    ndpost, ntree, chains = scalars['ndpost'], scalars['ntree'], scalars['chains']
    if ndpost % chains:
        msg = f'ndpost ({ndpost}) must be a multiple of chains ({chains}): each chain keeps ndpost / chains draws'
        raise Invalid(msg)
    enc = _check_encoding(header['encoding'])
    kept = _check_kept(arrays['kept'], enc)
    max_split = _check_splits(arrays['splits.splits'], arrays['splits.max_split'], int(kept.sum()))
    rows = _kept_rows(scalars.get('nkeep'), ndpost, chains)
    _check_trace(arrays, rows['ndpost_trees'], ntree, max_split)
    sizes = {
        **rows,
        'ndpost': ndpost,
        'n': scalars['_n'],
        'n_test': _num_test(arrays),
        'p_enc': enc.num_encoded,
        'p_kept': max_split.size,
    }
    for name, rule in _ARRAY_RULES.items():
        if name in arrays:
            _check_array(name, arrays[name], rule, sizes, chains)
        elif name in scalars and scalars[name] is not None:
            msg = f'{name} must be an array, got {scalars[name]!r}'
            raise Invalid(msg)
        elif name in scalars and not rule[3] and name not in missing:
            msg = f'{name} must be an array, got None'
            raise Invalid(msg)
    given = [name for name in _TEST_ARRAYS if name in arrays]
    none = [name for name in _TEST_ARRAYS if scalars.get(name, 0) is None]
    if given and none:
        msg = f'{none[0]} is None (no x_test) but {given[0]} is an array'
        raise Invalid(msg)
    if not priors.OUTCOME_TYPES[scalars['type']].binary and 'sigma_' not in arrays and 'sigma_' not in missing:
        msg = f"sigma_ is missing: a fit of type {scalars['type']!r} needs its draws of sigma to predict"
        raise Invalid(msg)
    if 'numcut' in arrays and not np.array_equal(arrays['numcut'], max_split):
        msg = 'numcut differs from splits.max_split (the numbers of cut-points the trees use)'
        raise Invalid(msg)
    if 'xinfo' in arrays and not np.array_equal(arrays['xinfo'], arrays['splits.splits']):
        msg = 'xinfo differs from splits.splits (the cut-points the trees use)'
        raise Invalid(msg)
    if 'rm_const' in arrays:
        _check_rm_const(arrays['rm_const'], enc.num_encoded)
    _check_frames(header['frames'], arrays, enc)
    return enc


def _check_names(header: dict, arrays: dict, attributes: set) -> None:
    known = attributes - set(SPECIAL)
    stored = {'trace.var_tree', 'trace.split_tree', 'trace.leaf_tree', 'splits.splits', 'splits.max_split', 'kept'}
    missing = sorted(stored - set(arrays))
    if missing:
        msg = f'the arrays {missing} are missing (not in header.arrays)'
        raise Invalid(msg)
    seen = {}
    for where, names in (
        ('header.scalars', list(header['scalars'])),
        ('header.arrays', [a for a in arrays if a not in stored]),
        ('header.unset', header['unset']),
    ):
        for name in names:
            if name not in known:
                msg = f'{where} names an unknown attribute {name!r}'
                raise Invalid(msg)
            if name in seen:
                msg = f'the attribute {name!r} is in both {seen[name]} and {where}'
                raise Invalid(msg)
            seen[name] = where


def _kept_rows(nkeep, ndpost: int, chains: int) -> dict:
    """The rows of each kind of draw: ``ndpost``, or what R's nkeep counts kept."""
    nkeep = nkeep or {}
    rows = {size: nkeep.get(key, ndpost) for size, key in _KEPT_ROWS.items()}
    for size, value in rows.items():
        if not is_int(value) or not 0 <= value <= ndpost or value % chains:
            msg = (
                f'nkeep[{_KEPT_ROWS[size]!r}] must be a multiple of chains ({chains}) in [0, ndpost = {ndpost}], '
                f'got {value!r}'
            )
            raise Invalid(msg)
    return rows


def _check_scalar(name: str, value, rule: str) -> None:
    if value is None and rule == 'nkeep':
        return
    if rule == 'nkeep':
        if not isinstance(value, dict) or not set(value) <= set(_KEPT_ROWS.values()):
            msg = f'{name} must map some of {sorted(_KEPT_ROWS.values())} to row counts, got {value!r}'
            raise Invalid(msg)
    elif rule == 'type':
        if not isinstance(value, str) or value not in priors.OUTCOME_TYPES:
            names = ', '.join(repr(t) for t in priors.OUTCOME_TYPES)
            msg = f'type must be one of {names}, got {value!r}'
            raise Invalid(msg)
    elif rule == _COUNT:
        if not is_int(value) or value < 1:
            msg = f'{name} must be a positive integer, got {value!r}'
            raise Invalid(msg)
    elif rule == 'moves':
        if value is None or value == 'R':
            return
        if not isinstance(value, dict) or not set(value) <= set(MOVE_NAMES) or not all(
            _is_number(v) and math.isfinite(v) and 0 <= v <= 1 for v in value.values()
        ):
            msg = f"{name} must be 'R' or map move names to probabilities in [0, 1], got {value!r}"
            raise Invalid(msg)
    elif rule == 'rates':
        if not isinstance(value, dict) or not all(
            _is_number(v) and math.isfinite(v) and 0 <= v <= 1 for v in value.values()
        ):
            msg = f'{name} must map move names to rates in [0, 1], got {value!r}'
            raise Invalid(msg)
    elif value is None and rule == _FINITE_OR_NONE:
        return
    elif not _is_number(value) or not math.isfinite(value) or (rule == _POSITIVE and value <= 0):
        what = {_FINITE: 'a finite number', _POSITIVE: 'a finite positive number'}.get(rule, 'a finite number or null')
        msg = f'{name} must be {what}, got {value!r}'
        raise Invalid(msg)


def _check_encoding(d: dict) -> encoding.Encoding:
    named = d.get('named')
    columns = d.get('columns')
    if not isinstance(named, bool) or not isinstance(columns, list):
        msg = 'encoding must have "named" (true or false) and "columns" (a list)'
        raise Invalid(msg)
    keys = {'name', 'kind', 'levels', 'missing', 'fill'}
    for i, c in enumerate(columns):
        field = f'encoding.columns[{i}]'
        if not isinstance(c, dict) or not keys <= set(c):
            msg = f'{field} must be an object with the keys {sorted(keys)}, got {c!r}'
            raise Invalid(msg)
        if not (isinstance(c['name'], str) if named else c['name'] is None):
            msg = f'{field}.name must be {"a string" if named else "null (x_train was an array)"}, got {c["name"]!r}'
            raise Invalid(msg)
        if not isinstance(c['levels'], list) or not all(
            isinstance(v, str | int | float | bool) for v in c['levels']
        ):
            msg = f'{field}.levels must be a list of strings or numbers, got {c["levels"]!r}'
            raise Invalid(msg)
        if not isinstance(c['missing'], bool):
            msg = f'{field}.missing must be true or false, got {c["missing"]!r}'
            raise Invalid(msg)
        fill = c['fill']
        finite = _is_number(fill) and math.isfinite(fill)
        if c['kind'] == 'numeric':
            ok = finite and not c['levels']
        elif c['kind'] == 'categorical':
            ok = finite and fill == int(fill) and 0 <= fill < len(c['levels'])
        else:
            msg = f"{field}.kind must be 'numeric' or 'categorical', got {c['kind']!r}"
            raise Invalid(msg)
        if not ok:
            msg = (
                f'{field}.fill must be a finite number (numeric column, no levels) or the index of a level '
                f'(categorical column, {len(c["levels"])} levels), got {fill!r}'
            )
            raise Invalid(msg)
    try:
        return encoding.Encoding.from_dict(d)
    except (KeyError, TypeError, ValueError) as e:
        msg = f'encoding is not valid: {e}'
        raise Invalid(msg) from None


def _check_kept(kept: np.ndarray, enc: encoding.Encoding) -> np.ndarray:
    if kept.dtype != bool or kept.shape != (enc.num_model,):
        msg = (
            f'kept must be a boolean array of shape ({enc.num_model},), one per model column of the encoding, '
            f'got {kept.dtype} of shape {kept.shape}'
        )
        raise Invalid(msg)
    return kept


def _check_splits(splits: np.ndarray, max_split: np.ndarray, p_kept: int) -> np.ndarray:
    if splits.dtype != np.float32 or splits.ndim != 2 or splits.shape[0] != p_kept or splits.shape[1] < 1:
        msg = (
            f'splits.splits must be float32 of shape ({p_kept}, max_K), one row per kept model column, '
            f'got {splits.dtype} of shape {splits.shape}'
        )
        raise Invalid(msg)
    width = splits.shape[1]
    if max_split.dtype.kind not in 'iu' or max_split.shape != (p_kept,):
        msg = (
            f'splits.max_split must be integers of shape ({p_kept},), '
            f'got {max_split.dtype} of shape {max_split.shape}'
        )
        raise Invalid(msg)
    bad = np.flatnonzero((max_split < 0) | (max_split > width))
    if bad.size:
        j = bad[0]
        msg = f'splits.max_split[{j}] is {max_split[j]}, outside 0..{width} (the width of splits.splits)'
        raise Invalid(msg)
    used = np.arange(width) < max_split[:, None]
    with np.errstate(invalid='ignore'):
        bad = np.argwhere(used & ~np.isfinite(splits))
        if bad.size:
            j, s = bad[0]
            msg = f'splits.splits[{j}, {s}] is {splits[j, s]}: cut-point {s} of predictor {j} must be finite'
            raise Invalid(msg)
        unsorted = np.argwhere(used[:, 1:] & (splits[:, 1:] < splits[:, :-1]))
        if unsorted.size:
            j, s = unsorted[0]
            msg = (
                f'splits.splits[{j}]: the cut-points of predictor {j} are not sorted '
                f'({splits[j, s]} before {splits[j, s + 1]})'
            )
            raise Invalid(msg)
        # binning counts the cut-points as the entries below +inf
        padding = np.argwhere(~used & (splits != np.inf))
    if padding.size:
        j, s = padding[0]
        msg = (
            f'splits.splits[{j}, {s}] is {splits[j, s]}: predictor {j} has {max_split[j]} cut-points '
            '(splits.max_split), so the rest of its row must be +inf'
        )
        raise Invalid(msg)
    return max_split


def _check_trace(arrays: dict, ndpost: int, ntree: int, max_split: np.ndarray) -> None:
    """The saved forests: `ndpost` draws (those kept by ``nkeep['treedraws']`` if thinned)."""
    var, split, leaf = (arrays[f'trace.{f}'] for f in ('var_tree', 'split_tree', 'leaf_tree'))
    if leaf.dtype != np.float32 or leaf.ndim != 3 or leaf.shape[:2] != (ndpost, ntree):
        msg = (
            f'trace.leaf_tree must be float32 of shape (ndpost, ntree, H) = ({ndpost}, {ntree}, H), '
            f'got {leaf.dtype} of shape {leaf.shape}'
        )
        raise Invalid(msg)
    heap_size = leaf.shape[2]
    try:
        grove.heap_depth(heap_size)
    except ValueError as e:
        msg = f'trace.leaf_tree: {e}'
        raise Invalid(msg) from None
    for name, a in (('trace.var_tree', var), ('trace.split_tree', split)):
        if a.dtype.kind != 'u' or a.shape != (ndpost, ntree, heap_size // 2):
            msg = (
                f'{name} must be unsigned integers of shape (ndpost, ntree, H/2) = '
                f'({ndpost}, {ntree}, {heap_size // 2}), got {a.dtype} of shape {a.shape}'
            )
            raise Invalid(msg)
    # node 0 of the heap is unused: only nodes 1 .. H/2 - 1 can be internal
    internal = split != 0
    internal[..., 0] = False
    p_kept = max_split.size
    bad = _first_true(internal & (var >= p_kept))
    if bad is not None:
        d, t, k = bad
        msg = (
            f'trace.var_tree refers to predictor {var[d, t, k]} (draw {d}, tree {t}, node {k}), '
            f'but the file has {p_kept} predictors'
        )
        raise Invalid(msg)
    if p_kept:
        limit = max_split[np.minimum(var, p_kept - 1)]
        bad = _first_true(internal & (split > limit))
        if bad is not None:
            d, t, k = bad
            msg = (
                f'trace.split_tree refers to cut-point {split[d, t, k]} of predictor {var[d, t, k]} '
                f'(draw {d}, tree {t}, node {k}), but that predictor has {limit[d, t, k]} cut-points'
            )
            raise Invalid(msg)
    bad = _first_true(~np.isfinite(leaf))
    if bad is not None:
        d, t, k = bad
        msg = (
            f'trace.leaf_tree has the value {leaf[d, t, k]} (draw {d}, tree {t}, node {k}); '
            'leaf values must be finite'
        )
        raise Invalid(msg)


def _first_true(mask: np.ndarray) -> tuple[int, ...] | None:
    """Index of the first True of `mask`, or None."""
    if not mask.any():
        return None
    return tuple(int(i) for i in np.unravel_index(np.argmax(mask), mask.shape))


def _num_test(arrays: dict) -> int | None:
    for name in _TEST_ARRAYS:
        if name in arrays and arrays[name].ndim >= 1:
            return int(arrays[name].shape[-1])
    return None


def _sigma_shape(value: np.ndarray, ndpost: int, chains: int) -> str | None:
    """What is wrong with the shape of ``sigma`` (None if nothing): ``(nskip
    + ndpost,)`` for one chain, ``(nskip + ndpost / chains, chains)`` for more."""
    per_chain = ndpost // chains
    if chains == 1 and (value.ndim != 1 or value.shape[0] < ndpost):
        return f'(nskip + ndpost,) with ndpost = {ndpost}'
    if chains > 1 and (value.ndim != 2 or value.shape[1] != chains or value.shape[0] < per_chain):
        return f'(nskip + ndpost / chains, chains) with ndpost / chains = {per_chain}, chains = {chains}'
    return None


def _check_array(name: str, value: np.ndarray, rule, sizes: dict, chains: int) -> None:
    shape, kinds, bounds, _ = rule
    if value.dtype.kind not in kinds:
        what = 'floats' if kinds == 'f' else 'integers'
        msg = f'{name} must be {what}, got {value.dtype}'
        raise Invalid(msg)
    if name == 'sigma':
        expected = _sigma_shape(value, sizes['ndpost'], chains)
        if expected is not None:
            msg = f'sigma has shape {value.shape}, expected {expected}'
            raise Invalid(msg)
    elif shape is not None:
        expected = tuple(sizes[s] for s in shape)
        if value.shape != expected:
            named = ', '.join(f'{s} = {sizes[s]}' for s in shape)
            msg = f'{name} has shape {value.shape}, expected ({", ".join(shape)},) with {named}'
            raise Invalid(msg)
    if value.dtype.kind == 'f' and name != 'xinfo':  # (xinfo is +inf padded)
        _check_values(name, value, lambda v: ~np.isfinite(v), 'it must be finite')
    if bounds is not None:
        low, high = bounds
        with np.errstate(invalid='ignore'):
            _check_values(name, value, lambda v: (v < low) | (v > high), f'outside [{low}, {high}]')


_CHUNK = 2**20


def _check_values(name: str, value: np.ndarray, is_bad, what: str) -> None:
    """Refuse `value` if ``is_bad`` holds anywhere, scanning chunks so that
    the temporaries stay small next to a large array (``yhat_train``)."""
    flat = value.reshape(-1)
    for start in range(0, flat.size, _CHUNK):
        bad = is_bad(flat[start : start + _CHUNK])
        if bad.any():
            i = start + int(np.argmax(bad))
            index = tuple(int(j) for j in np.unravel_index(i, value.shape))
            msg = f'{name} has the value {flat[i]} at {list(index)}; {what}'
            raise Invalid(msg)


def _check_rm_const(rm_const: np.ndarray, p_enc: int) -> None:
    if rm_const.ndim != 1 or np.any(rm_const < 0) or np.any(rm_const >= p_enc) or np.any(np.diff(rm_const) <= 0):
        msg = f'rm_const must be increasing indices of the {p_enc} encoded columns, got {rm_const.tolist()}'
        raise Invalid(msg)


def _check_frames(frames: dict, arrays: dict, enc: encoding.Encoding) -> None:
    labels = enc.encoded_names
    for name, kind in frames.items():
        if name not in arrays:
            msg = f'header.frames names {name!r}, which is not an array of the file'
            raise Invalid(msg)
        if kind not in ('DataFrame', 'Series'):
            msg = f"header.frames[{name!r}] must be 'DataFrame' or 'Series', got {kind!r}"
            raise Invalid(msg)
        if labels is None:
            msg = f'header.frames makes {name} a {kind}, but x_train was not a DataFrame (no column names)'
            raise Invalid(msg)
        value = arrays[name]
        if value.ndim != (2 if kind == 'DataFrame' else 1) or value.shape[-1] != len(labels):
            msg = f'{name} of shape {value.shape} cannot be a {kind} with the {len(labels)} encoded column names'
            raise Invalid(msg)
