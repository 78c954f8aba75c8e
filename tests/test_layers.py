"""The package's folders are layers: a module imports only bartz modules of
its own layer or of the layers below it, at the top of the module."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / 'bartz'

# bottom to top; `diagnostics` checks its arguments with `prep`, `plot` and `demo` sit on the user layer
LAYERS = ('_warn', '_version', 'jaxext', '_compile', 'kernels', 'forest', 'sampler', 'run', 'prep', 'diagnostics', 'api', 'plot', 'demo')


def _layer(module: str) -> int:
    """The layer of ``bartz.<module>...`` (or -1 for the package itself)."""
    parts = module.split('.')
    if parts[0] != 'bartz' or len(parts) == 1:
        return -1
    if parts[1] not in LAYERS:  # a user-layer name re-exported by the package (``from bartz import gbart``)
        return LAYERS.index('api')
    return LAYERS.index(parts[1])


def _modules():
    for path in sorted(PACKAGE.rglob('*.py')):
        parts = path.relative_to(PACKAGE.parent).with_suffix('').parts
        name = '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)
        if name != 'bartz':  # the package's __init__ re-exports every layer
            yield name, path


def _bartz_imports(tree):
    """(line, imported module, at top level) for every import of a bartz module."""
    top = set(map(id, tree.body))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split('.')[0] == 'bartz':
            names = [f'{node.module}.{a.name}' if node.module == 'bartz' else node.module for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.split('.')[0] == 'bartz']
        else:
            continue
        for name in names:
            yield node.lineno, name, id(node) in top


@pytest.mark.parametrize(('name', 'path'), list(_modules()), ids=lambda v: v if isinstance(v, str) else '')
def test_imports_go_down_the_layers(name, path):
    tree = ast.parse(path.read_text())
    own = _layer(name)
    for line, imported, at_top in _bartz_imports(tree):
        if imported in ('bartz', 'bartz.__version__'):
            continue
        assert at_top, f'{path.name}:{line} imports {imported} inside a function'
        assert _layer(imported) <= own, f'{name} (layer {LAYERS[own]}) imports {imported} from above, line {line}'


def test_every_folder_is_a_layer():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / '__init__.py').exists()}
    modules = {p.stem for p in PACKAGE.glob('*.py')} - {'__init__'}
    assert folders | modules <= set(LAYERS)


TESTS = Path(__file__).resolve().parent


def _private_uses(tree):
    """(line, name) for every private bartz name a test module reaches:
    ``from bartz.x import _name``, ``alias._name`` where ``alias`` is a bartz
    module, and the name string of ``monkeypatch.setattr(alias, '_name', ...)``."""
    aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split('.')[0] == 'bartz':
            for a in node.names:
                if _is_private(a.name):
                    yield node.lineno, f'{node.module}.{a.name}'
                aliases.add(a.asname or a.name)
        elif isinstance(node, ast.Import):
            aliases.update(a.asname or a.name.split('.')[0] for a in node.names if a.name.split('.')[0] == 'bartz')
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr) and _root(node.value) in aliases:
            yield node.lineno, node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ('setattr', 'delattr')
            and len(node.args) >= 2
            and _root(node.args[0]) in aliases
            and isinstance(node.args[1], ast.Constant)
            and _is_private(str(node.args[1].value))
        ):
            yield node.lineno, node.args[1].value


def _is_private(name: str) -> bool:
    # a namedtuple's `_fields`, `_replace` and `_asdict` are its public API
    return name.startswith('_') and not name.startswith('__') and name not in ('_fields', '_replace', '_asdict')


def _root(node):
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


@pytest.mark.parametrize('path', sorted(TESTS.glob('*.py')), ids=lambda p: p.name)
def test_tests_use_public_names(path):
    """Tests reach bartz through public names (a documented building block of
    a layer, or a declared test hook), never through a private one."""
    uses = sorted(set(_private_uses(ast.parse(path.read_text()))))
    assert not uses, f'{path.name} uses private bartz names: {uses}'
