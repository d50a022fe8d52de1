"""The shipped Helion kernels under @tpu_kernel, in both CPU modes."""

import math

import helion
import helion.language as hl
import jax
import pytest
import torch

from tests.helpers import assert_close, compile_counted, rand
from tests.kernels.checks import compile_matches_eager, opcheck
from tpu_kernels import tpu_kernel
from tpu_kernels.errors import UnsupportedError
from tpu_kernels.kernels import rmsnorm as rmsnorm_pallas
from tpu_kernels.kernels import softmax as softmax_pallas
from tpu_kernels.kernels.helion_ops import add_helion, matmul_helion, rmsnorm_helion, softmax_helion
from tpu_kernels.runtime.sources.helion import helion_cpu_mode

MODES = ["pallas", "eager"]
DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture(params=MODES)
def mode(request):
    with helion_cpu_mode(request.param):
        yield request.param


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("y_shape", [(64, 256), (1, 256), (64, 1)], ids=str)
def test_add_broadcasts_and_matches_float64(mode, dtype, y_shape):
    x, y = rand(64, 256, dtype=dtype), rand(*y_shape, dtype=dtype)
    out = add_helion(x, y, alpha=-0.5)
    assert out.shape == (64, 256) and out.dtype == dtype
    assert_close(out, x.double() - 0.5 * y.double(), dtype, scale=2)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_softmax_matches_float64(mode, dtype):
    x = rand(64, 256, dtype=dtype, scale=3)
    assert_close(softmax_helion(x), torch.softmax(x.double(), -1), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rmsnorm_matches_float64_and_keeps_its_residual(mode, dtype):
    x, w = rand(64, 256, dtype=dtype), rand(256, dtype=dtype)
    y = rmsnorm_helion(x, w, eps=1e-5)
    x64 = x.double()
    assert_close(y, x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-5) * w.double(), dtype, scale=3)
    _, inv_rms = rmsnorm_helion.overload(x, w, eps=1e-5)
    assert inv_rms.shape == (64,) and inv_rms.dtype == torch.float32


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matmul_matches_float64(mode, dtype):
    a, b = rand(256, 384, dtype=dtype), rand(384, 128, dtype=dtype)
    assert_close(matmul_helion(a, b), a.double() @ b.double(), dtype, scale=math.sqrt(384))


def test_gradients_match_torch_autograd(mode):
    x, w, y = (
        rand(64, 256, requires_grad=True),
        rand(256, requires_grad=True),
        rand(1, 256, requires_grad=True),
    )
    g = rand(64, 256)
    ours = torch.autograd.grad(
        ((rmsnorm_helion(x, w) + softmax_helion(x) + add_helion(x, y, alpha=2.0)) * g).sum(), (x, w, y)
    )
    x64, w64, y64 = (t.detach().double().requires_grad_(True) for t in (x, w, y))
    ref = (
        x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) * w64
        + torch.softmax(x64, -1)
        + x64
        + 2 * y64
    )
    expected = torch.autograd.grad((ref * g.double()).sum(), (x64, w64, y64))
    for got, exp, scale in zip(ours, expected, (3, 30, 30)):
        assert_close(got, exp, torch.float32, scale=scale)
    a, b = rand(128, 256, requires_grad=True), rand(256, 128, requires_grad=True)
    ga, gb = torch.autograd.grad(matmul_helion(a, b).sum(), (a, b))
    ones = torch.ones(128, 128, dtype=torch.float64)
    assert_close(ga, ones @ b.detach().double().T, torch.float32, scale=16)
    assert_close(gb, a.detach().double().T @ ones, torch.float32, scale=16)


def test_rmsnorm_backward_is_two_helion_kernel_ops():
    x, w = rand(64, 256, requires_grad=True), rand(256, requires_grad=True)
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm

    from functorch.compile import aot_function

    aot_function(lambda a, b: rmsnorm_helion(a, b).sum(), fw_compiler=lambda gm, _: gm, bw_compiler=capture)(
        x, w
    ).backward()
    code = graphs[0].code
    assert "rmsnorm_helion_dx" in code and "rmsnorm_helion_dweight" in code


@pytest.mark.parametrize(
    "op, make",
    [
        (
            add_helion,
            lambda: ((rand(32, 256, requires_grad=True), rand(1, 256, requires_grad=True)), {"alpha": 0.5}),
        ),
        (softmax_helion, lambda: ((rand(32, 256, requires_grad=True),), {})),
        (rmsnorm_helion, lambda: ((rand(32, 256, requires_grad=True), rand(256, requires_grad=True)), {})),
        (
            matmul_helion,
            lambda: ((rand(128, 256, requires_grad=True), rand(256, 128, requires_grad=True)), {}),
        ),
    ],
    ids=lambda v: getattr(v, "short_name", ""),
)
def test_opcheck(op, make):
    args, kwargs = make()
    opcheck(op, args, kwargs)


def test_compile_fullgraph_matches_eager(mode):
    def model(x, w):
        return (rmsnorm_helion(softmax_helion(x), w) * 2).sum()

    compile_matches_eager(
        model, [rand(32, 256, requires_grad=True), rand(256, requires_grad=True)], rtol=1e-4, atol=1e-5
    )


def test_pallas_and_helion_kernels_mix_in_one_compiled_graph():
    def model(x, w):
        h = softmax_pallas(x)  # Pallas
        h = rmsnorm_helion(h, w)  # Helion
        return rmsnorm_pallas(h, w).sum() + softmax_helion(h).sum()

    compiled, counter = compile_counted(model)
    x, w = rand(32, 256, requires_grad=True), rand(256, requires_grad=True)
    torch.testing.assert_close(compiled(x, w), model(x, w), rtol=1e-4, atol=1e-4)
    compiled(x, w).backward()
    assert counter.frame_count == 1


def test_fake_function_is_derived_without_running_the_kernel():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        y, r = rmsnorm_helion.overload(torch.empty(48, 256), torch.empty(256))
    assert (y.shape, r.shape, r.dtype) == ((48, 256), (48,), torch.float32)


def test_lowers_for_tpu():
    spec = jax.ShapeDtypeStruct((256, 512), "bfloat16")
    for op, args in [
        (softmax_helion, (spec,)),
        (matmul_helion, (spec, jax.ShapeDtypeStruct((512, 256), "bfloat16"))),
    ]:
        assert "tpu_custom_call" in op.lower(*args).mlir_module(), op.name


def test_device_kernels_are_registered():
    for op in (add_helion, softmax_helion, rmsnorm_helion, matmul_helion):
        for key in ("CPU", "CUDA", "PrivateUse1"):
            assert torch._C._dispatch_has_kernel_for_dispatch_key(op.name, key), (op.name, key)


def test_float64_runs_in_eager_mode_and_is_rejected_clearly_in_pallas_mode():
    x = rand(16, 256, dtype=torch.float64)
    with helion_cpu_mode("eager"):
        assert_close(softmax_helion(x), torch.softmax(x, -1), torch.float32)  # the kernel computes in float32
    with helion_cpu_mode("pallas"), pytest.raises(UnsupportedError, match=r"softmax_helion.*float64"):
        softmax_helion(x)


@helion.kernel(backend="pallas")  # no config: Helion alone would autotune on the first call
def _double(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size()):
        out[tile] = x[tile] * 2
    return out


def test_a_kernel_without_config_uses_the_default_and_never_autotunes_implicitly():
    op = tpu_kernel("test_helion::double_default_config")(_double)
    x = rand(16, 128)
    # HELION_DISALLOW_AUTOTUNING=1 (tests/conftest.py) would make any tuning attempt raise
    torch.testing.assert_close(op(x), 2 * x)


_AUTOTUNE_SCRIPT = """
import torch, helion, helion.language as hl
from tpu_kernels import tpu_kernel

# No configs: Helion's search (a finite list of configs is searched without its disk cache).
@helion.kernel(backend="pallas", autotune_effort="quick", autotune_budget_seconds=20)
def rowsum(x: torch.Tensor) -> torch.Tensor:
    n, _ = x.size()
    out = torch.empty([n], dtype=x.dtype, device=x.device)
    for tile in hl.tile(n):
        out[tile] = torch.sum(x[tile, :], dim=-1)
    return out

op = tpu_kernel("autotune_test::rowsum", autotune=True)(rowsum)
x = torch.randn(64, 128)
torch.testing.assert_close(op(x), x.sum(-1), rtol=1e-5, atol=1e-5)
print("OK")
"""


@pytest.mark.slow
def test_autotuning_when_asked_is_cached_on_disk_and_reused_by_another_process(tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "HELION_DISALLOW_AUTOTUNING"}
    env.update(
        HELION_CACHE_DIR=str(tmp_path / "cache"),
        HELION_AUTOTUNE_PALLAS_RANK_BY="wall_time",
        JAX_PLATFORMS="cpu",
        PYTHONPATH=os.getcwd(),
    )
    script = tmp_path / "tune.py"
    script.write_text(_AUTOTUNE_SCRIPT)
    first = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600
    )
    assert first.returncode == 0 and "OK" in first.stdout, first.stderr[-3000:]
    cached = list((tmp_path / "cache").rglob("*.best_config"))
    assert cached, "autotuning wrote no cache entry"
    second = subprocess.run(
        [sys.executable, str(script)],
        env={**env, "HELION_ASSERT_CACHE_HIT": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert second.returncode == 0 and "OK" in second.stdout, second.stderr[-3000:]
