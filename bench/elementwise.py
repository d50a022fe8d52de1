"""scale_add (x + alpha * y): the Pallas kernel and its Helion twin against torch's fused add."""

from _common import kernel_suite, randn

from tpu_kernels import bench


def benchmarks(quick: bool, device_type: str) -> list[bench.Benchmark]:
    return kernel_suite(
        "elementwise",
        op="scale_add",
        helion="add_helion",
        point=lambda xy: xy[0],  # x and y of one shape: no broadcasting here
        kwargs={"alpha": 0.5},
        inputs=lambda p, dev: (
            randn(*p["shape"], dtype=p["dtype"], device=dev),
            randn(*p["shape"], dtype=p["dtype"], device=dev),
        ),
        reduction=lambda p: 1,  # no reduction: one result per element
        quick=quick,
        device_type=device_type,
    )
