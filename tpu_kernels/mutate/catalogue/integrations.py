"""Toolkit mutants of the integrations (tpu_kernels/integrations, tpu_kernels/tokamax): torchtitan
and Hugging Face."""

from __future__ import annotations

from tpu_kernels.mutate.catalogue.base import (
    HF_ATTENTION,
    HF_FAST,
    T_EAGER,
    T_HF,
    T_TITAN,
    TITAN,
    TITAN_FAST,
    Mutation,
    _toolkit,
)

MUTANTS: tuple[Mutation, ...] = (
    # ---- issue #39's ten survivors ----
    _toolkit(
        "torchtitan-rmsnorm-eps-none-1e-6",
        TITAN,
        "        eps = self.eps if self.eps is not None else torch.finfo(_compute_dtype(input.dtype)).eps",
        "        eps = self.eps if self.eps is not None else 1e-6",
        "RMSNorm(eps=None) with 1e-6, not nn.RMSNorm's machine epsilon: 30% off on small rows",
        T_TITAN,
        TITAN_FAST,
    ),
    _toolkit(
        "hf-attention-causal-decode-default",
        HF_ATTENTION,
        "    if is_causal and q_len > 1:",
        "    if is_causal:",
        "with no mask, a decode step's one query sees only the first key (sdpa: every key)",
        T_HF,
        HF_FAST,
    ),
    # ---- issue 46's faults, each fixed ----
    _toolkit(
        "call-op-never-checks",
        "tpu_kernels/tokamax/wrap.py",
        "        check(values)\n",
        "        pass\n",
        "call_op runs the op without the public function's argument check",
        T_EAGER,
    ),
    _toolkit(
        "torchtitan-ffn-fuses-biased-projections",
        TITAN,
        "type(w) is Linear and w.bias is None for w",
        "type(w) is Linear for w",
        "w1/w3 with a bias fused into Tokamax's GLU, which has none: the bias is dropped",
        T_TITAN,
        TITAN_FAST,
    ),
    _toolkit(
        "torchtitan-attention-drops-scale",
        TITAN,
        "mask=dense_mask(attention_masks), scale=scale",
        "mask=dense_mask(attention_masks)",
        "flex attention's scale= ignored: the default 1/sqrt(head_dim) instead",
        T_TITAN,
        TITAN_FAST,
    ),
    _toolkit(
        "hf-attention-float-mask-padding-attended",
        HF_ATTENTION,
        "value=torch.finfo(bias.dtype).min",
        "value=0.0",
        "an additive float mask padded with 0: the bucket's padded keys are attended",
        T_HF,
        HF_FAST,
    ),
    _toolkit(
        "hf-attention-ignores-is-causal",
        HF_ATTENTION,
        'causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)',
        'causal = getattr(module, "is_causal", True)',
        "is_causal=False given by the caller ignored for the module's own flag: an encoder call made causal",
        T_HF,
        HF_FAST,
    ),
)
