"""Helpers for testing kernel ops: float64 references, dtype-aware tolerances, torch checks.

The tests that `tpu-kernels new` generates use these, so they run wherever
tpu_kernels is installed:

    from tpu_kernels import testing

    x = testing.rand(64, 256, dtype=torch.bfloat16)           # fresh normal values, never zeros
    testing.assert_close(my_op(x), reference(x.double()))     # tolerance of x's dtype
    testing.opcheck(my_op, (x,))                               # torch.library.opcheck, all tests (float8 inputs: all but test_schema)
    testing.compile_matches_eager(model, [x])                  # one graph, same values and grads
    testing.compile_dynamic_matches_eager(model, [[x], [x2], [x3]])  # at three sizes: 2 graphs
    testing.assert_lowers_for_tpu(my_op)                       # every example call lowers for TPU
    testing.assert_sharding_rule(my_op)                        # its DTensor rule, simulated
    testing.assert_tunes(my_op, x)                             # every tune= candidate runs and is right
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

# The tolerance table and its rule live in the core (checked mode reads them too); the
# tests use the same objects, re-exported here.
from tpu_kernels.verification.tolerance import TOL as TOL
from tpu_kernels.verification.tolerance import Tol as Tol
from tpu_kernels.verification.tolerance import reduction_scale as reduction_scale

if TYPE_CHECKING:
    from tpu_kernels.op import KernelOp


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
    K-long dot product): checked mode's rule (`tpu_kernels.verification.compare.difference`), so a test
    and checked mode agree on what is close enough."""
    from tpu_kernels.verification.checked_mode import compare

    why = compare(actual, expected, scale, dtype or actual.dtype)
    if why is not None:
        raise AssertionError(f"{what} ({dtype or actual.dtype}): {why}" if what else why)


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
    """The `scale` for a K-term dot product of unit-sized inputs, checked against float64:
    `tpu_kernels.verification.tolerance.reduction_scale(K, dtype)`, the rule checked mode applies to every
    op's declared reduction (K for float32 and float64, sqrt(K) for 16-bit types)."""
    return reduction_scale(max(k, 1), dtype)


OPCHECK_TESTS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
"""torch.library.opcheck's default `test_utils`: every test it has."""


def opcheck(op: KernelOp, args: tuple, kwargs: dict | None = None) -> dict[str, str]:
    """torch.library.opcheck with all its default tests; fails on any non-SUCCESS. Returns
    each test's result.

    One exception, said with a warning and in the results ("SKIPPED: <reason>"): with float8
    inputs torch's `test_schema` cannot run (it compares the inputs before and after the call
    with arithmetic that has no CPU kernel for float8: `"mul_cpu_reduced_float" not implemented
    for 'Float8_e4m3fn'`), so it is left out, as `torch.library.opcheck(test_utils=...)`
    allows, and the other three run."""
    float8 = sorted(
        {str(t.dtype).removeprefix("torch.") for t in _tensors(args, kwargs) if _is_float8(t.dtype)}
    )
    tests, skipped = list(OPCHECK_TESTS), {}
    if float8:
        tests.remove("test_schema")
        reason = (
            f"torch's schema check cannot run on {', '.join(float8)} inputs (it compares them with "
            "arithmetic that has no float8 CPU kernel); the other tests ran"
        )
        warnings.warn(f"{op.name}: opcheck skipped test_schema: {reason}.", stacklevel=2)
        skipped["test_schema"] = f"SKIPPED: {reason}"
    results = torch.library.opcheck(op.overload, args, kwargs or {}, test_utils=tests, raise_exception=True)
    if set(results.values()) != {"SUCCESS"}:
        raise AssertionError(f"{op.name}: opcheck results {results}")
    return {**skipped, **results}


def _is_float8(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point and dtype.itemsize == 1


def _tensors(args: tuple, kwargs: dict | None) -> list[torch.Tensor]:
    values = [*args, *(kwargs or {}).values()]
    flat = [t for v in values for t in (v if isinstance(v, (list, tuple)) else (v,))]
    return [t for t in flat if isinstance(t, torch.Tensor)]


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


MARK_DYNAMIC = "mark_dynamic"
"""`compile_dynamic_matches_eager(dynamic=MARK_DYNAMIC)`: the sizes that change marked with
torch._dynamo.mark_dynamic."""


def compile_dynamic_matches_eager(
    model: Callable[..., Any],
    calls: Sequence[Sequence[Any]],
    *,
    dynamic: bool | None | str = None,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    backend: str = "aot_eager",
) -> None:
    """torch.compile(fullgraph=True) of `model`, called with each of `calls` (its inputs at
    several sizes, at least three) in turn, gives eager's outputs and gradients (of every
    floating output, with respect to every input that requires grad), and compiles as
    many graphs as dynamic shapes promise:

    - `dynamic=None`, torch.compile's default: the first call's sizes are static, the
      second recompiles with the sizes that changed symbolic, and that graph serves every
      later call (2 graphs). The second call must change every size that changes later.
    - `dynamic=True`: every size symbolic from the first call (1 graph). Dynamo gives
      sizes that are equal in the first call one symbol, and recompiles when they later
      differ: give the first call no two sizes equal by chance.
    - `dynamic=MARK_DYNAMIC`: the sizes that differ between calls marked with
      `torch._dynamo.mark_dynamic` before each call (1 graph).

    Graphs are counted as Dynamo keeps them (a restarted analysis, as Dynamo restarts
    to specialise a float under dynamic=True, is one graph). Resets Dynamo first
    (`torch._dynamo.reset()`): what it remembers of earlier compiles of `model` (which
    sizes it saw change) would change the count.
    """
    from tpu_kernels import _compat

    if len(calls) < 3:
        raise ValueError(f"compile_dynamic_matches_eager: give at least three calls, got {len(calls)}")
    marked = _changing_dims(calls) if dynamic == MARK_DYNAMIC else {}
    _compat.get("dynamo_reset")()
    stats = _compat.get("dynamo_counters")["stats"]
    before = stats["unique_graphs"]
    compiled = torch.compile(
        model, backend=backend, fullgraph=True, dynamic=None if dynamic == MARK_DYNAMIC else dynamic
    )
    for n, inputs in enumerate(calls):
        eager_in, comp_in = _clones(inputs), _clones(inputs)
        for i, dims in marked.items():
            _compat.get("mark_dynamic")(comp_in[i], dims)
        want, got = _grads(model, eager_in), _grads(compiled, comp_in)
        sizes = [tuple(t.shape) for t in inputs if isinstance(t, torch.Tensor)]
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=lambda m: f"call {n} at {sizes}: {m}")  # noqa: B023
    graphs, made = 2 if dynamic is None else 1, stats["unique_graphs"] - before
    if made != graphs:
        raise AssertionError(
            f"torch.compile(dynamic={dynamic!r}) compiled {made} graphs for {len(calls)} sizes; "
            f"dynamic shapes promise {graphs}"
        )


def _clones(inputs: Sequence[Any]) -> list[Any]:
    return [
        t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
        for t in inputs
    ]


def _grads(fn: Callable[..., Any], inputs: list[Any]) -> list[torch.Tensor]:
    """fn's outputs, then the gradient of sum(out * g) over its floating outputs (g fixed
    per shape: a seeded generator) with respect to each input that requires grad."""
    outs = fn(*inputs)
    outs = [outs] if isinstance(outs, torch.Tensor) else list(outs)
    wrt = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    floating = [o for o in outs if o.is_floating_point() and o.requires_grad]
    if not wrt or not floating:
        return [o.detach() for o in outs]
    gen = torch.Generator().manual_seed(0)
    loss = sum(
        (o * torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o.dtype)).sum() for o in floating
    )
    grads = torch.autograd.grad(loss, wrt, allow_unused=True)
    return [o.detach() for o in outs] + [g if g is not None else torch.zeros(()) for g in grads]


def _changing_dims(calls: Sequence[Sequence[Any]]) -> dict[int, list[int]]:
    """Per tensor input, the dims whose size is not the same in every call."""
    out: dict[int, list[int]] = {}
    for i, t in enumerate(calls[0]):
        if isinstance(t, torch.Tensor):
            dims = [d for d in range(t.dim()) if len({c[i].shape[d] for c in calls}) > 1]
            if dims:
                out[i] = dims
    return out


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
    from tpu_kernels.lowering_check import DEFAULT_CHIP, check_call, check_op, chip
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
    unsharded call (`tpu_kernels.sharding.simulate`, docs/distributed.md#verifying-a-rule).

    At `args`/`kwargs` (tensors), or else at each of the op's example calls (shrunk, with
    random values; `sharding_examples=` where random values would not do). Raises
    `ShardingRuleError` naming the op, the strategy and the first wrong element; fails
    too when the op has no rule, or when its rule offers nothing but all-Replicate at
    every call (nothing would have been checked). Returns the simulation's report."""
    from tpu_kernels.sharding import simulate as sharding_sim

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


def assert_tunes(op: KernelOp, *args: Any, **kwargs: Any) -> Any:
    """`op` (declared with `tune=`) tunes at this call: `tpu_kernels.autotune` runs every
    candidate config the kernel accepts at these shapes, each matches the op's reference (the
    benchmark's correctness criterion) and is timed (a few short rounds: this checks the
    candidates, not which is fastest), and a config is chosen. Nothing is saved. Raises naming
    the wrong or failing candidates; returns the `TuningResult` (`.report()` shows it)."""
    from tpu_kernels.autotuner import autotune
    from tpu_kernels.bench.timing import Settings

    if op.tunables is None:
        raise AssertionError(f"{op.name}: declares no tunables (tune=...).")
    smoke = Settings(rounds=2, min_sample_s=0.0005, warmup_s=0.0, warmup_calls=2, lead_in_s=0.0)
    result = autotune(lambda: op(*args, **kwargs), save=False, settings=smoke, tokamax=False, helion=False)
    outcomes = [o for o in result.outcomes if o.op == op.name]
    if not outcomes:
        raise AssertionError(f"{op.name}: the call was not tuned.\n{result.report()}")
    bad = [c for o in outcomes for c in o.candidates if c.status in ("wrong", "failed")]
    if bad or any(o.choice is None for o in outcomes):
        raise AssertionError(f"{op.name}: tuning found wrong or failing candidates:\n{result.report()}")
    return result
