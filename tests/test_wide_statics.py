"""A static that asks for a 64-bit result gets one (JAX's x64 mode scoped to the call), and
the fake agrees; JAX would otherwise quietly give float32 for float64 and int32 for int64."""

import re

import jax
import jax.numpy as jnp
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from tests.helpers import compile_counted, needs_tokamax
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


@needs_tokamax
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


# ---- statics outside their schema type's range ----------------------------------------------


@tpu_kernel("test_wide_statics::signs")
def signs(x: torch.Tensor, k: int, *, ks: list[int] = (1,), alpha: float = 1.0) -> torch.Tensor:
    # each static read as a Python value: no JAX arithmetic on it that could overflow
    return x * (1 if k > 0 else -1) * len(ks) * (1.0 if alpha > 0 else -1.0)


INT64 = "outside what an int static holds: a signed 64-bit integer (-2**63 to 2**63 - 1)"
OUT_OF_RANGE = {
    "k=2**64": ((2**64,), {}, "k", "int", f"18446744073709551616, {INT64}"),
    "k=2**63": ((2**63,), {}, "k", "int", f"9223372036854775808, {INT64}"),
    "k=-2**63-1": ((-(2**63) - 1,), {}, "k", "int", f"-9223372036854775809, {INT64}"),
    "ks=[1, 2**64]": ((1,), {"ks": [1, 2**64]}, "ks", "int[]", f"18446744073709551616, {INT64}"),
    "alpha=2**1024": (
        (1,),
        {"alpha": 2**1024},
        "alpha",
        "float",
        "an int of 309 digits, too large for a float static: a double (at most about 1.8e308)",
    ),
}


@pytest.mark.parametrize("case", list(OUT_OF_RANGE))
def test_a_static_outside_its_types_range_is_an_error_naming_the_op_and_the_parameter(case):
    """int statics are int64 and float statics doubles in torch's schema (docs/dtypes.md): a
    value past them is refused on every path, never handed to the kernel (where a Python int
    of any size passes) nor left to torch's parser ("Expected a value of type 'int' ... but
    instead found type 'int'")."""
    args, kwargs, name, schema_type, words = OUT_OF_RANGE[case]
    x = torch.randn(2, 3)
    ours = re.escape(f"test_wide_statics::signs: argument '{name}' ({schema_type}) is {words}, as torch's")
    assert signs._eager_cpu is not None
    with pytest.raises(ValueError, match=ours):  # the eager shortcut's call
        signs(x, *args, **kwargs)
    with pytest.raises(ValueError, match=ours):  # autograd: the dispatcher's path
        signs(x.requires_grad_(), *args, **kwargs)
    # under torch.compile the message leaves the value out: an int that changed between
    # compiles is symbolic there, whose str() Dynamo cannot trace; fullgraph quotes it
    value = re.escape(words.split(", ")[0] + ", ")
    compiled = ours.replace(value, f"({value})?")
    with pytest.raises(ValueError, match=compiled):
        torch.compile(lambda x: signs(x, *args, **kwargs) * 2, backend="aot_eager")(x.detach())
    with pytest.raises(torch._dynamo.exc.Unsupported, match=compiled):
        torch.compile(lambda x: signs(x, *args, **kwargs) * 2, backend="aot_eager", fullgraph=True)(
            x.detach()
        )
    # torch.ops itself: torch's argument parser refuses it before any Python runs, naming both
    with pytest.raises(RuntimeError, match=rf"test_wide_statics::signs\(\).*argument '{name}'"):
        torch.ops.test_wide_statics.signs(x.detach(), *args, **kwargs)


def test_the_ends_of_the_ranges_are_accepted_on_every_path():
    x = torch.randn(2, 3)
    for k, ks, alpha in ((2**63 - 1, [-(2**63)], 1e308), (-(2**63), [2**63 - 1], -(10**308))):
        want = x * (1 if k > 0 else -1) * (1.0 if alpha > 0 else -1.0)
        assert signs._eager_cpu.accepts((x, k), {"ks": ks, "alpha": alpha})
        for call in (signs, torch.ops.test_wide_statics.signs):
            torch.testing.assert_close(call(x, k, ks=ks, alpha=alpha), want)
    # inf and nan are doubles: a float static may be either
    torch.testing.assert_close(signs(x, 1, alpha=float("inf")), x)
    assert signs(x, 1, alpha=float("-inf")).equal(-x)
