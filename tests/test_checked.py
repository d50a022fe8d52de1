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

from tpu_kernels import CheckFailure, OpDefinitionError, checked, checking, tpu_kernel
from tpu_kernels.checking import Reference
from tpu_kernels.kernels import matmul, rmsnorm, scale_add, softmax

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
    real = checking._jax_call

    def spy(fn, kwargs, cotangents):
        calls.append((cotangents is not None, [v.dtype for v in kwargs.values()]))
        return real(fn, kwargs, cotangents)

    monkeypatch.setattr(checking, "_jax_call", spy)
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
    assert not checking.ARMED and not checking.is_checked()


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


def test_environment_variable_turns_it_on():
    code = (
        "import torch, jax.numpy as jnp\n"
        "from tpu_kernels import tpu_kernel, CheckFailure\n"
        "@tpu_kernel('env_checked::bad', check_reference=lambda x: x)\n"
        "def bad(x: torch.Tensor) -> torch.Tensor:\n"
        "    return x + 1\n"
        "try:\n"
        "    bad(torch.zeros(3))\n"
        "except CheckFailure as e:\n"
        "    print('CAUGHT', 'env_checked::bad' in str(e))\n"
        "else:\n"
        "    print('MISSED')\n"
    )
    env = {**os.environ, "TPU_KERNELS_CHECK": "1", "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "CAUGHT True", out.stderr[-2000:]


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


def test_shipped_ops_declare_their_references():
    for op in (softmax, rmsnorm, matmul, scale_add):
        assert isinstance(op.check_reference, Reference) and not op.check_reference.jax, op.name


def test_tokamax_ops_pass():
    from tpu_kernels import tokamax as tk

    x, w, bias = torch.randn(6, 32, requires_grad=True), torch.randn(32), torch.randn(32)
    with checked():
        tk.layer_norm(x, w, bias).sum().backward()
        tk.rms_norm(x, w).sum().backward()


def test_every_tokamax_op_has_a_reference():
    from tpu_kernels.tokamax import FAMILIES

    missing = [
        op.name
        for family in FAMILIES.values()
        for op in family.ops
        if op.check_reference is None or op.check_reference.jax
    ]
    assert missing == []


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
        with pytest.warns(UserWarning, match="does not take 'shift'"):
            extra_arg(torch.ones(2), shift=1.0)


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
    assert checking.compare(ints, ints.double()) is None
    assert checking.compare(ints, torch.tensor([[1.0, 2.0], [3.0, 5.0]], dtype=torch.float64)) == (
        "1 of 4 elements differ (exact compare for torch.int64); first at index (1, 1): kernel 4, reference 5.0"
    )
    got = torch.tensor([1.0, float("inf"), 3.0])
    assert checking.compare(got, torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)).startswith(
        "0 NaN and 1 inf values the reference does not have (of 3); first at index (1,): kernel inf, reference 2.0"
    )
    assert checking.compare(
        torch.tensor([1.0, 2.0]), torch.tensor([1.0, float("nan")], dtype=torch.float64)
    ) == (
        "1 finite values where the reference has NaN or inf (of 2); first at index (1,): kernel 2.0, reference nan"
    )
