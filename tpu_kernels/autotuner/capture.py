"""The op calls a torch function makes, kept for tuning: one per op and call signature.

`capture(fn, *inputs)` runs `fn` once, eagerly (torch.compile inside it is disabled for the
run, so every call reaches its op with real tensors), and keeps each call of an op that can be
tuned: an op with `tune=` (tpu_kernels tunes it), a Tokamax op (Tokamax's autotuner does) or
a Helion kernel (Helion's does). Calls that would share a tuning entry (same op, device,
dtypes and shape bucket, same tunables fixed by the caller) are kept once. The tensors are
copied when captured: `fn` may change them afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tpu_kernels.tunables import recording as hook


@dataclass
class Call:
    op: Any  # the KernelOp
    args: tuple
    kwargs: dict
    kind: str  # "tunable", "tokamax" or "helion"

    @property
    def device(self) -> torch.device:
        for v in (*self.args, *self.kwargs.values()):
            if isinstance(v, torch.Tensor):
                return v.device
            if isinstance(v, (list, tuple)):
                for t in v:
                    if isinstance(t, torch.Tensor):
                        return t.device
        return torch.device("cpu")


def kind_of(op: Any) -> str | None:
    """How `op` is tuned: "tunable" (declared tune=), "tokamax", "helion", or None."""
    if op.tunables is not None:
        return "tunable"
    if op.ns == "tokamax" or op.implementation_table is not None:
        return "tokamax"
    if op.source.kind == "helion":
        return "helion"
    return None


def copy_value(v: Any) -> Any:
    """An argument with its tensors copied (new memory, same values); anything else as it is."""
    if isinstance(v, torch.Tensor):
        return v.detach().clone()
    if isinstance(v, (list, tuple)) and v and all(isinstance(t, torch.Tensor) for t in v):
        return type(v)(t.detach().clone() for t in v)
    return v


def _signature_of(op: Any, kind: str, args: tuple, kwargs: dict) -> tuple:
    def meta(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return (str(v.device), str(v.dtype), tuple(v.shape) if kind != "tunable" else None)
        if isinstance(v, (list, tuple)):
            return tuple(meta(x) for x in v)
        return v if isinstance(v, (int, float, str, bool, type(None))) else repr(v)

    key: tuple = (
        op.name,
        tuple(meta(a) for a in args),
        tuple(sorted((k, meta(v)) for k, v in kwargs.items())),
    )
    if kind == "tunable":  # calls in one shape bucket share an entry
        key += call_metadata(op, args, kwargs)[2:]
    return key


def call_metadata(op: Any, args: tuple, kwargs: dict) -> tuple[list, tuple, tuple]:
    """(the tensors' shapes, their dtypes, the call's shape bucket) as the op's lookup keys it."""
    return op.tuned.key_of(args, kwargs)


def capture(fn: Callable, *inputs: Any, **kwargs: Any) -> list[Call]:
    """Run `fn(*inputs, **kwargs)` once and return the tunable op calls it made (see the module
    docstring), in the order first made."""
    seen: dict[tuple, Call] = {}

    def keep(op: Any, args: tuple, kw: dict) -> None:
        if torch.compiler.is_compiling():
            return
        kind = kind_of(op)
        if kind is None:
            return
        key = _signature_of(op, kind, args, kw)
        if key not in seen:
            seen[key] = Call(op, tuple(copy_value(a) for a in args), {k: copy_value(v) for k, v in kw.items()}, kind)

    with hook.recording(keep), contextlib.ExitStack():
        torch.compiler.disable(fn, recursive=True)(*inputs, **kwargs)
    return list(seen.values())
