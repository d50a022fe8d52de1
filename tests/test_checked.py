"""Checked mode (tpu_kernels.checked / TPU_KERNELS_CHECK=1): wrong kernels are caught, right ones pass."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import jax.numpy as jnp
import pytest
import torch

from tests.helpers import HAS_TOKAMAX, needs_tokamax
from tests.registries import family_id, kernel_families
from tpu_kernels import CheckFailure, OpDefinitionError, Reference, checked, tpu_kernel
from tpu_kernels.kernels import matmul, rmsnorm, scale_add, softmax
from tpu_kernels.verification import checked_mode
from tpu_kernels.verification.checked_mode import UncheckedCallError, UncheckedWarning

ROOT = Path(__file__).resolve().parent.parent


def _double(x: torch.Tensor) -> torch.Tensor:
    return 2 * x


@tpu_kernel("test_checked::off_by_a_little", check_reference=_double)
def off_by_a_little(x: torch.Tensor) -> torch.Tensor:
    return x * 2.002  # a kernel that writes 2 * x * 1.001


@tpu_kernel("test_checked::leaves_a_nan", check_reference=_double)
def leaves_a_nan(x: torch.Tensor) -> torch.Tensor:
    flat = (2 * x).reshape(-1)
    return flat.at[5].set(jnp.nan).reshape(x.shape)  # one element never written


@tpu_kernel("test_checked::right", check_reference=_double)
def right(x: torch.Tensor) -> torch.Tensor:
    return 2 * x


@tpu_kernel("test_checked::wrong_backward", check_reference=_double)
def wrong_backward(x: torch.Tensor) -> torch.Tensor:
    return 2 * x


@wrong_backward.def_backward
def _wrong_backward_bwd(grad_out: torch.Tensor) -> torch.Tensor:
    return 2.1 * grad_out  # the gradient of 2 * x is 2 * grad_out


def _jax_double(x, *, factor: float = 2.0):
    return factor * x


@tpu_kernel("test_checked::jax_reference", reference=_jax_double)
def jax_reference(x: torch.Tensor, *, factor: float = 2.0) -> torch.Tensor:
    return factor * x * 1.01  # forward wrong; the backward comes from the (right) reference


def test_catches_a_slightly_wrong_kernel_naming_op_shapes_error_and_index():
    x = torch.ones(4, 6)
    assert torch.equal(off_by_a_little(x), x * 2.002)  # unchecked: no complaint
    with checked(), pytest.raises(CheckFailure) as e:
        off_by_a_little(x)
    msg = str(e.value)
    assert "test_checked::off_by_a_little" in msg
    assert "x: float32[4, 6]" in msg
    assert "max abs error 0.002" in msg and "at index (0, 0)" in msg
    assert "24 of 24 elements" in msg and "float32 tolerance" in msg


def test_catches_a_nan_the_reference_does_not_have():
    x = torch.randn(3, 4)
    with (
        checked(),
        pytest.raises(CheckFailure, match=r"leaves_a_nan output .* 1 NaN and 0 inf .* index \(1, 1\)"),
    ):
        leaves_a_nan(x)


def test_nan_in_both_is_not_a_mismatch():
    x = torch.tensor([1.0, float("nan"), float("inf")])
    with checked():
        assert torch.equal(right(x)[:1], torch.tensor([2.0]))


def test_catches_a_wrong_backward():
    x = torch.randn(5, 3, requires_grad=True)
    with checked():
        y = wrong_backward(x)  # the forward is right
        with pytest.raises(CheckFailure) as e:
            y.sum().backward()
    msg = str(e.value)
    assert "test_checked::wrong_backward gradient for 'x'" in msg and "x: float32[5, 3]" in msg
    assert "incoming gradients: float32[5, 3]" in msg


def test_backward_outside_checked_mode_is_not_checked():
    x = torch.randn(5, 3, requires_grad=True)
    with checked():
        y = wrong_backward(x)
    y.sum().backward()
    assert torch.allclose(x.grad, torch.full_like(x, 2.1))


def test_a_jax_reference_is_run_in_float64():
    x = torch.randn(8, 8, dtype=torch.float64)
    with checked(), pytest.raises(CheckFailure, match="jax_reference output .* float64"):
        jax_reference(x, factor=3.0)


def _jax_square(x):
    return x * x


@tpu_kernel("test_checked::jax_square", reference=_jax_square)
def jax_square(x: torch.Tensor) -> torch.Tensor:
    return x * x


def test_a_jax_reference_checks_the_backward_with_jax_vjp_in_float64(monkeypatch):
    calls = []
    real = checked_mode._jax_call

    def spy(fn, kwargs, cotangents):
        calls.append((cotangents is not None, [v.dtype for v in kwargs.values()]))
        return real(fn, kwargs, cotangents)

    monkeypatch.setattr(checked_mode, "_jax_call", spy)
    x = torch.randn(6, 5, requires_grad=True)
    with checked():
        jax_square(x).sum().backward()
    assert torch.allclose(x.grad, 2 * x.detach())
    assert calls == [(False, [torch.float64]), (True, [torch.float64])]


def test_no_check_outside_and_off_inside():
    x = torch.ones(2, 2)
    off_by_a_little(x)
    with checked():
        with checked(False):
            off_by_a_little(x)
        with pytest.raises(CheckFailure):
            off_by_a_little(x)
    assert not checked_mode.ARMED and not checked_mode.is_checked()


def test_per_thread():
    """Another thread is unchecked while this one is checked, and the other way round."""
    x = torch.ones(2, 2)
    errors: list = []

    def other() -> None:
        try:
            for _ in range(20):
                off_by_a_little(x)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    with checked():
        t = threading.Thread(target=other)
        t.start()
        for _ in range(20):
            with pytest.raises(CheckFailure):
                off_by_a_little(x)
        t.join(timeout=60)
    assert errors == []

    caught: list = []

    def checked_thread() -> None:
        with checked():
            try:
                off_by_a_little(x)
            except CheckFailure as e:
                caught.append(e)

    t = threading.Thread(target=checked_thread)
    t.start()
    t.join(timeout=60)
    off_by_a_little(x)  # this thread is not checked meanwhile
    assert len(caught) == 1


def _run_with_check_env(value: str, decorator: str, error: str) -> list[str]:
    """A fresh process under TPU_KERNELS_CHECK=value calls an op that adds 1 (declared by
    `decorator`); it prints the mode, then whether the call raised `error` naming the op."""
    code = (
        "import torch\n"
        "from tpu_kernels import tpu_kernel\n"
        "from tpu_kernels.verification import checked_mode\n"
        f"@tpu_kernel('env_checked::bad'{decorator})\n"
        "def bad(x: torch.Tensor) -> torch.Tensor:\n"
        "    return x + 1\n"
        "print(checked_mode.is_checked(), checked_mode.is_strict())\n"
        "try:\n"
        "    bad(torch.zeros(3))\n"
        f"except checked_mode.{error} as e:\n"
        "    print('CAUGHT', 'env_checked::bad' in str(e))\n"
        "else:\n"
        "    print('MISSED')\n"
    )
    env = {**os.environ, "TPU_KERNELS_CHECK": value, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


def test_environment_variable_turns_it_on():
    assert _run_with_check_env("1", ", check_reference=lambda x: x", "CheckFailure") == [
        "True",
        "False",
        "CAUGHT",
        "True",
    ]


def test_environment_variable_strict():
    """TPU_KERNELS_CHECK=strict: an op without a reference raises UncheckedCallError."""
    assert _run_with_check_env("strict", "", "UncheckedCallError") == ["True", "True", "CAUGHT", "True"]


def test_shipped_ops_pass_forward_and_backward():
    x = torch.randn(37, 129, requires_grad=True)
    w = torch.randn(129, requires_grad=True)
    b = torch.randn(129, 9, requires_grad=True)
    with checked():
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            xd, wd, bd = (t.detach().to(dtype).requires_grad_() for t in (x, w, b))
            (softmax(xd, block_rows=8) * torch.randn(37, 129).to(dtype)).sum().backward()
            (rmsnorm(xd, wd, block_rows=16) * torch.randn(37, 129).to(dtype)).sum().backward()
            (matmul(xd, bd) * torch.randn(37, 9).to(dtype)).sum().backward()
            (scale_add(xd, wd, alpha=-0.75) * torch.randn(37, 129).to(dtype)).sum().backward()
            assert xd.grad is not None and wd.grad is not None and bd.grad is not None


@pytest.mark.parametrize("family", kernel_families(), ids=family_id)
def test_shipped_ops_declare_their_references(family):
    """Each family's op and its Helion twin's ops (the family's helion.py) declare a torch
    reference; the op and the twin share the family's declaration (reference.CHECK)."""
    module = family.helion_module()
    ops = [family.op] + ([getattr(module, n) for n in module.__all__] if module is not None else [])
    for op in ops:
        assert isinstance(op.check_reference, Reference) and not op.check_reference.jax, op.name
    assert family.op.check_reference.fn is family.check.fn, family.op.name
    twin = family.helion_op()
    if twin is not None:
        assert family.op.check_reference.fn is twin.check_reference.fn, twin.name
        assert family.op.check_reference.reduces is twin.check_reference.reduces, twin.name


@needs_tokamax
def test_tokamax_ops_pass():
    from tpu_kernels import tokamax as tk

    x, w, bias = torch.randn(6, 32, requires_grad=True), torch.randn(32), torch.randn(32)
    with checked():
        tk.layer_norm(x, w, bias).sum().backward()
        tk.rms_norm(x, w).sum().backward()


@needs_tokamax
def test_every_tokamax_op_has_a_reference():
    from tpu_kernels.tokamax import FAMILIES

    missing = [
        op.name
        for family in FAMILIES.values()
        for op in family.ops
        if op.check_reference is None or op.check_reference.jax
    ]
    assert missing == []


@needs_tokamax
def test_every_tokamax_family_op_declares_its_reference():
    # FAMILIES, not a list here: a new family's op without check_reference= fails this
    from tpu_kernels.tokamax import FAMILIES

    for family in FAMILIES.values():
        for op in family.ops:
            ref = op.check_reference
            assert isinstance(ref, Reference) and not ref.jax, (family.name, op.name)
            # the family's own torch reference (reference.py), not one built from the JAX body
            assert ref.fn.__module__ == family.reference.__name__, (op.name, ref.fn.__module__)


def test_a_reference_that_cannot_take_an_argument_warns_and_skips():
    @tpu_kernel("test_checked::extra_arg", check_reference=lambda x: x)
    def extra_arg(x: torch.Tensor, *, shift: float = 0.0) -> torch.Tensor:
        return x + shift

    with checked():
        extra_arg(torch.ones(2))  # at its default: checked, and right
        with pytest.warns(UncheckedWarning, match="does not take 'shift'"):
            extra_arg(torch.ones(2), shift=1.0)
    with (
        checked(strict=True),
        pytest.raises(UncheckedCallError, match="extra_arg: its reference does not take"),
    ):
        extra_arg(torch.ones(2), shift=2.0)


def test_a_builtin_reference_is_refused_at_definition_with_the_fix():
    with pytest.raises(
        OpDefinitionError, match="test_checked::builtin_ref: .*no readable signature.*lambda x: torch.exp"
    ):

        @tpu_kernel("test_checked::builtin_ref", check_reference=torch.exp)
        def builtin_ref(x: torch.Tensor) -> torch.Tensor:
            return jnp.exp(x)


def test_under_torch_compile_nothing_is_checked_and_nothing_breaks():
    compiled = torch.compile(lambda x: off_by_a_little(x) + 1, backend="eager", fullgraph=True)
    with checked():
        out = compiled(torch.ones(3))
    assert torch.allclose(out, torch.full((3,), 3.002))


def test_compare_names_the_first_differing_element_in_each_kind_of_mismatch():
    ints = torch.tensor([[1, 2], [3, 4]])
    assert checked_mode.compare(ints, ints.double()) is None
    assert checked_mode.compare(ints, torch.tensor([[1.0, 2.0], [3.0, 5.0]], dtype=torch.float64)) == (
        "1 of 4 elements differ (exact compare for torch.int64); first at index (1, 1): kernel 4, reference 5.0"
    )
    got = torch.tensor([1.0, float("inf"), 3.0])
    assert checked_mode.compare(got, torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)).startswith(
        "0 NaN and 1 inf values the reference does not have (of 3); first at index (1,): kernel inf, reference 2.0"
    )
    assert checked_mode.compare(
        torch.tensor([1.0, 2.0]), torch.tensor([1.0, float("nan")], dtype=torch.float64)
    ) == (
        "1 finite values where the reference has NaN or inf (of 2); first at index (1,): kernel 2.0, reference nan"
    )


# ---- ops without a reference: said once, or refused in strict mode ----------------------------


def _no_reference_op(name: str):
    @tpu_kernel(f"test_checked::{name}")
    def op(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    return op


def test_an_op_without_a_reference_warns_once_naming_it_and_how_to_declare_one(recwarn):
    op = _no_reference_op("no_reference")
    with checked():
        op(torch.ones(3))
        op(torch.ones(3))
        op(torch.ones(4, 2))
    unchecked = [w for w in recwarn.list if issubclass(w.category, UncheckedWarning)]
    assert len(unchecked) == 1, [str(w.message) for w in unchecked]
    msg = str(unchecked[0].message)
    assert msg.startswith("checked mode: test_checked::no_reference: it declares no reference")
    assert "such calls run unchecked" in msg and "check_reference=fn" in msg and "reference=" in msg
    assert "docs/autograd.md#checked-mode" in msg
    assert unchecked[0].filename == __file__  # it points at the caller's line
    op(torch.ones(3))  # outside checked mode: nothing to say


def test_strict_mode_raises_for_an_op_without_a_reference():
    op = _no_reference_op("no_reference_strict")
    with checked(strict=True):
        with pytest.raises(
            UncheckedCallError,
            match=r"^checked mode \(strict\): test_checked::no_reference_strict: it declares no reference.*check_reference=fn",
        ):
            op(torch.ones(3))
        with checked():  # strict=None keeps the enclosing block's
            with pytest.raises(UncheckedCallError):
                op(torch.ones(3))
        with checked(strict=False), pytest.warns(UncheckedWarning):
            op(torch.ones(3))
    assert issubclass(UncheckedCallError, RuntimeError) and not issubclass(UncheckedCallError, CheckFailure)
    assert not checked_mode.is_strict()


def test_backward_ops_are_not_reported_unchecked(recwarn):
    """Backward ops (derived or explicit) declare no reference of their own: their results
    are checked by the forward's backward check, so checked mode says nothing about them."""
    x = torch.randn(5, 3, requires_grad=True)
    with checked(strict=True):
        jax_square(x).sum().backward()  # derived backward op
        right_with_backward(x).sum().backward()  # explicit backward op
        rmsnorm(torch.randn(8, 16, requires_grad=True), torch.randn(16)).sum().backward()
    assert not [w for w in recwarn.list if issubclass(w.category, UncheckedWarning)]
    assert jax_square.backward_op.backward_of is jax_square and jax_square.backward_of is None


@tpu_kernel("test_checked::right_with_backward", check_reference=_double)
def right_with_backward(x: torch.Tensor) -> torch.Tensor:
    return 2 * x


@right_with_backward.def_backward
def _right_bwd(grad_out: torch.Tensor) -> torch.Tensor:
    return 2 * grad_out


# ---- Reference(scale=...) is called with the call's arguments by keyword ----------------------


def test_scale_and_reduces_functions_get_the_arguments_by_keyword():
    seen = []

    def scale(x, factor):
        seen.append((tuple(x.shape), factor))
        return 1.0

    @tpu_kernel(
        "test_checked::keyword_scale",
        check_reference=Reference(lambda x, factor=2.0: factor * x, scale=scale, reduces=lambda **a: 1),
    )
    def keyword_scale(x: torch.Tensor, *, factor: float = 2.0) -> torch.Tensor:
        return factor * x

    with checked():
        keyword_scale(torch.ones(3, 2), factor=3.0)
    assert seen == [((3, 2), 3.0)]


# ---- the reduction rule: sums of many terms are not false alarms, wrong kernels are caught -----


def _bf16_inputs_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # a real precision bug: the float32 inputs rounded to bfloat16 before the product
    return jnp.matmul(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), preferred_element_type=jnp.float32)


def _drops_the_last_term(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return jnp.matmul(a[:, :-1], b[:-1])


@pytest.mark.parametrize("k", [384, 768])
def test_the_helion_matmul_passes_at_large_k_and_wrong_kernels_with_its_declaration_fail(k):
    """Issue 23: matmul_helion failed checked mode on ordinary float32 inputs at K=384/768
    (errors 2.6e-5 to 5.4e-5) under the plain float32 tolerance. With the family's declared
    reduction (K terms per output) four seeds pass, forward and backward, while the same
    declaration catches a kernel that rounds its inputs to bf16 and one that drops a term."""
    from tpu_kernels.kernels.helion_ops import matmul_helion

    ref = matmul_helion.check_reference
    plain_failures = 0
    for seed in range(4):
        gen = torch.Generator().manual_seed(seed)
        a = torch.randn(128, k, generator=gen, dtype=torch.float64).float().requires_grad_()
        b = torch.randn(k, 128, generator=gen, dtype=torch.float64).float().requires_grad_()
        with checked(strict=True):
            out = matmul_helion(a, b)
            out.backward(torch.randn(out.shape, generator=gen))
        plain_failures += checked_mode.compare(out, a.double() @ b.double()) is not None
    assert plain_failures >= 3  # what the plain float32 tolerance said of these correct results

    a, b = torch.randn(128, k), torch.randn(k, 128)
    for name, fn in [("bf16_inputs", _bf16_inputs_matmul), ("drops_a_term", _drops_the_last_term)]:
        wrong = tpu_kernel(f"test_checked::mm_{name}_{k}", check_reference=ref)(fn)
        with checked(), pytest.raises(CheckFailure, match=f"mm_{name}_{k} output differs"):
            wrong(a, b)


def test_a_failure_without_a_declared_reduction_says_how_to_declare_one():
    with checked(), pytest.raises(CheckFailure, match=r"declares no reduction: if each output sums n terms"):
        off_by_a_little(torch.ones(2, 2))


# ---- checked mode's own spot check at small magnitudes: eps placement ----------------------------


def _eps_outside_sqrt_rmsnorm():
    """The shipped Pallas rmsnorm with eps moved outside the sqrt (issue 23: it passed checked
    mode on unit-scale inputs), as a module of its own."""
    import importlib
    import types

    original = importlib.import_module("tpu_kernels.kernels.rmsnorm.pallas")

    right = "r = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)"
    wrong = "r = 1 / (jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True)) + eps)"
    source = Path(original.__file__).read_text()
    assert source.count(right) == 1
    module = types.ModuleType("rmsnorm_eps_outside_sqrt")
    module.__file__ = str(Path(original.__file__).with_name("rmsnorm_eps_outside_sqrt.py"))
    exec(compile(source.replace(right, wrong), module.__file__, "exec"), module.__dict__)
    return module.rmsnorm


def _rmsnorm_mutant(name: str, ref: Reference):
    return tpu_kernel(
        f"test_checked::{name}", outputs=("y", "inv_rms"), residuals=("inv_rms",), check_reference=ref
    )(_eps_outside_sqrt_rmsnorm())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_the_eps_outside_sqrt_mutant_fails_checked_mode_by_its_spot_check(dtype):
    mutant = _rmsnorm_mutant(f"eps_outside_{str(dtype)[6:]}", rmsnorm.check_reference)
    x, w = torch.randn(16, 256).to(dtype), torch.randn(256).to(dtype)
    with checked(), pytest.raises(CheckFailure) as e:
        mutant(x, w)
    msg = str(e.value)
    assert "checked mode's own spot check: the call as given passed" in msg
    assert "'x' scaled by 2^-10, to a mean square near 1e-06" in msg


def test_without_the_spot_check_the_mutant_passes_on_unit_scale_inputs():
    """Why the spot check exists: at unit scale an eps of 1e-6 moved outside the sqrt
    changes y by about 5e-7 relative, far inside every tolerance."""
    import dataclasses

    mutant = _rmsnorm_mutant(
        "eps_outside_no_spot", dataclasses.replace(rmsnorm.check_reference, spot_check=False)
    )
    with checked():
        mutant(torch.randn(16, 256), torch.randn(256))


def test_the_spot_check_runs_once_per_op_and_shapes(monkeypatch):
    calls = []
    real = rmsnorm.overload

    def counting(*args, **kwargs):
        calls.append(tuple(args[0].shape))
        return real(*args, **kwargs)

    monkeypatch.setattr(rmsnorm, "overload", counting)
    x, w = torch.randn(24, 72), torch.randn(72)
    with checked():
        rmsnorm(x, w)
        rmsnorm(x, w)
        rmsnorm(torch.randn(8, 72), w)
    assert calls == [(24, 72), (24, 72), (24, 72), (8, 72), (8, 72)]  # the first call of each shape twice
    assert torch.equal(x, x.clone())  # the caller's tensors are untouched


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_correct_eps_ops_pass_their_spot_checks(dtype):
    """No false verdicts: the shipped rmsnorm, its Helion twin (no float16 in Helion's Pallas
    backend) and Tokamax's layer_norm and rms_norm are right at small magnitudes too."""
    from tpu_kernels.kernels.helion_ops import rmsnorm_helion

    x, w, bias = torch.randn(16, 128).to(dtype), torch.randn(128).to(dtype), torch.randn(128).to(dtype)
    ops = [lambda: rmsnorm(x, w, eps=1e-5)]
    if HAS_TOKAMAX:  # Tokamax's, where installed (Python >= 3.12)
        from tpu_kernels import tokamax as tk

        ops += [lambda: tk.layer_norm(x, w, bias), lambda: tk.rms_norm(x, w)]
    if dtype != torch.float16:
        ops.append(lambda: rmsnorm_helion(x, w))
    with checked(strict=True):
        for op in ops:
            op()


# ---- ops that write to their arguments: the mutated arguments are compared -----------------------


def _append_reference(cache: torch.Tensor, new: torch.Tensor, pos: int) -> None:
    cache[pos : pos + new.shape[0]] = new  # in place, on its float64 copy, as the op does


@tpu_kernel("test_checked::kv_append", mutates_args=("cache",), check_reference=_append_reference)
def kv_append(cache: torch.Tensor, new: torch.Tensor, pos: int) -> None:
    return cache.at[pos : pos + new.shape[0]].set(new)


@tpu_kernel("test_checked::kv_append_wrong", mutates_args=("cache",), check_reference=_append_reference)
def kv_append_wrong(cache: torch.Tensor, new: torch.Tensor, pos: int) -> None:
    return cache.at[pos + 1 : pos + 1 + new.shape[0]].set(new)  # one row late


def _append_jax_reference(cache, new, pos):
    return cache.at[pos : pos + new.shape[0]].set(new)  # a JAX reference returns the new value


@tpu_kernel(
    "test_checked::kv_append_wrong_jax_ref",
    mutates_args=("cache",),
    check_reference=Reference(_append_jax_reference, jax=True),
)
def kv_append_wrong_jax_ref(cache: torch.Tensor, new: torch.Tensor, pos: int) -> None:
    return cache.at[pos : pos + new.shape[0]].set(new * 2)


def _kv(seed: int, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(16, 8, generator=g).to(dtype), torch.randn(3, 8, generator=g).to(dtype)


@pytest.mark.parametrize("strict", [False, True])
def test_a_wrong_in_place_append_fails_and_a_right_one_passes(strict):
    cache, new = _kv(0)
    want = cache.clone()
    want[5:8] = new
    with checked(strict=strict):
        assert kv_append(cache, new, 5) is None
    assert torch.equal(cache, want)  # written once, by the op
    cache, new = _kv(1)
    with checked(strict=strict), pytest.raises(CheckFailure) as info:
        kv_append_wrong(cache, new, 5)
    msg = str(info.value)
    assert "test_checked::kv_append_wrong mutated argument 'cache' differs from its reference" in msg, msg
    assert "inputs: cache: float32[16, 8], new: float32[3, 8], pos=5" in msg, msg
    assert "updates the mutated arguments' copies in place" in msg, msg


def test_a_jax_reference_of_a_mutating_op_returns_the_new_values():
    cache, new = _kv(2)
    with checked(), pytest.raises(CheckFailure, match=r"kv_append_wrong_jax_ref mutated argument 'cache'"):
        kv_append_wrong_jax_ref(cache, new, 5)


@tpu_kernel("test_checked::add_", mutates_args=("acc",), check_reference=lambda acc, x: acc.add_(x))
def add_(acc: torch.Tensor, x: torch.Tensor) -> None:
    return acc + x


def test_the_reference_writes_to_copies_never_to_the_callers_tensor():
    # float64: a float64 "copy" made with .to(float64) would be the caller's tensor itself,
    # and the reference's add would land on it a second time
    acc, x = _kv(3, torch.float64)
    want = acc + x[:1]
    with checked(strict=True):
        add_(acc, x[:1].expand_as(acc).contiguous())
    torch.testing.assert_close(acc, want, rtol=0, atol=0)
