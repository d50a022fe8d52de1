"""softmax over the last dimension: the Pallas kernel and its Helion twin against torch.softmax."""

from _common import kernel_suite, randn

from tpu_kernels import bench


def benchmarks(quick: bool, device_type: str) -> list[bench.Benchmark]:
    return kernel_suite(
        "softmax",
        inputs=lambda p, dev: (randn(*p["shape"], dtype=p["dtype"], device=dev, scale=3),),
        reduction=lambda p: p["shape"][-1],  # each row's max and sum
        quick=quick,
        device_type=device_type,
    )
