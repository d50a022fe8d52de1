"""attn_implementation "tpu_kernels_attention": Hugging Face models' attention on the shipped
attention family (no Tokamax), against HF's own sdpa attention with the same weights.

Tiny Llama, Qwen2 and Mistral models (Mistral and a Qwen2 with sliding layers: windows shorter
than the sequences) from configs with random weights; nothing is downloaded. A call with no
mask runs the family's kernels (counted here); a padded batch and decode steps run HF's sdpa.
"""

from __future__ import annotations

import copy
import os

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
transformers = pytest.importorskip("transformers")
import torch  # noqa: E402

from tpu_kernels.integrations.transformers import SHIPPED, apply_tpu_kernels, register, shipped_attention  # noqa: E402

VOCAB = 96
COMMON = dict(
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=VOCAB,
    max_position_embeddings=256,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
MODELS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    # every layer slides, 5 keys back: the test sequences are longer
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": 5}),
    # one sliding layer, one full
    "qwen2_sliding": (
        "Qwen2Config",
        "Qwen2ForCausalLM",
        {"use_sliding_window": True, "sliding_window": 6, "max_window_layers": 1,
         "layer_types": ["full_attention", "sliding_attention"]},
    ),
}  # fmt: skip


def tiny(name: str, seed: int = 0):
    config_name, model_name, extra = MODELS[name]
    config = getattr(transformers, config_name)(**COMMON, **extra)
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(config).eval()
    model.set_attn_implementation("sdpa")
    return model


def pair(name: str):
    """The sdpa model and a copy on the shipped attention: through apply_tpu_kernels for a
    supported family, and as any other family selects it (Mistral), by name after register()."""
    ref = tiny(name)
    ours = copy.deepcopy(ref)
    if name == "mistral":
        register()
        ours.set_attn_implementation(SHIPPED)
    else:
        swapped = apply_tpu_kernels(ours, rms_norm=False, mlp=False, loss=False, attention="shipped")
        assert swapped == {"rms_norm": 0, "mlp": 0, "loss": 0, "attention": 1}
    assert ours.config._attn_implementation == SHIPPED
    return ref, ours


@pytest.fixture
def kernel_calls(monkeypatch):
    """How many attention calls reached the family's op."""
    import importlib

    module = importlib.import_module(
        "tpu_kernels.kernels.attention"
    )  # the package (its name in tpu_kernels.kernels is the op)
    op, calls = module.attention, []

    def counted(*args, **kwargs):
        calls.append(kwargs)
        return op(*args, **kwargs)

    monkeypatch.setattr(module, "attention", counted)
    return calls


def ids(batch=2, seq=14, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, seq), generator=g)


@pytest.mark.parametrize("name", list(MODELS))
def test_training_step_matches_sdpa_and_runs_the_kernels(name, kernel_calls):
    """No mask, keys = queries: every layer's attention is the family's kernel (with the
    layer's window), and the loss and every weight's gradient are sdpa's."""
    ref, ours = pair(name)
    ref.train(), ours.train()
    x = ids()
    a, b = ref(x, labels=x), ours(x, labels=x)
    a.loss.backward()
    b.loss.backward()
    assert len(kernel_calls) == COMMON["num_hidden_layers"]
    windows = [c["window"] for c in kernel_calls]
    expected = {"llama": [None, None], "qwen2": [None, None], "mistral": [5, 5], "qwen2_sliding": [None, 6]}
    assert windows == expected[name]
    assert (a.logits - b.logits).abs().max().item() < 2e-5
    assert abs(a.loss.item() - b.loss.item()) < 2e-6
    for (n, p), q in zip(ref.named_parameters(), ours.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=2e-6, msg=n)


@pytest.mark.parametrize("name", ["llama", "mistral"])
def test_a_padded_batch_runs_hf_sdpa_with_its_mask(name, kernel_calls):
    ref, ours = pair(name)
    x = ids()
    mask = torch.ones_like(x)
    mask[0, :4] = 0  # left padding
    with torch.no_grad():
        a, b = ref(x, attention_mask=mask), ours(x, attention_mask=mask)
    assert kernel_calls == []
    torch.testing.assert_close(b.logits, a.logits, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["llama", "mistral"])
def test_greedy_generate_is_sdpas(name, kernel_calls):
    """The prompt runs the kernels; each decode step against the cache runs HF's sdpa."""
    ref, ours = pair(name)
    x = ids(batch=1, seq=9)
    kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(ours.generate(x, **kw), ref.generate(x, **kw))
    assert len(kernel_calls) == COMMON["num_hidden_layers"]  # the prefill's layers only


def test_the_route_declines_what_the_kernels_do_not_do():
    q, k = torch.randn(1, 4, 6, 8), torch.randn(1, 2, 6, 8)
    runs = shipped_attention._runs_the_kernel
    assert runs(q, k, None, 0.0, True, {})
    assert not runs(q, k, torch.ones(1, 1, 6, 6, dtype=torch.bool), 0.0, True, {})  # a mask
    assert not runs(q, k, None, 0.1, True, {})  # dropout
    assert not runs(q, k, None, 0.0, False, {})  # not causal
    assert not runs(q[:, :, :1], k, None, 0.0, True, {})  # a decode step
    assert not runs(q, k, None, 0.0, True, {"softcap": 30.0})


def test_a_sliding_layer_that_falls_back_to_sdpa_keeps_its_window():
    """shipped_mask skips a sliding layer's mask for the kernels; a call the kernels decline
    (here dropout, from one seed on every call) runs sdpa with the window's mask rebuilt, not
    plain causal attention."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    module = tiny("mistral").model.layers[0].self_attn
    q, k, v = torch.randn(1, 4, 14, 16), torch.randn(1, 2, 14, 16), torch.randn(1, 2, 14, 16)

    def seeded(fn, *args, **kwargs):
        torch.manual_seed(3)
        return fn(module, q, k, v, *args, dropout=0.25, **kwargs)[0]

    got = seeded(shipped_attention.shipped_attention_forward, None, sliding_window=5)
    seen = torch.ones(14, 14, dtype=torch.bool).tril() & torch.ones(14, 14, dtype=torch.bool).triu(-4)
    want = seeded(sdpa_attention_forward, seen[None, None])
    plain = seeded(sdpa_attention_forward, None)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert not torch.allclose(got, plain, atol=1e-3)


def test_attention_must_be_a_known_route():
    with pytest.raises(ValueError, match="attention must be True, False or 'shipped'"):
        apply_tpu_kernels(tiny("llama"), rms_norm=False, mlp=False, loss=False, attention="sdpa")
