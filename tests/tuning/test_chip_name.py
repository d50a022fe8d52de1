"""The chip a tuning entry is for (`tunables/chip_name.py`): every TPU generation's names, as JAX
reports them (device_kind) and as Cloud TPU VMs do (TPU_ACCELERATOR_TYPE), and their order."""

import pytest
import torch

from tpu_kernels.tunables import chip_name

# jax.Device.device_kind on each generation (jax._src.tpu_info.chip_version_from_device_kind)
DEVICE_KINDS = {
    "TPU v2": "v2",
    "TPU v3": "v3",
    "TPU v4": "v4",
    "TPU v4 lite": "v4i",
    "TPU v5 lite": "v5e",
    "TPU v5e": "v5e",
    "TPU v5": "v5p",
    "TPU v5p": "v5p",
    "TPU v6 lite": "v6e",
    "TPU v6e": "v6e",
    "TPU7": "7",
    "TPU7x": "7x",
}

# TPU_ACCELERATOR_TYPE on Cloud TPU VMs: the generation, then the chip (or core) count
ACCELERATOR_TYPES = {
    "v2-8": "v2",
    "v3-32": "v3",
    "v4-8": "v4",
    "v5litepod-16": "v5e",  # v5e's Cloud name: a v5e must never read v5p's entries
    "v5litepod-1": "v5e",
    "V5LITEPOD-8": "v5e",
    " v5litepod-4 ": "v5e",
    "v5e-4": "v5e",
    "v5p-8": "v5p",
    "v6e-8": "v6e",
    "v6e": "v6e",
    "tpu7x-8": "7x",
    "v7x-16": "7x",
    "7x": "7x",
}


@pytest.mark.parametrize(("kind", "name"), DEVICE_KINDS.items())
def test_every_generation_jax_reports_has_its_chip_name(kind, name):
    assert chip_name.device_kind_chip(kind) == name


@pytest.mark.parametrize(("accelerator", "name"), ACCELERATOR_TYPES.items())
def test_every_cloud_accelerator_type_has_its_chip_name(accelerator, name):
    assert chip_name.accelerator_type_chip(accelerator) == name


@pytest.mark.parametrize("unknown", ["", "v9z-8", "cpu", "gpu-a100", "v5litepod-x", "TPU v5 lite"])
def test_an_unknown_name_is_no_chip(unknown):
    assert chip_name.accelerator_type_chip(unknown) is None
    assert chip_name.device_kind_chip(unknown.replace("TPU v5 lite", "tpu v5 lite")) is None


def test_the_generation_comes_from_the_override_then_jax_then_the_accelerator_type(monkeypatch):
    chip_name._detected_tpu.cache_clear()
    try:
        monkeypatch.delenv("TPU_KERNELS_CHIP", raising=False)
        monkeypatch.delenv("TPU_ACCELERATOR_TYPE", raising=False)
        assert chip_name.chip_of("tpu") == "tpu"  # nothing says: only entries tuned for "tpu" apply
        chip_name._detected_tpu.cache_clear()
        monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v5litepod-16")
        assert chip_name.chip_of("tpu") == "v5e"
        monkeypatch.setattr(chip_name, "_jax_tpu", lambda: "v6e")
        chip_name._detected_tpu.cache_clear()
        assert chip_name.chip_of("tpu") == "v6e"  # what JAX sees comes first
        monkeypatch.setenv("TPU_KERNELS_CHIP", "7x")
        assert chip_name.chip_of("tpu") == "7x"  # the override, always
    finally:
        chip_name._detected_tpu.cache_clear()
    assert chip_name.chip_of("cpu") == "cpu" and chip_name.chip_of(torch.device("cpu")) == "cpu"
