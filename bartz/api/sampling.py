"""Running `bartz.gbart`'s chains: the sampler's state on the padded data,
the chains, and the predictions at ``x_test`` compiled meanwhile.

`run_chains` pads the binned data to the size ladder (`bartz.buckets`, so
that a new n reuses the compiled sampler), makes the state of one chain
(`initial_state`, `bartz.mcmcstep.init`), copies it per chain, warm starts
it (`bartz.run.warmstart`) and runs `bartz.mcmcloop.run_mcmc`; it returns
the draws chain after chain, as R's ``mc.gbart``.
"""

import threading

import jax
import numpy as np

from bartz.api import packaging
from bartz.forest import grove
from bartz.kernels import rng as _random
from bartz.prep import sizes as buckets
from bartz.run import loop as mcmcloop
from bartz.run import warmstart
from bartz.sampler import step as mcmcstep

__all__ = ['compile_test_predictions', 'initial_state', 'run_chains', 'start_key']


def start_key(key):
    """The key of the chains' starting states, apart from the iterations'
    ``fold_in(key, i)``: ``fold_in(key, 2**32 - 1)``, computed on the host
    (it does not consume `key` for the key-reuse checker)."""
    return _random.fold_in_on_host(key, 2**32 - 1)


def compile_test_predictions(X_test, settings, outcome, prior, state, ndraws):
    """Compile gbart's predictions at ``x_test`` on a thread of its own while
    the sampler compiles and runs, instead of after it (a new process with
    the programs kept loads them instead, `bartz._compile.programs`).

    Only what the program depends on is known before the run, the shapes and
    types: the binned ``x_test`` (`X_test`), the trees of `state`, `ndraws`.
    They are given exactly as the call after the run will see them (the
    same key), which then finds the program ready, or waits for it. On
    failure, nothing is lost: that call compiles it."""
    forest = state.forest
    sharding = jax.device_put(np.zeros((), np.uint8)).sharding  # where `package`'s jax.device_put puts them

    def like(array, shape):
        return jax.ShapeDtypeStruct(shape, array.dtype, sharding=sharding)

    trace = grove.TreeHeaps(
        like(forest.var_tree, (ndraws, *forest.var_tree.shape[-2:])),
        like(forest.split_tree, (ndraws, *forest.split_tree.shape[-2:])),
        like(forest.leaf_tree, (ndraws, *forest.leaf_tree.shape[-2:])),
    )
    X = like(X_test, X_test.shape)
    link = packaging.x_test_link(outcome.binary)
    params = packaging.link_params(link, float(prior.offset), prior.scale)

    def work():
        try:
            grove.prepare_evaluate_trace(X, trace, max_memory=settings.max_memory, link=link, link_params=params)
        except Exception:  # noqa: BLE001, S110: the call after the run compiles it
            pass

    threading.Thread(target=work, name='bartz-compile-x_test', daemon=True).start()


def initial_state(X, splits, log_s, prior, w, outcome, settings, mesh, group, censored=None):
    """The padded bins and the sampler's state of one chain before the run
    (`bartz.mcmcstep.init`); `censored`, an ``(n,)`` bool mask or None,
    marks the right-censored points of ``y`` (`bartz.api.abart`)."""
    p, n = X.shape
    num_data_devices = mesh.shape['data'] if mesh is not None else 1
    # the data axis padded to the size ladder, so that a new n reuses the
    # compiled sampler; the predictors too, with predictors that have no
    # cut-point (never split on, no DART probability)
    npad = buckets.bucket_length(n, num_data_devices)
    ppad = buckets.predictor_length(p)
    valid = np.arange(npad) < n
    X = np.pad(buckets.pad_predictors(X), ((0, 0), (0, npad - n)))
    max_split = np.pad(np.asarray(splits.max_split), (0, ppad - p))
    log_s = None if log_s is None else np.pad(np.asarray(log_s, np.float32), (0, ppad - p))
    if group is not None:  # each padded predictor a group of its own
        group = np.concatenate([group, np.max(group, initial=-1) + 1 + np.arange(ppad - p, dtype=group.dtype)])
    y_core = np.pad(prior.y_core, (0, npad - n))
    prec_weights = None if w is None else np.pad((1.0 / w**2).astype(np.float32), (0, npad - n))
    dart = {'theta': settings.theta, 'a': settings.a, 'b': settings.b, 'rho': settings.rho, 'group': group}
    dart['augment'] = settings.augment
    censor_bound = None
    if censored is not None:
        if num_data_devices > 1:
            msg = f'censored outcomes (abart) do not split the data over devices yet: got num_data_devices={num_data_devices}'
            raise ValueError(msg)
        censor_bound = np.where(np.pad(censored, (0, npad - n)), y_core, -np.inf)
    state = mcmcstep.init(
        X=X,
        max_split=max_split,
        y=y_core,
        num_trees=settings.ntree,
        max_depth=settings.maxdepth,
        leaf_prior_var=prior.leaf_sd**2,
        sigma2_alpha=prior.sigma2_alpha,
        sigma2_beta=prior.sigma2_beta,
        sigma2_init=prior.sigma2_init,
        base=settings.base,
        power=settings.power,
        prec_weights=prec_weights,
        min_points_per_leaf=settings.min_points_per_leaf,
        log_s=log_s,
        probit_threshold=-prior.offset if outcome.name == 'pbart' else None,
        logit_offset=prior.offset if outcome.name == 'lbart' else None,
        valid=valid,
        dart=dart if settings.sparse else None,
        move_probs=settings.move_probs,
        r_birth=settings.r_birth,
        censor_bound=censor_bound,
    )
    return X, state


def run_chains(key, X, splits, log_s, prior, w, outcome, settings, mesh, group=None, on_start=None, censored=None):
    """Run the chains; return the padded bins, the trace (draws chain after
    chain, ``fit_train`` cut to the real points, ``varcount`` and ``log_s``
    to the real predictors), the burn-in error variances ``(nskip,
    chains)`` and the `bartz.mcmcloop.RunInfo`. ``on_start(state, ndraws)``
    is called before the chains run, with the initial state and the number
    of draws the trace will have."""
    p, n = X.shape
    mc_cores = settings.mc_cores
    X, state = initial_state(X, splits, log_s, prior, w, outcome, settings, mesh, group, censored)
    # one chain on one device runs the plain sweep (no chain axis to vmap over)
    num_chains = None if mesh is None and mc_cores == 1 else mc_cores
    if num_chains is not None:
        state = mcmcstep.init_chains(state, mc_cores)
    state = warmstart.start_chains(start_key(key), state, num_chains, settings.warmstart)
    n_save = -(-settings.ndpost // mc_cores)
    if on_start is not None:
        on_start(state, n_save * mc_cores)
    _, trace, info = mcmcloop.run_mcmc(
        key,
        state,
        n_burn=settings.nskip,
        n_save=n_save,
        n_skip=settings.keepevery,
        printevery=settings.printevery,
        save_train=settings.save_yhat_train,
        sigma_scale=prior.scale,
        num_chains=num_chains,
        mesh=mesh,
        chain_major=True,
    )
    del state
    if num_chains is None:
        burn_sigma2 = None if info.burn_sigma2 is None else info.burn_sigma2[:, None]
    else:
        burn_sigma2 = info.burn_sigma2
        # (chains, draws, ...) -> chain after chain, as R's mc.gbart
        trace = jax.tree.map(lambda a: a.reshape(-1, *a.shape[2:]), trace)
    if trace.fit_train is not None:
        trace = trace._replace(fit_train=trace.fit_train[:, :n])
    trace = trace._replace(
        varcount=trace.varcount[:, :p], log_s=None if trace.log_s is None else trace.log_s[:, :p]
    )
    return X, trace, burn_sigma2, info
