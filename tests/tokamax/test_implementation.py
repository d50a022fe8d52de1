"""The implementation is chosen by device, visible, overridable, and refused clearly off its device."""

import pytest
import torch

from tests.helpers import rand
from tpu_kernels import registered_ops
from tpu_kernels import tokamax as tk
from tpu_kernels.tokamax.implementation import OPS, REGISTERED, ImplementationError


def _default(op: str, platform: str) -> str:
    return ",".join(n for n in OPS[op].defaults[platform].split(",") if n in REGISTERED[op]) or "xla"


@pytest.mark.parametrize("op", list(OPS))
def test_cpu_tensors_run_xla_and_accelerators_get_tokamax_default_order(op):
    assert tk.resolve_implementation(op, torch.device("cpu")) == "xla"
    assert tk.resolve_implementation(op, "cuda") == _default(op, "cuda")
    assert tk.resolve_implementation(op, "tpu:0") == _default(op, "tpu")
    assert tk.resolve_implementation(op, "privateuseone") == _default(op, "tpu")


def test_tokamax_default_orders_on_accelerators():
    # The orders Tokamax 0.0.17 tries with implementation=None, before dropping backends
    # this install could not import.
    assert OPS["dot_product_attention"].defaults == {
        "cpu": "xla",
        "cuda": "mosaic,triton,xla",
        "tpu": "mosaic,xla",
    }
    assert OPS["ragged_dot"].defaults["tpu"] == "mosaic,xla"
    assert OPS["gated_linear_unit"].defaults["tpu"] == "xla"  # its Mosaic kernel is GPU-only
    assert OPS["linear_softmax_cross_entropy_loss"].defaults["tpu"] == "mosaic_tpu,xla"


@pytest.mark.parametrize(
    "op", [op for op in OPS if "mosaic_tpu" in OPS[op].runs_on or "mosaic" in OPS[op].runs_on]
)
def test_a_tpu_kernel_asked_for_on_cpu_is_an_error_naming_op_argument_and_fix(op):
    name = "mosaic_tpu" if "mosaic_tpu" in OPS[op].runs_on else "mosaic"
    with pytest.raises(ImplementationError) as info:
        tk.resolve_implementation(op, "cpu", name)
    message = str(info.value)
    assert f"tokamax.{op}: implementation='{name}' cannot run on cpu tensors" in message
    assert "On cpu use implementation='xla'" in message and "implementation=None" in message
    assert isinstance(info.value, NotImplementedError)


def test_a_fallback_order_keeps_what_runs_here():
    assert (
        tk.resolve_implementation("dot_product_attention", "cpu", "mosaic,xla_chunked,xla")
        == "xla_chunked,xla"
    )
    assert tk.resolve_implementation("dot_product_attention", "cpu", "xla_chunked") == "xla_chunked"


def test_meta_tensors_take_any_implementation():
    assert tk.resolve_implementation("ragged_dot", "meta") == "xla"
    assert tk.resolve_implementation("ragged_dot", "meta", "mosaic_tpu") == "mosaic_tpu"
    lhs, rhs = torch.empty(6, 8, device="meta"), torch.empty(2, 8, 3, device="meta")
    out = tk.ragged_dot(lhs, rhs, torch.empty(2, dtype=torch.int64, device="meta"))
    assert out.shape == (6, 3) and out.device.type == "meta"


def test_unknown_names_and_devices_are_errors():
    with pytest.raises(ValueError, match="'flash' is not a Tokamax implementation of this op; choose from"):
        tk.resolve_implementation("dot_product_attention", "cpu", "flash")
    with pytest.raises(
        ValueError, match=r"tensors on 'mps' are not supported; Tokamax ops run on cpu, cuda, tpu tensors"
    ):
        tk.resolve_implementation("layer_norm", "mps")
    with pytest.raises(ValueError, match="unknown op 'softmax'"):
        tk.resolve_implementation("softmax", "cpu")


def test_an_implementation_this_install_lacks_is_an_error(monkeypatch):
    monkeypatch.setitem(REGISTERED, "layer_norm", frozenset({"xla"}))
    with pytest.raises(ImplementationError, match="not available on this install.*could not import 'triton'"):
        tk.resolve_implementation("layer_norm", "cuda", "triton")
    assert tk.resolve_implementation("layer_norm", "cuda") == "xla"


def test_the_implementations_each_op_has_per_device():
    assert tk.implementations("dot_product_attention", "cpu") == ("xla", "xla_chunked")
    assert "mosaic_tpu" in tk.implementations("linear_softmax_cross_entropy_loss", "tpu")
    assert tk.implementations("triangle_multiplication", "cpu") == ("xla",)


def _calls(impl: str):
    x, gs = rand(6, 8), torch.tensor([2, 4])
    n = 4
    tri = [
        rand(n, n, 8),
        torch.ones(n, n, dtype=torch.bool),
        rand(8, 2, 4),
        rand(8, 2, 4),
        rand(4, 5),
        rand(8, 5),
    ]
    tri += [rand(8), rand(8), rand(4), rand(4)]
    return {
        "dot_product_attention": lambda: tk.dot_product_attention(
            rand(1, 4, 2, 8), rand(1, 4, 2, 8), rand(1, 4, 2, 8), implementation=impl
        ),
        "layer_norm": lambda: tk.layer_norm(x, implementation=impl),
        "gated_linear_unit": lambda: tk.gated_linear_unit(x, rand(8, 2, 4), implementation=impl),
        "ragged_dot": lambda: tk.ragged_dot(x, rand(2, 8, 3), gs, implementation=impl),
        "linear_softmax_cross_entropy_loss": lambda: tk.linear_softmax_cross_entropy_loss(
            x, gs.repeat(3), rand(8, 5), implementation=impl
        ),
        "triangle_multiplication": lambda: tk.triangle_multiplication(*tri, "outgoing", implementation=impl),
    }


@pytest.mark.parametrize(
    ("op", "impl"),
    [
        ("dot_product_attention", "mosaic"),
        ("dot_product_attention", "cudnn"),
        ("layer_norm", "triton"),
        ("gated_linear_unit", "mosaic"),
        ("ragged_dot", "mosaic_tpu"),
        ("linear_softmax_cross_entropy_loss", "mosaic_tpu"),
        ("triangle_multiplication", "triton"),
    ],
)
def test_each_op_refuses_a_gpu_or_tpu_kernel_on_cpu_before_running(op, impl):
    with pytest.raises(
        ImplementationError, match=f"tokamax.{op}: implementation='{impl}' cannot run on cpu tensors"
    ):
        _calls(impl)[op]()


def test_the_families_register_every_op_and_its_implementation_table_once():
    family_ops = [op.name for family in tk.FAMILIES.values() for op in family.ops]
    # derived ops (a backward, torch.vmap's batched twin made by an earlier test) are not a family's
    derived = ("_backward", "_vmapped")
    tokamax_ops = [n for n in registered_ops() if n.startswith("tokamax::") and not n.endswith(derived)]
    assert sorted(family_ops) == sorted(tokamax_ops) and len(set(family_ops)) == len(family_ops)
    tables = [table.op for family in tk.FAMILIES.values() for table in family.implementations]
    assert tables == list(OPS)  # one table per op, each made in its family's op.py
    assert all(family.implementations for family in tk.FAMILIES.values())
    for family in tk.FAMILIES.values():  # each public function is the package's own name
        for fn in family.functions:
            assert getattr(tk, fn.__name__) is fn and fn.__name__ in tk.__all__
        assert family.shapes.TEST and family.shapes.BENCH
        assert family.op(family.ops[0].short_name) is family.ops[0]
    with pytest.raises(KeyError, match="has no op 'softmax'"):
        tk.FAMILIES["attention"].op("softmax")


def test_each_op_takes_its_tpu_examples_from_its_family_examples_py_by_name():
    import dataclasses
    import types

    from tpu_kernels.tokamax import registry

    for family in tk.FAMILIES.values():
        for op in family.ops:
            assert op.examples.function() is getattr(family.examples, op.short_name), op.name
            # and the small concrete CPU calls the sharding simulation runs
            small = getattr(family.examples, f"{op.short_name}_small")
            assert op.sharding_examples.function() is small, op.name
    # an examples.py without the op's function: an error naming the module, the function and why
    rope = tk.FAMILIES["rope"]
    empty = types.ModuleType("tpu_kernels.tokamax.rope.examples")
    with pytest.raises(
        ValueError, match=r"'rope': tpu_kernels.tokamax.rope.examples has no function deepseek_rope\(\)"
    ):
        registry._examples(dataclasses.replace(rope, examples=empty), rope.ops[0])
    with pytest.raises(
        ValueError, match=r"no function deepseek_rope_small\(\) giving small concrete CPU calls"
    ):
        registry._examples(dataclasses.replace(rope, examples=empty), rope.ops[0], "_small")


def test_registering_a_family_or_a_table_twice_is_an_error():
    from tpu_kernels.tokamax import implementation, registry

    before = (list(OPS), list(tk.FAMILIES))
    with pytest.raises(ValueError, match="'layer_norm' are already registered"):
        implementation.register(OPS["layer_norm"])
    with pytest.raises(ValueError, match="family 'rope' is already registered"):
        registry.register("tpu_kernels.tokamax.rope", functions=[], ops=[])
    assert (list(OPS), list(tk.FAMILIES)) == before  # the refused registrations added nothing


def test_a_table_is_checked_when_declared():
    from tpu_kernels.tokamax import implementation as impl

    with pytest.raises(
        ValueError, match=r"default order 'mosaic,xla' of 'made_up' on tpu names \['mosaic'\]"
    ):
        impl.table("made_up", {"mosaic": impl.GPU_ONLY}, tpu="mosaic,xla")
    with pytest.raises(ValueError, match=r"no_vjp names \['mosaic_tpu'\], which are not implementations"):
        impl.table("made_up", {"mosaic": impl.TPU_ONLY}, no_vjp=("mosaic_tpu",))
    with pytest.raises(ValueError, match="'layer_norm' are already registered"):
        impl.table("layer_norm", {}, api="normalization")
    assert "made_up" not in OPS
