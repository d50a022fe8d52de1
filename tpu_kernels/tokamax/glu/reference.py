"""Plain-torch reference of gated_linear_unit (SwiGLU, GEGLU, ...), for tests (in float64)
and benchmarks (as baselines)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

ACTIVATIONS = {
    None: lambda x: x,
    "silu": F.silu,
    "swish": F.silu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
}


def gated_linear_unit(x, weight, weight_up=None, *, activation=None, weight_layout="in_out") -> torch.Tensor:
    """SwiGLU/GEGLU/...: activation(x @ w_gate) * (x @ w_up); "out_in" weights are [N, K]."""
    w_gate, w_up = (weight[:, 0], weight[:, 1]) if weight_up is None else (weight, weight_up)
    if weight_layout == "out_in":
        w_gate, w_up = w_gate.T, w_up.T
    return ACTIVATIONS[activation](x @ w_gate) * (x @ w_up)


__all__ = ["ACTIVATIONS", "gated_linear_unit"]
