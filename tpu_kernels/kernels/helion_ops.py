"""The shipped Helion kernels as torch ops (importing this module imports Helion).

    from tpu_kernels.kernels.helion_ops import add_helion, matmul_helion, rmsnorm_helion, softmax_helion

| op | kernel | backward |
|---|---|---|
| `tpu_kernels::add_helion(x, y, alpha=1.0)` | `elementwise/helion_kernel.py`, 2-D with broadcasting | derived (`jax.vjp` of a JAX reference) |
| `tpu_kernels::softmax_helion(x)` | `softmax/helion_kernel.py` | derived from a JAX reference |
| `tpu_kernels::rmsnorm_helion(x, weight, eps=1e-6)` | `rmsnorm/helion_kernel.py`, returns inv_rms as a residual | explicit: two Helion kernels, `rmsnorm_helion_dx` and `rmsnorm_helion_dweight` |
| `tpu_kernels::matmul_helion(a, b)` | `matmul/helion_kernel.py` | derived from a JAX reference |

Under torch.autocast each follows its Pallas twin's policy (matmul casts like
aten.mm, softmax and rmsnorm run in float32, add keeps its inputs' dtypes).

Each has a Pallas twin in the same family (scale_add, softmax, rmsnorm,
matmul) so the benchmarks can set them side by side.
"""

import jax
import jax.numpy as jnp
import torch

from tpu_kernels.kernels._blocks import bf16 as _bf16
from tpu_kernels.kernels.elementwise import helion_kernel as add_k
from tpu_kernels.kernels.matmul import helion_kernel as matmul_k
from tpu_kernels.kernels.matmul import reference as matmul_ref
from tpu_kernels.kernels.matmul.sharding import matmul_sharding
from tpu_kernels.kernels.rmsnorm import helion_kernel as rms_k
from tpu_kernels.kernels.rmsnorm import sharding as rms_sharding
from tpu_kernels.kernels.softmax import helion_kernel as softmax_k
from tpu_kernels.op import tpu_kernel


def _add_reference(x: jax.Array, y: jax.Array, alpha: float = 1.0) -> jax.Array:
    dtype = jnp.result_type(x, y)
    acc = jnp.promote_types(dtype, jnp.float32)
    return (x.astype(acc) + alpha * y.astype(acc)).astype(dtype)


def _softmax_reference(x: jax.Array) -> jax.Array:
    return jax.nn.softmax(x.astype(jnp.promote_types(x.dtype, jnp.float32)), axis=-1).astype(x.dtype)


# Example calls for the TPU lowering check (`tpu-kernels check`), TPU-sized, bfloat16.
_X, _W = _bf16((1024, 1024)), _bf16((1024,))
_R = jax.ShapeDtypeStruct((1024,), jnp.float32)

add_helion = tpu_kernel(
    "tpu_kernels::add_helion",
    reference=_add_reference,
    sharding="pointwise",
    examples=lambda: [((_X, _bf16((1, 1024))), {"alpha": 0.5})],
    autocast="keep",
)(add_k.add)
softmax_helion = tpu_kernel(
    "tpu_kernels::softmax_helion",
    reference=_softmax_reference,
    examples=lambda: [((_X,), {})],
    autocast="fp32",
    sharding="rowwise",
)(softmax_k.softmax)
matmul_helion = tpu_kernel(
    "tpu_kernels::matmul_helion",
    reference=matmul_ref.matmul_jax,
    examples=lambda: [((_X, _X), {})],
    autocast="lower_precision_fp",
    sharding=matmul_sharding,
)(matmul_k.matmul)

rmsnorm_helion = tpu_kernel(
    "tpu_kernels::rmsnorm_helion",
    outputs=("y", "inv_rms"),
    residuals=("inv_rms",),
    examples=lambda: [((_X, _W), {})],
    autocast="fp32",
    sharding=rms_sharding.rmsnorm_sharding,
)(rms_k.rmsnorm)
rmsnorm_helion_dx = tpu_kernel(
    "tpu_kernels::rmsnorm_helion_dx",
    examples=lambda: [((_X, _W, _R, _X), {})],
    sharding=rms_sharding.dx_sharding,
)(rms_k.rmsnorm_dx)
rmsnorm_helion_dweight = tpu_kernel(
    "tpu_kernels::rmsnorm_helion_dweight",
    examples=lambda: [((_X, _R, _X), {})],
    sharding=rms_sharding.dweight_sharding,
)(rms_k.rmsnorm_dweight)


@rmsnorm_helion.def_backward(composite=True)
def _rmsnorm_helion_backward(
    x: torch.Tensor, weight: torch.Tensor, inv_rms: torch.Tensor, grad_y: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    grad_w = rmsnorm_helion_dweight(x, inv_rms, grad_y).to(weight.dtype)
    return rmsnorm_helion_dx(x, weight, inv_rms, grad_y), grad_w


# The shipped ops' integer rule (docs/dtypes.md): floating-point inputs only, the same error.
for _op, _names in (
    (add_helion, ("x", "y")),
    (softmax_helion, ("x",)),
    (matmul_helion, ("a", "b")),
    (rmsnorm_helion, ("x", "weight")),
):
    _op.source.float_only = frozenset(_names)

__all__ = ["add_helion", "matmul_helion", "rmsnorm_helion", "softmax_helion"]
