"""Sphinx configuration of bartz's documentation site (`make docs`).

The pages are the Markdown files of docs/ (MyST), the notebooks of
notebooks/ (through the symlink docs/notebooks, shown with their stored
outputs) and the API reference, generated from the docstrings: docs/api.md
lists the names and the modules, autosummary writes a page for each into
docs/generated/ at every build.
"""

import builtins
import functools
import importlib
import inspect
import json
import os
import re
import sys
import types
from pathlib import Path

from sphinx.errors import PycodeError
from sphinx.pycode import ModuleAnalyzer

# the docs build compiles nothing: leave the user's compilation cache alone
os.environ.setdefault('BARTZ_COMPILATION_CACHE', '0')

import bartz  # noqa: E402

HERE = Path(__file__).resolve().parent

project = 'bartz'
author = 'bartz developers'
copyright = 'bartz developers'  # noqa: A001
release = bartz.__version__
version = release

extensions = [
    'sphinx.ext.autodoc',
    'sphinx.ext.autosummary',
    'numpydoc',
    'myst_nb',
]

# notebooks/ also holds the script that runs the notebooks and their data
exclude_patterns = ['_build', 'notebooks/*.py', 'notebooks/data', '**/.ipynb_checkpoints']
html_theme = 'furo'
html_title = f'bartz {release}'

# Markdown: heading anchors as GitHub makes them, so that the pages' links
# to their own sections (#the-result) work on GitHub and here alike
myst_heading_anchors = 3
# the notebooks are stored with their outputs: show those, run nothing
nb_execution_mode = 'off'

autosummary_generate = True
autosummary_ignore_module_all = False
autodoc_member_order = 'bysource'
autodoc_typehints = 'signature'
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
# GL08: a documented object without a docstring fails the build
numpydoc_validation_checks = {'GL08'}

# Cross-references. Every warning fails the build (-W), and nitpicky makes
# an unresolved reference a warning. Single backticks are references
# (default_role), but the docstrings also use them for code (`x`, `n`,
# `kind='mean'`), so `_missing_reference` below decides:
# - a `bartz.`-dotted name, or a dotted name whose first part names a
#   documented bartz object (`BARTFit.predict`, `grove.evaluate_trace`), and
#   any explicit role (:func:, :class:, ...) must resolve; a bartz object
#   named by another path (its defining module, a module alias) links to
#   where it is documented;
# - a name from another package (numpy, jax, pandas, ...) is set as code:
#   their inventories (intersphinx) would need the network, which CI may not
#   have;
# - anything else in single backticks (a parameter, an expression, an
#   undotted word that names nothing documented) is set as code.
default_role = 'py:obj'
nitpicky = True
# a References section lists the works behind a docstring; the text need not cite each ([1]_)
suppress_warnings = ['ref.citation']

# first parts of dotted names that belong to other packages
EXTERNAL = {
    'arviz', 'az', 'builtins', 'collections', 'concurrent', 'dataclasses', 'enum', 'functools', 'io', 'jax',
    'jaxlib', 'jnp', 'lax', 'matplotlib', 'mpl', 'np', 'numpy', 'os', 'pandas', 'pathlib', 'pd', 'pickle',
    'plt', 'scipy', 'sklearn', 'threading', 'types', 'typing', 'warnings', 'xarray', 'xr',
}
# what Python itself names in signatures and docstrings
BUILTIN = set(dir(builtins)) | {'Any', 'Callable', 'Iterable', 'Iterator', 'Literal', 'Mapping', 'Sequence'}

NAME = re.compile(r'[A-Za-z_]\w*(\.[A-Za-z_]\w*)*')


# --- the API pages ---------------------------------------------------------------------------------


def _import(target):
    """The object a dotted name names, or None."""
    parts = target.split('.')
    for i in range(len(parts), 0, -1):
        try:
            value = importlib.import_module('.'.join(parts[:i]))
        except ImportError:
            continue
        try:
            for part in parts[i:]:
                value = getattr(value, part)
        except AttributeError:
            return None
        return value
    return None


def autosummary_names(text):
    """The entries of the autosummary directives of a page, in order."""
    names = []
    for match in re.finditer(r'^\.\. autosummary::\n((?:[ \t]+.*\n|\n)*)', text, re.MULTILINE):
        names += [line.strip() for line in match.group(1).splitlines() if line.strip() and line.strip()[0] != ':']
    return names


def api_modules():
    """The modules docs/api.md documents, in its order (its autosummary entries that are modules)."""
    names = autosummary_names((HERE / 'api.md').read_text())
    return [name for name in names if isinstance(_import(name), types.ModuleType)]


def public_names(module):
    """The public names of a module: its ``__all__``, then the functions and
    classes it defines without a leading underscore, and its constants with
    a docstring (``NAME = ...`` followed by a string)."""
    names = list(getattr(module, '__all__', ()))
    for name, value in vars(module).items():
        if name.startswith('_') or name in names or isinstance(value, types.ModuleType):
            continue
        if callable(value) and getattr(value, '__module__', None) == module.__name__:
            names.append(name)  # functions (also wrapped: jit, cache) and classes
    try:
        attr_docs = ModuleAnalyzer.for_module(module.__name__).find_attr_docs()
    except PycodeError:
        attr_docs = {}
    names += [name for scope, name in attr_docs if not scope and not name.startswith('_') and name not in names]
    return names


def kind(value):
    """Which section of a module page lists a value."""
    if inspect.isclass(value) and issubclass(value, BaseException):
        return 'exceptions'
    if inspect.isclass(value):
        return 'classes'
    if callable(value):
        return 'functions'
    return 'data'


def plan_api_pages():
    """What each module page lists, and where each bartz object is documented.

    An object is documented once, where it first appears: `bartz.__all__`,
    then the modules in the order of docs/api.md; a module that re-exports
    it links there.
    """
    first = {}  # (name, id(value)) -> documented full name
    by_object = {}  # id(value) -> documented full name, for functions and classes
    classes = {}  # documented full name -> class
    elsewhere = {}  # a module's name for an object documented elsewhere -> the documented name
    by_object[id(bartz)] = 'bartz'
    for name in bartz.__all__:
        value = getattr(bartz, name)
        if not isinstance(value, types.ModuleType):
            first[name, id(value)] = f'bartz.{name}'
            by_object.setdefault(id(value), f'bartz.{name}')
            if inspect.isclass(value):
                classes[f'bartz.{name}'] = value
    pages = {}
    for modname in api_modules():
        module = importlib.import_module(modname)
        page = {'functions': [], 'classes': [], 'exceptions': [], 'data': [], 'elsewhere': []}
        for name in public_names(module):
            value = getattr(module, name)
            if isinstance(value, types.ModuleType):
                continue
            where = first.setdefault((name, id(value)), f'{modname}.{name}')
            if where == f'{modname}.{name}':
                page[kind(value)].append(name)
                if kind(value) != 'data':  # the identity of a constant (a small int) means nothing
                    by_object.setdefault(id(value), where)
                if inspect.isclass(value):
                    classes[where] = value
            else:
                page['elsewhere'].append((name, where))
                elsewhere[f'{modname}.{name}'] = where
        pages[modname] = page
        by_object.setdefault(id(module), modname)
    return pages, by_object, classes, elsewhere


FIELD = re.compile(r'(\s+)(\w+)\s*:[^#]*#\s*(.*)')


@functools.cache
def field_comments(cls):
    """The one-line comments of a class's fields (``name: type  # comment``,
    the style of the package's NamedTuples and dataclasses), by name."""
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith('class '))
    body = [line for line in lines[start + 1 :] if line.strip()]
    indent = len(body[0]) - len(body[0].lstrip()) if body else 0
    comments = {}
    for line in body:
        if (m := FIELD.fullmatch(line)) and len(m.group(1)) == indent:
            comments[m.group(2)] = m.group(3).strip()
    for base in cls.__mro__[1:]:
        if base.__module__.startswith('bartz'):
            comments = {**field_comments(base), **comments}
    return comments


def numpydoc_blind_spots(classes):
    """Documented attributes whose docstring numpydoc's validation cannot read.

    A slot's docstring is its value in a ``__slots__`` dict, which the member
    descriptor does not carry (numpydoc reads ``__doc__``: a false GL08); a
    field's is its comment (`field_comments`); on a property of a lambda
    numpydoc 1.11 fails (StopIteration looking for its ``def``).
    tests/test_docs.py checks that these have docstrings.
    """
    names = []
    for fullname, cls in classes.items():
        for name in {*dir(cls), *field_comments(cls)}:
            value = inspect.getattr_static(cls, name, None)
            slot = isinstance(value, types.MemberDescriptorType)
            lambda_property = isinstance(value, property) and getattr(value.fget, '__name__', '') == '<lambda>'
            if slot or lambda_property or name in field_comments(cls):
                names.append(re.escape(f'{fullname}.{name}') + '$')
    return names


def _field_docs(app, what, name, obj, options, lines):
    """A field's comment as its docstring, where it has none of its own (a
    NamedTuple's says only "Alias for field number 0")."""
    if what not in ('attribute', 'property'):
        return
    owner, _, field = name.rpartition('.')
    cls = _import(owner)
    comment = field_comments(cls).get(field) if inspect.isclass(cls) else None
    if comment and (not lines or re.fullmatch(r'Alias for field number \d+', lines[0])):
        lines[:] = [comment]


API_PAGES, DOCUMENTED, CLASSES, ELSEWHERE = plan_api_pages()
numpydoc_validation_exclude = set(numpydoc_blind_spots(CLASSES))
autosummary_context = {'api_pages': API_PAGES}
templates_path = ['_templates']


# --- cross-references ------------------------------------------------------------------------------


def _documented_path(target):
    """The name a bartz path is documented under: the path itself, or through a
    module alias or the defining module of an object documented elsewhere."""
    parts = target.split('.')
    for i in range(len(parts), 0, -1):
        prefix = '.'.join(parts[:i])
        value = _import(prefix)
        if value is not None and id(value) in DOCUMENTED:
            name = '.'.join([DOCUMENTED[id(value)], *parts[i:]])
            return ELSEWHERE.get(name, name)
    return ELSEWHERE.get(target, target)


def _missing_reference(app, env, node, contnode):
    """Resolve or excuse a reference the Python domain did not find (the rule is above ``default_role``)."""
    if node.get('refdomain') != 'py':
        return None
    target = node['reftarget'].removeprefix('~').removeprefix('.')
    if not NAME.fullmatch(target):
        return contnode  # an expression in single backticks
    parts = target.split('.')
    if parts[0] in EXTERNAL or target in BUILTIN:
        return contnode
    namespace = sys.modules.get(node.get('py:module') or '')
    alias = getattr(namespace, parts[0], None)
    if len(parts) > 1 and isinstance(alias, types.ModuleType) and alias.__name__ != parts[0]:
        # a module as the code names it (``encoding_mod.Encoding``, ``np.ndarray``)
        parts = [*alias.__name__.split('.'), *parts[1:]]
        target = '.'.join(parts)
        if parts[0] != 'bartz':
            return contnode
    if parts[0] in bartz.__all__:
        target = f'bartz.{target}'
    if target.startswith('bartz.'):
        if any(part.startswith('_') and not part.endswith('__') for part in parts):
            return contnode  # a private name: not documented, by design
        py = env.domains['py']
        for name in dict.fromkeys([target, _documented_path(target)]):
            found = py.resolve_xref(env, node['refdoc'], app.builder, node['reftype'], name, node, contnode)
            if found is not None:
                return found
        return None
    if node['reftype'] != 'obj':
        return None  # an explicit role must resolve
    module = node.get('py:module')
    if len(parts) > 1 and module and f'{module}.{parts[0]}' in env.domains['py'].objects:
        return None  # a member of a documented object of this module
    return contnode


def _prose_returns(app, what, name, obj, options, lines):
    """Join the lines of a prose Returns or Yields section into one entry.

    numpydoc reads each unindented line there as an entry of its own (a
    type); the docstrings often describe the result in a sentence over
    several lines instead, which would render as a list of fragments.
    """
    def underline(k):
        return k < len(lines) and re.fullmatch(r'-{3,}', lines[k].strip())

    i = 0
    while i < len(lines) - 1:
        if lines[i].strip() in ('Returns', 'Yields') and underline(i + 1):
            j = i + 2
            # the first entry's unindented lines, up to its description, a blank line or the next heading
            while j + 1 < len(lines) and lines[j].strip() and lines[j + 1][:1].strip():
                if underline(j + 1) or underline(j + 2):
                    break
                lines[j : j + 2] = [f'{lines[j]} {lines[j + 1].strip()}']
            i = j
        i += 1


def _notebook_language(app, docname, source):
    """Python as the language of a notebook that does not name one (myst-nb
    highlights the cells by it, and warns without it): notebooks/execute.py
    stores them without the kernel's metadata."""
    if app.env.doc2path(docname).suffix != '.ipynb':
        return
    notebook = json.loads(source[0])
    metadata = notebook.setdefault('metadata', {})
    if not (metadata.get('language_info') or metadata.get('kernelspec')):
        metadata['language_info'] = {'name': 'python', 'pygments_lexer': 'ipython3'}
        source[0] = json.dumps(notebook)


def setup(app):
    app.connect('missing-reference', _missing_reference)
    app.connect('source-read', _notebook_language)
    # before numpydoc's handler, which formats the docstring
    app.connect('autodoc-process-docstring', _field_docs, priority=400)
    app.connect('autodoc-process-docstring', _prose_returns, priority=400)

