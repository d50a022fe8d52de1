"""apply_tpu_kernels(model, loss="shipped"): a Hugging Face causal LM's loss on the shipped
linear_cross_entropy (no Tokamax, no [tokens, vocabulary] logits), against HF's own loss with
the same weights: the loss and every weight's gradient of a training step, with ignored
labels, gradient accumulation's `num_items_in_batch`, and Gemma 2's final soft-capping."""

from __future__ import annotations

import copy
import os

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
transformers = pytest.importorskip("transformers")
import torch  # noqa: E402

from tests.integrations.test_transformers_shipped_attention import COMMON, tiny  # noqa: E402
from tpu_kernels.integrations.transformers import (  # noqa: E402
    apply_tpu_kernels,
    apply_tpu_kernels_to,
    remove_tpu_kernels_from,
)


def _gemma2():
    config = transformers.Gemma2Config(
        **{k: v for k, v in COMMON.items()}, final_logit_softcapping=3.0, attn_logit_softcapping=None
    )
    torch.manual_seed(0)
    model = transformers.Gemma2ForCausalLM(config).eval()
    model.set_attn_implementation("eager")
    return model


def _batch(vocab: int, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (2, 12), generator=gen)
    labels = ids.clone()
    labels[0, :3] = -100  # a prompt left out of the loss
    return ids, labels


def _step(model, ids, labels, **kwargs):
    model.zero_grad()
    out = model(input_ids=ids, labels=labels, **kwargs)
    out.loss.backward()
    return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", ["llama", "qwen2", "gemma2"])
@pytest.mark.parametrize("num_items", [None, 13])
def test_a_training_steps_loss_and_gradients_match_hf(name, num_items, monkeypatch):
    ref = _gemma2() if name == "gemma2" else tiny(name)
    ours = copy.deepcopy(ref)
    swapped = apply_tpu_kernels(ours, rms_norm=False, mlp=False, attention=False, loss="shipped")
    assert swapped["loss"] == 1
    calls = []
    import tpu_kernels.kernels as kernels

    real = kernels.linear_cross_entropy
    monkeypatch.setattr(kernels, "linear_cross_entropy", lambda *a, **k: calls.append(k) or real(*a, **k))
    ref.train()
    ours.train()
    ids, labels = _batch(ref.config.vocab_size)
    kwargs = {} if num_items is None else {"num_items_in_batch": torch.tensor(num_items)}
    want, want_grads = _step(ref, ids, labels, **kwargs)
    got, got_grads = _step(ours, ids, labels, **kwargs)
    assert calls and calls[0]["softcap"] == (3.0 if name == "gemma2" else None)
    assert got.logits is None  # training: the logits are never made
    assert got.loss.dtype == torch.float32
    torch.testing.assert_close(got.loss, want.loss, rtol=1e-5, atol=1e-6)
    assert got_grads.keys() == want_grads.keys()
    for n, g in want_grads.items():
        torch.testing.assert_close(got_grads[n], g, rtol=1e-4, atol=1e-6, msg=n)


def test_eval_mode_also_returns_the_logits():
    ref = tiny("llama")
    ours = copy.deepcopy(ref)
    apply_tpu_kernels(ours, rms_norm=False, mlp=False, attention=False, loss="shipped")
    ids, labels = _batch(ref.config.vocab_size)
    with torch.no_grad():
        want, got = ref(input_ids=ids, labels=labels), ours(input_ids=ids, labels=labels)
    torch.testing.assert_close(got.logits, want.logits)
    torch.testing.assert_close(got.loss, want.loss, rtol=1e-5, atol=1e-6)


def test_a_bad_loss_choice_is_refused_before_anything_is_swapped():
    model = tiny("llama")
    with pytest.raises(ValueError, match="loss must be True, False or 'shipped', got 'fused'"):
        apply_tpu_kernels(model, rms_norm=False, mlp=False, attention=False, loss="fused")
    assert "forward" not in vars(model)


def test_the_class_patch_takes_the_shipped_loss_and_undoes_it():
    """apply_tpu_kernels_to(name, loss="shipped"): models of the family, built before or after,
    compute the loss on the shipped op, as HF's; remove_tpu_kernels_from restores HF's forward."""
    import tpu_kernels.kernels as kernels

    model = tiny("llama").train()
    ids, labels = _batch(model.config.vocab_size)
    want, want_grads = _step(model, ids, labels)
    calls = []
    real = kernels.linear_cross_entropy
    kernels.linear_cross_entropy = lambda *a, **k: calls.append(k) or real(*a, **k)
    try:
        apply_tpu_kernels_to("llama", rms_norm=False, mlp=False, attention=False, loss="shipped")
        try:
            got, got_grads = _step(model, ids, labels)
        finally:
            remove_tpu_kernels_from("llama")
        again, _ = _step(model, ids, labels)
    finally:
        kernels.linear_cross_entropy = real
    assert len(calls) == 1 and got.logits is None and again.logits is not None
    assert "_tpu_kernels_loss" not in vars(type(model))
    torch.testing.assert_close(got.loss, want.loss, rtol=1e-5, atol=1e-6)
    for n, g in want_grads.items():
        torch.testing.assert_close(got_grads[n], g, rtol=1e-4, atol=1e-6, msg=n)
    with pytest.raises(ValueError, match="loss must be True, False or 'shipped', got 'fused'"):
        apply_tpu_kernels_to("llama", loss="fused")


def test_applying_again_with_tokamaxs_loss_drops_the_shipped_mark():
    """A model patched with loss="shipped" and then with loss=True computes Tokamax's loss, as
    the second call asked: the instance's mark follows the latest call."""
    pytest.importorskip("tokamax")
    model = tiny("llama")
    apply_tpu_kernels(model, rms_norm=False, mlp=False, attention=False, loss="shipped")
    assert model._tpu_kernels_loss == "shipped"
    apply_tpu_kernels(model, rms_norm=False, mlp=False, attention=False, loss=True)
    assert "_tpu_kernels_loss" not in vars(model)
