"""RMSNorm and gated-MLP forwards that keep each HF family's arithmetic, on Tokamax ops.

Both forwards are module-level functions bound to the HF module (instance patch) or set
as the class's forward (class patch), so patched models deep-copy and pickle.
"""

from __future__ import annotations

import torch

from tpu_kernels.tokamax import gated_linear_unit, layer_norm

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


def llama_rms_norm_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
    """LlamaRMSNorm (also Qwen2/Qwen3): normalise in float32, cast to the input dtype, then
    multiply by the weight, in that order. Moving the weight inside the float32 kernel
    changes bfloat16 outputs by up to 9.8e-3 (issue 17)."""
    input_dtype = hidden_states.dtype
    normed = layer_norm(hidden_states.to(torch.float32), eps=self.variance_epsilon, subtract_mean=False)
    return self.weight * normed.to(input_dtype)


def gemma_rms_norm_forward(self, x: torch.Tensor) -> torch.Tensor:
    """GemmaRMSNorm (Gemma, Gemma2, Gemma3): (1 + weight) times the float32 normalisation,
    in float32, then one cast: Tokamax's scale_offset is the 1."""
    out = layer_norm(x.float(), self.weight.float(), eps=self.eps, scale_offset=1.0, subtract_mean=False)
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
    tokamax.gated_linear_unit; nn.Linear stores [out, in], the op takes [in, out]."""
    activation = self._tpu_kernels_activation
    h = gated_linear_unit(x, self.gate_proj.weight.T, self.up_proj.weight.T, activation=activation)
    return self.down_proj(h)
