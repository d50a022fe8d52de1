"""matmul's JAX reference (no torch: the chip runner imports it on a TPU host without torch).

The differentiable twin of the Pallas kernel: the op's backward is derived from it with
jax.vjp, and `python -m tpu_kernels.chip` times it under jit as XLA's version of the same math.
"""

import jax
import jax.numpy as jnp


def matmul_jax(
    a: jax.Array,
    b: jax.Array,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
) -> jax.Array:
    """a @ b with a float32 accumulator, rounded to a's dtype (the kernel's accumulation);
    the kernel's block sizes (same signature) cannot change the result and are ignored."""
    del block_m, block_n, block_k
    acc = jnp.promote_types(a.dtype, jnp.float32)
    return jnp.matmul(a, b, preferred_element_type=acc).astype(a.dtype)
