"""Survival BART: R's ``surv.pre.bart`` layout, `surv_bart`, `mc_surv_bart`, R's predict."""

import numpy as np
import pandas as pd
import pytest

import bartz
from bartz.api.survival import surv_pre_bart

# ---------------------------------------------------------------- R's layout, worked by hand


def test_layout_covariates():
    """3 people at times 3, 1, 2 (the last censored): rows up to each one's time, time first."""
    pre = surv_pre_bart([3, 1, 2], [1, 1, 0], x_train=[[10.0], [20.0], [30.0]], x_test=[[5.0], [6.0]])
    np.testing.assert_array_equal(pre.times, [1, 2, 3])
    assert pre.K == 3
    np.testing.assert_array_equal(pre.y_train, [0, 0, 1, 1, 0, 0])
    np.testing.assert_array_equal(pre.tx_train, [[1, 10], [2, 10], [3, 10], [1, 20], [1, 30], [2, 30]])
    np.testing.assert_array_equal(pre.tx_test, [[1, 5], [2, 5], [3, 5], [1, 6], [2, 6], [3, 6]])


def test_layout_ties_and_censoring_at_an_event_time():
    """Two people at time 2, one dead, one censored there: the censored one is at risk at 2, no event."""
    pre = surv_pre_bart([2, 2, 1], [1, 0, 1])
    np.testing.assert_array_equal(pre.times, [1, 2])
    np.testing.assert_array_equal(pre.y_train, [0, 1, 0, 0, 1])
    np.testing.assert_array_equal(pre.tx_train[:, 0], [1, 2, 1, 2, 1])
    assert pre.tx_train.shape == (5, 1)
    np.testing.assert_array_equal(pre.tx_test, [[1], [2]])  # Kaplan-Meier analogue: the grid


def test_layout_no_x_test():
    pre = surv_pre_bart([2, 1], [1, 0], x_train=[[0.0], [1.0]])
    assert pre.tx_test is None


def test_layout_K_quantiles():
    """K=2: the grid is the quantiles at 1/2 and 1 (3 and 5), times moved up onto it."""
    pre = surv_pre_bart([1, 2, 3, 4, 5], [1, 1, 0, 1, 1], K=2)
    np.testing.assert_array_equal(pre.times, [3, 5])
    assert pre.K == 2
    np.testing.assert_array_equal(pre.y_train, [1, 1, 0, 0, 1, 0, 1])
    np.testing.assert_array_equal(pre.tx_train[:, 0], [3, 3, 3, 3, 5, 3, 5])


def test_layout_K_quantiles_with_ties():
    """Repeated quantiles are dropped (R's unique): K=3 on 1, 1, 1, 2 gives the grid 1, 2."""
    pre = surv_pre_bart([1, 1, 1, 2], [1, 0, 1, 1], K=3)
    np.testing.assert_array_equal(pre.times, [1, 2])
    assert pre.K == 2
    np.testing.assert_array_equal(pre.y_train, [1, 0, 1, 0, 1])


def test_layout_events_grid():
    """A time off the given grid gives no event row (R's rule)."""
    pre = surv_pre_bart([1.5, 2, 3], [1, 1, 1], events=[1, 2, 3])
    np.testing.assert_array_equal(pre.y_train, [0, 0, 1, 0, 0, 1])
    np.testing.assert_array_equal(pre.tx_train[:, 0], [1, 1, 2, 1, 2, 3])


def test_layout_dataframe():
    x = pd.DataFrame({'age': [60.0, 70.0], 'arm': pd.Categorical(['a', 'b'])})
    pre = surv_pre_bart([2, 1], [0, 1], x_train=x, x_test=x.iloc[:1])
    assert list(pre.tx_train.columns) == ['t', 'age', 'arm']
    assert pre.tx_train['arm'].tolist() == ['a', 'a', 'b']
    np.testing.assert_array_equal(pre.tx_test['t'], [1, 2])
    assert isinstance(pre.tx_train['arm'].dtype, pd.CategoricalDtype)


def test_layout_time_dependent():
    """ztimes/zdelta: the indicator switches on at z, the time becomes the sojourn since z."""
    x = np.array([[2.0, 1.0], [2.0, 0.0]])  # (z, d) of two people observed to time 3
    pre = surv_pre_bart([3, 3], [1, 0], x_train=x, x_test=x[:1], events=[1, 2, 3], ztimes=[0], zdelta=[1])
    np.testing.assert_array_equal(pre.tx_train[:3], [[1, 1, 0], [2, 0, 1], [3, 1, 1]])
    np.testing.assert_array_equal(pre.tx_train[3:], [[1, 1, 0], [2, 2, 0], [3, 3, 0]])
    np.testing.assert_array_equal(pre.tx_test, pre.tx_train[:3])


@pytest.mark.parametrize(
    ('kwargs', 'match'),
    [
        (dict(times=[1, 2], delta=[1]), 'times and delta must be identical'),
        (dict(times=[0, 2], delta=[1, 1]), 'less than or equal to time zero'),
        (dict(times=[1, 2], delta=[1, 2]), 'delta must be 0'),
        (dict(times=[1, 2], delta=[1, 1], events=[2, 1]), 'events must be'),
        (dict(times=[1, 2], delta=[1, 1], x_train=[[1.0]]), 'number of rows in x.train'),
        (dict(times=[1, 2], delta=[1, 1], x_train=[[1.0], [2.0]], ztimes=[0]), 'ztimes and zdelta'),
        (dict(times=[1, 2], delta=[1, 1], x_train=[[1.0], [2.0]], ztimes=[3], zdelta=[0]), 'ztimes must'),
    ],
)
def test_layout_errors(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        surv_pre_bart(**kwargs)
