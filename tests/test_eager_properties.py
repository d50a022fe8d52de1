"""Property: calling an op (`op(...)`, which may take the eager shortcut) and calling the
registered operator (`torch.ops.<ns>.<name>(...)`, always the dispatcher) give identical
results or raise the same exception type, for any call.

Hypothesis draws the op, a positional/keyword split of its arguments (including too
many positional ones and keyword-only parameters passed positionally), statics of the
right and of wrong types, and tensors that are contiguous, strided, expanded, misaligned
(storage offset 1), on the meta device, or requiring grad. The draws are derandomized
(the same examples on every run, as CI needs) and bounded: about 15 s here. A failure
prints the falsifying call and a `@reproduce_failure` blob; set
TPU_KERNELS_HYPOTHESIS_RANDOM=1 to explore fresh examples locally (Hypothesis then
prints the seed to replay with `--hypothesis-seed`).
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.helpers import hypothesis_settings  # noqa: E402
from tpu_kernels import KernelOp, tpu_kernel  # noqa: E402
from tpu_kernels.definition.signature import Kind  # noqa: E402
from tpu_kernels.kernels import matmul, rmsnorm, scale_add, softmax  # noqa: E402

PROPERTY_SETTINGS = hypothesis_settings(80, 250)  # the first call of a shape compiles (~0.3 s): no deadline


@tpu_kernel("test_eager_properties::mix")
def mix(
    x: torch.Tensor, y: torch.Tensor, alpha: float, n: int = 2, flip: bool = False, *, tag: str = "a"
) -> torch.Tensor:
    r = x * alpha + y * n
    return (-r if flip else r) + len(tag)


# Per op: the tensor parameters' shapes (a few, so compiles stay bounded) and, per static
# parameter, values of the right type.
ROWS = ((8, 128), (3, 5))
OPS: dict[str, tuple[KernelOp, Any, dict[str, list[Any]]]] = {
    "mix": (
        mix,
        lambda s: {"x": s, "y": s},
        {"alpha": [0.5, 2], "n": [1, 3], "flip": [True, False], "tag": ["a", "bcd"]},
    ),
    "softmax": (softmax, lambda s: {"x": s}, {"block_rows": [8, 256]}),
    "scale_add": (scale_add, lambda s: {"x": s, "y": s}, {"alpha": [0.5, 3], "block_rows": [8, 256]}),
    "rmsnorm": (rmsnorm, lambda s: {"x": s, "weight": s[-1:]}, {"eps": [1e-6, 0.5], "block_rows": [8, 256]}),
    "matmul": (
        matmul,
        lambda s: {"a": s, "b": s[::-1]},
        {"block_m": [256], "block_n": [256], "block_k": [256]},
    ),
}
WRONG_STATICS = {
    "int": [2.5, "8", None, torch.float32],
    "int?": [2.5, "8", torch.float32],  # a tunable left None takes the kernel's default
    "float": ["x", None, torch.float32],
    "bool": [1, "t", None],
    "str": [1, None, b"a"],
}
# weighted towards what the shortcut takes, so both sides of its checks are exercised
DTYPES = [torch.float32] * 3 + [torch.bfloat16, torch.float64, torch.int32]
LAYOUTS = (
    ["contiguous"] * 2 + ["strided", "transposed", "meta", "expanded", "misaligned"] + ["contiguous"] * 2
)


def _tensor(shape: tuple[int, ...], dtype: torch.dtype, layout: str, grad: bool, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    numel = 1
    for d in shape:
        numel *= d

    def values(n: int) -> torch.Tensor:
        v = torch.randn(n, generator=g, dtype=torch.float64)
        return (v * 10).to(dtype) if not dtype.is_floating_point else v.to(dtype)

    if layout == "meta":
        t = torch.empty(shape, dtype=dtype, device="meta")
    elif layout == "strided":  # every other column of a wider tensor
        t = values(numel * 2).reshape(*shape[:-1], shape[-1] * 2)[..., ::2]
    elif layout == "transposed" and len(shape) == 2:
        t = values(numel).reshape(shape[::-1]).t()
    elif layout == "expanded":  # stride 0 along the first dimension
        t = values(numel // shape[0] if shape[0] else 0).reshape(1, *shape[1:]).expand(shape)
    elif layout == "misaligned":  # storage offset 1: a data pointer JAX cannot alias
        t = values(numel + 1)[1:].reshape(shape)
    else:
        t = values(numel).reshape(shape)
    if grad and dtype.is_floating_point:
        t.requires_grad_(True)
    return t


@st.composite
def all_values(draw: st.DrawFn) -> tuple[str, list[Any]]:
    """An op and one value per parameter, in order: tensors of any layout, dtype or device
    (or None), statics of the right type or now and then of a wrong one."""
    name = draw(st.sampled_from(sorted(OPS)))
    op, shapes_of, statics = OPS[name]
    shapes = shapes_of(draw(st.sampled_from(ROWS)))
    dtype = draw(st.sampled_from(DTYPES))
    # Rare events are a middle value of a range: Hypothesis favours the ends (0 most of all).
    grad = draw(st.integers(0, 4)) == 2
    values: list[Any] = []
    for p in op.signature.params:
        if p.kind is Kind.TENSOR:
            if draw(st.integers(0, 30)) == 15:
                values.append(None)  # a missing tensor
                continue
            layout = draw(st.sampled_from(LAYOUTS))
            values.append(_tensor(shapes[p.name], dtype, layout, grad, draw(st.integers(0, 2**16))))
        elif draw(st.integers(0, 10)) == 5:
            values.append(draw(st.sampled_from(WRONG_STATICS[p.schema_type])))
        else:
            values.append(draw(st.sampled_from(statics[p.name])))
    return name, values


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, tuple, dict]:
    name, values = draw(all_values())
    op = OPS[name][0]
    params = op.signature.params
    # How many arguments go positionally: usually all positional params (the shortcut's
    # case), sometimes fewer, sometimes keyword-only ones too, sometimes one too many.
    n_pos = sum(not p.keyword_only for p in params)
    if draw(st.integers(0, 2)) != 1:  # the plain call: positional parameters only, defaults for the rest
        return name, tuple(values[:n_pos]), {}
    k = draw(st.integers(0, len(params) + 1))
    args = tuple(values[:k]) + ((values[0],) if k > len(params) else ())
    kwargs = {}
    for p, v in zip(params[k:], values[k:]):
        keep = draw(st.integers(0, 3))  # 0: omitted (its default, or missing), else given by name
        if keep or p.default is inspect.Parameter.empty and draw(st.integers(0, 9)) != 0:
            kwargs[p.name] = v
    return name, args, kwargs


def _outcome(call: Any) -> tuple[str, Any]:
    try:
        return "returned", call()
    except Exception as e:  # noqa: BLE001 - the type is what the property compares
        return "raised", e


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (tuple, list)):
        return isinstance(b, (tuple, list)) and len(a) == len(b) and all(map(_same, a, b))
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    if (a.shape, a.dtype, a.device, a.requires_grad) != (b.shape, b.dtype, b.device, b.requires_grad):
        return False
    return a.device.type == "meta" or torch.equal(a.detach().nan_to_num(), b.detach().nan_to_num())


def _visible(op: KernelOp, out: Any) -> Any:
    """The registered op returns residual outputs too; `op(...)` does not."""
    return out if op._all_visible else (out[0] if op.n_visible == 1 else out[: op.n_visible])


def test_op_call_and_torch_ops_agree() -> None:
    # The property is only as good as its draws: count that the examples include calls
    # the shortcut takes, calls it declines, and calls both paths refuse.
    seen = {"shortcut": 0, "declined": 0, "raised": 0}

    @PROPERTY_SETTINGS
    @given(calls())
    def agree(call: tuple[str, tuple, dict]) -> None:
        name, args, kwargs = call
        op = OPS[name][0]
        took = not kwargs and op._eager_cpu is not None and op._eager_cpu.accepts(args)
        seen["shortcut" if took else "declined"] += 1
        registered = getattr(getattr(torch.ops, op.ns), op.short_name)
        # the shortcut first: a key it compiled wrongly would show in the dispatcher's result too
        shortcut = _outcome(lambda: op(*args, **kwargs))
        dispatcher = _outcome(lambda: _visible(op, registered(*args, **kwargs)))
        if shortcut[0] == "raised" or dispatcher[0] == "raised":
            seen["raised"] += 1
            assert (shortcut[0], type(shortcut[1])) == (dispatcher[0], type(dispatcher[1])), (
                shortcut,
                dispatcher,
            )
            if "must be a Tensor" in str(dispatcher[1]):  # a missing tensor names its argument
                assert str(shortcut[1]) == str(dispatcher[1])
        else:
            assert _same(shortcut[1], dispatcher[1]), (shortcut[1], dispatcher[1])

    agree()
    assert seen["shortcut"] >= 10 and seen["declined"] >= 10 and seen["raised"] >= 10, seen


def _declined_or_same(shortcut: tuple[str, Any], dispatcher: Any, seen: dict[str, int]) -> None:
    """A shortcut's outcome is DECLINED, or the registered operator's (`dispatcher()`) result or
    exception type; `seen` counts which."""
    from tpu_kernels.dispatch.eager import DECLINED

    if shortcut[0] == "returned" and shortcut[1] is DECLINED:
        seen["declined"] += 1
        return
    seen["shortcut"] += 1
    expected = _outcome(dispatcher)
    if shortcut[0] == "raised" or expected[0] == "raised":
        assert (shortcut[0], type(shortcut[1])) == (expected[0], type(expected[1])), (shortcut, expected)
    else:
        assert _same(shortcut[1], expected[1]), (shortcut[1], expected[1])


def test_try_all_and_torch_ops_agree() -> None:
    """KernelOp.try_all (what tokamax's call_op hands every parameter's value) against the
    registered operator called with the same values, positional parameters by position and
    keyword-only ones by name: the same result or exception type, or DECLINED."""
    seen = {"shortcut": 0, "declined": 0}

    @PROPERTY_SETTINGS
    @given(all_values())
    def agree(call: tuple[str, list[Any]]) -> None:
        name, values = call
        op = OPS[name][0]
        params = op.signature.params
        args = [v for p, v in zip(params, values) if not p.keyword_only]
        kwargs = {p.name: v for p, v in zip(params, values) if p.keyword_only}
        registered = getattr(getattr(torch.ops, op.ns), op.short_name)
        shortcut = _outcome(lambda: op.try_all(tuple(values)))
        _declined_or_same(shortcut, lambda: _visible(op, registered(*args, **kwargs)), seen)

    agree()
    assert seen["shortcut"] >= 10 and seen["declined"] >= 10, seen


def test_the_device_shortcut_and_torch_ops_agree() -> None:
    """`EagerDeviceCall` (the TPU's shortcut: plain calls skip the dispatcher) serves any
    device type; here it serves the CPU, over each op's CPU kernel, so it meets every draw of
    the first property here: its answer is DECLINED, or the registered operator's visible
    result (the op's call: no residuals) or exception type. On the chip the TPU suite holds it to the dispatcher on TPU tensors."""
    from tpu_kernels.dispatch.eager_device import EagerDeviceCall

    shortcuts = {name: EagerDeviceCall.for_op(op, "CPU", "cpu") for name, (op, *_) in OPS.items()}
    seen = {"shortcut": 0, "declined": 0}

    @PROPERTY_SETTINGS
    @given(calls())
    def agree(call: tuple[str, tuple, dict]) -> None:
        name, args, kwargs = call
        op = OPS[name][0]
        shortcut = _outcome(lambda: shortcuts[name].try_call(args, kwargs))
        registered = getattr(getattr(torch.ops, op.ns), op.short_name)
        _declined_or_same(shortcut, lambda: _visible(op, registered(*args, **kwargs)), seen)

    agree()
    assert seen["shortcut"] >= 10 and seen["declined"] >= 10, seen
