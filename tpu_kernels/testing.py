"""Helpers for testing kernel ops: float64 references, dtype-aware tolerances, torch checks.

The tests that `tpu-kernels new` generates use these, so they run wherever
tpu_kernels is installed:

    from tpu_kernels import testing

    x = testing.rand(64, 256, dtype=torch.bfloat16)           # fresh normal values, never zeros
    testing.assert_close(my_op(x), reference(x.double()))     # tolerance of x's dtype
    testing.opcheck(my_op, (x,))                               # torch.library.opcheck, all tests
    testing.compile_matches_eager(model, [x])                  # one graph, same values and grads
    testing.assert_lowers_for_tpu(my_op)                       # every example call lowers for TPU
    testing.assert_sharding_rule(my_op)                        # its DTensor rule, simulated
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from tpu_kernels.op import KernelOp


@dataclass(frozen=True)
class Tol:
    rtol: float
    atol: float


# Kernel output vs a float64 reference of the same inputs. The low-precision rows
# are about 2 ulps of the output format at magnitude 1 (bf16 ulp 2^-8, fp16 2^-11):
# kernels accumulate in float32, so the final rounding dominates.
# atol is absolute, sized for outputs of magnitude about 1: it checks nothing on outputs
# far smaller than that (bf16's 8e-3 is twice a softmax probability at 256 columns,
# 1/256 = 0.004), so such tests pass `scale` (softmax: 1/cols), and tests of a low-precision
# kernel's promise (float32 inside, one rounding at the end) use `assert_ulps` instead,
# which is relative to each element: a kernel that does one more rounding fails it.
TOL: dict[torch.dtype, Tol] = {
    torch.float64: Tol(1e-10, 1e-12),
    torch.float32: Tol(2e-5, 2e-6),
    torch.float16: Tol(2e-3, 1e-3),
    torch.bfloat16: Tol(1.6e-2, 8e-3),
}

FLOAT_DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def rand(
    *shape: int, dtype: torch.dtype = torch.float32, requires_grad: bool = False, scale: float = 1.0
) -> torch.Tensor:
    """Fresh standard-normal values (never zeros), made in float64 and rounded to dtype."""
    t = (torch.randn(*shape, dtype=torch.float64) * scale).to(dtype)
    return t.requires_grad_(requires_grad)


def assert_close(
    actual: torch.Tensor,
    expected: torch.Tensor,
    dtype: torch.dtype | None = None,
    *,
    scale: float = 1.0,
    what: str = "",
) -> None:
    """`actual` against a float64 `expected`, with `dtype`'s tolerance (default: actual's)
    and `scale` times its atol (the typical magnitude of the values, e.g. sqrt(K) for a
    K-long dot product)."""
    dtype = dtype or actual.dtype
    tol = TOL[dtype]
    torch.testing.assert_close(
        actual.to(torch.float64),
        expected.to(torch.float64),
        rtol=tol.rtol,
        atol=tol.atol * scale,
        msg=lambda m: f"{what} ({dtype}): {m}",
    )


def ulp(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of `dtype`'s numbers at each of `values` (float64): 2^floor(log2|v|) * eps,
    never below the spacing of the subnormals."""
    info = torch.finfo(dtype)
    v = values.detach().to(torch.float64).abs().clamp_min(info.tiny)
    return torch.exp2(torch.floor(torch.log2(v))) * info.eps


def one_rounding(expected: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """What a kernel that computes in float32 (or wider) and rounds once to `dtype` returns:
    `expected` (a float64 reference) rounded to `dtype`, as float64."""
    return expected.detach().to(dtype).to(torch.float64)


def assert_ulps(
    actual: torch.Tensor, expected: torch.Tensor, *, ulps: float = 1.0, atol: float = 0.0, what: str = ""
) -> None:
    """Each element of `actual` within `ulps` units in the last place of `actual`'s dtype of
    the float64 `expected` (plus `atol`, for elements whose reference is a cancellation).

    For a low-precision kernel that promises float32 arithmetic and one rounding at the end:
    a correctly rounded result is within 0.5 ulp, float32's own rounding adds a hair, so 1 ulp
    passes it, while one more rounding in bf16/f16 on the way (an intermediate kept in the
    input's dtype) shows as 1-2 ulps on many elements and fails."""
    dtype = actual.dtype
    a, e = actual.detach().to(torch.float64), expected.detach().to(torch.float64)
    if a.shape != e.shape:
        raise AssertionError(f"{what}: shape {tuple(a.shape)} != expected {tuple(e.shape)}")
    same_inf = torch.isinf(a) & (a == e)
    err = torch.where(same_inf, torch.zeros_like(a), (a - e).abs())
    bound = ulps * ulp(e, dtype) + atol
    bad = ~(err <= bound)  # NaN fails
    if bool(bad.any()):
        i = int(torch.argmax((err / bound).nan_to_num(float("inf")).flatten()))
        raise AssertionError(
            f"{what} ({dtype}): {int(bad.sum())} of {a.numel()} elements beyond {ulps} ulp"
            + (f" + {atol:g}" if atol else "")
            + f"; worst at flat index {i}: {a.flatten()[i].item()!r} vs {e.flatten()[i].item()!r} "
            f"({(err.flatten()[i] / ulp(e.flatten()[i : i + 1], dtype)[0]).item():.2f} ulp)"
        )


def dot_scale(k: int, dtype: torch.dtype) -> float:
    """The `scale` for a K-term dot product of unit-sized inputs, checked against float64.

    The results grow like sqrt(K): in 16-bit and float8 results the final rounding
    dominates, relative to the result (rtol covers it), so the scale is sqrt(K). In
    float32 (and float64) the accumulation's rounding dominates: each of K additions
    rounds a partial sum of size up to sqrt(K), an absolute error that grows like K
    and is largest relative to results near zero: scale K.
    """
    return float(k) if dtype in (torch.float32, torch.float64) else math.sqrt(k)


def opcheck(op: KernelOp, args: tuple, kwargs: dict | None = None) -> None:
    """torch.library.opcheck with all its default tests; fails on any non-SUCCESS."""
    results = torch.library.opcheck(op.overload, args, kwargs or {}, raise_exception=True)
    if set(results.values()) != {"SUCCESS"}:
        raise AssertionError(f"{op.name}: opcheck results {results}")


def compile_counted(
    fn: Callable, *, backend: str = "aot_eager", dynamic: bool | None = False
) -> tuple[Callable, Any]:
    """torch.compile(fullgraph=True) with a counter of the graphs dynamo produced."""
    from tpu_kernels import _compat

    counter = _compat.get("CompileCounterWithBackend")(backend)
    return torch.compile(fn, backend=counter, fullgraph=True, dynamic=dynamic), counter


def compile_matches_eager(
    model: Callable[..., torch.Tensor],
    inputs: list[torch.Tensor],
    *,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    backend: str = "aot_eager",
) -> None:
    """torch.compile(fullgraph=True) gives one graph, and the same loss and gradients as eager."""
    compiled, counter = compile_counted(model, backend=backend)
    eager_in = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    comp_in = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    eager_loss, comp_loss = model(*eager_in), compiled(*comp_in)
    eager_loss.backward()
    comp_loss.backward()
    torch.testing.assert_close(comp_loss, eager_loss, rtol=rtol, atol=atol)
    for a, b in zip(comp_in, eager_in):
        if b.requires_grad:
            torch.testing.assert_close(a.grad, b.grad, rtol=rtol, atol=atol)
    if counter.frame_count != 1:
        raise AssertionError(f"graph breaks: torch.compile produced {counter.frame_count} graphs")


def assert_lowers_for_tpu(
    op: KernelOp,
    *,
    with_backward: bool = True,
    call: tuple[tuple, dict] | None = None,
    **check_options: Any,
) -> None:
    """Every example call of `op` (and of its backward) lowers for the TPU with a Mosaic
    kernel where the forward has one, and fits in VMEM (`tpu-kernels check` for one op).

    `call=(args, kwargs)`: check that one call of `op` instead (tensors or
    jax.ShapeDtypeStructs), which must contain a Mosaic kernel; `chip_name=` picks the
    generation, and None lowers for the target the caller set (an abstract TPU mesh) and
    skips the VMEM estimate."""
    from tpu_kernels.check import DEFAULT_CHIP, check_call, check_op, chip
    from tpu_kernels.op import KernelOp

    if call is not None:
        args, kwargs = call
        if "chip_name" in check_options and check_options["chip_name"] is None:
            mlir = op.lower(*args, **kwargs).mlir_module()
            if "tpu_custom_call" not in mlir:
                raise AssertionError(f"{op.name}: the TPU lowering contains no Mosaic (Pallas) kernel")
            return
        result = check_call(op, tuple(args), dict(kwargs), chip(check_options.get("chip_name", DEFAULT_CHIP)))
        if result.problems:
            raise AssertionError(
                f"{op.name} does not lower for the TPU at {result.call}:\n  "
                + "\n  ".join(p.message for p in result.problems)
            )
        if not result.mosaic:
            raise AssertionError(
                f"{op.name}: the TPU lowering at {result.call} contains no Mosaic (Pallas) kernel"
            )
        return

    bwd = op.backward_op
    ops = [op] + ([bwd] if with_backward and isinstance(bwd, KernelOp) else [])
    for o in ops:
        report = check_op(o, **check_options)
        if report.status == "skipped":
            raise AssertionError(f"{o.name}: no example calls to lower ({report.reason}); give it examples=")
        problems = [f"{e.call}: {p.message}" for e in report.examples for p in e.problems]
        if problems:
            raise AssertionError(f"{o.name} does not lower for the TPU:\n  " + "\n  ".join(problems))
        if o is op and not any(e.mosaic for e in report.examples):
            raise AssertionError(f"{op.name}: the TPU lowering contains no Mosaic (Pallas) kernel")


def assert_sharding_rule(
    op: KernelOp,
    args: tuple | None = None,
    kwargs: dict | None = None,
    *,
    shards: tuple[int, ...] = (2, 3),
    backward: bool = True,
) -> Any:
    """`op`'s DTensor sharding rule agrees with its kernel: every strategy the rule returns
    (and its backward op's), simulated in this process on 2 and 3 shards, combines to the
    unsharded call (`tpu_kernels.sharding_sim`, docs/distributed.md#verifying-a-rule).

    At `args`/`kwargs` (tensors), or else at each of the op's example calls (shrunk, with
    random values; `sharding_examples=` where random values would not do). Raises
    `ShardingRuleError` naming the op, the strategy and the first wrong element; fails
    too when the op has no rule, or when its rule offers nothing but all-Replicate at
    every call (nothing would have been checked). Returns the simulation's report."""
    from tpu_kernels import sharding_sim

    calls = [(tuple(args), dict(kwargs or {}))] if args is not None else sharding_sim.example_calls(op)
    if not calls:
        raise AssertionError(f"{op.name}: no calls to simulate; pass args= or give the op examples=.")
    report = sharding_sim.Report()
    for a, k in calls:
        report.extend(sharding_sim.verify(op, a, k, shards=shards, backward=backward))
    if not report.checked:
        why = "; ".join(report.skipped) or "its rule offers only all-Replicate at these calls"
        raise AssertionError(f"{op.name}: no sharded strategy was simulated ({why}).")
    return report
