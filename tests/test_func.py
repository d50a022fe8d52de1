"""torch.func over kernel ops: grad, vjp, jacrev (the autograd registration) and
vmap (a batching rule derived with jax.vmap, or declared), each against a loop.

torch's per-sample vmap fallback is switched off for every test here, so an op
without a batching rule fails instead of silently looping.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch import Tensor

from tests.helpers import needs_tokamax, uname
from tpu_kernels import KernelError, NoBackwardError, OpDefinitionError, tpu_kernel
from tpu_kernels.kernels import matmul, rmsnorm, scale_add, softmax

D = torch.float64
B = 3  # batch size under vmap


@pytest.fixture(autouse=True)
def no_vmap_fallback():
    """The per-sample fallback raises instead of warning (torch's warning comes from C++,
    outside Python's warnings); a Python warning about a batching rule fails too."""
    torch._C._functorch._set_vmap_fallback_enabled(False)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*(batching rule|performance drop).*")
            yield
    finally:
        torch._C._functorch._set_vmap_fallback_enabled(True)


def close(a, b, tol=1e-10):
    a = a if isinstance(a, (tuple, list)) else (a,)
    b = b if isinstance(b, (tuple, list)) else (b,)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.shape == y.shape and x.dtype == y.dtype, (x.shape, y.shape, x.dtype, y.dtype)
        torch.testing.assert_close(x, y, atol=tol, rtol=tol)


def _sa(x, y):
    return scale_add(x, y, alpha=0.5, block_rows=8)


# name -> (the call, example arguments (float64); the first one is batched under vmap)
SHIPPED = {
    "softmax (explicit backward kernel)": (softmax, lambda: (torch.randn(4, 8, dtype=D),)),
    "scale_add (backward='vjp', statics)": (
        _sa,
        lambda: (torch.randn(4, 8, dtype=D), torch.randn(4, 8, dtype=D)),
    ),
    "matmul (explicit backward, transposed operands)": (matmul, lambda: (torch.randn(8, 16, dtype=D), torch.randn(16, 8, dtype=D))),
    "rmsnorm (explicit backward, residual)": (
        rmsnorm,
        lambda: (torch.randn(4, 8, dtype=D), torch.randn(8, dtype=D)),
    ),
}


def _loss(f):
    return lambda *a: f(*a).pow(2).sum()


def _autograd_grads(f, args):
    leaves = [a.clone().requires_grad_() for a in args]
    _loss(f)(*leaves).backward()
    return tuple(a.grad for a in leaves)


def _in_dims(args):
    return (0,) + (None,) * (len(args) - 1)


@pytest.mark.parametrize("name", list(SHIPPED))
def test_grad_vjp_and_jacrev_match_eager_autograd(name):
    f, make = SHIPPED[name]
    args = make()
    argnums = tuple(range(len(args)))
    close(torch.func.grad(_loss(f), argnums=argnums)(*args), _autograd_grads(f, args))

    out, pullback = torch.func.vjp(f, *args)
    close(out, f(*args))
    ct = torch.randn_like(out)
    leaves = [a.clone().requires_grad_() for a in args]
    expected = torch.autograd.grad(f(*leaves), leaves, ct)
    close(pullback(ct), expected)

    # jacrev = vmap of the backward over the basis: the backward op's batching rule
    close(torch.func.jacrev(f, argnums=argnums)(*args), torch.autograd.functional.jacobian(f, args))


@pytest.mark.parametrize("name", list(SHIPPED))
def test_vmap_forward_matches_a_loop(name):
    f, make = SHIPPED[name]
    args = make()
    xb = torch.stack([make()[0] for _ in range(B)])
    loop = torch.stack([f(xb[i], *args[1:]) for i in range(B)])
    close(torch.vmap(f, in_dims=_in_dims(args))(xb, *args[1:]), loop)
    # batch dim not in front, and out_dims other than 0
    moved = xb.movedim(0, -1)
    out = torch.vmap(f, in_dims=(-1,) + _in_dims(args)[1:], out_dims=1)(moved, *args[1:])
    close(out, loop.movedim(0, 1))


@pytest.mark.parametrize("name", list(SHIPPED))
def test_per_sample_grads_and_grads_through_vmap_match_loops(name):
    f, make = SHIPPED[name]
    args = make()
    xb = torch.stack([make()[0] for _ in range(B)])
    loss = _loss(f)
    per_sample = torch.vmap(torch.func.grad(loss), in_dims=_in_dims(args))(xb, *args[1:])
    close(per_sample, torch.stack([_autograd_grads(f, (xb[i], *args[1:]))[0] for i in range(B)]))
    if len(args) > 1:  # grad of a vmapped op w.r.t. a shared (unbatched) argument: summed over the batch

        def batched_loss(p):
            return torch.vmap(f, in_dims=_in_dims(args))(xb, p, *args[2:]).pow(2).sum()

        p = args[1].clone().requires_grad_()
        sum(loss(xb[i], p, *args[2:]) for i in range(B)).backward()
        close(torch.func.grad(batched_loss)(args[1]), p.grad, tol=1e-9)


def test_every_argument_batched_with_different_dims_and_keyword_statics():
    x, y = torch.randn(B, 4, 8, dtype=D), torch.randn(4, B, 8, dtype=D)
    out = torch.vmap(lambda a, b: scale_add(a, b, alpha=-2.0, block_rows=8), in_dims=(0, 1))(x, y)
    close(out, torch.stack([scale_add(x[i], y[:, i], alpha=-2.0) for i in range(B)]))
    # only the second argument batched
    x1 = torch.randn(4, 8, dtype=D)
    out = torch.vmap(lambda b: scale_add(x1, b, alpha=3.0), in_dims=1)(y)
    close(out, torch.stack([scale_add(x1, y[:, i], alpha=3.0) for i in range(B)]))


def test_nested_vmap_matches_a_double_loop():
    x = torch.randn(2, B, 4, 8, dtype=D)
    out = torch.vmap(torch.vmap(softmax))(x)
    close(out, torch.stack([torch.stack([softmax(x[i, j]) for j in range(B)]) for i in range(2)]))


def test_batched_call_is_compiled_once_per_batched_shape():
    @tpu_kernel(uname("twice"))
    def twice(x: Tensor, *, k: float = 2.0) -> Tensor:
        return x * k

    x = torch.randn(B, 5, dtype=D)
    torch.vmap(twice)(x)
    twin = twice._vmap_twin
    assert twin is not None and twin.name == f"{twice.name}_vmapped"
    for _ in range(3):
        close(torch.vmap(twice)(x), x * 2)
    assert twin.cache_info().misses == 1 and twin.cache_info().hits == 3
    torch.vmap(twice)(torch.randn(B + 1, 5, dtype=D))  # a new batched shape compiles once more
    close(torch.vmap(lambda a: twice(a, k=3.0))(x), x * 3)  # a new static too
    assert twin.cache_info().misses == 3


def test_pallas_kernel_batches_with_a_grid_axis_not_a_loop():
    # jax.vmap of a pallas_call adds a grid dimension: one pallas_call in the batched program
    from tpu_kernels.dispatch import vmap as vmap_rules
    from tpu_kernels.runtime import interpret
    from tpu_kernels.runtime.devices.jax_exec import pallas_interpret

    fn = vmap_rules.batched_kernel(softmax.signature, softmax.fn)
    x = jnp.ones((B, 16, 128), jnp.float32)
    with pallas_interpret(interpret.current()):
        jaxpr = jax.make_jaxpr(lambda a: fn(vmap_batched_=[True], x=a, block_rows=8))(x)
        out = jax.jit(lambda a: fn(vmap_batched_=[True], x=a, block_rows=8))(x)
    calls = [e for e in jaxpr.eqns if e.primitive.name == "pallas_call"]
    assert len(calls) == 1
    assert len(calls[0].params["grid_mapping"].grid) == 2  # (batch, row blocks)
    np.testing.assert_allclose(np.asarray(out), 1 / 128, rtol=1e-6)


def test_tensor_list_arguments_batch_per_element():
    @tpu_kernel(uname("weighted_sum"), backward="vjp")
    def weighted_sum(xs: list[Tensor], w: Tensor) -> Tensor:
        return sum(x * w for x in xs)

    a, b, w = torch.randn(B, 6, dtype=D), torch.randn(6, dtype=D), torch.randn(6, dtype=D)
    out = torch.vmap(lambda p, q: weighted_sum([p, q], w), in_dims=(0, None))(a, b)
    close(out, torch.stack([(a[i] + b) * w for i in range(B)]))
    g = torch.vmap(torch.func.grad(lambda p: weighted_sum([p, b], w).sum()))(a)
    close(g, w.expand(B, 6))


def test_declared_rule_replaces_the_derived_one():
    calls = []

    @tpu_kernel(uname("rows"))
    def rows(x: Tensor) -> Tensor:
        return x - x.mean(axis=-1, keepdims=True)

    @rows.def_vmap
    def rows_vmap(info, in_dims, x):
        calls.append((info.batch_size, in_dims))
        return rows(x.movedim(in_dims[0], 0)), 0  # rows are independent: batch folds into them

    x = torch.randn(5, B, 4, dtype=D)
    close(torch.vmap(rows, in_dims=1)(x), torch.stack([rows(x[:, i]) for i in range(B)]))
    assert calls == [(B, (1,))]
    assert rows._vmap_twin is None


def test_a_body_jax_cannot_batch_says_to_declare_a_rule():
    def host(x):
        return np.asarray(x) * 2

    @tpu_kernel(uname("host"))
    def on_host(x: Tensor) -> Tensor:
        return jax.pure_callback(host, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    close(on_host(torch.ones(3, dtype=D)), torch.full((3,), 2.0, dtype=D))
    with pytest.raises(KernelError, match=r"def_vmap"):
        torch.vmap(on_host)(torch.ones(B, 3, dtype=D))

    with pytest.raises(OpDefinitionError, match="def_vmap expects a function"):
        on_host.def_vmap(3)


def test_grad_of_an_op_without_backward_names_the_fixes():
    @tpu_kernel(uname("nobwd"))
    def nobwd(x: Tensor) -> Tensor:
        return x * 2

    with pytest.raises(NoBackwardError, match="def_backward"):
        torch.func.grad(lambda a: nobwd(a).sum())(torch.randn(3, dtype=D))


def test_plain_autograd_and_vmap_leave_inputs_untouched():
    x = torch.randn(B, 4, 8, dtype=D)
    before = x.clone()
    torch.vmap(torch.func.grad(lambda a: softmax(a).pow(2).sum()))(x)
    assert torch.equal(x, before) and not x.requires_grad and x.grad is None


# ---- Helion and Tokamax ops ---------------------------------------------------------------


@pytest.mark.slow  # 10-20 s each here: Helion's Pallas kernels trace and compile in interpret mode
@pytest.mark.parametrize("name", ["softmax_helion", "rmsnorm_helion"])
def test_helion_ops_grad_vmap_and_per_sample_grads(name):
    from tpu_kernels.kernels import helion_ops

    f = getattr(helion_ops, name)
    x = torch.randn(B, 8, 128)
    args = (torch.randn(128),) if name == "rmsnorm_helion" else ()
    tol = 1e-5  # float32 (Helion's Pallas backend rejects float64); errors seen here ~1e-7
    close(
        torch.vmap(f, in_dims=(0,) + (None,) * len(args))(x, *args),
        torch.stack([f(x[i], *args) for i in range(B)]),
        tol,
    )
    loss = _loss(f)
    close(torch.func.grad(loss)(x[0], *args), _autograd_grads(f, (x[0], *args))[0], tol)
    per_sample = torch.vmap(torch.func.grad(loss), in_dims=(0,) + (None,) * len(args))(x, *args)
    close(per_sample, torch.stack([_autograd_grads(f, (x[i], *args))[0] for i in range(B)]), tol)


@needs_tokamax
@pytest.mark.parametrize("which", ["rms_norm", "layer_norm"])
def test_tokamax_norms_grad_jacrev_vmap_and_per_sample_grads(which):
    from tpu_kernels import tokamax as tk

    def f(x, w):
        return getattr(tk, which)(x, w, eps=1e-5)

    x, w = torch.randn(B, 4, 16, dtype=D), torch.randn(16, dtype=D)
    close(torch.vmap(f, in_dims=(0, None))(x, w), torch.stack([f(x[i], w) for i in range(B)]))
    close(torch.func.grad(_loss(f), argnums=(0, 1))(x[0], w), _autograd_grads(f, (x[0], w)))
    close(torch.func.jacrev(f)(x[0], w), torch.autograd.functional.jacobian(lambda a: f(a, w), x[0]))
    per_sample = torch.vmap(torch.func.grad(_loss(f), argnums=1), in_dims=(0, None))(x, w)
    close(per_sample, torch.stack([_autograd_grads(f, (x[i], w))[1] for i in range(B)]))


def test_eager_backward_through_vmap_matches_a_loop():
    # plain autograd outside, vmap inside: the twin records the backward for regular autograd
    x = torch.randn(B, 4, 8, dtype=D, requires_grad=True)
    w = torch.randn(8, dtype=D, requires_grad=True)
    torch.vmap(rmsnorm, in_dims=(0, None))(x, w).pow(2).sum().backward()
    xs, ws = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    sum(rmsnorm(xs[i], ws).pow(2).sum() for i in range(B)).backward()
    close((x.grad, w.grad), (xs.grad, ws.grad), tol=1e-9)


def test_batched_twin_passes_opcheck():
    from tpu_kernels.dispatch import vmap as vmap_rules
    from tpu_kernels.testing import opcheck

    twin = vmap_rules.batched_op(scale_add)
    x, y = torch.randn(B, 4, 8, requires_grad=True), torch.randn(4, 8, requires_grad=True)
    opcheck(twin, ([True, False], x, y), {"alpha": 0.5, "block_rows": 8})


@needs_tokamax
def test_tokamax_glu_with_an_optional_tensor_vmap_and_per_sample_weight_grads():
    from tpu_kernels import tokamax as tk

    def f(x, wg, wu):
        return tk.gated_linear_unit(x, wg, wu, activation="silu")

    x, wg, wu = torch.randn(B, 4, 8, dtype=D), torch.randn(8, 6, dtype=D), torch.randn(8, 6, dtype=D)
    close(torch.vmap(f, in_dims=(0, None, None))(x, wg, wu), torch.stack([f(x[i], wg, wu) for i in range(B)]))
    per_sample = torch.vmap(torch.func.grad(_loss(f), argnums=(1, 2)), in_dims=(0, None, None))(x, wg, wu)
    loops = [_autograd_grads(f, (x[i], wg, wu)) for i in range(B)]
    close(per_sample, tuple(torch.stack([g[k] for g in loops]) for k in (1, 2)))


def test_vmap_inside_torch_compile_is_one_graph():
    from tests.helpers import compile_counted

    x = torch.randn(B, 4, 8, dtype=D)
    compiled, counter = compile_counted(lambda a: torch.vmap(softmax)(a))
    close(compiled(x), torch.stack([softmax(x[i]) for i in range(B)]))
    assert counter.frame_count == 1
