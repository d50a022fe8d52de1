"""Every registered kernel family (tpu_kernels.kernels.FAMILIES): its Pallas op and its Helion
twin against torch, one benchmark per family, named as its op (`--filter softmax` runs one).

Sizes, inputs, baseline, reduction length and flop count come from each family's registration
(`tpu_kernels/kernels/<family>/__init__.py`) and `shapes.py`: a new family is benchmarked here
without an edit. The families and their baselines are listed in docs/reference.md
(generated from the registry).
"""

from _common import kernel_suite

from tpu_kernels import bench
from tpu_kernels.kernels import FAMILIES


def benchmarks(quick: bool, device_type: str) -> list[bench.Benchmark]:
    return [
        b for family in FAMILIES.values() for b in kernel_suite(family, quick=quick, device_type=device_type)
    ]
