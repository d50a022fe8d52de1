"""The TPU lowering check of one op: lower every example call, estimate VMEM, look for races."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tpu_kernels.lowering.export import export_kernel, flat_kernel, lowering_for_tpu, x64_scope
from tpu_kernels.lowering.target import DEFAULT_CHIP, Chip, chip
from tpu_kernels.lowering_check import aliasing, coverage, semantics, tiling, vmem
from tpu_kernels.lowering_check import examples as ex
from tpu_kernels.lowering_check.explain import (
    ALIASING,
    COVERAGE,
    DTYPE,
    OUT_OF_BOUNDS,
    RACE,
    SEMANTICS,
    VMEM,
    Explanation,
    explain,
)
from tpu_kernels.verification import bounds

if TYPE_CHECKING:
    from tpu_kernels.op import KernelOp


@dataclass
class ExampleResult:
    """One example call of an op."""

    call: str  # its arguments, described: "bf16[512,256], alpha=0.5"
    lowered: bool = False
    mosaic: bool = False  # the TPU lowering contains a Mosaic (Pallas) kernel
    kernels: list[vmem.KernelFootprint] = field(default_factory=list)
    verdicts: list[vmem.Verdict] = field(default_factory=list)  # each kernel's VMEM against the chip
    problems: list[Explanation] = field(default_factory=list)  # each one fails the op
    warnings: list[str] = field(default_factory=list)
    race_call: str | None = None  # the scaled-down call the race check ran, if it ran
    bounds_call: str | None = None  # the call the bounds check ran (--bounds), if it ran

    @property
    def ok(self) -> bool:
        return self.lowered and not self.problems

    @property
    def vmem_bytes(self) -> int | None:
        return max((k.estimate for k in self.kernels), default=None)


@dataclass
class OpReport:
    op: str
    status: str  # "ok", "failed" or "skipped"
    reason: str = ""  # why it was skipped
    examples: list[ExampleResult] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _check_footprints(result: ExampleResult, target: Chip) -> None:
    for k in result.kernels:
        if k.wide_dtypes:
            result.problems.append(
                Explanation(
                    DTYPE,
                    f"kernel {k.kernel} has {'/'.join(k.wide_dtypes)} blocks, which Mosaic does not "
                    "support on TPU; use 32-bit or narrower dtypes in TPU examples and kernels.",
                    "",
                )
            )
        found = vmem.verdict(k, target)
        result.verdicts.append(found)
        if not found.fits:
            result.problems.append(Explanation(VMEM, _vmem_message(k, found, target), ""))


def _vmem_message(k: vmem.KernelFootprint, found: vmem.Verdict, target: Chip) -> str:
    """A kernel above the VMEM it may use on `target` (`vmem.verdict`), which only the TPU
    compiler enforces (a lowering on this machine cannot run it): what was counted, the limit,
    by how much it is missed, and the fix."""
    what = f"{vmem.fmt_bytes(k.bytes)} of buffers"
    if k.temporaries:
        what += (
            f" + {vmem.fmt_bytes(k.temporaries)} of values its body holds (float32 temporaries and the like)"
        )
    head = (
        f"kernel {k.kernel} needs about {vmem.fmt_bytes(k.estimate)} of VMEM per grid step ({what}), "
        f"which {found.describe()}"
    )
    core = f"{vmem.fmt_bytes(target.vmem_bytes)} a TPU {target.name} core has"
    if found.limit == target.vmem_bytes and found.limit != k.vmem_limit_bytes:
        return f"{head}; use smaller blocks."
    if k.vmem_limit_bytes:
        return f"{head}; raise vmem_limit_bytes (up to the {core}) or use smaller blocks."
    return (
        f"{head}; use smaller blocks, or set pltpu.CompilerParams(vmem_limit_bytes=...) (up to the "
        f"{core}) in the kernel's pallas_call."
    )


def check_call(op: KernelOp, args: tuple, kwargs: dict, target: Chip) -> ExampleResult:
    """Lower one call of `op` for the TPU and estimate its kernels' VMEM."""
    result = ExampleResult(ex.describe_call(args, kwargs))
    try:
        exported = export_kernel(op, args, kwargs, platform="tpu", chip=target)
    except Exception as e:
        result.problems.append(explain(e))
        return result
    result.lowered = True
    result.mosaic = "tpu_custom_call" in exported.mlir_module()
    try:
        flat, specs, x64 = flat_kernel(op, args, kwargs)
        with x64_scope(x64), lowering_for_tpu(target):
            kernels = vmem.traced_kernels(flat, *specs)
    except Exception as e:  # the estimate is a bonus: never fail the check over it
        result.warnings.append(f"no VMEM estimate or coverage check: {type(e).__name__}: {e}")
        kernels = []
    else:
        with x64_scope(x64), lowering_for_tpu(target):
            _check_aliasing(result, op, flat, specs)
    eqns = [eqn for eqn, _ in kernels]
    try:
        result.kernels = [vmem.footprint(eqn) for eqn in eqns]
    except Exception as e:
        result.warnings.append(f"no VMEM estimate: {type(e).__name__}: {e}")
    _check_footprints(result, target)
    for eqn, operands in kernels:
        _check_coverage(result, eqn, operands)
        _check_semantics(result, eqn)
        _check_tiles(result, eqn)
    return result


def _check_tiles(result: ExampleResult, eqn: Any) -> None:
    """Packed-dtype blocks (bfloat16, int8, ...) whose rows miss the dtype's native tile: a
    performance warning (Mosaic accepts them; see lowering_check/tiling.py for its rule and source)."""
    gm = eqn.params["grid_mapping"]
    found: dict[tuple, list[str]] = {}
    for i, bm in enumerate(gm.block_mappings):
        if not vmem._in_vmem(bm.block_aval):
            continue
        block = vmem.memref_shape(bm)
        array = tuple(int(s) for s in bm.array_aval.shape)
        if tiling.off_native_tile(block, array, bm.array_aval.dtype) is None:
            continue
        what = f"input {i}" if i < gm.num_inputs else f"output {i - gm.num_inputs}"
        found.setdefault((block, array, str(bm.array_aval.dtype)), []).append(what)
    name = vmem._kernel_name(eqn)
    for (block, array, dtype), whats in found.items():
        message = tiling.off_native_message(" and ".join(whats), block, array, dtype)
        result.warnings.append(f"kernel {name}: {message}")


def _check_semantics(result: ExampleResult, eqn: Any) -> None:
    """An accumulation axis marked "parallel" fails; an independent axis left sequential is a hint."""
    name = vmem._kernel_name(eqn)
    try:
        findings = semantics.check_semantics(eqn)
    except Exception as e:  # an index map this check cannot read: say so, do not fail
        result.warnings.append(f"kernel {name}: no dimension-semantics check: {type(e).__name__}: {e}")
        return
    for f in findings:
        if f.kind == "error":
            result.problems.append(Explanation(SEMANTICS, f"kernel {name}: {f.message}", ""))
        else:
            result.warnings.append(f"kernel {name}: {f.message}")


def _check_aliasing(result: ExampleResult, op: KernelOp, flat: Any, specs: list[Any]) -> None:
    """A mutated argument whose pallas_call does not alias it to its new value: a failure where
    elements may go unwritten, a hint where the grid writes them all (lowering_check/aliasing.py)."""
    try:
        findings = aliasing.check_aliasing(op, flat, specs)
    except Exception as e:  # a program this check cannot follow: say so, do not fail
        result.warnings.append(f"no aliasing check: {type(e).__name__}: {e}")
        return
    for f in findings:
        if f.kind == "error":
            result.problems.append(Explanation(ALIASING, f.message, ""))
        else:
            result.warnings.append(f.message)


def _check_coverage(result: ExampleResult, eqn: Any, operands: list[Any] | None = None) -> None:
    """Output elements no grid step writes, blocks entirely outside their array: failures."""
    name = vmem._kernel_name(eqn)
    try:
        findings, warnings = coverage.check_kernel(eqn, operands)
    except Exception as e:  # an index map this check cannot evaluate: say so, do not fail
        result.warnings.append(f"kernel {name}: no coverage check: {type(e).__name__}: {e}")
        return
    kinds = {"coverage": COVERAGE, "out-of-bounds": OUT_OF_BOUNDS}
    for f in findings:
        result.problems.append(Explanation(kinds[f.kind], f"kernel {name}: {f.message}", ""))
    result.warnings += [f"kernel {name}: {w}" for w in warnings]


def check_op(
    op: KernelOp, *, chip_name: str = DEFAULT_CHIP, races: bool = False, bounds: bool = False
) -> OpReport:
    """Lower `op` for the TPU at each of its example calls (and optionally look for races, and
    for block indices outside their arrays in the calls of kernels that read scalar prefetch).

    An op without examples (and not the backward of one with examples) is skipped.
    """
    target = chip(chip_name)
    try:
        with lowering_for_tpu(target):  # examples may depend on the chip
            calls = ex.example_calls(op)
    except Exception as e:
        return OpReport(op.name, "failed", examples=[_failed_examples(e)])
    if not calls:
        return OpReport(op.name, "skipped", reason="no examples")
    results = [check_call(op, args, kwargs, target) for args, kwargs in calls]
    if races:
        _check_races(op, calls, results)
    if bounds:
        _check_bounds(op, calls, results)
    status = "ok" if all(r.ok for r in results) else "failed"
    return OpReport(op.name, status, examples=results)


def _failed_examples(e: Exception) -> ExampleResult:
    result = ExampleResult("(building the example calls)")
    result.problems.append(explain(e))
    return result


def _check_races(op: KernelOp, calls: list[ex.Call], results: list[ExampleResult]) -> None:
    """Each example scaled down, then the same with odd tile counts (`examples.odd_tiles`):
    a race found at either fails that example."""
    from tpu_kernels.lowering_check.races import run_with_race_detection

    seen: set[str] = set()
    small = ex.scale_down(calls)
    for variant in (small, ex.odd_tiles(small)):
        for (args, kwargs), result in zip(variant, results):
            if not result.lowered or any(p.kind == RACE for p in result.problems):
                continue
            described = ex.describe_call(args, kwargs)
            if described in seen:
                continue  # several examples shrink to the same call
            seen.add(described)
            if variant is not small and not _shapes_accepted(op, args, kwargs):
                continue  # the op refuses the grown shapes (block sizes that must divide them)
            result.race_call = described if result.race_call is None else f"{result.race_call}; {described}"
            problem = run_with_race_detection(op, ex.random_arrays((args, kwargs)))
            if problem is not None:
                result.problems.append(
                    dataclasses.replace(
                        problem, message=f"in the TPU interpreter at {described}: {problem.message}"
                    )
                )


def _shapes_accepted(op: KernelOp, args: tuple, kwargs: dict) -> bool:
    try:
        op.eval_shape(*args, **kwargs)
    except Exception:
        return False
    return True


def _check_bounds(op: KernelOp, calls: list[ex.Call], results: list[ExampleResult]) -> None:
    """Each example whose kernels read scalar prefetch, at its own shapes (index values refer
    to them), its concrete arrays as given and the rest random (`examples.random_arrays`:
    integers zero), through `bounds.call_problem`: the scalar-prefetch index maps evaluated on
    the call's values, then the call in the TPU interpreter. Other kernels' index maps depend on
    the grid alone, and the static coverage pass has bounded them."""
    for (args, kwargs), result in zip(calls, results):
        if not result.mosaic:
            continue
        call = ex.random_arrays((args, kwargs))
        if not bounds.reads_scalar_prefetch_in(op, call):
            continue
        result.bounds_call = result.call
        try:
            problem = bounds.call_problem(op, call)
        except Exception as e:  # the interpreter failed otherwise: say why, as --races does
            found = explain(e)
            result.problems.append(
                dataclasses.replace(found, message=f"in the TPU interpreter: {found.message}")
            )
            continue
        if problem is not None:
            result.problems.append(Explanation(OUT_OF_BOUNDS, problem.message, problem.raw))
        zeros = ex.integer_specs(op, args, kwargs)
        if zeros:
            result.warnings.append(
                f"bounds checked with zeros for {', '.join(zeros)}: the example gives only the shape "
                "(a ShapeDtypeStruct); give concrete index values (np.array([...], np.int32)) to check "
                "the indices a real call uses."
            )
