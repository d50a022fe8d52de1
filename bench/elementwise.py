"""scale_add (x + alpha * y): the Pallas kernel and its Helion twin against torch's fused add."""

from _common import FLOATS, randn

from tpu_kernels import bench
from tpu_kernels.kernels import scale_add
from tpu_kernels.kernels.elementwise import reference, shapes


def _helion(p):
    """The Helion twin of the kernel (CPU: Helion's Pallas backend in interpret mode)."""
    from tpu_kernels.kernels.helion_ops import add_helion

    return [bench.Candidate("helion", lambda x, y: add_helion(x, y, alpha=0.5))]


def benchmarks(quick: bool, device_type: str) -> list[bench.Benchmark]:
    sizes = [xy[0] for xy in shapes.BENCH.values()]  # x and y of one shape: no broadcasting here
    points = bench.grid(shape=sizes, dtype=FLOATS)
    return [
        bench.kernel_benchmark(
            "scale_add",
            scale_add,
            inputs=lambda p, dev: (
                randn(*p["shape"], dtype=p["dtype"], device=dev),
                randn(*p["shape"], dtype=p["dtype"], device=dev),
            ),
            points=points,
            quick_points=bench.grid(shape=[sizes[0]], dtype=FLOATS),
            statics=lambda p: {"alpha": 0.5},
            reference=reference.scale_add,
            reference_kwargs=lambda p: {"alpha": 0.5},
            tolerance_scale=lambda p: 2.0,
            extra=_helion,
            quick=quick,
            device_type=device_type,
        )
    ]
