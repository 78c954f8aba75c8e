"""Every public name has a docstring and a place in the API reference.

The documentation site (``make docs``) fails on the same gaps through
numpydoc's GL08 check; this test finds them without Sphinx, in the fast
suite: the names of `bartz.__all__`, the public functions and classes of
every module docs/api.md documents, and the public methods, properties and
slots of their classes.
"""

import functools
import importlib
import inspect
import pkgutil
import re
import types
from pathlib import Path

import pytest

import bartz

API_PAGE = Path(__file__).resolve().parent.parent / 'docs' / 'api.md'


def _api_entries():
    """The names in the autosummary lists of docs/api.md, qualified by their ``currentmodule``."""
    names, module = [], None
    for block in re.split(r'^```', API_PAGE.read_text(), flags=re.MULTILINE):
        for line in block.splitlines():
            if m := re.fullmatch(r'\.\. (?:py:)?currentmodule:: (\S+)', line):
                module = None if m.group(1) == 'None' else m.group(1)
            elif (m := re.fullmatch(r'   ([A-Za-z_][\w.]*)', line)) and not line.strip().startswith(':'):
                name = m.group(1)
                names.append(name if module is None or name.startswith('bartz.') else f'{module}.{name}')
    return names


def _import(name):
    module, _, attr = name.rpartition('.')
    try:
        return importlib.import_module(name)
    except ImportError:
        return getattr(importlib.import_module(module), attr)


def _api_modules():
    return [name for name in _api_entries() if isinstance(_import(name), types.ModuleType)]


def _public_names(module):
    """``__all__``, then the functions and classes the module defines without a leading underscore."""
    names = list(getattr(module, '__all__', ()))
    for name, value in vars(module).items():
        if name.startswith('_') or name in names or isinstance(value, types.ModuleType):
            continue
        if callable(value) and getattr(value, '__module__', None) == module.__name__:
            names.append(name)
    return names


def _documented():
    """(name, object) of every function, class and module the API reference documents."""
    found = {}
    for name in bartz.__all__:
        found[f'bartz.{name}'] = getattr(bartz, name)
    for modname in _api_modules():
        module = importlib.import_module(modname)
        found[modname] = module
        for name in _public_names(module):
            value = getattr(module, name)
            if callable(value) or isinstance(value, types.ModuleType):
                found.setdefault(f'{modname}.{name}', value)
    return found


def _attributes_section(cls):
    """The names an "Attributes" section of a class docstring describes (``name``, ``a, b`` or ``name : type``)."""
    doc = inspect.getdoc(cls) or ''
    section = re.search(r'^Attributes\n-+\n(.*?)(?:\n\n\S[^\n]*\n-+\n|\Z)', doc, re.MULTILINE | re.DOTALL)
    lines = section.group(1).splitlines() if section else []
    return {name.strip() for line in lines if line[:1].strip() for name in line.split(':')[0].split(',')}


def _members(cls):
    """(name, docstring) of the public methods, properties and slots a bartz class defines or inherits from bartz."""
    for klass in reversed(cls.__mro__):
        if not klass.__module__.startswith('bartz'):
            continue
        slots = klass.__dict__.get('__slots__')
        for name, value in vars(klass).items():
            if name.startswith('_'):
                continue
            if isinstance(value, types.MemberDescriptorType):
                # a slot: described in a __slots__ dict or in the class's Attributes section
                described = name in _attributes_section(klass)
                yield name, slots.get(name) if isinstance(slots, dict) else ('described' if described else None)
            elif isinstance(value, (staticmethod, classmethod, property, functools.cached_property)):
                yield name, inspect.getdoc(value)
            elif inspect.isfunction(value):
                yield name, inspect.getdoc(value)


def test_public_names_have_docstrings():
    missing = []
    for name, value in _documented().items():
        if not inspect.getdoc(value):
            missing.append(name)
        if inspect.isclass(value):
            missing += [f'{name}.{member}' for member, doc in _members(value) if not (doc and doc.strip())]
    assert not missing, f'public names without a docstring: {sorted(set(missing))}'


def test_api_page_lists_all():
    listed = set(_api_entries())
    unlisted = [f'bartz.{name}' for name in bartz.__all__ if f'bartz.{name}' not in listed]
    assert not unlisted, f'docs/api.md does not list {unlisted}'


def test_api_page_covers_public_modules():
    """Every public module of the package is documented, under its name or an alias (``bartz.grove``)."""
    documented = {id(importlib.import_module(name)) for name in _api_modules()}
    undocumented = []
    for info in pkgutil.walk_packages(bartz.__path__, 'bartz.'):
        if any(part.startswith('_') for part in info.name.split('.')):
            continue
        module = importlib.import_module(info.name)
        # a submodule shadowed by the function it exports (bartz.jaxext.autobatch) is documented as the function
        shadowed = getattr(importlib.import_module(info.name.rpartition('.')[0]), info.name.rpartition('.')[2])
        if id(module) not in documented and isinstance(shadowed, types.ModuleType):
            undocumented.append(info.name)
    assert not undocumented, f'modules that docs/api.md does not document: {undocumented}'


@pytest.mark.parametrize('name', ['bartz.gbart', 'bartz.BARTFit', 'bartz.grove', 'bartz.diagnostics.rhat'])
def test_api_entries_found(name):
    """The parser of docs/api.md finds the names it should (else the tests above check nothing)."""
    assert name in _documented()
