"""Device meshes: chains and data points spread over devices.

bartz uses a two-axis `jax.sharding.Mesh` with axes ``('chains', 'data')``.
Chains are independent, so splitting them over the 'chains' axis needs no
communication. Splitting the data points over the 'data' axis leaves the
trees replicated on every device of a chain; every sum over the data (leaf
residual sums, grow counts, the error sum of squares) becomes a ``psum``.
Per device, the memory of the data-sized arrays (binned predictors, leaf
indices, residuals) drops in proportion to the number of data devices.

The same code runs on several CPU devices (virtual ones with
``XLA_FLAGS=--xla_force_host_platform_device_count=N``), several GPUs, or,
after ``jax.distributed.initialize()``, several hosts.
"""

import math

import jax
import numpy as np
from jax.sharding import Mesh

from bartz.forest import grove
from bartz.forest import predict as pipeline

__all__ = ['auto_mesh', 'evaluate_trace_sharded', 'make_mesh', 'padded_length', 'to_host']


def make_mesh(num_chain_devices: int = 1, num_data_devices: int = 1, devices=None) -> Mesh:
    """A ``('chains', 'data')`` mesh of ``num_chain_devices * num_data_devices`` devices.

    Parameters
    ----------
    num_chain_devices, num_data_devices
        Sizes of the two axes.
    devices
        The devices to use, by default the first ones of ``jax.devices()``.
    """
    devices = list(jax.devices() if devices is None else devices)
    need = num_chain_devices * num_data_devices
    if need > len(devices):
        msg = (
            f'num_chain_devices * num_data_devices = {num_chain_devices} * {num_data_devices} = {need} '
            f'devices, but only {len(devices)} are available'
        )
        raise ValueError(msg)
    grid = np.array(devices[:need], dtype=object).reshape(num_chain_devices, num_data_devices)
    return Mesh(grid, ('chains', 'data'))


def auto_mesh(num_chains: int, devices=None) -> Mesh | None:
    """The default mesh: chains over as many devices as divide them; None on one device."""
    devices = list(jax.devices() if devices is None else devices)
    if len(devices) <= 1:
        return None
    num_chain_devices = math.gcd(num_chains, len(devices))
    if num_chain_devices <= 1:
        return None
    return make_mesh(num_chain_devices, 1, devices)


def padded_length(n: int, num_data_devices: int) -> int:
    """Smallest multiple of `num_data_devices` that is at least `n`."""
    return -(-n // num_data_devices) * num_data_devices


def evaluate_trace_sharded(
    X, trace: grove.TreeHeaps, mesh: Mesh, *, kind='draws', max_memory=grove.DEFAULT_MAX_MEMORY, link=None,
    link_params=(),
):
    """`bartz.grove.evaluate_trace` with the points split over all devices of `mesh`.

    The program of the prediction pipeline (`bartz.forest.predict`) on a
    mesh: the trace is replicated, each device evaluates its slice of the
    points, padded to whole aligned batches, with its own memory budget.
    Returns a host array (the padding dropped).
    """
    concrete = not any(isinstance(a, jax.core.Tracer) for a in trace)
    ndraws = trace.leaf_tree.shape[0]
    plan = pipeline.make_plan(kind, link=link, ndraws=ndraws, max_memory=max_memory, concrete=concrete)
    params = tuple(np.float32(v) for v in link_params)
    return to_host(pipeline.run_padded(X, trace, plan, params, mesh=mesh))[..., : X.shape[1]]


def to_host(x):
    """Fetch an array to a numpy array, also when it spans several hosts."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils  # noqa: PLC0415

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)
