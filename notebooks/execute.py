"""Execute the notebooks of this folder and store them with their outputs.

    python notebooks/execute.py [NOTEBOOK ...]    # default: every notebooks/*.ipynb

``make notebooks`` runs it with the virtual environment's python. Each
notebook runs top to bottom in a new kernel of the Python that runs this
script, in notebooks/ as working directory, and is written back in place:
its outputs replaced, consecutive prints merged into one output, the
kernel's temporary file names and this checkout's path taken out of the
outputs, and fixed metadata (no execution timestamps, no Python version),
so that re-running a notebook changes its file only where its outputs
changed. `tests/test_notebooks.py` executes the notebooks with the same
functions and checks that the stored outputs are current.
"""

import argparse
import os
import re
import sys
import time
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# seconds a cell may run before the execution fails
CELL_TIMEOUT = 600

KERNELSPEC = {'display_name': 'Python 3 (ipykernel)', 'language': 'python', 'name': 'python3'}
# language_info without the Python version, which would change with every environment
LANGUAGE_INFO = {
    'codemirror_mode': {'name': 'ipython', 'version': 3},
    'file_extension': '.py',
    'mimetype': 'text/x-python',
    'name': 'python',
    'nbconvert_exporter': 'python',
    'pygments_lexer': 'ipython3',
}

# the file ipykernel compiles a cell into, e.g. /tmp/ipykernel_1234/5678.py,
# named in warnings and tracebacks: a new process id at every run
_CELL_FILE = re.compile(r'\S*ipykernel_\d+[/\\]\d+\.py')


def kernel_env(environ=None) -> dict:
    """The environment of the kernel: this one, without a matplotlib backend
    (the kernel's own inline backend puts the figures in the notebook)."""
    env = dict(os.environ if environ is None else environ)
    env.pop('MPLBACKEND', None)
    return env


def execute(nb, *, timeout=CELL_TIMEOUT, env=None):
    """Run every cell of `nb` (a `nbformat.NotebookNode`) in a new kernel of
    this Python, in notebooks/; the outputs replace those of `nb`, which is
    returned. Raises `nbclient.exceptions.CellExecutionError` at the first
    cell that raises."""
    # the kernel of this Python (ipykernel's own spec), whatever kernels
    # named python3 the machine has installed elsewhere
    specs = KernelSpecManager(kernel_dirs=[])
    manager = AsyncKernelManager(kernel_name='python3', kernel_spec_manager=specs)
    client = NotebookClient(
        nb,
        km=manager,
        timeout=timeout,
        kernel_name='python3',
        resources={'metadata': {'path': str(HERE)}},
    )
    client.execute(env=kernel_env() if env is None else env)
    return nb


def clean(nb):
    """Fixed metadata, merged streams and no machine-specific paths in `nb`, in place; returns `nb`."""
    nb.metadata = nbformat.from_dict({'kernelspec': KERNELSPEC, 'language_info': LANGUAGE_INFO})
    for cell in nb.cells:
        cell.metadata.pop('execution', None)
        if cell.cell_type == 'code':
            cell.outputs = [_scrub(out) for out in _merge_streams(cell.outputs)]
    return nb


def clear(nb):
    """Remove the outputs and execution counts of `nb`, in place; returns `nb`."""
    for cell in nb.cells:
        if cell.cell_type == 'code':
            cell.outputs = []
            cell.execution_count = None
    return nb


def _merge_streams(outputs):
    """Consecutive outputs of one stream as one output: how a print is cut
    into messages depends on the timing of the kernel's flushes."""
    merged = []
    for out in outputs:
        last = merged[-1] if merged else None
        if out.output_type == 'stream' and last is not None and last.output_type == 'stream' and last.name == out.name:
            last.text += out.text
        else:
            merged.append(out)
    return merged


def scrub_text(text: str) -> str:
    """`text` without the kernel's temporary cell files and this checkout's path."""
    text = _CELL_FILE.sub('<cell>', text)
    return text.replace(str(REPO) + os.sep, '')


def _scrub(out):
    if out.output_type == 'stream':
        out.text = scrub_text(out.text)
    elif out.output_type == 'error':
        out.traceback = [scrub_text(line) for line in out.traceback]
    elif 'data' in out:
        for mime, value in out.data.items():
            if mime.startswith('text/'):
                out.data[mime] = scrub_text(value)
    return out


def run(path: Path, *, timeout=CELL_TIMEOUT):
    """Execute the notebook at `path` and write it back with its new outputs."""
    nb = nbformat.read(path, as_version=4)
    clean(execute(clear(nb), timeout=timeout))
    nbformat.validate(nb)
    nbformat.write(nb, path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('notebooks', nargs='*', type=Path, help='notebooks to run (default: every notebooks/*.ipynb)')
    parser.add_argument('--timeout', type=int, default=CELL_TIMEOUT, help='seconds per cell (default %(default)s)')
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(HERE.glob('*.ipynb'))
    for path in paths:
        start = time.perf_counter()
        run(path, timeout=args.timeout)
        print(f'{path.name}: {time.perf_counter() - start:.0f} s, {path.stat().st_size / 1024:.0f} KB', flush=True)


if __name__ == '__main__':
    sys.exit(main())
