"""Shared test helpers: dtype-aware tolerances against float64 references, compile checks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch._dynamo.testing


@dataclass(frozen=True)
class Tol:
    rtol: float
    atol: float


# Kernel output vs a float64 reference of the same inputs. The low-precision rows
# are about 2 ulps of the output format at magnitude 1 (bf16 ulp 2^-8, fp16 2^-11):
# kernels accumulate in float32, so the final rounding dominates.
TOL: dict[torch.dtype, Tol] = {
    torch.float64: Tol(1e-10, 1e-12),
    torch.float32: Tol(2e-5, 2e-6),
    torch.float16: Tol(2e-3, 1e-3),
    torch.bfloat16: Tol(1.6e-2, 8e-3),
}

FLOAT_DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def rand(
    *shape: int, dtype: torch.dtype = torch.float32, requires_grad: bool = False, scale: float = 1.0
) -> torch.Tensor:
    """Fresh standard-normal values (never zeros), made in float64 and rounded to dtype."""
    t = (torch.randn(*shape, dtype=torch.float64) * scale).to(dtype)
    return t.requires_grad_(requires_grad)


def assert_close(
    actual: torch.Tensor,
    expected: torch.Tensor,
    dtype: torch.dtype | None = None,
    *,
    scale: float = 1.0,
    what: str = "",
) -> None:
    """`actual` against a float64 `expected`, with `dtype`'s tolerance times `scale`
    (scale: the typical magnitude of the values, e.g. sqrt(K) for a K-long dot product)."""
    dtype = dtype or actual.dtype
    tol = TOL[dtype]
    torch.testing.assert_close(
        actual.to(torch.float64),
        expected.to(torch.float64),
        rtol=tol.rtol,
        atol=tol.atol * scale,
        msg=lambda m: f"{what} ({dtype}): {m}",
    )


def compile_counted(
    fn: Callable, *, backend: str = "aot_eager", dynamic: bool | None = False
) -> tuple[Callable, Any]:
    """torch.compile(fullgraph=True) with a counter of the graphs dynamo produced."""
    counter = torch._dynamo.testing.CompileCounterWithBackend(backend)
    return torch.compile(fn, backend=counter, fullgraph=True, dynamic=dynamic), counter
