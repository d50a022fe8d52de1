"""The inputs a predicted tuning checks its candidates' results on, in the CPU interpreter.

A prediction ranks a TPU's candidates by the cost model without running them; the results are
still checked (a config that computes the wrong thing must never be chosen, however fast), on
the CPU, where Pallas kernels run in JAX's interpreter. The interpreter is slow (a grid step
costs about a millisecond), so a call whose tensors are bigger than `CHECK_ELEMENTS` elements
is checked at a smaller shape: the largest dimension (every dimension of that length, in every
tensor, so that dims that must agree still agree) is halved until each tensor fits. The report
says at which shapes the results were checked.
"""

from __future__ import annotations

import torch

CHECK_ELEMENTS = 1 << 18
"""The most elements a tensor of the CPU check may have: 256Ki (1 MiB of float32); a
[512, 512] matmul step in the interpreter takes milliseconds."""

_SMALLEST = 8  # never halve a dimension below this: a block of one sublane tile


def check_shapes(shapes: list[list[int] | None], limit: int = CHECK_ELEMENTS) -> list[list[int] | None]:
    """`shapes` (None: not a tensor) with the largest dimension halved until every tensor has at
    most `limit` elements; dims of equal length are halved together."""
    out = [list(s) if s is not None else None for s in shapes]

    def too_big() -> bool:
        return any(s is not None and _numel(s) > limit for s in out)

    while too_big():
        dims = [d for s in out if s is not None for d in s]
        largest = max(dims)
        if largest <= _SMALLEST:
            break
        half = (largest + 1) // 2
        out = [[half if d == largest else d for d in s] if s is not None else None for s in out]
    return out


def check_inputs(args: tuple, kwargs: dict) -> tuple[tuple, dict, list]:
    """(args, kwargs, their tensors' shapes) to check a call's candidates on: the call's own CPU
    tensors when they fit, else random CPU tensors (a fixed seed; integer ones zero) of the
    same dtypes at `check_shapes` of the call's shapes (meta tensors, a TPU's, or too big)."""
    names = list(kwargs)
    values = [*args, *kwargs.values()]
    shapes = [list(v.shape) if isinstance(v, torch.Tensor) else None for v in values]
    small = check_shapes(shapes)
    own = small == shapes and all(not isinstance(v, torch.Tensor) or v.device.type == "cpu" for v in values)
    if own:
        return tuple(args), dict(kwargs), shapes
    gen = torch.Generator().manual_seed(0)
    made = [_random(v, s, gen) if isinstance(v, torch.Tensor) else v for v, s in zip(values, small)]
    return tuple(made[: len(args)]), dict(zip(names, made[len(args) :])), small


def _random(t: torch.Tensor, shape: list[int], gen: torch.Generator) -> torch.Tensor:
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return torch.randn(shape, generator=gen).to(t.dtype)
    return torch.zeros(shape, dtype=t.dtype)


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


__all__ = ["CHECK_ELEMENTS", "check_inputs", "check_shapes"]
