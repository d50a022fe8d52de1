"""Ops under torch.autocast follow their declared policy, eager and under torch.compile.

Only CPU autocast runs here; the CUDA and PrivateUse1 (TPU) rules are registered
by the same code and checked as registrations (no device on this machine).
"""

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import assert_close, compile_counted, needs_tokamax, rand
from tests.registries import family_id, kernel_families
from tpu_kernels import tpu_kernel
from tpu_kernels.dispatch import autocast
from tpu_kernels.errors import OpDefinitionError
from tpu_kernels.kernels import matmul, rmsnorm, scale_add, softmax

BF16 = torch.bfloat16


def cpu_autocast():
    return torch.autocast("cpu", dtype=BF16)


@tpu_kernel("test_autocast::weighted", autocast="promote")
def weighted(x: torch.Tensor, w: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return x * w + idx.astype(x.dtype)


@tpu_kernel("test_autocast::low", autocast="lower_precision_fp")
def low(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y.astype(x.dtype)


@tpu_kernel("test_autocast::plain")
def plain(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def test_matmul_casts_like_aten_mm_with_float32_gradients():
    a, b = rand(32, 128, requires_grad=True), rand(128, 128, requires_grad=True)
    a2, b2 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    with cpu_autocast():
        out = matmul(a, b)
        ref = a2 @ b2
    assert out.dtype == ref.dtype == BF16
    # the same bf16 operands, float32 accumulation in both: bf16's 2-ulp tolerance
    assert_close(out, ref.float(), BF16, scale=2.0)
    (out.float() ** 2).sum().backward()
    (ref.float() ** 2).sum().backward()
    assert a.grad.dtype == b.grad.dtype == torch.float32
    assert_close(a.grad, a2.grad, BF16, scale=64.0)  # grads are bf16 dots over K=128 terms of size ~10
    assert a.dtype == torch.float32 and a.grad_fn is None  # the caller's tensor is untouched


@pytest.mark.parametrize("dtype", [torch.float32, BF16])
def test_softmax_and_rmsnorm_run_in_float32(dtype):
    x, w = rand(16, 256, dtype=dtype), rand(256, dtype=dtype)
    with cpu_autocast():
        y_soft = softmax(x)
        y_norm = rmsnorm(x, w, eps=1e-6)
    assert y_soft.dtype == y_norm.dtype == torch.float32
    # torch's CUDA autocast runs these in float32; the float32 aten results are the reference
    assert_close(y_soft, F.softmax(x.double(), -1), torch.float32)
    assert_close(y_norm, F.rms_norm(x.double(), (256,), w.double(), 1e-6), torch.float32, scale=4.0)
    assert x.dtype == dtype


def test_scale_add_keeps_dtypes_and_promotes_like_aten_add():
    x, y = rand(8, 128, dtype=BF16), rand(8, 128)
    with cpu_autocast():
        same = scale_add(x, x, alpha=0.5)
        mixed = scale_add(x, y, alpha=0.5)
        aten_same, aten_mixed = x + 0.5 * x, x + 0.5 * y
    assert same.dtype == aten_same.dtype == BF16
    assert mixed.dtype == aten_mixed.dtype == torch.float32
    assert_close(mixed, x.double() + 0.5 * y.double(), torch.float32)


def test_outside_autocast_nothing_is_cast():
    x = rand(8, 128, dtype=BF16)
    assert softmax(x).dtype == BF16
    assert matmul(rand(8, 128), rand(128, 128)).dtype == torch.float32
    with torch.autocast("cpu", dtype=BF16, enabled=False):
        assert softmax(x).dtype == BF16


def test_policies_leave_float64_integers_and_the_callers_tensors_alone():
    x, w, idx = rand(4, 8, dtype=BF16), rand(4, 8), torch.arange(32, dtype=torch.int32).reshape(4, 8)
    with cpu_autocast():
        out = weighted(x, w, idx)  # promote: x goes to float32, idx stays int32
        assert out.dtype == torch.float32
        assert_close(out, x.double() * w.double() + idx.double(), torch.float32)
        assert low(rand(4, 8), rand(4, 8)).dtype == BF16
        assert low(rand(4, 8, dtype=torch.float64), rand(4, 8, dtype=torch.float64)).dtype == torch.float64
        assert plain(rand(4, 8)).dtype == torch.float32  # "keep", the default
    assert x.dtype == BF16 and idx.dtype == torch.int32


def test_autocast_dtype_is_read_at_call_time():
    with torch.autocast("cpu", dtype=torch.float16):
        assert low(rand(4, 8), rand(4, 8)).dtype == torch.float16
        assert matmul(rand(8, 128), rand(128, 128)).dtype == torch.float16


def model(x, w_in, w_norm, w_out):
    h = matmul(x, w_in)
    h = rmsnorm(h, w_norm, eps=1e-6)
    h = scale_add(softmax(h), h, alpha=0.5)
    return matmul(h, w_out)


def aten_model(x, w_in, w_norm, w_out):
    # the same model in aten ops, each in the dtype the op's policy gives
    h = x @ w_in
    h = F.rms_norm(h.float(), (h.shape[-1],), w_norm.float(), 1e-6)
    h = F.softmax(h.float(), -1) + 0.5 * h
    return h @ w_out


def test_compiled_model_under_autocast_matches_eager_and_aten():
    args = [rand(16, 128), rand(128, 128), rand(128), rand(128, 128)]
    compiled, counter = compile_counted(model, backend="aot_eager")
    with cpu_autocast():
        eager_out, compiled_out, aten_out = model(*args), compiled(*args), aten_model(*args)
    assert eager_out.dtype == compiled_out.dtype == aten_out.dtype == BF16
    assert counter.frame_count == 1
    torch.testing.assert_close(compiled_out, eager_out)
    # bf16 matmul inputs, outputs of size ~10: bf16 rounding dominates
    assert_close(eager_out, aten_out.float(), BF16, scale=16.0)


def test_helion_matmul_casts_like_aten_mm():
    from tpu_kernels.kernels.helion_ops import matmul_helion, softmax_helion

    a, b = rand(32, 128), rand(128, 128)
    with cpu_autocast():
        out, ref = matmul_helion(a, b), a @ b
        soft = softmax_helion(a.to(BF16))
    assert out.dtype == BF16 and soft.dtype == torch.float32
    assert_close(out, ref.float(), BF16, scale=2.0)
    assert_close(soft, F.softmax(a.to(BF16).double(), -1), torch.float32)


TOKAMAX_POLICIES = {
    # matmuls: cast like aten.mm
    "gated_linear_unit": "lower_precision_fp",
    "ragged_dot": "lower_precision_fp",
    "ragged_dot_general": "lower_precision_fp",
    "dot_product_attention": "lower_precision_fp",
    # statistics and losses in float32, as CUDA autocast runs layer_norm and the losses
    "layer_norm": "fp32",
    "linear_softmax_cross_entropy_loss": "fp32",
}


@needs_tokamax
def test_tokamax_op_policies():
    from tpu_kernels.tokamax import FAMILIES

    declared = {op.short_name: op.autocast for f in FAMILIES.values() for op in f.ops}
    assert declared == {name: TOKAMAX_POLICIES.get(name, "keep") for name in declared}


@needs_tokamax
def test_tokamax_ops_follow_their_policies():
    from tpu_kernels import tokamax as tk

    x = rand(2, 8, 64, requires_grad=True)
    w, ln_w = rand(64, 2, 32, scale=0.125, requires_grad=True), rand(64, requires_grad=True)
    rope_x, positions, cache = rand(6, 128), torch.arange(6), rand(16, 64)
    with cpu_autocast():
        glu = tk.gated_linear_unit(x, w, activation="silu")  # lower_precision_fp
        normed = tk.rms_norm(x.to(BF16), ln_w)  # fp32: bfloat16 in, float32 statistics and out
        rope = tk.deepseek_rope(rope_x, positions, cache)  # keep: float32 stays float32
    assert (glu.dtype, normed.dtype, rope.dtype) == (BF16, torch.float32, torch.float32)
    xb, wb = x.detach().to(BF16).double(), w.detach().to(BF16).double()
    assert_close(glu, F.silu(xb @ wb[:, 0]) * (xb @ wb[:, 1]), BF16, scale=8.0)
    xr = x.detach().to(BF16).double()  # the cast input, in float64
    assert_close(normed, F.rms_norm(xr, (64,), ln_w.detach().double(), 1e-6), torch.float32, scale=4.0)
    with torch.autocast("cpu", enabled=False):
        assert_close(rope, tk.deepseek_rope(rope_x, positions, cache), torch.float32)
    (glu.float().sum() + normed.sum()).backward()  # the casts are autograd ops
    assert w.grad.dtype == ln_w.grad.dtype == x.grad.dtype == torch.float32


@pytest.mark.parametrize("family", kernel_families(), ids=family_id)
def test_rules_are_registered_for_cuda_and_tpu_autocast(family):
    # Only unit-testable here: no CUDA or TPU device. The same kernel function serves every key;
    # an op that keeps its inputs' dtypes ("keep", as scale_add) registers no rule.
    op = family.op
    for key in ("AutocastCPU", "AutocastCUDA", "AutocastPrivateUse1"):
        registered = torch._C._dispatch_has_kernel_for_dispatch_key(op.name, key)
        assert registered == (op.autocast != "keep"), (op.name, op.autocast, key)


def test_a_tensor_on_another_device_type_is_not_cast():
    # a tensor on another device type is not cast by the CUDA rule
    args, _ = autocast.cast("lower_precision_fp", "cuda", (rand(2, 2),), {})
    assert args[0].dtype == torch.float32


def test_bad_policy_is_a_clear_error():
    with pytest.raises(OpDefinitionError, match=r"test_autocast::bad: autocast='bf16'.*'lower_precision_fp'"):

        @tpu_kernel("test_autocast::bad", autocast="bf16")
        def bad(x: torch.Tensor) -> torch.Tensor:
            return x
