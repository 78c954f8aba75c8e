"""The notebooks of notebooks/: stored executed and clean, and not stale.

The notebooks are stored with their outputs, written by
``notebooks/execute.py`` (``make notebooks``). The fast tests read the
stored files: valid, every code cell run in order, no errors, a figure where
a cell shows one, small files, no machine-specific metadata or paths. The
slow tests run each notebook again in a new kernel and compare its outputs
with the stored ones, numbers masked (floating noise, memory figures and
Monte Carlo error do not count): a notebook whose outputs no longer match
its code or bartz's behaviour (a changed API, a new warning, another
summary format) fails, naming the notebook and the cell, with the diff.
"""

import copy
import difflib
import importlib.util
import os
import re
from pathlib import Path

import nbformat
import pytest
from nbclient.exceptions import CellExecutionError

_REPO_ROOT = Path(__file__).resolve().parent.parent
_FOLDER = _REPO_ROOT / 'notebooks'
_NOTEBOOKS = sorted(_FOLDER.glob('*.ipynb'))
_IDS = [p.name for p in _NOTEBOOKS]
_EXPECTED = [
    '01_quickstart.ipynb',
    '02_porting_r.ipynb',
    '03_prediction_at_scale.ipynb',
    '04_chains_and_diagnostics.ipynb',
    '05_sklearn.ipynb',
    '06_survival.ipynb',
]
# what the files in a checkout cost: one notebook, and all together
_MAX_BYTES = 250 * 1024
_MAX_TOTAL_BYTES = 1024 * 1024
_REFRESH = 'refresh the stored outputs with `make notebooks` and review the diff'


def _load_execute():
    """notebooks/execute.py, which stores the notebooks, as a module."""
    spec = importlib.util.spec_from_file_location('notebooks_execute', _FOLDER / 'execute.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


execute = _load_execute()


def _code_cells(nb):
    return [(index, cell) for index, cell in enumerate(nb.cells) if cell.cell_type == 'code']


def _where(path, index, cell):
    first = cell.source.strip().splitlines()[0] if cell.source.strip() else ''
    return f'{path.name}, cell {index} ({first[:60]!r})'


# ---------------------------------------------------------------- the stored files


def test_the_notebooks_are_there():
    names = [p.name for p in _NOTEBOOKS]
    missing = [name for name in _EXPECTED if name not in names]
    assert not missing, f'notebooks missing from notebooks/: {missing}'


def test_total_size():
    total = sum(p.stat().st_size for p in _NOTEBOOKS)
    assert total <= _MAX_TOTAL_BYTES, f'the notebooks take {total / 1024:.0f} KB, over {_MAX_TOTAL_BYTES // 1024} KB'


@pytest.mark.parametrize('path', _NOTEBOOKS, ids=_IDS)
def test_stored_notebook(path):
    """Valid, run top to bottom with its outputs, no error, figures where
    shown, small, and written by execute.py (fixed metadata, no paths)."""
    size = path.stat().st_size
    assert size <= _MAX_BYTES, f'{path.name} takes {size / 1024:.0f} KB, over {_MAX_BYTES // 1024} KB: smaller figures'
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert dict(nb.metadata) == {'kernelspec': execute.KERNELSPEC, 'language_info': execute.LANGUAGE_INFO}, (
        f'{path.name} has other metadata than execute.py writes: {_REFRESH}'
    )
    cells = _code_cells(nb)
    assert cells, f'{path.name} has no code cell'
    for number, (index, cell) in enumerate(cells, start=1):
        where = _where(path, index, cell)
        assert cell.execution_count == number, (
            f'{where} has execution count {cell.execution_count}, not {number}: '
            f'the notebook was not run top to bottom; {_REFRESH}'
        )
        assert 'execution' not in cell.metadata, f'{where} keeps execution timestamps: {_REFRESH}'
        errors = [out for out in cell.outputs if out.output_type == 'error']
        assert not errors, f'{where} stored an error: {errors[0].ename}: {errors[0].evalue}'
        source = cell.source
        if 'print(' in source or 'plt.show()' in source:
            assert cell.outputs, f'{where} prints or shows a figure but has no stored output: {_REFRESH}'
        if 'plt.show()' in source:
            assert any('image/png' in out.get('data', {}) for out in cell.outputs), (
                f'{where} shows a figure but stores no image/png'
            )
        for text in _texts(cell):
            assert 'ipykernel_' not in text and str(_REPO_ROOT) not in text, (
                f'{where} has a machine-specific path in its outputs: {_REFRESH}'
            )


def _texts(cell):
    for out in cell.outputs:
        if out.output_type == 'stream':
            yield out.text
        elif out.output_type == 'error':
            yield from out.traceback
        else:
            yield from (value for mime, value in out.get('data', {}).items() if mime.startswith('text/'))


# ---------------------------------------------------------------- stale outputs

# any number: its digits change with floating noise, Monte Carlo error and memory
_NUMBER = re.compile(r'[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?')


def mask(text: str) -> list[str]:
    """The lines of `text` with every number as ``#`` and the runs of
    spaces as one (table columns are as wide as their numbers), trailing
    whitespace and blank lines at the end removed."""
    lines = [' '.join(line.split()) for line in _NUMBER.sub('#', text).splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def describe(cell) -> list[str]:
    """What a code cell's outputs say, numbers masked: the text of each
    stream (stdout and stderr apart: how they interleave depends on the
    kernel's flushes), then each result, display and error with its mime
    types and its plain text (figures count by their presence)."""
    streams, others = {}, []
    for out in cell.outputs:
        if out.output_type == 'stream':
            streams[out.name] = streams.get(out.name, '') + out.text
        elif out.output_type == 'error':
            others += [f'[error {out.ename}]', *mask(out.evalue)]
        else:
            data = out.get('data', {})
            others.append(f'[{out.output_type}: {", ".join(sorted(data))}]')
            others += mask(data.get('text/plain', ''))
    lines = []
    for name in sorted(streams):
        lines += [f'[{name}]', *mask(streams[name])]
    return lines + others


def stale_message(path, stored, fresh) -> str | None:
    """None if the outputs of `fresh` are those of `stored`, numbers
    masked; else what differs, at the first cell that does."""
    old, new = _code_cells(stored), _code_cells(fresh)
    if len(old) != len(new):
        return f'{path.name}: {len(new)} code cells run, {len(old)} stored; {_REFRESH}'
    for (index, stored_cell), (_, fresh_cell) in zip(old, new, strict=True):
        before, after = describe(stored_cell), describe(fresh_cell)
        if before != after:
            diff = '\n'.join(difflib.unified_diff(before, after, 'stored', 'now', lineterm='', n=2))
            return (
                f'{_where(path, index, stored_cell)}: the outputs are stale (numbers masked as #):\n'
                f'{diff}\n{path.name} no longer gives its stored outputs: {_REFRESH}'
            )
    return None


def _kernel_env():
    """The kernel's environment: one CPU device (not the virtual devices
    that conftest.py makes for the sharding tests), and the test suite's
    compilation cache, so that reruns skip most of the compilation."""
    env = execute.kernel_env()
    flags = env.get('XLA_FLAGS', '').replace('--xla_force_host_platform_device_count=4', '').strip()
    if flags:
        env['XLA_FLAGS'] = flags
    else:
        env.pop('XLA_FLAGS', None)
    env.update(
        JAX_COMPILATION_CACHE_DIR=str(_REPO_ROOT / '.jax_cache'),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS='0.5',
        JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES='0',
    )
    return env


@pytest.mark.slow
@pytest.mark.parametrize('path', _NOTEBOOKS, ids=_IDS)
def test_notebook_outputs_are_current(path):
    """Run the notebook in a new kernel: the same outputs as stored, numbers masked."""
    stored = nbformat.read(path, as_version=4)
    fresh = execute.clear(copy.deepcopy(stored))
    try:
        execute.execute(fresh, env=_kernel_env())
    except CellExecutionError as e:
        pytest.fail(f'{path.name}: a cell raised\n{e}')
    message = stale_message(path, stored, execute.clean(fresh))
    if message is not None:
        pytest.fail(message, pytrace=False)


def test_stale_check_sees_a_changed_output():
    """The comparison of the slow test: numbers and spacing do not count,
    a changed word, a new warning or a lost figure does."""
    path = _FOLDER / '01_quickstart.ipynb'
    stored = nbformat.read(path, as_version=4)
    same = copy.deepcopy(stored)
    index, cell = next((i, c) for i, c in _code_cells(same) if any(o.output_type == 'stream' for o in c.outputs))
    stream = next(o for o in cell.outputs if o.output_type == 'stream')
    stream.text = re.sub(r'\d', '7', stream.text).replace(' ', '  ')
    assert stale_message(path, stored, same) is None
    changed = copy.deepcopy(stored)
    changed.cells[index].outputs.append(nbformat.v4.new_output('stream', name='stderr', text='UserWarning: new\n'))
    message = stale_message(path, stored, changed)
    assert message is not None and f'cell {index}' in message and '+UserWarning: new' in message
    assert 'make notebooks' in message
    no_figure = copy.deepcopy(stored)
    index, cell = next((i, c) for i, c in _code_cells(no_figure) if 'plt.show()' in c.source)
    cell.outputs = [o for o in cell.outputs if 'image/png' not in o.get('data', {})]
    assert f'cell {index}' in stale_message(path, stored, no_figure)


def test_scrub_takes_out_machine_paths():
    text = f'/tmp/ipykernel_4242/123456.py:3: UserWarning: x\n{_REPO_ROOT}{os.sep}bartz/api/fit.py:1\n'
    assert execute.scrub_text(text) == '<cell>:3: UserWarning: x\nbartz/api/fit.py:1\n'
