"""apply_tpu_kernels against the unpatched HF model (same weights), per model family.

Tiny models from configs with random weights; nothing is downloaded (HF_HUB_OFFLINE=1).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
transformers = pytest.importorskip("transformers")
import torch  # noqa: E402

from tpu_kernels.integrations.transformers import (  # noqa: E402
    FAMILIES,
    apply_tpu_kernels,
    apply_tpu_kernels_to,
    bucket,
    causal_lm_loss,
    remove_tpu_kernels_from,
)
from tpu_kernels.tokamax.attention.op import dot_product_attention_op  # noqa: E402

VOCAB = 128
COMMON = dict(
    hidden_size=64,
    intermediate_size=128,
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
CONFIGS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {"hidden_act": "gelu_pytorch_tanh"}),
    # sliding_window 4 < the test sequences, so the sliding layers' masks matter; Gemma2's
    # attention soft-cap goes to Tokamax's logits_soft_cap; its final-logit soft-cap keeps
    # HF's loss (the fused loss has no soft-cap).
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {"sliding_window": 4, "query_pre_attn_scalar": 16}),
    "gemma3": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        {
            "sliding_window": 4,
            "query_pre_attn_scalar": 16,
            "layer_types": ["sliding_attention", "full_attention"],
        },
    ),
}
assert set(CONFIGS) == set(FAMILIES)


def tiny(family: str, dtype=torch.float32, seed: int = 0):
    config_name, model_name, extra = CONFIGS[family]
    config = getattr(transformers, config_name)(**COMMON, **extra)
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(config).to(dtype).eval()
    with torch.no_grad():  # Gemma's norms start at weight 0 (= scale 1): make them matter
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


def pair(family: str, dtype=torch.float32, **flags):
    ref = tiny(family, dtype)
    # Gemma2's attention soft-cap has no sdpa path in HF: its reference is eager attention.
    ref.set_attn_implementation("eager" if family == "gemma2" else "sdpa")
    patched = copy.deepcopy(ref)
    apply_tpu_kernels(patched, **flags)
    return ref, patched


def ids(batch=2, seq=12, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, seq), generator=g)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_float32_logits_and_loss_match(family):
    ref, patched = pair(family)
    x = ids()
    with torch.no_grad():
        a, b = ref(x, labels=x), patched(x, labels=x)
    # Measured: logits 1.8e-7-3.3e-7 over the six families, loss <= 4.8e-7 (float32).
    assert (a.logits - b.logits).abs().max().item() < 2e-6
    assert abs(a.loss.item() - b.loss.item()) < 2e-6


def test_what_is_swapped_per_family():
    swapped = {f: apply_tpu_kernels(tiny(f)) for f in FAMILIES}
    # 2 layers x 2 norms + the final norm; Qwen3 and Gemma3 add q_norm and k_norm per layer,
    # Gemma2 and Gemma3 a pre- and post-feedforward norm per layer.
    assert {f: s["rms_norm"] for f, s in swapped.items()} == {
        "llama": 5, "qwen2": 5, "qwen3": 9, "gemma": 5, "gemma2": 9, "gemma3": 13,
    }  # fmt: skip
    assert all(s["mlp"] == 2 and s["attention"] == 1 for s in swapped.values())
    # Gemma2's default config soft-caps the final logits, which the fused loss cannot.
    assert {f: s["loss"] for f, s in swapped.items()} == {f: int(f != "gemma2") for f in FAMILIES}


@pytest.mark.parametrize("family", ["llama", "gemma"])
def test_bfloat16_norms_bit_identical(family):
    """The RMSNorm swap keeps the family's cast order, so each norm's bfloat16 output is
    bit-identical to HF's."""
    ref, patched = pair(family, torch.bfloat16, attention=False, mlp=False, loss=False)
    norm_cls = FAMILIES[family].classes()[0]
    x = torch.randn(3, 7, 64, dtype=torch.bfloat16) * 3
    for (_, m_ref), (_, m) in zip(ref.named_modules(), patched.named_modules()):
        if isinstance(m_ref, norm_cls):
            assert torch.equal(m_ref(x), m(x))


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3"])
def test_bfloat16_logits_close(family):
    ref, patched = pair(family, torch.bfloat16)
    x = ids()
    with torch.no_grad():
        out_a, out_b = ref(x, labels=x), patched(x, labels=x)
    a, b = out_a.logits.float(), out_b.logits.float()
    # Measured max |diff| 0.0039-0.0078 over the six families, logits up to 1.4: one or two
    # bfloat16 ulps, from the MLP, attention and loss keeping float32 between their matmuls
    # where HF rounds to bfloat16 (the norms alone are bit-identical, above). The loss:
    # 1e-4-4.8e-3 (HF's loss reads bfloat16-rounded logits, the fused one float32 dots).
    assert (a - b).abs().max().item() <= 0.03
    assert abs(out_a.loss.item() - out_b.loss.item()) <= 0.02
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() > 0.9


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_five_adamw_steps_match(family):
    ref, patched = pair(family)
    ref.train(), patched.train()
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (ref, patched)]
    x = ids(seed=3)
    labels = x.clone()
    labels[:, :3] = -100  # ignored positions
    for _ in range(5):
        losses = []
        for m, opt in zip((ref, patched), opts):
            opt.zero_grad()
            out = m(x, labels=labels)
            out.loss.backward()
            opt.step()
            losses.append(out.loss.item())
        assert abs(losses[0] - losses[1]) < 1e-5 * abs(losses[0])
    assert patched(x, labels=labels).logits is None  # training mode: the logits are never built
    worst = max(
        ((p - q).abs().max() / p.abs().max().clamp_min(1e-6)).item()
        for p, q in zip(ref.parameters(), patched.parameters())
    )
    # measured 9.7e-6 (Llama), 1.03e-4 (gemma3, TPU_KERNELS_TEST_SEED=323233641): Adam's
    # step is lr-sized whatever the gradient's size, so a near-zero gradient coordinate whose
    # sign differs moves a weight by ~lr; the bound is a few such steps, not a precision claim
    assert worst < 3e-4


@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma2"])
def test_greedy_generate_identical(family):
    ref, patched = pair(family)
    x = ids(batch=1, seq=8)
    kw = dict(max_new_tokens=16, min_new_tokens=16, do_sample=False, pad_token_id=0)
    assert torch.equal(ref.generate(x, **kw), patched.generate(x, **kw))


def test_left_padded_batch_generate_identical():
    ref, patched = pair("llama")
    x = ids(batch=2, seq=10)
    mask = torch.ones_like(x)
    x[0, :4], mask[0, :4] = 0, 0  # the first prompt is 6 tokens, left-padded
    kw = dict(attention_mask=mask, max_new_tokens=12, min_new_tokens=12, do_sample=False, pad_token_id=0)
    assert torch.equal(ref.generate(x, **kw), patched.generate(x, **kw))


def test_generation_compiles_attention_once_per_bucket():
    """16 new tokens after an 8-token prompt: the key/value length runs 8..23, one bucket
    (64); the prefill (8 queries) and the decode steps (1 query) are two shapes."""
    _, patched = pair("llama")
    x = ids(batch=1, seq=8, seed=7)  # batch 1: a shape no other test here uses first
    kw = dict(max_new_tokens=16, min_new_tokens=16, do_sample=False, pad_token_id=0)
    dot_product_attention_op.cache_clear()
    patched.generate(x, **kw)
    assert dot_product_attention_op.cache_info().misses == 2
    apply_tpu_kernels(patched, buckets=False)
    dot_product_attention_op.cache_clear()
    patched.generate(x, **kw)
    assert dot_product_attention_op.cache_info().misses == 16  # one per key/value length


def test_decode_steps_cross_attention_contiguous_on_the_eager_shortcut(monkeypatch):
    """HF hands attention [batch, heads, seq, head_dim] transposes; the integration turns them
    into Tokamax's layout before the crossing (a decode step's query without a copy, key and
    value in the padding's one copy), so every call takes the eager shortcut: the executor's
    full path, which copies a non-contiguous tensor again, runs only for the compiles."""
    from tpu_kernels.runtime.devices.jax_exec import JaxExecutor

    _, patched = pair("llama")
    attention = dot_product_attention_op._eager_cpu.executor
    full_path = []
    call = JaxExecutor.__call__

    def counting(self, *args, **kwargs):
        if self is attention:
            full_path.append(args)
        return call(self, *args, **kwargs)

    monkeypatch.setattr(JaxExecutor, "__call__", counting)
    x = ids(batch=1, seq=8, seed=7)
    kw = dict(max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0)
    dot_product_attention_op.cache_clear()
    patched.generate(x, **kw)
    # 2 layers x (the prefill + 7 decode steps) calls; the full path only for the first
    # call of each of the 2 shapes (prefill, decode), which compiles (before: all 16)
    assert dot_product_attention_op.cache_info().misses == 2
    assert len(full_path) == 2


def test_static_cache_generate_identical_and_compiles_twice():
    ref, patched = pair("llama")
    x = ids(batch=1, seq=8, seed=7)
    kw = dict(
        max_new_tokens=16, min_new_tokens=16, do_sample=False, pad_token_id=0, cache_implementation="static"
    )
    dot_product_attention_op.cache_clear()
    assert torch.equal(ref.generate(x, **kw), patched.generate(x, **kw))
    assert dot_product_attention_op.cache_info().misses == 2  # measured: also 2 with buckets=False


def test_norm_and_mlp_rows_pad_to_buckets():
    """Token rows of the norms and the gated MLP pad to the shipped row buckets: prompts of
    2-8 tokens share the 8-row executables, 9-16 the next; one row (a 1-token prompt, a
    decode step at batch 1) runs as is, its own executable (layers.ONE_ROW_AS_IS); with
    buckets=False each length compiles again. Logits stay HF's."""
    from tpu_kernels.tokamax.glu.op import gated_linear_unit_op as glu_op
    from tpu_kernels.tokamax.normalization.op import layer_norm_op as norm_op

    ref, patched = pair("llama")
    _, exact = pair("llama", buckets=False)
    for model, seqs, want in ((patched, (1, 3, 8), 2), (exact, (1, 3, 8), 3)):
        norm_op.cache_clear()
        glu_op.cache_clear()
        for seq in seqs:
            x = ids(batch=1, seq=seq, seed=seq)
            with torch.no_grad():
                assert (model(x).logits - ref(x).logits).abs().max().item() < 2e-6
        assert (norm_op.cache_info().misses, glu_op.cache_info().misses) == (want, want)
    with torch.no_grad():
        patched(ids(batch=1, seq=9))  # 16 rows
    assert norm_op.cache_info().misses == 4 and glu_op.cache_info().misses == 4  # 3 exact + 16 rows


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_patched_norms_and_mlps_take_every_shape_hf_takes(dtype):
    """The patched RMSNorm and gated MLP against HF's on hidden states of every rank and row
    count the padding treats differently: a 1-D vector (nn.Linear takes one), one row as
    [1, C] and [1, 1, C] (run as they are), a few rows (padded to 8), a bucket exactly."""
    ref, patched = pair("llama", dtype)
    c = ref.config.hidden_size
    tol = 2e-6 if dtype == torch.float32 else 2e-2
    for shape in [(c,), (1, c), (1, 1, c), (3, c), (2, 1, c), (2, 4, c)]:
        x = torch.randn(shape, generator=torch.Generator().manual_seed(len(shape))).to(dtype)
        for name in ("input_layernorm", "mlp"):
            want = getattr(ref.model.layers[0], name)(x)
            got = getattr(patched.model.layers[0], name)(x)
            assert got.shape == want.shape and got.dtype == want.dtype, (shape, name)
            assert (got.float() - want.float()).abs().max().item() < tol, (shape, name)


def test_the_lm_head_loss_step_copies_no_weight():
    """The fused loss on the LM head's [vocab, hidden] weight as stored: a forward and backward
    allocates nothing weight-sized in torch (tests/tokamax/test_weight_layout.py checks XLA's
    side); before, passing lm_head.weight.T copied it in the forward, the backward and back."""
    from tests.tokamax.test_weight_layout import torch_allocations

    torch.manual_seed(0)
    vocab, hidden = 2048, 256
    w = torch.nn.Parameter(torch.randn(vocab, hidden) * hidden**-0.5)
    h = torch.randn(2, 8, hidden, requires_grad=True)
    labels = torch.randint(0, vocab, (2, 8))

    def step():
        w.grad = h.grad = None
        causal_lm_loss(h, w, labels).backward()

    step()
    allocs = torch_allocations(step)
    weight_bytes = w.numel() * w.element_size()
    print(f"LM-head loss step: {sum(allocs)} bytes allocated by torch, one weight {weight_bytes} bytes")
    assert [a for a in allocs if a >= weight_bytes] == [] and sum(allocs) < weight_bytes
    assert w.grad.shape == (vocab, hidden)


def test_bucket_sizes():
    assert [bucket(n) for n in (1, 64, 65, 128, 129, 1024, 1025, 3000)] == [
        64,
        64,
        128,
        128,
        256,
        1024,
        2048,
        3072,
    ]


def test_compile_fullgraph_no_breaks():
    from torch._dynamo.utils import counters

    ref, patched = pair("llama")
    x = ids()
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(patched, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        out = compiled(x, labels=x)
        want = ref(x, labels=x)
    assert sum(counters["graph_break"].values()) == 0
    assert (out.logits - want.logits).abs().max().item() < 2e-6
    torch._dynamo.reset()


@pytest.mark.slow  # Inductor: 117 s here (load 6), the forward and the training graph
def test_inductor_fullgraph_forward_and_training_step():
    from torch._dynamo.utils import counters

    ref, patched = pair("llama")
    x = ids()
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(patched, fullgraph=True)
    with torch.no_grad():
        assert (compiled(x).logits - ref(x).logits).abs().max().item() < 2e-6
    ref.train(), patched.train()
    loss, want = compiled(x, labels=x).loss, ref(x, labels=x).loss
    loss.backward(), want.backward()
    assert sum(counters["graph_break"].values()) == 0
    assert abs(loss.item() - want.item()) < 2e-6
    for (name, p), q in zip(ref.named_parameters(), patched.parameters()):
        assert (p.grad - q.grad).abs().max().item() < 1e-5, name
    torch._dynamo.reset()


def test_deepcopy_save_and_reload(tmp_path):
    ref, patched = pair("qwen3")
    x = ids()
    with torch.no_grad():
        want = patched(x).logits
        assert torch.equal(copy.deepcopy(patched)(x).logits, want)
        torch.save(patched, tmp_path / "whole.pt")
        assert torch.equal(torch.load(tmp_path / "whole.pt", weights_only=False)(x).logits, want)
        patched.save_pretrained(tmp_path / "hf")
        # The patch is module code, not weights: from_pretrained builds HF's modules again
        # (the docs say to re-apply, or to patch the classes before loading).
        loaded = type(patched).from_pretrained(tmp_path / "hf")
        assert loaded.config._attn_implementation != "tpu_kernels"
        apply_tpu_kernels(loaded)
        assert torch.equal(loaded.eval()(x).logits, want)


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_class_patch_before_loading(tmp_path, family):
    ref = tiny(family)
    ref.save_pretrained(tmp_path)
    norm_cls, mlp_cls, lm_cls = FAMILIES[family].classes()
    apply_tpu_kernels_to(family)
    try:
        model = lm_cls.from_pretrained(tmp_path, attn_implementation="tpu_kernels")
        assert model.config._attn_implementation == "tpu_kernels"
        for cls in (norm_cls, mlp_cls, lm_cls):
            assert cls.forward.__module__.startswith("tpu_kernels."), cls
        x = ids()
        with torch.no_grad():
            a, b = ref(x, labels=x), model.eval()(x, labels=x)
        assert (a.logits - b.logits).abs().max().item() < 2e-6
        assert abs(a.loss.item() - b.loss.item()) < 2e-6
        # apply_tpu_kernels on a model of a patched class swaps nothing twice
        assert apply_tpu_kernels(model, attention=False) == {
            "rms_norm": 0,
            "mlp": 0,
            "loss": 0,
            "attention": 0,
        }
    finally:
        remove_tpu_kernels_from(family)
    for cls in (norm_cls, mlp_cls, lm_cls):
        assert cls.forward.__module__.startswith("transformers."), cls
    assert "_tpu_kernels_family" not in mlp_cls.__dict__


def test_loss_matches_hf_with_ignore_index_and_num_items():
    from transformers.loss.loss_utils import ForCausalLMLoss

    torch.manual_seed(0)
    h = torch.randn(2, 6, 16, requires_grad=True)
    w = torch.randn(VOCAB, 16, requires_grad=True)
    labels = torch.randint(0, VOCAB, (2, 6))
    labels[0, :2] = -100
    for kw in ({}, {"num_items_in_batch": torch.tensor(7)}):
        want = ForCausalLMLoss(h @ w.T, labels, VOCAB, **kw)
        got = causal_lm_loss(h, w, labels, **kw)
        assert torch.allclose(got, want, rtol=1e-6, atol=1e-6)
        gw, gh = torch.autograd.grad(want, (w, h))
        hw, hh = torch.autograd.grad(got, (w, h))
        assert torch.allclose(hw, gw, atol=1e-6) and torch.allclose(hh, gh, atol=1e-6)
    assert labels[0, 0] == -100  # the caller's labels are untouched


@pytest.mark.parametrize("pad", [True, False], ids=["buckets", "unpadded"])
@pytest.mark.parametrize(
    "q_len, kv_len",
    [(1, 9), (1, 70), (6, 6), (3, 7)],
    ids=["decode", "decode-long", "prefill", "prefill-cached"],
)
def test_attention_without_a_mask_means_what_sdpa_means(q_len, kv_len, pad):
    """HF passes attention_mask=None where its sdpa path relies on is_causal (the registered
    mask function always builds one, so a model never reaches this; a caller of the
    attention function can): causal for a prefill, every key for a decode step's one
    query. Against HF's own sdpa_attention_forward, grouped-query heads as HF gives them."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from tpu_kernels.integrations.transformers.attention import attention_forward

    module = torch.nn.Module()
    module.is_causal, module.num_key_value_groups = True, 2
    module.eval()
    q = torch.randn(2, 4, q_len, 16, dtype=torch.float64)
    k, v = (torch.randn(2, 2, kv_len, 16, dtype=torch.float64) for _ in range(2))
    want, _ = sdpa_attention_forward(module, q, k, v, None, scaling=0.25)
    got, _ = attention_forward(module, q, k, v, None, scaling=0.25, pad=pad)
    assert got.shape == want.shape == (2, q_len, 4, 16)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("pad", [True, False], ids=["buckets", "unpadded"])
@pytest.mark.parametrize("q_len, kv_len", [(1, 9), (6, 6), (5, 70)], ids=["decode", "prefill", "long"])
def test_attention_with_an_additive_float_mask_or_is_causal_false_means_what_sdpa_means(q_len, kv_len, pad):
    """A float mask (a user's mask function) is added to the scores; the bucket's padded keys
    get the dtype's lowest value there, never 0 (which would attend them). is_causal=False
    from the caller (an encoder's call) wins over the module's own flag."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from tpu_kernels.integrations.transformers.attention import attention_forward

    module = torch.nn.Module()
    module.is_causal, module.num_key_value_groups = True, 2
    module.eval()
    q = torch.randn(2, 4, q_len, 16, dtype=torch.float64)
    k, v = (torch.randn(2, 2, kv_len, 16, dtype=torch.float64) for _ in range(2))
    bias = torch.randn(2, 1, q_len, kv_len, dtype=torch.float64)
    bias[..., : kv_len // 3] = torch.finfo(torch.float64).min  # some keys masked out
    for mask, kwargs in ((bias, {}), (None, {"is_causal": False})):
        want, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.25, **kwargs)
        got, _ = attention_forward(module, q, k, v, mask, scaling=0.25, pad=pad, **kwargs)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_bad_input_errors():
    with pytest.raises(ValueError, match=r"labels must be in \[0, 128\) or -100"):
        causal_lm_loss(torch.randn(1, 3, 16), torch.randn(VOCAB, 16), torch.tensor([[1, 500, 2]]))
    with pytest.raises(ValueError, match="no model family 'mistral'"):
        apply_tpu_kernels_to("mistral")
    bert = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    with pytest.raises(ValueError, match="model_type='bert' is not a supported family"):
        apply_tpu_kernels(transformers.BertModel(bert))
    _, patched = pair("llama")
    patched.train()
    patched.config.attention_dropout = 0.1
    for layer in patched.model.layers:
        layer.self_attn.attention_dropout = 0.1
    with pytest.raises(NotImplementedError, match="dropout=0.1, but Tokamax's attention has no dropout"):
        patched(ids())


def test_import_tpu_kernels_imports_no_integrated_library():
    """At run time (tests/test_layers.py scans the imports): neither transformers nor torchtitan."""
    code = (
        "import sys, tpu_kernels, tpu_kernels.tokamax, tpu_kernels.kernels\n"
        "print('transformers' in sys.modules, 'torchtitan' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_mlp_with_an_activation_the_op_lacks_stays_hf():
    config = transformers.LlamaConfig(**COMMON, hidden_act="gelu_new")  # a tanh GELU in Python
    torch.manual_seed(0)
    ref = transformers.LlamaForCausalLM(config).eval()
    patched = copy.deepcopy(ref)
    assert apply_tpu_kernels(patched)["mlp"] == 0
    x = ids()
    with torch.no_grad():
        assert (ref(x).logits - patched(x).logits).abs().max().item() < 2e-6


def test_labels_with_a_cache_and_return_dict_false():
    """The fused-loss forward returns HF's fields: the cache comes back (and is reused), and
    return_dict=False gives HF's tuple (loss, logits, cache)."""
    ref, patched = pair("llama")
    x = ids()
    with torch.no_grad():
        a, b = ref(x, labels=x, use_cache=True), patched(x, labels=x, use_cache=True)
        assert b.cache is not None and b.cache.get_seq_length() == x.shape[1]
        nxt = ids(seq=1, seed=5)
        a2 = ref(nxt, cache=a.cache, labels=nxt)
        b2 = patched(nxt, cache=b.cache, labels=nxt)
        assert (a2.logits - b2.logits).abs().max().item() < 2e-6
        t = patched(x, labels=x, return_dict=False)
    assert isinstance(t, tuple) and abs(t[0].item() - a.loss.item()) < 2e-6
    assert torch.equal(t[1], b.logits)


# The families apply_tpu_kernels does not list; their refusal's recipe is run as written, in a
# fresh process (where nothing has registered the attention yet), against HF's sdpa.
OTHER_FAMILIES = {
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": 4}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {}),
    "qwen2_moe": (
        "Qwen2MoeConfig",
        "Qwen2MoeForCausalLM",
        {
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 64,
        },
    ),
}
_RECIPE_SCRIPT = """
import copy, os, sys, textwrap
os.environ["HF_HUB_OFFLINE"] = "1"
import torch, transformers
from tpu_kernels.integrations.transformers import apply_tpu_kernels, apply_tpu_kernels_to

common, families = eval(sys.argv[1]), eval(sys.argv[2])
for name, (config_name, model_name, extra) in families.items():
    config = getattr(transformers, config_name)(**common, **extra)
    torch.manual_seed(0)
    hf = getattr(transformers, model_name)(config).eval()
    hf.set_attn_implementation("sdpa")
    model = copy.deepcopy(hf)
    for refuse in (lambda: apply_tpu_kernels(model), lambda: apply_tpu_kernels_to(config.model_type)):
        try:
            refuse()
            raise SystemExit(f"{name}: not refused")
        except ValueError as e:
            message = str(e)
        recipe = textwrap.dedent("\\n".join(ln for ln in message.splitlines() if ln.startswith("    ")))
        assert "register()" in recipe, message
    exec(recipe, {"model": model})  # the message's lines, as a user would paste them
    ids = torch.randint(3, 128, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        diff = (model(ids).logits - hf(ids).logits).abs().max().item()
    print(name, model.config._attn_implementation, diff)
"""


def test_the_refusal_for_another_family_is_a_recipe_that_works():
    out = subprocess.run(
        [sys.executable, "-c", _RECIPE_SCRIPT, repr(COMMON), repr(OTHER_FAMILIES)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    lines = [ln.split() for ln in out.stdout.splitlines()]
    assert [ln[:2] for ln in lines] == [[name, "tpu_kernels"] for name in OTHER_FAMILIES], out.stdout
    # float32: measured 1.5e-7-1.6e-7 (Mistral's sliding window of 4 < the 12 tokens: its mask matters)
    assert all(float(ln[2]) < 2e-6 for ln in lines), out.stdout
