"""The shipped Helion kernels as torch ops (importing this module imports Helion).

    from tpu_kernels.kernels.helion_ops import add_helion, matmul_helion, rmsnorm_helion, softmax_helion

| op | kernel | backward |
|---|---|---|
| `tpu_kernels::add_helion(x, y, alpha=1.0)` | `scale_add/helion_kernel.py`, 2-D with broadcasting | derived (`jax.vjp` of a JAX reference) |
| `tpu_kernels::softmax_helion(x)` | `softmax/helion_kernel.py` | derived from a JAX reference |
| `tpu_kernels::rmsnorm_helion(x, weight, eps=1e-6)` | `rmsnorm/helion_kernel.py`, returns inv_rms as a residual | explicit: two Helion kernels, `rmsnorm_helion_dx` and `rmsnorm_helion_dweight` |
| `tpu_kernels::matmul_helion(a, b)` | `matmul/helion_kernel.py` | derived from a JAX reference |

Under torch.autocast each follows its Pallas twin's policy (matmul casts like
aten.mm, softmax and rmsnorm run in float32, add keeps its inputs' dtypes).

Each has a Pallas twin in the same family (scale_add, softmax, rmsnorm,
matmul) so the benchmarks can set them side by side.
"""

# Each op is registered in its family's folder (`<family>/helion.py`); this module gathers
# the names in `__all__` of every registered family's helion.py (FAMILIES, `helion=`).
from tpu_kernels import kernels as _kernels  # noqa: F401  (imports every family)
from tpu_kernels.kernels.registry import FAMILIES as _FAMILIES

__all__: list[str] = []
for _family in _FAMILIES.values():
    _module = _family.helion_module()
    if _module is not None:
        globals().update({name: getattr(_module, name) for name in _module.__all__})
        __all__ += _module.__all__
__all__.sort()
del _family, _module
