"""Sharding rules verified by local simulation: every strategy, in one process, no collectives.

DTensor trusts a rule: it runs the op on each rank's local shard and wraps the local
results with the strategy's output placements, so a rule that calls a dim
independent when the kernel reads across it is wrong on every rank, silently, and
only when the model is sharded. `simulate(op, args, kwargs)` checks each strategy
the op's registered rule returns for this call (and, with `backward=True`, each
strategy of its backward op's rule, at the backward call this forward call leads
to), for a mesh of 2 and of 3 devices:

1. the inputs are split by the strategy's input placements: `Shard(d)` as DTensor
   splits (torch.chunk: ceil(size / n) per shard, the last ones shorter or empty),
   `Replicate()` whole on every shard, `Partial()` into random parts that sum to it;
2. the op runs on each shard's inputs;
3. the outputs are combined by the output placements: `Shard(d)` concatenated (each
   local size must be DTensor's chunk size), `Partial()` summed (in float64),
   `Replicate()` compared shard by shard;
4. the result is compared with the unsharded call (`mismatch`): both are the same
   kernel's, so within twice the rtol of `tpu_kernels.testing`'s table for the output's
   dtype, relative to the element, the output's root mean square and, for `Partial()`,
   the sum of the parts' magnitudes; no absolute term, which would pass any result
   on outputs far smaller than 1 (softmax probabilities).

A strategy that disagrees is a `Failure` naming the op, the strategy, the mesh size,
the first wrong element and the farthest (how far off, against what is allowed);
`verify` raises them as one `ShardingRuleError`.

The all-Replicate strategy runs the unsharded call on every rank, so it is not
simulated. Inputs come from the caller, or from the op's examples
(`example_calls`): `sharding_examples=` if the op declares them (concrete calls with
valid values, as Tokamax's ops do), else its `examples=`, shrunk (the last two dims
to at most 128, the others to at most 5: equal sizes stay equal) and filled with
random values, bfloat16 and float16 ones in float32: a rule does not depend on the
dtype, the CPU runs 16-bit floats slowly and lacks some of their kernels (XLA's CPU
DotThunk has no bf16 x bf16 -> f32 dot, which the matmul template's backward kernel
needs), and float32's tolerance is tighter.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from tpu_kernels.errors import ShardingRuleError
from tpu_kernels.sharding.registry import (
    check_strategies,
    placement_text,
    simulating,
    strategies_of,
    strategy_text,
)
from tpu_kernels.verification import tolerance
from tpu_kernels.verification.compare import difference

if TYPE_CHECKING:
    from tpu_kernels.definition.protocol import Op

SHARDS = (2, 3)  # mesh sizes simulated: even and uneven splits of most dims
SEED = 0  # the same random inputs on every rank (a derived rule is verified on each)
MAX_TRAILING, MAX_LEADING = 128, 5  # example sizes shrunk to at most these


@dataclasses.dataclass(frozen=True)
class Failure:
    """One strategy that disagrees with the unsharded call."""

    op: str
    strategy: str  # "x: Shard(0), weight: Replicate() -> Shard(0)"
    shards: int
    message: str

    def __str__(self) -> str:
        return f"{self.op}: strategy {self.strategy} on {self.shards} shards: {self.message}"


@dataclasses.dataclass
class Report:
    """What `simulate` checked: each (op, strategy, mesh size) it ran, and the failures."""

    checked: list[tuple[str, str, int]] = dataclasses.field(default_factory=list)
    failures: list[Failure] = dataclasses.field(default_factory=list)
    skipped: list[str] = dataclasses.field(default_factory=list)  # ops with no rule or no backward call

    def extend(self, other: Report) -> None:
        self.checked += other.checked
        self.failures += other.failures
        self.skipped += other.skipped


# ---- describing placements ------------------------------------------------------------------


# ---- one call's specs ------------------------------------------------------------------------


def _arguments(op: Op, args: tuple, kwargs: dict) -> tuple[list[str], list[Any]]:
    """The call's arguments in register_sharding's order (positional, then keywords), by name."""
    names = [p.name for p in op.signature.params[: len(args)]] + list(kwargs)
    return names, list(args) + list(kwargs.values())


def specs_of(values: Sequence[Any], mesh: Any) -> list[Any]:
    """Each tensor as the DTensorSpec DTensor would give the rule (global shape and dtype,
    Replicate on `mesh`); other values as they are."""
    from torch.distributed.tensor import Replicate

    from tpu_kernels import _compat

    spec_cls, meta_cls = _compat.get("DTensorSpec"), _compat.get("TensorMeta")
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            meta = meta_cls(v.shape, v.stride(), v.dtype)
            out.append(spec_cls(mesh, (Replicate(),), tensor_meta=meta))
        else:
            out.append(v)
    return out


def strategies_at(
    op: Op, fn: Callable, args: tuple, kwargs: dict, shards: int
) -> list[tuple[list[Any], list[Any]]]:
    """The strategies `fn` (a register_sharding function) returns for this call on a mesh
    of `shards` devices: [(output placements, input placements in argument order)]."""
    from tpu_kernels import _compat

    names, values = _arguments(op, args, kwargs)
    specs = specs_of(values, _compat.local_mesh(shards))
    n_pos = len(args)
    found = fn(*specs[:n_pos], **dict(zip(names[n_pos:], specs[n_pos:])))
    check_strategies(op, names, specs, found)
    return [(list(outs), list(ins) + [None] * (len(values) - len(ins))) for outs, ins in found]


# ---- splitting and combining ---------------------------------------------------------------------


def chunks(size: int, n: int) -> list[tuple[int, int]]:
    """(start, length) of each of n shards of a dim of `size`, as DTensor's Shard splits it."""
    step = -(-size // n) if size else 0
    return [(min(i * step, size), max(0, min(step, size - i * step))) for i in range(n)]


def _split(t: torch.Tensor, p: Any, n: int, gen: torch.Generator) -> list[torch.Tensor]:
    name = type(p).__name__
    if name == "Replicate":
        return [t] * n
    if name == "Shard":
        d = p.dim % t.ndim
        return [t.narrow(d, start, length) for start, length in chunks(t.shape[d], n)]
    if name == "Partial" and t.is_floating_point():
        op = getattr(p, "reduce_op", "sum")
        wide = t.to(torch.float64)
        scale = float(wide.abs().mean()) if t.numel() else 1.0
        parts = [torch.randn(t.shape, generator=gen, dtype=torch.float64) * scale for _ in range(n - 1)]
        if op == "sum":
            parts.append(wide - sum(parts, torch.zeros_like(wide)))
        elif op == "avg":
            parts.append(wide * n - sum(parts, torch.zeros_like(wide)))
        else:
            raise NotImplementedError(f"a Partial({op!r}) input")
        return [x.to(t.dtype) for x in parts]
    raise NotImplementedError(f"the placement {placement_text(p)} of a {t.dtype} input")


def mismatch(got: torch.Tensor, want: torch.Tensor, magnitude: torch.Tensor | None = None) -> str | None:
    """Why `got` is not `want`, naming the first wrong element and the farthest; None when
    it is not.

    Both are the same kernel's results, so a right strategy differs only by rounding: an
    element is wrong when it differs by more than twice the dtype's rtol relative to the
    largest of the element, the unsharded output's root mean square (a sum that a shorter
    shard reorders rounds relative to the size of its terms, not of its result: a 256-long
    float32 dot erred 7e-6 at 0.047) and, for a sum over shards, `magnitude`, the sum of
    the parts' magnitudes (each part was rounded before the sum: rmsnorm's bfloat16 weight
    gradient sums parts of about 11 into results of 0.15). There is no absolute term: the
    table's atol is sized for values of about 1, and outputs far smaller (a softmax over
    8192 columns: 1e-4 each) would pass by it whatever a wrong strategy returned. A wrong
    rule errs by about the values themselves."""
    if not want.is_floating_point():
        return difference(got, want, atol=0.0, rtol=0.0, labels=_LABELS)
    w = want.detach().cpu().to(torch.float64)
    finite = w[torch.isfinite(w)]
    unit = finite.square().mean().sqrt() if finite.numel() else torch.zeros((), dtype=torch.float64)
    size = torch.maximum(w.abs(), unit)
    if magnitude is not None:
        size = torch.maximum(size, magnitude.detach().cpu().to(torch.float64))
    rtol = 2 * tolerance.tol(want.dtype).rtol
    return difference(
        got.to(want.dtype),
        want,
        atol=0.0,
        rtol=rtol,
        size=size,
        rule=f"twice the {str(want.dtype).removeprefix('torch.')} rtol ({rtol:g}) of each element's size",
        labels=_LABELS,
    )


_LABELS = ("sharded", "unsharded")


def _combine(
    p: Any, locals_: list[torch.Tensor], full: torch.Tensor
) -> tuple[torch.Tensor | None, str | None]:
    """The shards' outputs as one tensor by placement `p`, or why they cannot be."""
    name = type(p).__name__
    n = len(locals_)
    if name == "Shard":
        if full.ndim == 0:
            return None, "Shard of a 0-d output"
        d = p.dim % full.ndim
        for i, ((_, want), t) in enumerate(zip(chunks(full.shape[d], n), locals_)):
            if t.ndim != full.ndim or t.shape[d] != want:
                return None, (
                    f"shard {i} returned shape {list(t.shape)}, but DTensor expects {want} of the "
                    f"{full.shape[d]} along dim {d}"
                )
        return torch.cat(locals_, d), None
    if name == "Partial":
        op = getattr(p, "reduce_op", "sum")
        wide = [t.to(torch.float64) if t.is_floating_point() else t for t in locals_]
        if op == "sum":
            return sum(wide[1:], wide[0]), None
        if op == "avg":
            return sum(wide[1:], wide[0]) / n, None
        if op in ("max", "min"):
            stacked = torch.stack(wide)
            return (stacked.amax(0) if op == "max" else stacked.amin(0)), None
        return None, f"cannot simulate Partial({op!r})"
    return None, f"cannot simulate the placement {placement_text(p)}"


# ---- one call ------------------------------------------------------------------------------------


def _as_list(out: Any) -> list[Any]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _call(op: Op, args: Sequence[Any], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    with torch.no_grad():
        return _as_list(op.overload(*args, **kwargs))


def simulate_call(
    op: Op,
    args: tuple,
    kwargs: dict | None = None,
    *,
    shards: Sequence[int] = SHARDS,
    fn: Callable | None = None,
) -> Report:
    """Every strategy of `op`'s rule (or of `fn`, a register_sharding function) at this
    call, simulated on each mesh size in `shards` (see the module docstring)."""
    kwargs = dict(kwargs or {})
    report = Report()
    fn = fn if fn is not None else strategies_of(op)
    if fn is None:
        report.skipped.append(f"{op.name}: no sharding rule")
        return report
    if op.mutates_args:
        report.skipped.append(f"{op.name}: mutates its arguments (not simulated)")
        return report
    names, values = _arguments(op, args, kwargs)
    n_pos = len(args)
    full = _call(op, args, kwargs)
    gen = torch.Generator().manual_seed(SEED)
    for n in shards:
        with simulating():  # a derived rule's strategies at this call, all of them
            found = strategies_at(op, fn, args, kwargs, n)
        for outs, ins in found:
            if all(type(p).__name__ == "Replicate" for p in [*outs, *ins] if p is not None):
                continue
            text = strategy_text(names, ins, outs)
            report.checked.append((op.name, text, n))
            why = _simulate_strategy(op, names, values, n_pos, ins, outs, full, n, gen)
            if why is not None:
                report.failures.append(Failure(op.name, text, n, why))
    return report


def _simulate_strategy(
    op: Op,
    names: list[str],
    values: list[Any],
    n_pos: int,
    ins: list[Any],
    outs: list[Any],
    full: list[torch.Tensor],
    n: int,
    gen: torch.Generator,
) -> str | None:
    try:
        pieces = [
            _split(v, p, n, gen) if isinstance(v, torch.Tensor) and p is not None else [v] * n
            for v, p in zip(values, ins)
        ]
    except NotImplementedError as e:
        return f"cannot simulate {e}"
    results = []
    for s in range(n):
        local = [piece[s] for piece in pieces]
        try:
            results.append(_call(op, local[:n_pos], dict(zip(names[n_pos:], local[n_pos:]))))
        except Exception as e:  # noqa: BLE001 - the op refusing a shard is the finding
            return f"shard {s} of {n} raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    for j, (p, want) in enumerate(zip(outs, full)):
        per_shard = [r[j] for r in results]
        if type(p).__name__ == "Replicate":
            for s, got in enumerate(per_shard):
                why = mismatch(got, want)
                if why is not None:
                    return f"output {j} (Replicate) on shard {s}: {why}"
            continue
        got, why = _combine(p, per_shard, want)
        magnitude = None
        if type(p).__name__ == "Partial" and want.is_floating_point():
            magnitude = sum(t.to(torch.float64).abs() for t in per_shard)
        if why is None:
            why = mismatch(got, want, magnitude)
        if why is not None:
            return f"output {j} ({placement_text(p)}): {why}"
    return None


# ---- an op, forward and backward -------------------------------------------------------------------


def backward_call(
    fwd: Op, bwd: Op, args: tuple, kwargs: dict, outputs: list[Any], grads: list[Any]
) -> tuple[tuple, dict]:
    """The call of `bwd` (the forward's backward op) that the forward call leads to: its
    parameters bound by name to the forward's inputs, its outputs (residuals included)
    and `grad_<output>` for each returned output."""
    env: dict[str, Any] = {
        p.name: v for p, v in zip(fwd.signature.params, fwd.signature.values(args, kwargs))
    }
    env.update(zip(fwd.output_names, outputs))
    env.update({f"grad_{n}": g for n, g in zip(fwd.output_names[: fwd.n_visible], grads)})
    pos = tuple(env[p.name] for p in bwd.signature.params if not p.keyword_only)
    kw = {p.name: env[p.name] for p in bwd.signature.params if p.keyword_only and p.name in env}
    return pos, kw


def simulate(
    op: Op,
    args: tuple,
    kwargs: dict | None = None,
    *,
    shards: Sequence[int] = SHARDS,
    backward: bool = True,
) -> Report:
    """`simulate_call` of `op` at this call and, with `backward`, of its backward op
    (a kernel op, not a composite) at the backward call it leads to."""

    kwargs = dict(kwargs or {})
    report = simulate_call(op, args, kwargs, shards=shards)
    bwd = op.backward_op
    if backward and _is_kernel_op(bwd):
        [(bargs, bkwargs)] = backward_calls(op, bwd, [(args, kwargs)])
        report.extend(simulate_call(bwd, bargs, bkwargs, shards=shards))
    return report


def _grads(op: Op, outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Seeded random incoming gradients for the op's returned outputs (zeros for integer ones)."""
    gen = torch.Generator().manual_seed(SEED + 1)
    return [
        torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o.dtype)
        if o.is_floating_point()
        else torch.zeros_like(o)
        for o in outputs[: op.n_visible]
    ]


def verify(
    op: Op,
    args: tuple,
    kwargs: dict | None = None,
    *,
    shards: Sequence[int] = SHARDS,
    backward: bool = True,
) -> Report:
    """`simulate`, raising `ShardingRuleError` with every failure (and the strategies the
    rule accepts) when a strategy disagrees."""
    report = simulate(op, args, kwargs, shards=shards, backward=backward)
    raise_failures(report)
    return report


def raise_failures(report: Report) -> None:
    if not report.failures:
        return
    accepted: dict[str, list[str]] = {}
    for name, text, _ in report.checked:
        if text not in accepted.setdefault(name, []):
            accepted[name].append(text)
    lines = [str(f) for f in report.failures]
    for name, texts in accepted.items():
        lines.append(f"{name}'s rule accepts (besides all-Replicate): " + "; ".join(texts))
    raise ShardingRuleError(
        "sharding rule disagrees with the kernel (local simulation, docs/distributed.md#verifying-a-rule):\n  "
        + "\n  ".join(lines)
    )


# ---- the op's own calls -----------------------------------------------------------------------------


def example_calls(op: Op, seed: int = SEED) -> list[tuple[tuple, dict]] | None:
    """Concrete calls of a forward op to simulate: its `sharding_examples` (concrete, as
    given), else its `examples`, shrunk and filled with random values; None when it has
    neither."""
    own = getattr(op, "sharding_examples", None)
    if own is not None:
        return [(tuple(a), dict(k)) for a, k in own()]
    if op.examples is None:
        return None
    gen = torch.Generator().manual_seed(seed)
    calls: dict[str, tuple[tuple, dict]] = {}
    for a, k in op.examples():
        call = _concrete(op, tuple(a), dict(k), gen)
        calls.setdefault(_key(call), call)  # examples that shrink alike are simulated once
    return list(calls.values())


def _key(call: tuple[tuple, dict]) -> str:
    def one(v: Any) -> str:
        return f"{v.dtype}{list(v.shape)}" if isinstance(v, torch.Tensor) else repr(v)

    args, kwargs = call
    return ", ".join([one(a) for a in args] + [f"{k}={one(v)}" for k, v in kwargs.items()])


def _concrete(op: Op, args: tuple, kwargs: dict, gen: torch.Generator) -> tuple[tuple, dict]:
    from tpu_kernels.definition import dtypes

    def make(v: Any) -> Any:
        if isinstance(v, (list, tuple)) and v and all(_is_spec(x) for x in v):
            return type(v)(make(x) for x in v)
        if isinstance(v, torch.Tensor):
            return v
        if not _is_spec(v):
            return v
        rank = len(v.shape)
        shape = tuple(min(d, MAX_TRAILING if i >= rank - 2 else MAX_LEADING) for i, d in enumerate(v.shape))
        dtype = v.dtype if isinstance(v.dtype, torch.dtype) else dtypes.to_torch(op.name, v.dtype)
        if dtype in (torch.bfloat16, torch.float16):
            dtype = torch.float32  # see the module docstring
        if dtype.is_floating_point:
            return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
        if dtype == torch.bool:
            return torch.rand(shape, generator=gen) > 0.5
        return torch.randint(0, 3, shape, generator=gen, dtype=dtype)

    return tuple(make(a) for a in args), {k: make(v) for k, v in kwargs.items()}


def _is_spec(v: Any) -> bool:
    return hasattr(v, "shape") and hasattr(v, "dtype") and not isinstance(v, torch.Tensor)


def backward_calls(
    fwd: Op, bwd: Op, forward_calls: Sequence[tuple[tuple, dict]]
) -> list[tuple[tuple, dict]]:
    """The concrete backward calls the forward's concrete calls lead to."""
    calls = []
    for args, kwargs in forward_calls:
        outputs = _call(fwd, args, kwargs)
        calls.append(backward_call(fwd, bwd, args, kwargs, outputs, _grads(fwd, outputs)))
    return calls


def in_fresh_thread(fn: Callable[[], Any]) -> Any:
    """fn() in a new thread: clear of the caller's dispatch modes (a FakeTensorMode while
    torch.compile traces a DTensor program), which are per thread."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            result["error"] = e

    thread = threading.Thread(target=run, name="tpu_kernels-sharding-sim")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result.get("value")


__all__ = [
    "SHARDS",
    "Failure",
    "Report",
    "backward_call",
    "backward_calls",
    "chunks",
    "example_calls",
    "in_fresh_thread",
    "mismatch",
    "placement_text",
    "raise_failures",
    "simulate",
    "simulate_call",
    "strategies_at",
    "strategy_text",
    "verify",
]


def _is_kernel_op(op: object) -> bool:
    """A kernel op (its own registration, simulated and derived) rather than a composite
    backward (autograd.Composite: a torch function calling other ops) or None."""
    return op is not None and hasattr(op, "overload") and hasattr(op, "spec")
