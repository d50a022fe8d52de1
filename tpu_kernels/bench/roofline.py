"""Achieved throughput against the device's peaks.

TPU peaks come from JAX's own table (`jax.experimental.pallas.tpu.get_tpu_info`
holds them per TensorCore); a figure is compared with the peak of the cores one
torch device drives (both cores of a v4/v5p chip in megacore mode, one core
otherwise). GPU peaks are dense (no sparsity) figures from NVIDIA's data sheets.

| device | bf16 TFLOP/s | HBM GB/s | source |
|---|---|---|---|
| TPU v4 (megacore, 2 TC) | 275 | 1230 | 2 x get_tpu_info_for_chip(TPU_V4, 2) per core |
| TPU v5e | 197 | 820 | get_tpu_info_for_chip(TPU_V5E, 1) |
| TPU v5p (megacore, 2 TC) | 459 | 2460 | 2 x get_tpu_info_for_chip(TPU_V5P, 2) per core |
| TPU v6e | 920 | 1640 | get_tpu_info_for_chip(TPU_V6E, 1) |
| TPU7x (one TensorCore per torch device) | 1155 | 3700 | get_tpu_info_for_chip(TPU_7X, 1) |
| H100 SXM | 989 | 3350 | NVIDIA H100 data sheet |
| H200 SXM | 989 | 4800 | NVIDIA H200 data sheet |

On CPU the kernels run in Pallas' interpreter, so a roofline is not meaningful
and the report says so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Peaks:
    flops_per_s: float  # dense bf16
    bytes_per_s: float  # HBM
    source: str

    def to_dict(self) -> dict:
        return asdict(self)


GPU_PEAKS = {
    "H100": Peaks(989e12, 3.35e12, "NVIDIA H100 SXM data sheet (dense bf16)"),
    "H200": Peaks(989e12, 4.8e12, "NVIDIA H200 SXM data sheet (dense bf16)"),
}


def gpu_peaks(name: str) -> Peaks | None:
    for key, peaks in GPU_PEAKS.items():
        if key in name:
            return peaks
    return None


def tpu_peaks(device_kind: str) -> Peaks | None:
    """Peaks of one torch TPU device from JAX's per-TensorCore table."""
    try:
        from jax.experimental.pallas import tpu as tpu_info

        from tpu_kernels import _compat

        version_of = _compat.get("chip_version_from_device_kind")
    except (ImportError, _compat.CompatError):  # pragma: no cover
        return None
    try:
        version = version_of(device_kind)
    except Exception:
        return None
    if version is None:
        return None
    megacore = version in (tpu_info.ChipVersion.TPU_V4, tpu_info.ChipVersion.TPU_V5P)
    cores = 2 if megacore else 1
    info = tpu_info.get_tpu_info_for_chip(version, cores)
    return Peaks(
        info.bf16_ops_per_second * cores,
        info.mem_bw_bytes_per_second * cores,
        f"jax get_tpu_info_for_chip({version.name}, {cores}) x {cores} TensorCore(s)",
    )


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
    """A device's peaks by its type and name; None where a roofline is not meaningful (the
    CPU runs Pallas in an interpreter) or the device is not in a table here."""
    by_type = {"cuda": gpu_peaks, "tpu": tpu_peaks}.get(device_type)
    return by_type(name) if by_type is not None else None
