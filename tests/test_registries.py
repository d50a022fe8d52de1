"""The device registry (tpu_kernels.devices) and the kernel-language registry (tpu_kernels.sources)."""

from __future__ import annotations

import sys
import types

import jax.numpy as jnp
import pytest
import torch

from tpu_kernels import devices, scaffold, sources, tpu_kernel
from tpu_kernels.devices.jax_exec import JaxExecutor
from tpu_kernels.tokamax.implementation import platform_of


def test_the_built_in_devices_and_their_policies():
    by_name = {d.name: d for d in devices.all_devices()}
    assert list(by_name)[:3] == ["cpu", "cuda", "tpu"]
    assert [by_name[n].dispatch_key for n in ("cpu", "cuda", "tpu")] == ["CPU", "CUDA", "PrivateUse1"]
    assert by_name["cuda"].clock == "cuda_events" and by_name["cpu"].clock == "wall"
    assert by_name["tpu"].device_time and not by_name["tpu"].jax_baseline and by_name["cpu"].jax_baseline
    assert by_name["cpu"].available()
    assert devices.get("cuda:1") is by_name["cuda"]
    assert devices.get("privateuseone") is by_name["tpu"]  # before torch_tpu renames PrivateUse1
    assert platform_of("t", "privateuseone") == "tpu"
    with pytest.raises(
        KeyError, match=r"no device 'xpu' is registered; known: cpu, cuda, privateuseone, tpu"
    ):
        devices.get("xpu")


def test_a_device_name_or_key_is_registered_once():
    cpu = devices.get("cpu")
    with pytest.raises(ValueError, match=r"device 'cpu2': CPU is already registered by 'cpu'"):
        devices.register(devices.DeviceSpec("cpu2", "CPU", cpu.jax_kernel, cpu.available, cpu.synchronize))
    with pytest.raises(ValueError, match=r"clock must be 'wall' or 'cuda_events'"):
        devices.DeviceSpec("x", "X", cpu.jax_kernel, cpu.available, cpu.synchronize, clock="cycles")


def test_a_registered_device_gets_a_kernel_in_every_new_op(monkeypatch):
    made = []

    def jax_kernel(op, body):
        made.append(op.name)
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
    jax_module = sys.modules["tpu_kernels.sources.jax"]
    module.make_source = lambda op_name, fn, autotune: jax_module.JaxSource(lambda x: x + 1)
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
