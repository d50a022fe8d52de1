"""softmax over the last dimension: the Pallas kernel and its Helion twin against torch.softmax."""

from _common import helion_twin, kernel_suite, randn

from tpu_kernels import bench
from tpu_kernels.kernels import softmax
from tpu_kernels.kernels.softmax import reference, shapes


def benchmarks(quick: bool, device_type: str) -> list[bench.Benchmark]:
    return kernel_suite(
        "softmax",
        softmax,
        axis="shape",
        sizes=shapes.BENCH.values(),
        quick_size=shapes.BENCH["1kx1k"],
        helion=helion_twin("softmax_helion"),
        inputs=lambda p, dev: (randn(*p["shape"], dtype=p["dtype"], device=dev, scale=3),),
        reference=reference.softmax,
        quick=quick,
        device_type=device_type,
    )
