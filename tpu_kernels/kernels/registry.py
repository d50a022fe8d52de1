"""The shipped kernel families: one folder each, registered here when imported.

A family folder (`tpu_kernels/kernels/<family>/`) holds:

- `pallas.py`: the kernel and its JAX wrapper (pure JAX, no torch), and `Config`, its blocks'
  frozen configuration (`_config.py`): the op's `tune=` is `Config.space()`;
- `reference.py`: the torch reference named as the op (`reference.<op>`, the tests' and
  the benchmarks' baseline) and `CHECK`, checked mode's declaration (`tolerance.Reference`);
- `shapes.py`: named shapes, `TEST` (small, each an edge case), `BENCH` (real workloads),
  `QUICK` (the key of the one BENCH size of `tpu-kernels bench --quick`) and optionally
  `REDUCED` (the keys of the BENCH sizes a CPU times by default: Pallas runs in an
  interpreter there; without it, every BENCH size);
- optionally `helion.py` (the Helion twin as a torch op) and `helion_kernel.py`;
- `__init__.py`: the torch op (`tpu_kernel(...)`) and, last, `register(__name__, ...)`.

`tpu_kernels.kernels` imports every family folder, so the folder and its registration
are all a new family needs: `FAMILIES` lets cross-cutting code (the benchmark suite
`bench/kernels.py`, the start-up and agreement benchmarks, the cache, check and suite
tests, the generated docs tables, `tpu_kernels.kernels.helion_ops`) iterate every family
without a hand-written list.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch

from tpu_kernels import wiring
from tpu_kernels.op import KernelOp

# (a value of shapes.TEST or shapes.BENCH, dtype, torch.device) -> the op's tensor arguments
Inputs = Callable[[Any, torch.dtype, torch.device], tuple[torch.Tensor, ...]]


@dataclass(frozen=True)
class Family:
    """One family's op and what travels with it."""

    name: str  # the folder, e.g. "softmax"
    package: str  # its module, e.g. "tpu_kernels.kernels.softmax"
    op: KernelOp  # the Pallas op, torch.ops.tpu_kernels.<op>
    reference: ModuleType  # reference.<op> (torch) and reference.CHECK
    shapes: ModuleType  # TEST, BENCH, QUICK, REDUCED
    inputs: Inputs  # fresh random tensor arguments for one shape
    kwargs: Mapping[str, Any] = field(default_factory=dict)  # statics every test and benchmark call passes
    helion: str | None = None  # the Helion twin's name in `<package>.helion`, or None
    # the benchmark's: its torch baseline (default: the reference), the length of the sums
    # behind each output (the tolerance grows with it) and the flop count (the roofline)
    baseline: Callable | None = None
    reduction: Callable[[Any], int] = lambda shape: 1
    flops: Callable[[Any], float] | None = None

    @property
    def torch_reference(self) -> Callable:
        """The family's torch reference, `reference.<op>`."""
        return getattr(self.reference, self.op.short_name)

    @property
    def check(self) -> Any:
        """Checked mode's declaration of the op (`reference.CHECK`)."""
        return self.reference.CHECK

    def helion_module(self) -> ModuleType | None:
        """`<package>.helion` (importing it imports Helion), or None for a family without a twin."""
        return wiring.registered(f"{self.package}.helion") if self.helion else None

    def helion_op(self) -> KernelOp | None:
        """The Helion twin (importing Helion), or None."""
        module = self.helion_module()
        return getattr(module, self.helion) if module is not None else None

    def test_inputs(self, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict[str, tuple]:
        """Fresh inputs for each of `shapes.TEST`, by shape name."""
        dev = torch.device(device)
        return {name: self.inputs(shape, dtype, dev) for name, shape in self.shapes.TEST.items()}

    def quick_shape(self) -> Any:
        """The one BENCH size of a quick benchmark run."""
        return self.shapes.BENCH[self.shapes.QUICK]

    def reduced_shapes(self) -> list[Any]:
        """The BENCH sizes of a reduced benchmark run (`shapes.REDUCED`; default: all of them)."""
        names = getattr(self.shapes, "REDUCED", tuple(self.shapes.BENCH))
        return [self.shapes.BENCH[n] for n in names]


FAMILIES: dict[str, Family] = {}


def register(
    package: str,
    *,
    op: KernelOp,
    inputs: Inputs,
    kwargs: Mapping[str, Any] | None = None,
    helion: str | None = None,
    baseline: Callable | None = None,
    reduction: Callable[[Any], int] | None = None,
    flops: Callable[[Any], float] | None = None,
) -> Family:
    """Register the family `package` (its `__init__` ends with `register(__name__, ...)`):
    its `reference` and `shapes` modules are imported and checked to hold `reference.<op>`,
    `reference.CHECK`, `shapes.TEST`, `shapes.BENCH`, `shapes.QUICK` (a key of BENCH) and, if
    given, `shapes.REDUCED` (keys of BENCH)."""
    name = package.rpartition(".")[2]
    if name in FAMILIES:
        raise ValueError(f"kernel family {name!r} is already registered (by {FAMILIES[name].package}).")
    reference = wiring.registered(f"{package}.reference")
    shapes = wiring.registered(f"{package}.shapes")
    for module, attr in (
        (reference, op.short_name),
        (reference, "CHECK"),
        (shapes, "TEST"),
        (shapes, "BENCH"),
    ):
        if not hasattr(module, attr):
            raise ValueError(f"kernel family {name!r}: {module.__name__} has no {attr!r}.")
    if getattr(shapes, "QUICK", None) not in shapes.BENCH:
        raise ValueError(
            f"kernel family {name!r}: {shapes.__name__}.QUICK must name one of BENCH's sizes "
            f"({', '.join(shapes.BENCH)}), got {getattr(shapes, 'QUICK', None)!r}."
        )
    reduced = getattr(shapes, "REDUCED", tuple(shapes.BENCH))
    if isinstance(reduced, str) or not reduced or any(n not in shapes.BENCH for n in reduced):
        raise ValueError(
            f"kernel family {name!r}: {shapes.__name__}.REDUCED must be a non-empty tuple of BENCH's "
            f"size names ({', '.join(shapes.BENCH)}), got {reduced!r}."
        )
    family = Family(
        name,
        package,
        op,
        reference,
        shapes,
        inputs,
        dict(kwargs or {}),
        helion,
        baseline,
        reduction or (lambda shape: 1),
        flops,
    )
    FAMILIES[name] = family
    return family


def randn(
    shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, scale: float = 1.0
) -> torch.Tensor:
    """Standard-normal values drawn in float32 and rounded to `dtype`, on `device` (never zeros)."""
    return (torch.randn(*shape, device=device) * scale).to(dtype)


__all__ = ["FAMILIES", "Family", "randn", "register"]
