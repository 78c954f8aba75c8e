"""Where R's demo data sets and R's results are (``data/r-bart`` of the
shared folder beside the repository, whose README says what R ran): the
folder named by ``BARTZ_R_DATA``, else ``../shared/data/r-bart`` next to
the checkout, else ``/work/shared/data/r-bart``. Tests that read them skip,
saying so, where none is present (they are not part of the repository)."""

import os
from pathlib import Path

import pytest

_CANDIDATES = [
    *([Path(os.environ['BARTZ_R_DATA'])] if os.environ.get('BARTZ_R_DATA') else []),
    Path(__file__).resolve().parents[2] / 'shared' / 'data' / 'r-bart',
    Path('/work/shared/data/r-bart'),
]
R_DATA = next((p for p in _CANDIDATES if p.is_dir()), _CANDIDATES[0])


def r_data() -> Path:
    """The folder, or a skip naming the places looked at."""
    if not R_DATA.is_dir():
        pytest.skip(f"R's demo data not found (looked in {', '.join(map(str, _CANDIDATES))}; set BARTZ_R_DATA)")
    return R_DATA
