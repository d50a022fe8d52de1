"""@tpu_kernel: registration, calls, statics, dtypes, devices, caching and errors."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax.experimental import pallas as pl
from torch import Tensor

from tests.helpers import rand, uname
from tpu_kernels import KernelError, OpDefinitionError, checked, tpu_kernel
from tpu_kernels.definition.dtypes import TORCH_TO_JAX


def test_op_is_registered_and_callable_three_ways():
    @tpu_kernel(uname("add"))
    def add(x: Tensor, y: Tensor, *, alpha: float = 1.0) -> Tensor:
        return x + alpha * y

    x, y = rand(4, 8), rand(4, 8)
    expected = x + 2 * y
    ns, name = add.name.split("::")
    torch.testing.assert_close(add(x, y, alpha=2.0), expected)
    torch.testing.assert_close(getattr(getattr(torch.ops, ns), name)(x, y, alpha=2.0), expected)
    torch.testing.assert_close(add.overload(x, y, alpha=2.0), expected)
    assert add.schema == "(Tensor x, Tensor y, *, float alpha=1.0) -> Tensor"
    assert "tpu_kernel" in repr(add)


def test_tensors_arrive_as_jax_arrays_and_statics_as_python_values():
    seen = {}

    @tpu_kernel(uname())
    def f(x: Tensor, xs: list[Tensor], maybe: Tensor | None, n: int, dims: list[int], tag: str) -> Tensor:
        seen.update(
            x=isinstance(x, jax.Array),
            xs=[isinstance(a, jax.Array) for a in xs],
            maybe=maybe,
            n=n,
            dims=dims,
            tag=tag,
        )
        return x * n + sum(xs)

    x = rand(3)
    out = f(x, [x, x], None, 2, [1, 2], "hi")
    torch.testing.assert_close(out, 4 * x)
    assert seen["x"] and seen["xs"] == [True, True]
    assert seen["maybe"] is None and seen["n"] == 2 and seen["dims"] == (1, 2) and seen["tag"] == "hi"


def test_each_static_value_compiles_once_and_is_cached():
    traces = []

    @tpu_kernel(uname())
    def scale(x: Tensor, alpha: float) -> Tensor:
        traces.append(alpha)
        return x * alpha

    x = rand(8)
    for alpha in [1.0, 2.0, 1.0, 2.0, 1.0]:
        torch.testing.assert_close(scale(x, alpha), x * alpha)
    scale(rand(16), 1.0)  # new shape
    scale(rand(8, dtype=torch.float64), 1.0)  # new dtype
    info = scale.cache_info()
    assert (info.misses, info.hits, info.size) == (4, 3, 4)
    assert traces == [1.0, 2.0, 1.0, 1.0]


def test_cache_is_bounded():
    @tpu_kernel(uname(), cache_size=2)
    def f(x: Tensor) -> Tensor:
        return x + 1

    for n in range(1, 5):
        f(rand(n))
    info = f.cache_info()
    assert (info.size, info.maxsize, info.evictions, info.misses) == (2, 2, 2, 4)


def test_cache_builds_each_key_once_under_concurrent_calls():
    traces = []

    @tpu_kernel(uname())
    def f(x: Tensor) -> Tensor:
        traces.append(1)
        return jnp.sin(x)

    x = rand(64)
    results, errors = [], []

    def call():
        try:
            results.append(f(x))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(traces) == 1 and f.cache_info().misses == 1 and f.cache_info().hits == 7
    for r in results:
        torch.testing.assert_close(r, torch.sin(x))


@pytest.mark.parametrize("dtype", list(TORCH_TO_JAX), ids=str)
def test_every_supported_dtype_round_trips(dtype):
    @tpu_kernel(uname("ident"))
    def twice(x: Tensor) -> tuple[Tensor, Tensor]:
        return x, jnp.asarray(x)  # both must come back as fresh buffers

    x = rand(4, 8).mul(4).to(dtype) if dtype != torch.bool else rand(4, 8) > 0
    a, b = twice(x)
    for out in (a, b):
        assert out.dtype == dtype and out.shape == x.shape
        assert out.data_ptr() != x.data_ptr()
        assert torch.equal(out.view(torch.uint8), x.view(torch.uint8))


def test_float64_and_int64_keep_their_width_without_touching_global_x64():
    @tpu_kernel(uname())
    def f(x: Tensor, i: Tensor) -> tuple[Tensor, Tensor]:
        return x * (1 + 1e-12), i + 2**40

    x = torch.tensor([1.0], dtype=torch.float64)
    i = torch.tensor([2**40], dtype=torch.int64)
    y, j = f(x, i)
    assert y.dtype == torch.float64 and y.item() == 1 + 1e-12  # float32 would round to 1.0
    assert j.dtype == torch.int64 and j.item() == 2**41
    assert not jax.config.jax_enable_x64
    assert jax.dtypes.canonicalize_dtype(jnp.float64) == jnp.float32


def test_unsupported_dtype_is_a_clear_error():
    @tpu_kernel(uname())
    def f(x: Tensor) -> Tensor:
        return x

    with pytest.raises(TypeError, match=r"argument 'x' has dtype complex64.*Supported: float64"):
        f(torch.ones(2, dtype=torch.complex64))


def test_noncontiguous_inputs_are_copied_or_rejected():
    @tpu_kernel(uname())
    def f(x: Tensor) -> Tensor:
        return x * 2

    @tpu_kernel(uname(), noncontiguous="error")
    def strict(x: Tensor) -> Tensor:
        return x * 2

    base = rand(8, 6)
    for view in (base.t(), base[:, ::2], base[1:, 1:]):
        torch.testing.assert_close(f(view), view * 2)
    with pytest.raises(ValueError, match="argument 'x' is not contiguous"):
        strict(base.t())
    assert torch.equal(base, base.clone())  # the caller's tensor is untouched


def test_kernel_exceptions_and_jax_shape_errors_name_the_op():
    @tpu_kernel(uname("bad_shapes"))
    def bad(x: Tensor, y: Tensor) -> Tensor:
        return x @ y

    with pytest.raises(KernelError, match=r"bad_shapes.*x=float32\[3, 4\].*y=float32\[5, 6\].*dot_general"):
        bad(rand(3, 4), rand(5, 6))

    @tpu_kernel(uname("raises"))
    def raises(x: Tensor, n: int) -> Tensor:
        if n < 0:
            raise ValueError("n must be >= 0")
        return x

    with pytest.raises(KernelError, match=r"raises.*n=-1.*ValueError: n must be >= 0") as info:
        raises(rand(2), -1)
    assert isinstance(info.value.__cause__, ValueError)


def test_wrong_results_are_reported():
    @tpu_kernel(uname("two"))
    def two(x: Tensor) -> tuple[Tensor, Tensor]:
        return x

    with pytest.raises(KernelError, match="returned 1 arrays, but the op declares 2"):
        two(rand(2))

    @tpu_kernel(uname("not_array"))
    def not_array(x: Tensor) -> Tensor:
        return 3

    with pytest.raises(KernelError, match="returned a int"):
        not_array(rand(2))


def test_call_errors_name_the_op_and_argument():
    @tpu_kernel(uname("statics"))
    def f(x: Tensor, n: int) -> Tensor:
        return x * n

    # a tensor for a static: tests/test_op.py::test_a_tensor_for_a_static_is_one_error_on_every_path;
    # torch's dispatcher checks the rest of the call against the schema, and its messages name both.
    with pytest.raises(TypeError, match=r"statics_\d+: argument 'n' is a static \(int.*takes an int"):
        f(rand(2), rand(2))
    with pytest.raises(
        RuntimeError,
        match=r"statics_\d+\(\) Expected a value of type 'int' for argument 'n' but instead found type 'str'",
    ):
        f(rand(2), "2")
    with pytest.raises(RuntimeError, match=r"statics_\d+\(\) is missing value for argument 'n'"):
        f(rand(2))
    with pytest.raises(
        RuntimeError, match=r"statics_\d+\(\) expected at most 2 argument\(s\) but received 3"
    ):
        f(rand(2), 1, 2)


_STATIC_TENSORS = {
    "0-d": lambda: torch.tensor(0.5),
    "one element": lambda: torch.tensor([0.5]),
    "0-d requiring grad": lambda: torch.tensor(0.5, requires_grad=True),
    "int tensor": lambda: torch.tensor(2),
}


@pytest.mark.parametrize("value", list(_STATIC_TENSORS))
def test_a_tensor_for_a_static_is_one_error_on_every_path(value):
    # torch's dispatcher would read a one-element tensor as the number in eager and refuse it
    # under torch.compile; a static is a compile-time constant, so every path refuses it.
    @tpu_kernel(uname("tensor_static"))
    def f(x: Tensor, alpha: float) -> Tensor:
        return x * alpha

    x, t = rand(4), _STATIC_TENSORS[value]()
    message = (
        r"tensor_static_\d+: argument 'alpha' is a static \(float.*takes a float \(or an int\), but got a"
    )
    assert f._eager_cpu.accepts((x, 0.5))  # the eager shortcut's call: plain tensors, positional
    with pytest.raises(TypeError, match=message):
        f(x, t)  # the shortcut declines, the check refuses
    with pytest.raises(TypeError, match=message):
        f(x.requires_grad_(), alpha=t)  # autograd, keywords: the dispatcher's path
    with pytest.raises(TypeError, match=message):
        torch.compile(lambda x, a: f(x, a) * 2, backend="aot_eager")(x, t)
    with pytest.raises(torch._dynamo.exc.Unsupported, match=message):  # fullgraph: quoting it
        torch.compile(lambda x, a: f(x, a) * 2, backend="aot_eager", fullgraph=True)(x, t)
    with pytest.raises(TypeError, match=message), checked():
        f(x, t)
    assert f(x, 0.5).shape == (4,)


def test_a_tensor_in_a_list_static_is_refused():
    @tpu_kernel(uname("list_static"))
    def f(x: Tensor, *, sizes: list[int] = (1,)) -> Tensor:
        return x * len(sizes)

    with pytest.raises(
        TypeError, match=r"argument 'sizes' is a static \(int\[\]: .*a list of ints.*list of Tensors"
    ):
        f(rand(4), sizes=[torch.tensor(2)])


def test_definition_errors():
    def f(x: Tensor) -> Tensor:
        return x

    for bad in ["no_namespace", "a::b::c", "1ns::f", "ns::"]:
        with pytest.raises(OpDefinitionError, match="namespace|identifier"):
            tpu_kernel(bad)(f)
    name = uname()
    tpu_kernel(name)(f)
    with pytest.raises(OpDefinitionError, match="already registered"):
        tpu_kernel(name)(f)
    with pytest.raises(OpDefinitionError, match="mutates_args names 'y'"):
        tpu_kernel(uname(), mutates_args=("y",))(f)

    def pair(x: Tensor) -> tuple[Tensor, Tensor]:
        return x, x

    with pytest.raises(OpDefinitionError, match="residuals .* must be the last outputs"):
        tpu_kernel(uname(), outputs=("a", "b"), residuals=("a",))(pair)
    with pytest.raises(OpDefinitionError, match="backward='grad'"):
        tpu_kernel(uname(), backward="grad")(f)

    def statics_only(n: int) -> Tensor: ...

    with pytest.raises(OpDefinitionError, match="at least one tensor parameter"):
        tpu_kernel(uname())(statics_only)


def test_mixed_devices_are_rejected():
    @tpu_kernel(uname("mixed"))
    def f(x: Tensor, y: Tensor) -> Tensor:
        return x + y

    with pytest.raises(ValueError, match=r"mixed.*'y' is on meta.*one device"):
        f(rand(2), torch.empty(2, device="meta"))


def test_mutated_arguments_are_written_in_eager_and_compiled():
    @tpu_kernel(uname("acc"), mutates_args=("acc",))
    def accumulate(acc: Tensor, x: Tensor) -> Tensor:
        return acc.sum(), acc + x  # output, then the new value of acc

    acc, x = rand(4), rand(4)
    expected = acc + x
    total = accumulate(acc, x)
    torch.testing.assert_close(acc, expected)
    torch.testing.assert_close(total, (expected - x).sum())

    def step(a, b):
        return accumulate(a, b) * 2

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    a1, a2 = rand(4), None
    a2 = a1.clone()
    out_eager, out_compiled = step(a1, x), compiled(a2, x)
    torch.testing.assert_close(a1, a2)
    torch.testing.assert_close(out_eager, out_compiled)

    @tpu_kernel(uname("inplace"), mutates_args=("x",))
    def double_(x: Tensor) -> None:
        return x * 2

    y = rand(3)
    ref = y * 2
    assert double_(y) is None
    torch.testing.assert_close(y, ref)


def test_pallas_kernel_needs_no_interpret_flag_on_cpu():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1

    @tpu_kernel(uname())
    def plus_one(x: Tensor) -> Tensor:
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    x = rand(8, 128)
    torch.testing.assert_close(plus_one(x), x + 1)


def test_output_aliasing_an_input_is_copied():
    @tpu_kernel(uname())
    def ident(x: Tensor) -> Tensor:
        return x

    x = rand(5)
    y = ident(x)
    assert y.data_ptr() != x.data_ptr()
    x.add_(1)
    assert not torch.equal(x, y)


def test_numpy_outputs_are_writable_and_owned():
    @tpu_kernel(uname())
    def f(x: Tensor) -> Tensor:
        return x + 1

    y = f(rand(4))
    y.add_(1)  # would fail or corrupt if the buffer were shared or read-only
    assert np.isfinite(y.numpy()).all()


def test_options_are_written_once_and_shown_in_the_signature():
    import inspect

    from tpu_kernels.definition.options import NAMES, OpOptions
    from tpu_kernels.op import KernelOp

    params = inspect.signature(tpu_kernel).parameters
    assert set(params) == {"name", "fn"} | NAMES
    assert params["cache_size"].default == OpOptions().cache_size == 256
    with pytest.raises(TypeError, match=r"t::typo: unknown option\(s\) outputz; the options are .*outputs"):
        tpu_kernel("t::typo", outputz=("y",))
    with pytest.raises(TypeError, match=r"t::typo2: unknown option\(s\) bogus"):
        KernelOp("t::typo2", lambda x: x, bogus=1)


def test_examples_given_as_a_list_is_an_error_at_definition():
    # Before, the list was accepted and `tpu-kernels check` failed with "'list' object is not
    # callable" while building the example calls.
    for option in ("examples", "sharding_examples"):
        with pytest.raises(TypeError, match=rf"t::ex_{option}: option {option}= must be a function .* got list"):
            tpu_kernel(f"t::ex_{option}", **{option: [((torch.ones(2),), {})]})(lambda x: x)
