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

# Each op is registered in its family's folder (`<family>/helion.py`); this module gathers them.
from tpu_kernels.kernels.elementwise.helion import add_helion
from tpu_kernels.kernels.matmul.helion import matmul_helion
from tpu_kernels.kernels.rmsnorm.helion import rmsnorm_helion, rmsnorm_helion_dweight, rmsnorm_helion_dx
from tpu_kernels.kernels.softmax.helion import softmax_helion

__all__ = [
    "add_helion",
    "matmul_helion",
    "rmsnorm_helion",
    "rmsnorm_helion_dweight",
    "rmsnorm_helion_dx",
    "softmax_helion",
]
