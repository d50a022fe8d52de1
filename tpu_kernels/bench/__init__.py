"""The benchmark harness: declare benchmarks, run them with sound timing, report.

    from tpu_kernels import bench

    def benchmarks(quick: bool, device_type: str) -> list[bench.Benchmark]:
        return [bench.kernel_benchmark("softmax", softmax, inputs=..., points=..., reference=...)]

See docs/benchmarking.md for the method, and `tpu-kernels bench --help`.
"""

from tpu_kernels.bench.compare import compare, regressions
from tpu_kernels.bench.device import Device, resolve
from tpu_kernels.bench.results import CandidateResult, PointResult, Report
from tpu_kernels.bench.runner import run
from tpu_kernels.bench.spec import Benchmark, Candidate, grid, point_id
from tpu_kernels.bench.stats import Summary
from tpu_kernels.bench.suite import compiled_baseline, kernel_benchmark
from tpu_kernels.bench.timing import QUICK, Settings

__all__ = [
    "QUICK",
    "Benchmark",
    "Candidate",
    "CandidateResult",
    "Device",
    "PointResult",
    "Report",
    "Settings",
    "Summary",
    "compare",
    "compiled_baseline",
    "grid",
    "kernel_benchmark",
    "point_id",
    "regressions",
    "resolve",
    "run",
]
