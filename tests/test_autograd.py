"""Backward three ways (explicit, derived with jax.vjp, absent), residuals, compile."""

import jax
import jax.numpy as jnp
import pytest
import torch
from jax.experimental import pallas as pl
from torch import Tensor

from tests.helpers import compile_counted, rand, uname
from tpu_kernels import KernelError, NoBackwardError, OpDefinitionError, tpu_kernel


def _pallas_square(x):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * x_ref[...]

    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def test_explicit_backward_is_its_own_op_and_binds_by_name():
    @tpu_kernel(uname("cube"), outputs=("y", "sq"), residuals=("sq",))
    def cube(x: Tensor, *, scale: float = 1.0) -> tuple[Tensor, Tensor]:
        sq = _pallas_square(x)
        return sq * x * scale, sq

    calls = []

    @cube.def_backward
    def cube_bwd(sq: Tensor, grad_y: Tensor, *, scale: float) -> Tensor:
        calls.append(scale)
        return 3 * sq * grad_y * scale

    x = rand(8, 128, dtype=torch.float64, requires_grad=True)
    y = cube(x, scale=2.0)  # residual sq is not returned
    assert isinstance(y, torch.Tensor)
    y.backward(torch.ones_like(y))
    torch.testing.assert_close(x.grad, 6 * x.detach() ** 2)
    assert calls == [2.0]
    assert cube.backward_op.name == cube.name + "_backward"
    assert torch.autograd.gradcheck(
        lambda t: cube(t, scale=0.5), (rand(8, 128, dtype=torch.float64, requires_grad=True),)
    )


def test_backward_derived_from_a_reference_for_a_pallas_forward():
    def reference(x: Tensor) -> Tensor:
        return x * x

    @tpu_kernel(uname("square"), reference=reference)
    def square(x: Tensor) -> Tensor:
        return _pallas_square(x)

    x = rand(8, 128, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(square, (x,))


def test_backward_derived_from_a_differentiable_body():
    @tpu_kernel(uname("mix"), backward="vjp")
    def mix(x: Tensor, w: Tensor, idx: Tensor, maybe: Tensor | None, xs: list[Tensor]) -> Tensor:
        out = jnp.tanh(x) * w + jnp.take(x, idx) + sum(xs)
        return out if maybe is None else out + maybe

    x = rand(6, dtype=torch.float64, requires_grad=True)
    w = rand(6, dtype=torch.float64, requires_grad=True)
    xs = [rand(6, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    idx = torch.randint(0, 6, (6,))
    assert torch.autograd.gradcheck(lambda x, w, a, b: mix(x, w, idx, None, [a, b]), (x, w, *xs))
    maybe = rand(6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda m: mix(x, w, idx, m, xs), (maybe,))


def test_no_backward_fails_at_backward_not_forward():
    @tpu_kernel(uname("fwd_only"))
    def fwd_only(x: Tensor) -> Tensor:
        return _pallas_square(x)

    x = rand(8, 128, requires_grad=True)
    y = fwd_only(x)  # fine
    torch.testing.assert_close(y, x.detach() ** 2)
    with pytest.raises(
        NoBackwardError, match=r"fwd_only_\d+: backward called.*def_backward.*backward='vjp'.*reference="
    ):
        y.sum().backward()


def test_vjp_of_a_pallas_body_fails_with_the_op_name_and_a_hint():
    @tpu_kernel(uname("opaque"), backward="vjp")
    def opaque(x: Tensor) -> Tensor:
        return _pallas_square(x)

    y = opaque(rand(8, 128, requires_grad=True))
    with pytest.raises(KernelError, match=r"opaque_\d+_backward: tracing or compiling"):
        y.sum().backward()


def test_backward_definition_errors():
    @tpu_kernel(uname("f"))
    def f(x: Tensor, y: Tensor) -> Tensor:
        return x * y

    with pytest.raises(OpDefinitionError, match="parameter 'z' matches nothing"):
        f.def_backward(lambda_bwd(["x", "z"], 2))
    with pytest.raises(OpDefinitionError, match="returns 1 gradients, but wrt has 2 names"):
        f.def_backward(lambda_bwd(["x", "grad_out"], 1))
    with pytest.raises(OpDefinitionError, match="wrt names 'q'"):
        f.def_backward(lambda_bwd(["x", "grad_out"], 1), wrt=("q",))


def lambda_bwd(names: list[str], n_out: int):
    """A backward function with these parameter names returning n_out tensors."""
    params = ", ".join(f"{n}: Tensor" for n in names)
    ret = "Tensor" if n_out == 1 else "tuple[" + ", ".join(["Tensor"] * n_out) + "]"
    scope = {"Tensor": Tensor}
    exec(f"def bwd({params}) -> {ret}:\n    return {', '.join(names[:n_out])}", scope)
    return scope["bwd"]


def test_compiled_forward_and_backward_match_eager_with_no_graph_breaks():
    @tpu_kernel(uname("sq"), reference=lambda x: x * x)
    def sq(x: Tensor) -> Tensor:
        return _pallas_square(x)

    def model(x):
        return (sq(x.sin()) * 2).sum()

    compiled, counter = compile_counted(model)
    x1 = rand(8, 128, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    eager_loss, compiled_loss = model(x1), compiled(x2)
    eager_loss.backward()
    compiled_loss.backward()
    torch.testing.assert_close(compiled_loss, eager_loss)
    torch.testing.assert_close(x2.grad, x1.grad)
    assert counter.frame_count == 1
