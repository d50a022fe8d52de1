"""The Tokamax op families: one folder each, registered here when imported.

A family folder (`tpu_kernels/tokamax/<family>/`) holds, as Tokamax's own
`_src/ops/<family>/` does:

- `op.py`: the ops' implementation tables (`implementation.table`: which Tokamax
  implementation runs where, which has no VJP), the public functions that check and
  convert arguments, and the torch ops behind them (`wrap.public_op`);
- `reference.py`: plain-torch references (the float64 test oracle and the
  benchmarks' baseline), each named as an op's public function in `op.py` and taking
  parameters of the same names, with their defaults (checked mode calls it with the op's
  arguments by name), so that a reference reads and runs alone; their types and shapes
  are written once, on the public function, and not again here;
- `examples.py`: representative TPU calls, which `tpu-kernels check` lowers: one function
  per op, named as the op (`register` makes it the op's `examples`); and small concrete
  CPU calls, `<op>_small` (the op's `sharding_examples`, where the sharding simulation
  runs its rule);
- `shapes.py`: named shapes, `TEST` (small, each an edge case) and `BENCH`
  (real workloads);
- `__init__.py`: the family's public names and its `register(__name__, ...)`.

`FAMILIES` lets cross-cutting code (the fake, lowering and implementation tests,
the benchmarks) iterate every op without a hand-written list.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType

from tpu_kernels import wiring
from tpu_kernels.op import KernelOp
from tpu_kernels.tokamax import implementation


@dataclass(frozen=True)
class Family:
    """One family's ops and what travels with them."""

    name: str  # the folder, e.g. "attention"
    functions: tuple[Callable, ...]  # public functions, re-exported by tpu_kernels.tokamax
    ops: tuple[KernelOp, ...]  # the torch ops (torch.ops.tokamax.*), forward; backward via .backward_op
    implementations: tuple[implementation.OpImplementations, ...]  # one table per Tokamax op
    reference: ModuleType
    examples: ModuleType
    shapes: ModuleType

    def op(self, name: str) -> KernelOp:
        """The family's torch op `tokamax::<name>`."""
        for kop in self.ops:
            if kop.short_name == name:
                return kop
        raise KeyError(
            f"tokamax family {self.name!r} has no op {name!r}; it has {[o.short_name for o in self.ops]}"
        )


FAMILIES: dict[str, Family] = {}


@dataclass(frozen=True)
class FamilyExamples:
    """An op's example calls: the function `name` of its family's `examples.py`, looked up
    when called (`tokamax_op` gives every op defined in a family's `op.py` these as its
    `examples` and `sharding_examples`; `register` checks the functions exist)."""

    package: str  # tpu_kernels.tokamax.<family>
    name: str  # the op's name, or `<op>_small` for the sharding simulation's calls

    def function(self) -> Callable | None:
        return getattr(wiring.registered(f"{self.package}.examples"), self.name, None)

    def __call__(self) -> Sequence[tuple[tuple, dict]]:
        return self.function()()


def register(package: str, *, functions: Sequence[Callable], ops: Sequence[KernelOp]) -> Family:
    """Register the family `package` (its `__init__` calls `register(__name__, ...)` once):
    its `op.IMPLEMENTATIONS` are checked to be in `implementation.OPS`, its `reference`, `examples`
    and `shapes` modules are imported, and each op's TPU example calls (what `tpu-kernels
    check` lowers) are the function of the op's name in `examples.py`."""
    name = package.rpartition(".")[2]
    if name in FAMILIES:
        raise ValueError(f"tokamax: the family {name!r} is already registered.")
    module = {part: wiring.registered(f"{package}.{part}") for part in _PARTS}
    family = Family(
        name,
        functions=tuple(functions),
        ops=tuple(ops),
        implementations=module["op"].IMPLEMENTATIONS,
        reference=module["reference"],
        examples=module["examples"],
        shapes=module["shapes"],
    )
    for kop in family.ops:  # each op's examples (FamilyExamples) name functions that exist
        _examples(family, kop)
        _examples(family, kop, "_small")
    for table in family.implementations:  # `implementation.table` registered them as op.py ran
        if implementation.OPS.get(table.op) is not table:
            raise ValueError(
                f"tokamax family {name!r}: {table.op!r} in op.IMPLEMENTATIONS was not made with "
                "implementation.table()."
            )
    FAMILIES[name] = family
    return family


_PARTS = ("op", "reference", "examples", "shapes")


def _examples(family: Family, kop: KernelOp, suffix: str = "") -> Callable:
    """The function of `family.examples` giving `kop`'s example calls (`suffix` "_small": the
    sharding simulation's), which its FamilyExamples call; else a ValueError."""
    examples = getattr(family.examples, kop.short_name + suffix, None)
    if not callable(examples):
        what = (
            "small concrete CPU calls (valid values) the sharding simulation runs"
            if suffix
            else "the TPU calls that `tpu-kernels check` lowers"
        )
        raise ValueError(
            f"tokamax family {family.name!r}: {family.examples.__name__} has no function "
            f"{kop.short_name}{suffix}() giving {what} of {kop.name}."
        )
    return examples


def all_ops() -> list[KernelOp]:
    """Every forward op of every family, in registration order."""
    return [kop for family in FAMILIES.values() for kop in family.ops]


__all__ = ["FAMILIES", "Family", "FamilyExamples", "all_ops", "register"]
