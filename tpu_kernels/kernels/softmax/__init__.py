"""Row softmax: torch.ops.tpu_kernels.softmax(x, *, block_rows=None), with an explicit
backward kernel registered as torch.ops.tpu_kernels.softmax_backward."""

from tpu_kernels.dispatch.buckets import bucket_rows
from tpu_kernels.kernels import registry
from tpu_kernels.kernels._blocks import bf16 as _bf16
from tpu_kernels.kernels.softmax import pallas, reference, shapes
from tpu_kernels.op import tpu_kernel
from tpu_kernels.verification.tolerance import with_ignored


def _examples():
    return [((_bf16(shape),), {}) for shape in shapes.BENCH.values()]


# Each row is its own softmax, so the row dim (-2) is padded to its bucket (bucket_rows'
# powers_of_two(128): the sublane tile, powers of two, then multiples of 128) and sliced
# back: one executable per bucket. A zero row's softmax is uniform (no NaN), and
# the backward's padded rows get zero gradients. The softmax dim (-1) is never padded.
# Under torch.autocast it runs in float32, like CUDA autocast's softmax.
softmax = tpu_kernel(
    "tpu_kernels::softmax",
    examples=_examples,
    autocast="fp32",
    sharding="rowwise",
    check_reference=with_ignored(reference.CHECK, "block_rows"),
    buckets=bucket_rows("x", "out"),
    tune=pallas.Config.space(),
)(pallas.softmax)
softmax.def_backward(pallas.softmax_backward)

# Inputs scaled by 3: rows with a spread of values, so the max subtraction matters.
registry.register(
    __name__,
    op=softmax,
    inputs=lambda shape, dtype, device: (registry.randn(shape, dtype, device, scale=3),),
    helion="softmax_helion",
    reduction=lambda shape: shape[-1],  # each row's max and sum
)

__all__ = ["softmax"]
