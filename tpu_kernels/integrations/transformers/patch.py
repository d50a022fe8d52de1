"""Patching: a loaded model's modules (apply_tpu_kernels) or a family's classes (apply_tpu_kernels_to)."""

from __future__ import annotations

import functools
from typing import Any

import torch

from tpu_kernels.integrations.transformers import attention as _attention
from tpu_kernels.integrations.transformers import shipped_attention as _shipped
from tpu_kernels.integrations.transformers.families import family, family_of_config
from tpu_kernels.integrations.transformers.layers import (
    gated_mlp_forward,
    gemma_rms_norm_forward,
    glu_activation,
    llama_rms_norm_forward,
)
from tpu_kernels.integrations.transformers.loss import causal_lm_loss

# class -> HF's forward, for classes that apply_tpu_kernels_to patched.
_ORIGINALS: dict[type, object] = {}
_ARG_NAMES = (
    "input_ids",
    "attention_mask",
    "position_ids",
    "cache",
    "inputs_embeds",
    "labels",
    "use_cache",
    "logits_to_keep",
)
_LOSS_KWARGS = ("num_items_in_batch", "ignore_index", "shift_labels")


def _hf_forward(cls: type):
    for c in cls.__mro__:
        if c in _ORIGINALS:
            return _ORIGINALS[c]
    return cls.forward


def loss_swappable(model: torch.nn.Module) -> bool:
    """The fused loss computes x @ W logits: no LM-head bias, and (Tokamax's loss) no final
    logit soft-capping (Gemma2 and Gemma3 configs may set it; the shipped loss applies it)."""
    if model.lm_head.bias is not None:
        return False
    return _shipped_loss(model) or getattr(model.config, "final_logit_softcapping", None) is None


def _shipped_loss(model: torch.nn.Module) -> bool:
    return getattr(model, "_tpu_kernels_loss", None) == "shipped"


def causal_lm_forward(self, *args, **kwargs):
    """*ForCausalLM.forward with the loss fused into the LM head when labels are given.

    Without labels (generation, inference) it is HF's forward. With labels the logits are
    not materialised for the loss; in training mode `logits` is None (as in Liger), in eval
    mode they are computed as well, for metrics.
    """
    hf_forward = _hf_forward(type(self))
    kwargs.update(zip(_ARG_NAMES, args))
    if (kwargs.get("labels") is None and kwargs.get("shift_labels") is None) or not loss_swappable(self):
        return hf_forward(self, **kwargs)
    from transformers.modeling_outputs import CausalLMOutputWithPast

    labels = kwargs.pop("labels", None)
    logits_to_keep = kwargs.pop("logits_to_keep", 0)
    return_dict = kwargs.pop("return_dict", None)
    if return_dict is None:
        return_dict = getattr(self.config, "return_dict", True)
    loss_kwargs = {k: kwargs.pop(k) for k in _LOSS_KWARGS if k in kwargs}
    outputs = self.model(**kwargs)
    hidden = outputs.last_hidden_state
    if _shipped_loss(self):
        softcap = getattr(self.config, "final_logit_softcapping", None)
        loss_kwargs.update(shipped=True, softcap=softcap)
    loss = causal_lm_loss(hidden, self.lm_head.weight, labels, **loss_kwargs)
    logits = None if self.training else self.lm_head(slice_logits_to_keep(hidden, logits_to_keep))
    # The inner model's other outputs carry over by name (the cache field is `cache` in
    # transformers 5.24, `past_key_values` before; the inner model also takes either).
    rest = {k: v for k, v in outputs.items() if k != "last_hidden_state"}
    out = CausalLMOutputWithPast(loss=loss, logits=logits, **rest)
    return out if return_dict else out.to_tuple()


def slice_logits_to_keep(hidden: torch.Tensor, logits_to_keep: Any) -> torch.Tensor:
    """The positions whose logits HF's forward returns: `transformers.modeling_utils`'s function
    of this name where it has one (transformers 5.24: an int keeps the last n, 0 all; a 1-D
    tensor indexes positions; 2-D ones are positions or a mask), else the models' own slice
    before it existed (transformers 5.17, the TPU host's: an int or a 1-D index)."""
    try:
        from transformers.modeling_utils import slice_logits_to_keep as hf
    except ImportError:
        index = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        return hidden[:, index, :]
    return hf(hidden, logits_to_keep)


def _bind(module: torch.nn.Module, fn) -> None:
    # An instance attribute wins over the class's forward. A partial of a module-level
    # function deep-copies onto the copy and pickles (torch.save) by the function's name;
    # a bound method would pickle as getattr(module, fn.__name__), which fails on load.
    module.forward = functools.partial(fn, module)


def _require_tokamax(needed: bool) -> None:
    """The norms, MLP, loss and "tpu_kernels" attention run Tokamax's ops: say so before swapping."""
    import importlib.util

    if needed and importlib.util.find_spec("tokamax") is None:
        raise ModuleNotFoundError(
            "apply_tpu_kernels: the norms, MLP, loss and attention=True run Tokamax's ops, and the tokamax "
            "package is not installed (tokamax>=0.0.17 needs Python >= 3.12). Without it: "
            "apply_tpu_kernels(model, rms_norm=False, mlp=False, loss='shipped', attention='shipped') runs "
            "the attention and the loss on tpu_kernels' own kernels."
        )


def apply_tpu_kernels(
    model: torch.nn.Module,
    *,
    rms_norm: bool = True,
    attention: bool | str = True,
    mlp: bool = True,
    loss: bool | str = True,
    buckets: bool = True,
) -> dict[str, int]:
    """Swaps a loaded HF causal LM's layers for tpu_kernels ops, in place.

    Args:
      model: a *ForCausalLM of a supported family: Llama, Qwen2, Qwen3, Gemma,
        Gemma2, Gemma3 (text).
      rms_norm: every RMSNorm -> tokamax.layer_norm(subtract_mean=False), keeping
        the family's cast order.
      attention: attn_implementation "tpu_kernels" (Tokamax attention with HF's
        boolean mask), padded to buckets, or "tpu_kernels_unpadded" with buckets=False;
        "shipped": "tpu_kernels_attention" instead (the shipped attention kernels for calls
        with no mask, HF's sdpa for the rest; no Tokamax needed: shipped_attention.py).
      mlp: each gated MLP's gate and up projections -> tokamax.gated_linear_unit,
        when the activation is one the op has and the projections have no bias.
      loss: the causal-LM loss -> tokamax.linear_softmax_cross_entropy_loss (not
        with final-logit soft-capping or an LM-head bias); "shipped": tpu_kernels'
        linear_cross_entropy instead (no Tokamax needed; soft-capping applied).
      buckets: pad key/value lengths (attention) and token rows (norms, MLP) to
        buckets: one compile per bucket in generation instead of one per token
        (attention) or per prompt length (norms, MLP); see docs/transformers.md.

    Returns:
      How many modules of each kind this call swapped ({"rms_norm": n, "mlp": m, "loss": 0/1,
      "attention": 0/1}); modules whose class apply_tpu_kernels_to patched already run the
      ops and are not counted. The weights, their dtypes and the state dict are unchanged.
    """
    config = getattr(model, "config", None)
    if config is None:
        raise TypeError(
            f"apply_tpu_kernels: model must be a transformers PreTrainedModel (with a .config); got "
            f"{type(model).__name__}."
        )
    for name, value in (("attention", attention), ("loss", loss)):
        if value not in (True, False, "shipped"):
            raise ValueError(f"apply_tpu_kernels: {name} must be True, False or 'shipped', got {value!r}.")
    _require_tokamax(rms_norm or mlp or loss is True or attention is True)
    fam = family_of_config(config)
    norm_cls, mlp_cls, lm_cls = fam.classes()
    norm_fn = llama_rms_norm_forward if fam.norm_kind == "llama" else gemma_rms_norm_forward
    counts = {"rms_norm": 0, "mlp": 0, "loss": 0, "attention": 0}
    for module in model.modules():
        if rms_norm and isinstance(module, norm_cls) and norm_cls not in _ORIGINALS:
            module._tpu_kernels_buckets = buckets
            _bind(module, norm_fn)
            counts["rms_norm"] += 1
        elif mlp and isinstance(module, mlp_cls) and mlp_cls not in _ORIGINALS:
            activation = glu_activation(module, fam.activation_attr)
            if activation is not None:
                module._tpu_kernels_activation = activation
                module._tpu_kernels_buckets = buckets
                _bind(module, gated_mlp_forward)
                counts["mlp"] += 1
        elif loss and isinstance(module, lm_cls) and lm_cls not in _ORIGINALS:
            if loss == "shipped":
                module._tpu_kernels_loss = "shipped"
            else:  # the latest call decides: loss=True after loss="shipped" is Tokamax's loss again
                vars(module).pop("_tpu_kernels_loss", None)
            if loss_swappable(module):
                _bind(module, causal_lm_forward)
                counts["loss"] += 1
    if attention:
        _attention.register()
        if attention == "shipped":
            model.set_attn_implementation(_shipped.SHIPPED)
        else:
            model.set_attn_implementation(_attention.NAME if buckets else _attention.UNPADDED)
        counts["attention"] = 1
    return counts


def _class_mlp_forward(self, x):
    """The class-level MLP forward: the op when this instance's activation allows it."""
    activation = getattr(self, "_tpu_kernels_activation", None)
    if activation is None:
        fam = self._tpu_kernels_family
        activation = glu_activation(self, fam.activation_attr) or False
        self._tpu_kernels_activation = activation
    if activation is False:
        return _hf_forward(type(self))(self, x)
    return gated_mlp_forward(self, x)


def apply_tpu_kernels_to(
    name: str,
    *,
    rms_norm: bool = True,
    attention: bool | str = True,
    mlp: bool = True,
    loss: bool | str = True,
) -> None:
    """Patches a model family's classes before loading (like Liger's apply_liger_kernel_to_llama):
    every model of that family built afterwards (and those already built) uses the ops.

    Attention is registered as "tpu_kernels" and "tpu_kernels_attention" (the shipped kernels,
    no Tokamax); choose one when loading, with `from_pretrained(..., attn_implementation=...)`.
    `loss="shipped"` computes the loss with the shipped linear_cross_entropy (no Tokamax; Gemma
    2's soft-capping applied). Undo with `remove_tpu_kernels_from(name)`.
    """
    for flag, value in (("attention", attention), ("loss", loss)):
        if value not in (True, False, "shipped"):
            raise ValueError(f"apply_tpu_kernels_to: {flag} must be True, False or 'shipped', got {value!r}.")
    fam = family(name)
    norm_cls, mlp_cls, lm_cls = fam.classes()
    norm_fn = llama_rms_norm_forward if fam.norm_kind == "llama" else gemma_rms_norm_forward
    todo = [
        (rms_norm, norm_cls, norm_fn),
        (mlp, mlp_cls, _class_mlp_forward),
        (loss, lm_cls, causal_lm_forward),
    ]
    for wanted, cls, fn in todo:
        if wanted and cls not in _ORIGINALS:
            _ORIGINALS[cls] = cls.forward
            cls.forward = fn
    if mlp:
        mlp_cls._tpu_kernels_family = fam
    if loss == "shipped":
        lm_cls._tpu_kernels_loss = "shipped"  # causal_lm_forward reads it off the instance
    if attention:
        _attention.register()


def remove_tpu_kernels_from(name: str) -> None:
    """Restores HF's forwards on a family's classes patched by apply_tpu_kernels_to."""
    for cls in family(name).classes():
        if cls in _ORIGINALS:
            cls.forward = _ORIGINALS.pop(cls)
        for attr in ("_tpu_kernels_family", "_tpu_kernels_loss"):
            if attr in cls.__dict__:
                delattr(cls, attr)
