"""Which Tokamax implementation an op runs with: chosen by device, overridable per call.

Every Tokamax op takes `implementation=`: one name ("xla", "mosaic", ...) or a
fallback order. Here the order is written as one string, "mosaic,xla": Tokamax
tries each in turn and moves on when one raises NotImplementedError (a config
that implementation does not support). The ops in `tpu_kernels.tokamax` take
the same string as a static argument; their Python functions resolve
`implementation=None` by the tensors' device with `resolve_implementation`:

- cpu: "xla" (every other implementation is a GPU or TPU kernel);
- cuda: Tokamax's GPU default order (e.g. "mosaic,triton,xla" for attention);
- tpu: Tokamax's TPU default order (e.g. "mosaic,xla" for attention).

Names Tokamax could not import on this install (a Triton kernel without
Triton, say) are dropped from a default order and refused when asked for.
`resolve_implementation(op, device, requested)` is public, so the choice can be
shown (a benchmark report prints it) and tested.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import torch

from tpu_kernels import _compat
from tpu_kernels.errors import TpuKernelsError
from tpu_kernels.runtime import devices

# Tokamax's platforms, by the names of the registered devices (tpu_kernels.runtime.devices) they
# are; a device registered later runs Tokamax ops only once these tables name it.
CPU, CUDA, TPU = "cpu", "cuda", "tpu"
# Where an implementation runs: the platform sets the families' tables are written with.
EVERYWHERE = frozenset({CPU, CUDA, TPU})
GPU_ONLY = frozenset({CUDA})
TPU_ONLY = frozenset({TPU})
ACCELERATORS = frozenset({CUDA, TPU})
# An op's Mosaic kernels for both chips, and "mosaic", Tokamax's alias for mosaic_gpu on
# NVIDIA GPUs and mosaic_tpu elsewhere.
MOSAIC_BOTH = {"mosaic": ACCELERATORS, "mosaic_tpu": TPU_ONLY, "mosaic_gpu": GPU_ONLY}
SRC = _compat.TOKAMAX_OPS  # where Tokamax's api modules (and their registries) live


class ImplementationError(TpuKernelsError, NotImplementedError):
    """A Tokamax implementation was asked for on a device it does not run on,
    or is not available on this install."""


@dataclass(frozen=True)
class OpImplementations:
    """The implementations of one Tokamax op and where each runs.

    Each family declares its ops' tables in its `op.py` (sources: the op's `api.py`
    in Tokamax 0.0.17, its registry and `_DEFAULT_IMPLEMENTATIONS`, and the
    `supported_on` checks of its kernels) with `table`, which registers them here.
    """

    op: str  # Tokamax's name, e.g. "dot_product_attention"
    runs_on: dict[str, frozenset[str]]  # implementation -> platforms
    defaults: dict[str, str]  # platform -> default order ("a,b")
    api_module: str  # Tokamax module whose IMPLEMENTATIONS registry tells what imported
    registry: str = "IMPLEMENTATIONS"
    no_vjp: tuple[str, ...] = ()  # kernels without a VJP: the backward differentiates the rest


def table(
    op: str,
    kernels: dict[str, frozenset[str]],
    *,
    cuda: str = "xla",
    tpu: str = "xla",
    api: str | None = None,
    registry: str = "IMPLEMENTATIONS",
    no_vjp: tuple[str, ...] = (),
) -> OpImplementations:
    """Register the table of the Tokamax op `op`, whose kernels are `kernels` (implementation
    -> platforms) besides "xla", which every Tokamax op has and which runs everywhere.
    `cuda` and `tpu` are the default orders there; on CPU only "xla" runs. `api`: the
    Tokamax package under `tokamax._src.ops` whose `api` module holds the op's `registry`
    (default: the op's name). `no_vjp`: kernels Tokamax gives no VJP (`tokamax_op`
    differentiates the rest of the order).

    An order naming a kernel the table does not run on that platform is an error here,
    when the family is imported, rather than a wrong default at the first call.
    """
    runs_on = {"xla": EVERYWHERE, **kernels}
    defaults = {CPU: "xla", CUDA: cuda, TPU: tpu}
    for platform, order in defaults.items():
        wrong = [n for n in order.split(",") if platform not in runs_on.get(n, ())]
        if wrong:
            raise ValueError(
                f"tokamax: the default order {order!r} of {op!r} on {platform} names "
                f"{wrong}, which the table does not run there."
            )
    unknown = [n for n in no_vjp if n not in runs_on]
    if unknown:
        raise ValueError(f"tokamax: no_vjp names {unknown}, which are not implementations of {op!r}.")
    (spec,) = register(OpImplementations(op, runs_on, defaults, f"{SRC}{api or op}.api", registry, no_vjp))
    return spec


# Filled by `table` as each family's op.py is imported (`tpu_kernels.tokamax` imports them all).
OPS: dict[str, OpImplementations] = {}
# The implementation names Tokamax could import on this install, per op.
REGISTERED: dict[str, frozenset[str]] = {}


# Aliases Tokamax resolves itself: "mosaic" is available when its target is.
_ALIASES = {"mosaic": ("mosaic_tpu", "mosaic_gpu")}


def _registered(spec: OpImplementations) -> frozenset[str]:
    """The names Tokamax's registry holds on this install (its backends import lazily
    and are skipped when their dependency is missing)."""
    try:
        registry = getattr(importlib.import_module(spec.api_module), spec.registry)
    except (ImportError, AttributeError):  # pragma: no cover - a Tokamax that moved its registry
        return frozenset(spec.runs_on)  # cannot tell; let Tokamax decide
    names = set(registry)
    for alias, targets in _ALIASES.items():
        if any(t in names for t in targets):
            names.add(alias)
    return frozenset(names)


def register(*tables: OpImplementations) -> tuple[OpImplementations, ...]:
    """Add ops' implementation tables. What Tokamax imported is read here, once, so
    resolving is plain dict lookups (torch.compile traces it)."""
    for table in tables:
        if table.op in OPS:
            raise ValueError(f"tokamax: the implementations of {table.op!r} are already registered.")
        OPS[table.op] = table
        REGISTERED[table.op] = _registered(table)
    return tables


META = "meta"


def platform_of(op: str, device: torch.device | str) -> str:
    """The platform of a tensor's device: cpu, cuda, tpu, or meta; anything else is an error naming `op`."""
    kind = device if isinstance(device, str) else device.type
    kind = kind.split(":")[0]
    if kind == META:
        return kind
    try:  # the device registry knows each type's aliases ("privateuseone" is the TPU)
        kind = devices.get(kind).name
    except KeyError:
        pass
    if kind in EVERYWHERE:
        return kind
    raise ValueError(
        f"tokamax.{op}: tensors on {kind!r} are not supported; Tokamax ops run on "
        f"{', '.join(sorted(EVERYWHERE))} tensors (the platforms tokamax/implementation.py names)."
    )


_RESOLVED: dict[tuple[str, str, str | None, frozenset | None], str] = {}


def resolve_implementation(op: str, device: torch.device | str, requested: str | None = None) -> str:
    """The implementation (or fallback order, "a,b") `op` runs with for tensors on `device`.

    `requested=None` gives the device's default. A requested name that does not
    run on that device, or that this install lacks, raises ImplementationError
    naming the op, the argument and the choices that would work. Answers are kept per
    (op, device type, request): every call of an op asks (tables and the installed
    implementations do not change once registered); errors are not kept.
    """
    kind = device if isinstance(device, str) else device.type
    key = (op, kind, requested, REGISTERED.get(op))  # what is installed is part of the answer
    hit = _RESOLVED.get(key)
    if hit is None:
        hit = _RESOLVED[key] = _resolve(op, kind, requested)
    return hit


def _resolve(op: str, device: str, requested: str | None) -> str:
    spec = OPS.get(op)
    if spec is None:
        raise ValueError(f"resolve_implementation: unknown op {op!r}; known: {', '.join(OPS)}.")
    platform = platform_of(op, device)
    registered = REGISTERED[op]
    if platform == META:  # shapes only (the op's fake runs): nothing to choose by
        platform = CPU if requested is None else _first_platform(spec, requested)
    if requested is None:
        names = [n for n in spec.defaults[platform].split(",") if n in registered]
        return ",".join(names) if names else "xla"
    names = [n.strip() for n in requested.split(",")]
    for name in names:
        if name not in spec.runs_on:
            raise ValueError(
                f"tokamax.{op}: implementation={requested!r}: {name!r} is not a Tokamax "
                f"implementation of this op; choose from {', '.join(sorted(spec.runs_on))} "
                "(or a fallback order such as 'mosaic,xla', or None to choose by device)."
            )
    usable = [n for n in names if platform in spec.runs_on[n]]
    if not usable:
        where = ", ".join(f"{n!r} runs on {'/'.join(sorted(spec.runs_on[n]))}" for n in names)
        here = ", ".join(repr(n) for n, p in spec.runs_on.items() if platform in p)
        raise ImplementationError(
            f"tokamax.{op}: implementation={requested!r} cannot run on {platform} tensors ({where}). "
            f"On {platform} use implementation={here.split(', ')[0]} (choices: {here}), or "
            "implementation=None to choose by device."
        )
    missing = [n for n in usable if n not in registered]
    if len(missing) == len(usable):
        raise ImplementationError(
            f"tokamax.{op}: implementation={requested!r} is not available on this install "
            f"(Tokamax could not import {', '.join(repr(n) for n in missing)}; it has "
            f"{', '.join(sorted(registered))}). Install its dependency, or use implementation=None."
        )
    # Names that cannot run here are dropped, as Tokamax's own fallback would skip them.
    return ",".join(n for n in usable if n in registered)


def _first_platform(spec: OpImplementations, requested: str) -> str:
    """For meta tensors: a platform the first requested name runs on (unknown names fail later)."""
    name = requested.split(",")[0].strip()
    return min(spec.runs_on.get(name, {CPU}))


def tokamax_implementation(implementation: str | None) -> str | tuple[str, ...] | None:
    """Our static string -> what Tokamax's `implementation=` takes (a name or a tuple)."""
    if implementation is None:
        return None
    names = tuple(n.strip() for n in implementation.split(","))
    return names[0] if len(names) == 1 else names


def implementations(op: str, platform: str | None = None) -> tuple[str, ...]:
    """Tokamax's implementations of `op`, optionally only those that run on `platform`."""
    spec = OPS[op]
    return tuple(n for n, p in spec.runs_on.items() if platform is None or platform in p)


__all__ = [
    "ImplementationError",
    "OPS",
    "OpImplementations",
    "implementations",
    "platform_of",
    "register",
    "resolve_implementation",
    "table",
    "tokamax_implementation",
]
