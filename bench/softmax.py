"""softmax over the last dimension: the Pallas kernel and its Helion twin against torch.softmax."""

from _common import FLOATS, randn

from tpu_kernels import bench
from tpu_kernels.kernels import softmax
from tpu_kernels.kernels.softmax import reference, shapes


def _helion(p):
    """The Helion twin of the kernel (CPU: Helion's Pallas backend in interpret mode)."""
    from tpu_kernels.kernels.helion_ops import softmax_helion

    return [bench.Candidate("helion", lambda x: softmax_helion(x))]


def benchmarks(quick: bool, device_type: str) -> list[bench.Benchmark]:
    points = bench.grid(shape=list(shapes.BENCH.values()), dtype=FLOATS)
    return [
        bench.kernel_benchmark(
            "softmax",
            softmax,
            inputs=lambda p, dev: (randn(*p["shape"], dtype=p["dtype"], device=dev, scale=3),),
            points=points,
            quick_points=bench.grid(shape=[shapes.BENCH["1kx1k"]], dtype=FLOATS),
            reference=reference.softmax,
            extra=_helion,
            quick=quick,
            device_type=device_type,
        )
    ]
