"""Row softmax: torch.ops.tpu_kernels.softmax(x, *, block_rows=256), with an explicit
backward kernel registered as torch.ops.tpu_kernels.softmax_backward."""

from tpu_kernels.kernels.softmax import pallas
from tpu_kernels.op import tpu_kernel

softmax = tpu_kernel("tpu_kernels::softmax")(pallas.softmax)
softmax.def_backward(pallas.softmax_backward)

__all__ = ["softmax"]
