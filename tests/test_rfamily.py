"""R's function family (`bartz.wbart`, `pbart`, `lbart`, the ``mc_``
versions), R's `bartz.predict`, R's thinning counts, known sigma
(``lambda_=0``) and ``cont``."""

import inspect

import numpy as np
import pytest
from scipy import special

import bartz
from bartz.api.rfamily import BinaryPrediction

N, P, NDPOST, NSKIP = 120, 3, 40, 20
QUIET = {'printevery': None, 'ndpost': NDPOST, 'nskip': NSKIP}


@pytest.fixture(scope='module')
def data():
    rng = np.random.default_rng(5)
    x = rng.uniform(size=(N, P))
    f = np.sin(6 * x[:, 0]) + x[:, 1]
    y = f + 0.3 * rng.normal(size=N)
    return x, y, (f + 0.3 * rng.normal(size=N) > 0.5).astype(int)


@pytest.fixture(scope='module')
def wfits(data):
    """A wbart fit with every draw, and the same chain with R's counts."""
    x, y, _ = data
    full = bartz.wbart(x, y, x[:10], keepevery=2, ntree=20, **QUIET)
    thin = bartz.wbart(
        x, y, x[:10], keepevery=2, ntree=20, nkeeptrain=10, nkeeptest=20, nkeeptestmean=5, nkeeptreedraws=8, **QUIET
    )
    return full, thin


R_DEFAULTS = {  # R BART 2.9.9's defaults that differ between the functions
    'wbart': {'ntree': 200, 'keepevery': 1, 'ndpost': 1000, 'nskip': 100},
    'pbart': {'ntree': 50, 'keepevery': 1, 'ndpost': 1000, 'nskip': 100},
    'lbart': {'ntree': 200, 'keepevery': 1, 'ndpost': 1000, 'nskip': 100, 'tau_interval': 0.95},
}


@pytest.mark.parametrize('name', R_DEFAULTS)
def test_r_defaults(name):
    parameters = inspect.signature(getattr(bartz, name)).parameters
    for argument, default in R_DEFAULTS[name].items():
        assert parameters[argument].default == default
    mc = inspect.signature(getattr(bartz, f'mc_{name}')).parameters
    assert mc['mc_cores'].default == 2
    assert mc['seed'].default == 99


def test_r_defaults_reach_the_fit(data):
    """pbart's own defaults (50 trees, every draw kept, tau_num 3, qnorm
    offset) reach gbart; sigmaf, fmean, binary_offset, tau_interval set
    what R says."""
    x, y, yb = data
    p = bartz.pbart(x, yb, ndpost=5, nskip=5, printevery=None)
    assert p.ntree == 50
    assert p.yhat_train.shape == (5, N)  # keepevery=1: gbart(type='pbart') would run 50 iterations
    assert p.tau_num == pytest.approx(3)
    assert p.offset == pytest.approx(special.ndtri(np.mean(yb)))
    w = bartz.wbart(x, y, sigmaf=0.5, k=3.0, fmean=1.25, ntree=20, **QUIET)
    assert w.tau_num == pytest.approx(1.5)  # tau = sigmaf / sqrt(ntree) = tau_num / (k sqrt(ntree))
    assert w.offset == 1.25
    assert bartz.wbart(x, y, ntree=20, **QUIET).offset == pytest.approx(np.mean(y))
    lo = bartz.lbart(x, yb, tau_interval=0.1, binary_offset=0.3, ntree=20, **QUIET)
    assert lo.tau_num == pytest.approx(special.logit(0.95))  # R reads an interval below 0.5 as its complement
    assert lo.offset == pytest.approx(0.3)
    assert bartz.lbart(x, yb, ntree=20, **QUIET).offset == pytest.approx(special.logit(np.mean(yb)))


def test_r_refuses_what_r_lacks(data):
    x, y, yb = data
    with pytest.raises(TypeError, match=r"wbart\(\) got unexpected keyword argument\(s\) \['type'\]"):
        bartz.wbart(x, y, type='pbart')
    with pytest.raises(TypeError, match='theta'):
        bartz.lbart(x, yb, theta=1.0)  # R's lbart has no theta
    with pytest.raises(TypeError, match='mc_cores'):
        bartz.wbart(x, y, mc_cores=2)  # R: mc.wbart
    with pytest.raises(ValueError, match='nkeeptrain'):
        bartz.wbart(x, y, nkeeptrain=-1)
    with pytest.raises(ValueError, match='sigmaf'):
        bartz.wbart(x, y, sigmaf=0)


def test_sigma_every_iteration(wfits):
    """R's wbart stores the error sd of every iteration; the kept ones are
    every keepevery-th after the burn-in (the last of each group)."""
    full, _ = wfits
    assert full.sigma.shape == (NSKIP + NDPOST * 2,)
    np.testing.assert_array_equal(full.sigma[NSKIP:][1::2], full.sigma_)


def test_nkeep_thins_as_r(wfits):
    """The counts keep draws s, 2s, ..., ndpost of the same chain (s = ndpost / count)."""
    full, thin = wfits
    np.testing.assert_array_equal(thin.yhat_train, full.yhat_train[3::4])
    np.testing.assert_array_equal(thin.yhat_test, full.yhat_test[1::2])
    np.testing.assert_allclose(thin.yhat_test_mean, full.yhat_test[7::8].mean(axis=0), rtol=1e-6)
    np.testing.assert_array_equal(thin.varcount, np.asarray(full.varcount)[4::5])
    np.testing.assert_array_equal(thin.sigma_, full.sigma_[4::5])
    x = np.linspace(0, 1, 3 * P).reshape(3, P)
    np.testing.assert_array_equal(bartz.predict(thin, x), full.predict(x)[4::5])
    np.testing.assert_array_equal(thin.yhat_train_mean, full.yhat_train_mean)


def test_nkeep_not_dividing_is_ndpost(data, capsys):
    """A count that does not divide ndpost is set to ndpost, with R's message."""
    x, y, _ = data
    fit = bartz.wbart(x, y, ntree=20, nkeeptrain=7, ndpost=NDPOST, nskip=NSKIP, printevery=1000)
    assert fit.yhat_train.shape == (NDPOST, N)
    assert '*****nkeeptrain set to ndpost' in capsys.readouterr().out


def test_nkeep_zero(data, tmp_path):
    x, y, _ = data
    fit = bartz.wbart(x, y, ntree=20, nkeeptrain=0, nkeeptreedraws=0, **QUIET)
    assert fit.yhat_train is None
    assert fit.yhat_train_mean.shape == (N,)
    with pytest.raises(ValueError, match='nkeeptreedraws=0'):
        bartz.predict(fit, x)
    fit.save(tmp_path / 'none.npz')  # nothing to predict with, but what was kept is saved
    loaded = bartz.load(tmp_path / 'none.npz')
    np.testing.assert_array_equal(loaded.yhat_train_mean, fit.yhat_train_mean)
    with pytest.raises(ValueError, match='nkeeptreedraws=0'):
        loaded.predict(x)


def test_mc_thins_each_chain(data):
    """mc_wbart: the counts are totals, thinned chain by chain."""
    x, y, _ = data
    full = bartz.mc_wbart(x, y, mc_cores=2, ntree=20, keepevery=3, **QUIET)
    thin = bartz.mc_wbart(x, y, mc_cores=2, ntree=20, keepevery=3, nkeeptrain=NDPOST // 2, **QUIET)
    assert full.chains == 2
    assert full.sigma.shape == (NSKIP + NDPOST // 2 * 3, 2)
    np.testing.assert_array_equal(thin.yhat_train, full.yhat_train[1::2])
    assert thin.by_chain('yhat_train').shape == (2, NDPOST // 4, N)


def test_predict_binary_as_r(data):
    """R's predict.pbart / predict.lbart: latent draws with the offset, probabilities, their mean."""
    x, _, yb = data
    for function, link in ((bartz.pbart, special.ndtr), (bartz.mc_lbart, special.expit)):
        fit = function(x, yb, x[:7], ntree=20, **QUIET)
        pred = bartz.predict(fit, x[:7], mc_cores=4)
        assert isinstance(pred, BinaryPrediction)
        np.testing.assert_allclose(pred.prob_test, link(pred.yhat_test.astype(np.float64)), rtol=1e-12)
        np.testing.assert_allclose(pred.prob_test, fit.prob_test, rtol=2e-5, atol=1e-6)
        np.testing.assert_allclose(pred.prob_test_mean, fit.prob_test_mean, rtol=2e-5, atol=1e-6)
        assert pred.binary_offset == fit.offset
        read = bartz.from_treedraws(fit.treedraws(), type=fit.type, offset=fit.offset)  # R's trees of the fit
        from_r = bartz.predict(read, x[:7])
        np.testing.assert_allclose(from_r.prob_test, pred.prob_test, rtol=2e-5, atol=1e-6)


def test_predict_refuses(wfits):
    full, _ = wfits
    with pytest.raises(ValueError, match='mc_cores'):
        bartz.predict(full, np.zeros((2, P)), mc_cores=0)
    with pytest.raises(TypeError, match='bartz.BARTFit'):
        bartz.predict(np.zeros(3), np.zeros((2, P)))


def test_known_sigma(data):
    """lambda_=0: sigma fixed at sigest, and used: a huge known sigma leaves
    f at its prior, a small one fits the data."""
    x, y, _ = data
    small = bartz.gbart(x, y, lambda_=0, sigest=0.3, ntree=20, **QUIET)
    assert np.all(small.sigma == pytest.approx(0.3))
    assert small.sigma_mean == pytest.approx(0.3)
    assert np.corrcoef(small.yhat_train_mean, y)[0, 1] > 0.8
    big = bartz.gbart(x, y, lambda_=0, sigest=1000 * np.std(y), ntree=20, **QUIET)
    # the data do not reach the trees: draws from the leaf prior, whose average over 40 draws is noise
    assert abs(np.corrcoef(big.yhat_train_mean, y)[0, 1]) < 0.4
    ols = bartz.wbart(x, y, lambda_=0, ntree=20, **QUIET)  # sigest by default: the OLS residual sd
    assert np.all(ols.sigma == pytest.approx(ols.sigest))
    with pytest.raises(ValueError, match='sigest'):
        bartz.gbart(x, y, lambda_=0, sigest=0)
    with pytest.raises(ValueError, match='lambda_'):
        bartz.gbart(x, y, lambda_=-1)


def test_cont(data):
    """cont=True: the even grid even for a column of few values."""
    x, y, _ = data
    x2 = np.column_stack([x, x[:, 0] > 0.5])
    plain = bartz.wbart(x2, y, ntree=20, numcut=9, **QUIET)
    cont = bartz.wbart(x2, y, ntree=20, numcut=9, cont=True, **QUIET)
    assert plain.numcut[-1] == 1
    assert cont.numcut[-1] == 9
    np.testing.assert_allclose(cont.xinfo[-1, :9], np.arange(1, 10) / 10, rtol=1e-6)


def test_thinned_fits_save_and_load(wfits, tmp_path):
    """A fit thinned by R's counts saves and loads whole, and predicts the same."""
    _, thin = wfits
    thin.save(tmp_path / 'thin.npz')
    loaded = bartz.load(tmp_path / 'thin.npz')
    assert loaded.nkeep == {'train': 10, 'test': 20, 'treedraws': 8}
    for name in ('yhat_train', 'yhat_test', 'yhat_test_mean', 'varcount', 'sigma', 'sigma_'):
        np.testing.assert_array_equal(np.asarray(getattr(loaded, name)), np.asarray(getattr(thin, name)))
    x = np.linspace(0, 1, 3 * P).reshape(3, P)
    np.testing.assert_array_equal(bartz.predict(loaded, x), bartz.predict(thin, x))
