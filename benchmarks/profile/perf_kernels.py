"""Where the CPU time of warm `gbart` fits goes, kernel by kernel, from a
sampling profile: a diagnosis, not a benchmark.

Runs warm fits in a worker process, samples it with Linux ``perf`` and
names the samples that fall in XLA's compiled code by kernel (the fusion
names of the dumps of `benchmarks/profile/kernels.py`) with ``gdb``, which sees
the symbols XLA registers for code it compiles in the process (the
worker runs with ``BARTZ_COMPILATION_CACHE=0``: code loaded from the
persistent cache has no symbols). Prints the share of all samples, over
all threads, of each kernel and of XLA's runtime, the idle worker
threads, the OS and the host::

    python benchmarks/profile/perf_kernels.py --n 1000 --seconds 3

Shares of samples are not shares of the wall time: XLA's CPU runtime
mostly runs the program on one thread at a time, but a kernel that
overlaps another costs less than its share (measure a change with an
in-process A/B of warm fits). Needs ``perf`` and ``gdb`` (with ptrace
allowed).
"""

import argparse
import collections
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

WORKER = """
import os, sys, warnings
warnings.simplefilter('ignore')
sys.path.insert(0, {bench!r})
import peers, bartz
x, y = peers.friedman1({n})
kw = dict(nskip={nskip}, ndpost={ndpost}, printevery=None, seed=1)
bartz.gbart(x, y, **kw)
bartz.gbart(x, y, **kw)
open({ready!r}, 'w').write(str(os.getpid()))
while not os.path.exists({stop!r}):
    bartz.gbart(x, y, **kw)
"""

IDLE = ('Steal', 'PopBack', 'MaybeGetTask', 'WorkerLoop')
UNNAMED = '(XLA code, unnamed)'


def _run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode:
        sys.exit(f'perf_kernels.py: {cmd[0]} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}')
    return proc


def profile(n: int, seconds: float, nskip: int, ndpost: int) -> tuple[collections.Counter, int]:
    """Samples per kernel or category, and the number of samples."""
    tmp = pathlib.Path(tempfile.mkdtemp())
    ready, stop = tmp / 'ready', tmp / 'stop'
    bench = str(pathlib.Path(__file__).resolve().parent.parent)  # benchmarks/, for peers.py
    code = WORKER.format(bench=bench, n=n, nskip=nskip, ndpost=ndpost, ready=str(ready), stop=str(stop))
    env = {**os.environ, 'BARTZ_COMPILATION_CACHE': '0'}
    worker = subprocess.Popen([sys.executable, '-c', code], env=env)
    try:
        while not ready.exists():
            if worker.poll() is not None:
                sys.exit('the worker failed')
            time.sleep(0.1)
        time.sleep(0.2)
        pid = ready.read_text()
        data = tmp / 'perf.data'
        _run(['perf', 'record', '-F', '4000', '-p', pid, '-o', str(data), '--', 'sleep', str(seconds)])
        samples = _run(['perf', 'script', '-i', str(data), '-F', 'ip,sym,dso']).stdout.splitlines()
        # samples in anonymous executable memory (XLA's code), by 64-byte block
        blocks = {int(line.split()[0], 16) >> 6 for line in samples if 'perf-' in line}
        script = tmp / 'names.gdb'
        script.write_text('set architecture i386:x86-64\n' + ''.join(f'x/1i {block << 6:#x}\n' for block in blocks))
        out = _run(['gdb', '-p', pid, '-batch', '-x', str(script)]).stdout
    finally:
        stop.touch()
        worker.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    names = {}
    for line in out.splitlines():
        m = re.match(r'\s*(0x[0-9a-f]+)(?: <([^+>]+)(?:\+\d+)?>)?:', line)
        if m:
            names[int(m.group(1), 16) >> 6] = m.group(2) or UNNAMED
    counts = collections.Counter()
    for line in samples:
        address, _, rest = line.strip().partition(' ')
        if 'perf-' in line:
            counts['kernel ' + names.get(int(address, 16) >> 6, UNNAMED)] += 1
        elif any(k in rest for k in IDLE):
            counts['(idle worker threads)'] += 1
        elif 'xla::' in rest or 'Eigen' in rest or 'tsl::' in rest:
            counts['(XLA runtime)'] += 1
        elif 'kernel.kallsyms' in rest:
            counts['(operating system)'] += 1
        else:
            counts['(host: Python, NumPy, libc)'] += 1
    return counts, len(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--n', type=int, default=1000, help='training points (default 1000)')
    parser.add_argument('--nskip', type=int, default=200)
    parser.add_argument('--ndpost', type=int, default=500)
    parser.add_argument('--seconds', type=float, default=3.0, help='sampling time (default 3)')
    parser.add_argument('--top', type=int, default=30, help='rows to print (default 30)')
    args = parser.parse_args()
    for name in ('n', 'ndpost', 'top'):
        if getattr(args, name) < 1:
            parser.error(f'--{name} must be at least 1, got {getattr(args, name)}')
    if args.nskip < 0:
        parser.error(f'--nskip must be at least 0, got {args.nskip}')
    if not args.seconds > 0:
        parser.error(f'--seconds must be positive, got {args.seconds}')
    for tool in ('perf', 'gdb'):
        if shutil.which(tool) is None:
            sys.exit(f'perf_kernels.py needs {tool!r} on the PATH')
    counts, total = profile(args.n, args.seconds, args.nskip, args.ndpost)
    print(f'n = {args.n:,}: {total:,} samples over all threads')
    print('| share | cumulative | where |')
    print('|---:|---:|---|')
    cumulative = 0
    for name, count in counts.most_common(args.top):
        cumulative += count
        print(f'| {100 * count / total:.1f}% | {100 * cumulative / total:.0f}% | {name} |')


if __name__ == '__main__':
    main()
