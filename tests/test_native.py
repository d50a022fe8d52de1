"""tpu_kernels.runtime.native: the C++ checks give their Python twins' answers, and load only when safe.

The eager shortcut's memo checks (`recall`, `modes_active`: native/eager_checks.cpp) against
`eager.recall_checks_py` / `eager._modes_active_py` on the same inputs: statics of every kind
(ints, floats and their zero signs, NaN, bools, strings, dtypes, None), tensors unchanged or
changed under the same object in each way torch allows (resize_, set_, .data =, an in-place
transpose, requires_grad, conjugate and negative bits), other objects, dead records, and every
mode the shortcut must decline under. Hypothesis draws the mixes (derandomized, as CI needs;
TPU_KERNELS_HYPOTHESIS_RANDOM=1 explores and prints the seed).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import weakref

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from tpu_kernels.dispatch import eager
from tpu_kernels.runtime import bridge, native

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_RANDOM = os.environ.get("TPU_KERNELS_HYPOTHESIS_RANDOM") == "1"
SETTINGS = settings(
    max_examples=400 if _RANDOM else 150,
    derandomize=not _RANDOM,
    print_blob=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def fast(native_eager):
    return native_eager


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
def test_modes_active_is_the_python_answer(fast, mode):
    answers = _run(mode, lambda: (fast.modes_active(), eager._modes_active_py()))
    assert answers[0] == answers[1]
    # and the shortcut's plain states are exactly: none, the grad modes, inference mode
    assert answers[0] == (mode not in ("none", "no_grad", "enable_grad", "inference_mode"))


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


def _both(fast, refs, static_idx, statics, args, tensor_idx, mode="none"):
    def call():
        return (
            fast.recall(refs, static_idx, statics, args, tensor_idx),
            eager.recall_checks_py(refs, static_idx, statics, args, tensor_idx),
        )

    return _run(mode, call)


def _same(native_out, python_out) -> None:
    if python_out is None:
        assert native_out is None
    else:
        assert native_out is not None and len(native_out) == len(python_out)
        assert all(a is b for a, b in zip(native_out, python_out))


def test_each_pair_of_statics_compares_as_in_python(fast):
    for memo in STATICS:
        for arg in STATICS:
            got = _both(fast, (), (0,), (memo,), (arg,), ())
            _same(*got)
            want = type(arg) is type(memo) and arg == memo
            want = want and not (isinstance(arg, float) and arg == 0 and str(arg) != str(memo))
            assert (got[1] is not None) == want, (memo, arg)


@SETTINGS
@given(pairs=st.lists(st.tuples(st.sampled_from(STATICS), st.sampled_from(STATICS)), max_size=4))
def test_statics_compare_as_in_python(fast, pairs):
    """The memo's static against the call's: same type and value, and a zero of the same sign."""
    memo = tuple(m for m, _ in pairs)
    args = tuple(a for _, a in pairs)
    got = _both(fast, (), tuple(range(len(pairs))), memo, args, ())
    _same(*got)
    want = all(
        type(a) is type(m) and a == m and (not isinstance(a, float) or a != 0 or str(a) == str(m))
        for m, a in pairs
    )
    assert (got[1] is not None) == want


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


def _slots_case(fast, slots, mode, grad_tensor):
    """One memo (a record per slot) and one call (each slot's tensor changed as it says),
    checked natively and in Python; the Python answer."""
    refs, args, keep = [], [], []
    for kind, how in slots:
        if kind == "optional":  # an Optional[Tensor] the memo's call left out: None, or now given
            refs.append(None)
            args.append(None if how in ("same", "none") else torch.randn(2))
            continue
        t = _tensor(kind)
        if grad_tensor and t.is_floating_point() and kind != "parameter":
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
    got = _both(fast, tuple(refs), (), (), tuple(args), tuple(range(len(args))), mode)
    _same(*got)
    return got[1]


_SKIPPED = object()
PLAIN_MODES = ("none", "no_grad", "enable_grad", "inference_mode")


def test_each_tensor_change_is_checked_as_in_python(fast):
    """Every kind of recorded tensor, every change, with and without requires_grad, in every
    plain state (where the answer depends on the tensors alone): native == Python, and the
    unchanged tensors are recalled."""
    recalled = 0
    for kind in dict.fromkeys(KINDS):
        for how in dict.fromkeys(CHANGES):
            for grad_tensor in (False, True):
                for mode in PLAIN_MODES:
                    out = _slots_case(fast, [(kind, how)], mode, grad_tensor)
                    recalled += out is not None and out is not _SKIPPED
    assert recalled > 50  # the grid reaches the recalled side, not only declines


@SETTINGS
@given(
    slots=st.lists(st.tuples(st.sampled_from(KINDS), st.sampled_from(CHANGES)), min_size=1, max_size=3),
    mode=st.sampled_from([*PLAIN_MODES, *MODES, *TRANSFORMS]),
    grad_tensor=st.booleans(),
)
def test_mixed_calls_are_checked_as_in_python(fast, slots, mode, grad_tensor):
    hypothesis.assume(_slots_case(fast, slots, mode, grad_tensor) is not _SKIPPED)


def test_a_kept_tensor_in_plain_mode_is_recalled(fast):
    """Not only agreement: the unchanged call gives the records' arrays (in a plain state)."""
    x, y = torch.randn(3, 4), torch.randn(4)
    rx, ry = _record(x), _record(y)
    for mode in ("none", "no_grad", "inference_mode"):
        got = _both(
            fast, (weakref.ref(rx), None, weakref.ref(ry)), (3,), (2.0,), (x, None, y, 2.0), (0, 1, 2), mode
        )
        _same(*got)
        assert got[0] == [rx.array, None, ry.array]


def test_bad_arguments_raise_a_clear_error(fast):
    with pytest.raises(TypeError, match="refs must be a tuple"):
        fast.recall([], (), (), (), ())
    with pytest.raises(TypeError, match=r"recall\(refs"):
        fast.recall((), (), ())
    with pytest.raises(ValueError, match="differ in length"):
        fast.recall((), (0,), (), (1,), ())
    with pytest.raises(IndexError, match="outside args"):
        fast.recall((), (5,), (1,), (1,), ())
    with pytest.raises(TypeError, match="weak references to records"):
        fast.recall((object(),), (), (), (torch.ones(1),), (0,))
    with pytest.raises(TypeError, match="plain_states"):
        fast.configure(torch.Tensor, torch.nn.Parameter, [])


# ---- complete: a call's arguments, one per parameter --------------------------------------
def _signatures() -> dict[str, eager.EagerCpuCall]:
    """Shortcuts of ops whose signatures differ: keyword-only statics, float statics with and
    without defaults, an optional tensor, a list static (tpu_kernels' own ops and two here)."""
    from tpu_kernels import tpu_kernel
    from tpu_kernels.kernels import matmul, rmsnorm, scale_add

    @tpu_kernel("test_native::mixed")
    def mixed(x: torch.Tensor, alpha: float, n: int = 2, beta: float = 1, *, tag: str = "a") -> torch.Tensor:
        return x * alpha * n * beta

    @tpu_kernel("test_native::optional")
    def optional(x: torch.Tensor, bias: torch.Tensor | None = None, *, scale: float = 1.0) -> torch.Tensor:
        return x * scale if bias is None else x * scale + bias

    ops = {"mixed": mixed, "optional": optional, "scale_add": scale_add, "rmsnorm": rmsnorm, "matmul": matmul}
    return {name: op._eager_cpu for name, op in ops.items()}


SIGNATURES = _signatures()
VALUES = [torch.ones(2), None, 0, 3, -7, True, 2.5, -0.0, 2**70, 2**1100, -(2**1100), "a", torch.float32]
KEYWORDS = [
    "x",
    "y",
    "alpha",
    "n",
    "beta",
    "tag",
    "bias",
    "scale",
    "eps",
    "block_rows",
    "weight",
    "a",
    "b",
    "nope",
]


def _same_values(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if len(a) != len(b):
        return False
    # float statics are made anew (float(3) is a new object): same type and value; else the same object
    return all(u is v or (type(u) is float and type(v) is float and str(u) == str(v)) for u, v in zip(a, b))


@SETTINGS
@given(
    name=st.sampled_from(sorted(SIGNATURES)),
    args=st.lists(st.sampled_from(VALUES), max_size=7),
    kwargs=st.dictionaries(st.sampled_from(KEYWORDS), st.sampled_from(VALUES), max_size=4),
)
def test_complete_fills_a_call_as_in_python(fast, name, args, kwargs):
    """Any split of a call into positional and keyword arguments (too many, too few, unknown
    or repeated names, ints for float statics, ints no double holds)."""
    spec = SIGNATURES[name]._spec
    args = tuple(args)
    before = (args, dict(kwargs))
    native_out = fast.complete(args, kwargs, spec)
    python_out = eager.complete_args_py(args, kwargs, spec)
    assert _same_values(native_out, python_out), (native_out, python_out)
    assert args == before[0] and kwargs == before[1]  # neither writes the caller's tuple or dict


def test_complete_makes_given_ints_floats_and_leaves_the_callers_tuple(fast):
    shortcut = SIGNATURES["mixed"]
    args = (torch.ones(2), 3)
    for complete in (fast.complete, eager.complete_args_py):
        out = complete(args, None, shortcut._spec)
        assert out[1] == 3.0 and type(out[1]) is float and args[1] == 3 and type(args[1]) is int
        assert out[2] == 2 and out[3] == 1 and type(out[3]) is int  # defaults as written
        assert out[4] == "a"
        out = complete((torch.ones(2),), {"alpha": 2, "beta": 4}, shortcut._spec)
        assert (out[1], out[3]) == (2.0, 4.0) and type(out[3]) is float
        assert complete((torch.ones(2), 2**1100), None, shortcut._spec) is None  # no double holds it
        assert (
            complete((torch.ones(2), 1.0, 2, 1.0, "b"), None, shortcut._spec) is None
        )  # tag is keyword-only
        assert complete((torch.ones(2),), {"alpha": 1.0, "x": 1}, shortcut._spec) is None  # x twice
        assert complete((torch.ones(2),), {"alpha": 1.0, "nope": 1}, shortcut._spec) is None  # unknown
        assert complete((), {"alpha": 1.0}, shortcut._spec) is None  # x missing
    with pytest.raises(TypeError, match=r"complete\(args: tuple"):
        fast.complete([], None, shortcut._spec)


# ---- loading ------------------------------------------------------------------------------
def _python(code: str, **env: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", **env},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def test_a_process_loads_the_build_and_off_turns_it_off(fast):
    code = "from tpu_kernels.dispatch import eager; print(eager.NATIVE, eager.recall_checks.__module__)"
    assert _python(code) == "True tpu_kernels_eager_checks"
    assert _python(code, TPU_KERNELS_NATIVE="off") == "False tpu_kernels.dispatch.eager"


def test_a_build_for_another_source_or_torch_is_not_loaded(fast, tmp_path, monkeypatch):
    """The tag names the source and torch: no build under this tag, no native checks."""
    monkeypatch.setenv(native.DIR_ENV, str(tmp_path))
    native.module.cache_clear()
    try:
        assert native.module("eager_checks") is None
        assert native.status()["eager_checks"]["built"] is False
    finally:
        native.module.cache_clear()
    before = native.tag("eager_checks")
    monkeypatch.setattr(torch, "__version__", torch.__version__ + "+other")
    assert native.tag("eager_checks") != before


def test_a_build_others_can_write_is_not_loaded(fast, tmp_path, monkeypatch):
    import shutil

    monkeypatch.setenv(native.DIR_ENV, str(tmp_path))
    monkeypatch.delenv("TPU_KERNELS_CACHE_TRUST", raising=False)
    path = native.library("eager_checks")
    path.parent.mkdir(mode=0o700)
    shutil.copy(fast.__file__, path)
    native.module.cache_clear()
    try:
        os.chmod(path.parent, 0o777)
        with pytest.warns(RuntimeWarning, match="writable by everyone"):
            assert native.module("eager_checks") is None
        assert "writable" in native.status()["eager_checks"]["untrusted"]
    finally:
        os.chmod(path.parent, 0o700)
        native.module.cache_clear()


def test_a_damaged_build_is_not_loaded_and_says_how_to_mend_it(fast, tmp_path, monkeypatch):
    monkeypatch.setenv(native.DIR_ENV, str(tmp_path))
    path = native.library("eager_checks")
    path.parent.mkdir(mode=0o700)
    path.write_bytes(b"\x7fELF not really")
    native.module.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="does not load.*python -m tpu_kernels.runtime.native build"):
            assert native.module("eager_checks") is None
    finally:
        native.module.cache_clear()


def test_the_command_says_where_the_build_is(fast):
    out = subprocess.run(
        [sys.executable, "-m", "tpu_kernels.runtime.native", "status"],
        env={**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"eager_checks: built ({native.library('eager_checks')})" in out.stdout


def test_an_unknown_extension_is_named():
    with pytest.raises(ValueError, match="no extension 'nope'; there are eager_checks"):
        native.source("nope")
