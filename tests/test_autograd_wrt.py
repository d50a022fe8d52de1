"""An input that requires grad but is not in its explicit backward's `wrt` is an error when its
gradient is asked for (torch's "the derivative for ... is not implemented"), never a silent None."""

import pytest
import torch
from torch import Tensor
from torch._dynamo.exc import BackendCompilerFailed

from tests.helpers import uname
from tpu_kernels import NoBackwardError, tpu_kernel


def _scaled():
    """out = x * w with a backward for x only."""

    @tpu_kernel(uname("scaled"))
    def scaled(x: Tensor, w: Tensor) -> Tensor:
        return x * w

    @scaled.def_backward(wrt=("x",))
    def scaled_backward(w: Tensor, grad_out: Tensor) -> Tensor:
        return grad_out * w

    return scaled


def _leaves():
    x = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    return x, w


def test_backward_names_the_input_left_out_of_wrt():
    scaled = _scaled()
    x, w = _leaves()
    with pytest.raises(NoBackwardError) as info:
        scaled(x, w).sum().backward()
    assert str(info.value) == (
        f"{scaled.name}: the derivative for 'w' is not implemented: 'w' requires grad, but the "
        "backward's wrt=('x',) leaves it out. Add 'w' to @scaled.def_backward(wrt=...) and return its "
        "gradient, or pass w.detach() if it should get none."
    )
    assert x.grad is None and w.grad is None  # nothing half-accumulated


def test_also_for_an_input_computed_from_parameters():
    scaled = _scaled()
    x, w = _leaves()
    with pytest.raises(NoBackwardError, match="the derivative for 'w' is not implemented"):
        scaled(x, w * 2).sum().backward()


def test_autograd_grad_asking_for_it_raises():
    scaled = _scaled()
    x, w = _leaves()
    with pytest.raises(NoBackwardError, match="'w'"):
        torch.autograd.grad(scaled(x, w).sum(), [w])


@pytest.mark.parametrize("how", ["detached", "backward_inputs", "autograd_grad", "no_grad_w"])
def test_no_error_when_its_gradient_is_not_asked_for(how):
    scaled = _scaled()
    x, w = _leaves()
    if how == "detached":
        scaled(x, w.detach()).sum().backward()
        grad = x.grad
    elif how == "backward_inputs":
        scaled(x, w).sum().backward(inputs=[x])
        grad = x.grad
        assert w.grad is None
    elif how == "autograd_grad":
        (grad,) = torch.autograd.grad(scaled(x, w * 2).sum(), [x])
        w = w * 2
    else:
        w.requires_grad_(False)
        scaled(x, w).sum().backward()
        grad = x.grad
    torch.testing.assert_close(grad, w.detach())


def test_an_optional_tensor_is_outside_the_default_wrt():
    """The default wrt is the positional Tensor parameters: an optional bias is left out."""

    @tpu_kernel(uname("biased"))
    def biased(x: Tensor, bias: Tensor | None = None) -> Tensor:
        return x * 3 if bias is None else x * 3 + bias

    @biased.def_backward
    def biased_backward(grad_out: Tensor) -> Tensor:
        return grad_out * 3

    x, b = _leaves()
    biased(x).sum().backward()  # no bias: nothing to refuse
    torch.testing.assert_close(x.grad, torch.full_like(x, 3.0))
    biased(x, b.detach()).sum().backward()
    with pytest.raises(NoBackwardError, match="the derivative for 'bias' is not implemented.*wrt=\\('x',\\)"):
        biased(x, b).sum().backward()


def test_torch_func_grad_with_respect_to_the_input_only_needed():
    scaled = _scaled()
    x, w = _leaves()
    g = torch.func.grad(lambda a: scaled(a, w.detach()).sum())(x.detach())
    torch.testing.assert_close(g, w.detach())
    with pytest.raises(NoBackwardError, match="the derivative for 'w' is not implemented"):
        torch.func.grad(lambda b: scaled(x.detach(), b).sum())(w.detach())


def test_under_torch_compile():
    scaled = _scaled()
    x, w = _leaves()
    compiled = torch.compile(lambda a, b: scaled(a, b).sum(), fullgraph=True, backend="aot_eager")
    compiled(x, w.detach()).backward()
    torch.testing.assert_close(x.grad, w.detach())
    # AOTAutograd traces the backward when it compiles the graph, so the error comes then,
    # wrapped in torch's BackendCompilerFailed.
    with pytest.raises(BackendCompilerFailed, match="the derivative for 'w' is not implemented") as info:
        compiled(x, w).backward()
    assert isinstance(info.value.inner_exception, NoBackwardError)
