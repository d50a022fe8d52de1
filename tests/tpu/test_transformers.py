"""The Hugging Face patch (`apply_tpu_kernels`) on TPU tensors: a tiny randomly initialised
Llama (2 layers, hidden 128, 4 heads, 2 key/value heads, vocabulary 256), patched and unpatched
with the same weights, both on the chip: logits and loss in float32 and bf16, and greedy
`generate` in float32. Mirrors tests/integrations/test_transformers.py (its `tiny`, `pair`,
`test_float32_logits_and_loss_match`, `test_bfloat16_logits_close`,
`test_greedy_generate_identical`); nothing is downloaded (HF_HUB_OFFLINE=1).

The patch runs Tokamax's ops (`tpu_kernels.tokamax`), so besides transformers>=5 it needs the
tokamax package, which needs Python >= 3.12 and JAX >= 0.11.1: where either is missing every
test here skips, the reason naming what is missing and the versions found.
"""

from __future__ import annotations

import copy
import importlib.metadata
import importlib.util
import os
import platform

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # as the CPU suite's test: never download

MIN_TRANSFORMERS = 5
MIN_TOKAMAX = "0.0.17"  # tpu_kernels/tokamax/__init__.py: needs Python >= 3.12 and JAX >= 0.11.1


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def missing() -> str | None:
    """What the patch needs that this environment lacks, with the versions found; None if nothing."""
    needs = []
    found = _version("transformers")
    if found is None:
        needs.append(
            f"transformers>={MIN_TRANSFORMERS} (not installed: pip install 'tpu-kernels[transformers]')"
        )
    elif int(found.split(".")[0]) < MIN_TRANSFORMERS:
        needs.append(f"transformers>={MIN_TRANSFORMERS} (installed: {found})")
    if importlib.util.find_spec("tokamax") is None:
        needs.append(
            f"tokamax>={MIN_TOKAMAX} (not installed; it needs Python >= 3.12 and JAX >= 0.11.1, "
            f"here Python {platform.python_version()} and JAX {_version('jax') or 'none'})"
        )
    return "the Hugging Face patch needs " + "; ".join(needs) if needs else None


MISSING = missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")

VOCAB = 256
CONFIG = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    vocab_size=VOCAB,
    max_position_embeddings=256,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
# Bounds against the unpatched model on the chip. float32: the CPU suite measures 1.8e-7-3.3e-7
# (logits) and <= 4.8e-7 (loss) and bounds both by 2e-6; on the chip the unpatched model runs
# torch_tpu's XLA ops and the patched one Tokamax's Mosaic kernels, both at "highest", and
# the bound is 50x the CPU's until the record holds the chip's figure (`figures`). bf16: the
# CPU suite's bounds (one or two bf16 ulps of logits up to 1.4; see its test).
BOUND = {torch.float32: {"logits": 1e-4, "loss": 1e-4}, torch.bfloat16: {"logits": 0.03, "loss": 0.02}}


@pytest.fixture(autouse=True)
def _highest():
    """float32 products at full precision on both models (torch_tpu's default is one bf16 pass)."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(before)


def tiny_llama(dtype: torch.dtype, seed: int = 0):
    import transformers

    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).to(dtype).eval()
    with torch.no_grad():  # norms start at weight 1: make them matter
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


def pair(dtype: torch.dtype, device: torch.device):
    """The unpatched model (sdpa attention) and a patched copy with the same weights, on `device`."""
    from tpu_kernels.integrations.transformers import apply_tpu_kernels

    ref = tiny_llama(dtype)
    ref.set_attn_implementation("sdpa")
    patched = copy.deepcopy(ref)
    swapped = apply_tpu_kernels(patched)
    assert swapped == {"rms_norm": 5, "mlp": 2, "loss": 1, "attention": 1}, swapped
    return ref.to(device), patched.to(device)


def ids(batch: int = 2, seq: int = 12, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, seq), generator=g)


def logits_and_loss(dtype: torch.dtype, device: torch.device) -> dict[str, float]:
    ref, patched = pair(dtype, device)
    x = ids().to(device)
    with torch.no_grad():
        a, b = ref(x, labels=x), patched(x, labels=x)
    assert b.logits.device.type == device.type and b.logits.dtype == dtype, (b.logits.device, b.logits.dtype)
    la, lb = a.logits.float().cpu(), b.logits.float().cpu()
    return {
        "logits": (la - lb).abs().max().item(),
        "logits_max": la.abs().max().item(),
        "loss": abs(a.loss.item() - b.loss.item()),
        "argmax_agree": (la.argmax(-1) == lb.argmax(-1)).float().mean().item(),
    }


def greedy_tokens(device: torch.device, new_tokens: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    ref, patched = pair(torch.float32, device)
    x = ids(batch=1, seq=8).to(device)
    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        return ref.generate(x, **kw).cpu(), patched.generate(x, **kw).cpu()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_patched_llama_logits_and_loss_match_the_unpatched_model(dtype, tpu, figures):
    errs = logits_and_loss(dtype, tpu)
    figures.update(errs)
    bound = BOUND[dtype]
    assert errs["logits"] <= bound["logits"], (dtype, errs)
    assert errs["loss"] <= bound["loss"], (dtype, errs)
    assert errs["argmax_agree"] > 0.9, (dtype, errs)


def test_patched_llama_greedy_generate_matches_the_unpatched_model(tpu, figures):
    want, got = greedy_tokens(tpu)
    figures.update(unpatched=want.tolist(), patched=got.tolist())
    assert got.shape == want.shape == (1, 16), (want.shape, got.shape)
    assert torch.equal(got, want), f"greedy tokens differ: unpatched {want.tolist()}, patched {got.tolist()}"
