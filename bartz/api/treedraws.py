"""Trees R can read: R BART's ``treedraws``, written from a fit and read back.

R's ``BART`` package (2.9.9) keeps the posterior trees of a fit in
``post$treedraws``, a list of ``cutpoints`` (one numeric vector per
predictor) and ``trees`` (one string); ``predict.wbart``, ``predict.pbart``
and ``predict.lbart`` read nothing else of the trees. `fit_treedraws`
(`bartz.BARTFit.treedraws`) writes a bartz fit in that form, so that R
predicts with it; `from_treedraws` reads it, from R or from bartz, into a
`TreeDrawsFit` that predicts as R does.

The text (``cwbart.cpp`` writes it, ``cpwbart.cpp`` reads it)
-------------------------------------------------------------
Whitespace-separated numbers, one record a line::

    ndpost ntree p
    <number of nodes of tree 1 of draw 1>
    nid var cut theta           (one line per node)
    ...

then the next tree, draw after draw, ``ntree`` trees a draw. ``nid`` is
the node's heap number (root 1, children of ``i`` at ``2i`` (left) and
``2i + 1`` (right)); the nodes of a tree are listed in preorder (a node,
then its left subtree, then its right one), so a node's parent comes
before it, which R's reader needs. An internal node splits on predictor
``var`` (0-based) at ``cutpoints[var][cut]`` (``cut`` 0-based): an
observation goes left iff ``x[var] < cutpoints[var][cut]``. A leaf has
value ``theta``; R writes ``var`` and ``cut`` of a leaf as 0, and for an
internal node the ``theta`` it had as a leaf, which R's prediction never
reads: bartz writes 0 there, and ignores it when reading.

bartz's split index ``s`` sends left the points with ``x_j < c_{js}``
(`bartz.prepcovars`): R's ``cut`` is ``s - 1``. R writes
``theta`` with 10 significant digits (``treess.precision(10)`` in
``cwbart.cpp``); bartz writes the shortest decimal that reads back as the
same double (Python's ``repr``, up to 17 digits), which R's reader parses
as well. Cut-points are written in full too.

The offset
----------
R's trees do not include the constant added to their sum: ``mu`` of
``wbart`` (``offset`` of ``gbart``), ``binaryOffset`` of ``pbart``
(probit scale) and ``lbart`` (logit scale); bartz's is the fit's
``offset``. A continuous bartz fit's trees are in units of ``sd(y)``: their
leaf values are written times that scale, in the data's units, as R's.

To R and back
-------------
`write_treedraws` writes the files that the R lines of ``docs/r_parity.md``
("Trees R can read") load for R's ``predict``; that page also has the R
lines that write an R fit's trees for `from_treedraws`.

Limits
------
- A fit with missing values in ``x_train`` is refused: bartz sends them
  to a side with two copies of the column (`bartz.encoding`), which R's
  trees, whose ``x`` has no missing values, cannot represent.
- bartz compares float32 predictors with float32 cut-points, R doubles:
  a value within float32 rounding of a cut-point (a relative 6e-8) may go
  to the other side in R. `TreeDrawsFit` compares doubles, as R.
- Trees of more than `bartz.grove.MAX_SUPPORTED_DEPTH` levels (a node
  number above 255) are refused; R's default prior makes them rare.
"""

import functools
import io as _io
import math
import numbers
import os
from pathlib import Path

import numpy as np
import pandas as pd
from jax import numpy as jnp

from bartz.api import predict as predict_mod
from bartz.forest import grove
from bartz.forest import predict as pipeline
from bartz.prep import checks, priors
from bartz.prep import sizes as buckets
from bartz.prep.checks import _check_int
from bartz.prep.cutpoints import binned_dtype
from bartz.run import sharding

__all__ = ['TreeDrawsFit', 'fit_treedraws', 'from_treedraws', 'write_treedraws']

_MAX_HEAP = 2**grove.MAX_SUPPORTED_DEPTH  # node numbers below this
_TREES = "treedraws['trees']"


class TreeDrawsFit:
    """Posterior trees read from R's ``treedraws`` (`from_treedraws`),
    ready to predict as R's ``predict`` does.

    Attributes
    ----------
    type
        ``'wbart'``, ``'pbart'`` or ``'lbart'``.
    offset
        Added to each draw's sum of trees (R's ``mu`` or ``binaryOffset``).
    ndpost, ntree
        Number of draws, of trees per draw.
    cutpoints
        List of ``p`` float64 arrays, the cut-points of each predictor.
    """

    __slots__ = ('_split', '_theta', '_trace', '_var', 'cutpoints', 'ndpost', 'ntree', 'offset', 'type')

    def __init__(self, type, offset, cutpoints, var, split, theta):  # noqa: A002, R's name
        self.type, self.offset, self.cutpoints = type, float(offset), cutpoints
        self.ndpost, self.ntree = theta.shape[:2]
        self._var, self._split, self._theta = var, split, theta  # host copies, R's values
        leaf = np.where(_internal(split), 0, theta).astype(np.float32)
        self._trace = grove.TreeHeaps(jnp.asarray(var), jnp.asarray(split), jnp.asarray(leaf))

    def __repr__(self):
        return f'TreeDrawsFit(type={self.type!r}, ndpost={self.ndpost}, ntree={self.ntree}, p={self.p})'

    @property
    def p(self) -> int:
        """Number of predictors."""
        return len(self.cutpoints)

    def predict(self, x_new, *, kind='draws', q=None, max_memory=grove.DEFAULT_MAX_MEMORY):
        """Predictions at new points, with R's rule: ``x < cut`` goes left,
        compared in double precision (NaN goes right, as in R's C++).

        Parameters
        ----------
        x_new
            ``(m, p)`` numeric array or DataFrame, one column per predictor.
        kind, q, max_memory
            As in `bartz.BARTFit.predict`.

        Returns
        -------
        What `bartz.BARTFit.predict` returns for the fit's type: the
        ``(ndpost, m)`` float32 draws of f (``'wbart'``) or of the
        probability (``'pbart'``, ``'lbart'``), or their float64 summary.
        The sums of trees are float32, as bartz's.
        """
        kind, q = predict_mod.check_kind(kind, q)
        max_memory = _check_int('max_memory', max_memory, 1)
        x = _check_rows(x_new, self.p)
        link = priors.OUTCOME_TYPES[self.type].link
        plan = pipeline.make_plan(kind, q=q, link=link, ndraws=self.ndpost, max_memory=max_memory)
        # a continuous fit's offset is added on the host, as bartz's (`bartz.api.predict`)
        params = (np.float32(0), np.float32(1)) if link == 'affine' else (np.float32(self.offset),)
        rows, n = pipeline.out_rows(plan), x.shape[0]
        out = np.empty((n,) if rows is None else (rows, n), np.float32 if kind == 'draws' else np.float64)
        step = predict_mod.rows_per_chunk(self.p, 4 * (rows or 1))
        for start in range(0, n, step):
            part = out[..., start : start + step]
            X = _bin_rows(np.asarray(x[start : start + step], np.float64), self.cutpoints)
            part[...] = _evaluate(X, self._trace, plan, params)
            if link == 'affine' and kind != 'sd':
                predict_mod.to_data_units(part, self.offset)
        return out

    def treedraws(self) -> dict:
        """The trees in R's form again, ``{'cutpoints': ..., 'trees': str}``
        (see `fit_treedraws`)."""
        return fit_treedraws(self)


# ---------------------------------------------------------------- writing


def fit_treedraws(fit) -> dict:
    """A bartz fit's trees in R's ``treedraws`` form (module docstring).

    Parameters
    ----------
    fit
        A `bartz.BARTFit` or a `TreeDrawsFit`.

    Returns
    -------
    ``{'cutpoints': [float64 array per predictor], 'trees': str}``, the
    structure R's ``predict`` reads from ``post$treedraws``. The whole text
    is built in memory (about 20 bytes a node): `write_treedraws` streams
    it to a file instead.
    """
    cutpoints, chunks = _chunks(fit)
    return {'cutpoints': cutpoints, 'trees': ''.join(chunks)}


def write_treedraws(fit, directory) -> dict:
    """Write a fit's trees for R, a draw at a time.

    ``docs/r_parity.md`` ("Trees R can read") has the R lines that read
    the files.

    Parameters
    ----------
    fit
        A `bartz.BARTFit` or a `TreeDrawsFit`.
    directory
        Where to write (created if needed).

    Returns
    -------
    ``{'trees': path, 'cutpoints': path, 'offset': path}``: ``trees.txt``
    (R's text), ``cutpoints.txt`` (a line per predictor, its cut-points
    separated by spaces, an empty line for none) and ``offset.txt`` (one
    number, R's ``mu`` or ``binaryOffset``).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = {name: directory / f'{name}.txt' for name in ('trees', 'cutpoints', 'offset')}
    cutpoints, chunks = _chunks(fit)
    with paths['trees'].open('w') as f:
        f.writelines(chunks)
    with paths['cutpoints'].open('w') as f:
        f.writelines(' '.join(repr(float(v)) for v in c) + '\n' for c in cutpoints)
    paths['offset'].write_text(f'{float(fit.offset)!r}\n')
    return paths


def _chunks(fit):
    """The cut-points of `fit` (a `bartz.BARTFit` or a `TreeDrawsFit`) and
    its text, an iterator of chunks (`_text`). A `bartz.BARTFit`'s split
    variables are numbered among all its model columns (those ``rm_const``
    dropped too), its leaf values in the data's units."""
    if isinstance(fit, TreeDrawsFit):
        draws = zip(fit._var, fit._split, fit._theta, strict=True)  # noqa: SLF001
        return fit.cutpoints, _text(fit.ndpost, fit.ntree, fit.p, draws)
    encoding = fit._encoding  # noqa: SLF001
    if encoding.augmented:
        names = [c.name if c.name is not None else f'column {j}' for j, c in enumerate(encoding.columns) if c.missing]
        msg = (
            f'treedraws: x_train had missing values (in {", ".join(map(str, names))}); bartz sends them to a side '
            "with two copies of the column, which R's trees cannot represent: refit without missing values"
        )
        raise ValueError(msg)
    kept = np.flatnonzero(np.asarray(fit._kept))  # noqa: SLF001
    splits = fit._splits  # noqa: SLF001
    cutpoints = [np.empty(0) for _ in range(encoding.num_model)]
    for k, j in enumerate(kept):
        cutpoints[j] = np.asarray(splits.splits[k, : splits.max_split[k]], np.float64)
    trace = fit._trace  # noqa: SLF001
    scale = float(fit._scale)  # noqa: SLF001
    ndpost, ntree = trace.leaf_tree.shape[:2]

    def draws():
        for d in range(ndpost):
            var = np.asarray(sharding.to_host(trace.var_tree[d])).astype(np.int64)
            split = np.asarray(sharding.to_host(trace.split_tree[d])).astype(np.int64)
            leaf = np.asarray(sharding.to_host(trace.leaf_tree[d])).astype(np.float64)
            yield kept[var], split, leaf * scale

    return cutpoints, _text(ndpost, ntree, len(cutpoints), draws())


def _text(ndpost, ntree, p, draws):
    """R's text, a chunk per draw: the header, then the lines of each draw
    ``(var, split, theta)`` (``(ntree, H/2)``, ``(ntree, H/2)``, ``(ntree,
    H)``; split 0 at leaves, else R's cut plus 1)."""
    yield f'{ndpost} {ntree} {p}\n'
    for var, split, theta in draws:
        yield _draw_text(np.asarray(var), np.asarray(split), np.asarray(theta))


def _draw_text(var, split, theta):
    """The lines of the trees of one draw, each tree's nodes in preorder."""
    heap = theta.shape[1]
    order = _preorder(heap)
    internal = _internal(split)
    exists = internal[:, order >> 1] | (order == 1)
    lines = []
    for j in range(theta.shape[0]):
        nodes = order[exists[j]].tolist()
        lines.append(f'{len(nodes)}\n')
        v, s, t, inside = var[j].tolist(), split[j].tolist(), theta[j].tolist(), internal[j].tolist()
        for k in nodes:
            if inside[k]:
                lines.append(f'{k} {v[k]} {s[k] - 1} 0\n')
            else:
                lines.append(f'{k} 0 0 {float(t[k])!r}\n')
    return ''.join(lines)


def _internal(split):
    """``(..., H)`` mask of internal nodes from ``split (..., H/2)``."""
    split = np.asarray(split)
    return np.concatenate([split != 0, np.zeros(split.shape, bool)], axis=-1)


@functools.cache
def _preorder(heap):
    """Heap numbers ``1 .. heap - 1`` in preorder (node, left subtree, right subtree)."""
    out, stack = [], [1]
    while stack:
        k = stack.pop()
        out.append(k)
        if 2 * k < heap:
            stack += [2 * k + 1, 2 * k]
    return np.array(out)


# ---------------------------------------------------------------- reading


def from_treedraws(treedraws, *, type='wbart', offset=0.0) -> TreeDrawsFit:  # noqa: A002, R's name
    """Read R's ``treedraws`` (trees and cut-points) into a `TreeDrawsFit`.

    The text is read a line at a time and a draw at a time: memory holds
    the heap arrays of the trees and one draw's lines, never a Python
    object per node of the whole text.

    Parameters
    ----------
    treedraws
        A mapping with ``'cutpoints'``, a sequence of ``p`` 1-D arrays
        (non-decreasing, no NaN) or a `pathlib.Path` to a file with one
        line per predictor; and ``'trees'``, the text as a `str`, a
        `pathlib.Path` (or `os.PathLike`) to a file holding it, or an
        iterable of its lines (an open file). A `str` is always the text.
    type
        ``'wbart'`` (continuous), ``'pbart'`` (probit) or ``'lbart'``
        (logit): the scale of the trees.
    offset
        Added to each draw's sum of trees: R's ``mu`` (``wbart``) or
        ``binaryOffset`` (``pbart``, ``lbart``); ``offset`` of R's ``gbart``.

    Returns
    -------
    TreeDrawsFit

    Raises
    ------
    ValueError
        If the text is not R's format, naming the line: a header that is
        not three positive integers, a count of nodes or of trees that
        the lines do not match, a node whose parent is not listed before
        it, a split on a predictor or a cut-point that does not exist.
    """
    type = priors.outcome_type(type).name  # noqa: A001
    if isinstance(offset, bool) or not isinstance(offset, numbers.Real) or not math.isfinite(offset):
        msg = f'offset must be a finite real number, got {offset!r}'
        raise ValueError(msg)
    if not hasattr(treedraws, 'keys') or 'trees' not in treedraws or 'cutpoints' not in treedraws:
        msg = f"treedraws must be a mapping with 'trees' and 'cutpoints' (R's post$treedraws), got {treedraws!r:.80}"
        raise ValueError(msg)
    cutpoints = _check_cutpoints(treedraws['cutpoints'])
    source = treedraws['trees']
    if isinstance(source, os.PathLike):
        with Path(source).open() as f:
            heaps = _read_trees(_Lines(f), cutpoints)
    elif isinstance(source, str) or (hasattr(source, '__iter__') and not isinstance(source, bytes)):
        heaps = _read_trees(_Lines(_io.StringIO(source) if isinstance(source, str) else source), cutpoints)
    else:
        kind = source.__class__.__name__
        msg = f'{_TREES} must be the text (a str), a Path to it or an iterable of its lines, got {kind}'
        raise ValueError(msg)
    return TreeDrawsFit(type, offset, cutpoints, *heaps)


def _check_cutpoints(cutpoints) -> list[np.ndarray]:
    """The cut-points as float64 arrays, checked: the bins of `_bin_rows`
    need them sorted."""
    name = "treedraws['cutpoints']"
    if isinstance(cutpoints, os.PathLike):
        with Path(cutpoints).open() as f:
            cutpoints = [line.split() for line in f]
    if isinstance(cutpoints, str | bytes) or not hasattr(cutpoints, '__len__'):
        msg = f'{name} must be a sequence of 1-D arrays, one per predictor, or a Path, got {type(cutpoints).__name__}'
        raise ValueError(msg)
    out = []
    for j, c in enumerate(cutpoints):
        try:
            c = np.asarray(c, dtype=np.float64)
        except (TypeError, ValueError) as e:
            msg = f'{name}[{j}] must be numbers, got {c!r:.80}'
            raise ValueError(msg) from e
        if c.ndim != 1 or np.isnan(c).any() or np.any(np.diff(c) < 0):
            msg = f'{name}[{j}] must be a 1-D non-decreasing array without NaN (R\'s cut-points), got {c!r:.80}'
            raise ValueError(msg)
        out.append(c)
    if not out:
        msg = f'{name} must have one array per predictor, got none'
        raise ValueError(msg)
    return out


class _Lines:
    """The non-blank lines of a text as lists of tokens, numbered; `source`
    yields lines, or strings of several (R's ``trees``, one string)."""

    def __init__(self, source):
        self._lines = (line for chunk in source for line in str(chunk).splitlines())
        self.number = 0

    def next(self, expected: str, *args) -> list[str]:
        """The tokens of the next line; `expected` (formatted with `args`
        only for the message) names it if the text ends before."""
        for line in self._lines:
            self.number += 1
            tokens = line.split()
            if tokens:
                return tokens
        msg = f'{_TREES} ends after line {self.number}, where {expected.format(*args)} was expected'
        raise ValueError(msg)

    def check_end(self, what: str) -> None:
        for line in self._lines:
            self.number += 1
            if line.strip():
                msg = f'{_TREES} line {self.number}: more text after {what}: {line.strip()!r:.60}'
                raise ValueError(msg)


def _integer(token: str, lines: _Lines, what: str, minimum: int) -> int:
    try:
        value = int(token)
    except ValueError:
        value = None
    if value is None or value < minimum:
        msg = f'{_TREES} line {lines.number}: {what} must be an integer >= {minimum}, got {token!r}'
        raise ValueError(msg)
    return value


def _read_trees(lines: _Lines, cutpoints):
    """Parse the header and every draw; ``(var, split, theta)`` arrays."""
    header = lines.next("the header 'ndpost ntree p'")
    if len(header) != 3:
        msg = f"{_TREES} line {lines.number}: the header must be 'ndpost ntree p', three integers, got {header}"
        raise ValueError(msg)
    ndpost, ntree, p = (_integer(t, lines, w, 1) for t, w in zip(header, ('ndpost', 'ntree', 'p'), strict=True))
    if p != len(cutpoints):
        msg = (
            f'{_TREES} line {lines.number}: the header says p = {p} predictors, '
            f"but treedraws['cutpoints'] has {len(cutpoints)}"
        )
        raise ValueError(msg)
    num_cuts = np.array([c.size for c in cutpoints])
    out = _Heaps(ndpost, ntree, p, int(num_cuts.max()))
    for d in range(ndpost):
        out.put(d, *_draw_heaps(*_draw_lines(lines, d, ntree), ntree, num_cuts))
    lines.check_end(f'the {ndpost} x {ntree} trees of the header')
    return out.var, out.split, out.theta


def _draw_lines(lines: _Lines, d: int, ntree: int):
    """The tokens of the node lines of draw `d` (a flat list, 4 a line),
    the tree of each line and its number."""
    tokens, tree_of, numbers = [], [], []
    nodes = 'the number of nodes of tree {} of draw {}'
    for t in range(ntree):
        count = lines.next(nodes, t + 1, d + 1)
        if len(count) != 1:
            where = nodes.format(t + 1, d + 1)
            msg = f'{_TREES} line {lines.number}: expected {where} (one integer), got {len(count)} numbers'
            raise ValueError(msg)
        count = _integer(count[0], lines, 'the number of nodes', 1)
        for i in range(count):
            node = lines.next('node {} of {} of tree {} of draw {}', i + 1, count, t + 1, d + 1)
            if len(node) != 4:
                msg = (
                    f"{_TREES} line {lines.number}: expected node {i + 1} of {count} of tree {t + 1} of draw "
                    f"{d + 1}, 'nid var cut theta', got {len(node)} numbers"
                )
                raise ValueError(msg)
            tokens += node
            numbers.append(lines.number)
        tree_of += [t] * count
    return tokens, np.array(tree_of), np.array(numbers)


def _columns(tokens, numbers):
    """``nid, var, cut`` (int64) and ``theta`` (float64) of the node lines
    (`tokens`, 4 a line), a column at a time; a bad one is named by its line."""
    out = [_column(tokens[i::4], numbers, what, np.int64) for i, what in enumerate(('nid', 'var', 'cut'))]
    return [*out, _column(tokens[3::4], numbers, 'theta', np.float64)]


def _column(tokens, numbers, what, dtype):
    """One column of node lines as `dtype` (non-negative integers, or numbers)."""
    try:
        values = np.array(tokens, dtype)
    except (ValueError, OverflowError):
        values = None
    if values is not None and (dtype is np.float64 or np.all(values >= 0)):
        return values
    for token, number in zip(tokens, numbers.tolist(), strict=True):
        if not _valid(token, dtype):
            kind = 'a non-negative integer' if dtype is np.int64 else 'a number'
            msg = f'{_TREES} line {number}: {what} must be {kind}, got {token!r}'
            raise ValueError(msg)
    return np.array([dtype(token) for token in tokens], dtype)  # (numpy refused what Python reads)


def _valid(token: str, dtype) -> bool:
    try:
        value = dtype(token)
    except (ValueError, OverflowError):
        return False
    return dtype is np.float64 or value >= 0


def _fail(numbers, bad, message: str, *values) -> None:
    """Raise for the first line where `bad`, `message` formatted with the
    `values` (arrays, read at that line, or scalars)."""
    if np.any(bad):
        i = int(np.argmax(bad))
        args = (v[i] if np.ndim(v) else v for v in values)
        msg = f'{_TREES} line {numbers[i]}: ' + message.format(*args)
        raise ValueError(msg)


def _draw_heaps(tokens, tree_of, numbers, ntree, num_cuts):
    """The heap arrays ``(var, split, theta)`` of one draw's node lines
    (``split`` is R's cut plus 1 at internal nodes, 0 elsewhere)."""
    nid, var, cut, theta = _columns(tokens, numbers)
    internal = _check_nodes(nid, tree_of, numbers, ntree)
    p = num_cuts.size
    _fail(numbers, internal & (var >= p), 'split variable {} of node {} does not exist: there are {} predictors',
          var, nid, p)
    cuts = num_cuts[np.minimum(var, p - 1)]
    _fail(numbers, internal & (cut >= cuts), 'cut {} of node {} does not exist: predictor {} has {} cut-points',
          cut, nid, var, cuts)
    _fail(numbers, ~internal & ~np.isfinite(theta), 'the leaf value of node {} must be finite, got {}', nid, theta)
    heap = max(2, 1 << int(nid.max()).bit_length())
    var_h, split_h = np.zeros((ntree, heap // 2), np.int64), np.zeros((ntree, heap // 2), np.int64)
    theta_h = np.zeros((ntree, heap))
    t, k = tree_of[internal], nid[internal]
    var_h[t, k], split_h[t, k] = var[internal], cut[internal] + 1
    theta_h[tree_of[~internal], nid[~internal]] = theta[~internal]
    return var_h, split_h, theta_h


def _check_nodes(nid, tree_of, numbers, ntree):
    """Check that the node numbers make the trees R's reader builds (the
    root first, each node after its parent, none twice, two children or
    none, within bartz's depth); return the mask of internal nodes."""
    index = np.arange(nid.size)
    first = np.r_[True, tree_of[1:] != tree_of[:-1]]
    _fail(numbers, first & (nid != 1), 'the first node of a tree must be the root, nid 1, got {}', nid)
    levels = grove.MAX_SUPPORTED_DEPTH
    _fail(numbers, nid >= _MAX_HEAP, "nid {} is not a node of a tree of at most {} levels (bartz's limit)", nid, levels)
    key = tree_of * _MAX_HEAP + nid
    order = np.argsort(key, kind='stable')
    twice = np.zeros(nid.size, bool)
    twice[order[1:]] = key[order[1:]] == key[order[:-1]]
    _fail(numbers, twice, 'node {} is listed twice in its tree', nid)
    pos = np.full((ntree, _MAX_HEAP), -1)
    pos[tree_of, nid] = index
    parent = pos[tree_of, nid // 2]
    _fail(numbers, ~first & ((parent < 0) | (parent > index)), 'the parent {} of node {} is not listed before it',
          nid // 2, nid)
    internal = np.zeros((ntree, _MAX_HEAP), bool)
    internal[tree_of[~first], nid[~first] // 2] = True
    internal = internal[tree_of, nid]
    child = np.minimum(2 * nid, _MAX_HEAP - 2)
    one_child = internal & ((pos[tree_of, child] < 0) | (pos[tree_of, child + 1] < 0))
    _fail(numbers, one_child, 'node {} has one child, not two', nid)
    return internal


class _Heaps:
    """The heap arrays of all draws, grown to the largest tree seen."""

    def __init__(self, ndpost, ntree, p, max_cuts):
        self.var = np.zeros((ndpost, ntree, 1), binned_dtype(p - 1))
        self.split = np.zeros((ndpost, ntree, 1), binned_dtype(max_cuts))
        self.theta = np.zeros((ndpost, ntree, 2))

    def put(self, d, var, split, theta):
        heap = theta.shape[1]
        if heap > self.theta.shape[2]:
            more = heap - self.theta.shape[2]
            self.var = np.pad(self.var, ((0, 0), (0, 0), (0, more // 2)))
            self.split = np.pad(self.split, ((0, 0), (0, 0), (0, more // 2)))
            self.theta = np.pad(self.theta, ((0, 0), (0, 0), (0, more)))
        self.var[d, :, : heap // 2] = var
        self.split[d, :, : heap // 2] = split
        self.theta[d, :, :heap] = theta


# ---------------------------------------------------------------- prediction


def _check_rows(x, p: int):
    """`x` as a 2-D numeric array with `p` columns (not converted yet: a
    chunk at a time in `TreeDrawsFit.predict`)."""
    if isinstance(x, pd.DataFrame | pd.Series):
        x = x.to_numpy()
    try:
        x = np.asarray(x)
    except Exception as e:
        msg = f'x_new could not be converted to an array: {e}'
        raise TypeError(msg) from e
    checks.check_numeric('x_new', x)
    checks.check_not_complex('x_new', x)
    checks.check_ndim('x_new', x, 2, f'a 2-D (m, {p}) array')
    if x.shape[1] != p:
        msg = f'x_new must have {p} columns, one per predictor of the trees, got {x.shape[1]}'
        raise ValueError(msg)
    return x


def _bin_rows(x, cutpoints):
    """``(p, r)`` bins of the rows `x` (``(r, p)`` float64): the number of
    cut-points ``<= x``, so that R's ``x < cutpoints[cut]`` is ``bin < cut + 1``
    (NaN is above every cut-point, as it fails R's comparison)."""
    dtype = binned_dtype(max(c.size for c in cutpoints))
    out = np.empty((len(cutpoints), x.shape[0]), dtype)
    for j, c in enumerate(cutpoints):
        out[j] = np.searchsorted(c, x[:, j], side='right')
    return out


def _evaluate(X, trace, plan, params):
    """The pipeline at the binned points `X`, padded to the size ladder."""
    r = X.shape[1]
    X = np.pad(buckets.pad_predictors(X), ((0, 0), (0, buckets.bucket_length(r) - r)))
    return sharding.to_host(pipeline.run_padded(X, trace, plan, params))[..., :r]
