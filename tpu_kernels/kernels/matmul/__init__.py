"""Tiled matmul: torch.ops.tpu_kernels.matmul(a, b, *, block_m=256, block_n=256, block_k=256).

The backward is derived with jax.vjp from a JAX reference (the Pallas kernel
itself is not differentiable by JAX) and registered as
torch.ops.tpu_kernels.matmul_backward.
"""

from tpu_kernels.checking import Reference
from tpu_kernels.kernels._blocks import bf16 as _bf16
from tpu_kernels.kernels.matmul import pallas, reference, shapes
from tpu_kernels.kernels.matmul.sharding import matmul_sharding
from tpu_kernels.op import tpu_kernel
from tpu_kernels.testing import dot_scale


def _examples():
    return [((_bf16((m, k)), _bf16((k, n))), {}) for m, k, n in shapes.BENCH.values()]


def _rms(t) -> float:
    return t.detach().double().square().mean().sqrt().item() if t.numel() else 0.0


def _magnitude(args) -> float:
    # dot_scale assumes unit-sized inputs: scale by the inputs' typical sizes.
    return max(_rms(args["a"]) * _rms(args["b"]), 1e-30)


# Checked mode's reference (tpu_kernels.checked()): a K-long dot product per output; the
# gradients are dots of length N (for a) and M (for b).
_CHECK = Reference(
    reference.matmul,
    scale=lambda args: dot_scale(max(args["a"].shape[-1], 1), args["a"].dtype) * max(_magnitude(args), 1.0),
    grad_scale=lambda args: (
        dot_scale(max(*args["a"].shape, args["b"].shape[-1], 1), args["a"].dtype) * max(_magnitude(args), 1.0)
    ),
    ignore=("block_m", "block_n", "block_k"),
)

# Under torch.autocast it casts like aten.mm: both operands to the autocast dtype.
matmul = tpu_kernel(
    "tpu_kernels::matmul",
    reference=reference.matmul_jax,
    examples=_examples,
    autocast="lower_precision_fp",
    sharding=matmul_sharding,
    check_reference=_CHECK,
)(pallas.matmul)

__all__ = ["matmul"]
