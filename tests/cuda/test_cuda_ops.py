"""tpu_kernels ops on CUDA tensors, each result checked against a float64 reference on the CPU.

What runs on CUDA (docs/devices.md, "CUDA"): ops with plain JAX bodies (XLA's GPU compiler),
Pallas kernels written for GPUs (Triton), Helion kernels (Helion's Triton backend) and
Tokamax's GPU implementations. The shipped Pallas TPU kernels do not lower for GPUs, and a
test here pins that. Skipped without a CUDA GPU and JAX's CUDA backend (tests/cuda/__init__.py).
"""

import importlib
import time

import jax
import jax.numpy as jnp
import pytest
import torch
from jax.experimental import pallas as pl
from torch import Tensor

from tests.cuda import marks
from tests.helpers import assert_close, rand, uname
from tpu_kernels import KernelError, testing, tpu_kernel

pytestmark = marks()

CUDA = torch.device("cuda")


@tpu_kernel(uname("mix"))
def mix(x: Tensor, w: Tensor) -> Tensor:
    return jnp.tanh(x) * w + x


def _mix64(x: Tensor, w: Tensor) -> Tensor:
    x, w = x.double(), w.double()
    return torch.tanh(x) * w + x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
def test_a_jax_op_on_cuda_matches_a_float64_reference(dtype):
    x, w = rand(64, 256, dtype=dtype), rand(256, dtype=dtype)
    out = mix(x.to(CUDA), w.to(CUDA))
    assert out.device.type == "cuda" and out.dtype == dtype and out.shape == x.shape
    # |tanh(x) * w + x| is a few units at most for normal inputs
    assert_close(out.cpu(), _mix64(x, w), scale=4, what="mix on cuda")


def test_calls_on_cuda_are_compiled_once_per_shape():
    before = mix.cache_info("cuda")
    x, w = rand(8, 128).to(CUDA), rand(128).to(CUDA)
    mix(x, w)
    mix(x, w)
    after = mix.cache_info("cuda")
    assert after.hits - before.hits >= 1
    assert after.misses - before.misses <= 1  # at most this shape's first call


@tpu_kernel(uname("plus_one"))
def plus_one(x: Tensor) -> Tensor:
    return x + 1


@pytest.mark.parametrize("side_stream", [False, True], ids=["current_stream", "side_stream"])
def test_the_kernel_is_ordered_after_and_before_torch_work_on_the_stream(side_stream):
    """torch writes x on its stream behind a long spin; JAX must read the new values (its
    stream waits for torch's), and torch's later in-place update of the result must see JAX's
    output (torch's stream waits for JAX's). Without the ordering this reads stale memory."""
    x = torch.zeros(1 << 24, device=CUDA)  # 64 MiB
    stream = torch.cuda.Stream() if side_stream else torch.cuda.current_stream()
    stream.wait_stream(torch.cuda.current_stream())  # x's zeros are written before the loop
    with torch.cuda.stream(stream):
        for value in (1.0, 2.0, 3.0):
            torch.cuda._sleep(50_000_000)  # about 25 ms of spinning on torch's stream
            x.fill_(value)
            y = plus_one(x)
            y.mul_(2)
            got = y.cpu()  # waits on this stream
            assert torch.equal(got, torch.full_like(got, 2 * (value + 1))), (value, got.unique()[:4])


@tpu_kernel(uname("accumulate"), mutates_args=("acc",))
def accumulate(acc: Tensor, x: Tensor) -> Tensor:
    return jnp.sum(acc), acc + x  # the output, then the new value of acc


def test_a_mutated_cuda_argument_is_written_in_place():
    acc, x = rand(1024), rand(1024)
    expected, expected_total = acc.double() + x.double(), acc.double().sum()  # before the call
    acc_cuda = acc.to(CUDA)
    ptr = acc_cuda.data_ptr()
    total = accumulate(acc_cuda, x.to(CUDA))
    assert acc_cuda.data_ptr() == ptr and total.device.type == "cuda"
    assert_close(acc_cuda.cpu(), expected, what="acc written in place")
    assert_close(total.cpu(), expected_total, scale=32, what="sum of 1024 terms")  # sqrt(1024)


@tpu_kernel(uname("smooth"), backward="vjp")
def smooth(x: Tensor, w: Tensor) -> Tensor:
    return jnp.tanh(x) * w


def test_gradients_on_cuda_match_float64_autograd():
    x, w = rand(32, 128), rand(128)
    xc, wc = x.to(CUDA).requires_grad_(), w.to(CUDA).requires_grad_()
    smooth(xc, wc).sum().backward()
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    (torch.tanh(x64) * w64).sum().backward()
    assert xc.grad.device.type == "cuda"
    assert_close(xc.grad.cpu(), x64.grad, what="dx")
    assert_close(wc.grad.cpu(), w64.grad, scale=6, what="dw (a sum of 32 rows)")  # sqrt(32)


def test_torch_compile_of_a_cuda_model_is_one_graph_and_matches_eager():
    def model(x: Tensor, w: Tensor) -> Tensor:
        return (smooth(x * 2, w) + 1).square().mean()

    x = rand(16, 128).to(CUDA).requires_grad_()
    w = rand(128).to(CUDA).requires_grad_()
    testing.compile_matches_eager(model, [x, w], backend="inductor")


def _scaled_add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + 2 * y_ref[...]


@tpu_kernel(uname("pallas_gpu_add"))
def pallas_gpu_add(x: Tensor, y: Tensor) -> Tensor:
    """A Pallas kernel with no TPU compiler parameters: on a GPU it lowers through Triton
    (blocks of a power-of-two size, as Triton requires)."""
    block = 256
    spec = pl.BlockSpec((block,), lambda i: (i,))
    return pl.pallas_call(
        _scaled_add_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // block,),
        in_specs=[spec, spec],
        out_specs=spec,
    )(x, y)


def test_a_pallas_gpu_kernel_runs_on_cuda():
    x, y = rand(4096), rand(4096)
    out = pallas_gpu_add(x.to(CUDA), y.to(CUDA))
    assert out.device.type == "cuda"
    assert_close(out.cpu(), x.double() + 2 * y.double(), scale=3, what="pallas_gpu_add")


def test_a_shipped_tpu_pallas_kernel_does_not_lower_for_cuda():
    """docs/devices.md says TPU Pallas kernels do not compile for GPUs; this holds it to the
    installed JAX (a release that lowers them would fail here, and the docs would be stale)."""
    from tpu_kernels.kernels import softmax

    with pytest.raises(KernelError, match=r"tpu_kernels::softmax: cannot run on cuda tensors: the Pallas kernel"):
        softmax(rand(256, 1024).to(CUDA))


def test_the_benchmark_times_cuda_work_with_cuda_events():
    from tpu_kernels.bench import timing
    from tpu_kernels.bench.device import resolve

    device = resolve("cuda")
    assert device.type == "cuda" and device.name == torch.cuda.get_device_name()
    a = torch.randn(4096, 4096, device=CUDA)
    timing.time_calls(device, torch.mm, [(a, a)], 3)  # warm-up (cuBLAS heuristics)
    per_call = timing.time_calls(device, torch.mm, [(a, a)], 10)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        torch.mm(a, a)
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / 10
    # 137 GFLOP a call: at least microseconds on any GPU, and events bracket no more than the
    # wall clock does (a wall-clock timer in events' place would not be below it by design)
    assert 1e-6 < per_call < 1.0, per_call
    assert per_call <= 1.5 * wall, (per_call, wall)


def _importable_or_skip(name: str, hint: str) -> None:
    """Skip, saying why, where `name` is absent or does not import with this machine's versions
    (helion 1.5.1 on torch 2.11: ImportError: cannot import name 'IntelGPUError' ...)."""
    try:
        importlib.import_module(name)
    except ImportError as e:
        pytest.skip(f"{name} does not import here ({type(e).__name__}: {e}); {hint}")


def test_a_helion_kernel_runs_on_cuda_through_triton():
    _importable_or_skip(
        "helion", "scripts/gpu-check --wheels can carry helion 1.4.0, which torch 2.11 imports"
    )
    from tpu_kernels.kernels.softmax.helion import softmax_helion

    x = rand(1024, 1024)
    out = softmax_helion(x.to(CUDA))
    assert out.device.type == "cuda"
    assert_close(out.cpu(), torch.softmax(x.double(), dim=-1), what="softmax_helion on cuda")


def test_a_tokamax_op_runs_on_cuda():
    _importable_or_skip("tokamax", "it needs pydantic-core and xprof, which are built per platform")
    import torch.nn.functional as F

    from tpu_kernels import tokamax as tk

    x, w, b = rand(64, 512), rand(512), rand(512)
    out = tk.layer_norm(x.to(CUDA), w.to(CUDA), b.to(CUDA), eps=1e-5)
    assert out.device.type == "cuda"
    expected = F.layer_norm(x.double(), (512,), w.double(), b.double(), eps=1e-5)
    assert_close(out.cpu(), expected, scale=4, what="tokamax layer_norm on cuda")
