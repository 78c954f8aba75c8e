"""The GPU variant of the per-leaf sums (chosen by the sweep's plan,
`bartz.kernels.plan.SweepPlan.masked_sums`)."""

from jax import numpy as jnp


def masked_leaf_sums(indices, values, size: int):
    """``zeros(size).at[indices].add(values)`` as one reduction over the
    points of `values` masked by bin (`size` outputs per column).

    XLA's GPU backend fuses it into one kernel without forming the mask,
    where a scatter-add serialises on the atomics of the few leaves most
    points share; its temporaries stay within the size of `values`
    (jaxlib 0.10.2). On CPU XLA would form the ``(n, size)`` mask and pay a
    pass per bin: the plan never uses it there."""
    mask = indices[:, None] == jnp.arange(size, dtype=indices.dtype)  # (n, size)
    mask = mask.reshape(*mask.shape, *(1,) * (values.ndim - 1))  # (n, size, 1...) against (n, 1, k...)
    return jnp.sum(jnp.where(mask, values[:, None], 0), axis=0)
