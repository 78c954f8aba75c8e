"""What a model variant costs: the fits a user runs one after the other in a notebook.

One fresh process fits `gbart` on Friedman #1 data (with ``x_test``), again
with the same settings (warm), then once with each setting changed, and
prints per fit the wall time, the number of XLA compilations and their
seconds (JAX's own timer), and the time as a multiple of the warm fit. A
variant that compiles nothing costs about a warm fit; one that compiles
costs seconds on a 2-core CPU.

Run from the repository root::

    .venv/bin/python benchmarks/variants.py                   # n = 1,000
    .venv/bin/python benchmarks/variants.py --n 200 --markdown

bartz's caches of compiled programs are pointed at a new temporary
directory, so the first fit compiles as in a new installation.
"""

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402  (Friedman #1 data and the table, as the other scripts)

VARIANTS = (
    ('first fit', {}),
    ('warm (same settings)', {}),
    ('seed=5', {'seed': 5}),
    ('ndpost +50%', 'ndpost'),
    ('nskip x2', 'nskip'),
    ('keepevery=2', {'keepevery': 2}),
    ('k=3', {'k': 3.0}),
    ('power=1.5, base=0.9', {'power': 1.5, 'base': 0.9}),
    ('sigdf=10, sigquant=0.99', {'sigdf': 10, 'sigquant': 0.99}),
    ('numcut=50', {'numcut': 50}),
    ('ntree=50', {'ntree': 50}),
    ('sparse=True (DART)', {'sparse': True}),
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--n', type=int, default=1000, help='training points (default 1000)')
    parser.add_argument('--n-test', type=int, default=200, help='rows of x_test (default 200)')
    parser.add_argument('--nskip', type=int, default=100)
    parser.add_argument('--ndpost', type=int, default=200)
    parser.add_argument('--markdown', action='store_true', help='print the table as markdown')
    args = parser.parse_args(argv)
    for name in ('n', 'n_test', 'nskip', 'ndpost'):
        if getattr(args, name) < 1:
            parser.error(f'--{name.replace("_", "-")} must be at least 1, got {getattr(args, name)}')
    return args


def main(argv=None):
    args = parse_args(argv)
    os.environ['BARTZ_CACHE_DIR'] = tempfile.mkdtemp(prefix='bartz-variants-')
    import numpy as np  # noqa: PLC0415
    from jax import monitoring  # noqa: PLC0415

    import bartz  # noqa: PLC0415

    events = []
    monitoring.register_event_duration_secs_listener(lambda name, secs, **_: events.append((name, secs)))
    x, y = peers.friedman1(args.n)
    x_test = peers.friedman1(args.n + args.n_test)[0][args.n :]  # the rows after the training ones
    base = {'nskip': args.nskip, 'ndpost': args.ndpost, 'printevery': None, 'seed': 0}
    derived = {'ndpost': {'ndpost': args.ndpost * 3 // 2}, 'nskip': {'nskip': 2 * args.nskip}}
    rows = []
    warm = None
    for name, change in VARIANTS:
        settings = {**base, **(derived[change] if isinstance(change, str) else change)}
        events.clear()
        start = time.perf_counter()
        fit = bartz.gbart(x, y, x_test=x_test, **settings)
        np.asarray(fit.yhat_test_mean)
        seconds = time.perf_counter() - start
        compiles = [secs for event, secs in events if event.endswith('backend_compile_duration')]
        iterations = settings['nskip'] + settings['ndpost'] * settings.get('keepevery', 1)
        if name.startswith('warm'):
            warm = seconds / iterations
        rows.append((name, seconds, len(compiles), sum(compiles), iterations))
    header = ('fit', 'seconds', 'XLA compiles', 'compile s', 'x warm (per iteration)')
    lines = [(name, f'{s:.2f}', str(c), f'{cs:.2f}', f'{s / it / warm:.1f}') for name, s, c, cs, it in rows]
    print(f'gbart variants, n = {args.n}, x_test {args.n_test} rows, nskip {args.nskip}, ndpost {args.ndpost}')
    print(peers.render(header, lines, args.markdown))
    return 0


if __name__ == '__main__':
    sys.exit(main())
