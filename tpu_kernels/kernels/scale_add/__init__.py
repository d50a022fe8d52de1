"""Elementwise: torch.ops.tpu_kernels.scale_add(x, y, *, alpha=1.0, block_rows=None).

The backward is derived with jax.vjp from the kernel body, which is a
jax.custom_vjp whose backward runs a Pallas kernel too (alpha * g for y).
"""

from tpu_kernels.dispatch.buckets import bucket_rows
from tpu_kernels.kernels import registry
from tpu_kernels.kernels._blocks import bf16 as _bf16
from tpu_kernels.kernels.scale_add import pallas, reference, shapes
from tpu_kernels.op import tpu_kernel
from tpu_kernels.verification.tolerance import with_ignored


def _examples():
    return [((_bf16(x), _bf16(y)), {"alpha": 0.5}) for x, y in shapes.BENCH.values()]


# Elementwise, so any dim could be padded; the row dim (-2) is the one that varies in
# (batch, seq, hidden) activations, padded to its bucket (bucket_rows' default
# powers_of_two(128): the sublane tile, powers of two, then multiples of 128) and sliced back: one executable per bucket. A y that broadcasts along it (size 1, or
# no such dim) is left as it is; y's gradient sums over the rows it was broadcast to,
# where the padded rows' incoming gradient is zero.
# Pointwise: under torch.autocast it runs in its inputs' dtypes and promotes mixed ones, like aten.add.
# The options are listed in the order every family's registration lists them (rmsnorm's and
# softmax's look alike on purpose: each family's own values).
scale_add = tpu_kernel(
    "tpu_kernels::scale_add",
    backward="vjp",
    examples=_examples,
    autocast="keep",
    sharding="pointwise",
    check_reference=with_ignored(reference.CHECK, "block_rows"),
    buckets=bucket_rows("x", "y", "out"),
    tune=pallas.Config.space(),
)(pallas.scale_add)

registry.register(
    __name__,
    op=scale_add,
    inputs=lambda xy, dtype, device: tuple(registry.randn(s, dtype, device) for s in xy),
    kwargs={"alpha": 0.5},  # the tests' and benchmarks' calls: alpha is not 1
    helion="add_helion",
)

__all__ = ["scale_add"]
