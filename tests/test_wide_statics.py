"""A static that asks for a 64-bit result gets one (JAX's x64 mode scoped to the call), and
the fake agrees; JAX would otherwise quietly give float32 for float64 and int32 for int64."""

import jax
import jax.numpy as jnp
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from tests.helpers import compile_counted
from tpu_kernels import testing, tpu_kernel


@tpu_kernel("test_wide_statics::cast")
def cast(x: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    return (x * 2).astype(out_dtype)


# Values only a 64-bit result holds: 2 * 3e9 and 2 * -5e9 overflow int32; float32's 24-bit
# mantissa holds 3e9 and 5e9 exactly, so the torch formula below is exact too.
X = torch.tensor([[3e9, -5e9, 1.5, 0.0]], dtype=torch.float32)
WIDE = [torch.float64, torch.int64]


def _want(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return (x.double() * 2).to(dtype)


@pytest.mark.parametrize("dtype", WIDE)
def test_eager_and_torch_ops_give_the_64_bit_dtype(dtype):
    for call in (cast, cast.overload, torch.ops.test_wide_statics.cast):
        out = call(X, dtype)
        assert out.dtype == dtype
        torch.testing.assert_close(out, _want(X, dtype), rtol=0, atol=0)
    assert not jax.config.jax_enable_x64  # scoped to the call: nothing leaks out


@pytest.mark.parametrize("dtype", WIDE)
def test_x64_stays_off_for_a_32_bit_static_and_on_for_a_wide_one_in_the_kernel(dtype):
    seen = []

    @tpu_kernel(f"test_wide_statics::probe_{str(dtype).removeprefix('torch.')}")
    def probe(x: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        seen.append((out_dtype, jax.config.jax_enable_x64))
        return x.astype(out_dtype)

    probe(X, torch.float32)
    probe(X, dtype)
    wide = jnp.dtype(str(dtype).removeprefix("torch."))
    assert (jnp.dtype(jnp.float32), False) in seen and (wide, True) in seen


@pytest.mark.parametrize("dtype", WIDE)
def test_the_fake_gives_the_64_bit_dtype_on_meta_and_fake_tensors(dtype):
    assert cast.overload(X.to("meta"), dtype).dtype == dtype
    with FakeTensorMode() as mode:
        out = cast.overload(mode.from_tensor(X), dtype)
    assert out.dtype == dtype and out.shape == X.shape
    assert cast.eval_shape(X, dtype).dtype == jnp.dtype(str(dtype).removeprefix("torch."))
    testing.opcheck(cast, (X, dtype))


@pytest.mark.parametrize("dtype", WIDE)
def test_torch_compile_gives_the_64_bit_dtype(dtype):
    fn, counter = compile_counted(lambda x: cast(x, dtype) + 1)
    out = fn(X)
    assert out.dtype == dtype and counter.frame_count == 1
    torch.testing.assert_close(out, _want(X, dtype) + 1, rtol=0, atol=0)


def test_a_tokamax_dtype_static_asks_for_float64():
    """Tokamax's ragged_dot takes `preferred_element_type`: float64 gives a float64 result."""
    from tpu_kernels import tokamax as tk

    lhs, rhs = torch.randn(6, 8), torch.randn(2, 8, 4)
    sizes = torch.tensor([2, 4], dtype=torch.int32)
    out = tk.ragged_dot(lhs, rhs, sizes, preferred_element_type=torch.float64)
    assert out.dtype == torch.float64
    want = torch.cat([lhs[:2].double() @ rhs[0].double(), lhs[2:].double() @ rhs[1].double()])
    torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-6)
    assert not jax.config.jax_enable_x64


def test_a_helion_kernel_refuses_64_bit_with_a_clear_error():
    """Helion's Pallas backend has no 64-bit types: such a call is refused, not truncated."""
    from tpu_kernels.errors import KernelError
    from tpu_kernels.kernels.helion_ops import softmax_helion

    with pytest.raises((KernelError, TypeError, ValueError, NotImplementedError), match="float64|64-bit"):
        softmax_helion(torch.randn(8, 128, dtype=torch.float64))
