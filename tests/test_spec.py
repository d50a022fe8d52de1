"""An op is its frozen spec (tpu_kernels.spec.OpSpec) plus what registering it made: nothing
is attached to an op or its spec afterwards, by the toolkit or anyone else."""

import dataclasses

import jax
import pytest
import torch

from tests.helpers import HAS_TOKAMAX, needs_tokamax, rand, uname
from tpu_kernels import registered_ops, tpu_kernel
from tpu_kernels.errors import OpDefinitionError
from tpu_kernels.op import KernelOp
from tpu_kernels.spec import OpSpec

# What KernelOp.__init__ and its methods set on an op: the spec, the registrations it made
# (library, schema, kernels, overload, fakes, eager shortcut) and what the public methods
# register later (def_backward, def_vmap, register_fake) or make on first use (vmap twin).
REGISTRATION = {
    "spec", "lib", "schema", "_kernels", "overload", "_derived_fake", "_user_fake", "_backward",
    "backward_op", "_vmap_rule", "_vmap_twin", "_eager_cpu", "_eager_tpu", "tuned", "_n_visible", "_all_visible",
    "__doc__", "__wrapped__",
}  # fmt: skip


def _all_shipped_ops() -> list[KernelOp]:
    import tpu_kernels.kernels  # noqa: F401  the Pallas families
    import tpu_kernels.kernels.helion_ops  # noqa: F401  their Helion twins

    if HAS_TOKAMAX:
        import tpu_kernels.tokamax as tk

        assert tk.FAMILIES  # the Tokamax families (imported with tpu_kernels.tokamax)
    return list(registered_ops().values())


def test_every_registered_op_holds_only_its_spec_and_its_registrations():
    ops = _all_shipped_ops()
    # the shipped ops, their Helion twins, the Tokamax ops where installed, and their backward ops
    assert len(ops) > (30 if HAS_TOKAMAX else 12)
    for op in ops:
        assert isinstance(op.spec, OpSpec), op.name
        extra = set(vars(op)) - REGISTRATION
        assert not extra, f"{op.name}: attributes attached outside its spec: {sorted(extra)}"


def test_the_spec_is_frozen_and_the_op_reads_it():
    op = tpu_kernel(uname("spec_add"), outputs=("y",))(_add_one)
    with pytest.raises(dataclasses.FrozenInstanceError):
        op.spec.name = "other::name"
    for field in ("name", "signature", "output_names", "sharding", "examples", "check_reference"):
        with pytest.raises(AttributeError):
            setattr(op, field, None)  # the op's fields are its spec's, read-only
    assert op.output_names == op.spec.output_names == ("y",)
    assert op.short_name == op.spec.short_name and op.name == op.spec.name
    assert op.call_names == (("x",), ())
    x = rand(3, 4)
    torch.testing.assert_close(op(x), x + 1)


def _add_one(x: jax.Array) -> jax.Array:
    return x + 1


@needs_tokamax
def test_a_tokamax_op_is_the_same_spec_with_its_table_and_symbolic_fake():
    import tpu_kernels.tokamax as tk

    glu = tk.FAMILIES["glu"].op("gated_linear_unit")
    assert glu.spec.implementation_table == "gated_linear_unit"
    assert glu.spec.symbolic_fake is not None
    # its example calls come from its family's examples.py, looked up by name, not assigned
    assert glu.examples.function() is tk.FAMILIES["glu"].examples.gated_linear_unit
    # the generic path: no table, no family examples
    from tpu_kernels.tokamax.wrap import tokamax_op

    @tokamax_op(uname("tk_plain"))
    def plain(x: jax.Array) -> jax.Array:
        return x * 2

    assert plain.implementation_table is None and plain.examples is None


@needs_tokamax
def test_a_tokamax_op_registers_its_backward_fake_once(monkeypatch):
    from tpu_kernels.tokamax.wrap import tokamax_op

    calls = []
    original = KernelOp.register_fake

    def counting(self, fn):
        calls.append(self.name)
        return original(self, fn)

    monkeypatch.setattr(KernelOp, "register_fake", counting)
    name = uname("tk_twice")

    @tokamax_op(name)
    def double(x: jax.Array) -> jax.Array:
        return x * 2

    assert calls == [f"{name}_backward"]  # the derived backward's trace-free fake, once
    x = rand(4, 3, requires_grad=True)
    double(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))


def test_float_only_is_an_option_of_helion_kernels_and_refused_elsewhere():
    from tpu_kernels.kernels.helion_ops import rmsnorm_helion

    assert rmsnorm_helion.source.float_only == frozenset(("x", "weight"))
    with pytest.raises(TypeError, match=r"rmsnorm_helion: argument 'x' has dtype int32"):
        rmsnorm_helion(torch.ones(2, 8, dtype=torch.int32), rand(8))
    with pytest.raises(OpDefinitionError, match=r"float_only= applies to Helion kernels only"):
        tpu_kernel(uname("jax_float_only"), float_only=("x",))(_add_one)
