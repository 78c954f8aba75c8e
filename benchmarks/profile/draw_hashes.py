"""Print a sha256 of the draws of a fixed set of fits, one line per fit.

A refactoring that must not change what the sampler draws is checked by
running this before and after (same jax and jaxlib) and comparing the
lines: ``python benchmarks/profile/draw_hashes.py [--quick] > hashes.txt``.
The mesh fit needs two devices; on a CPU machine this script asks for two
virtual ones, so run it in a fresh process.
"""

import os

os.environ.setdefault('XLA_FLAGS', '--xla_force_host_platform_device_count=2')

import argparse  # noqa: E402
import hashlib  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

import bartz  # noqa: E402


def data(n, p=5, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(n, p))
    f = np.sin(6 * x[:, 0]) + x[:, 1] - 2 * (x[:, 2] > 0.5)
    y = f + 0.3 * rng.normal(size=n)
    return x, y, rng.uniform(size=(100, p))


def fits(quick):
    x, y, xt = data(1000)
    kw = dict(ndpost=40, nskip=20, printevery=None, ntree=50)
    xm = x.copy()
    xm[::7, 1] = np.nan
    yield 'wbart n=1000', dict(x_train=x, y_train=y, x_test=xt, seed=1, **kw)
    yield 'pbart', dict(x_train=x, y_train=y > 0.5, x_test=xt, type='pbart', seed=2, **kw)
    yield 'lbart', dict(x_train=x, y_train=y > 0.5, x_test=xt, type='lbart', seed=3, **kw)
    yield 'weights', dict(x_train=x, y_train=y, x_test=xt, w=1 + x[:, 3], seed=4, **kw)
    yield 'dart', dict(x_train=x, y_train=y, x_test=xt, sparse=True, seed=5, **kw)
    yield 'missing', dict(x_train=xm, y_train=y, x_test=xt, seed=6, **kw)
    yield '2 chains', dict(x_train=x, y_train=y, x_test=xt, mc_cores=2, seed=7, **kw)
    yield 'thinning', dict(x_train=x, y_train=y, x_test=xt, keepevery=3, seed=8, **kw)
    yield 'mesh 2 devices', dict(x_train=x, y_train=y, x_test=xt, num_data_devices=2, seed=9, **kw)
    sizes = (5_000, 20_000) if quick else (5_000, 20_000, 100_000)
    for n in sizes:
        x, y, xt = data(n, seed=n)
        yield f'wbart n={n}', dict(
            x_train=x, y_train=y, x_test=xt, seed=10, ndpost=10, nskip=10, printevery=None
        )


def digest(fit):
    h = hashlib.sha256()
    for name in ('yhat_train', 'yhat_test', 'sigma', 'varcount', 'varprob', 'prob_train', 'prob_test'):
        value = getattr(fit, name, None)
        if value is not None:
            h.update(name.encode())
            h.update(np.ascontiguousarray(np.asarray(value)).tobytes())
    return h.hexdigest()[:16]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--quick', action='store_true', help='leave out n = 100,000')
    args = parser.parse_args()
    warnings.simplefilter('ignore')
    for name, kwargs in fits(args.quick):
        print(f'{name:16} {digest(bartz.gbart(**kwargs))}', flush=True)


if __name__ == '__main__':
    main()
