"""The eager shortcut of KernelOp.__call__ gives what the dispatcher gives, and steps aside
whenever the dispatcher might route the call elsewhere."""

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from tests.helpers import rand
from tpu_kernels import tpu_kernel
from tpu_kernels.eager import plain_eager


@tpu_kernel("test_eager::axpy")
def axpy(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    return x * alpha + y


def test_same_result_as_the_dispatcher_and_shortcut_taken():
    x, y = rand(8, 16), rand(8, 16)
    assert axpy._eager_cpu is not None and axpy._eager_cpu.accepts((x, y, 2.0))
    torch.testing.assert_close(axpy(x, y, 2.0), axpy.overload(x, y, 2.0))
    assert axpy._eager_cpu.accepts((x, y, 2))  # an int where the schema says float, as torch accepts


def test_the_dispatcher_is_used_whenever_it_could_decide_otherwise():
    x, y = rand(8, 16), rand(8, 16)
    check = axpy._eager_cpu.accepts
    assert not check((x.requires_grad_(True), y, 2.0))  # autograd
    with torch.no_grad():
        assert check((x, y, 2.0))  # no gradient needed under no_grad
    x = x.detach()
    assert not check((x, y, "2.0"))  # wrong static type: the dispatcher raises its error
    assert not check((x, torch.empty(8, 16, device="meta"), 2.0))
    assert not check((x, y))  # wrong arity
    with FakeTensorMode():
        assert not plain_eager()
    with TorchDispatchMode():
        assert not plain_eager()

    class Sub(torch.Tensor):
        pass

    assert not check((x.as_subclass(Sub), y, 2.0))


def test_autograd_and_compile_still_work_through_the_dispatcher():
    x = rand(8, 16, requires_grad=True)
    with torch.no_grad():
        out = axpy(x, rand(8, 16), 3.0)
    assert not out.requires_grad
    compiled = torch.compile(lambda a, b: axpy(a, b, 2.0) * 2, backend="aot_eager", fullgraph=True)
    a, b = rand(8, 16), rand(8, 16)
    torch.testing.assert_close(compiled(a, b), (a * 2 + b) * 2)


@tpu_kernel("test_eager::scaled_pair")
def scaled_pair(x: torch.Tensor, scale: int) -> tuple[torch.Tensor, torch.Tensor]:
    return x * scale, x - scale


def test_one_pass_path_agrees_with_the_dispatcher_for_every_case_it_meets():
    base = rand(16, 24)
    x = base.t()  # non-contiguous: the shortcut hands the call to the full executor path
    torch.testing.assert_close(axpy(x, x, 1.5), axpy.overload(x, x, 1.5))
    y = rand(24, 16)
    info = axpy.cache_info()
    first = axpy(y, y, 0.5)  # possibly a new key: compiled by the executor, not the one-pass path
    torch.testing.assert_close(first, y * 0.5 + y)
    again = axpy(y, y, 0.5)  # now the one-pass path: a counted cache hit
    torch.testing.assert_close(again, first)
    assert axpy.cache_info().hits > info.hits
    a, b = scaled_pair(y, 3)  # two outputs: the tuple path
    torch.testing.assert_close(a, y * 3)
    torch.testing.assert_close(b, y - 3)
    a, b = scaled_pair(y, 3)
    torch.testing.assert_close(b, y - 3)


def test_a_failing_kernel_names_the_op_on_the_one_pass_path():
    import pytest

    from tpu_kernels import KernelError

    @tpu_kernel("test_eager::fails_at_run")
    def fails(x: torch.Tensor) -> torch.Tensor:
        import jax

        def boom(a):
            raise RuntimeError("boom at run time")

        return jax.pure_callback(boom, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    x = rand(4, 8)
    for _ in range(2):  # first through the executor, then through the one-pass path
        with pytest.raises(
            KernelError, match="(?s)test_eager::fails_at_run: the kernel failed.*boom at run time"
        ):
            fails(x)
