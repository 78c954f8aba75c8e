"""Tree exchange with R's BART: `bartz.BARTFit.treedraws` and `bartz.from_treedraws`."""

from pathlib import Path

import numpy as np
import pytest
from scipy import special, stats

import bartz
from bartz.api import treedraws as treedraws_mod

DATA = Path(__file__).parent / 'data' / 'r_treedraws_small.txt'
CUTPOINTS = [[0.0, 1.0, 2.0], [-1.0, 0.5]]

# Points of the hand-written text (2 draws of 2 trees, p = 2): on cut-points
# (x < cut is strict), NaN (fails R's comparison: right), and 1e-12 below a
# cut-point (left in double precision, not in float32).
POINTS = np.array([[0.5, 0.0], [1.0, -1.0], [2.5, -3.0], [-1.0, 0.5], [np.nan, 0.7], [1 - 1e-12, 0.0]])
# The sum of trees at POINTS, followed by hand down the trees of the text.
SUMS = np.array(
    [
        [0.5 + 0.25, 2.0 + 0.25, -1.25 + 0.25, 0.5 + 0.25, 2.0 + 0.25, 0.5 + 0.25],
        [-0.5 + 0.125, -0.5 + 0.125, -0.5 - 0.125, 3.0 + 0.125, 3.0 - 0.125, -0.5 + 0.125],
    ]
)


def small(**kwargs):
    return bartz.from_treedraws({'trees': DATA, 'cutpoints': CUTPOINTS}, **kwargs)


def test_hand_written_text_predicts_by_hand():
    fit = small(type='wbart', offset=10.0)
    assert (fit.ndpost, fit.ntree, fit.p) == (2, 2, 2)
    np.testing.assert_array_equal(fit.predict(POINTS), 10 + SUMS)
    np.testing.assert_allclose(fit.predict(POINTS, kind='mean'), 10 + SUMS.mean(0), rtol=1e-12)
    np.testing.assert_allclose(fit.predict(POINTS, kind='sd'), SUMS.std(0, ddof=1), rtol=1e-6)
    np.testing.assert_allclose(fit.predict(POINTS, kind='quantiles', q=[0, 1]), 10 + np.sort(SUMS, 0), rtol=1e-12)


@pytest.mark.parametrize(('type_', 'link'), [('pbart', stats.norm.cdf), ('lbart', special.expit)])
def test_hand_written_binary_text(type_, link):
    fit = small(type=type_, offset=-0.3)
    np.testing.assert_allclose(fit.predict(POINTS), link(-0.3 + SUMS), rtol=1e-6)


# the text written again: R's values of internal nodes (what they had as
# leaves) become 0, leaf values Python's shortest repr of the double
WRITTEN = """2 2 2
5
1 0 1 0
2 0 0 0.5
3 1 0 0
6 0 0 -1.25
7 0 0 2.0
1
1 0 0 0.25
5
1 1 1 0
2 0 0 0
4 0 0 1.0
5 0 0 -0.5
3 0 0 3.0
3
1 0 2 0
2 0 0 0.125
3 0 0 -0.125
"""


def test_text_from_a_str_or_lines_and_written_again():
    text = DATA.read_text()
    from_str = bartz.from_treedraws({'trees': text, 'cutpoints': CUTPOINTS})
    with DATA.open() as f:
        from_lines = bartz.from_treedraws({'trees': f, 'cutpoints': [np.array(c) for c in CUTPOINTS]})
    np.testing.assert_array_equal(from_str.predict(POINTS), SUMS)
    np.testing.assert_array_equal(from_lines.predict(POINTS), SUMS)
    again = from_str.treedraws()
    assert again['trees'] == WRITTEN
    np.testing.assert_array_equal(again['cutpoints'][1], CUTPOINTS[1])


# ---------------------------------------------------------------- round trips of bartz fits


def _x(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    x[:, 1] = 1.0  # constant: dropped by rm_const, no cut-points in R's form
    return x


@pytest.fixture(scope='module', params=['wbart', 'pbart'])
def bartz_fit(request):
    x = _x(40, 0)
    y = x[:, 0] + 0.5 * x[:, 2] ** 2
    if request.param == 'pbart':
        y = (y > 0.3).astype(float)
    return bartz.gbart(x, y, type=request.param, ntree=5, ndpost=4, nskip=5, keepevery=1, printevery=10**6, seed=2)


def test_round_trip_of_a_fit(bartz_fit):
    td = bartz_fit.treedraws()
    assert set(td) == {'cutpoints', 'trees'}
    assert isinstance(td['trees'], str)
    assert td['trees'].splitlines()[0] == f'{bartz_fit.ndpost} {bartz_fit.ntree} 3'
    assert len(td['cutpoints']) == 3
    assert td['cutpoints'][1].size == 0  # the constant column
    back = bartz.from_treedraws(td, type=bartz_fit.type, offset=bartz_fit.offset)
    x = _x(50, 1)
    np.testing.assert_allclose(back.predict(x), bartz_fit.predict(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(back.predict(x, kind='mean'), bartz_fit.predict(x, kind='mean'), rtol=1e-5, atol=1e-6)
    # and the text of the trees read back is the same text
    assert back.treedraws()['trees'] == td['trees']


def test_files_for_r(bartz_fit, tmp_path):
    paths = treedraws_mod.write_treedraws(bartz_fit, tmp_path)
    assert paths['trees'].read_text() == bartz_fit.treedraws()['trees']
    lines = paths['cutpoints'].read_text().splitlines()
    assert len(lines) == 3
    assert lines[1] == ''
    assert float(paths['offset'].read_text()) == bartz_fit.offset
    back = bartz.from_treedraws({'trees': paths['trees'], 'cutpoints': paths['cutpoints']}, type=bartz_fit.type,
                                offset=float(paths['offset'].read_text()))
    x = _x(20, 3)
    np.testing.assert_allclose(back.predict(x), bartz_fit.predict(x), rtol=1e-5, atol=1e-6)


def _r_rule(text, cutpoints, x):
    """Sums of trees at the rows of `x`, each draw, by R's rule on the text
    (``x[var] < cutpoints[var][cut]`` goes left), in plain Python."""
    lines = iter(text.splitlines())
    ndpost, ntree, _ = map(int, next(lines).split())
    out = np.zeros((ndpost, len(x)))
    for d in range(ndpost):
        for _ in range(ntree):
            nodes = {}
            for _ in range(int(next(lines))):
                nid, var, cut, theta = next(lines).split()
                nodes[int(nid)] = (int(var), int(cut), float(theta))
            for i, row in enumerate(x):
                k = 1
                while 2 * k in nodes:
                    var, cut, _ = nodes[k]
                    k = 2 * k + (not row[var] < cutpoints[var][cut])
                out[d, i] += nodes[k][2]
    return out


def test_text_follows_r_rule(bartz_fit):
    """The text read as R reads it predicts what the fit predicts."""
    td = bartz_fit.treedraws()
    x = _x(5, 5)
    f = bartz_fit.offset + _r_rule(td['trees'], td['cutpoints'], x)
    expected = stats.norm.cdf(f) if bartz_fit.type == 'pbart' else f
    np.testing.assert_allclose(bartz_fit.predict(x), expected, rtol=1e-5, atol=1e-6)


def test_missing_values_refused():
    x = _x(30, 4)
    x[3, 0] = np.nan
    fit = bartz.gbart(x, x[:, 2], ntree=3, ndpost=2, nskip=2, printevery=10**6, seed=1)
    with pytest.raises(ValueError, match='missing values.*column 0'):
        fit.treedraws()


# ---------------------------------------------------------------- bad input


def _edit(line, new):
    lines = DATA.read_text().splitlines()
    if new is None:
        del lines[line - 1]
    else:
        lines[line - 1] = new
    return '\n'.join(lines) + '\n'


@pytest.mark.parametrize(
    ('line', 'new', 'match'),
    [
        (1, '2 2', r'line 1: the header must be'),
        (1, '2 0 2', r'line 1: ntree must be an integer >= 1'),
        (1, '2 2 3', r'line 1: the header says p = 3 .* has 2'),
        (1, '3 2 2', r'ends after line 19, where the number of nodes of tree 1 of draw 3'),
        (1, '1 2 2', r'line 10: more text after the 1 x 2 trees'),
        (2, '4', r'line 7: expected the number of nodes of tree 2 of draw 1'),
        (2, '6', r'line 8: expected node 6 of 6 of tree 1 of draw 1'),
        (4, '2 0 0', r"line 4: expected node 2 of 5 .* 'nid var cut theta', got 3"),
        (4, '2.5 0 0 0.5', r'line 4: nid must be a non-negative integer'),
        (4, '2 0 0 abc', r"line 4: theta must be a number, got 'abc'"),
        (4, '2 0 0 nan', r'line 4: the leaf value of node 2 must be finite'),
        (3, '1 2 1 0.3', r'line 3: split variable 2 of node 1 does not exist: there are 2 predictors'),
        (5, '3 1 2 -0.2', r'line 5: cut 2 of node 3 does not exist: predictor 1 has 2 cut-points'),
        (6, '12 0 0 -1.25', r'line 6: the parent 6 of node 12'),
        (6, '2 0 0 -1.25', r'line 6: node 2 is listed twice'),
        (9, '2 0 0 0.25', r'line 9: the first node of a tree must be the root'),
        (3, '256 0 1 0.3', r'line 3: the first node of a tree must be the root'),
        (6, '256 0 0 -1.25', r'line 6: nid 256 is not a node of a tree of at most 8 levels'),
    ],
)
def test_bad_text_names_the_line(line, new, match):
    with pytest.raises(ValueError, match=match):
        bartz.from_treedraws({'trees': _edit(line, new), 'cutpoints': CUTPOINTS})


def test_one_child_refused():
    text = _edit(7, None).replace('\n5\n1 0 1', '\n4\n1 0 1', 1)
    with pytest.raises(ValueError, match=r'line 5: node 3 has one child'):
        bartz.from_treedraws({'trees': text, 'cutpoints': CUTPOINTS})


@pytest.mark.parametrize(
    ('kwargs', 'error', 'match'),
    [
        ({'type': 'xbart'}, ValueError, r"type must be 'wbart' or 'pbart' or 'lbart', got 'xbart'"),
        ({'offset': float('nan')}, ValueError, r'offset must be a finite real number'),
        ({'offset': 'a'}, ValueError, r'offset must be a finite real number'),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        small(**kwargs)


def test_bad_treedraws():
    with pytest.raises(ValueError, match=r"treedraws must be a mapping with 'trees' and 'cutpoints'"):
        bartz.from_treedraws(DATA.read_text())
    with pytest.raises(ValueError, match=r"treedraws\['cutpoints'\]\[1\] must be a 1-D non-decreasing"):
        bartz.from_treedraws({'trees': DATA, 'cutpoints': [[0.0, 1.0, 2.0], [0.5, -1.0]]})
    with pytest.raises(ValueError, match=r"treedraws\['cutpoints'\]\[0\] must be numbers"):
        bartz.from_treedraws({'trees': DATA, 'cutpoints': [['a'], [0.5]]})


def test_bad_new_points():
    fit = small()
    with pytest.raises(ValueError, match=r'x_new must have 2 columns, one per predictor of the trees, got 3'):
        fit.predict(np.zeros((4, 3)))
    with pytest.raises(ValueError, match=r'x_new must be a 2-D'):
        fit.predict(np.zeros(2))
    with pytest.raises(TypeError, match=r'x_new must be numeric'):
        fit.predict(np.array([['a', 'b']]))


def test_trees_as_r_character_vector_or_bad_type():
    """R's ``trees`` is one string: a list holding it reads as the text."""
    fit = bartz.from_treedraws({'trees': [DATA.read_text()], 'cutpoints': CUTPOINTS})
    np.testing.assert_array_equal(fit.predict(POINTS), SUMS)
    with pytest.raises(ValueError, match=r"treedraws\['trees'\] must be the text .* got int"):
        bartz.from_treedraws({'trees': 3, 'cutpoints': CUTPOINTS})


def test_stumps_and_a_predictor_without_cut_points():
    fit = bartz.from_treedraws({'trees': '2 1 1\n1\n1 0 0 0.5\n1\n1 0 0 -0.25\n', 'cutpoints': [[]]}, offset=1.0)
    np.testing.assert_array_equal(fit.predict(np.zeros((3, 1))), [[1.5] * 3, [0.75] * 3])
    with pytest.raises(ValueError, match=r'line 3: cut 0 of node 1 does not exist: predictor 0 has 0 cut-points'):
        bartz.from_treedraws({'trees': '1 1 1\n3\n1 0 0 0\n2 0 0 1\n3 0 0 2\n', 'cutpoints': [[]]})
