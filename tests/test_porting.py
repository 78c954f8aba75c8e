"""The port of R's demo/boston.R in docs/porting.md runs as written."""

import re
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest

PAGE = Path(__file__).resolve().parent.parent / 'docs' / 'porting.md'
COLUMNS = ['crim', 'zn', 'indus', 'chas', 'nox', 'rm', 'age', 'dis', 'rad', 'tax', 'ptratio', 'black', 'lstat', 'medv']


def _boston_like(path: Path) -> None:
    """A stand-in for MASS::Boston with its columns and size (the page reads Boston.csv)."""
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(506, 13))
    medv = 20 + 8 * x[:, 5] - 10 * x[:, 12] ** 0.5 + rng.normal(size=506)
    pd.DataFrame(np.column_stack([x, medv]), columns=COLUMNS).to_csv(path, index=False)


@pytest.mark.slow
def test_porting_page_runs(tmp_path, monkeypatch):
    matplotlib.use('Agg')
    _boston_like(tmp_path / 'Boston.csv')
    monkeypatch.chdir(tmp_path)
    code = '\n'.join(re.findall(r'```python\n(.*?)```', PAGE.read_text(), flags=re.DOTALL))
    namespace = {}
    exec(compile(code, str(PAGE), 'exec'), namespace)  # noqa: S102: the page's own code
    assert namespace['yhatthin'].shape == (200, 506 - 506 * 3 // 4)
    assert namespace['bfthin'].yhat_train is None
    assert namespace['partial'].shape == (1000, 41)
    np.testing.assert_allclose(namespace['yhat'], namespace['bfp1'].yhat_test, rtol=1e-4, atol=1e-4)
