"""R's priors in the float32 sampler (`bartz.priors`): numbers it cannot use
are refused before anything is compiled, naming the argument; the extremes
it can use give finite draws."""

import numpy as np
import pytest

from bartz import gbart
from bartz.sampler import step as mcmcstep

SMALL = {'ntree': 5, 'ndpost': 10, 'nskip': 5, 'printevery': None}
N = 60


@pytest.fixture(scope='module')
def data():
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(N, 2))
    y = np.sin(6 * x[:, 0]) + 0.1 * rng.normal(size=N)
    return x, y


@pytest.fixture
def no_sampler(monkeypatch):
    def init(**kwargs):
        pytest.fail('the sampler was set up: the argument was not refused up front')

    monkeypatch.setattr(mcmcstep, 'init', init)


REFUSED = {
    # what the user passes: (arguments, pattern of the message)
    'huge y': ({'y_scale': 1e308}, r'y_train has values up to 1.1\d*e\+308 .* rescale y_train'),
    'tiny w': ({'w': np.full(N, 1e-30)}, r'w has a value 1e-30 that the sampler cannot use'),
    'w too small in sum': ({'w': np.full(N, 2.4e-17)}, r'w has a value 2.4e-17 .* their sum at most'),
    'w too large': ({'w': np.full(N, 1e20)}, r'w has a value 1e\+20 .* at least'),
    'sigdf': ({'sigdf': 1e300}, r"^sigdf gives the error variance prior's shape"),
    'sigest': ({'sigest': 1e-300}, r'^sigest gives the starting error variance'),
    'lambda_': ({'lambda_': 1e300}, r"^lambda_ gives the error variance prior's scale"),
    'lambda_ tiny': ({'lambda_': 1e-300}, r"^lambda_ gives the error variance prior's scale"),
    'offset': ({'offset': 1e30}, r'^offset leaves y_train minus the offset reaching 1.\d*e\+30 standard deviations'),
    'k': ({'k': 1e-300}, r'^k=1e-300 with tau_num=\S+ \(the default\) and ntree=5 gives the leaf prior variance'),
    'tau_num': ({'tau_num': 1e300}, r'^k=2 with tau_num=1e\+300 and ntree=5 gives the leaf prior variance'),
    'tau_num tiny': ({'tau_num': 1e-300}, r'^k=2 with tau_num=1e-300 and ntree=5 gives the leaf prior variance'),
    'sigest from tiny w': ({'sigest': 1e30}, r'^sigest gives the starting error variance'),
}


@pytest.mark.parametrize('case', list(REFUSED))
def test_unusable_numbers_refused_before_the_run(data, case, no_sampler):
    x, y = data
    args, pattern = REFUSED[case]
    args = dict(args)
    y = y * args.pop('y_scale', 1.0)
    with pytest.raises(ValueError, match=pattern):
        gbart(x, y, **args, **SMALL)


def test_binary_offset_beyond_float32_refused(data, no_sampler):
    x, y = data
    with pytest.raises(ValueError, match=r'^offset gives the offset = 1e\+39'):
        gbart(x, y > 0, type='pbart', offset=1e39, **SMALL)


INSIDE = {
    'w': {'w': np.full(N, 3e-17)},
    'sigdf': {'sigdf': 1e38},
    'sigest': {'sigest': 1e-18},
    'lambda_': {'lambda_': 1e37},
    'offset': {'offset': 1e7},
    'k': {'k': 1e-17},
    'tau_num': {'tau_num': 1e18},
}


@pytest.mark.filterwarnings('ignore:y_train is far from zero relative to its spread')
@pytest.mark.parametrize('case', list(INSIDE))
def test_extremes_inside_the_limits_give_finite_draws(data, case):
    x, y = data
    fit = gbart(x, y, x_test=x[:3], **INSIDE[case], **SMALL)
    for name in ('yhat_train', 'yhat_test', 'sigma', 'yhat_train_mean'):
        assert np.all(np.isfinite(getattr(fit, name))), name


def test_tiny_y_fits_as_y_in_its_units(data):
    """y * 1e-300 standardises to the same numbers as y: the same draws, in
    its units (it raised ZeroDivisionError computing the priors)."""
    x, y = data
    a = gbart(x, y, seed=1, **SMALL)
    b = gbart(x, y * 1e-300, seed=1, **SMALL)
    np.testing.assert_allclose(b.sigma / 1e-300, a.sigma, rtol=1e-6)
    np.testing.assert_allclose(b.sigest / 1e-300, a.sigest, rtol=1e-12)
