"""The Hugging Face routes to shipped kernels on TPU tensors: attention="shipped" (attn_implementation
"tpu_kernels_attention") in tiny Llama and Mistral models, and loss="shipped" (the fused LM head
and cross-entropy) in a tiny Llama, each against the same weights on HF's eager attention and
HF's own loss: a training step's loss and gradients, and that the shipped kernels ran. The
reference is HF's eager attention, not torch_tpu's sdpa, whose backward does not compile on the
chip (Mosaic: failed to legalize 'math.log2'; bench/reports/chip_v5e_attention_family.json).
Needs transformers, not Tokamax (the chip's Python 3.11 has no Tokamax): it skips without
transformers."""

from __future__ import annotations

import copy
import importlib
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

CONFIG = dict(
    hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=32, vocab_size=256, max_position_embeddings=512,
    pad_token_id=0, bos_token_id=1, eos_token_id=2,
)  # fmt: skip
MODELS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": 24}),
}


@pytest.fixture(autouse=True)
def _highest():
    """float32 products at full precision on both sides (torch_tpu's default is one bf16 pass)."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(before)


def _model(name: str):
    config_name, model_name, extra = MODELS[name]
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(getattr(transformers, config_name)(**CONFIG, **extra)).train()
    model.set_attn_implementation("eager")
    return model


def _normwise(ref, ours) -> float:
    return max(
        ((p.grad - q.grad).norm() / p.grad.norm().clamp_min(1e-30)).item()
        for p, q in zip(ref.parameters(), ours.parameters())
    )


@pytest.mark.parametrize("name", list(MODELS))
def test_a_training_step_matches_hf_eager_attention(name, tpu, figures, monkeypatch):
    from tpu_kernels.integrations.transformers import SHIPPED, register

    ref = _model(name)
    ours = copy.deepcopy(ref)
    register()
    ours.set_attn_implementation(SHIPPED)
    ref, ours = ref.to(tpu), ours.to(tpu)
    module = importlib.import_module("tpu_kernels.kernels.attention")
    op, calls = module.attention, []
    monkeypatch.setattr(module, "attention", lambda *a, **k: calls.append(k) or op(*a, **k))
    g = torch.Generator().manual_seed(1)
    x = torch.randint(3, CONFIG["vocab_size"], (2, 64), generator=g).to(tpu)
    a, b = ref(x, labels=x), ours(x, labels=x)
    a.loss.backward()
    b.loss.backward()
    assert len(calls) == CONFIG["num_hidden_layers"] and b.logits.device.type == tpu.type
    grads = _normwise(ref, ours)
    figures.update(
        logits=(a.logits - b.logits).abs().max().item(),
        loss=abs(a.loss.item() - b.loss.item()),
        grads_normwise=grads,
    )
    assert figures["logits"] < 1e-3 and figures["loss"] < 1e-4 and grads < 1e-3, figures


def test_a_training_step_with_the_shipped_loss_matches_hf(tpu, figures, monkeypatch):
    """loss="shipped" with attention="shipped": HF's label shift and ignored labels, the loss in
    float32, no logits in training, and every gradient against HF's loss on eager attention."""
    import tpu_kernels.kernels as kernels
    from tpu_kernels.integrations.transformers import apply_tpu_kernels

    ref = _model("llama")
    ours = copy.deepcopy(ref)
    swapped = apply_tpu_kernels(ours, rms_norm=False, mlp=False, attention="shipped", loss="shipped")
    assert swapped["loss"] == 1 and swapped["attention"] == 1
    ref, ours = ref.to(tpu), ours.to(tpu)
    real, calls = kernels.linear_cross_entropy, []
    monkeypatch.setattr(kernels, "linear_cross_entropy", lambda *a, **k: calls.append(k) or real(*a, **k))
    g = torch.Generator().manual_seed(2)
    x = torch.randint(3, CONFIG["vocab_size"], (2, 64), generator=g)
    labels = x.clone()
    labels[0, :5] = -100  # a prompt left out of the loss
    x, labels = x.to(tpu), labels.to(tpu)
    a, b = ref(x, labels=labels), ours(x, labels=labels)
    a.loss.backward()
    b.loss.backward()
    assert calls and b.logits is None and b.loss.dtype == torch.float32
    figures.update(loss=abs(a.loss.item() - b.loss.item()), grads_normwise=_normwise(ref, ours))
    assert figures["loss"] < 1e-4 and figures["grads_normwise"] < 1e-3, figures
