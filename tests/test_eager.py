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
