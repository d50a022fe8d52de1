"""The generic path: a Tokamax op we do not wrap, as a torch op with one decorator."""

import jax
import pytest
import tokamax
import torch
from torch.testing._internal.optests import OpCheckError

from tests.helpers import assert_close, fresh_name, rand, uname
from tests.kernels.checks import opcheck
from tpu_kernels import tpu_kernel
from tpu_kernels.errors import InvalidArgumentTypeError
from tpu_kernels.tokamax import tokamax_op
from tpu_kernels.tokamax.attention import reference as attention_reference
from tpu_kernels.tokamax.normalization import reference as norm_reference
from tpu_kernels.tokamax.wrap import call_op, tensors_first


def test_an_integer_op_with_statics_and_a_shape_rule_passes_opcheck():
    def outputs(nope_cache, rope_cache, indices, *, top_k):
        n = indices.shape[0]
        return indices.new_empty((n, 128)), indices.new_empty((n // 4, 128))

    @tokamax_op(uname("csa_gather"), backward=None, symbolic_fake=outputs)
    def csa_gather(
        nope_cache: jax.Array, rope_cache: jax.Array, indices: jax.Array, *, top_k: int = 1024
    ) -> tuple[jax.Array, jax.Array]:
        return tuple(tokamax.ops.csa_gather(nope_cache, rope_cache, indices, top_k=top_k))

    nope = torch.randint(-(2**31), 2**31 - 1, (2, 64, 128), dtype=torch.int32)
    rope = torch.randint(-(2**31), 2**31 - 1, (2, 16, 128), dtype=torch.int32)
    idx = torch.randint(0, 128, (128,), dtype=torch.int32)
    rows, _ = csa_gather(nope, rope, idx, top_k=128)
    assert torch.equal(rows, nope.reshape(-1, 128)[idx.long()])
    opcheck(csa_gather, (nope, rope, idx), {"top_k": 128})


def test_gradients_come_from_tokamax_vjp_and_the_backward_needs_no_trace_for_its_fake():
    @tokamax_op(uname("layer_norm_rows"))
    def layer_norm_rows(x: jax.Array, scale: jax.Array, *, eps: float = 1e-6) -> jax.Array:
        return tokamax.layer_norm(x, scale, None, axis=0, epsilon=eps)

    x, w = (
        rand(6, 5, dtype=torch.float64, requires_grad=True),
        rand(6, dtype=torch.float64, requires_grad=True),
    )
    assert torch.autograd.gradcheck(lambda a, b: layer_norm_rows(a, b), (x, w))
    assert_close(layer_norm_rows(x, w), norm_reference.layer_norm(x, w, dim=0), torch.float64)
    opcheck(layer_norm_rows, (x.float().detach().requires_grad_(), w.float().detach().requires_grad_()))


def _attention(name: str, decorator):
    @decorator(name)
    def attention(q: jax.Array, k: jax.Array, v: jax.Array, bias: jax.Array) -> jax.Array:
        return tokamax.dot_product_attention(q, k, v, bias, scale=0.25, implementation="xla")

    return attention


def test_tokamax_shape_checks_are_skipped_for_symbolic_sizes_only():
    # Tokamax type-checks a broadcastable bias with jaxtyping, which cannot compare
    # symbolic sizes: with the plain decorator, opcheck's dynamic-shape test fails.
    plain = _attention(uname("attention_plain"), lambda n: tpu_kernel(n, backward="vjp"))
    wrapped = _attention(uname("attention"), tokamax_op)
    args = tuple(rand(*s, requires_grad=True) for s in [(2, 8, 4, 16)] * 3 + [(2, 1, 8, 8)])
    with pytest.raises(OpCheckError, match="typechecking parameter 'bias'"):
        opcheck(plain, args)
    opcheck(wrapped, args)
    want = attention_reference.dot_product_attention(*(a.double() for a in args), scale=0.25)
    assert_close(wrapped(*args), want, torch.float32, scale=2)
    with pytest.raises(InvalidArgumentTypeError, match="typechecking"):  # real calls are still checked
        wrapped(rand(2, 8, 4, 16), rand(2, 8, 4, 16), rand(2, 8, 4, 16), rand(3, 1, 8, 8))


def test_every_tokamax_op_is_documented_with_its_schema():
    from pathlib import Path

    from tpu_kernels.tokamax import FAMILIES

    page = (Path(__file__).resolve().parents[2] / "docs" / "tokamax.md").read_text()
    # the families' forward ops (not their derived backward ops or vmap twins)
    ops = {op.name: op for family in FAMILIES.values() for op in family.ops}
    assert len(ops) >= 16
    missing = [
        n
        for n, op in ops.items()
        if f"torch.ops.tokamax.{n.removeprefix('tokamax::')}{op.schema}" not in page
    ]
    assert not missing, f"docs/tokamax.md does not list these ops with their current schema: {missing}"


def test_one_signature_gives_the_schema_and_the_body_calls_tokamax_by_name():
    # The public function's signature, tensors moved first and the statics keyword-only,
    # is the op's; `calls=` forwards every argument by name, the implementation order as
    # the tuple Tokamax takes, and a list of outputs as a tuple.
    seen = []

    def fake_tokamax(x, gate, *, scale, implementation):
        seen.append(implementation)
        return [x * scale, x + gate]

    def pair(
        x: torch.Tensor, scale: float, *, gate: torch.Tensor, implementation: str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        raise AssertionError("only the signature is used")

    op = tokamax_op(uname("pair"), calls=fake_tokamax, signature=tensors_first(pair), backward=None)
    assert (
        op.schema == "(Tensor x, Tensor gate, *, float scale, str? implementation=None) -> (Tensor, Tensor)"
    )
    x, gate = rand(3, 4), rand(3, 4)
    arguments = dict(x=x, gate=gate, scale=2.0, implementation="mosaic_tpu,xla", unrelated=1)
    times, plus = call_op(op, arguments)
    assert seen == [("mosaic_tpu", "xla")]
    assert torch.equal(times, x * 2.0) and torch.equal(plus, x + gate)
    with pytest.raises(TypeError, match=r"call_op has no value for \['gate'\]"):
        call_op(op, dict(x=x, scale=1.0, implementation=None))


def test_signature_alone_keeps_the_declared_order_and_runs_the_given_body():
    def scaled(x: torch.Tensor, factor: float, *, implementation: str | None = None) -> torch.Tensor:
        raise AssertionError("only the signature is used")

    op = tokamax_op(uname("scaled"), signature=scaled, backward=None)(
        lambda x, factor, implementation: x * factor
    )
    assert op.schema == "(Tensor x, float factor, *, str? implementation=None) -> Tensor"
    x = rand(5)
    assert torch.equal(call_op(op, dict(x=x, factor=3.0, implementation=None)), x * 3.0)


def test_call_op_takes_the_eager_shortcut_with_every_parameter_named_and_steps_aside_as_the_op_does(
    monkeypatch,
):
    """call_op hands the shortcut the public function's values in the op's parameter order
    (KernelOp.try_all): the same result as the dispatcher, an int for a float static made a
    float, the implementation resolved for the tensors' device; gradients, checked mode and
    meta tensors go through the dispatcher."""
    from tpu_kernels import checked
    from tpu_kernels.dispatch import eager
    from tpu_kernels.tokamax.wrap import public_op

    seen = []

    def body(x, weight, *, eps, implementation):
        seen.append(implementation)
        return x * eps + weight

    def shifted_rows(
        x: torch.Tensor, weight: torch.Tensor, *, eps: float = 1.0, implementation: str | None = None
    ) -> torch.Tensor:
        return call_op(op, locals())

    shifted_rows.__name__ = fresh_name("test_public_shifted")
    op = public_op(shifted_rows, calls=body, table="layer_norm")
    assert op.param_names == ("x", "weight", "eps", "implementation")
    x, w = torch.arange(6, dtype=torch.int32).reshape(2, 3), rand(3)
    want = op.overload(x, w, eps=2, implementation="xla")
    dispatched = []
    monkeypatch.setattr(op, "overload", lambda *a, **k: dispatched.append(1) or want)
    got = shifted_rows(x, w, eps=2)  # an int for the float eps
    assert not dispatched and torch.equal(got, want) and got.dtype == torch.float32
    assert seen[-1] == "xla"  # None resolved for cpu, as Tokamax takes it
    assert op.try_all((x, w, 2.0, "xla")) is not eager.DECLINED
    assert op.try_all((x, w, 2.0)) is eager.DECLINED  # not every parameter: the dispatcher's
    with checked():
        assert op.try_all((x, w, 2.0, "xla")) is eager.DECLINED
    monkeypatch.undo()

    xf = rand(2, 3, requires_grad=True)
    out = shifted_rows(xf, w, eps=3.0)  # a gradient needed: the dispatcher and autograd
    (grad,) = torch.autograd.grad(out.sum(), xf)
    assert torch.allclose(grad, torch.full_like(xf, 3.0))
    meta = shifted_rows(torch.empty(2, 3, device="meta"), torch.empty(3, device="meta"))
    assert meta.device.type == "meta" and meta.shape == (2, 3)


def test_call_op_skips_a_check_only_for_the_memos_call_that_passed_it():
    """call_op(check=...) leaves the public function's argument check out only for the same
    call again on the eager shortcut, after that call passed the same check: a call the op
    itself took unchecked, a tensor changed in place, another static or another public
    function's check all run the check (and raise where it raises)."""
    import tpu_kernels.tokamax as tk
    from tpu_kernels.tokamax.normalization.op import layer_norm_op

    x, w = rand(4, 8), rand(8)
    want = norm_reference.rms_norm(x.double(), w.double()).float()
    for _ in range(3):  # views cached; the memo set by a checked call
        out = tk.rms_norm(x, w)
    assert layer_norm_op._eager_cpu._memo[6] is not None
    assert_close(out, want)

    calls = []

    def counting(values):
        calls.append(1)
        from tpu_kernels.tokamax.normalization.op import _check_rms_norm

        _check_rms_norm(values)

    args = {"x": x, "weight": w, "bias": None, "dim": -1, "eps": 1e-6, "scale_offset": 0.0}
    args.update(subtract_mean=False, implementation=None)
    for _ in range(3):
        assert_close(call_op(layer_norm_op, args, counting), want)
    assert len(calls) == 1  # checked once; the memo's call again after that needs no check
    # an implementation that cannot run on the CPU is refused as before, memo or not
    from tpu_kernels.tokamax.implementation import ImplementationError

    with pytest.raises(ImplementationError, match="triton"):
        call_op(layer_norm_op, {**args, "implementation": "triton"}, counting)
    assert len(calls) == 1
    assert_close(call_op(layer_norm_op, {**args, "implementation": "xla"}, counting), want)
    assert len(calls) == 1  # "xla" is what None resolves to on the CPU: the memo's call
    call_op(layer_norm_op, {**args, "eps": 1e-5}, counting)
    assert len(calls) == 2  # another static: checked

    # a call the op takes but the public function refuses: the op's own (unchecked) call sets
    # the memo, and the public function must still refuse it
    from tpu_kernels.tokamax.wrap import public_op

    def at_most_four_rows(values):
        if values[0].shape[0] > 4:
            raise ValueError("short_rows: at most 4 rows")

    def short_rows(
        x: torch.Tensor, weight: torch.Tensor, *, implementation: str | None = None
    ) -> torch.Tensor:
        return call_op(op, locals(), at_most_four_rows)

    short_rows.__name__ = fresh_name("test_public_short_rows")
    op = public_op(short_rows, calls=lambda x, weight, *, implementation: x * weight, table="layer_norm")
    tall = rand(6, 8)
    for _ in range(3):
        assert_close(op(tall, w, implementation="xla"), tall * w)
    assert op._eager_cpu._memo is not None and op._eager_cpu._memo[6] is None
    with pytest.raises(ValueError, match="at most 4 rows"):
        short_rows(tall, w)
    short = rand(4, 8)
    for _ in range(3):
        assert_close(short_rows(short, w), short * w)
    with torch.no_grad():
        short.resize_(6, 8)  # the same tensor object, now too tall
    with pytest.raises(ValueError, match="at most 4 rows"):
        short_rows(short, w)
    # a checked call memoized, then the weight resized in place: checked again, refused
    for _ in range(3):
        tk.rms_norm(x, w)
    with torch.no_grad():
        w.resize_(4)
    with pytest.raises(ValueError, match=r"tokamax.rms_norm: weight must have shape"):
        tk.rms_norm(x, w)
    # another public function over the same op: its own check, its own message
    b = rand(3)
    with pytest.raises(ValueError, match=r"tokamax.layer_norm: bias must have shape"):
        tk.layer_norm(x, rand(8), b)


def test_call_op_also_calls_an_op_not_made_by_tokamax_op():
    @tpu_kernel(uname("shifted"))
    def shifted(x: jax.Array, y: jax.Array, *, by: float) -> jax.Array:
        return x + y + by

    x, y = rand(4), rand(4)
    assert torch.equal(call_op(shifted, dict(y=y, by=1.0, x=x)), x + y + 1.0)


def test_public_op_names_the_op_after_its_public_function_and_resolves_the_implementation():
    # `public_op(f)` is tokamax::<f's name>, tensors first, calling `calls` by name; its
    # table ("layer_norm" here) gives call_op the implementation for the tensors' device.
    from tpu_kernels.tokamax.implementation import ImplementationError
    from tpu_kernels.tokamax.wrap import public_op

    seen = []

    def body(x, *, eps, implementation):
        seen.append(implementation)
        return x * eps

    def rows(x: torch.Tensor, eps: float, *, implementation: str | None = None) -> torch.Tensor:
        return call_op(op, locals())

    rows.__name__ = fresh_name("test_public_rows")
    op = public_op(rows, calls=body, table="layer_norm", backward=None)
    assert op.name == f"tokamax::{rows.__name__}"
    assert op.schema == "(Tensor x, *, float eps, str? implementation=None) -> Tensor"
    x = rand(3, 4)
    assert torch.equal(rows(x, 2.0), x * 2.0)
    assert seen == ["xla"]  # None on cpu -> the table's cpu order, as Tokamax takes it
    with pytest.raises(
        ImplementationError, match=r"tokamax.layer_norm: implementation='triton' cannot run on cpu"
    ):
        rows(x, 2.0, implementation="triton")
    with pytest.raises(ValueError, match="no implementation table 'nonesuch'"):
        public_op(rows, calls=body, table="nonesuch")


def test_an_op_takes_no_vjp_from_its_table():
    # mhc_pre's Mosaic kernel has no VJP, and its table says so: an op on that table runs
    # the order it is given forward, and its backward differentiates the rest ("xla").
    from tpu_kernels.tokamax import implementation

    assert implementation.OPS["mhc_pre"].no_vjp == ("mosaic_tpu",)
    seen = []

    def body(x, *, implementation):
        seen.append(implementation)
        return x * 3.0

    def tripled(x: torch.Tensor, *, implementation: str | None = None) -> torch.Tensor:
        raise AssertionError("only the signature is used")

    op = tokamax_op(uname("tripled"), calls=body, signature=tripled, table="mhc_pre")
    x = rand(4, 3).requires_grad_()
    op(x, implementation="mosaic_tpu,xla").sum().backward()
    assert seen[0] == ("mosaic_tpu", "xla") and seen[-1] == "xla"
    assert torch.equal(x.grad, torch.full_like(x, 3.0))
