"""Elementwise: torch.ops.tpu_kernels.scale_add(x, y, *, alpha=1.0, block_rows=256).

The backward is derived with jax.vjp from the kernel body, which is a
jax.custom_vjp whose backward runs the same Pallas kernel.
"""

from tpu_kernels.kernels._blocks import bf16 as _bf16
from tpu_kernels.kernels.elementwise import pallas, shapes
from tpu_kernels.op import tpu_kernel


def _examples():
    return [((_bf16(x), _bf16(y)), {"alpha": 0.5}) for x, y in shapes.BENCH.values()]


# Pointwise: under torch.autocast it runs in its inputs' dtypes and promotes mixed ones, like aten.add.
scale_add = tpu_kernel(
    "tpu_kernels::scale_add", backward="vjp", examples=_examples, autocast="keep", sharding="pointwise"
)(pallas.scale_add)

__all__ = ["scale_add"]
