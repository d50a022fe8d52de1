"""The tolerance rule (`tpu_kernels.verification.tolerance`): the measurements that justify it, re-measured
small, and the `Reference` declaration's numbers (reductions, scales, keyword functions).

docs/dtypes.md#tolerances-the-tests-use has the full-size figures; these cases are smaller
(fewer outputs, so a smaller worst case) and assert the margin the rule leaves.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tpu_kernels import OpDefinitionError, Reference, tpu_kernel
from tpu_kernels.verification.tolerance import TOL, reduction_scale, resolve, tol, with_ignored

EPS32 = float(np.finfo(np.float32).eps)


@pytest.mark.parametrize("n", [128, 1024])
def test_a_sequential_float32_sum_stays_well_inside_the_rule(n):
    """The worst accumulation a kernel does (one term at a time, no blocking): its largest
    error over 64x64 outputs of unit-sized products, against the rule's allowance
    atol * n (atol = 2e-6, 16.8 eps). Measured here: at most 2.0 n eps at full size."""
    rng = np.random.default_rng(n)
    a = rng.standard_normal((64, n)).astype(np.float32)
    b = rng.standard_normal((n, 64)).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    acc = np.zeros((64, 64), np.float32)
    for k in range(n):
        acc = acc + np.outer(a[:, k], b[k]).astype(np.float32)
    worst = float(np.abs(acc - exact).max())
    allowed = TOL[torch.float32].atol * reduction_scale(n, torch.float32)
    print(f"n={n}: sequential float32 max error {worst / (n * EPS32):.2f} n eps, allowed {allowed:.3g}")
    assert worst < allowed / 4
    assert worst > TOL[torch.float32].atol  # what the plain float32 tolerance would have refused


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_a_sum_of_terms_rounded_to_16_bits_grows_like_sqrt_n(dtype):
    """A 16-bit kernel that rounds each term before a float32 sum (flash attention's
    probabilities): its error beyond rtol stays within atol * sqrt(n)."""
    t = tol(dtype)
    gen = torch.Generator().manual_seed(0)
    for n in (128, 1024):
        a = torch.randn(64, n, generator=gen, dtype=torch.float64).to(dtype)
        b = torch.randn(n, 32, generator=gen, dtype=torch.float64).to(dtype)
        exact = a.double() @ b.double()
        out = (a.float()[:, :, None] * b.float()[None]).to(dtype).float().sum(1).to(dtype).double()
        beyond = ((out - exact).abs() - t.rtol * exact.abs()).clamp_min(0).max().item()
        assert beyond <= t.atol * reduction_scale(n, dtype), (n, beyond)


def test_the_rule():
    assert reduction_scale(384, torch.float32) == 384.0 == reduction_scale(384, torch.float64)
    assert reduction_scale(256, torch.bfloat16) == 16.0 == reduction_scale(256, torch.float16)
    assert reduction_scale(0, torch.float32) == 1.0  # an empty sum errs like one term
    assert tol(torch.float8_e4m3fn) == TOL[torch.float32]


def _ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x @ w


PARAMS = ["x", "w", "block"]


def test_numbers_come_from_keyword_functions_and_mappings():
    x, w = torch.full((4, 96), 2.0), torch.full((96, 8), 3.0)
    args = {"x": x, "w": w, "block": 32}
    ref = resolve(
        "t::mm",
        PARAMS,
        Reference(
            _ref,
            reduces=lambda x: x.shape[-1],
            grad_reduces=lambda x, w: {"x": w.shape[-1], "w": x.shape[0]},
            scale=lambda x, w: x.abs().amax().item() * w.abs().amax().item(),
            grad_scale=lambda **all_args: all_args["block"] / 32,
        ),
        None,
    )
    assert ref.atol_scale(args, torch.float32, name="out") == 6 * 96
    assert ref.atol_scale(args, torch.bfloat16, name="out") == pytest.approx(6 * 96**0.5)
    assert ref.atol_scale(args, torch.float32, grad=True, name="x") == 8
    assert ref.atol_scale(args, torch.float32, grad=True, name="w") == 4
    assert ref.atol_scale(args, torch.float32, grad=True, name="other") == 1  # not in the mapping
    plain = Reference(_ref)
    assert plain.atol_scale(args, torch.float32) == 1 == plain.atol_scale(args, torch.float32, grad=True)


def test_computes_in_holds_a_wider_result_to_the_narrower_tolerance():
    ref = Reference(_ref, reduces=100, computes_in=torch.float32)
    assert ref.tolerance_dtype(torch.float64) == torch.float32
    assert ref.tolerance_dtype(torch.bfloat16) == torch.bfloat16
    assert ref.atol_scale({}, torch.float64) == 100
    narrow = Reference(_ref, reduces=100, computes_in=lambda x: x.dtype)
    args = {"x": torch.ones(2, dtype=torch.bfloat16)}
    assert narrow.tolerance_dtype(torch.float32, args) == torch.bfloat16
    assert narrow.atol_scale(args, torch.float32) == 10  # sqrt(100): bf16's growth


@pytest.mark.parametrize(
    ("field", "fn", "message"),
    [
        ("scale", lambda args: 1.0, r"scale=<lambda>\(args\) takes 'args', which is not a parameter"),
        ("reduces", lambda x, k: 1, r"reduces=<lambda>\(x, k\) takes 'k', which is not a parameter"),
        ("grad_scale", lambda x, /: 1.0, r"grad_scale=<lambda>\(x, /\) takes 'x' positionally only"),
    ],
)
def test_a_declared_function_that_cannot_take_the_arguments_by_keyword_fails_at_definition(
    field, fn, message
):
    with pytest.raises(OpDefinitionError, match=r"^t::mm: Reference " + message + r".*by keyword"):
        resolve("t::mm", PARAMS, Reference(_ref, **{field: fn}), None)


def test_a_function_with_defaults_or_kwargs_is_accepted():
    ref = resolve("t::mm", PARAMS, Reference(_ref, scale=lambda x, dim=-1, **rest: 2.0), None)
    assert ref.atol_scale({"x": torch.ones(1), "w": torch.ones(1), "block": 1}, torch.float32) == 2.0


def test_a_declared_function_that_returns_no_number_says_so():
    ref = Reference(_ref, scale=lambda x: "big")
    with pytest.raises(TypeError, match=r"Reference scale .*<lambda> gave 'big'; it must give a number"):
        ref.atol_scale({"x": torch.ones(1)}, torch.float32)


def test_an_old_style_scale_taking_one_dict_is_refused_when_the_op_is_defined():
    """What docs/autograd.md never promised but the code did: `scale=lambda args: ...`
    called with one dict. Keywords now; the old form fails at definition, naming the fix."""
    with pytest.raises(OpDefinitionError, match=r"t_tolerance::old_style: Reference scale=.*takes 'args'"):

        @tpu_kernel(
            "t_tolerance::old_style", check_reference=Reference(lambda x: 2 * x, scale=lambda args: 1)
        )
        def old_style(x: torch.Tensor) -> torch.Tensor:
            return 2 * x


def test_with_ignored_adds_parameters_once():
    ref = with_ignored(Reference(_ref, ignore=("block",)), "block", "impl")
    assert ref.ignore == ("block", "impl")
