"""Kernels that ship with tpu_kernels (supported API), one folder per family.

Each family has `pallas.py` (the kernel and its JAX wrapper: pure JAX, no
torch), `reference.py` (torch and JAX references), `shapes.py` (named shapes
shared by tests and benchmarks) and `__init__.py`, which registers the torch
op `torch.ops.tpu_kernels.<name>`. Importing a family registers its ops.

    from tpu_kernels.kernels import matmul, rmsnorm, scale_add, softmax
"""

from tpu_kernels.kernels.elementwise import scale_add
from tpu_kernels.kernels.matmul import matmul
from tpu_kernels.kernels.rmsnorm import rmsnorm
from tpu_kernels.kernels.softmax import softmax

__all__ = ["matmul", "rmsnorm", "scale_add", "softmax"]
