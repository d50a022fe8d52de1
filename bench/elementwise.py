"""scale_add (x + alpha * y): the Pallas kernel and its Helion twin against torch's fused add."""

from _common import helion_twin, kernel_suite, randn

from tpu_kernels import bench
from tpu_kernels.kernels import scale_add
from tpu_kernels.kernels.elementwise import reference, shapes


def benchmarks(quick: bool, device_type: str) -> list[bench.Benchmark]:
    sizes = [xy[0] for xy in shapes.BENCH.values()]  # x and y of one shape: no broadcasting here
    return kernel_suite(
        "scale_add",
        scale_add,
        axis="shape",
        sizes=sizes,
        quick_size=sizes[0],
        helion=helion_twin("add_helion", alpha=0.5),
        inputs=lambda p, dev: (
            randn(*p["shape"], dtype=p["dtype"], device=dev),
            randn(*p["shape"], dtype=p["dtype"], device=dev),
        ),
        statics=lambda p: {"alpha": 0.5},
        reference=reference.scale_add,
        reference_kwargs=lambda p: {"alpha": 0.5},
        tolerance_scale=lambda p: 2.0,
        quick=quick,
        device_type=device_type,
    )
