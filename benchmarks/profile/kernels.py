"""Where the kernels of a compiled `gbart` program come from: a diagnosis tool.

Run from the repository root:

    .venv/bin/python benchmarks/profile/kernels.py
    .venv/bin/python benchmarks/profile/kernels.py --n 100000 --lines 40
    .venv/bin/python benchmarks/profile/kernels.py --moves grow,prune --depth 2
    .venv/bin/python benchmarks/profile/kernels.py --ir --lines 15
    .venv/bin/python benchmarks/profile/kernels.py --compile-times --lines 15

A first fit compiles one program, the MCMC loop, and on CPU its XLA
compile time grows with its number of kernels (fusions and the other
thunks of XLA's CPU runtime; see `benchmarks/LOG.md`), while at small n
the loop's run time grows with the kernels of its loop bodies. This script
fits `gbart` once in a fresh process with the compilation caches off
(``BARTZ_COMPILATION_CACHE=0``) and XLA's dump of the optimised program on
(``--xla_dump_to``, a temporary directory), then prints:

- the compile times JAX reports (tracing, lowering, XLA);
- the number of kernels and of LLVM modules XLA compiled for the program
  (its ``*.ir-with-opt.ll`` files): the modules are what its compile
  time follows (each costs a fixed amount of thread time, a large one
  far more: ``--compile-times``), while the kernels below also
  count the copies, which XLA's CPU runtime runs as memory copies without
  compiling anything (benchmarks/LOG.md, "Session of 2026-11-28
  (eighth)");
- per computation of the loop program that runs kernels, its number of
  kernels, of which copies (XLA's copy insertion), and how XLA's CPU
  runtime runs them: ``in-order`` on one thread (at most 8 kernels) or
  ``concurrent`` (dependencies tracked at run time, kernels handed between
  threads: at small n that costs more than the kernels; see
  benchmarks/LOG.md, "executors of at most 8 kernels"); a computation is the
  ``entry``, or a loop ``body`` (or ``condition``), a ``branch`` of a
  conditional or a ``call``, with its nesting depth: in `gbart`'s loop,
  ``body 1`` is the loop over iterations and ``body 2`` the loop over
  trees inside it (a call counts as a level: the rejection loop of sigma's
  gamma draw is a ``body 3``);
- per line of bartz's source (the innermost bartz frames of each kernel's
  stack, ``--depth`` of them), the number of kernels it made, by
  computation;
- with ``--ir``, the program's optimised LLVM IR (XLA's dump of each
  kernel module, ``*.ir-with-opt.ll``) by bartz source file and line, and
  its largest kernels: on CPU, LLVM's share of the compile time grows with
  it (deterministic, where a cold compile's time swings with the machine),
  but it is not a measure of compile time: LLVM's full unrolling of short
  inner loops makes the IR large without making the compile slow
  (benchmarks/LOG.md, "Session of 2026-11-28 (seventh)");
- with ``--compile-times``, a second fit under JAX's profiler (no dump,
  Python tracer off): the wall time of XLA's compile phases (HLO passes,
  kernel emission, LLVM) and the thread time XLA spent emitting each
  kernel (``FusionCompiler::Compile``, MLIR to LLVM IR) by bartz source
  file and line, and the costliest kernels; and from XLA's log
  (``TF_CPP_VMODULE=ir_compiler=1``) the thread time of LLVM's
  optimisation and code generation of each kernel module, by source and
  the costliest (benchmarks/LOG.md, "Session of 2026-11-29").

A kernel is any instruction of a non-fused computation but parameters,
tuples, their elements, constants and bitcasts (free in XLA's CPU runtime).
The dump is XLA's text format (the file ``*.cpu_after_optimizations.txt``),
whose stack frame tables resolve each kernel's ``stack_frame_id``.
"""

import argparse
import collections
import gzip
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

_FREE = frozenset({'parameter', 'get-tuple-element', 'tuple', 'constant', 'bitcast'})
# XLA's CPU runtime runs a computation of at most this many kernels in
# order on one thread (`ThunkExecutor`; also one whose buffers are all at
# most 512 bytes, or whose kernels form a chain of buffer conflicts, which
# this script does not check), a larger one in its concurrent mode
_IN_ORDER_MAX_KERNELS = 8
_TABLES = ('FileNames', 'FunctionNames', 'FileLocations', 'StackFrames')


def _fit(args, dump_dir=None, trace_dir=None):
    """Fit in a fresh process, with XLA's dump on (`dump_dir`) or under
    JAX's profiler (`trace_dir`, its Python tracer off, and XLA's log of
    LLVM's time per module on); returns JAX's compile events and the
    process's log (its stderr)."""
    code = f"""
import collections, contextlib, json, sys, warnings
import jax
events = collections.Counter()
jax.monitoring.register_event_duration_secs_listener(lambda name, secs, **kw: events.update({{name: secs}}))
import numpy as np
import bartz
rng = np.random.default_rng(0)
x = rng.uniform(size=({args.n}, {args.p}))
y = np.sin(3 * x[:, 0]) + x[:, -1] + 0.3 * rng.normal(size={args.n})
extra = {{}} if {args.moves!r} is None else {{'moves': tuple({args.moves!r}.split(','))}}
trace = contextlib.nullcontext()
if {trace_dir is not None}:
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    trace = jax.profiler.trace({str(trace_dir)!r}, profiler_options=options)
with warnings.catch_warnings(), trace:
    warnings.simplefilter('ignore')
    bartz.gbart(x, y, nskip={args.nskip}, ndpost={args.ndpost}, printevery=None, seed=0, **extra)
print(json.dumps(dict(events)))
"""
    env = dict(os.environ)
    env['BARTZ_COMPILATION_CACHE'] = '0'
    env.pop('JAX_COMPILATION_CACHE_DIR', None)
    if dump_dir is not None:
        env['XLA_FLAGS'] = f'{env.get("XLA_FLAGS", "")} --xla_dump_to={dump_dir} --xla_dump_hlo_as_text'.strip()
    if trace_dir is not None:
        # XLA logs the time of each LLVM module it compiles (its ir_compiler)
        env['TF_CPP_MIN_LOG_LEVEL'] = '0'
        env['TF_CPP_VMODULE'] = 'ir_compiler=1'
    proc = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f'the fit failed:\n{proc.stderr[-3000:]}')
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def _llvm_times(log):
    """From XLA's log (``TF_CPP_VMODULE=ir_compiler=1``): the time LLVM took
    to optimise and generate the code of each kernel module, on the thread
    that compiled it: ``{kernel instruction name: seconds}`` (of all the
    programs of the fit; their kernel names may collide, the sampler's
    dominate)."""
    scale = {'s': 1.0, 'ms': 1e-3, 'us': 1e-6}
    times = collections.Counter()
    for match in re.finditer(r'Compiled LLVM module: (\S+) time: ([\d.]+) (s|ms|us) ', log):
        name = match.group(1).removesuffix('_kernel_module')
        while name.startswith('__compute_module_'):  # (some carry the prefix twice)
            name = name.removeprefix('__compute_module_')
        times[name] += float(match.group(2)) * scale[match.group(3)]
    return times


def _table(lines, name):
    """One of the dump's id tables: ``{id: text}``."""
    start = lines.index(name) + 1
    out = {}
    for line in lines[start:]:
        match = re.match(r'(\d+) (.*)', line)
        if not match:
            break
        out[int(match.group(1))] = match.group(2)
    return out


def _frames(text):
    """``stack_frame_id -> [(file, function, line), ...]``, innermost first."""
    lines = text.split('\n')
    if not all(name in lines for name in _TABLES):
        return lambda frame_id: []
    files = {k: v.strip('"').rsplit('/', 1)[-1] for k, v in _table(lines, 'FileNames').items()}
    functions = {k: v.strip('"') for k, v in _table(lines, 'FunctionNames').items()}
    locations = {}
    for k, v in _table(lines, 'FileLocations').items():
        fields = dict(re.findall(r'(\w+)=(\d+)', v))
        locations[k] = (files[int(fields['file_name_id'])], functions[int(fields['function_name_id'])], int(fields['line']))
    parents = {}
    for k, v in _table(lines, 'StackFrames').items():
        fields = dict(re.findall(r'(\w+)=(\d+)', v))
        parents[k] = (int(fields['file_location_id']), int(fields['parent_frame_id']))

    def stack(frame_id):
        out = []
        while frame_id in parents and len(out) < 64:
            location, parent = parents[frame_id]
            out.append(locations[location])
            if parent == frame_id:
                break
            frame_id = parent
        return out

    return stack


def _computations(text):
    """``{name: [instruction lines]}`` of the computations, and where those
    that run kernels of their own sit: ``{name: (role, caller)}``, the role
    ``'body'``, ``'condition'``, ``'branch'`` or ``'call'`` (the callees of
    fusions and of reductions' and scatters' ``to_apply`` are code inside a
    kernel)."""
    comps, roles = {}, {}
    for block in re.split(r'\n(?=\S)', text):
        head = block.split('\n', 1)[0]
        if not head.rstrip().endswith('{'):
            continue
        name = 'ENTRY' if head.startswith('ENTRY') else head.split(' ', 1)[0].lstrip('%')
        comps[name] = block.split('\n')[1:]
        for line in comps[name]:
            match = re.match(r'\s*(?:ROOT )?%?\S+ = .*? (while|conditional|call)\(', line)
            if not match:
                continue
            for role, target in re.findall(r'(body|condition)=%([\w.\-]+)', line):
                roles[target] = (role, name)
            for targets in re.findall(r'branch_computations=\{([^}]*)\}', line):
                for target in re.findall(r'%([\w.\-]+)', targets):
                    roles[target] = ('branch', name)
            for target in re.findall(r'(?:true|false)_computation=%([\w.\-]+)', line):
                roles[target] = ('branch', name)
            if match.group(1) == 'call':
                for target in re.findall(r'to_apply=%([\w.\-]+)', line):
                    roles[target] = ('call', name)
    return comps, roles


def _where(name, roles):
    """How `name` is reached from the entry: ``'entry'``, ``'body 1'`` (a
    loop body in the entry), ``'body 2'`` (in a loop body)..."""
    if name not in roles:
        return 'entry'
    role, caller = roles[name]
    depth = 1
    while caller in roles and depth < 16:
        depth += 1
        caller = roles[caller][1]
    return f'{role} {depth}'


def _kernels(body):
    """The kernel instructions of a computation: ``(opcode, line)``."""
    out = []
    for line in body:
        match = re.match(r'\s*(?:ROOT )?%?\S+ = .*? ([a-z][a-z0-9\-]*)\(', line)
        if match and match.group(1) not in _FREE:
            out.append((match.group(1), line))
    return out


def _bartz_frames(line, stack):
    """The Python frames (bartz's, innermost first) of an instruction's
    line of the dump: ``[(file, function, line), ...]``."""
    match = re.search(r'stack_frame_id=(\d+)', line)
    frames = stack(int(match.group(1))) if match else []
    return [(file, function, line_no) for file, function, line_no in frames if file.endswith('.py')]


def _llvm_modules(dump_dir, program_path):
    """The number of LLVM modules XLA compiled for the program dumped in
    `program_path` (its ``*.ir-with-opt.ll`` files: kernels, scatters,
    loops compiled whole)."""
    prefix = program_path.name.split('.cpu_after_optimizations')[0] + '.'
    return sum(1 for _ in dump_dir.glob(f'{prefix}*.ir-with-opt.ll'))


def _ir_sizes(dump_dir, program_path):
    """Bytes of optimised LLVM IR of each kernel module of the program
    dumped in `program_path`: ``{kernel instruction name: bytes}``."""
    prefix = program_path.name.split('.cpu_after_optimizations')[0] + '.'
    suffix = '_kernel_module.ir-with-opt.ll'
    out = {}
    for file in dump_dir.glob(f'{prefix}*{suffix}'):
        name = file.name[len(prefix) : -len(suffix)].removeprefix('__compute_module_')
        out[name] = file.stat().st_size
    return out


def _compile_times(trace_dir):
    """From JAX's profile of a fit: the thread time XLA's CPU compiler spent
    emitting each kernel (``FusionCompiler::Compile``, MLIR to LLVM IR:
    ``{kernel instruction name: seconds}``), and the wall time of its
    phases (``{label: seconds}``, summed over their events, labels of
    `_COMPILE_PHASES`)."""
    files = list(pathlib.Path(trace_dir).glob('**/*.trace.json.gz'))
    if not files:
        return {}, {}
    with gzip.open(files[0]) as f:
        events = [e for e in json.load(f)['traceEvents'] if e.get('ph') == 'X']
    kernels, phases = collections.Counter(), collections.Counter()
    for event in events:
        name, seconds = event['name'], event.get('dur', 0) / 1e6
        if name == 'FusionCompiler::Compile':
            module = event.get('args', {}).get('module', '?')
            kernels[module.removeprefix('__compute_module_').removesuffix('_kernel_module')] += seconds
        elif name in _COMPILE_PHASES:
            phases[_COMPILE_PHASES[name]] += seconds
    return kernels, phases


# XLA CPU compiler's phases: their events in a profile (wall time), summed
# per label
_COMPILE_PHASES = {
    'HLO passes through layout assignment (jit_run)': 'HLO passes',
    'HLO passes after layout assignment (jit_run)': 'HLO passes',
    'ThunkEmitter::EmitEntryComputation': 'kernel emission (both cores)',
    'ThunkEmitter::ConsumeKernels': 'kernel emission (both cores)',
    'Codegen': 'LLVM (both cores)',
}


def _sources(text, stack):
    """The bartz frames of every instruction of the dump: ``{name: frames}``."""
    sources = {}
    for line in text.split('\n'):
        match = re.match(r'\s*(?:ROOT )?%(\S+) = ', line)
        if match:
            sources[match.group(1)] = _bartz_frames(line, stack)
    return sources


def _print_by_source(values, sources, args, title, unit, scale):
    """`values` (``{kernel instruction name: amount}``, printed times
    `scale` in `unit`) by bartz source file and by the innermost `--depth`
    bartz frames (`sources`, from `_sources`), and the largest kernels."""
    by_file, by_line, largest = collections.Counter(), collections.Counter(), []
    for name, value in values.items():
        # (a called computation's module is named after it, its call instruction after the call)
        ours = sources.get(name) or sources.get(name.removesuffix('_computation'), [])
        by_file[ours[0][0] if ours else '(no source)'] += value
        where = ' < '.join(f'{file}:{line_no} {function}' for file, function, line_no in ours[: args.depth])
        by_line[where or f'({name}, no source)'] += value
        largest.append((value, name, where))
    total = sum(values.values())
    print(f'\n{title}: {total * scale:,.0f} {unit} in {len(values)} kernel modules')
    print('by file: ' + ', '.join(f'{file} {100 * value / total:.0f}%' for file, value in by_file.most_common()))
    print(f'by source line ({unit}):')
    for where, value in by_line.most_common(args.lines):
        print(f'{value * scale:>8.1f}  {where}')
    print(f'largest kernels ({unit}):')
    for value, name, where in sorted(largest, reverse=True)[: min(args.lines, 10)]:
        print(f'{value * scale:>8.1f}  {name}  {where}')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--n', type=int, default=1000, help='training points (default 1000)')
    parser.add_argument('--p', type=int, default=10, help='predictors (default 10)')
    parser.add_argument('--nskip', type=int, default=10)
    parser.add_argument('--ndpost', type=int, default=10)
    parser.add_argument('--moves', default=None, help="comma-separated moves, e.g. 'grow,prune' (default: gbart's)")
    parser.add_argument('--depth', type=int, default=1, help='bartz frames per source entry (default 1)')
    parser.add_argument('--lines', type=int, default=30, help='source lines to print per computation (default 30)')
    parser.add_argument('--dump', default=None, help='keep the dump in this directory (default: a temporary one)')
    parser.add_argument(
        '--ir', action='store_true', help="also print the program's optimised LLVM IR by source and its largest kernels"
    )
    parser.add_argument(
        '--compile-times',
        action='store_true',
        help="also fit under JAX's profiler and print XLA's compile phases and its time per kernel, by source",
    )
    args = parser.parse_args(argv)
    for name in ('n', 'p', 'ndpost', 'depth', 'lines'):
        if getattr(args, name) < 1:
            parser.error(f'--{name} must be at least 1, got {getattr(args, name)}')
    if args.nskip < 0:
        parser.error(f'--nskip must be at least 0, got {args.nskip}')

    with tempfile.TemporaryDirectory() as tmp:
        dump_dir = pathlib.Path(args.dump or tmp)
        events, _ = _fit(args, dump_dir)
        dumps = sorted(dump_dir.glob('*.cpu_after_optimizations.txt'), key=lambda f: f.stat().st_size)
        if not dumps:
            sys.exit(f'no optimised CPU program in {dump_dir} (this script reads the CPU backend)')
        path = dumps[-1]  # the largest program: the MCMC loop
        text = path.read_text()
        ir_sizes = _ir_sizes(dump_dir, path) if args.ir else {}
        modules = _llvm_modules(dump_dir, path)
    kernel_times, llvm_times, phases, compile_seconds = {}, {}, {}, 0.0
    if args.compile_times:
        with tempfile.TemporaryDirectory() as trace_dir:
            traced, log = _fit(args, trace_dir=trace_dir)
            kernel_times, phases = _compile_times(trace_dir)
        llvm_times = _llvm_times(log)
        compile_seconds = sum(v for k, v in traced.items() if k.endswith('backend_compile_duration'))

    def seconds(suffix):
        return sum(v for k, v in events.items() if k.endswith(suffix))

    print(f'gbart n={args.n} p={args.p} moves={args.moves or "default"}: program {path.name.split(".")[1]}')
    print(
        f'compile: tracing {seconds("jaxpr_trace_duration"):.2f} s, lowering '
        f'{seconds("jaxpr_to_mlir_module_duration"):.2f} s, XLA {seconds("backend_compile_duration"):.2f} s '
        '(all programs of the fit)'
    )
    stack = _frames(text)
    comps, roles = _computations(text)
    rows = []
    for name, body in comps.items():
        kernels = _kernels(body)
        if kernels and (name == 'ENTRY' or name in roles):
            rows.append((name, _where(name, roles), kernels))
    total = sum(len(k) for _, _, k in rows)
    print(f'{total} kernels in {len(rows)} computations; {modules} LLVM modules compiled (a copy compiles none)\n')
    print(f'{"kernels":>7} {"copies":>6}  {"runtime":<10} {"role":<9} computation')
    for name, role, kernels in sorted(rows, key=lambda r: -len(r[2])):
        copies = sum(op == 'copy' for op, _ in kernels)
        mode = 'in-order' if len(kernels) <= _IN_ORDER_MAX_KERNELS else 'concurrent'
        print(f'{len(kernels):>7} {copies:>6}  {mode:<10} {role:<9} {name[:70]}')

    for name, role, kernels in sorted(rows, key=lambda r: -len(r[2])):
        if len(kernels) < 3:
            continue
        by_line, by_file = collections.Counter(), collections.Counter()
        for op, line in kernels:
            ours = [f'{file}:{line_no} {function}' for file, function, line_no in _bartz_frames(line, stack)]
            by_line[' < '.join(ours[: args.depth]) or f'({op}, no source)'] += 1
            by_file[ours[0].split(':', 1)[0] if ours else '(no source)'] += 1
        print(f'\n{role} {name[:60]}: {len(kernels)} kernels')
        print('by file: ' + ', '.join(f'{file} {count}' for file, count in by_file.most_common()))
        print('by source line:')
        for where, count in by_line.most_common(args.lines):
            print(f'{count:>5}  {where}')
        if len(by_line) > args.lines:
            print(f'{sum(c for _, c in by_line.most_common()[args.lines:]):>5}  ({len(by_line) - args.lines} other lines)')

    sources = _sources(text, stack) if args.ir or args.compile_times else {}
    if args.ir:
        if not ir_sizes:
            sys.exit('no LLVM IR of the program in the dump (this XLA does not write it)')
        _print_by_source(ir_sizes, sources, args, 'optimised LLVM IR', 'kB', 1e-3)
    if args.compile_times:
        if not kernel_times:
            sys.exit("no kernel compile events in the fit's profile (this XLA does not record them)")
        labels = dict.fromkeys(_COMPILE_PHASES.values())
        print(
            f'\nXLA compile phases (wall, profiled fit, no dump): compile {compile_seconds:.2f} s; '
            + ', '.join(f'{label} {phases.get(label, 0):.2f} s' for label in labels)
        )
        _print_by_source(kernel_times, sources, args, 'kernel emission (FusionCompiler, thread time)', 'ms', 1e3)
        if llvm_times:
            _print_by_source(llvm_times, sources, args, 'LLVM code generation (thread time)', 'ms', 1e3)


if __name__ == '__main__':
    main()
