"""The eager shortcut's memo checks (dispatch/eager.py: `recall_checks`, `_modes_active`,
`complete_args`) against the rules they keep, on inputs of every kind: statics (ints, floats
and their zero signs, NaN, bools, strings, dtypes, None), tensors unchanged or changed under
the same object in each way torch allows (resize_, set_, .data =, an in-place transpose,
requires_grad, conjugate and negative bits), other objects, dead records, and every mode the
shortcut must decline under. Hypothesis draws the mixes (derandomized, as CI needs;
TPU_KERNELS_HYPOTHESIS_RANDOM=1 explores and prints the seed).
"""

from __future__ import annotations

import contextlib
import weakref

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from tpu_kernels.dispatch import eager
from tpu_kernels.runtime import bridge

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.helpers import hypothesis_settings  # noqa: E402

SETTINGS = hypothesis_settings(150, 400)


class _Subclass(torch.Tensor):
    pass


class _FunctionMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _DispatchMode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


# ---- modes: each returns a context manager in which a check runs --------------------------
MODES = {
    "none": contextlib.nullcontext,
    "no_grad": torch.no_grad,
    "enable_grad": torch.enable_grad,
    "inference_mode": torch.inference_mode,
    "torch_function_mode": _FunctionMode,
    "torch_dispatch_mode": _DispatchMode,
    "below_autograd": torch._C._AutoDispatchBelowAutograd,
    "exclude_python": lambda: torch._C._ExcludeDispatchKeyGuard(
        torch._C.DispatchKeySet(torch._C.DispatchKey.Python)
    ),
}
# functorch transforms: the check runs inside the transformed function (on the outer tensors)
TRANSFORMS = {
    "vmap": lambda f: torch.vmap(lambda z: (f(), z)[1])(torch.ones(2)),
    "grad": lambda f: torch.func.grad(lambda z: (f(), z.sum())[1])(torch.ones(2)),
    "functionalize": lambda f: torch.func.functionalize(lambda z: (f(), z + 1)[1])(torch.ones(2)),
    "jvp": lambda f: torch.func.jvp(lambda z: (f(), z * 2)[1], (torch.ones(2),), (torch.ones(2),)),
}


def _run(mode: str, fn):
    """fn() inside `mode` (a MODES or TRANSFORMS name); its result."""
    out = []
    if mode in TRANSFORMS:
        TRANSFORMS[mode](lambda: out.append(fn()))
    else:
        with MODES[mode]():
            out.append(fn())
    return out[0]


@pytest.mark.parametrize("mode", [*MODES, *TRANSFORMS])
def test_modes_active_outside_the_plain_states(mode):
    # the shortcut's plain states are exactly: none, the grad modes, inference mode
    assert _run(mode, eager._modes_active) == (
        mode not in ("none", "no_grad", "enable_grad", "inference_mode")
    )


# ---- recall: statics ----------------------------------------------------------------------
STATICS = [
    0,
    1,
    2,
    -1,
    2**40,
    0.0,
    -0.0,
    1.0,
    2.0,
    0.5,
    float("nan"),
    float("inf"),
    True,
    False,
    None,
    "a",
    "b",
    torch.float32,
    torch.int32,
]


def _recall(refs, static_idx, statics, args, tensor_idx, mode="none"):
    return _run(mode, lambda: eager.recall_checks(refs, static_idx, statics, args, tensor_idx))


def test_each_pair_of_statics_compares_by_type_value_and_zero_sign():
    for memo in STATICS:
        for arg in STATICS:
            got = _recall((), (0,), (memo,), (arg,), ())
            want = type(arg) is type(memo) and arg == memo
            want = want and not (isinstance(arg, float) and arg == 0 and str(arg) != str(memo))
            assert (got is not None) == want, (memo, arg)


@SETTINGS
@given(pairs=st.lists(st.tuples(st.sampled_from(STATICS), st.sampled_from(STATICS)), max_size=4))
def test_statics_compare_by_type_value_and_zero_sign(pairs):
    """The memo's static against the call's: same type and value, and a zero of the same sign."""
    memo = tuple(m for m, _ in pairs)
    args = tuple(a for _, a in pairs)
    got = _recall((), tuple(range(len(pairs))), memo, args, ())
    want = all(
        type(a) is type(m) and a == m and (not isinstance(a, float) or a != 0 or str(a) == str(m))
        for m, a in pairs
    )
    assert (got is not None) == want


# ---- recall: tensors ----------------------------------------------------------------------
def _record(t: torch.Tensor) -> bridge.CachedView:
    return bridge.CachedView(t, weakref.ref(t), object())  # the array: any object, returned as is


def _change(how: str, t: torch.Tensor, keep: list) -> object:
    """The object the call passes for the recorded tensor `t`, changed as `how` says (in place
    where the name says so: the same object, something else about it different)."""
    if how == "same":
        return t
    if how == "alias":  # another tensor object over the same memory
        return t.view(t.shape)
    if how == "resize_":
        t.resize_(t.numel() + 8)
    elif how == "set_":
        t.set_(torch.randn(t.shape))
    elif how == "data_dtype":
        t.data = t.data.double()
    elif how == "data_same_shape":
        t.data = torch.randn(t.shape)
    elif how == "transpose_":
        t.t_()
    elif how == "as_strided_":
        t.as_strided_((t.numel(),), (1,))  # flattened in place: same memory, other shape
    elif how == "requires_grad":
        t.requires_grad_(True)
    elif how == "neg_bit":
        return torch._neg_view(t)
    elif how == "parameter":
        p = torch.nn.Parameter(t, requires_grad=False)
        keep.append(p)
        return p
    elif how == "subclass":
        return t.as_subclass(_Subclass)
    elif how == "not_a_tensor":
        return 3
    elif how == "none":
        return None
    elif how == "meta":
        return t.to("meta")
    return t


CHANGES = [
    "same",
    "same",
    "same",
    "alias",
    "resize_",
    "set_",
    "data_dtype",
    "data_same_shape",
    "transpose_",
    "as_strided_",
    "requires_grad",
    "neg_bit",
    "parameter",
    "subclass",
    "not_a_tensor",
    "none",
    "meta",
]
KINDS = [
    "float",
    "float",
    "square",
    "complex_conj",
    "neg_bit",
    "parameter",
    "int",
    "scalar",
    "empty",
    "dead_record",
    "dead_tensor",
    "optional",
]


def _tensor(kind: str) -> torch.Tensor | None:
    if kind == "square":
        return torch.randn(4, 4)
    if kind == "complex_conj":
        return torch.randn(3, dtype=torch.complex64).conj()  # a conjugate bit on the recorded tensor
    if kind == "neg_bit":
        return torch._neg_view(torch.randn(2, 3))  # a negative bit on the recorded tensor
    if kind == "parameter":
        return torch.nn.Parameter(torch.randn(3, 2), requires_grad=False)
    if kind == "int":
        return torch.arange(6, dtype=torch.int32).reshape(2, 3)
    if kind == "scalar":
        return torch.tensor(2.5)
    if kind == "empty":
        return torch.empty(0, 3)
    return torch.randn(3, 5)


def _slots_case(slots, mode, grad_tensor):
    """One memo (a record per slot) and one call (each slot's tensor changed as it says),
    checked in `mode`: (the checks' answer, the answer the rule wants), or _SKIPPED."""
    refs, args, keep, want = [], [], [], mode in PLAIN_MODES
    grad_on = mode in ("none", "enable_grad")
    for kind, how in slots:
        if kind == "optional":  # an Optional[Tensor] the memo's call left out: None, or now given
            refs.append(None)
            args.append(None if how in ("same", "none") else torch.randn(2))
            want = want and how in ("same", "none")
            continue
        t = _tensor(kind)
        needs_grad = grad_tensor and t.is_floating_point() and kind != "parameter"
        if needs_grad:
            t.requires_grad_(True)
        record = _record(t)
        keep.append(record)
        refs.append(weakref.ref(record))
        if kind == "dead_record":
            keep.pop()
            del record
        try:
            with torch.no_grad():
                arg = _change(how, t, keep)
        except RuntimeError:  # a change torch refuses for this tensor (resize_ of one needing grad)
            return _SKIPPED
        if kind == "dead_tensor":
            del t
            arg = torch.randn(3, 5) if how != "none" else None
        args.append(arg)
        keep.append(arg)
        # the rule: the same object, memory, shape, strides and dtype as recorded (only
        # "same", "requires_grad", a 0-d tensor's no-op transpose and new memory of the same
        # shape for an empty tensor, which has none to read, keep all five), a record still
        # alive, no conjugate or negative bit, and no gradient needed under grad mode
        needs_grad = needs_grad or how == "requires_grad"
        want = (
            want
            and (
                how in ("same", "requires_grad")
                or (how == "transpose_" and kind == "scalar")
                or (how in ("set_", "data_same_shape") and kind == "empty")
            )
            and kind not in ("dead_record", "dead_tensor", "complex_conj", "neg_bit")
            and not (needs_grad and grad_on)
        )
    got = _recall(tuple(refs), (), (), tuple(args), tuple(range(len(args))), mode)
    if got is not None:
        assert len(got) == len(refs)
        assert all(g is (None if r is None else r().array) for g, r in zip(got, refs))
    return got, want


_SKIPPED = object()
PLAIN_MODES = ("none", "no_grad", "enable_grad", "inference_mode")


def test_each_tensor_change_is_checked_by_the_rule():
    """Every kind of recorded tensor, every change, with and without requires_grad, in every
    plain state (where the answer depends on the tensors alone): recalled exactly when the
    rule says, with the records' arrays."""
    recalled = 0
    for kind in dict.fromkeys(KINDS):
        for how in dict.fromkeys(CHANGES):
            for grad_tensor in (False, True):
                for mode in PLAIN_MODES:
                    case = _slots_case([(kind, how)], mode, grad_tensor)
                    if case is _SKIPPED:
                        continue
                    got, want = case
                    assert (got is not None) == want, (kind, how, grad_tensor, mode)
                    recalled += want
    assert recalled > 50  # the grid reaches the recalled side, not only declines


@SETTINGS
@given(
    slots=st.lists(st.tuples(st.sampled_from(KINDS), st.sampled_from(CHANGES)), min_size=1, max_size=3),
    mode=st.sampled_from([*PLAIN_MODES, *MODES, *TRANSFORMS]),
    grad_tensor=st.booleans(),
)
def test_mixed_calls_are_checked_by_the_rule(slots, mode, grad_tensor):
    case = _slots_case(slots, mode, grad_tensor)
    hypothesis.assume(case is not _SKIPPED)
    got, want = case
    assert (got is not None) == want


def test_a_kept_tensor_in_plain_mode_is_recalled():
    x, y = torch.randn(3, 4), torch.randn(4)
    rx, ry = _record(x), _record(y)
    for mode in ("none", "no_grad", "inference_mode"):
        got = _recall(
            (weakref.ref(rx), None, weakref.ref(ry)), (3,), (2.0,), (x, None, y, 2.0), (0, 1, 2), mode
        )
        assert got == [rx.array, None, ry.array]


def test_a_call_with_another_tensor_declines_before_any_other_check(monkeypatch):
    # the tensors' identity first (dispatch/eager.py): a call with fresh tensors pays neither the
    # statics' comparison nor the mode probes (1.3 us of such a call when they came first)
    x = torch.randn(3, 4)
    record = _record(x)

    def probed():
        raise AssertionError("probed the modes")

    monkeypatch.setattr(eager, "_modes_active", probed)
    monkeypatch.setattr(eager, "_grad_enabled", probed)
    refs, static_idx, statics, tensor_idx = (weakref.ref(record),), (1,), (2.0,), (0,)
    assert eager.recall_checks(refs, static_idx, statics, (x.view(3, 4), "not a float"), tensor_idx) is None
    with pytest.raises(AssertionError, match="probed the modes"):  # the same tensor: on to the probes
        eager.recall_checks(refs, static_idx, statics, (x, 2.0), tensor_idx)


# ---- complete: a call's arguments, one per parameter --------------------------------------
def test_complete_makes_given_ints_floats_and_leaves_the_callers_tuple():
    from tpu_kernels import tpu_kernel

    @tpu_kernel("test_eager_checks::mixed")
    def mixed(x: torch.Tensor, alpha: float, n: int = 2, beta: float = 1, *, tag: str = "a") -> torch.Tensor:
        return x * alpha * n * beta

    spec = mixed._eager_cpu._spec
    complete = eager.complete_args
    args = (torch.ones(2), 3)
    out = complete(args, None, spec)
    assert out[1] == 3.0 and type(out[1]) is float and args[1] == 3 and type(args[1]) is int
    assert out[2] == 2 and out[3] == 1 and type(out[3]) is int  # defaults as written
    assert out[4] == "a"
    out = complete((torch.ones(2),), {"alpha": 2, "beta": 4}, spec)
    assert (out[1], out[3]) == (2.0, 4.0) and type(out[3]) is float
    assert complete((torch.ones(2), 2**1100), None, spec) is None  # no double holds it
    assert complete((torch.ones(2), 1.0, 2, 1.0, "b"), None, spec) is None  # tag is keyword-only
    assert complete((torch.ones(2),), {"alpha": 1.0, "x": 1}, spec) is None  # x twice
    assert complete((torch.ones(2),), {"alpha": 1.0, "nope": 1}, spec) is None  # unknown
    assert complete((), {"alpha": 1.0}, spec) is None  # x missing
