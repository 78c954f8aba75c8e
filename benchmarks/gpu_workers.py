"""The workers of `benchmarks/gpu.py`: each runs in a fresh process, with
this repository's bartz, as ``gpu_workers.py --worker SPEC`` (through
`peers.run_worker`), and prints its result as a line of JSON.

``SPEC['kind']`` names the worker (`WORKERS`); the rest of the spec is its
settings, with ``deadline`` (seconds since the epoch) where the budget of
the run ends.
"""

import collections
import cProfile
import json
import os
import pstats
import sys
import tempfile
import time

import peers  # benchmarks/ is the script directory, on sys.path

HERE = os.path.dirname(os.path.abspath(__file__))
NTREE = 200


def probe_worker(spec):
    """The machine as JAX sees it."""
    import jax  # noqa: PLC0415
    import jaxlib  # noqa: PLC0415

    device = jax.devices()[0]
    info = peers.probe()
    info.update(
        devices=str(jax.devices()),
        device_kind=device.device_kind,
        backend=jax.default_backend(),
        jaxlib=jaxlib.__version__,
        memory_stats=device.memory_stats() is not None,
    )
    return info


def _peak_bytes():
    """The device's peak memory in use so far, None where JAX has no figure."""
    import jax  # noqa: PLC0415

    stats = jax.devices()[0].memory_stats()
    return None if not stats else stats.get('peak_bytes_in_use')


def _loop_kernels(hlo):
    """Kernels of the loop over trees in a compiled step's HLO text: the
    ``body 2`` computation (a loop body inside the loop over iterations)
    with the most kernels below it, with everything it calls (each branch
    of a conditional counted): ``{'fusion': k, 'custom-call': k, 'other':
    k}``, control flow (while, conditional, call) left out."""
    sys.path.insert(0, os.path.join(HERE, 'profile'))
    import kernels as hlo_kernels  # noqa: PLC0415 (benchmarks/profile/kernels.py)

    comps, roles = hlo_kernels._computations(hlo)  # noqa: SLF001

    def below(root):
        names = [name for name in comps if name == root or _calls(roles, root, name)]
        counts = collections.Counter()
        for name in names:
            for op, _ in hlo_kernels._kernels(comps[name]):  # noqa: SLF001
                if op not in ('while', 'conditional', 'call'):
                    counts[op if op in ('fusion', 'custom-call') else 'other'] += 1
        return counts

    loops = [name for name in comps if hlo_kernels._where(name, roles) == 'body 2']  # noqa: SLF001
    if not loops:
        return {}
    counts = max((below(name) for name in loops), key=lambda c: sum(c.values()))
    return {key: counts.get(key, 0) for key in ('fusion', 'custom-call', 'other')}


def _calls(roles, root, name):
    """Whether computation `name` is reached from `root` (`roles`: callee -> (role, caller))."""
    for _ in range(16):
        if name not in roles:
            return False
        name = roles[name][1]
        if name == root:
            return True
    return False


def plan_variants(n, backend, *, variants=True, pallas=True):
    """The sweep's plan for `n` points on `backend` and (`variants`) its
    variants, the Pallas kernel's if the plan has one (and `pallas`): ``{name: plan}``."""
    import dataclasses  # noqa: PLC0415

    from bartz import mcmcstep  # noqa: PLC0415

    default = mcmcstep.plan_sweep(n, backend=backend, num_trees=NTREE)
    if not variants:
        return {f'plan_sweep (masked_sums={default.masked_sums})': default}
    flipped = not default.masked_sums
    variants = {
        f'plan_sweep (masked_sums={default.masked_sums})': default,
        f'masked_sums={flipped}': default.replace(masked_sums=flipped, lanes=not flipped),
    }
    if pallas and 'pallas' in {field.name for field in dataclasses.fields(default)}:
        try:
            variants['pallas=True'] = mcmcstep.plan_sweep(n, backend=backend, num_trees=NTREE, pallas=True)
        except (TypeError, ValueError):  # (a plan_sweep without the option, or a backend without the kernel)
            variants['pallas=True'] = default.replace(pallas=True, lanes=False)
    return variants


def _compile_variants(run_k, state, plans, n):
    """Lower the step loop for each plan, compile them all at once on the
    host's threads (JAX lets go of the GIL while XLA compiles, jaxlib
    0.10.2); ``{name: (compiled, seconds)}``, or ``{name: exception}``."""
    import concurrent.futures  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415
    from jax import random  # noqa: PLC0415

    from bartz._compile import options as xla_options  # noqa: PLC0415 (the options gbart's chunk uses)

    options = dict(xla_options.chunk_options(n)) or None
    key = random.key(0)

    def compile_one(plan):
        t0 = time.perf_counter()
        lowered = run_k.lower(key, state._replace(plan=plan), np.int32(0), np.int32(1))
        return lowered.compile(compiler_options=options), time.perf_counter() - t0

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(plans)) as pool:
        futures = {name: pool.submit(compile_one, plan) for name, plan in plans.items()}
    out = {}
    for name, future in futures.items():
        try:
            out[name] = future.result()
        except Exception as exc:  # noqa: BLE001 (a variant that does not compile is a row of the table)
            out[name] = exc
    return out


def _memory(compiled):
    """The compiled program's device memory (``memory_analysis()``), bytes."""
    try:
        mem = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 (not every backend has it)
        return None
    if mem is None:
        return None
    fields = ('temp', 'argument', 'output', 'alias')
    return {f: int(getattr(mem, f'{f}_size_in_bytes', 0) or 0) for f in fields}


def _time_variants(compiled, state, plans, spec, deadline):
    """Time each compiled variant in turn on one chain (a burn-in first);
    ``({name: ms per iteration}, notes)``."""
    import jax  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415
    from jax import random  # noqa: PLC0415

    key, it, times, notes = random.key(0), 0, {}, {}
    names = [name for name in plans if not isinstance(compiled[name], Exception)]
    if not names:
        return times, notes, 0
    first = names[0]
    t0 = time.perf_counter()
    state = state._replace(plan=plans[first])
    state = jax.block_until_ready(compiled[first][0](key, state, np.int32(0), np.int32(spec['burn'])))
    it += spec['burn']
    per_iter = (time.perf_counter() - t0) / spec['burn']
    iters = int(min(spec['max_iters'], max(2, spec['target_s'] / max(per_iter, 1e-6))))
    for name in names:
        if time.time() > deadline:
            notes[name] = 'not timed: budget ran out'
            continue
        run = compiled[name][0]
        state = state._replace(plan=plans[name])
        state = jax.block_until_ready(run(key, state, np.int32(it), np.int32(1)))  # (the first run loads the kernels)
        it += 1
        t0 = time.perf_counter()
        state = jax.block_until_ready(run(key, state, np.int32(it), np.int32(iters)))
        times[name] = 1e3 * (time.perf_counter() - t0) / iters
        it += iters
    return times, notes, iters


def steps_worker(spec):
    """The MCMC step at each n of ``spec['sizes']`` with the plan's variants."""
    import jax  # noqa: PLC0415
    from jax import lax  # noqa: PLC0415

    import speed  # noqa: PLC0415 (benchmarks/speed.py: the state as gbart builds it)
    from bartz import mcmcstep  # noqa: PLC0415

    def loop(key, state, start, k):
        def body(i, state):
            return mcmcstep.step(mcmcstep.fold_in(key, i), state)[0]

        return lax.fori_loop(start, start + k, body, state)

    run_k = jax.jit(loop, donate_argnums=(1,))
    backend = jax.default_backend()
    rows = []
    for n in spec['sizes']:
        if time.time() > spec['deadline']:
            rows.append({'n': n, 'skipped': 'budget ran out'})
            continue
        t0 = time.perf_counter()
        state = jax.block_until_ready(speed.build_state(*peers.friedman1(n), NTREE))
        prep_s = time.perf_counter() - t0
        plans = plan_variants(n, backend, variants=n in spec['variants_at'], pallas=spec['pallas'])
        compiled = _compile_variants(run_k, state, plans, n)
        times, notes, iters = _time_variants(compiled, state, plans, spec, spec['deadline'])
        for name, plan in plans.items():
            row = {'n': n, 'variant': name, 'default': plan is next(iter(plans.values())), 'prep_s': prep_s}
            if isinstance(compiled[name], Exception):
                row['error'] = repr(compiled[name])[:300]
            else:
                program, row['compile_s'] = compiled[name]
                row.update(memory=_memory(program), kernels=_loop_kernels(program.as_text()), iterations=iters)
                row['ms_per_iter'] = times.get(name)
                row['note'] = notes.get(name, '')
            rows.append(row)
        del state, compiled
    return {'rows': rows, 'backend': backend, 'peak_bytes': _peak_bytes()}


def _stage_seconds(profile):
    """Seconds of `gbart`'s stages in a cProfile of one fit: the whole call,
    the sampling loop (`run_mcmc`), the chains' set-up around it
    (`run_chains`) and the packaging after it (`package`,
    `warn_convergence`); None for a stage this bartz does not have."""
    stats = pstats.Stats(profile).stats
    cumulative = collections.defaultdict(float)
    for (_, _, name), (_, _, _, seconds, _) in stats.items():
        cumulative[name] += seconds
    names = ('gbart', 'run_mcmc', 'run_chains', 'package', 'warn_convergence')
    return {name: cumulative.get(name) for name in names}


def _split_fixed(wall, elapsed, stages):
    """A warm fit's `wall` seconds by stage: the sampling loop is measured
    (`elapsed`); the rest is split in the shares of the profiled stages."""
    if not stages.get('gbart') or stages.get('run_mcmc') is None:
        return {'sampling loop': elapsed}
    outside = wall - elapsed
    profiled_outside = stages['gbart'] - stages['run_mcmc']
    setup = (stages.get('run_chains') or stages['run_mcmc']) - stages['run_mcmc']
    post = (stages.get('package') or 0.0) + (stages.get('warn_convergence') or 0.0)
    prep = profiled_outside - setup - post
    scale = outside / profiled_outside if profiled_outside > 0 else 0.0
    return {
        'host preparation': prep * scale,
        'state to device, program lookup': setup * scale,
        'sampling loop': elapsed,
        'host post-processing': post * scale,
    }


def _device_trace(fit, x, y, settings, top):
    """Fit once under JAX's profiler: the device's busy time, events per
    iteration and the top kernels (`benchmarks/profile/device_profile.py`);
    None without device events (a CPU)."""
    import jax  # noqa: PLC0415

    sys.path.insert(0, os.path.join(HERE, 'profile'))
    import device_profile  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix='bartz-gpu-trace-') as tmp:
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            fit(x, y, *settings)
        events = device_profile.device_events(tmp)
    if not events:
        return None
    iterations = sum(settings)
    busy_us = sum(dur for _, _, dur, _ in events)
    return {
        'busy_s': busy_us / 1e6,
        'events_per_iter': len(events) / iterations,
        'report': device_profile.report(events, iterations, top)[-top:],
    }


def fixed_worker(spec):
    """Where the fixed cost of a warm fit at ``spec['n']`` goes."""
    import jax  # noqa: PLC0415

    fit = peers.import_fitter(peers.OURS)
    n, settings = spec['n'], tuple(spec['settings'])
    x, y = peers.friedman1(n)
    t0 = time.perf_counter()
    fit(x, y, *settings)
    first_s = time.perf_counter() - t0
    walls = []
    for _ in range(2):
        t0 = time.perf_counter()
        result = fit(x, y, *settings)
        walls.append((time.perf_counter() - t0, result.run_info.elapsed))
    wall, elapsed = min(walls)
    profile = cProfile.Profile()
    profile.runcall(fit, x, y, *settings)
    stages = _split_fixed(wall, elapsed, _stage_seconds(profile))
    out = {'first_s': first_s, 'warm_s': wall, 'elapsed_s': elapsed, 'stages': stages}
    out['trace'] = None if jax.default_backend() == 'cpu' else _device_trace(fit, x, y, settings, spec['top'])
    return out


def predict_worker(spec):
    """``fit.predict(x, kind='mean')`` at ``spec['rows']`` rows, twice."""
    import numpy as np  # noqa: PLC0415

    fit = peers.import_fitter(peers.OURS)
    x, y = peers.friedman1(spec['n'])
    result = fit(x, y, *spec['settings'])
    x_new = np.random.default_rng(1).uniform(size=(spec['rows'], peers.P)).astype(np.float32)
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        mean = np.asarray(result.predict(x_new, kind='mean'))
        times.append(time.perf_counter() - t0)
    finite = bool(np.isfinite(mean).all())
    return {'first_s': times[0], 'second_s': times[1], 'finite': finite, 'peak_bytes': _peak_bytes()}


def big_worker(spec):
    """One `gbart` fit at ``spec['n']`` points, the first of its process,
    with the seconds JAX reports compiling in it (tracing, lowering, XLA)."""
    import jax  # noqa: PLC0415

    fit = peers.import_fitter(peers.OURS)
    x, y = peers.friedman1(spec['n'])
    compiling = []

    def listener(event, duration, **_):
        if event.startswith('/jax/core/compile/'):
            compiling.append(duration)

    jax.monitoring.register_event_duration_secs_listener(listener)
    t0 = time.perf_counter()
    result = fit(x, y, *spec['settings'])
    wall = time.perf_counter() - t0
    elapsed = result.run_info.elapsed
    return {'wall_s': wall, 'elapsed_s': elapsed, 'compile_s': sum(compiling), 'peak_bytes': _peak_bytes()}


WORKERS = {
    'probe': probe_worker,
    'steps': steps_worker,
    'fixed': fixed_worker,
    'predict': predict_worker,
    'big': big_worker,
}


if __name__ == '__main__':
    if sys.argv[1:2] != ['--worker'] or len(sys.argv) != 3:
        sys.exit('usage: gpu_workers.py --worker SPEC (run by benchmarks/gpu.py)')
    spec = json.loads(sys.argv[2])
    print(json.dumps(WORKERS[spec['kind']](spec)))
