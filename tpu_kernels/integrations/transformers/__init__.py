"""Hugging Face transformers on tpu_kernels ops, in one line (docs/transformers.md).

    from tpu_kernels.integrations.transformers import apply_tpu_kernels
    apply_tpu_kernels(model)          # a loaded Llama/Qwen2/Qwen3/Gemma/Gemma2/Gemma3 causal LM

or, before loading, for every model of a family (like Liger's apply_liger_kernel_to_llama):

    apply_tpu_kernels_to("llama")
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="tpu_kernels")

Needs transformers (`pip install tpu-kernels[transformers]`); `import tpu_kernels` does not
import it, only this module does.
"""

from __future__ import annotations

try:
    import transformers  # noqa: F401
except ImportError as e:  # the user asked for this integration explicitly: say what is missing
    raise ImportError(
        "tpu_kernels.integrations.transformers needs Hugging Face transformers: "
        "pip install 'tpu-kernels[transformers]' (or transformers>=5)."
    ) from e

from tpu_kernels.integrations.transformers.attention import MIN_BUCKET, NAME, UNPADDED, bucket, register
from tpu_kernels.integrations.transformers.families import FAMILIES, ModelFamily
from tpu_kernels.integrations.transformers.loss import causal_lm_loss
from tpu_kernels.integrations.transformers.patch import (
    apply_tpu_kernels,
    apply_tpu_kernels_to,
    remove_tpu_kernels_from,
)
from tpu_kernels.integrations.transformers.shipped_attention import SHIPPED

__all__ = [
    "FAMILIES",
    "SHIPPED",
    "MIN_BUCKET",
    "NAME",
    "UNPADDED",
    "ModelFamily",
    "apply_tpu_kernels",
    "apply_tpu_kernels_to",
    "bucket",
    "causal_lm_loss",
    "register",
    "remove_tpu_kernels_from",
]
