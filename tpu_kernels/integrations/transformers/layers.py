"""RMSNorm and gated-MLP forwards that keep each HF family's arithmetic, on Tokamax ops.

Both forwards are module-level functions bound to the HF module (instance patch) or set
as the class's forward (class patch), so patched models deep-copy and pickle.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from tpu_kernels.dispatch.buckets import bucket_size, powers_of_two

# Token rows of the norms and gated MLPs, padded like the shipped kernels' rows
# (docs/buckets.md): a prefill's rows to a power of two up to 128 (at least the dtype's
# sublane tile), then multiples of 128, so a new prompt length in a bucket compiles
# nothing. One row - a decode step at batch 1, generation's most frequent call - runs as
# it is (ONE_ROW_AS_IS): its own executable, compiled once per generation, rather than a
# pad to the tile and a slice on every step (bench/generate.py --breakdown prints the rows
# and the step time; docs/performance.md has its figures).
ROWS = powers_of_two(128)
ONE_ROW_AS_IS = True

# HF activation name (ACT2FN key) -> tokamax.gated_linear_unit's. Others leave the MLP as HF's.
# "gelu_pytorch_tanh" is F.gelu(approximate="tanh") and "gelu" the exact erf GELU in HF, as
# "gelu_tanh" and "gelu" are in the op.
ACTIVATIONS = {
    "silu": "silu",
    "swish": "silu",
    "gelu": "gelu",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
}


def on_padded_rows(
    module: torch.nn.Module, fn: Callable[..., torch.Tensor], x: torch.Tensor, *args, **kwargs
):
    """fn(x, *args, **kwargs) for a row-wise fn (each row of x's last dim on its own), with
    x's rows flattened and padded with zeros to their bucket (ROWS), the result's rows
    sliced back. Unpadded when the module was patched with buckets=False, when the sizes
    are symbolic (torch.compile with dynamic shapes: one graph serves every length), or for
    a single row (ONE_ROW_AS_IS)."""
    if not getattr(module, "_tpu_kernels_buckets", True) or not all(isinstance(d, int) for d in x.shape):
        return fn(x, *args, **kwargs)
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    if rows == 1 and ONE_ROW_AS_IS:
        if x.dim() >= 2:  # as it is, not even reshaped: a decode step's [1, 1, C]
            return fn(x, *args, **kwargs)
        size = 1  # a 1-D [C] (nn.Linear takes one): the ops want [rows, C]
    else:
        size = bucket_size(rows, ROWS, x.dtype)
    # always the 2-D [rows, hidden] call, padded or not: a length that fills its bucket
    # exactly (a prompt of 8 tokens) then shares the bucket's executable with the shorter ones
    flat = x.reshape(rows, x.shape[-1])
    if size == rows:
        out = fn(flat, *args, **kwargs)
    else:
        out = fn(F.pad(flat, (0, 0, 0, size - rows)), *args, **kwargs)[:rows]
    return out.reshape(*x.shape[:-1], out.shape[-1])


def layer_norm(*args, **kwargs):
    """tpu_kernels.tokamax.layer_norm, imported at the first call: the package imports without
    Tokamax (Python 3.11), where only the attention of tpu_kernels' own kernels is offered."""
    from tpu_kernels.tokamax import layer_norm as op

    return op(*args, **kwargs)


def gated_linear_unit(*args, **kwargs):
    """tpu_kernels.tokamax.gated_linear_unit, imported at the first call (as `layer_norm`)."""
    from tpu_kernels.tokamax import gated_linear_unit as op

    return op(*args, **kwargs)


def llama_rms_norm_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
    """LlamaRMSNorm (also Qwen2/Qwen3): normalise in float32, cast to the input dtype, then
    multiply by the weight, in that order. Moving the weight inside the float32 kernel
    changes bfloat16 outputs by up to 9.8e-3 (issue 17)."""
    input_dtype = hidden_states.dtype
    wide = hidden_states if input_dtype is torch.float32 else hidden_states.to(torch.float32)
    normed = on_padded_rows(self, layer_norm, wide, eps=self.variance_epsilon, subtract_mean=False)
    # the casts only where they cast: each .to() is a torch call, 5 norms a decode step
    return self.weight * (normed if input_dtype is torch.float32 else normed.to(input_dtype))


def gemma_rms_norm_forward(self, x: torch.Tensor) -> torch.Tensor:
    """GemmaRMSNorm (Gemma, Gemma2, Gemma3): (1 + weight) times the float32 normalisation,
    in float32, then one cast: Tokamax's scale_offset is the 1."""
    out = on_padded_rows(
        self, layer_norm, x.float(), self.weight.float(), eps=self.eps, scale_offset=1.0, subtract_mean=False
    )
    return out.type_as(x)


def glu_activation(module: torch.nn.Module, activation_attr: str) -> str | None:
    """The op's activation for an HF gated MLP, or None when it cannot be swapped (an
    activation the op lacks, or biases, which the op has no place for)."""
    config = getattr(module, "config", None)
    name = getattr(config, activation_attr, None)
    if getattr(config, "mlp_bias", False) or any(
        getattr(module, p).bias is not None for p in ("gate_proj", "up_proj")
    ):
        return None
    return ACTIVATIONS.get(name)


def gated_mlp_forward(self, x: torch.Tensor) -> torch.Tensor:
    """down(act(gate(x)) * up(x)) with the gate and up projections in one
    tokamax.gated_linear_unit, on the weights as nn.Linear stores them ([out, in]:
    weight_layout="out_in", no per-call transposed copy)."""
    activation = self._tpu_kernels_activation
    h = on_padded_rows(
        self, gated_linear_unit, x, self.gate_proj.weight, self.up_proj.weight,
        activation=activation, weight_layout="out_in",
    )  # fmt: skip
    return self.down_proj(h)
