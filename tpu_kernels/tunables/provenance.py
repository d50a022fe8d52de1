"""Where a call's tuned config came from, and whether the entry still describes the kernel.

`Looked` is what one lookup found (the tunables it fills, how: an exact entry, another
version's, the nearest bucket's, the declared defaults, and why), what `op.tuned_config(...)`
returns and what `TPU_KERNELS_PRINT_TUNING=1` prints, once per distinct lookup (as Triton's
`TRITON_PRINT_AUTOTUNING` prints each autotuned kernel's config).

An entry records the digest of the kernel's traced program (`program`), the key the on-disk
kernel cache stores executables by (`runtime.cache.program`): the jaxpr traced at the entry's
shapes and dtypes with its config, the declared defaults of the other statics (a static without
a default: the call's value). A lookup traces the same and serves the entry only when the
digests agree: an edited kernel is not served the choices tuned for its old code.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tpu_kernels.tunables import table as tables

PRINT_ENV = "TPU_KERNELS_PRINT_TUNING"

_PRINTED: set[tuple] = set()


@dataclass(frozen=True)
class Looked:
    """One lookup's answer: `fill`, the tunables it gives the call (the others are the caller's
    or the declared defaults); `how` it was found ("exact", "other-version", "nearest",
    "defaults"); the `entry` used, if any; `why` the defaults ran, or what was borrowed."""

    fill: Mapping[str, Any]
    how: str
    entry: tables.Entry | None = None
    why: str = ""
    chip: str = ""
    dtypes: tuple = ()
    bucket: tuple = field(default=())


@dataclass(frozen=True)
class TunedConfig:
    """What `op.tuned_config(*args, **kwargs)` returns: the config a call would run with (every
    tunable), and where each part came from."""

    op: str
    config: dict[str, Any]
    source: str  # "given" (all passed by the caller), "defaults", or the entry's: "measured"/"predicted"
    how: str  # "exact", "other-version", "nearest", "defaults", "given"
    chip: str
    bucket: tuple
    entry: tables.Entry | None
    given: tuple[str, ...]  # the tunables the caller passed
    why: str = ""

    def __str__(self) -> str:
        cfg = ", ".join(f"{k}={v!r}" for k, v in self.config.items())
        where = f"{self.how} entry ({self.source}" if self.entry is not None else self.how
        if self.entry is not None:
            tuned_at = self.entry.evidence.get("tuned_at")
            where += f", chip {self.entry.chip}, bucket {list(self.entry.bucket)}"
            where += f", tuned {tuned_at})" if tuned_at else ")"
        extra = f"; passed by the caller: {', '.join(self.given)}" if self.given else ""
        why = f" ({self.why})" if self.why else ""
        return f"{self.op} on {self.chip!r}, bucket {list(self.bucket)}: {cfg} from {where}{why}{extra}"


def print_lookup(op: str, looked: Looked, config: str) -> None:
    """With TPU_KERNELS_PRINT_TUNING=1, one stderr line per distinct lookup."""
    if os.environ.get(PRINT_ENV) != "1":
        return
    entry = looked.entry
    key = (
        op,
        looked.chip,
        looked.dtypes,
        looked.bucket,
        config,
        looked.how,
        None if entry is None else entry.key,
    )
    if key in _PRINTED:
        return
    _PRINTED.add(key)
    src = (
        f"{looked.how} entry {entry.source} on {entry.chip} bucket {list(entry.bucket)} (tpu_kernels {entry.toolkit})"
        if entry is not None
        else f"declared defaults ({looked.why or 'no entry'})"
    )
    print(
        f"tpu_kernels tuning: {op} chip={looked.chip} dtypes={list(looked.dtypes)} "
        f"bucket={list(looked.bucket)}: {config} from {src}",
        file=sys.stderr,
        flush=True,
    )


def forget_printed() -> None:
    _PRINTED.clear()


def digest_values(
    signature: Any,
    tunable_names: tuple[str, ...],
    values: list[Any],
    shapes: Any,
    dtypes: tuple,
    config: Mapping,
) -> list[Any] | None:
    """The arguments an entry's program is traced with (module docstring), one per parameter
    of `signature`, from the call's `values`; None when the entry's shapes cannot rebuild its
    tensors (a list of tensors, a missing record)."""
    import jax
    import jax.numpy as jnp

    if not isinstance(shapes, (list, tuple)):
        return None
    shapes_left, dtypes_left = list(shapes), list(dtypes)
    out = []
    for p, v in zip(signature.params, values):
        if p.is_tensor:
            if not shapes_left or not dtypes_left:
                return None
            shape, dtype = shapes_left.pop(0), dtypes_left.pop(0)
            if shape is None and dtype is None:
                out.append(None)
                continue
            if not isinstance(shape, (list, tuple)) or not isinstance(dtype, str):
                return None
            try:
                out.append(jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype)))
            except TypeError:
                return None
        elif p.name in tunable_names:
            out.append(config[p.name])
        else:
            out.append(v if p.default is inspect.Parameter.empty else p.default)
    return out


__all__ = ["PRINT_ENV", "Looked", "TunedConfig", "digest_values", "print_lookup"]
