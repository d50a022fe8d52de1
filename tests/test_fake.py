"""Fake functions derived with jax.eval_shape: FakeTensor, meta, symbolic shapes, overrides."""

import jax
import jax.numpy as jnp
import pytest
import torch
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensorMode

from tests.helpers import compile_counted, rand, uname
from tpu_kernels import KernelError, tpu_kernel


def test_fake_and_meta_shapes_come_from_eval_shape_without_running_the_kernel():
    runs = []

    @tpu_kernel(uname())
    def f(x: Tensor, w: Tensor, *, k: int) -> tuple[Tensor, Tensor]:
        runs.append(1)
        jax.debug.callback(lambda: runs.append("ran"))
        return (x @ w)[:, :k].astype(jnp.bfloat16), jnp.sum(x, axis=0, dtype=jnp.int32)

    with FakeTensorMode():
        a, b = f(torch.empty(5, 3), torch.empty(3, 7), k=4)
    assert (a.shape, a.dtype, b.shape, b.dtype) == ((5, 4), torch.bfloat16, (3,), torch.int32)
    a, b = f(torch.empty(5, 3, device="meta"), torch.empty(3, 7, device="meta"), k=2)
    assert a.device.type == "meta" and a.shape == (5, 2)
    assert "ran" not in runs  # traced abstractly, never executed


def test_symbolic_shapes_flow_through_jax_symbolic_dimensions():
    @tpu_kernel(uname("concat"))
    def concat(x: Tensor, y: Tensor) -> Tensor:
        return jnp.concatenate([x, y * 2], axis=0)[1:]

    compiled, counter = compile_counted(lambda x, y: concat(x, y) + 1, dynamic=True)
    for n, m in [(3, 4), (5, 6), (7, 2)]:
        x, y = rand(n, 8), rand(m, 8)
        torch.testing.assert_close(compiled(x, y), torch.cat([x, y * 2])[1:] + 1)
    assert counter.frame_count == 1  # one graph for all sizes


def test_symbolic_shapes_a_kernel_cannot_trace_give_a_clear_error_and_an_override_fixes_it():
    @tpu_kernel(uname("needs_int"))
    def needs_int(x: Tensor) -> Tensor:
        return jnp.zeros((int(x.shape[0]) // 2, 3), x.dtype)  # concrete sizes only

    fn = torch.compile(lambda x: needs_int(x), backend="aot_eager", fullgraph=True, dynamic=True)
    with pytest.raises(  # dynamo's fake-tensor failure, quoting ours
        torch._dynamo.exc.TorchRuntimeError,
        match=r"needs_int_\d+: deriving output shapes.*symbolic sizes.*register_fake",
    ) as info:
        fn(rand(6, 3))
    assert "dynamic=False" in str(info.value)

    @needs_int.register_fake
    def _(x):
        return x.new_empty((x.shape[0] // 2, 3))

    torch._dynamo.reset()
    fn = torch.compile(lambda x: needs_int(x), backend="aot_eager", fullgraph=True, dynamic=True)
    assert fn(rand(6, 3)).shape == (3, 3)


def test_eval_shape_errors_name_the_op():
    @tpu_kernel(uname("mismatch"))
    def mismatch(x: Tensor, y: Tensor) -> Tensor:
        return x + y

    with (
        FakeTensorMode(),
        pytest.raises(KernelError, match=r"mismatch_\d+: deriving output shapes.*float32\[2, 3\]"),
    ):
        mismatch(torch.empty(2, 3), torch.empty(4, 5))


def test_fake_results_are_cached_per_shape():
    @tpu_kernel(uname())
    def f(x: Tensor) -> Tensor:
        return x * 2

    with FakeTensorMode():
        for _ in range(3):
            f(torch.empty(4))
        f(torch.empty(5))
    info = f._derived_fake.cache.info()
    assert (info.misses, info.hits) == (2, 2)


def test_fake_results_are_cached_per_dtype_too():
    """A bfloat16 call after a float32 one of the same shape: its own entry, bfloat16 out
    (a cache keyed on shapes alone would hand it the float32 result's dtype)."""

    @tpu_kernel(uname())
    def f(x: Tensor) -> Tensor:
        return x * 2

    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        assert f(torch.empty(4, 3, dtype=dtype, device="meta")).dtype == dtype
        with FakeTensorMode():
            assert f(torch.empty(4, 3, dtype=dtype)).dtype == dtype
    assert f._derived_fake.cache.info().misses == 3


def test_symbolic_shapes_are_derived_per_static():
    """One op compiled with dynamic shapes at two values of a static that decides the output's
    width: each value its own symbolic plan (a plan keyed without the statics hands k=3 the
    k=2 plan's shapes)."""

    @tpu_kernel(uname("first_k"))
    def first_k(x: Tensor, k: int) -> Tensor:
        return x[:, :k] * 2

    def flat(x, k):
        out = first_k(x, k)
        # sizes read while tracing are the fake's: a plan of the wrong k reshapes to the wrong size
        return out.reshape(out.shape[0] * out.shape[1]) + 1

    for k in (2, 3):
        compiled, counter = compile_counted(lambda x, k=k: flat(x, k), dynamic=True)
        for n in (4, 6, 9):
            x = rand(n, 8)
            torch.testing.assert_close(compiled(x), (x[:, :k] * 2).reshape(n * k) + 1)
        assert counter.frame_count == 1
