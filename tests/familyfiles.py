"""Save and load of the family results (`bartz.api.familyio`), shared by
the test modules of the families: the loaded result has every attribute of
the saved one, of the same class, and predicts the same."""

import numpy as np
import pandas as pd

import bartz
from bartz.api import familyio


def assert_same(a, b, what):
    if isinstance(a, np.generic):  # numpy scalars come back as Python numbers, as in a fit file
        a = a.item()
    assert type(a) is type(b), what
    if isinstance(a, bartz.BARTFit):
        for name in type(a).__slots__:
            if name in ('run_info', '_mesh', '_trace', '_splits'):
                continue
            assert_same(getattr(a, name, None), getattr(b, name, None), f'{what}.{name}')
        np.testing.assert_array_equal(np.asarray(a._trace.leaf_tree), np.asarray(b._trace.leaf_tree))
    elif isinstance(a, pd.DataFrame | pd.Series):
        assert a.equals(b), what
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), what
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f'{what}[{i}]')
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, what
        np.testing.assert_array_equal(a, b, err_msg=what)
    elif hasattr(a, 'to_dict'):  # an Encoding
        assert a.to_dict() == b.to_dict(), what
    else:
        assert a == b or (a != a and b != b), what  # NaN equals NaN here


def assert_round_trip(post, tmp_path, newdata):
    """``post.save`` then `bartz.load`: the same result, and
    ``bartz.predict(loaded, newdata)`` equals ``bartz.predict(post, newdata)``."""
    path = tmp_path / f'{type(post).__name__}.npz'
    post.save(path)
    loaded = bartz.load(path)
    assert type(loaded) is type(post)
    for name in familyio.slots(type(post)):
        assert_same(getattr(post, name), getattr(loaded, name), name)
    for x, y in zip(bartz.predict(post, newdata), bartz.predict(loaded, newdata), strict=True):
        if x is None:
            assert y is None
        else:
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    return loaded
