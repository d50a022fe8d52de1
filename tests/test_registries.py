"""The device registry (tpu_kernels.runtime.devices) and the kernel-language registry (tpu_kernels.runtime.sources)."""

from __future__ import annotations

import os
import re
import sys
import types
from pathlib import Path

import jax.numpy as jnp
import pytest
import torch

from tests.helpers import HAS_TOKAMAX
from tests.registries import device_names
from tpu_kernels import scaffold, tpu_kernel
from tpu_kernels.bench import roofline
from tpu_kernels.errors import BackendUnavailableError
from tpu_kernels.runtime import devices, sources
from tpu_kernels.runtime.devices.jax_exec import JaxExecutor

ROOT = Path(__file__).resolve().parents[1]


def test_the_built_in_devices_and_their_policies():
    by_name = {d.name: d for d in devices.all_devices()}
    assert list(by_name)[:3] == ["cpu", "cuda", "tpu"]
    assert [by_name[n].dispatch_key for n in ("cpu", "cuda", "tpu")] == ["CPU", "CUDA", "PrivateUse1"]
    assert by_name["cuda"].clock == "cuda_events" and by_name["cpu"].clock == "wall"
    assert by_name["tpu"].device_time and not by_name["tpu"].jax_baseline and by_name["cpu"].jax_baseline
    assert by_name["cpu"].available()
    assert [by_name[n].bench_sweep for n in ("cpu", "cuda", "tpu")] == ["reduced", "full", "full"]
    assert devices.get("cuda:1") is by_name["cuda"]
    assert devices.get("privateuseone") is by_name["tpu"]  # before torch_tpu renames PrivateUse1
    if HAS_TOKAMAX:  # Python >= 3.12
        from tpu_kernels.tokamax.implementation import platform_of

        assert platform_of("t", "privateuseone") == "tpu"
    with pytest.raises(
        KeyError, match=r"no device 'xpu' is registered; known: cpu, cuda, privateuseone, tpu"
    ):
        devices.get("xpu")


@pytest.mark.parametrize("name", device_names())
def test_every_registered_device_gets_a_kernel_in_a_new_op_and_resolves_by_name(name):
    spec = devices.get(name)
    assert devices.get(f"{name}:0") is spec and all(devices.get(a) is spec for a in spec.aliases)

    @tpu_kernel(f"registries::per_device_{name}")
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    assert spec.dispatch_key in double._kernels
    assert spec.clock in ("wall", "cuda_events")


def test_a_kernel_family_is_checked_when_registered(tmp_path, monkeypatch):
    from tpu_kernels.kernels import FAMILIES, registry

    softmax = FAMILIES["softmax"]
    with pytest.raises(ValueError, match=r"kernel family 'softmax' is already registered"):
        registry.register(softmax.package, op=softmax.op, inputs=softmax.inputs)
    package = tmp_path / "half_family"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "reference.py").write_text("def softmax(x):\n    return x\n")  # no CHECK
    (package / "shapes.py").write_text("TEST = {}\nBENCH = {'a': (8, 128)}\nQUICK = 'b'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=r"'half_family': half_family.reference has no 'CHECK'"):
        registry.register("half_family", op=softmax.op, inputs=softmax.inputs)
    (package / "reference.py").write_text("def softmax(x):\n    return x\n\nCHECK = None\n")
    monkeypatch.delitem(sys.modules, "half_family.reference")
    with pytest.raises(
        ValueError, match=r"half_family.shapes.QUICK must name one of BENCH's sizes \(a\), got 'b'"
    ):
        registry.register("half_family", op=softmax.op, inputs=softmax.inputs)
    for reduced in ("('c',)", "'a'", "()"):  # not a BENCH size; a string, not names; none
        (package / "shapes.py").write_text(f"TEST = {{}}\nBENCH = {{'a': (8, 128)}}\nQUICK = 'a'\nREDUCED = {reduced}\n")
        monkeypatch.delitem(sys.modules, "half_family.shapes")
        with pytest.raises(
            ValueError, match=r"half_family.shapes.REDUCED must be a non-empty tuple of BENCH's size names \(a\)"
        ):
            registry.register("half_family", op=softmax.op, inputs=softmax.inputs)
    assert "half_family" not in FAMILIES


def test_a_device_name_or_key_is_registered_once():
    cpu = devices.get("cpu")
    with pytest.raises(ValueError, match=r"device 'cpu2': CPU is already registered by 'cpu'"):
        devices.register(devices.DeviceSpec("cpu2", "CPU", cpu.jax_kernel, cpu.available, cpu.synchronize))
    with pytest.raises(ValueError, match=r"clock must be 'wall' or 'cuda_events'"):
        devices.DeviceSpec("x", "X", cpu.jax_kernel, cpu.available, cpu.synchronize, clock="cycles")
    with pytest.raises(ValueError, match=r"bench_sweep must be 'reduced' or 'full', got 'quick'"):
        devices.DeviceSpec("x", "X", cpu.jax_kernel, cpu.available, cpu.synchronize, bench_sweep="quick")


def test_a_registered_device_gets_a_kernel_in_every_new_op(monkeypatch):
    made = []

    def jax_kernel(spec, body):
        from tpu_kernels.spec import OpSpec

        assert isinstance(spec, OpSpec)  # the finished, frozen spec, never a half-built op
        made.append(spec.name)
        return lambda *args, **kwargs: None

    spec = devices.DeviceSpec("npu_test", "XPU", jax_kernel, lambda: False, lambda: None)
    monkeypatch.setitem(devices._DEVICES, spec.name, spec)  # removed again after the test

    @tpu_kernel("registries::double")
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    assert made == ["registries::double"]
    assert set(double._kernels) == {"CPU", "CUDA", "PrivateUse1", "XPU"}
    assert isinstance(double._kernels["CPU"], JaxExecutor)
    x = torch.arange(4.0)
    torch.testing.assert_close(double(x), x * 2)  # the CPU kernel is unaffected


def test_a_registered_language_makes_the_source_and_names_a_template_backend(monkeypatch):
    class Toy:
        pass

    module = types.ModuleType("toy_language")
    module.recognizes = lambda fn: isinstance(fn, Toy)
    jax_module = sys.modules["tpu_kernels.runtime.sources.jax"]
    module.make_source = lambda op_name, fn, options: jax_module.JaxSource(lambda x: x + 1)
    monkeypatch.setitem(sys.modules, "toy_language", module)
    monkeypatch.setattr(sources, "_LANGUAGES", list(sources._LANGUAGES))
    sources.register(sources.Language("toy", "toy_language", "toy"))

    assert [lang.name for lang in sources.languages()] == ["helion", "toy", "jax"]  # JAX stays last
    assert sources.template_backends() == ("pallas", "toy", "helion")
    assert sources.from_function(Toy()) == "toy"
    assert sources.from_function(lambda x: x) == "jax"
    assert sources.make_source("t::toy", Toy()).jax_body(jnp.ones(2)).tolist() == [2.0, 2.0]
    with pytest.raises(ValueError, match="'toy' is already registered"):
        sources.register(sources.Language("toy", "toy_language", "toy"))


OUTSIDE_DEVICE_FIRST = """
import torch
from tpu_kernels.runtime import devices

cpu_kernel = lambda spec, body: (lambda *args, **kwargs: None)
devices.register(devices.DeviceSpec("npu_test", "XPU", cpu_kernel, lambda: False, lambda: None))

from tpu_kernels import tpu_kernel

@tpu_kernel("registries::first", autocast="fp32")
def first(x: torch.Tensor) -> torch.Tensor:
    return x * 2

print(sorted(first._kernels))
print([d.name for d in devices.all_devices()])
for key in ("AutocastCPU", "AutocastCUDA", "AutocastPrivateUse1", "AutocastXPU"):
    print(key, torch._C._dispatch_has_kernel_for_dispatch_key("registries::first", key))
"""


def test_an_outside_device_registered_before_the_first_op_leaves_every_built_in_its_kernel(tmp_path):
    # a fresh process: the built-in devices are imported on the registry's first read, here
    # after the outside device registered (docs/adding-a-device.md's order)
    import subprocess

    script = tmp_path / "first.py"
    script.write_text(OUTSIDE_DEVICE_FIRST)
    env = dict(os.environ, JAX_PLATFORMS="cpu", TORCH_DEVICE_BACKEND_AUTOLOAD="0", PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    kernels, names, *autocast = run.stdout.strip().splitlines()
    assert kernels == "['CPU', 'CUDA', 'PrivateUse1', 'XPU']"
    assert names == "['cpu', 'cuda', 'tpu', 'npu_test']"
    assert autocast == [
        f"{key} True" for key in ("AutocastCPU", "AutocastCUDA", "AutocastPrivateUse1", "AutocastXPU")
    ]


def test_cache_info_and_the_bench_command_read_the_registry(monkeypatch, tmp_path, capsys):
    from tpu_kernels.cli import main

    _test_device(monkeypatch)  # its kernel is tpu_kernels' CPU executor: it keeps a cache

    @tpu_kernel("registries::cached")
    def cached(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    assert cached.cache_info("npu_test").misses == 0
    with pytest.raises(ValueError, match=r"cache per device type, for 'cpu' or 'cuda' or 'npu_test'"):
        cached.cache_info("tpu")
    # --device takes any registered device: this one resolves, then the suite has nothing to run
    (tmp_path / "empty.py").write_text("def benchmarks(quick, device_type):\n    return []\n")
    assert main(["bench", str(tmp_path / "empty.py"), "--device", "npu_test"]) == 2
    assert "no benchmarks in" in capsys.readouterr().err
    assert main(["bench", str(tmp_path / "empty.py"), "--device", "xpu"]) == 2
    assert "unknown device 'xpu'; use cpu, cuda, tpu, npu_test." in capsys.readouterr().err


def test_scaffold_backends_come_from_the_languages():
    assert set(scaffold.BACKENDS) == {lang.template_backend for lang in sources.languages()}


def test_the_benchmark_resolves_devices_through_the_registry():
    from tpu_kernels.bench.device import resolve

    cpu = resolve("cpu")
    assert (cpu.type, cpu.torch_device, cpu.peaks) == ("cpu", torch.device("cpu"), None) and cpu.name
    with pytest.raises(ValueError, match=r"unknown device 'xpu'; use cpu, cuda, tpu\."):
        resolve("xpu")
    if not torch.cuda.is_available():
        with pytest.raises(
            RuntimeError, match=r"tpu-kernels bench: --device cuda, but torch sees no CUDA device"
        ):
            resolve("cuda")


def _test_device(monkeypatch, **fields) -> devices.DeviceSpec:
    """A device registered for one test (dispatch key XPU, tensors on the CPU)."""
    cpu = devices.get("cpu")
    spec = devices.DeviceSpec("npu_test", "XPU", cpu.jax_kernel, cpu.available, cpu.synchronize, **fields)
    monkeypatch.setitem(devices._DEVICES, spec.name, spec)  # removed again after the test
    return spec


def test_a_registered_devices_peaks_reach_the_roofline_and_the_benchmark(monkeypatch):
    from tpu_kernels.bench.device import resolve

    toy = devices.Peaks(1e15, 2e12, "the Toy 9000 data sheet")
    _test_device(
        monkeypatch,
        describe=lambda: ("Toy 9000 rev B", torch.device("cpu")),
        peaks=lambda name: toy if "Toy 9000" in name else None,
    )
    assert roofline.peaks("npu_test", "Toy 9000 rev B") is toy
    assert roofline.peaks("npu_test", "Toy 8000") is None  # a model the device has no figures for
    bench_device = resolve("npu_test")
    assert bench_device.peaks is toy and bench_device.to_dict()["peaks"] == {
        "flops_per_s": 1e15,
        "bytes_per_s": 2e12,
        "source": "the Toy 9000 data sheet",
    }
    got = roofline.throughput(1e-3, flops=1e11, nbytes=1e9, peaks=bench_device.peaks)
    assert got["pct_peak_flops"] == pytest.approx(10.0) and got["pct_peak_bw"] == pytest.approx(50.0)
    # no figures by default, nor on the CPU (Pallas runs in an interpreter), nor for an unknown type
    assert devices.DeviceSpec("x", "X", *[lambda: None] * 3).peaks("anything") is None
    assert roofline.peaks("cpu", "any CPU") is None and roofline.peaks("xpu", "Toy 9000") is None


def _documented_peaks(module) -> list[tuple[str, float, float]]:
    """(name, bf16 TFLOP/s, HBM GB/s) of each row of the peak table in a device module's docstring."""
    rows = re.findall(r"^\| `([^`]+)`[^|]*\| ([\d.]+) \| ([\d.]+) \|", module.__doc__, re.M)
    assert rows, f"{module.__name__}: no peak table in the docstring"
    return [(name, float(tf), float(gb)) for name, tf, gb in rows]


@pytest.mark.parametrize("device", ["cuda", "tpu"])
def test_the_built_in_peaks_are_the_documented_ones(device):
    module = sys.modules[f"tpu_kernels.runtime.devices.{device}"]
    spec = devices.get(device)
    for name, tflops, gbps in _documented_peaks(module):
        got = roofline.peaks(device, name)
        assert got is not None, f"{device}: no peaks for {name!r}"
        assert (round(got.flops_per_s / 1e12), round(got.bytes_per_s / 1e9)) == (tflops, gbps), name
        assert spec.peaks(name) == got
    assert spec.peaks("a model nobody has heard of") is None


def test_the_built_in_peaks_read_the_names_torch_gives():
    h100 = roofline.peaks("cuda", "NVIDIA H100 80GB HBM3")
    assert (h100.flops_per_s, h100.bytes_per_s) == (989e12, 3.35e12)
    assert roofline.peaks("cuda", "NVIDIA A100-SXM4-80GB") is None  # not in the table
    v5p = roofline.peaks("tpu", "TPU v5p")  # megacore: both TensorCores of the chip
    assert v5p.flops_per_s == 459e12 and "x 2 TensorCore(s)" in v5p.source
    assert roofline.peaks("privateuseone", "TPU v6 lite") == roofline.peaks("tpu", "TPU v6e")


def test_the_helion_table_gives_each_device_in_it_a_kernel_on_its_backend(monkeypatch):
    from tpu_kernels.kernels.helion_ops import softmax_helion
    from tpu_kernels.kernels.softmax import helion_kernel
    from tpu_kernels.runtime.sources import helion as helion_source

    def backends(op) -> dict[str, str]:
        return {key: k.backend for key, k in op._kernels.items() if key != "CPU"}

    assert helion_source.HELION_BACKENDS == {"cuda": "triton", "tpu": "pallas"}
    assert backends(softmax_helion) == {"CUDA": "triton", "PrivateUse1": "pallas"}
    variants = softmax_helion.source.device_variants
    # the Pallas backend's kernel is one per float32 dot precision (sources/helion_pallas.py)
    kernels = {n: v.at("default") if n == "tpu" else v for n, v in variants.items()}
    assert {n: k.settings.backend for n, k in kernels.items()} == {"cuda": "triton", "tpu": "pallas"}

    _test_device(monkeypatch)
    monkeypatch.setattr(helion_source, "HELION_BACKENDS", {"npu_test": "triton"})
    op = tpu_kernel("registries::softmax_helion_npu")(helion_kernel.softmax)
    assert backends(op) == {"XPU": "triton"}  # only the table's devices: no CUDA or TPU kernel now
    assert op.source.device_variants["npu_test"].settings.backend == "triton"
    assert op.source.tpu_variant.at("highest").settings.backend == "pallas"  # the TPU lowering check's, still
    assert softmax_helion.source.tpu_variant is variants["tpu"]
    x = torch.ones(8, 128)
    with pytest.raises(ValueError, match=r"autotune\(device='cuda'\): Helion kernels run on cpu, npu_test"):
        op.autotune(x, device="cuda")
    # the device's kernel checks its backend on the first call, then runs for that device only
    monkeypatch.setitem(sys.modules, "triton", None)  # an import of triton fails
    with pytest.raises(BackendUnavailableError, match=r"softmax_helion_npu: NPU_TEST tensors need Triton"):
        op._kernels["XPU"](x)
    monkeypatch.setitem(sys.modules, "triton", types.ModuleType("triton"))
    with pytest.raises(ValueError, match=r"argument 'x' is on cpu, but this call runs on npu_test"):
        op._kernels["XPU"](x)
    with helion_source.helion_cpu_mode("eager"):  # eager: no Pallas code generation (seconds)
        torch.testing.assert_close(op(x), torch.softmax(x, -1))  # the CPU kernel is unaffected
