"""Edge inputs for every shipped Pallas op: zero-size tensors behave as the torch reference
(forward and backward), and integer or bool inputs are refused with one message naming
the op, the argument, the dtype and what is accepted (docs/dtypes.md: the integer rule)."""

from __future__ import annotations

import pytest
import torch

from tpu_kernels import KernelError
from tpu_kernels.kernels import matmul, rmsnorm, scale_add, softmax
from tpu_kernels.kernels.scale_add import reference as scale_add_ref
from tpu_kernels.kernels.matmul import reference as matmul_ref
from tpu_kernels.kernels.rmsnorm import reference as rmsnorm_ref
from tpu_kernels.kernels.softmax import reference as softmax_ref

# op, its torch reference, the inputs for a (rows, cols) shape
CASES = {
    "softmax": (softmax, softmax_ref.softmax, lambda r, c: (torch.randn(r, c),)),
    "rmsnorm": (rmsnorm, rmsnorm_ref.rmsnorm, lambda r, c: (torch.randn(r, c), torch.randn(c))),
    "scale_add": (scale_add, scale_add_ref.scale_add, lambda r, c: (torch.randn(r, c), torch.randn(r, c))),
    # (r, c) @ (c, 5): c == 0 is the empty sum, all zeros
    "matmul": (matmul, matmul_ref.matmul, lambda r, c: (torch.randn(r, c), torch.randn(c, 5))),
}


def _forward_backward(fn, inputs):
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = fn(*leaves)
    out.backward(torch.ones_like(out))
    return out.detach(), [t.grad for t in leaves]


@pytest.mark.parametrize("shape", [(0, 8), (3, 0), (0, 0), (2, 0)])
@pytest.mark.parametrize("name", sorted(CASES))
def test_zero_size_inputs_match_torch_forward_and_backward(name, shape):
    op, ref, make = CASES[name]
    inputs = make(*shape)
    out, grads = _forward_backward(op, inputs)
    ref_out, ref_grads = _forward_backward(ref, inputs)
    assert out.shape == ref_out.shape and out.dtype == ref_out.dtype
    torch.testing.assert_close(out, ref_out)  # empty, or matmul's zeros for K == 0
    for g, rg in zip(grads, ref_grads):
        assert g is not None and g.shape == rg.shape
        torch.testing.assert_close(g, rg)


def test_a_zero_size_batch_dimension_keeps_its_shape():
    x = torch.randn(2, 0, 16)
    assert softmax(x).shape == (2, 0, 16)
    assert rmsnorm(x, torch.ones(16)).shape == (2, 0, 16)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool])
@pytest.mark.parametrize("name", sorted(CASES))
def test_integer_inputs_are_refused_with_one_message(name, dtype):
    """Before: rmsnorm(int32 [[3, 4]], ones(2)) returned [[0, 1]] (the float answer is
    [0.8485, 1.1314]); scale_add and matmul rounded through float32."""
    op, _, make = CASES[name]
    inputs = [t.to(dtype) for t in make(2, 8)]
    first = "a" if name == "matmul" else "x"
    jax_dtype = {torch.int32: "int32", torch.int64: "int64", torch.uint8: "uint8", torch.bool: "bool"}[dtype]
    with pytest.raises(KernelError) as info:
        op(*inputs)
    assert (
        f"{name}: argument '{first}' has dtype {jax_dtype}; {name} computes in floating point "
        "and accepts float16, bfloat16, float32 or float64" in str(info.value)
    )
    # one integer argument among float ones names that argument
    if len(inputs) == 2:
        mixed = (make(2, 8)[0], inputs[1])
        second = {"rmsnorm": "weight", "matmul": "b"}.get(name, "y")
        with pytest.raises(KernelError, match=f"argument '{second}' has dtype {jax_dtype}"):
            op(*mixed)


def test_rmsnorm_on_int32_is_refused_not_truncated():
    with pytest.raises(KernelError, match="rmsnorm: argument 'x' has dtype int32"):
        rmsnorm(torch.tensor([[3, 4]], dtype=torch.int32), torch.ones(2))


@pytest.mark.parametrize("mode", ["pallas", "eager"])
def test_the_helion_twins_refuse_integer_inputs_with_the_same_message(mode):
    import tpu_kernels
    from tpu_kernels.kernels import helion_ops

    x, w = torch.ones(8, 128, dtype=torch.int32), torch.ones(128, dtype=torch.int32)
    calls = {
        "add_helion": (lambda: helion_ops.add_helion(x, x), "x"),
        "softmax_helion": (lambda: helion_ops.softmax_helion(x), "x"),
        "rmsnorm_helion": (lambda: helion_ops.rmsnorm_helion(x.float(), w), "weight"),
        "matmul_helion": (lambda: helion_ops.matmul_helion(x, x.t().contiguous()), "a"),
    }
    with tpu_kernels.helion_cpu_mode(mode):
        for name, (call, arg) in calls.items():
            with pytest.raises(KernelError) as info:
                call()
            assert (
                f"{name}: argument '{arg}' has dtype int32; {name} computes in floating point "
                "and accepts float16, bfloat16, float32 or float64" in str(info.value)
            ), str(info.value)


def _helion_cases():
    from tpu_kernels.kernels import helion_ops

    return {
        "softmax_helion": (helion_ops.softmax_helion, softmax_ref.softmax, CASES["softmax"][2]),
        "rmsnorm_helion": (
            lambda x, w: helion_ops.rmsnorm_helion(x, w, eps=1e-6),
            lambda x, w: rmsnorm_ref.rmsnorm(x, w, eps=1e-6),
            CASES["rmsnorm"][2],
        ),
        "add_helion": (
            lambda x, y: helion_ops.add_helion(x, y, alpha=1.0),
            lambda x, y: scale_add_ref.scale_add(x, y, alpha=1.0),
            CASES["scale_add"][2],
        ),
        "matmul_helion": (helion_ops.matmul_helion, matmul_ref.matmul, CASES["matmul"][2]),
    }


@pytest.mark.parametrize("mode", ["pallas", "eager"])
@pytest.mark.parametrize("shape", [(0, 8), (3, 0), (0, 0)])
@pytest.mark.parametrize("name", ["softmax_helion", "rmsnorm_helion", "add_helion", "matmul_helion"])
def test_the_helion_twins_take_zero_size_inputs_like_torch(name, shape, mode):
    """Helion cannot launch a zero-size grid; such a call runs the op's reference (or the
    kernel body as eager torch) instead, and gives torch's result, forward and backward."""
    import tpu_kernels

    op, ref, make = _helion_cases()[name]
    inputs = make(*shape)
    with tpu_kernels.helion_cpu_mode(mode):
        out, grads = _forward_backward(op, inputs)
    ref_out, ref_grads = _forward_backward(ref, inputs)
    assert out.shape == ref_out.shape and out.dtype == ref_out.dtype
    torch.testing.assert_close(out, ref_out)
    for g, rg in zip(grads, ref_grads):
        assert g is not None and g.shape == rg.shape
        torch.testing.assert_close(g, rg)
