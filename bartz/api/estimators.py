"""scikit-learn estimators: `BARTRegressor` and `BARTClassifier`.

They follow scikit-learn's estimator conventions (parameters stored
unchanged by ``__init__``, ``get_params``/``set_params``, ``fit`` returning
``self``, fitted attributes ending in ``_``, ``random_state``) so that they
work in a ``Pipeline``, with ``clone``, ``GridSearchCV`` and
``cross_val_score``, and pass ``sklearn.utils.estimator_checks.
check_estimator``, without depending on scikit-learn: bartz never imports
it, except in ``__sklearn_tags__``, which only scikit-learn calls.

The fit is `bartz.gbart` with R's defaults (200 trees for regression; 50
trees and ``keepevery=10`` for classification); the fitted `bartz.BARTFit`
is ``fit_``, with all the posterior draws. ``predict`` returns the
posterior mean.

Examples
--------
>>> import numpy as np
>>> from bartz import BARTRegressor
>>> rng = np.random.default_rng(0)
>>> X = rng.uniform(size=(200, 3))
>>> y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=200)
>>> model = BARTRegressor(ntree=20, ndpost=100, nskip=50, random_state=0).fit(X, y)
>>> model.predict(X[:2]).shape
(2,)
"""

import inspect
import numbers
import sys
import warnings

import numpy as np
import pandas as pd
from scipy import sparse as scipy_sparse

from bartz.api.gbart import gbart
from bartz.prep import checks
from bartz.prep.encoding import PositionalColumnsWarning, masked_as_nan

__all__ = ['BARTClassifier', 'BARTRegressor']


class NotFittedError(ValueError, AttributeError):
    """A method that needs a fitted estimator was called before ``fit``
    (scikit-learn's ``NotFittedError`` when scikit-learn is loaded)."""


class DataConversionWarning(UserWarning):
    """The input was converted (scikit-learn's ``DataConversionWarning``
    when scikit-learn is loaded)."""


_Y_NOT_FINITE = 'Input y contains NaN or infinity.'  # scikit-learn's message


def _sklearn_class(name, fallback):
    """scikit-learn's exception or warning class `name` if scikit-learn is
    already imported (so that its checks recognise it), else `fallback`."""
    module = sys.modules.get('sklearn.exceptions')
    return getattr(module, name, fallback) if module is not None else fallback


class _BARTEstimator:
    """Shared machinery: parameters, input validation, the fit."""

    _binary = False

    # ---- parameters (scikit-learn's rules: __init__ only stores them)

    @classmethod
    def _param_names(cls):
        signature = inspect.signature(cls.__init__)
        return sorted(name for name in signature.parameters if name != 'self')

    def get_params(self, deep=True):  # noqa: ARG002
        """The constructor's parameters, as a dict (``deep`` is accepted
        for scikit-learn; these estimators have no sub-estimators)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params):
        """Set parameters by name; return ``self``."""
        valid = self._param_names()
        for name, value in params.items():
            if name not in valid:
                msg = f'Invalid parameter {name!r} for estimator {type(self).__name__}. Valid parameters are: {valid}.'
                raise ValueError(msg)
            setattr(self, name, value)
        return self

    def __repr__(self):
        defaults = {
            name: p.default for name, p in inspect.signature(type(self).__init__).parameters.items() if name != 'self'
        }
        changed = []
        for name in self._param_names():
            value = getattr(self, name)
            default = defaults[name]
            same = value is default or (type(value) is type(default) and np.all(value == default))
            if not same:
                changed.append(f'{name}={value!r}')
        return f'{type(self).__name__}({", ".join(changed)})'

    def __sklearn_is_fitted__(self):
        return hasattr(self, 'fit_')

    def _check_fitted(self):
        if not hasattr(self, 'fit_'):
            cls = _sklearn_class('NotFittedError', NotFittedError)
            msg = f'This {type(self).__name__} instance is not fitted yet. Call fit with appropriate arguments first.'
            raise cls(msg)

    # ---- input validation

    def _validate_X(self, X, *, reset):
        name = type(self).__name__
        if X is None:
            msg = f'{name} needs X, got None'
            raise TypeError(msg)
        if scipy_sparse.issparse(X):
            msg = f'{name} does not accept sparse input; convert it to a dense array with X.toarray()'
            raise TypeError(msg)
        names = None
        if isinstance(X, pd.DataFrame):
            columns = list(X.columns)
            if columns and all(isinstance(c, str) for c in columns):
                names = np.asarray(columns, dtype=object)
            if not all(isinstance(t, np.dtype) and t.kind in 'biuf' for t in X.dtypes):
                # categorical, string or nullable columns: the DataFrame goes
                # to gbart, which encodes it (dummies, missing values)
                return self._checked_shape(X, names, reset=reset)
            X = X.to_numpy()
        arr = np.asarray(masked_as_nan(X))  # masked entries are missing values, as in gbart
        # (scikit-learn's messages, which its check_estimator matches)
        checks.check_not_complex('X', arr, error=ValueError, message='Complex data not supported')
        arr = arr.astype(np.float64)  # numpy's own error says what could not be converted
        reshape = (
            f'{name} expects a 2-dimensional X (n_samples, n_features), got shape {arr.shape}. '
            'Reshape your data, e.g. with X.reshape(-1, 1) for a single feature'
        )
        checks.check_ndim('X', arr, 2, '2-dimensional', message=reshape)
        infinity = 'Input X contains infinity (missing values may be given as NaN).'
        checks.check_finite('X', arr, allow_nan=True, message=infinity)
        return self._checked_shape(arr, names, reset=reset)

    def _checked_shape(self, X, names, *, reset):
        """Check the shape of the array or DataFrame `X`, record (`reset`) or
        check its number of features and their names; return `X`."""
        name = type(self).__name__
        n, p = X.shape
        if n == 0:
            msg = f'Found array with 0 sample(s) (shape={X.shape}) while a minimum of 1 is required.'
            raise ValueError(msg)
        if p == 0:
            msg = f'Found array with 0 feature(s) (shape={X.shape}) while a minimum of 1 is required.'
            raise ValueError(msg)
        if reset:
            self.n_features_in_ = p
            if names is not None:
                self.feature_names_in_ = names
            elif hasattr(self, 'feature_names_in_'):
                del self.feature_names_in_
        else:
            if p != self.n_features_in_:
                msg = f'X has {p} features, but {name} is expecting {self.n_features_in_} features as input.'
                raise ValueError(msg)
            self._check_feature_names(names)
        return X

    def _check_feature_names(self, names):
        fitted = getattr(self, 'feature_names_in_', None)
        cls = type(self).__name__
        if fitted is None and names is None:
            return
        if fitted is None:
            warnings.warn(f'X has feature names, but {cls} was fitted without feature names', UserWarning, stacklevel=5)
            return
        if names is None:
            warnings.warn(f'X does not have valid feature names, but {cls} was fitted with feature names', UserWarning, stacklevel=5)
            return
        if len(names) == len(fitted) and np.all(names == fitted):
            return
        unseen = sorted(set(names) - set(fitted))
        missing = sorted(set(fitted) - set(names))

        def listed(items):
            shown = ''.join(f'- {item}\n' for item in items[:5])
            return shown + ('- ...\n' if len(items) > 5 else '')

        msg = 'The feature names should match those that were passed during fit.\n'
        if unseen:
            msg += 'Feature names unseen at fit time:\n' + listed(unseen)
        if missing:
            msg += 'Feature names seen at fit time, yet now missing:\n' + listed(missing)
        if not unseen and not missing:
            msg += 'Feature names must be in the same order as they were in fit.\n'
        raise ValueError(msg)

    def _validate_y(self, y, n):
        name = type(self).__name__
        if y is None:
            msg = f'{name} requires y to be passed, but the target y is None.'
            raise ValueError(msg)
        if isinstance(y, pd.DataFrame | pd.Series):
            y = y.to_numpy()
        arr = np.asarray(y)
        if arr.ndim == 2 and arr.shape[1] == 1:
            warnings.warn(
                'A column-vector y was passed when a 1d array was expected. Please change the shape of y to '
                '(n_samples,), for example using ravel().',
                _sklearn_class('DataConversionWarning', DataConversionWarning),
                stacklevel=3,
            )
            arr = arr[:, 0]
        one_d = f'y should be a 1d array, got an array of shape {arr.shape} instead.'
        checks.check_ndim('y', arr, 1, '1d', message=one_d)
        if arr.shape[0] != n:
            msg = f'X and y have different numbers of samples: {n} and {arr.shape[0]}'
            raise ValueError(msg)
        return arr

    def _posterior_mean(self, X):
        """``fit_.predict(X, kind='mean')`` as float64; scikit-learn's own
        warning about feature names (`_check_feature_names`) replaces
        bartz's about columns taken by position."""
        with warnings.catch_warnings():
            warnings.simplefilter('ignore', PositionalColumnsWarning)
            return np.asarray(self.fit_.predict(X, kind='mean'), np.float64)

    def _random_seed(self):
        rs = self.random_state
        if rs is None:
            return int(np.random.default_rng().integers(2**31))
        if isinstance(rs, numbers.Integral) and not isinstance(rs, bool):
            if not 0 <= rs < 2**64:
                msg = (
                    'random_state must be None, a non-negative integer below 2**64 or a numpy '
                    f'RandomState/Generator, got {rs!r}'
                )
                raise ValueError(msg)
            return int(rs)
        if isinstance(rs, np.random.RandomState):
            return int(rs.randint(2**31))
        if isinstance(rs, np.random.Generator):
            return int(rs.integers(2**31))
        msg = f'random_state must be None, a non-negative integer or a numpy RandomState/Generator, got {rs!r}'
        raise TypeError(msg)

    def _gbart(self, X, y, **kwargs):
        return gbart(
            X,
            y,
            ntree=self.ntree,
            ndpost=self.ndpost,
            nskip=self.nskip,
            keepevery=self.keepevery,
            k=self.k,
            power=self.power,
            base=self.base,
            tau_num=self.tau_num,
            offset=self.offset,
            numcut=self.numcut,
            usequants=self.usequants,
            sparse=self.sparse,
            theta=self.theta,
            a=self.a,
            b=self.b,
            rho=self.rho,
            rm_const=self.rm_const,
            maxdepth=self.maxdepth,
            min_points_per_leaf=self.min_points_per_leaf,
            mc_cores=self.mc_cores,
            moves=self.moves,
            warmstart=self.warmstart,
            printevery=None,
            seed=self._random_seed(),
            **kwargs,
        )

    def _tags(self, estimator_type):
        from sklearn.utils import ClassifierTags, InputTags, RegressorTags, Tags, TargetTags  # noqa: PLC0415

        return Tags(
            estimator_type=estimator_type,
            target_tags=TargetTags(required=True),
            classifier_tags=ClassifierTags(multi_class=False) if estimator_type == 'classifier' else None,
            regressor_tags=RegressorTags() if estimator_type == 'regressor' else None,
            input_tags=InputTags(allow_nan=True, sparse=False),
        )


_SHARED_DOC = """
    ntree
        Number of trees (default as R: 200 for regression, 50 for
        classification).
    ndpost, nskip, keepevery
        Kept draws, burn-in iterations, iterations per kept draw (default
        keepevery: 1 for regression, 10 for classification, as R).
    k, power, base, tau_num, offset, numcut, usequants, sparse, theta, a, b, rho, rm_const
        As in `bartz.gbart`.
    maxdepth, min_points_per_leaf, mc_cores
        As in `bartz.gbart`.
    moves, warmstart
        The tree moves and their probabilities, and the number of
        grow-from-root sweeps before the MCMC, as in `bartz.gbart`
        (defaults: GROW/PRUNE/CHANGE/SWAP, no warm start).
    random_state
        Seed of the chain: an integer, None (a fresh seed at every fit, as
        scikit-learn; note that `bartz.gbart` defaults to R's 99), or a numpy
        ``RandomState``/``Generator`` to draw the seed from.
"""


class BARTRegressor(_BARTEstimator):
    """BART regression as a scikit-learn estimator (`bartz.gbart`, ``type='wbart'``).

    Parameters
    ----------
    sigest, sigdf, sigquant, lambda_
        Error variance prior, as in `bartz.gbart`.
    {shared}
    Attributes
    ----------
    fit_ : BARTFit
        The fit, with the posterior draws.
    n_features_in_ : int
        Number of features seen by ``fit``.
    feature_names_in_ : ndarray of str
        Their names, when ``X`` was a DataFrame with string column names.
    """

    def __init__(
        self,
        *,
        ntree=None,
        ndpost=1000,
        nskip=100,
        keepevery=None,
        k=2.0,
        power=2.0,
        base=0.95,
        sigest=None,
        sigdf=3,
        sigquant=0.9,
        lambda_=None,
        tau_num=None,
        offset=None,
        numcut=100,
        usequants=False,
        sparse=False,
        theta=0,
        a=0.5,
        b=1,
        rho=None,
        rm_const=True,
        maxdepth=6,
        min_points_per_leaf=5,
        mc_cores=1,
        moves=None,
        warmstart=0,
        random_state=None,
    ):
        self.ntree = ntree
        self.ndpost = ndpost
        self.nskip = nskip
        self.keepevery = keepevery
        self.k = k
        self.power = power
        self.base = base
        self.sigest = sigest
        self.sigdf = sigdf
        self.sigquant = sigquant
        self.lambda_ = lambda_
        self.tau_num = tau_num
        self.offset = offset
        self.numcut = numcut
        self.usequants = usequants
        self.sparse = sparse
        self.theta = theta
        self.a = a
        self.b = b
        self.rho = rho
        self.rm_const = rm_const
        self.maxdepth = maxdepth
        self.min_points_per_leaf = min_points_per_leaf
        self.mc_cores = mc_cores
        self.moves = moves
        self.warmstart = warmstart
        self.random_state = random_state

    def fit(self, X, y):
        """Fit by MCMC; return ``self``.

        Parameters
        ----------
        X
            ``(n_samples, n_features)`` array of numbers, or DataFrame
            (categorical and string columns are encoded as by `bartz.gbart`);
            missing values (NaN, None) are allowed, as in `bartz.gbart`.
        y
            ``(n_samples,)`` numbers.
        """
        X = self._validate_X(X, reset=True)
        y = self._validate_y(y, X.shape[0]).astype(np.float64)
        checks.check_finite('y', y, message=_Y_NOT_FINITE)
        if X.shape[0] < 2:
            msg = f'BARTRegressor needs at least 2 samples, got {X.shape[0]} sample'
            raise ValueError(msg)
        if np.ptp(y) == 0:
            # nothing to learn: the constant, without MCMC
            self._constant = float(y[0])
            self.fit_ = None
            return self
        self._constant = None
        self.fit_ = self._gbart(X, y, sigest=self.sigest, sigdf=self.sigdf, sigquant=self.sigquant, lambda_=self.lambda_)
        return self

    def predict(self, X):
        """Posterior mean of f at the rows of `X`, ``(n_samples,)``."""
        self._check_fitted()
        X = self._validate_X(X, reset=False)
        if self._constant is not None:
            return np.full(X.shape[0], self._constant)
        return self._posterior_mean(X)

    def score(self, X, y):
        """Coefficient of determination R^2 of `predict` on ``(X, y)``."""
        pred = self.predict(X)
        y = self._validate_y(y, pred.shape[0]).astype(np.float64)
        ss_res = np.sum((y - pred) ** 2)
        ss_tot = np.sum((y - y.mean()) ** 2)
        if ss_tot == 0:
            return 1.0 if ss_res == 0 else 0.0
        return float(1 - ss_res / ss_tot)

    def __sklearn_tags__(self):
        return self._tags('regressor')


class BARTClassifier(_BARTEstimator):
    """Binary BART classification as a scikit-learn estimator (`bartz.gbart`).

    Any two class labels are accepted (``classes_``, sorted; the second is
    the positive class, coded 1); more than two raise an error.

    Parameters
    ----------
    type
        ``'pbart'`` (probit, default) or ``'lbart'`` (logistic).
    {shared}
    Attributes
    ----------
    classes_ : ndarray
        The two labels, sorted.
    fit_ : BARTFit
        The fit, with the posterior draws of ``P(y = classes_[1] | x)``.
    n_features_in_ : int
        Number of features seen by ``fit``.
    feature_names_in_ : ndarray of str
        Their names, when ``X`` was a DataFrame with string column names.
    """

    def __init__(
        self,
        *,
        type='pbart',  # noqa: A002
        ntree=None,
        ndpost=1000,
        nskip=100,
        keepevery=None,
        k=2.0,
        power=2.0,
        base=0.95,
        tau_num=None,
        offset=None,
        numcut=100,
        usequants=False,
        sparse=False,
        theta=0,
        a=0.5,
        b=1,
        rho=None,
        rm_const=True,
        maxdepth=6,
        min_points_per_leaf=5,
        mc_cores=1,
        moves=None,
        warmstart=0,
        random_state=None,
    ):
        self.type = type
        self.ntree = ntree
        self.ndpost = ndpost
        self.nskip = nskip
        self.keepevery = keepevery
        self.k = k
        self.power = power
        self.base = base
        self.tau_num = tau_num
        self.offset = offset
        self.numcut = numcut
        self.usequants = usequants
        self.sparse = sparse
        self.theta = theta
        self.a = a
        self.b = b
        self.rho = rho
        self.rm_const = rm_const
        self.maxdepth = maxdepth
        self.min_points_per_leaf = min_points_per_leaf
        self.mc_cores = mc_cores
        self.moves = moves
        self.warmstart = warmstart
        self.random_state = random_state

    def fit(self, X, y):
        """Fit by MCMC; return ``self``.

        Parameters
        ----------
        X
            ``(n_samples, n_features)`` array of numbers, or DataFrame
            (categorical and string columns are encoded as by `bartz.gbart`);
            missing values (NaN, None) are allowed, as in `bartz.gbart`.
        y
            ``(n_samples,)`` labels of two classes.
        """
        if self.type not in ('pbart', 'lbart'):
            msg = f"type must be 'pbart' or 'lbart', got {self.type!r}"
            raise ValueError(msg)
        X = self._validate_X(X, reset=True)
        y = self._validate_y(y, X.shape[0])
        if y.dtype.kind == 'f':
            checks.check_finite('y', y, message=_Y_NOT_FINITE)
            if np.any(y != np.round(y)):
                msg = 'Unknown label type: continuous. BARTClassifier needs class labels (two classes); use BARTRegressor for a continuous y.'
                raise ValueError(msg)
        classes = np.unique(y)
        if classes.size != 2:
            what = f'{classes.size} class{"es" if classes.size != 1 else ""}: {classes[:5].tolist()}'
            msg = f'Only binary classification is supported: BARTClassifier needs 2 classes in y, got {what}'
            raise ValueError(msg)
        self.classes_ = classes
        self.fit_ = self._gbart(X, (y == classes[1]).astype(np.float64), type=self.type)
        return self

    def predict_proba(self, X):
        """Posterior mean probabilities of the two classes, ``(n_samples, 2)``."""
        self._check_fitted()
        X = self._validate_X(X, reset=False)
        p = self._posterior_mean(X)
        p = np.clip(p, 0.0, 1.0)
        return np.column_stack([1 - p, p])

    def predict(self, X):
        """The label of the class with posterior mean probability >= 1/2."""
        proba = self.predict_proba(X)
        return self.classes_[(proba[:, 1] >= 0.5).astype(int)]

    def score(self, X, y):
        """Accuracy of `predict` on ``(X, y)``."""
        pred = self.predict(X)
        y = self._validate_y(y, pred.shape[0])
        return float(np.mean(pred == y))

    def __sklearn_tags__(self):
        return self._tags('classifier')


BARTRegressor.__doc__ = BARTRegressor.__doc__.format(shared=_SHARED_DOC)
BARTClassifier.__doc__ = BARTClassifier.__doc__.format(shared=_SHARED_DOC)
