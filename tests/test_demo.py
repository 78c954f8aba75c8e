"""The demo (`python -m bartz.demo`, the README's main job) end to end, small."""

import warnings

import pytest

from bartz import demo

SMALL = ['--n', '200', '--ntest', '50', '--ndpost', '40', '--nskip', '10', '--ntree', '20', '--printevery', '0']


def test_demo_prints_summary_and_writes_plot(tmp_path, capsys):
    out = tmp_path / 'demo.png'
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # the convergence check goes into the summary, not a warning
        assert demo.main([*SMALL, '--out', str(out)]) == 0
    text = capsys.readouterr().out
    for label in ('test RMSE vs true f', '95% interval coverage', 'acceptance rate', 'convergence (sigma, f)'):
        assert label in text
    line = next(line for line in text.splitlines() if 'convergence (sigma, f)' in line)
    assert 'R-hat' in line and 'of 40 draws' in line and 'median R-hat' in line
    assert 'check passed' in line or 'check failed' in line
    assert out.stat().st_size > 10_000 and out.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'


def test_demo_several_chains(tmp_path, capsys):
    """``--mc-cores 3``: 3 chains (on one device in this session of 4:
    the chain threads), 14 draws each."""
    out = tmp_path / 'demo.png'
    assert demo.main([*SMALL, '--mc-cores', '3', '--out', str(out)]) == 0
    text = capsys.readouterr().out
    assert 'mc_cores=3' in text
    assert '24 (10 burn-in + 14 kept) x 3 chains' in text
    assert 'of 42 draws' in text
    assert out.stat().st_size > 10_000


@pytest.mark.parametrize(
    ('argv', 'message'),
    [
        (['--ndpost', '0'], '--ndpost must be at least 1'),
        (['--n', '1'], '--n must be at least 2'),
        (['--seed', '-3'], '--seed must be non-negative'),
        (['--mc-cores', '0'], '--mc-cores must be at least 1'),
        (['--out', 'plot.pdf'], '--out must be a .png file'),
    ],
)
def test_demo_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        demo.main(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err
