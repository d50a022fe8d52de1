"""What DTensor is told per op, and how strategies read: the registry the rules fill.

`rules.register` puts each op's strategy function here (`strategies_of`) with the rule it came
from (`rule_of`); the simulation (`simulate.py`) and the check read them back. `simulating()`
switches derived rules to offering every strategy they derive. The text helpers name
placements and strategies in every message of the package.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from tpu_kernels.errors import ShardingRuleError

if TYPE_CHECKING:
    from tpu_kernels.definition.protocol import Op

_STRATEGIES: dict[str, Callable | None] = {}  # op name -> the function registered (None: no rule)
_RULE_OF: dict[str, Any] = {}  # op name -> the rule object its strategies come from


def strategies_of(kop: Op) -> Callable | None:
    """The strategy function registered with DTensor for `kop` (register_sharding's form),
    or None when it has no rule."""
    return _STRATEGIES.get(kop.name)


def rule_of(kop: Op) -> Any:
    """The rule `kop`'s strategies come from (a backward op's: its forward's, or its own)."""
    return _RULE_OF.get(kop.name)


# While simulating: derived rules return every strategy they derive, recorded here.
_SIMULATING: ContextVar[set[tuple] | None] = ContextVar("tpu_kernels_sharding_simulating", default=None)


@contextlib.contextmanager
def simulating() -> Iterator[set[tuple]]:
    """Inside: a derived rule offers every strategy it derives (the simulation checks them),
    each recorded in the yielded set (the enclosing block's, when nested), instead of only
    those verified at its examples."""
    seen = _SIMULATING.get()
    if seen is None:
        seen = set()
    token = _SIMULATING.set(seen)
    try:
        yield seen
    finally:
        _SIMULATING.reset(token)


def placement_text(p: Any) -> str:
    if p is None:
        return "-"
    name = type(p).__name__
    if name == "Shard":
        return f"Shard({p.dim})"
    if name == "Partial":
        op = getattr(p, "reduce_op", "sum")
        return "Partial()" if op == "sum" else f"Partial({op!r})"
    return f"{name}()"


def strategy_text(names: Sequence[str], ins: Sequence[Any], outs: Sequence[Any]) -> str:
    """`x: Shard(0), weight: Replicate() -> Shard(0), Shard(0)` (non-tensor arguments left out)."""
    left = ", ".join(f"{n}: {placement_text(p)}" for n, p in zip(names, ins) if p is not None)
    return f"{left or '(no tensors)'} -> {', '.join(placement_text(p) for p in outs)}"


def given_text(names: Sequence[str], values: Sequence[Any]) -> str:
    """The placements of a call's DTensor arguments: `x: Shard(1), weight: Replicate()`."""
    parts = [
        f"{n}: {', '.join(placement_text(p) for p in v.placements)}"
        for n, v in zip(names, values)
        if _is_spec(v)
    ]
    return ", ".join(parts) or "no DTensor arguments"


def check_strategies(kop: Op, names: Sequence[str], values: Sequence[Any], found: Any) -> None:
    """`found` (register_sharding's form) fits this call: at least one strategy, one
    placement per output, at most one per argument and None exactly for non-tensors,
    and each Shard(d) inside its tensor; else ShardingRuleError naming the op, the
    placements given and the strategies the rule returned."""
    n_out = kop.signature.n_outputs
    problems = []
    if not found:
        problems.append("it returned no strategy (DTensor has none to pick; include the all-Replicate one)")
    for outs, ins in found or ():
        text = strategy_text(names, list(ins) + [None] * (len(names) - len(ins)), outs)
        if len(outs) != n_out:
            problems.append(f"{text}: {len(outs)} output placements for {n_out} outputs")
        if len(ins) > len(values):
            problems.append(f"{text}: {len(ins)} input placements for {len(values)} arguments")
        for n, v, p in zip(names, values, ins):
            if _is_spec(v) and p is None:
                problems.append(f"{text}: no placement for the tensor {n}")
            elif not _is_spec(v) and p is not None:
                problems.append(f"{text}: a placement ({placement_text(p)}) for {n}, which is not a tensor")
            elif type(p).__name__ == "Shard" and not -len(_shape(v)) <= p.dim < len(_shape(v)):
                problems.append(f"{text}: {n} has {len(_shape(v))} dims, so no dim {p.dim} to shard")
    if problems:
        accepted = "; ".join(
            strategy_text(names, list(i) + [None] * (len(names) - len(i)), o) for o, i in found or ()
        )
        raise ShardingRuleError(
            f"{kop.name}: its sharding rule gives DTensor no usable strategy for this call:\n  "
            + "\n  ".join(problems)
            + f"\n  given: {given_text(names, values)}\n  the rule accepts: {accepted or 'nothing'}"
        )


def _is_spec(v: Any) -> bool:
    from tpu_kernels import _compat

    return isinstance(v, _compat.get("DTensorSpec"))


def _shape(v: Any) -> tuple[int, ...]:
    return tuple(v.tensor_meta.shape)
