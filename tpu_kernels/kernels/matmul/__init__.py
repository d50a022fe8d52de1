"""Tiled matmul: torch.ops.tpu_kernels.matmul(a, b, *, block_m=None, block_n=None, block_k=None).

Blocks left unset take the cost model's choice at the call's shape (blocks.py).

The backward is the same kernel twice, reading b and a transposed in place
(grad_out @ b.T and a.T @ grad_out: pallas.matmul_backward), registered as
torch.ops.tpu_kernels.matmul_backward.
"""

from tpu_kernels.kernels import registry
from tpu_kernels.kernels._blocks import bf16 as _bf16
from tpu_kernels.kernels.matmul import pallas, reference, shapes
from tpu_kernels.kernels.matmul.sharding import matmul_sharding
from tpu_kernels.op import tpu_kernel
from tpu_kernels.verification.tolerance import with_ignored


def _examples():
    return [((_bf16((m, k)), _bf16((k, n))), {}) for m, k, n in shapes.BENCH.values()]


# Under torch.autocast it casts like aten.mm: both operands to the autocast dtype.
matmul = tpu_kernel(
    "tpu_kernels::matmul",
    examples=_examples,
    autocast="lower_precision_fp",
    sharding=matmul_sharding,
    check_reference=with_ignored(reference.CHECK, "block_m", "block_n", "block_k"),
    tune=pallas.Config.space(),
    cost=pallas.predicted_seconds,  # the tuner predicts with the default blocks' cost model (blocks.py)
)(pallas.matmul)
matmul.def_backward(pallas.matmul_backward)

registry.register(
    __name__,
    op=matmul,
    inputs=lambda mkn, dtype, device: (
        registry.randn(mkn[:2], dtype, device),
        registry.randn(mkn[1:], dtype, device),
    ),
    helion="matmul_helion",
    reduction=lambda mkn: mkn[1],  # K-long dot products
    flops=lambda mkn: 2 * mkn[0] * mkn[1] * mkn[2],
)

__all__ = ["matmul"]
