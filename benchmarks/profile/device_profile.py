"""Where a warm `gbart` fit spends an accelerator's time, kernel by kernel.

Run from the repository root on a machine with a GPU:

    python3 benchmarks/profile/device_profile.py --n 100000
    /path/to/peer/bin/python -I benchmarks/profile/device_profile.py --lib bartz --n 100000

The second line profiles bartz 0.13.0 (``--lib bartz``, run by the Python
of its own environment; ``-I`` keeps this repository off its path, as
`benchmarks/peers.py` does). The script fits `gbart` once (compiling it), times a
second, identical fit, then fits once more under JAX's profiler
(``jax.profiler.trace``, with its perfetto trace) and prints, from the
trace's device events:

- the wall time of the second fit and of the traced one;
- per device stream, its events per iteration, the time its kernels were
  busy (per iteration) and the span from its first to its last event;
- the ``--top`` kernels by total time: count, mean time, count per
  iteration.

The fits are those of `peers.py` (Friedman's function, p = 10, 200 trees,
the same seed). A kernel's busy time is what the GPU spent in it; a
stream's span minus its busy time is where the GPU waited (for the host,
or for the profiler: tracing slows the host, so compare spans of two
traced runs only). On CPU the trace has no device events: the script says
so and exits; `benchmarks/profile/kernels.py` attributes CPU kernels instead.
"""

import argparse
import collections
import gzip
import json
import os
import pathlib
import sys
import tempfile
import time

# benchmarks/peers.py, also under `python -I`
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import peers  # noqa: E402


def device_events(trace_dir):
    """The complete ('X') events of the device processes of the perfetto
    trace under `trace_dir`, as (stream name, kernel name, microseconds,
    start)."""
    path = sorted(pathlib.Path(trace_dir).rglob('perfetto_trace.json.gz'))[-1]
    with gzip.open(path) as f:
        trace = json.load(f)
    events = trace['traceEvents'] if isinstance(trace, dict) else trace
    processes, threads = {}, {}
    for e in events:
        if e.get('ph') == 'M' and e.get('name') == 'process_name':
            processes[e['pid']] = e['args'].get('name', '')
        elif e.get('ph') == 'M' and e.get('name') == 'thread_name':
            threads[e['pid'], e['tid']] = e['args'].get('name', '')
    return [
        (threads.get((e['pid'], e['tid']), str(e['tid'])), e['name'], e.get('dur', 0), e['ts'])
        for e in events
        if e.get('ph') == 'X' and processes.get(e['pid'], '').startswith('/device')
    ]


def report(events, iterations, top):
    """The lines of the per-stream and per-kernel tables of `events`."""
    streams = collections.defaultdict(list)
    kernels = collections.defaultdict(list)
    for stream, name, dur, start in events:
        streams[stream].append((dur, start))
        kernels[stream, name].append(dur)
    lines = ['stream | events/iter | busy ms (us/iter) | span ms']
    for stream, rows in sorted(streams.items(), key=lambda kv: -sum(d for d, _ in kv[1])):
        busy = sum(d for d, _ in rows)
        span = max(s + d for d, s in rows) - min(s for _, s in rows)
        lines.append(
            f'{stream} | {len(rows) / iterations:.1f} | {busy / 1e3:.1f} ({busy / iterations:.0f}) | {span / 1e3:.1f}'
        )
    lines.append('')
    lines.append('total ms | count | mean us | per iter | kernel')
    ranked = sorted(kernels.items(), key=lambda kv: -sum(kv[1]))[:top]
    for (_, name), durs in ranked:
        total = sum(durs)
        lines.append(f'{total / 1e3:.1f} | {len(durs)} | {total / len(durs):.2f} | {len(durs) / iterations:.1f} | {name}')
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--lib', default=peers.OURS, choices=[peers.OURS, 'bartz'], help="ours, or 'bartz' (0.13.0)")
    parser.add_argument('--n', type=int, default=1000, help='data points (default 1000)')
    parser.add_argument('--nskip', type=int, default=50, help='burn-in iterations (default 50)')
    parser.add_argument('--ndpost', type=int, default=50, help='kept draws (default 50)')
    parser.add_argument('--top', type=int, default=25, help='kernels listed (default 25)')
    args = parser.parse_args(argv)
    for name in ('n', 'nskip', 'ndpost', 'top'):
        if getattr(args, name) < 1:
            parser.error(f'--{name} must be at least 1, got {getattr(args, name)}')
    if args.lib == peers.OURS:
        sys.path.insert(0, peers.REPO)
    import jax  # noqa: PLC0415

    fit = peers.import_fitter(args.lib)
    bartz_file = sys.modules['bartz'].__file__
    if peers.in_repo(bartz_file) != (args.lib == peers.OURS):
        parser.error(f'--lib {args.lib} imported the bartz at {bartz_file}')
    x, y = peers.friedman1(args.n)
    fit(x, y, args.nskip, args.ndpost)  # compiles
    t0 = time.perf_counter()
    fit(x, y, args.nskip, args.ndpost)
    warm = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix='bartz-profile-') as tmp:
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            t0 = time.perf_counter()
            fit(x, y, args.nskip, args.ndpost)
            traced = time.perf_counter() - t0
        events = device_events(tmp)
    iterations = args.nskip + args.ndpost
    lib = 'bartz 0.13.0' if args.lib == 'bartz' else 'bartz (this repository)'
    print(f'{lib}, n = {args.n:,}, {iterations} iterations, on {jax.devices()[0].device_kind}')
    print(f'warm fit {warm:.3f} s ({warm / iterations * 1e3:.2f} ms/iter); traced fit {traced:.3f} s')
    if not events:
        print('no device events in the trace (a CPU backend?): see benchmarks/profile/kernels.py')
        return
    print('\n'.join(report(events, iterations, args.top)))


if __name__ == '__main__':
    main()
