"""Row softmax: torch.ops.tpu_kernels.softmax(x, *, block_rows=256), with an explicit
backward kernel registered as torch.ops.tpu_kernels.softmax_backward."""

from tpu_kernels.kernels._blocks import bf16 as _bf16
from tpu_kernels.kernels.softmax import pallas, shapes
from tpu_kernels.op import tpu_kernel


def _examples():
    return [((_bf16(shape),), {}) for shape in shapes.BENCH.values()]


# Under torch.autocast it runs in float32, like CUDA autocast's softmax.
softmax = tpu_kernel("tpu_kernels::softmax", examples=_examples, autocast="fp32", sharding="rowwise")(
    pallas.softmax
)
softmax.def_backward(pallas.softmax_backward)

__all__ = ["softmax"]
