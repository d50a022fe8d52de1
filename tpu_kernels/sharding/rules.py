"""DTensor sharding rules for kernel ops: `@tpu_kernel(sharding=...)`.

A kernel op fed DTensors runs on each rank's local shard when a rule says which
placements it accepts; DTensor redistributes inputs that fit no strategy (with
collectives) and wraps the local outputs. A rule is one of

- `"pointwise"` (or `pointwise()`): every tensor input and output has the
  broadcast shape of the inputs (numpy broadcasting, aligned at the right); the
  op is shardable on every dim, and an input broadcast along the sharded dim
  stays Replicate.
- `rowwise(*reduced)`: like pointwise, but the kernel reduces over the dims
  `reduced` (of the broadcast shape, negative from the end, or the name of an
  int static parameter holding the dim), which must be Replicate. Outputs keep
  the reduced dims (size 1 allowed, as rmsnorm's inv_rms).
- a callable: the function `torch.distributed.tensor.experimental.register_sharding`
  takes: called with the op's arguments (tensors as `DTensorSpec`s, statics as
  values), it returns `[(output placements, input placements), ...]` for one mesh
  dim, an input list with one entry per argument passed (None for non-tensors).
- `"derived"`: read off the Pallas kernel (`tpu_kernels.sharding.derive`) at each
  call's shapes, and offered only once it passed the local simulation
  (`tpu_kernels.sharding.simulate`) at the op's examples (`Derived`).

The backward op gets a rule derived from the forward's: an input's gradient is
sharded like the input; the gradient of an input that is Replicate while the
outputs are sharded sums over the shards (`Partial()`, e.g. rmsnorm's weight
gradient); a Partial output's incoming gradient is Replicate. A pointwise or
rowwise rule is applied to the backward op's own tensors with those gradient
outputs; a callable rule is evaluated on the forward's arguments, which the
backward op must take by name (derived backwards do; an explicit one needs
`def_backward(..., sharding=)` otherwise, or, under "derived", derives its own from
its kernel).

An op without a rule raises `NotImplementedError` naming the op and `sharding=`
instead of DTensor's generic message; a rule that raises, or returns no strategy or
one that does not fit the call (a placement count, a dim the tensor lacks), raises
`ShardingRuleError` naming the op, the placements it was given and the strategies
the rule accepts. `strategies_of(op)` is the function registered for an op, which
the simulation calls as DTensor does.

DTensor is imported only when the program imports it: rules declared before
that are registered by an import hook (importing `torch.distributed.tensor`
costs about 0.6 s here, measured, which a program without DTensor should not pay).
"""

from __future__ import annotations

import dataclasses
import importlib.abc
import importlib.util
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tpu_kernels.definition.signature import Kind, Signature
from tpu_kernels.errors import OpDefinitionError, ShardingRuleError
from tpu_kernels.sharding.registry import (
    _RULE_OF,
    _SIMULATING,
    _STRATEGIES,
    _is_spec,
    _shape,
    check_strategies,
    given_text,
    rule_of,
    simulating,
    strategies_of,
    strategy_text,
)

if TYPE_CHECKING:
    from tpu_kernels.definition.protocol import Op

_DTENSOR = "torch.distributed.tensor"


# ---- rules ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Broadcast:
    """Pointwise (no reduced dims) or rowwise (some): see the module docstring."""

    reduced: tuple[int | str, ...] = ()

    def __post_init__(self) -> None:
        for d in self.reduced:
            if isinstance(d, bool) or not isinstance(d, (int, str)):
                raise OpDefinitionError(
                    f"rowwise: reduced dims are ints or names of int static parameters, got {d!r}."
                )

    @property
    def name(self) -> str:
        return "pointwise" if not self.reduced else f"rowwise{self.reduced}"


def pointwise() -> Broadcast:
    """Every tensor has the inputs' broadcast shape; shardable on every dim."""
    return Broadcast()


def rowwise(*reduced: int | str) -> Broadcast:
    """Shardable on every dim but `reduced` (default: the last), which the kernel reduces over.

    Dims index the broadcast shape of the tensor inputs; a str names an int
    static parameter holding the dim (e.g. `rowwise("axis")`)."""
    return Broadcast(tuple(reduced) or (-1,))


def normalize(op: str, rule: Any) -> Any:
    """`sharding=` as given -> a Broadcast, a callable, or None."""
    if rule is None or isinstance(rule, Broadcast):
        return rule
    if rule == "pointwise":
        return Broadcast()
    if rule == "rowwise":
        return rowwise()
    if rule == "derived":
        return Derived()
    if callable(rule):
        return rule
    raise OpDefinitionError(
        f"{op}: sharding={rule!r}; expected 'pointwise', 'rowwise', tpu_kernels.rowwise(*dims), "
        "'derived' (read off a Pallas kernel), or a function returning [(output placements, "
        "input placements), ...] as torch.distributed.tensor.experimental.register_sharding takes."
    )


def describe(rule: Any) -> str:
    """A rule as `tpu-kernels check --sharding` names it."""
    if rule is None:
        return "none"
    if isinstance(rule, (Broadcast, Derived)):
        return rule.name
    return getattr(rule, "description", None) or getattr(rule, "__name__", None) or repr(rule)


# ---- derived rules ---------------------------------------------------------------------

class Derived:
    """`sharding="derived"`: each call's strategies read off the kernel at the call's global
    shapes (`tpu_kernels.sharding.derive.derive`), once the derived rule has passed the
    local simulation at the op's example calls.

    On the first DTensor call (or `verify()`), in a fresh thread: the rule is derived
    and simulated at every example call (the op's `sharding_examples`, else its
    `examples`, shrunk, with random values; for a backward op, the backward calls
    those lead to), with its backward op's strategies when they derive from it. A
    disagreeing strategy raises `ShardingRuleError`; so does a derivation that finds
    nothing to shard and could not follow some dim (a declaration is needed then).
    Afterwards a call gets the strategies derived at its shapes that were verified at
    some example (same placements on tensors of the same ranks); any other is left out
    (DTensor then redistributes, correct and slower) with a warning naming it.
    """

    name = "derived"

    def __init__(self) -> None:
        self.op: Op | None = None
        self.fwd: Op | None = None  # set when the rule is a backward op's own
        self._lock = threading.Lock()
        self._verified: set[tuple] | None = None
        self._error: BaseException | None = None
        self._warned: set[tuple] = set()

    def bind(self, op: Op, fwd: Op | None = None) -> None:
        if self.op is not None:
            raise OpDefinitionError(f"{op.name}: a Derived rule belongs to one op ({self.op.name}).")
        owner = fwd or op
        if owner.examples is None and getattr(owner, "sharding_examples", None) is None:
            raise OpDefinitionError(
                f"{owner.name}: sharding='derived' needs examples= (the calls the rule is derived "
                "and verified at before DTensor uses it), or declare the rule."
            )
        self.op, self.fwd = op, fwd

    def __call__(self, *args: Any, **kwargs: Any) -> list[tuple[list[Any], list[Any]]]:
        from torch.distributed.tensor import Replicate

        from tpu_kernels.sharding.derive import derive

        op = self.op
        if op is None:
            raise NotImplementedError("sharding='derived': the rule is not bound to an op.")
        seen = _SIMULATING.get()
        if seen is None:
            self.verify()
        derivation = derive(op, args, kwargs)
        names = [p.name for p in op.signature.params[: len(args)]] + list(kwargs)
        values = list(args) + list(kwargs.values())
        ranks = tuple((n, len(_shape(v))) for n, v in zip(names, values) if _is_spec(v))
        found = []
        for outs, ins in derivation.strategies:
            key = (ranks, tuple(sorted((n, repr(p)) for n, p in ins.items())), tuple(map(repr, outs)))
            if seen is not None:
                seen.add(key)
            elif ins and key not in (self._verified or ()):
                self._warn_unverified(key, ins, outs)
                continue
            found.append(
                (outs, [ins.get(n, Replicate()) if _is_spec(v) else None for n, v in zip(names, values)])
            )
        return found

    def verify(self) -> None:
        """Derive and simulate the rule at the op's example calls, once (see the class)."""
        from tpu_kernels.sharding import simulate as sim

        with self._lock:
            if self._verified is not None:
                return
            if self._error is not None:
                raise self._error

            try:
                self._verified = sim.in_fresh_thread(self._verify)
            except ShardingRuleError as e:
                self._error = e
                raise

    def _verify(self) -> set[tuple]:
        from tpu_kernels.sharding import simulate as sim
        from tpu_kernels.sharding.derive import derive

        op = self.op
        assert op is not None
        if self.fwd is None:
            calls = sim.example_calls(op) or []
        else:
            calls = sim.backward_calls(self.fwd, op, sim.example_calls(self.fwd) or [])
        if not calls:
            raise ShardingRuleError(f"{op.name}: sharding='derived' has no example calls to verify it at.")
        report = sim.Report()
        shardable = False
        undecided = []
        bwd = op.backward_op
        derives_bwd = _is_kernel_op(bwd) and _RULE_OF.get(bwd.name) is self
        with simulating() as seen:
            for args, kwargs in calls:
                derivation = derive(op, args, kwargs)
                shardable |= len(derivation.strategies) > 1
                undecided += [str(n) for n in derivation.undecided]
                report.extend(sim.simulate_call(op, args, kwargs))
                if derives_bwd:
                    bargs, bkwargs = sim.backward_calls(op, bwd, [(args, kwargs)])[0]
                    report.extend(sim.simulate_call(bwd, bargs, bkwargs))
        sim.raise_failures(report)
        if not shardable and undecided:
            raise ShardingRuleError(
                f"{op.name}: sharding='derived' cannot decide any dim at its example calls; declare "
                "the rule with sharding= instead. What the derivation could not follow:\n  "
                + "\n  ".join(dict.fromkeys(undecided))
            )
        return seen

    def _warn_unverified(self, key: tuple, ins: dict[str, Any], outs: list[Any]) -> None:
        if key in self._warned:
            return
        self._warned.add(key)
        assert self.op is not None
        warnings.warn(
            f"{self.op.name}: the derived strategy {strategy_text(list(ins), list(ins.values()), outs)} "
            "was not verified at any example call (no example of these ranks and placements), so it is "
            "not offered and DTensor redistributes instead; add such a call to examples=.",
            UserWarning,
            stacklevel=2,
        )

    def __repr__(self) -> str:
        return f"Derived({self.op.name if self.op else 'unbound'})"


# ---- one call's view ------------------------------------------------------------------


@dataclasses.dataclass
class _Backward:
    """How a backward op's tensors relate to its forward op."""

    fwd: Op
    wrt: tuple[str, ...]  # the forward input each output is the gradient of


def _values(sig: Signature, args: tuple, kwargs: dict) -> dict[str, Any]:
    return {p.name: v for p, v in zip(sig.params, sig.values(args, kwargs))}


def _layout(sig: Signature, args: tuple, kwargs: dict, by_name: dict[str, Any]) -> list[Any]:
    """Input placements in register_sharding's order: positional args, then kwargs."""
    names = [p.name for p in sig.params[: len(args)]] + list(kwargs)
    values = list(args) + list(kwargs.values())
    return [by_name.get(n) if _is_spec(v) else None for n, v in zip(names, values)]


def _output_shapes(kop: Op, values: dict[str, Any]) -> list[tuple[int, ...]]:
    """Global output shapes, from the op's own shape function."""
    import jax

    from tpu_kernels.definition import dtypes

    args = []
    for p in kop.signature.params:
        v = values[p.name]
        if _is_spec(v):
            v = jax.ShapeDtypeStruct(_shape(v), dtypes.to_jax(kop.name, p.name, v.tensor_meta.dtype))
        args.append(v)
    kw = {p.name: a for p, a in zip(kop.signature.params, args) if p.keyword_only}
    pos = [a for p, a in zip(kop.signature.params, args) if not p.keyword_only]
    out = kop.eval_shape(*pos, **kw)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return [tuple(o.shape) for o in outs]


def _broadcast_strategies(
    kop: Op, rule: Broadcast, values: dict[str, Any], grads: bool
) -> list[tuple[list[Any], dict[str, Any]]]:
    """Strategies of a Broadcast rule over this op's tensors.

    `grads`: the outputs are gradients (a backward op), so an output broadcast
    along the sharded dim is a sum over the shards (Partial); in a forward op
    it means the kernel reduces over that dim, and the strategy is dropped."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    specs = {n: v for n, v in values.items() if _is_spec(v)}
    out_shapes = _output_shapes(kop, values)
    shapes = [_shape(s) for s in specs.values()] + out_shapes
    ndim = max(len(s) for s in shapes)
    full = [1] * ndim
    for s in shapes:
        for j, size in enumerate(s):
            d = ndim - len(s) + j
            full[d] = max(full[d], size)
    reduced = set()
    for r in rule.reduced:
        d = values.get(r) if isinstance(r, str) else r
        if isinstance(r, str) and r not in values:
            raise NotImplementedError(
                f"{kop.name}: sharding rule {rule.name} names the parameter '{r}', which this op "
                "does not take; declare its rule with sharding=."
            )
        reduced.add(d % ndim if ndim else 0)
    replicate = ([Replicate()] * len(out_shapes), dict.fromkeys(specs, Replicate()))
    strategies = [replicate]
    for d in range(ndim):
        if d in reduced or full[d] < 2:
            continue

        def place(shape: tuple[int, ...], d: int = d) -> Any:
            j = d - (ndim - len(shape))
            return Shard(j) if j >= 0 and shape[j] == full[d] else None

        ins = {n: place(_shape(s)) or Replicate() for n, s in specs.items()}
        outs = []
        for shape in out_shapes:
            p = place(shape)
            if p is None and shape and 0 in shape:
                p = Replicate()  # an empty placeholder (no gradient for this input)
            elif p is None:
                p = Partial() if grads else None
            outs.append(p)
        if any(p is None for p in outs):
            continue
        strategies.append((outs, ins))
    return strategies


def _callable_strategies(
    rule: Callable, bwd: _Backward | None, kop: Op, args: tuple, kwargs: dict
) -> list[tuple[list[Any], dict[str, Any]]]:
    """A callable rule's strategies as (outputs, {param: placement}); for a backward op,
    derived from the forward's strategies."""
    from torch.distributed.tensor import Partial, Replicate

    if bwd is None:
        result = []
        sig = kop.signature
        names = [p.name for p in sig.params[: len(args)]] + list(kwargs)
        for outs, ins in rule(*args, **kwargs):
            result.append((list(outs), dict(zip(names, ins))))
        return result
    fwd = bwd.fwd
    values = _values(kop.signature, args, kwargs)
    missing = [p.name for p in fwd.signature.params if p.name not in values]
    if missing:
        raise NotImplementedError(
            f"{kop.name}: cannot derive its sharding rule from {fwd.name}'s: it does not take "
            f"the forward's arguments {missing}; give it its own with def_backward(..., sharding=...)."
        )
    fwd_values = {p.name: values[p.name] for p in fwd.signature.params}
    pos = [fwd_values[p.name] for p in fwd.signature.params if not p.keyword_only]
    kw = {p.name: fwd_values[p.name] for p in fwd.signature.params if p.keyword_only}
    fwd_names = [p.name for p in fwd.signature.params if not p.keyword_only] + list(kw)
    visible = fwd.output_names[: fwd.n_visible]
    result = []
    for outs, ins in rule(*pos, **kw):
        outs = list(outs)
        by_name = {n: p for n, p in zip(fwd_names, ins) if p is not None}
        vis = outs[: fwd.n_visible]
        sharded = [not isinstance(p, Replicate) for p in vis]
        if any(sharded) and not all(sharded):
            continue  # a replicated output's gradient would be counted once per rank
        for name, p in zip(fwd.output_names, outs):
            by_name[name] = p
        for name, p in zip(visible, vis):
            by_name[f"grad_{name}"] = Replicate() if isinstance(p, Partial) else p
        grads = []
        for name in bwd.wrt:
            p, v = by_name.get(name), values.get(name)
            if p is None or not _is_spec(v) or not v.tensor_meta.dtype.is_floating_point:
                grads.append(Replicate())  # no gradient: an empty placeholder
            elif isinstance(p, Replicate):
                grads.append(Partial() if any(sharded) else Replicate())
            elif isinstance(p, Partial):
                grads.append(Replicate())
            else:
                grads.append(p)
        result.append((grads, by_name))
    return result


def strategy_fn(kop: Op, rule: Any, bwd: _Backward | None = None) -> Callable:
    """The function given to register_sharding for `kop`: the rule's strategies, checked
    to fit the call (`check_strategies`); a rule that raises is reported with the call's
    placements."""

    def strategies(*args: Any, **kwargs: Any) -> list[tuple[list[Any], list[Any]]]:
        names = [p.name for p in kop.signature.params[: len(args)]] + list(kwargs)
        values = list(args) + list(kwargs.values())
        try:
            if isinstance(rule, Broadcast):
                found = _broadcast_strategies(
                    kop, rule, _values(kop.signature, args, kwargs), bwd is not None
                )
            else:
                found = _callable_strategies(rule, bwd, kop, args, kwargs)
        except (ShardingRuleError, NotImplementedError):
            raise
        except Exception as e:
            raise ShardingRuleError(
                f"{kop.name}: its sharding rule ({describe(rule)}) raised {type(e).__name__}: {e}\n  "
                f"given: {given_text(names, values)}"
            ) from e
        result = [(outs, _layout(kop.signature, args, kwargs, ins)) for outs, ins in found]
        check_strategies(kop, names, values, result)
        return result

    return strategies


def missing_rule_fn(kop: Op, fwd: Op | None = None) -> Callable:
    def raise_missing(*args: Any, **kwargs: Any) -> Any:
        if fwd is None:
            how = (
                f"Declare how it shards: @tpu_kernel({kop.name!r}, sharding='pointwise' | "
                "'rowwise' | tpu_kernels.rowwise(*reduced_dims) | a function returning "
                "[(output placements, input placements), ...] as "
                "torch.distributed.tensor.experimental.register_sharding takes)."
            )
        else:
            how = (
                f"It is the backward of {fwd.name}: declare sharding= on {fwd.name} (derived "
                "for its backward), or def_backward(..., sharding=...)."
            )
        raise NotImplementedError(
            f"{kop.name}: called with DTensor arguments but has no sharding rule. {how}"
        )

    return raise_missing


# ---- registration -----------------------------------------------------------------------

_PENDING: list[tuple[Any, Callable]] = []
_LOCK = threading.Lock()


def register(kop: Op, rule: Any, *, fwd: Op | None = None, wrt: Sequence[str] = ()) -> None:
    """Register `rule` (or the missing-rule error when None) for `kop`'s overload;
    `fwd`/`wrt` when `kop` is the backward op of `fwd`.

    A derived rule is bound to its op; the backward of a derived op gets strategies
    derived from the forward's when it takes all the forward's arguments (a derived
    vjp backward does), else a derived rule of its own, read off its own kernel."""
    rule = normalize(kop.name, rule)
    if isinstance(rule, Derived):
        if fwd is None:
            rule.bind(kop)
        elif not _takes_forward_arguments(fwd, kop):
            rule = Derived()
            rule.bind(kop, fwd=fwd)
            fwd = None
    if rule is None:
        fn = missing_rule_fn(kop, fwd)
    else:
        fn = strategy_fn(kop, rule, _Backward(fwd, tuple(wrt)) if fwd is not None else None)
    _STRATEGIES[kop.name] = None if rule is None else fn
    _RULE_OF[kop.name] = rule
    _schedule(kop, fn)


def _takes_forward_arguments(fwd: Op, bwd: Op) -> bool:
    names = {p.name for p in bwd.signature.params}
    return all(p.name in names for p in fwd.signature.params)


def _schedule(kop: Op, fn: Callable) -> None:
    import torch.distributed

    if not torch.distributed.is_available():
        return
    with _LOCK:
        if _DTENSOR not in sys.modules:
            _PENDING.append((kop, fn))
            _install_hook()
            return
    _register_now(kop, fn)


def _register_now(kop: Op, fn: Callable) -> None:
    from torch.distributed.tensor.experimental import register_sharding

    from tpu_kernels import _compat

    RuntimeSchemaInfo = _compat.get("RuntimeSchemaInfo")  # noqa: N806

    register_sharding(kop.overload)(fn)
    # register_sharding keys DTensor's strategy cache on the arguments from the first
    # int onwards; a rule may depend on any static (a float, a str), so key on all.
    sig = kop.signature
    first = next((i for i, p in enumerate(sig.params) if not p.is_tensor), 100)
    kw = [p.name for p in sig.params if p.keyword_only and not p.is_tensor]
    prop = _compat.get("dtensor_sharding_propagator")
    prop.op_to_schema_info[kop.overload] = RuntimeSchemaInfo(first, kw or None, needs_pytree=True)


def _flush() -> None:
    with _LOCK:
        pending = list(_PENDING)
        _PENDING.clear()
    for kop, fn in pending:
        _register_now(kop, fn)


class _DTensorImportHook(importlib.abc.MetaPathFinder):
    """Registers pending rules right after `torch.distributed.tensor` is imported."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != _DTENSOR:
            return None
        _remove_hook()
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module: Any) -> None:
            exec_module(module)
            _flush()

        spec.loader.exec_module = exec_then_register  # type: ignore[method-assign]
        return spec


_HOOK = _DTensorImportHook()


def _install_hook() -> None:
    if _HOOK not in sys.meta_path:
        sys.meta_path.insert(0, _HOOK)


def _remove_hook() -> None:
    if _HOOK in sys.meta_path:
        sys.meta_path.remove(_HOOK)


def backward_wrt(fwd_sig: Signature, bwd_kop: Op) -> tuple[str, ...]:
    """The forward input each output of a derived (vjp) backward op is the gradient of."""
    return tuple(p.name for p in fwd_sig.params if p.kind in (Kind.TENSOR, Kind.OPTIONAL_TENSOR))


__all__ = ["Broadcast", "Derived", "check_strategies", "pointwise", "rowwise", "rule_of", "strategies_of"]


def _is_kernel_op(op: object) -> bool:
    """A kernel op (its own registration, simulated and derived) rather than a composite
    backward (autograd.Composite: a torch function calling other ops) or None."""
    return op is not None and hasattr(op, "overload") and hasattr(op, "spec")
