"""torchtitan models on tpu_kernels ops, in one line (docs/torchtitan.md).

    from torchtitan.models.llama3 import model_registry
    from tpu_kernels.integrations.torchtitan import TpuKernelsConverter

    spec = model_registry("debugmodel", converters=[TpuKernelsConverter.Config()])

`TpuKernelsConverter` is a torchtitan model converter (`ModelConfigConverter`, the extension
point of torchtitan's float8 and LoRA converters): it rewrites the model's config tree so that
the RMSNorms, the SwiGLU feed-forwards and the flex attention build as tpu_kernels modules.
Llama 3 and Qwen 3 (dense) are covered; parameters, state-dict keys and torchtitan's
sharding configs are the stock ones, so parallelize (FSDP2, TP with sequence parallel,
activation checkpointing, compile) runs as it does for the stock model. `TpuKernelsSelectiveAC`
is torchtitan's selective AC with the Tokamax attention and GLU outputs saved, as its own
policy saves flex attention's.

Needs torchtitan (`pip install 'tpu-kernels[torchtitan]'`); `import tpu_kernels` does not
import it, only this module does.
"""

from __future__ import annotations

try:
    import torchtitan  # noqa: F401
except ImportError as e:  # the user asked for this integration explicitly: say what is missing
    raise ImportError(
        "tpu_kernels.integrations.torchtitan needs torchtitan: pip install 'tpu-kernels[torchtitan]' "
        "(torchtitan 0.3.0, installed without its data-loading dependencies; see docs/torchtitan.md)."
    ) from e

from tpu_kernels.integrations.torchtitan.checkpointing import TpuKernelsSelectiveAC
from tpu_kernels.integrations.torchtitan.converter import TpuKernelsConverter, convert
from tpu_kernels.integrations.torchtitan.modules import (
    TpuKernelsAttention,
    TpuKernelsFeedForward,
    TpuKernelsRMSNorm,
    dense_mask,
)

__all__ = [
    "TpuKernelsAttention",
    "TpuKernelsConverter",
    "TpuKernelsFeedForward",
    "TpuKernelsRMSNorm",
    "TpuKernelsSelectiveAC",
    "convert",
    "dense_mask",
]
