"""DTensor sharding rules of the Tokamax ops (`sharding=` on each family's `tokamax_op`).

A Tokamax op takes many tensors, some optional, most of them not of one
broadcast shape, so its rule is a function (`tpu_kernels.sharding`'s third
form). `ByName` writes one by parameter name: `strategies(args)` gets the
call's arguments by name (tensors as DTensorSpecs, absent optionals as None,
statics as values) and returns `[(output placements, {param: placement}), ...]`;
a tensor it leaves out is Replicate, and the all-Replicate strategy is always
offered (DTensor redistributes to it when nothing else fits). `ByName` turns
that into register_sharding's positional form. `tokamax_op` binds it to the
op's parameter list when the op is made.

Every rule here shards only dims the op computes independently (batch, rows,
heads, output columns), or gives Partial where the op is linear in a sharded
contraction; the backward rules are derived (tpu_kernels.sharding): a
Replicate input's gradient is Partial when the outputs are sharded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from tpu_kernels.errors import OpDefinitionError

Strategies = Callable[[dict[str, Any]], Iterable[tuple[Sequence[Any], Mapping[str, Any]]]]


def is_spec(v: Any) -> bool:
    from tpu_kernels import _compat

    return isinstance(v, _compat.get("DTensorSpec"))


def shape(v: Any) -> tuple[int, ...]:
    """A DTensorSpec's global shape."""
    return tuple(v.tensor_meta.shape)


def mesh_size(args: Mapping[str, Any]) -> int:
    """The number of devices of the mesh the call's DTensors live on: a dim sharded over
    any sub-mesh splits evenly when its size is a multiple of this."""
    for v in args.values():
        if is_spec(v):
            return v.mesh.size()
    return 1


class ByName:
    """A `sharding=` rule written by parameter name (see the module docstring).

    `description` is what docs/tokamax.md lists for the op (tests check it)."""

    def __init__(self, strategies: Strategies, description: str) -> None:
        self.strategies = strategies
        self.description = description
        self.params: tuple[str, ...] | None = None  # the op's positional parameters, set by bind
        self.n_outputs = 0

    def bind(self, positional: Sequence[str], n_outputs: int) -> None:
        """Called by tokamax_op with the op's positional parameters and its output count."""
        if self.params is not None:
            raise OpDefinitionError(f"tokamax sharding rule ({self.description}): one rule object per op.")
        self.params, self.n_outputs = tuple(positional), n_outputs

    def __call__(self, *args: Any, **kwargs: Any) -> list[tuple[list[Any], list[Any]]]:
        from torch.distributed.tensor import Replicate

        if self.params is None or len(args) > len(self.params):
            raise NotImplementedError(
                f"tokamax sharding rule ({self.description}): not bound to its op's parameters."
            )
        values = {**dict(zip(self.params, args)), **kwargs}
        order = list(self.params[: len(args)]) + list(kwargs)
        tensors = [n for n in order if is_spec(values[n])]
        found: list[tuple[list[Any], list[Any]]] = []
        for outs, ins in [([Replicate()] * self.n_outputs, {}), *self.strategies(values)]:
            if len(outs) != self.n_outputs:
                raise NotImplementedError(
                    f"tokamax sharding rule ({self.description}): a strategy places {len(outs)} "
                    f"outputs of {self.n_outputs}."
                )
            placed = [ins.get(n, Replicate()) if n in tensors else None for n in order]
            found.append((list(outs), placed))
        return found

    def __repr__(self) -> str:
        return f"ByName({self.description!r})"


def rule(description: str) -> Callable[[Strategies], ByName]:
    """Decorator: `@rule("rows (dim 0)")` over a strategies function makes a ByName rule."""

    def make(strategies: Strategies) -> ByName:
        return ByName(strategies, description)

    return make


def describe(sharding: Any) -> str:
    """An op's rule as docs/tokamax.md lists it."""
    if isinstance(sharding, ByName):
        return sharding.description
    if sharding is None:
        return "none"
    return getattr(sharding, "name", repr(sharding))


__all__ = ["ByName", "describe", "is_spec", "mesh_size", "rule", "shape"]
