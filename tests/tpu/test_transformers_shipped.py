"""attention="shipped" (attn_implementation "tpu_kernels_attention") on TPU tensors: tiny Llama
and Mistral models (random weights, nothing downloaded) against the same weights on torch_tpu's
sdpa, a training step's loss and gradients, and that every layer ran the shipped kernels. Needs
transformers, not Tokamax (the chip's Python 3.11 has no Tokamax): it skips without transformers."""

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


@pytest.mark.parametrize("name", list(MODELS))
def test_a_training_step_matches_torch_tpu_sdpa(name, tpu, figures, monkeypatch):
    from tpu_kernels.integrations.transformers import SHIPPED, register

    config_name, model_name, extra = MODELS[name]
    torch.manual_seed(0)
    ref = getattr(transformers, model_name)(getattr(transformers, config_name)(**CONFIG, **extra)).train()
    ref.set_attn_implementation("sdpa")
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
    grads = max(
        ((p.grad - q.grad).norm() / p.grad.norm().clamp_min(1e-30)).item()
        for p, q in zip(ref.parameters(), ours.parameters())
    )
    figures.update(
        logits=(a.logits - b.logits).abs().max().item(),
        loss=abs(a.loss.item() - b.loss.item()),
        grads_normwise=grads,
    )
    assert figures["logits"] < 1e-3 and figures["loss"] < 1e-4 and grads < 1e-3, figures
