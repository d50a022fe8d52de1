"""Python signature -> torch schema."""

import jax
import pytest
import torch
from torch import Tensor

from tpu_kernels.definition.signature import Kind, parse
from tpu_kernels.errors import OpDefinitionError


def test_every_supported_annotation_maps_to_its_schema_type():
    def f(
        a: Tensor,
        b: Tensor | None,
        c: list[Tensor],
        d: jax.Array,
        n: int,
        x: float,
        flag: bool,
        s: str,
        dt: torch.dtype,
        ns: list[int],
        xs: list[float],
        bs: list[bool],
        on: int | None = None,
        *,
        k: int = 3,
        eps: float = 1e-6,
        name: str = 'a"b',
        mode: torch.dtype = torch.bfloat16,
        dims: list[int] = [1, 2],  # noqa: B006
    ) -> Tensor: ...

    sig = parse("t::f", f)
    assert [p.kind for p in sig.params[:4]] == [
        Kind.TENSOR,
        Kind.OPTIONAL_TENSOR,
        Kind.TENSOR_LIST,
        Kind.TENSOR,
    ]
    assert sig.schema() == (
        "(Tensor a, Tensor? b, Tensor[] c, Tensor d, int n, float x, bool flag, str s, ScalarType dt, "
        "int[] ns, float[] xs, bool[] bs, int? on=None, *, int k=3, float eps=1e-06, "
        'str name="a\\"b", ScalarType mode=bfloat16, int[] dims=[1, 2]) -> Tensor'
    )
    # torch accepts it
    lib = torch.library.Library("test_signature", "FRAGMENT")
    lib.define("f" + sig.schema())
    lib._destroy()


def test_tuple_returns_and_mutation_annotations():
    def f(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]: ...

    sig = parse("t::f", f)
    assert sig.n_outputs == 2 and sig.returns_tuple
    assert sig.schema(mutates_args=("y",)) == "(Tensor x, Tensor(a1!) y) -> (Tensor, Tensor)"

    def g(x: Tensor) -> None: ...

    assert parse("t::g", g, allow_no_outputs=True).schema() == "(Tensor x) -> ()"


@pytest.mark.parametrize(
    "source, message",
    [
        ("def f(x) -> Tensor: ...", "parameter 'x' has no type annotation"),
        ("def f(x: dict) -> Tensor: ...", "parameter 'x' has unsupported annotation"),
        ("def f(x: Tensor): ...", "needs a return annotation"),
        ("def f(x: Tensor) -> int: ...", "unsupported return annotation"),
        ("def f(x: Tensor) -> None: ...", "returns None but mutates no argument"),
        ("def f(*xs: Tensor) -> Tensor: ...", "parameter 'xs' is variadic positional"),
        ("def f(x: Tensor, n: int = None) -> Tensor: ...", "defaults to None, so annotate it Optional"),
        ("def f(x: Tensor, d: dict = {}) -> Tensor: ...", "unsupported annotation"),
        ("def f(x: Tensor, o: object = object()) -> Tensor: ...", "unsupported annotation"),
    ],
)
def test_definition_errors_name_the_op_and_the_parameter(source, message):
    scope = {"Tensor": Tensor}
    exec(source, scope)
    with pytest.raises(OpDefinitionError, match=message) as info:
        parse("mylib::f", scope["f"])
    assert "mylib::f" in str(info.value)


def _definition_error(source: str) -> str:
    scope = {"Tensor": Tensor}
    exec(source, scope)
    with pytest.raises(OpDefinitionError) as info:
        parse("mylib::f", scope["f"])
    return str(info.value)


def test_annotation_errors_list_every_choice_the_same_way():
    # A missing and an unsupported annotation are one mistake: both messages end with the
    # whole list of what may be written there, the same list (they once listed different subsets).
    no_param, bad_param = (
        _definition_error(s) for s in ("def f(x) -> Tensor: ...", "def f(x: dict) -> Tensor: ...")
    )
    no_return, bad_return = (
        _definition_error(s) for s in ("def f(x: Tensor): ...", "def f(x: Tensor) -> int: ...")
    )
    param_choices = no_param.split("; ", 1)[1]
    assert bad_param.split("; ", 1)[1] == param_choices
    for choice in ("jax.Array", "Optional[torch.Tensor]", "list[torch.Tensor]", "torch.dtype", "list[bool]"):
        assert choice in param_choices
    return_choices = no_return.split("; ", 1)[1]
    assert bad_return.split("; ", 1)[1] == return_choices
    for choice in ("torch.Tensor", "jax.Array", "tuple[torch.Tensor, torch.Tensor]", "None"):
        assert choice in return_choices


def test_values_restores_defaults_the_dispatcher_dropped():
    def f(x: Tensor, a: int = 2, *, b: float = 0.5) -> Tensor: ...

    sig = parse("t::f", f)
    x = torch.ones(1)
    assert sig.values((x,), {}) == [x, 2, 0.5]
    assert sig.values((x, 3), {"b": 1.5}) == [x, 3, 1.5]
    tensors, statics = sig.split(sig.values((x,), {}))
    assert tensors == [x] and statics == (2, 0.5)


def test_bind_reports_wrong_arity():
    def f(x: Tensor, y: Tensor, *, a: int = 1) -> Tensor: ...

    sig = parse("t::f", f)
    with pytest.raises(TypeError, match="missing required argument 'y'"):
        sig.bind((torch.ones(1),), {})
    with pytest.raises(TypeError, match="takes 2 positional arguments but 3 were given"):
        sig.bind((1, 2, 3), {})
    with pytest.raises(TypeError, match="unexpected keyword arguments"):
        sig.bind((1, 2), {"b": 1})


def test_pack_returns_outputs_as_a_call_does():
    def one(x: Tensor) -> Tensor: ...

    def pair(x: Tensor) -> tuple[Tensor, Tensor]: ...

    def single_tuple(x: Tensor) -> tuple[Tensor]: ...

    def mutating(x: Tensor) -> None: ...

    a, b, m = object(), object(), object()  # m: a mutated argument's new value, never returned
    assert parse("t::one", one).pack([a, m]) is a
    assert parse("t::pair", pair).pack([a, b, m]) == (a, b)
    assert parse("t::single", single_tuple).pack([a, m]) == (a,)
    assert parse("t::mut", mutating, allow_no_outputs=True).pack([m]) is None
    assert parse("t::list", one).pack((a, b), returns_list=True) == [a, b]
