"""A kernel family's block configuration: one frozen dataclass per family, `pallas.Config`, in
the manner of JAX's flash-attention `BlockSizes` and Tokamax's `Config`.

- Its fields are the op's block parameters, in the op's order (None: the call's default).
- `SPACE` holds each field's candidates: the tuner's space (the op's `tune=`, `space()`), and
  the chip runner's tuning sweeps start from it.
- `default(...)` gives the blocks a call that leaves them unset runs with. The kernel's wrapper
  takes its unset blocks from it, so the tuner's, the lowering check's and the chip runner's
  default is the kernel's own.
- `kwargs()` gives the fields as the op's keyword arguments.

A family's defaults are one choice for every chip: they are sized to the VMEM a shipped kernel
may ask for on any of them (`_vmem`) and priced on the v5e's records. So `default` takes a
call's shapes and dtype, and for families whose passes differ, which pass; it takes no chip.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from tpu_kernels.kernels._blocks import ROW_BLOCKS


@dataclass(frozen=True)
class BlockConfig:
    """The base of a family's `Config`: subclasses add the block fields, `SPACE` and `default`."""

    SPACE: ClassVar[Mapping[str, Sequence[int]]] = {}

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The block parameters, in the op's order."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def space(cls) -> dict[str, list[int]]:
        """Each block parameter's candidates for the tuner (a fresh dict: the op's `tune=`)."""
        return {name: list(cls.SPACE[name]) for name in cls.names()}

    def kwargs(self) -> dict[str, Any]:
        """The fields as the op's keyword arguments."""
        return {name: getattr(self, name) for name in self.names()}


@dataclass(frozen=True)
class RowsConfig(BlockConfig):
    """The base of a row family's `Config` (rmsnorm, softmax, scale_add): block_rows whole rows
    (of the last dimension) per grid step, forward and backward, among `_blocks.ROW_BLOCKS`."""

    block_rows: int | None = None
    SPACE = ROW_BLOCKS


__all__ = ["BlockConfig", "RowsConfig"]
