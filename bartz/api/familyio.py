"""Saving and loading the fits of R's other model families (survival,
competing risks, recurrent events, multinomial, AFT), for `bartz.io`.

A family fit (`bartz.SurvBARTFit`, ...) is its own attributes around one or
more binary or continuous `bartz.BARTFit`. It is stored in one ``.npz``
file, written atomically as a fit file is, whose ``header`` is a JSON
object with

- ``format``: ``"bartz.family"``, ``format_version`` (`FORMAT_VERSION`),
  ``bartz_version``;
- ``class``: the name of the result class (one of `CLASSES`);
- ``attributes``: for each declared attribute, how it is stored: ``value``
  (a number, string, boolean or null, in the JSON), ``array`` (an entry of
  the archive), ``frame``/``series`` (an array entry and its labels),
  ``encoding`` (`bartz.encoding.Encoding.to_dict`), ``list``/``tuple``
  (the stored items), or ``fit``: a `bartz.BARTFit` stored under a prefix,
  its entries named ``<prefix>/<entry>`` with its own header
  ``<prefix>/header``, exactly as in a fit file;
- ``arrays``: the names of all the entries.

On loading, each inner `bartz.BARTFit` goes through every check of a fit
file (see `bartz.io`); the family's own arrays are restored as written.
"""

import importlib
import json

import numpy as np
import pandas as pd

from bartz._version import __version__
from bartz.api import _fitfile
from bartz.api.fit import BARTFit
from bartz.prep import encoding

__all__ = ['CLASSES', 'FORMAT_NAME', 'FORMAT_VERSION', 'Saveable', 'build', 'entries', 'is_family', 'save']

FORMAT_NAME = 'bartz.family'
FORMAT_VERSION = 1

# result class -> the module that defines it (imported only when a file names it)
CLASSES = {
    'SurvBARTFit': 'bartz.api.survival',
    'CriskBARTFit': 'bartz.api.crisk',
    'Crisk2BARTFit': 'bartz.api.crisk',
    'RecurBARTFit': 'bartz.api.recur',
    'MBARTFit': 'bartz.api.multinomial',
    'AFTFit': 'bartz.api.abart',
}


class Invalid(Exception):  # noqa: N818
    """A family file that does not hold what its header says."""


def is_family(obj) -> bool:
    """Whether ``obj`` is one of the result classes stored here."""
    name = type(obj).__name__
    return name in CLASSES and type(obj).__module__ == CLASSES[name]


def slots(cls) -> list[str]:
    """Every declared attribute of ``cls``, base classes first."""
    names = []
    for klass in reversed(cls.__mro__):
        names += [n for n in klass.__dict__.get('__slots__', ()) if n not in names]
    return names


def entries(obj) -> tuple[dict, dict]:
    """The header and the arrays that store the family fit ``obj``.

    Raises
    ------
    TypeError
        If an attribute holds something the format does not store (named).
    """
    cls = type(obj).__name__
    arrays, attributes = {}, {}
    for name in slots(type(obj)):
        key = name.lstrip('_') or name
        attributes[name] = _encode(getattr(obj, name, None), key, arrays, f'{cls}.{name}')
    header = {
        'format': FORMAT_NAME,
        'format_version': FORMAT_VERSION,
        'bartz_version': __version__,
        'class': cls,
        'attributes': attributes,
        'arrays': sorted(arrays),
    }
    return header, arrays


def _encode(value, key: str, arrays: dict, what: str) -> dict:
    if isinstance(value, BARTFit):
        header, fit_arrays = _fitfile.entries(value)
        arrays[f'{key}/header'] = np.frombuffer(json.dumps(header).encode(), np.uint8)
        arrays.update({f'{key}/{k}': v for k, v in fit_arrays.items()})
        return {'fit': key}
    if isinstance(value, pd.DataFrame):
        arrays[key] = _plain(value.to_numpy(), what)
        return {'frame': key, 'columns': _labels(value.columns, what), 'index': _labels(value.index, what)}
    if isinstance(value, pd.Series):
        arrays[key] = _plain(value.to_numpy(), what)
        return {'series': key, 'index': _labels(value.index, what), 'name': _label(value.name, what)}
    if isinstance(value, encoding.Encoding):
        return {'encoding': value.to_dict()}
    if isinstance(value, list | tuple):
        kind = 'list' if isinstance(value, list) else 'tuple'
        return {kind: [_encode(v, f'{key}.{i}', arrays, f'{what}[{i}]') for i, v in enumerate(value)]}
    if value is None or isinstance(value, bool | int | float | str | np.generic):
        return {'value': _fitfile._scalar(value, what)}
    if hasattr(value, '__array__'):  # numpy and jax arrays
        arrays[key] = _plain(np.asarray(value), what)
        return {'array': key}
    msg = f'{what} is a {type(value).__name__}, which the fit file format does not store'
    raise TypeError(msg)


def _plain(arr: np.ndarray, what: str) -> np.ndarray:
    if arr.dtype == object:
        msg = f'{what} is an array of Python objects, which the fit file format does not store'
        raise TypeError(msg)
    return arr


def _labels(index: pd.Index, what: str) -> list:
    return [_label(v, what) for v in index]


def _label(v, what):
    if v is None or isinstance(v, str | int | float | bool | np.generic):
        return _fitfile._scalar(v, what)
    msg = f'{what} has a label {v!r} that the fit file format does not store'
    raise TypeError(msg)


def build(header: dict, arrays: dict, read_fit):
    """The family fit of a file (header and entries as read).

    Parameters
    ----------
    header, arrays
        The file's header (decoded JSON) and all its entries.
    read_fit
        ``read_fit(header_blob, entries) -> BARTFit``: checks and builds an
        inner fit from its header bytes and its entries (prefix removed).

    Raises
    ------
    Invalid
        If the file does not hold what its header says.
    """
    version = header.get('format_version')
    if not isinstance(version, int) or version < 1:
        raise Invalid(f'the file has an invalid format version {version!r}')
    if version > FORMAT_VERSION:
        msg = (
            f'the file was written by a newer bartz ({header.get("bartz_version")}, family format version '
            f'{version}); this bartz reads versions up to {FORMAT_VERSION}: upgrade bartz'
        )
        raise Invalid(msg)
    name = header.get('class')
    if name not in CLASSES:
        raise Invalid(f'the file holds a {name!r}, not one of the fits bartz stores ({", ".join(CLASSES)})')
    cls = getattr(importlib.import_module(CLASSES[name]), name)
    attributes = header.get('attributes')
    if not isinstance(attributes, dict) or sorted(attributes) != sorted(slots(cls)):
        raise Invalid(f"the file's attributes do not match those of {name}")
    obj = cls.__new__(cls)
    for attr, spec in attributes.items():
        setattr(obj, attr, _decode(spec, arrays, read_fit, f'{name}.{attr}'))
    return obj


def _decode(spec, arrays: dict, read_fit, what: str):
    if not isinstance(spec, dict) or len(spec) == 0:
        raise Invalid(f'the file is corrupt: {what} has no valid description')
    kind = next(iter(spec))
    try:
        if kind == 'value':
            return spec['value']
        if kind == 'array':
            return arrays[spec['array']]
        if kind == 'frame':
            return pd.DataFrame(arrays[spec['frame']], columns=spec['columns'], index=spec['index'])
        if kind == 'series':
            return pd.Series(arrays[spec['series']], index=spec['index'], name=spec['name'])
        if kind == 'encoding':
            return encoding.Encoding.from_dict(spec['encoding'])
        if kind in ('list', 'tuple'):
            items = [_decode(s, arrays, read_fit, f'{what}[{i}]') for i, s in enumerate(spec[kind])]
            return items if kind == 'list' else tuple(items)
        if kind == 'fit':
            prefix = f'{spec["fit"]}/'
            inner = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
            return read_fit(inner.pop('header'), inner)
    except (KeyError, TypeError, ValueError) as e:
        msg = f'the file is truncated or corrupt: {what} cannot be restored ({type(e).__name__}: {e})'
        raise Invalid(msg) from None
    raise Invalid(f'the file is corrupt: {what} is stored as an unknown kind {kind!r}')


class Saveable:
    """``save`` for the family results: the whole result, not just its inner fit."""

    __slots__ = ()

    def save(self, path) -> None:
        """Save the whole result to ``path`` (see `bartz.io.save`); `bartz.load` reads it back."""
        save(self, path)


def save(obj, path) -> None:
    """Write the family fit ``obj`` to ``path``, atomically (see `bartz.io`);
    an attribute the format cannot store is refused before anything is written."""
    path = _fitfile.check_path(path)
    header, arrays = entries(obj)
    _fitfile.write_archive(path, header, arrays)
