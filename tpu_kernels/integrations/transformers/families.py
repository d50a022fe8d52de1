"""Which HF classes each supported model family uses, and how its layers compute."""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelFamily:
    name: str  # the name apply_tpu_kernels_to takes
    model_types: tuple[str, ...]  # config.model_type values
    module: str  # transformers.models.<...>.modeling_<...>
    norm: str  # RMSNorm class
    norm_kind: str  # "llama": w * cast(norm(x)); "gemma": cast(norm(x) * (1 + w))
    mlp: str  # gated MLP class
    activation_attr: str  # the config attribute naming the MLP activation
    causal_lm: str  # *ForCausalLM class

    def classes(self) -> tuple[type, type, type]:
        """(norm, mlp, causal_lm) classes, importing the HF modeling module."""
        mod = importlib.import_module(self.module)
        return getattr(mod, self.norm), getattr(mod, self.mlp), getattr(mod, self.causal_lm)


_M = "transformers.models."
FAMILIES: dict[str, ModelFamily] = {
    f.name: f
    for f in (
        ModelFamily("llama", ("llama",), _M + "llama.modeling_llama", "LlamaRMSNorm", "llama", "LlamaMLP", "hidden_act", "LlamaForCausalLM"),
        ModelFamily("qwen2", ("qwen2",), _M + "qwen2.modeling_qwen2", "Qwen2RMSNorm", "llama", "Qwen2MLP", "hidden_act", "Qwen2ForCausalLM"),
        ModelFamily("qwen3", ("qwen3",), _M + "qwen3.modeling_qwen3", "Qwen3RMSNorm", "llama", "Qwen3MLP", "hidden_act", "Qwen3ForCausalLM"),
        ModelFamily("gemma", ("gemma",), _M + "gemma.modeling_gemma", "GemmaRMSNorm", "gemma", "GemmaMLP", "hidden_act", "GemmaForCausalLM"),
        ModelFamily("gemma2", ("gemma2",), _M + "gemma2.modeling_gemma2", "Gemma2RMSNorm", "gemma", "Gemma2MLP", "hidden_activation", "Gemma2ForCausalLM"),
        ModelFamily("gemma3", ("gemma3_text",), _M + "gemma3.modeling_gemma3", "Gemma3RMSNorm", "gemma", "Gemma3MLP", "hidden_activation", "Gemma3ForCausalLM"),
    )
}  # fmt: skip


# What a model of another family can use: the attention alone, which goes through HF's
# attention and mask interfaces (any family that uses them). tests/integrations/
# test_transformers.py runs these lines, as written, on Mistral, Phi-3 and Qwen2-MoE.
ATTENTION_ONLY = """\
    from tpu_kernels.integrations.transformers import register
    register()  # adds attn_implementation "tpu_kernels" to transformers
    model.set_attn_implementation("tpu_kernels")  # or, after register(): from_pretrained(..., attn_implementation="tpu_kernels")
"""


def _other_family(what: str) -> str:
    return (
        f"{what}. Its norms, MLP and loss stay HF's; its attention can run on tpu_kernels: register it "
        f"with transformers first, then select it:\n{ATTENTION_ONLY}(docs/transformers.md#not-swapped)"
    )


def family(name: str) -> ModelFamily:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(
            _other_family(
                f"tpu_kernels.integrations.transformers: no model family {name!r}; supported: "
                f"{', '.join(FAMILIES)}"
            )
        ) from None


def family_of_config(config) -> ModelFamily:
    model_type = getattr(config, "model_type", None)
    for f in FAMILIES.values():
        if model_type in f.model_types:
            return f
    supported = ", ".join(t for f in FAMILIES.values() for t in f.model_types)
    raise ValueError(
        _other_family(f"apply_tpu_kernels: model_type={model_type!r} is not a supported family ({supported})")
    )
