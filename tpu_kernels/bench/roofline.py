"""Achieved throughput against the device's peaks.

The peaks are part of each device's registration (`DeviceSpec.peaks`, tpu_kernels.runtime.devices),
from the name the device gives itself: TPU figures from JAX's per-TensorCore table
(`devices/tpu.py`), GPU figures from NVIDIA's data sheets (`devices/cuda.py`); each module's
docstring has its table. On CPU the kernels run in Pallas' interpreter, so a roofline is not
meaningful and the report says so.
"""

from __future__ import annotations

from tpu_kernels.runtime import devices
from tpu_kernels.runtime.devices import Peaks

__all__ = ["Peaks", "peaks", "throughput"]


def throughput(seconds: float, flops: float | None, nbytes: float | None, peaks: Peaks | None) -> dict:
    """TFLOP/s, GB/s and the percentage of peak (None where unknown or not meaningful)."""
    out: dict = {"tflops": None, "gbps": None, "pct_peak_flops": None, "pct_peak_bw": None}
    if seconds <= 0:
        return out
    if flops:
        out["tflops"] = flops / seconds / 1e12
        if peaks:
            out["pct_peak_flops"] = 100 * flops / seconds / peaks.flops_per_s
    if nbytes:
        out["gbps"] = nbytes / seconds / 1e9
        if peaks:
            out["pct_peak_bw"] = 100 * nbytes / seconds / peaks.bytes_per_s
    return out


def peaks(device_type: str, name: str) -> Peaks | None:
    """The peaks of the device of this type named `name`, from its registration; None where a
    roofline is not meaningful (the CPU), the model is not in the device's table, or no device
    of this type is registered."""
    try:
        spec = devices.get(device_type)
    except KeyError:
        return None
    return spec.peaks(name)
