"""Building blocks for benchmark suites: the standard candidates around a kernel op.

`kernel_benchmark` sets a tpu_kernels op beside its baselines:

- `tpu_kernels`: the op, called on torch tensors (the candidate under test);
- `torch`: the torch reference in the inputs' dtype (eager);
- `torch.compile`: the same reference compiled (Inductor) for this point alone,
  with `fullgraph=True` (`compiled_baseline`) - left out in --quick runs, where
  its compile time would dominate;
- `jax`: the kernel as a plain jitted JAX function on arrays converted
  beforehand, on CPU and CUDA: the difference to `tpu_kernels` is what the torch
  bridge costs. (Not on TPU, where torch_tpu owns the device.)
- any `extra` candidates, e.g. the matching Tokamax op.
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Callable, Sequence
from typing import Any

import jax
import torch

from tpu_kernels.bench import correctness
from tpu_kernels.bench.cost import kernel_cost
from tpu_kernels.bench.spec import Benchmark, Candidate, Point
from tpu_kernels.definition.dtypes import TORCH_TO_JAX
from tpu_kernels.runtime import devices


def to_jax(t: Any) -> Any:
    if not isinstance(t, torch.Tensor):
        return t
    from tpu_kernels.runtime import bridge

    if t.device.type == "cpu":
        return bridge.to_jax_cpu(t.contiguous())
    return bridge.to_jax_cuda(t.contiguous())


_compiled_ids = itertools.count()


def compiled_baseline(
    reference: Callable[..., Any], kwargs: dict | None = None, *, backend: str = "inductor"
) -> Callable[..., Any]:
    """`reference(*xs, **kwargs)` compiled by torch.compile for one benchmark point.

    Dynamo keeps its compiled graphs on the code object it traces. Had every point
    compiled the same function, each new shape or dtype would be a recompile, and
    after `torch._dynamo.config.recompile_limit` (8) of them Dynamo silently runs
    the function eagerly: later points would time eager torch under the name
    "torch.compile". So each point gets a code object of its own, and
    `fullgraph=True` turns a graph break, or a recompile-limit hit, into an error
    that the harness reports on this candidate instead of timing a fallback.
    """

    kwargs = kwargs or {}

    def call(*xs: Any) -> Any:
        return reference(*xs, **kwargs)

    code = call.__code__.replace(co_name=f"compiled_baseline_{next(_compiled_ids)}")
    fresh = types.FunctionType(code, call.__globals__, code.co_name, call.__defaults__, call.__closure__)
    return torch.compile(fresh, backend=backend, dynamic=False, fullgraph=True)


def _spec(t: Any) -> Any:
    return jax.ShapeDtypeStruct(tuple(t.shape), TORCH_TO_JAX[t.dtype]) if isinstance(t, torch.Tensor) else t


def _jax_candidate(op: Any, kw: dict) -> Candidate:
    """The op's kernel as a plain jitted JAX function, with the statics the op's call gets at
    these inputs: the given ones and, for a tuned op, the tuned values of the tunables it
    leaves out (the same config as the `tpu_kernels` candidate, so the two differ only by the
    bridge). One jitted function per config."""
    jitted: dict[tuple, Callable] = {}
    chosen: list[Callable] = []

    def prepare(xs: tuple) -> tuple:
        statics = op.resolve_statics(*xs, **kw)
        key = tuple(sorted(statics.items()))
        if key not in jitted:
            jitted[key] = op.jax_function(**statics)
        chosen[:] = [jitted[key]]
        return tuple(to_jax(t) for t in xs)

    def run(*arrays: Any) -> Any:
        return chosen[0](*arrays)

    return Candidate("jax", run, prepare=prepare, to_torch=correctness.as_tensor)


def kernel_benchmark(
    name: str,
    op: Any,  # a tpu_kernels KernelOp
    *,
    inputs: Callable[[Point, torch.device], tuple],
    points: Sequence[Point],
    reference: Callable[..., torch.Tensor],
    statics: Callable[[Point], dict] = lambda p: {},
    reference_kwargs: Callable[[Point], dict] | None = None,
    extra: Callable[[Point], list[Candidate]] | None = None,
    flops: Callable[[Point], float] | None = None,
    bytes: Callable[[Point], float] | None = None,
    reduction: Callable[[Point], int] | None = None,
    tolerance_scale: Callable[[Point], float] = lambda p: 1.0,
    quick_points: Sequence[Point] | None = None,
    reduced_points: Sequence[Point] | None = None,
    quick: bool = False,
    device_type: str = "cpu",
    description: str = "",
) -> Benchmark:
    """`op` beside its baselines (the module docstring) over `points`.

    Correctness (docs/benchmarking.md, "Correctness"): each candidate's error against the
    float64 `reference` must be within what its dtype allows for a reduction of length
    `reduction(point)` (default: the inputs' largest dimension), or within a few times torch's
    own error; `tolerance_scale(point)` multiplies that allowance, for results that may be less
    accurate on purpose or on ill-conditioned inputs (say so beside it, with the measured error).
    """
    ref_kwargs = reference_kwargs or (lambda p: {})

    def candidates(p: Point) -> list[Candidate]:
        kw, rkw = statics(p), ref_kwargs(p)
        cands = [
            Candidate("tpu_kernels", lambda *xs: op(*xs, **kw), primary=True),
            Candidate("torch", lambda *xs: reference(*xs, **rkw)),
        ]
        if not quick:
            cands.append(Candidate("torch.compile", compiled_baseline(reference, rkw)))
        if devices.get(device_type).jax_baseline:
            cands.append(_jax_candidate(op, kw))
        if extra:
            cands.extend(extra(p))
        return cands

    def cost(p: Point) -> tuple[float, float, str] | None:
        example = inputs(p, torch.device("meta"))
        result, source = kernel_cost(op.jax_function(**statics(p)), *(_spec(t) for t in example))
        return None if result is None else (*result, source)

    # Every field by name, from this function's typed arguments (other `name=name` calls look
    # alike to the duplicate finder; left on purpose: forwarding **kwargs would hide the types).
    return Benchmark(
        name=name,
        points=points,
        inputs=inputs,
        candidates=candidates,
        reference=reference,
        reference_kwargs=ref_kwargs,
        flops=flops,
        bytes=bytes,
        cost_fn=None if (flops or bytes) else cost,
        reduction=reduction,
        tolerance_scale=tolerance_scale,
        quick_points=quick_points,
        reduced_points=reduced_points,
        description=description,
    )
