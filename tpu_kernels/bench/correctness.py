"""Is a candidate's result right? Compared with a float64 reference at the dtype's tolerance."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import jax
import numpy as np
import torch

from tpu_kernels.testing import TOL  # noqa: E402  (the test suite's table: one truth)

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {dt: (t.rtol, t.atol) for dt, t in TOL.items()}


@dataclass(frozen=True)
class Check:
    passed: bool
    max_abs_err: float
    max_rel_err: float
    rtol: float
    atol: float

    def to_dict(self) -> dict:
        return asdict(self)


def as_tensor(out: Any) -> torch.Tensor:
    """A candidate's output (tensor, JAX array, or a tuple whose first item is one) -> a CPU tensor."""
    if isinstance(out, (tuple, list)):
        out = out[0]
    if isinstance(out, jax.Array):
        return torch.from_numpy(np.asarray(out).astype(np.float64))
    return out.detach().cpu()


def check(actual: Any, expected: torch.Tensor, dtype: torch.dtype, scale: float = 1.0) -> Check:
    """allclose(actual, expected) with the dtype's (rtol, atol * scale); a NaN fails."""
    rtol, atol = TOLERANCES.get(dtype, TOLERANCES[torch.float32])
    atol *= scale
    a = as_tensor(actual).to(torch.float64)
    e = expected.detach().cpu().to(torch.float64)
    if a.shape != e.shape:
        return Check(False, float("inf"), float("inf"), rtol, atol)
    diff = torch.where(a == e, 0.0, (a - e).abs())  # equal infinities agree; NaN never does
    if not diff.numel():
        return Check(True, 0.0, 0.0, rtol, atol)
    max_abs = float(diff.max())
    max_rel = float((diff / e.abs().clamp_min(1e-30)).max())
    passed = bool((diff <= atol + rtol * e.abs()).all())
    return Check(passed, max_abs, max_rel, rtol, atol)
